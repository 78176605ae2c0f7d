"""Deprecated: the old home of the watching code, kept for one release so that
``from ioprobe.watch.gather import gather`` still works (with a FutureWarning). The
code is now in ``ioprobe.loaders`` (one module per framework, and ``gather``) and
``ioprobe.monitor`` (what every framework shares).

Importing a submodule of a package binds the package's name in its parent, so once this
package is imported ``ioprobe.watch`` is this package, not the function of that name. The
package is therefore callable, and calling it calls ``ioprobe.watch`` the function: code that
imports the old path keeps working, whatever it imported first.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallsTheFunction(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ioprobe import _watch

        return _watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallsTheFunction

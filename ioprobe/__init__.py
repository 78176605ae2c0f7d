"""ioprobe: why is my GPU waiting, and what would stop it?

The core package never imports torch or DALI at module level; the adapters in
``ioprobe.loaders`` import them when they are used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ioprobe")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

from ioprobe.collect import nvtx as _nvtx
from ioprobe.record import RunRecord
from ioprobe.watcher import to_device, watch

# before any DALI pipeline exists: NVTX reads the variable at a library's first range
_nvtx.arm()

__all__ = ["RunRecord", "__version__", "to_device", "watch"]

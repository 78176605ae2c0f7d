"""Where the install put ioprobe's optional C libraries (``csrc/``, built by setup.py).

Each is a plain shared library beside the package, loaded with ctypes by the module that
uses it; an install without a C compiler has none, and those modules fall back.
"""

from __future__ import annotations

from pathlib import Path


def built(stem: str) -> Path | None:
    """The library ``stem`` (``_nvtx_inject``, ``_uring_reads``) beside the package, if the
    install compiled it."""
    here = Path(__file__).resolve().parent.parent
    found = sorted(here.glob(f"{stem}*.so"))
    return found[0] if found else None

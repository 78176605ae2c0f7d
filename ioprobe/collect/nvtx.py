"""Per-range timing from ioprobe's NVTX injection library (``csrc/nvtx_inject.c``).

Libraries built with NVTX v3 (NVIDIA DALI among them) load the library named by
``NVTX_INJECTION64_PATH`` on their first NVTX call. ``arm()`` points that variable at ours, so a
pipeline built afterwards reports DALI's own ranges (``[DALI]...``: its operators, its readers'
fetches; other ranges are passed over, untimed): per name, the calls, wall time, CPU time of
the opening thread, and for DALI operators the pool threads' CPU time while the operator ran.
``totals()`` reads the running totals; a collector diffs two. Arming is asked for, never done
on import: ``ioprobe.time_dali_operators()`` in a user's process, ``ioprobe run`` in its
child's environment, ``probe --loader dali`` before it builds its pipelines.

Nothing here imports DALI. When the library was not built (no C compiler or NVTX headers at
install), or another tool (Nsight Systems) owns the variable, or DALI made its first NVTX call
before the arming, ``status()`` says which, and collectors fall back to per-thread CPU time.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

from ioprobe.collect import native

ENV = "NVTX_INJECTION64_PATH"
DISABLE_ENV = "IOPROBE_NVTX"  # "0": leave NVTX alone


@dataclass(frozen=True)
class RangeTotals:
    """Totals for one range name since the process loaded the library (nanoseconds)."""

    count: int
    wall_ns: int
    cpu_ns: int  # the thread that opened the range
    pool_ns: int  # DALI's pool threads while this operator range was open (operators only)

    def __add__(self, other: RangeTotals) -> RangeTotals:
        return RangeTotals(
            self.count + other.count,
            self.wall_ns + other.wall_ns,
            self.cpu_ns + other.cpu_ns,
            self.pool_ns + other.pool_ns,
        )

    def __sub__(self, other: RangeTotals) -> RangeTotals:
        return RangeTotals(
            self.count - other.count,
            self.wall_ns - other.wall_ns,
            self.cpu_ns - other.cpu_ns,
            self.pool_ns - other.pool_ns,
        )


def library_path() -> Path | None:
    """The built injection library beside the package, if the install compiled it."""
    return native.built("_nvtx_inject")


def _dali_installed() -> bool:
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False


def _ours() -> dict[str, str]:
    """The variable pointing NVTX at our library, unless the user disabled it, another tool
    owns it or the library was not built."""
    if os.environ.get(DISABLE_ENV) == "0" or os.environ.get(ENV):
        return {}
    path = library_path()
    return {ENV: str(path)} if path is not None else {}


def injection_env() -> dict[str, str]:
    """The variable that arms NVTX for a process about to start (``ioprobe run``'s child);
    empty where ``_ours`` gives nothing or DALI is not installed (nothing would use it)."""
    return _ours() if _dali_installed() else {}


def arm() -> str | None:
    """Point NVTX at the injection library for this process and its children; idempotent.
    None when ranges will be captured, otherwise why not (in words for the record)."""
    if not _dali_installed():
        return "NVIDIA DALI cannot be imported here: there are no operators to time"
    os.environ.update(_ours())
    return _unarmed()


_lib: list[ctypes.CDLL] = []  # the loaded library, once found


def _loaded() -> ctypes.CDLL | None:
    if _lib:
        return _lib[0]
    path = library_path()
    if path is None:
        return None
    try:
        # RTLD_NOLOAD: only a handle to the copy NVTX already loaded, never a fresh one
        lib = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    lib.ioprobe_nvtx_name.restype = ctypes.c_char_p
    lib.ioprobe_nvtx_name.argtypes = [ctypes.c_int]
    lib.ioprobe_nvtx_read.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
    lib.ioprobe_nvtx_read.restype = None
    lib.ioprobe_nvtx_settle.restype = ctypes.c_uint64
    lib.ioprobe_nvtx_dropped.restype = ctypes.c_uint64
    _lib.append(lib)
    return lib


def _unarmed() -> str | None:
    """Why this process's NVTX ranges won't reach ioprobe, before any range ran."""
    if os.environ.get(DISABLE_ENV) == "0":
        return f"{DISABLE_ENV}=0: per-operator timing turned off"
    path = library_path()
    if path is None:
        return (
            "the NVTX injection library was not built at install (no C compiler or NVTX "
            "headers): per-operator timing is unavailable"
        )
    owner = os.environ.get(ENV)
    if not owner:
        return (
            "NVTX was not pointed at ioprobe: call ioprobe.time_dali_operators() before "
            "building the pipeline for per-operator timing (ioprobe run does it for you)"
        )
    if Path(owner).resolve() != path:
        return f"{ENV} names another tool ({owner}): per-operator timing is off"
    return None


def status() -> str | None:
    """None when ranges are being captured; otherwise why not, in words for the record."""
    why = _unarmed()
    if why is not None:
        return why
    lib = _loaded()
    if lib is None or lib.ioprobe_nvtx_inits() == 0:
        return (
            "no NVTX range reached ioprobe: DALI made its first NVTX call before "
            "ioprobe.time_dali_operators() was called; call it before building the pipeline "
            "for per-operator timing"
        )
    return None


def totals() -> array[int] | None:
    """Every slot's totals laid flat, four to a slot (count, wall, CPU, pool ns; zeros for a
    slot no name took), or None when nothing is captured. One array holding no Python
    object: read at every epoch's start and end, it adds one object toward the garbage
    collector's next full collection, where a dictionary of RangeTotals added about 250 an
    epoch and moved a full collection of DALI's and torch's 197,000 objects (about 100 ms)
    into a short run. ``named`` turns it into names when a record is made."""
    lib = _loaded()
    if lib is None or lib.ioprobe_nvtx_inits() == 0:
        return None
    lib.ioprobe_nvtx_settle()  # operators still running get their pool share so far
    out = (ctypes.c_uint64 * 4)()
    slots = lib.ioprobe_nvtx_slots()
    flat = array("q", bytes(8 * 4 * slots))
    for i in range(slots):
        if lib.ioprobe_nvtx_name(i) is None:
            continue
        lib.ioprobe_nvtx_read(i, out)
        flat[4 * i : 4 * i + 4] = array("q", out)
    return flat


def named(flat: array[int]) -> dict[str, RangeTotals]:
    """``totals()`` (or a sum or difference of them) by range name: the slots with at least
    one completed call."""
    lib = _loaded()
    out: dict[str, RangeTotals] = {}
    if lib is None:
        return out
    for i in range(len(flat) // 4):
        if flat[4 * i] <= 0:
            continue
        name = lib.ioprobe_nvtx_name(i)
        if name is not None:
            out[name.decode("utf-8", "replace")] = RangeTotals(*flat[4 * i : 4 * i + 4])
    return out


def snapshot() -> dict[str, RangeTotals] | None:
    """Every range name with a completed call so far and its totals, or None when nothing is
    captured."""
    flat = totals()
    return None if flat is None else named(flat)


def diff(after: dict[str, RangeTotals], before: dict[str, RangeTotals]) -> dict[str, RangeTotals]:
    """What ran between two snapshots: names with at least one completed call."""
    zero = RangeTotals(0, 0, 0, 0)
    out = {}
    for name, t in after.items():
        d = t - before.get(name, zero)
        if d.count > 0:
            out[name] = d
    return out

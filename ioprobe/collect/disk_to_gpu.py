"""The disk-to-GPU path: storage read into pinned buffers, each copied to the device while
the next one fills, timed end to end.

The storage and pcie stages are measured apart; a loader that reads into pinned memory and
copies to the GPU runs them back to back on the same bytes, and the path's rate says whether
the two overlap as the model assumes. Reads go into page-locked host buffers (``preadv``
straight into them: no extra host copy), small files packed into one buffer as a loader
batches them, files above the buffer size read in buffer-sized pieces. While buffer k is on
its way to the device, buffer k+1 is read; before a buffer is filled again the host waits for
its copy. With two buffers the path runs at the slower of read and copy when both keep up,
and at their sum when nothing overlaps.

Where ``kvikio`` is importable the same files are also read with cuFile straight into device
memory, and the record says whether that ran as GPUDirect Storage or in compatibility mode
(through a host bounce buffer, which is what it does without the GDS driver).

CUDA goes through ``collect.cuda_copy.Copier``; the user's files are only ever opened for
reading.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from ioprobe import units
from ioprobe.capacity import single_thread_rate
from ioprobe.collect.cuda_copy import Copier
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.storage import (
    READ_FLAGS,
    RESIDENCY_SAMPLE,
    Item,
    evict,
    plan_items,
    resident_fraction,
    select_entries,
)
from ioprobe.record import DiskToGpu, StorageStage

BUFFER = 8 << 20
BUFFERS = 2
MAX_BYTES = 2 << 30
MAX_SECONDS = 10.0  # the path is a cross-check of two measured stages, not a third sweep
COLD_RESIDENT = 0.05  # at most this share still cached after eviction counts as cold
CUFILE_SHARE = 0.3  # of the path's budget, for the cuFile read where kvikio is installed
COMPAT = "compatibility mode: no GPUDirect Storage, reads bounce through host memory"


def method_label(buffers: int, buffer_bytes: int) -> str:
    """How the path ran, e.g. "pinned double buffer, 2 x 8 MiB"."""
    kind = {2: "double", 3: "triple"}.get(buffers, f"{buffers}-way")
    return f"pinned {kind} buffer, {buffers} x {units.memory(buffer_bytes)}"


def _read_into(view: memoryview, item: Item) -> int:
    """Read one item into ``view`` (at most its length); the bytes read. A file that vanished
    or shrank since it was listed gives what is left of it, not an error: the path measures
    the link, and the storage pass already counts read errors."""
    path, offset, length = item
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError:
        return 0
    try:
        got = 0
        while got < length:
            n = os.preadv(fd, [view[got:length]], offset + got)
            if n <= 0:
                break
            got += n
        return got
    except OSError:
        return got
    finally:
        os.close(fd)


def _fill(view: memoryview, items: Sequence[Item], start: int, done: set[str]) -> tuple[int, int]:
    """Pack items from ``start`` into ``view`` back to back until the next one does not fit;
    returns (bytes in the buffer, index of the first item left) and adds the files that
    delivered bytes to ``done``."""
    used, i = 0, start
    while i < len(items) and used + items[i][2] <= len(view):
        got = _read_into(view[used : used + items[i][2]], items[i])
        if got:
            done.add(items[i][0])
        used += got
        i += 1
    return used, i


def _make_cold(paths: Sequence[str], seed: int = 0) -> str:
    """Evict the files from the page cache and say what the cache is now: "cold" when a
    ``mincore`` check of (a sample of) them finds at most ``COLD_RESIDENT`` still resident,
    else "warm" (tmpfs, or pages the kernel would not drop)."""
    evict(paths)
    check = (
        list(paths)
        if len(paths) <= RESIDENCY_SAMPLE
        else random.Random(seed).sample(list(paths), RESIDENCY_SAMPLE)
    )
    left = resident_fraction(check)
    return "cold" if left is not None and left <= COLD_RESIDENT else "warm"


class _Ring:
    """Pinned host buffers used in turn, each with a device buffer and the copy from it that
    may still be in flight; a buffer is refilled only once its last copy is done."""

    def __init__(self, copier: Copier, buffer_bytes: int, buffers: int) -> None:
        self.copier = copier
        self.hosts = [copier.host(buffer_bytes, True) for _ in range(buffers)]
        self.views = [copier.view(h) for h in self.hosts]
        self.devices = [copier.device(buffer_bytes) for _ in range(buffers)]
        self.pending: list[Any] = [None] * buffers
        self.k = 0  # the buffer filled next
        self.copy_s = 0.0  # device time of the copies waited for

    def next_free(self) -> memoryview:
        """The next buffer's bytes, after its last copy has finished."""
        k = self.k
        if self.pending[k] is not None:
            self.copy_s += self.copier.wait(self.pending[k])
            self.pending[k] = None
        return self.views[k]

    def send(self, nbytes: int) -> None:
        """Start copying the first ``nbytes`` of the buffer just filled; move to the next."""
        k = self.k
        self.pending[k] = self.copier.start(self.hosts[k], self.devices[k], nbytes, "h2d", 1)
        self.k = (k + 1) % len(self.pending)

    def drain(self) -> None:
        for p in self.pending:
            if p is not None:
                self.copy_s += self.copier.wait(p)


def _stream(
    ring: _Ring,
    items: Sequence[Item],
    max_bytes: int,
    deadline: float,
    progress: Callable[[int], None],
) -> tuple[int, float, set[str]]:
    """Fill buffers from ``items`` and send each to the device until the items or
    ``max_bytes`` run out or ``deadline`` (perf_counter) passes; (bytes sent, seconds spent
    reading, files that gave bytes)."""
    total, read_s = 0, 0.0
    done: set[str] = set()
    i = 0
    while i < len(items) and total < max_bytes and time.perf_counter() < deadline:
        view = ring.next_free()
        t0 = time.perf_counter()
        first = i
        used, i = _fill(view, items, i, done)
        read_s += time.perf_counter() - t0
        if i == first:
            break  # an item larger than a buffer: plan_items with another chunk size
        if used:
            ring.send(used)
            total += used
        progress(total)
    return total, read_s, done


def measure_path(
    copier: Copier,
    entries: Sequence[FileEntry],
    budget_s: float,
    cold: bool,
    buffer_bytes: int = BUFFER,
    buffers: int = BUFFERS,
    max_bytes: int = MAX_BYTES,
    reporter: Reporter | None = None,
) -> DiskToGpu:
    """Read ``entries`` (local files) to the device through ``buffers`` pinned buffers.

    Stops at ``budget_s`` (eviction included) or ``max_bytes``; ``cold`` evicts the files
    from the page cache first and ``cache`` says whether that worked. The end-to-end time
    runs from the first read's start to the last copy's end on the host clock.
    """
    rep = reporter or SilentReporter()
    deadline = time.perf_counter() + budget_s
    items = plan_items(entries, buffer_bytes)
    if not items:
        return DiskToGpu(method="not measured: nothing to read")
    cache = _make_cold(sorted({it[0] for it in items})) if cold else "warm"
    ring = _Ring(copier, buffer_bytes, buffers)
    start = time.perf_counter()

    def progress(total: int) -> None:
        elapsed = time.perf_counter() - start
        rep.update(min(total / max_bytes, elapsed / max(budget_s, 1e-9)))

    total, read_s, done = _stream(ring, items, max_bytes, deadline, progress)
    ring.drain()
    seconds = time.perf_counter() - start
    return DiskToGpu(
        bytes_per_s=total / seconds if seconds > 0 and total else None,
        files=len(done),
        bytes=total,
        seconds=seconds,
        read_seconds=read_s,
        copy_seconds=ring.copy_s,
        buffer_bytes=buffer_bytes,
        method=method_label(buffers, buffer_bytes),
        cache=cache,
    )


# --------------------------------------------------------------------------- cuFile


def cufile_read(kvikio: Any, path: str, device: Any, length: int, offset: int) -> int:
    """One cuFile read of ``length`` bytes at ``offset`` into the start of ``device`` (the
    copier's device buffer: a torch or CuPy array, which kvikio takes through
    ``__cuda_array_interface__``); the bytes read, once they are there."""
    with kvikio.CuFile(path, "r") as f:
        return int(f.pread(device[:length], length, offset).get())


def _setting(module: Any, name: str) -> Any:
    """A kvikio setting by the API of either generation: ``module.name()`` (up to 25.02),
    ``module.get("name")`` (from 25.04)."""
    fn = getattr(module, name, None)
    return fn() if callable(fn) else module.get(name)


def _compat_mode(kvikio: Any) -> bool | None:
    """Whether kvikio reads with POSIX calls and a host bounce buffer (True), through cuFile
    (False), or cannot say (None).

    ``compat_mode`` was a bool, then a ``CompatMode`` of OFF, ON or AUTO; AUTO is a true
    value but means "cuFile where it opens", so the resolved ``is_compat_mode_preferred``
    is asked first where it exists.
    """
    defaults = getattr(kvikio, "defaults", None) or importlib.import_module("kvikio.defaults")
    preferred = getattr(defaults, "is_compat_mode_preferred", None)
    if callable(preferred):
        return bool(preferred())
    mode = _setting(defaults, "compat_mode")
    name = getattr(mode, "name", None)
    if name is not None:
        return {"ON": True, "OFF": False}.get(str(name))
    if isinstance(mode, bool) or mode in (0, 1):
        return bool(mode)
    return None


def _gds_driver(kvikio: Any) -> bool | None:
    """Whether the nvidia-fs (GDS) kernel driver is loaded, as cuFile reports it; None when
    this kvikio cannot say. Without it cuFile runs in a compatibility mode of its own."""
    try:
        driver = getattr(kvikio, "cufile_driver", None) or importlib.import_module(
            "kvikio.cufile_driver"
        )
        props = getattr(driver, "properties", None)
        if props is not None and hasattr(props, "is_gds_available"):
            return bool(props.is_gds_available)
        return bool(driver.get("is_gds_available"))
    except Exception:  # an older kvikio, or libcufile that will not load: unknown
        return None


def cufile_mode(kvikio: Any) -> str:
    """What cuFile reads through kvikio will really do, in words: kvikio's compatibility
    mode, then whether cuFile has the nvidia-fs driver to read without a host bounce."""
    version = getattr(kvikio, "__version__", "?")
    compat = _compat_mode(kvikio)
    if compat:
        return f"kvikio {version}, {COMPAT}"
    if compat is None:
        return (
            f"kvikio {version}, compatibility mode AUTO or unknown: GPUDirect Storage where "
            "cuFile opens the file, else reads bounce through host memory"
        )
    gds = _gds_driver(kvikio)
    if gds is False:
        return (
            f"kvikio {version}, cuFile without the nvidia-fs driver (cuFile's own "
            "compatibility mode): no GPUDirect Storage, reads bounce through host memory"
        )
    if gds is None:
        return f"kvikio {version}, cuFile (whether the nvidia-fs driver is loaded is unknown)"
    return f"kvikio {version}, GPUDirect Storage"


def _import_kvikio() -> tuple[Any, str | None]:
    """kvikio, or None and why not."""
    try:
        if importlib.util.find_spec("kvikio") is None:
            return None, "kvikio not installed"
        return importlib.import_module("kvikio"), None
    except Exception as exc:  # a missing libcufile or CUDA runtime surfaces here
        return None, f"kvikio did not import: {type(exc).__name__}: {exc}"


def _cufile_rate(kvikio: Any, device: Any, items: Sequence[Item], budget_s: float) -> float | None:
    """Bytes/s of cuFile reads of ``items`` in order, for at most ``budget_s`` or
    ``MAX_BYTES``; None when nothing was read."""
    total, start = 0, time.perf_counter()
    for path, offset, length in items:
        if time.perf_counter() > start + budget_s or total >= MAX_BYTES:
            break
        total += cufile_read(kvikio, path, device, length, offset)
    seconds = time.perf_counter() - start
    return total / seconds if seconds > 0 and total else None


def kvikio_read(
    copier: Copier,
    entries: Sequence[FileEntry],
    budget_s: float,
    cold: bool = False,
    kvikio: Any = None,
) -> tuple[float | None, str]:
    """The same files read with cuFile into device memory: bytes/s and what ran, honestly.

    Without the GPUDirect Storage driver kvikio runs in compatibility mode: POSIX reads into
    a host bounce buffer and a copy, which is the pinned path above done by a library. The
    sentence says which it was; any failure becomes the sentence, never an exception.
    """
    if kvikio is None:
        kvikio, why = _import_kvikio()
        if why is not None:
            return None, why
    try:
        mode = cufile_mode(kvikio)
        items = plan_items(entries, BUFFER)
        if not items:
            return None, f"{mode}; nothing to read"
        device = copier.device(BUFFER)
        path, _, length = items[0]
        cufile_read(kvikio, path, device, min(length, 4096), 0)  # cuFile's driver opens here
        if cold:
            evict(sorted({it[0] for it in items}))
        return _cufile_rate(kvikio, device, items, budget_s), mode
    except Exception as exc:  # a missing driver, a file cuFile refuses: said, not raised
        return None, f"kvikio failed: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- in the probe


def run_path(
    copier: Copier,
    entries: Sequence[FileEntry],
    *,
    remote: bool,
    budget_s: float,
    cold: bool,
    storage: StorageStage | None = None,
    seed: int = 0,
    reporter: Reporter | None = None,
) -> DiskToGpu:
    """The path as the probe runs it: a random selection of local files, at most
    ``MAX_SECONDS`` and ``MAX_BYTES``, and cuFile beside it where kvikio is installed.

    The storage pass's one-thread rate, where ``storage`` has it, keeps the selection near
    what the budget can read, so eviction does not spend the budget on files never read. A
    remote target, or a CUDA failure, gives a record whose ``method`` says why.
    """
    if remote:
        return DiskToGpu(method="not measured: remote target (the path reads local files)")
    budget_s = min(budget_s, MAX_SECONDS)
    cap = MAX_BYTES
    rate = single_thread_rate(storage, cold) if storage is not None else None
    if rate is not None:
        cap = min(cap, max(4 * BUFFER, int(2 * rate[0] * budget_s)))
    selection = select_entries(entries, cap, seed)
    has_kvikio = importlib.util.find_spec("kvikio") is not None
    share = 1.0 - CUFILE_SHARE if has_kvikio else 1.0
    try:
        path = measure_path(copier, selection, budget_s * share, cold, reporter=reporter)
    except Exception as exc:  # pinned memory refused, a CUDA error: a sentence, not a crash
        return DiskToGpu(method=f"not measured: {type(exc).__name__}: {exc}")
    path.cufile_bytes_per_s, path.cufile = kvikio_read(
        copier, selection, budget_s * CUFILE_SHARE, cold=path.cache == "cold"
    )
    return path


__all__ = [
    "BUFFER",
    "BUFFERS",
    "MAX_BYTES",
    "MAX_SECONDS",
    "cufile_mode",
    "cufile_read",
    "kvikio_read",
    "measure_path",
    "method_label",
    "run_path",
]

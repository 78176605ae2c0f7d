"""The disk-to-GPU path: storage read into pinned buffers, each copied to the device while
the next one fills, timed end to end.

The storage and pcie stages are measured apart; a loader that reads into pinned memory and
copies to the GPU runs them back to back on the same bytes, and the path's rate says whether
the two overlap as the model assumes. Reads go into page-locked host buffers (``readinto``
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
import os
import time
from collections.abc import Sequence
from typing import Any

from ioprobe.collect.cuda_copy import Copier
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.storage import Item, evict, plan_items, resident_fraction
from ioprobe.record import DiskToGpu

BUFFER = 8 << 20
BUFFERS = 2
MAX_BYTES = 2 << 30
COLD_RESIDENT = 0.05  # at most this share still cached after eviction counts as cold


def _read_into(view: memoryview, item: Item) -> int:
    """Read one item into ``view`` (exactly its length); bytes read."""
    path, offset, length = item
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while got < length:
            n = os.preadv(fd, [view[got:length]], offset + got)
            if n <= 0:
                break  # the file shrank since it was listed: keep what is there
            got += n
        return got
    finally:
        os.close(fd)


def _fill(view: memoryview, items: Sequence[Item], start: int) -> tuple[int, int]:
    """Pack items from ``start`` into ``view`` until the next one does not fit; returns
    (bytes in the buffer, index of the first item left)."""
    used, i = 0, start
    while i < len(items) and used + items[i][2] <= len(view):
        used += _read_into(view[used : used + items[i][2]], items[i])
        i += 1
    return used, i


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

    Stops at ``budget_s`` or ``max_bytes``; ``cold`` evicts the files from the page cache
    first and the record says whether that worked (``cache``).
    """
    rep = reporter or SilentReporter()
    items = plan_items(entries, buffer_bytes)
    if not items:
        return DiskToGpu(method="not measured: nothing to read")
    paths = sorted({it[0] for it in items})
    cache = "warm"
    if cold:
        evict(paths)
        left = resident_fraction(paths)
        cache = "cold" if left is not None and left <= COLD_RESIDENT else "partly cached"
    hosts = [copier.host(buffer_bytes, True) for _ in range(buffers)]
    views = [copier.view(h) for h in hosts]
    devices = [copier.device(buffer_bytes) for _ in range(buffers)]
    pending: list[Any] = [None] * buffers
    total = read_s = copy_s = 0.0
    files_done: set[str] = set()
    i, k = 0, 0
    start = time.perf_counter()
    deadline = start + budget_s
    while i < len(items) and total < max_bytes and time.perf_counter() < deadline:
        if pending[k] is not None:
            copy_s += copier.wait(pending[k])  # buffer k's last copy must be done
            pending[k] = None
        t0 = time.perf_counter()
        first = i
        used, i = _fill(views[k], items, i)
        read_s += time.perf_counter() - t0
        if not used:
            break
        files_done.update(it[0] for it in items[first:i])
        pending[k] = copier.start(hosts[k], devices[k], used, "h2d", 1)
        total += used
        k = (k + 1) % buffers
        rep.update(min(total / max_bytes, (time.perf_counter() - start) / budget_s), "")
    for p in pending:
        if p is not None:
            copy_s += copier.wait(p)
    seconds = time.perf_counter() - start
    return DiskToGpu(
        bytes_per_s=total / seconds if seconds > 0 and total else None,
        files=len(files_done),
        bytes=int(total),
        seconds=seconds,
        read_seconds=read_s,
        copy_seconds=copy_s,
        buffer_bytes=buffer_bytes,
        method=f"pinned {'double' if buffers == 2 else str(buffers) + '-way'} buffer, "
        f"{buffers} x {buffer_bytes >> 20} MiB",
        cache=cache,
    )


def kvikio_read(
    copier: Copier, entries: Sequence[FileEntry], budget_s: float, kvikio: Any = None
) -> tuple[float | None, str]:
    """The same files read with cuFile into device memory: bytes/s and what ran, honestly.

    Without the GPUDirect Storage driver kvikio runs in compatibility mode: POSIX reads into
    a host bounce buffer and a copy, which is the pinned path above done by a library. The
    sentence says which it was; any failure becomes the sentence, never an exception.
    """
    try:
        if kvikio is None:
            kvikio = importlib.import_module("kvikio")
    except ImportError:
        return None, "kvikio not installed"
    try:
        version = getattr(kvikio, "__version__", "?")
        defaults = importlib.import_module("kvikio.defaults")
        compat_fn = getattr(defaults, "compat_mode", None)
        compat = compat_fn() if callable(compat_fn) else defaults.get("compat_mode")
        mode = (
            "compatibility mode: no GPUDirect Storage, reads bounce through host memory"
            if compat
            else "GPUDirect Storage"
        )
        items = plan_items(entries, BUFFER)
        device = copier.device(BUFFER)
        total, start = 0, time.perf_counter()
        for path, offset, length in items:
            if time.perf_counter() > start + budget_s or total >= MAX_BYTES:
                break
            with kvikio.CuFile(path, "r") as f:
                total += int(f.pread(device[:length], length, offset).get())
        seconds = time.perf_counter() - start
        rate = total / seconds if seconds > 0 and total else None
        return rate, f"kvikio {version}, {mode}"
    except Exception as exc:  # a missing driver, a file kvikio refuses: said, not raised
        return None, f"kvikio failed: {type(exc).__name__}: {exc}"


__all__ = ["BUFFER", "BUFFERS", "kvikio_read", "measure_path"]

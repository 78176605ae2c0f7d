"""Storage stage of the probe: how fast can the dataset's files be read?

Reads whole files in a random order, as a shuffled epoch does, through a pool of threads,
sweeping the number of threads 1, 2, 4, ... 64. Files above ``CHUNK`` are split into chunks
that are separate work items, so one large file is read in parallel like a sharded one.

The read loop is the hot path: each thread takes the next item from a shared counter (no
lock), opens the file, ``os.preadv``-s into a buffer it reuses for the whole pass and closes
it; the only per-item bookkeeping is one latency append. ``os.preadv`` releases the GIL, so
threads overlap their I/O like fio's ``psync`` jobs do.

Cold reads evict each file first with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed)
and check with ``mincore`` what is still resident. Dirty pages (files written moments ago)
can't be dropped until written back, so a file still resident after the first advice is
flushed with ``fdatasync`` (it changes nothing in the file) and advised again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import mmap
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ioprobe.collect.dataset import Dataset, FileEntry
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.record import StoragePass, SweepPoint

CHUNK = 8 * 1024 * 1024  # files above this are read as several items
BUFFER = 1024 * 1024  # per-thread read buffer; one preadv per MiB, as fio's bs=1M
LEVELS = (1, 2, 4, 8, 16, 32, 64)
MIN_GAIN = 0.05
STALE_LEVELS = 3  # levels in a row without a 5% gain that end the sweep
RESIDENCY_SAMPLE = 256  # files checked with mincore per level

Item = tuple[str, int, int]  # path, offset, length


@dataclass
class LevelResult:
    concurrency: int
    bytes: int
    items: int
    seconds: float
    latencies_ns: list[int]
    errors: int
    first_error: str | None


def plan_items(entries: Sequence[FileEntry], chunk: int = CHUNK) -> list[Item]:
    items: list[Item] = []
    for e in entries:
        if e.size <= chunk:
            items.append((e.path, 0, e.size))
        else:
            items.extend((e.path, off, min(chunk, e.size - off)) for off in range(0, e.size, chunk))
    return items


# --------------------------------------------------------------------------- readers


def _local_reader(
    items: Sequence[Item],
    order: Sequence[int],
    counter: itertools.count[int],
    deadline_ns: int,
    lat: list[int],
    progress: list[int],
    slot: int,
    errors: list[str],
) -> None:
    # page-aligned (an anonymous mapping): copies out of the page cache into a buffer at an
    # address 8-24 bytes past a 64-byte boundary run 4x slower on some CPUs, and a
    # bytearray's alignment is luck
    buf = memoryview(mmap.mmap(-1, BUFFER))
    n = len(order)
    clock = time.perf_counter_ns
    preadv = os.preadv
    done = 0
    for k in counter:
        if k >= n:
            break
        path, off, length = items[order[k]]
        t0 = clock()
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                end = off + length
                pos = off
                while pos < end:
                    got = preadv(fd, [buf[: min(BUFFER, end - pos)]], pos)
                    if got == 0:
                        break  # the file shrank since it was listed
                    pos += got
            finally:
                os.close(fd)
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
            continue
        t1 = clock()
        lat.append(t1 - t0)
        done += pos - off
        progress[slot] = done
        if t1 >= deadline_ns:
            break


def _remote_reader_factory(fs: object) -> Callable[..., None]:
    cat_file = fs.cat_file  # type: ignore[attr-defined]

    def reader(
        items: Sequence[Item],
        order: Sequence[int],
        counter: itertools.count[int],
        deadline_ns: int,
        lat: list[int],
        progress: list[int],
        slot: int,
        errors: list[str],
    ) -> None:
        n = len(order)
        clock = time.perf_counter_ns
        done = 0
        for k in counter:
            if k >= n:
                break
            path, off, length = items[order[k]]
            t0 = clock()
            try:
                data = cat_file(path, start=off, end=off + length)
            except Exception as exc:  # backends raise their own types
                errors.append(f"{path}: {' '.join(str(exc).split())[:200]}")
                continue
            t1 = clock()
            lat.append(t1 - t0)
            done += len(data)
            progress[slot] = done
            if t1 >= deadline_ns:
                break

    return reader


def run_level(
    reader: Callable[..., None],
    items: Sequence[Item],
    concurrency: int,
    seconds: float,
    *,
    seed: int = 0,
    on_poll: Callable[[int], None] | None = None,
) -> LevelResult:
    """Read ``items`` in a shuffled order with ``concurrency`` threads for at most ``seconds``."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    counter = itertools.count()
    lats: list[list[int]] = [[] for _ in range(concurrency)]
    progress = [0] * concurrency
    errors: list[str] = []
    start = time.perf_counter_ns()
    deadline = start + int(seconds * 1e9)
    threads = [
        threading.Thread(
            target=reader,
            args=(items, order, counter, deadline, lats[i], progress, i, errors),
            daemon=True,
            name=f"ioprobe-read-{i}",
        )
        for i in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.1)
            if on_poll is not None:
                on_poll(sum(progress))
    elapsed = (time.perf_counter_ns() - start) / 1e9
    all_lat = [x for lst in lats for x in lst]
    return LevelResult(
        concurrency=concurrency,
        bytes=sum(progress),
        items=len(all_lat),
        seconds=elapsed,
        latencies_ns=all_lat,
        errors=len(errors),
        first_error=errors[0] if errors else None,
    )


# --------------------------------------------------------------------------- page cache


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self.munmap = libc.munmap
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.mincore = libc.mincore
        self.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


_libc: _Libc | None = None
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: str) -> tuple[int, int]:
    """(resident, total) pages of ``path`` in the page cache, via a read-only mapping."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(b & 1 for b in bytes(vec)), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths: Sequence[str]) -> float | None:
    resident = total = 0
    for p in paths:
        try:
            r, t = resident_pages(p)
        except OSError:
            continue
        resident += r
        total += t
    return resident / total if total else None


def evict(paths: Sequence[str]) -> None:
    """Drop the files' pages from the page cache; read-only, the files are not changed."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if _still_resident(p):
                os.fdatasync(fd)  # dirty pages can't be dropped before they are written back
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def _still_resident(path: str) -> bool:
    try:
        return resident_pages(path)[0] > 0
    except OSError:
        return False


# --------------------------------------------------------------------------- the pass


def _pct(sorted_ns: list[int], q: float) -> float | None:
    if not sorted_ns:
        return None
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6


def _point(res: LevelResult, resident: float | None) -> SweepPoint:
    lat = sorted(res.latencies_ns)
    secs = max(res.seconds, 1e-9)
    return SweepPoint(
        concurrency=res.concurrency,
        bytes=res.bytes,
        items=res.items,
        seconds=res.seconds,
        read_bytes_per_s=res.bytes / secs,
        files_per_s=res.items / secs,
        latency_p50_ms=_pct(lat, 0.50),
        latency_p95_ms=_pct(lat, 0.95),
        latency_p99_ms=_pct(lat, 0.99),
        resident_fraction_before=resident,
        errors=res.errors,
    )


def select_entries(entries: Sequence[FileEntry], max_bytes: int, seed: int) -> list[FileEntry]:
    """A random subset of files totalling at most ``max_bytes`` (at least one file)."""
    shuffled = list(entries)
    random.Random(seed).shuffle(shuffled)
    out: list[FileEntry] = []
    total = 0
    for e in shuffled:
        if out and total + e.size > max_bytes:
            continue
        out.append(e)
        total += e.size
        if total >= max_bytes:
            break
    return out


def measure_pass(
    ds: Dataset,
    selection: Sequence[FileEntry],
    cache: str,
    budget_s: float,
    *,
    levels: Sequence[int] = LEVELS,
    reporter: Reporter | None = None,
    seed: int = 0,
) -> StoragePass:
    """Sweep concurrency over ``selection``; cold passes evict local files before each level.

    The sweep stops when three levels in a row gain less than 5% over the best so far (one or
    two noisy levels on a shared disk should not end it), or when the budget is spent.
    """
    rep = reporter or SilentReporter()
    local = not ds.remote
    reader = _local_reader if local else _remote_reader_factory(ds.fs)
    items = plan_items(selection)
    total_bytes = sum(length for _, _, length in items)
    paths = [e.path for e in selection]
    check = (
        paths
        if len(paths) <= RESIDENCY_SAMPLE
        else random.Random(seed).sample(paths, RESIDENCY_SAMPLE)
    )
    out = StoragePass(cache="cold" if cache == "cold" else "warm")
    if not local:
        out.eviction = "none needed: a remote target has no local page cache"
    elif cache == "cold":
        out.eviction = "posix_fadvise(DONTNEED) before each level, checked with mincore"
    else:
        # bring the selection into the page cache once, untimed
        rep.update(0.0, "warming the page cache")
        run_level(reader, items, 8, max(budget_s, 1.0), seed=seed)
    deadline = time.monotonic() + budget_s
    per_level = max(budget_s / len(levels), 0.5)
    best = 0.0
    stale = 0
    residents: list[float] = []
    for i, c in enumerate(levels):
        left = deadline - time.monotonic()
        if left <= 0.05 and out.sweep:
            break
        resident: float | None = None
        if local and cache == "cold":
            evict(paths)
            resident = resident_fraction(check)
            if resident is not None:
                residents.append(resident)
        elif local:
            resident = resident_fraction(check)

        def poll(done: int, c: int = c) -> None:
            rep.update(done / max(total_bytes, 1), f"{c} threads  {done / 1e6:8.1f} MB")

        res = run_level(
            reader, items, c, min(per_level, max(left, 0.2)), seed=seed + i, on_poll=poll
        )
        if res.items == 0 and res.errors:
            raise OSError(f"every read failed, e.g. {res.first_error}")
        point = _point(res, resident)
        out.sweep.append(point)
        rep.result(
            f"{c:>2} threads: {point.read_bytes_per_s / 1e6:9.1f} MB/s  "
            f"{point.files_per_s:9.1f} items/s  p99 {point.latency_p99_ms or 0:.2f} ms"
        )
        gain = point.read_bytes_per_s / best - 1 if best else 1.0
        best = max(best, point.read_bytes_per_s)
        stale = stale + 1 if gain < MIN_GAIN else 0
        if stale >= STALE_LEVELS:
            break
    top = max(out.sweep, key=lambda p: p.read_bytes_per_s)
    out.best_concurrency = top.concurrency
    out.read_bytes_per_s = top.read_bytes_per_s
    out.files_per_s = top.files_per_s
    out.latency_p50_ms = top.latency_p50_ms
    out.latency_p95_ms = top.latency_p95_ms
    out.latency_p99_ms = top.latency_p99_ms
    if residents:
        out.resident_fraction_after_evict = max(residents)
    return out

"""Storage stage of the probe: how fast can the dataset's files be read?

Reads the files as a training loader does, through a pool of threads, sweeping the number of
threads 1, 2, 4, ... 64:

- small files (below ``STREAM_MIN``) each whole, in a random order, as a shuffled epoch of
  samples does;
- large files (shards, chunked formats, video) as *streams*: one reader goes through a file
  from its start to its end in 1 MiB reads, as a WebDataset or chunked-format worker does.
  Where there are fewer large files than readers, each file is cut into contiguous regions
  so that every reader streams one (fio's ``offset_increment`` does the same for its jobs).

The read loop is the hot path: each thread takes the next item from a shared counter (no
lock), opens the file, ``os.preadv``-s into a buffer it reuses for the whole pass and closes
it; the only per-item bookkeeping is one latency append (per 1 MiB read in a stream, where a
read is the request the loader waits on). ``os.preadv`` releases the GIL, so threads overlap
their I/O like fio's ``psync`` jobs do. A streamed file is advised ``POSIX_FADV_SEQUENTIAL``
so the kernel reads ahead of it as far as it would for a reader that asked.

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
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ioprobe import units
from ioprobe.collect.budget import Overdue, within
from ioprobe.collect.dataset import Dataset, FileEntry
from ioprobe.collect.failures import ReadFailures, ShortRead, cause
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.quiet import start_quiet
from ioprobe.collect.remote import cat_range
from ioprobe.errors import LIMIT_ERRNOS
from ioprobe.record import StoragePass, SweepPoint

CHUNK = 8 * 1024 * 1024  # plan_items: files above this are read as several items
# files of at least this size are streamed: 8 reads of 1 MiB or more, long enough for the
# kernel's readahead window to grow; shards (WebDataset's 100 MB-1 GB, chunked formats' tens of
# MB) and videos are above it, images, audio clips and tensors of one sample below it
STREAM_MIN = 8 * 1024 * 1024
BUFFER = 1024 * 1024  # per-thread read buffer; one preadv per MiB, as fio's bs=1M
LEVELS = (1, 2, 4, 8, 16, 32, 64)
MIN_GAIN = 0.05
STALE_LEVELS = 3  # levels in a row without a 5% gain that end the sweep
RESIDENCY_SAMPLE = 256  # files checked with mincore per level
MAX_ITEMS = 1 << 16  # work items planned at most: 512 GiB of 8 MiB chunks
LEVEL_GRACE_S = 0.5  # at least this long past a pass's end for reads in flight to finish
MIN_LEVEL_S = 0.5  # a level's least time, and a warm pass's least to fill the page cache

Item = tuple[str, int, int]  # path, offset, length
Failure = tuple[str, str, str]  # path, cause key, message


@dataclass
class LevelResult:
    concurrency: int
    bytes: int
    items: int
    seconds: float
    latencies_ns: list[int]
    errors: int
    first_error: str | None
    failures: list[Failure] = field(default_factory=list)
    abandoned: int = 0  # threads still in a read when the level stopped waiting for them


def plan_items(
    entries: Sequence[FileEntry], chunk: int = CHUNK, max_items: int = MAX_ITEMS
) -> list[Item]:
    """Each file as one item, or as chunks of ``chunk`` bytes; at most ``max_items`` in all,
    so a sparse file of a petabyte (its size is only a number) plans no more than a pass
    could read."""
    items: list[Item] = []
    for e in entries:
        if e.size <= chunk:
            items.append((e.path, 0, e.size))
        else:
            offsets = range(0, e.size, chunk)[: max(max_items - len(items), 0)]
            items.extend((e.path, off, min(chunk, e.size - off)) for off in offsets)
        if len(items) >= max_items:
            break
    return items


def split_streamed(
    entries: Sequence[FileEntry], stream_min: int = STREAM_MIN
) -> tuple[list[FileEntry], list[FileEntry]]:
    """(small files, streamed files): files of at least ``stream_min`` bytes are streamed."""
    small = [e for e in entries if e.size < stream_min]
    large = [e for e in entries if e.size >= stream_min]
    return small, large


def plan_streams(entries: Sequence[FileEntry], readers: int, align: int = BUFFER) -> list[Item]:
    """The regions ``readers`` readers stream from ``entries``: each file whole where there
    are at least as many files as readers, else each file cut into ``ceil(readers / files)``
    contiguous regions starting at multiples of ``align``, so that every reader has a region
    of its own (one file and 16 readers: 16 regions of a sixteenth each, fio's
    ``offset_increment`` layout). Every byte of every file lies in exactly one region."""
    if not entries:
        return []
    cuts = 1 if len(entries) >= readers else -(-readers // len(entries))
    regions: list[Item] = []
    for e in entries:
        # a region of whole align-sized blocks, so that no read straddles two readers
        step = max(-(-e.size // cuts // align) * align, align)
        regions.extend((e.path, off, min(step, e.size - off)) for off in range(0, e.size, step))
    return regions


def plan_share(
    entries: Sequence[FileEntry], clients: int, slot: int, threads: int, ranges: bool = True
) -> tuple[list[Item], int]:
    """Client ``slot``'s share of ``entries`` when ``clients`` clients of ``threads`` read
    threads each read them together, and where its streamed regions start: every
    ``clients``-th small file, and every ``clients``-th region of the large files streamed
    by all the clients' threads (``plan_streams``), so a file larger than ``STREAM_MIN`` is
    streamed as one client's loader streams a shard, not read in shuffled chunks. Without
    byte ranges (``ranges``) the large files are not cut: each is one region."""
    small_entries, streamed = split_streamed(entries)
    small = plan_items(small_entries)[slot::clients]
    readers = clients * threads if ranges else 1
    return small + plan_streams(streamed, readers)[slot::clients], len(small)


# --------------------------------------------------------------------------- readers

ReadOne = Callable[[str, int, int], int]  # (path, offset, length) -> bytes read
# (path, offset, length) -> the bytes of each read, in order, as each one returns
StreamOne = Callable[[str, int, int], Generator[int, None, None]]


@dataclass(slots=True)
class _Level:
    """What the threads of one level share: the work, the stop time and where results go.

    ``counter`` hands out positions in ``order`` without a lock (``next`` on an
    ``itertools.count`` is atomic under the GIL); each thread owns ``latencies[slot]`` and
    ``progress[slot]``, so no write is contended. Items from ``first_stream`` on are streamed
    regions: timed per read, and left at the deadline mid-way. With ``cycle``, items read
    through before the deadline are read again, in the same order, until it.
    """

    items: Sequence[Item]
    order: Sequence[int]
    counter: itertools.count[int]
    deadline_ns: int
    latencies: list[list[int]]
    progress: list[int]
    errors: list[Failure]
    first_stream: int
    cycle: bool = False


def _read_items(
    level: _Level,
    slot: int,
    read_one: ReadOne,
    stream_one: StreamOne,
    failure: type[Exception],
    describe: Callable[[Exception], str],
) -> None:
    """One thread's share of a level: take items until they run out or the deadline passes.

    A read that raises ``failure`` is counted with its cause and ``describe``'s text and not
    timed; any other exception is a bug and ends the thread.
    """
    # locals, not attribute lookups, inside the loop: it runs once per file
    items, order, counter = level.items, level.order, level.counter
    deadline_ns, progress, errors = level.deadline_ns, level.progress, level.errors
    first_stream, cycle = level.first_stream, level.cycle
    lat = level.latencies[slot]
    n = len(order)
    clock = time.perf_counter_ns
    done = 0
    for k in counter:
        if k >= n:
            if not cycle or clock() >= deadline_ns:
                break
            k %= n
        index = order[k]
        path, off, length = items[index]
        if index >= first_stream:
            reads = stream_one(path, off, length)
            done = _stream(level, slot, done, path, reads, failure, describe)
            if clock() >= deadline_ns:
                break
            continue
        t0 = clock()
        try:
            got = read_one(path, off, length)
        except failure as exc:
            errors.append((path, cause(exc), describe(exc)))
            if clock() >= deadline_ns:
                break  # reads that fail slowly (timeouts) must not outlast the level either
            continue
        t1 = clock()
        lat.append(t1 - t0)
        done += got
        progress[slot] = done
        if t1 >= deadline_ns:
            break


def _stream(
    level: _Level,
    slot: int,
    done: int,
    path: str,
    reads: Generator[int, None, None],
    failure: type[Exception],
    describe: Callable[[Exception], str],
) -> int:
    """Go through one streamed region's reads, timing each (the first with the file's open),
    until the region's end or the deadline; returns ``done``, the thread's bytes so far, grown
    by what it read. Bytes count as each read returns: a stream the deadline stops mid-way
    counts what it read, as fio's time-limited jobs do.

    A read that raises ``failure`` ends the region and is counted as ``_read_items`` counts
    one; the reads before it stand.
    """
    lat, progress, deadline_ns = level.latencies[slot], level.progress, level.deadline_ns
    clock = time.perf_counter_ns
    t0 = clock()
    try:
        for got in reads:
            t1 = clock()
            lat.append(t1 - t0)
            t0 = t1
            done += got
            progress[slot] = done
            if t1 >= deadline_ns:
                break
    except failure as exc:
        level.errors.append((path, cause(exc), describe(exc)))
    finally:
        reads.close()  # closes the file now, also when the deadline left the region part-read
    return done


def _os_error_text(exc: Exception) -> str:
    # strerror alone where there is one: str(OSError) repeats the path the message starts with
    return str(getattr(exc, "strerror", None) or exc)


# O_NONBLOCK: a file turned into a FIFO since the listing must fail its read (pread on a
# FIFO is ESPIPE, counted), not block its open for ever; a regular file reads as without it
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK


def _local_reader(level: _Level, slot: int) -> None:
    # page-aligned (an anonymous mapping): copies out of the page cache into a buffer at an
    # address 8-24 bytes past a 64-byte boundary run 4x slower on some CPUs, and a
    # bytearray's alignment is luck
    buf = memoryview(mmap.mmap(-1, BUFFER))
    # bound once per thread: each lookup saved is saved once per file
    preadv, open_, close, rdonly = os.preadv, os.open, os.close, READ_FLAGS
    fadvise, sequential = os.posix_fadvise, os.POSIX_FADV_SEQUENTIAL

    def read_one(path: str, off: int, length: int) -> int:
        fd = open_(path, rdonly)
        try:
            end = off + length
            pos = off
            while pos < end:
                # a slice past the buffer's end stops at its end: at most BUFFER per call
                got = preadv(fd, [buf[: end - pos]], pos)
                if got == 0:
                    break  # the file shrank since it was listed
                pos += got
        finally:
            close(fd)
        return pos - off

    def stream_one(path: str, off: int, length: int) -> Generator[int, None, None]:
        fd = open_(path, rdonly)
        try:
            # the kernel's readahead window for this open file doubles; a reader that knows
            # it goes through a shard from start to end can ask as much
            fadvise(fd, off, length, sequential)
            end = off + length
            pos = off
            while pos < end:
                got = preadv(fd, [buf[: end - pos]], pos)
                if got == 0:
                    break  # the file shrank since it was listed
                pos += got
                yield got
        finally:
            close(fd)

    _read_items(level, slot, read_one, stream_one, OSError, _os_error_text)


def _remote_error_text(exc: Exception) -> str:
    # botocore and aiohttp messages run over several lines and can be long
    return " ".join(str(exc).split())[:200]


def _remote_reader_factory(fs: object, ranges: bool = True) -> Callable[[_Level, int], None]:
    open_file = fs.open  # type: ignore[attr-defined]
    # one request per 1 MiB read, no read-ahead cache: a backend's read-ahead (5 MiB for
    # HTTP, 50 MiB for S3, and twice the block for fsspec's default cache) fetches what the
    # level's deadline leaves unread and uncounted, and a level shorter than one such fetch
    # counts one read of it (8 MB/s server, 1 thread: 1.3 MB/s counted). A server without byte ranges can only
    # send a file whole, from its start: one GET streamed (fsspec's HTTP stream file), as a
    # loader piping a shard through curl reads it
    options: dict[str, object] = (
        {"block_size": BUFFER, "cache_type": "none"} if ranges else {"block_size": 0}
    )

    # a read that ends before the listed bytes is the server's size overstating its file: a
    # failed read, where counted bytes over listed sizes would make the files' rate off
    def read_one(path: str, off: int, length: int) -> int:
        got = len(cat_range(fs, path, off, off + length))
        if got < length:
            raise ShortRead(_short(off + got, off + length))
        return got

    def stream_one(path: str, off: int, length: int) -> Generator[int, None, None]:
        # the backend's own file object, as a loader streaming a remote shard opens it
        with open_file(path, "rb", **options) as fh:
            if off:
                fh.seek(off)
            left = length
            while left > 0:
                got = len(fh.read(min(BUFFER, left)))
                if got == 0:
                    raise ShortRead(_short(off + length - left, off + length))
                left -= got
                yield got

    def reader(level: _Level, slot: int) -> None:
        # backends raise their own types, not OSError: every exception is a failed read
        _read_items(level, slot, read_one, stream_one, Exception, _remote_error_text)

    return reader


def _short(at: int, listed: int) -> str:
    return f"the file ended at byte {at:,} where its listed size ran to {listed:,}"


def reader_for(ds: Dataset, ranges: bool = True) -> Callable[[_Level, int], None]:
    """The read loop for ``ds``: preadv on local files, the fsspec backend's ranged reads
    on a remote target (whole-file streams where the server serves no byte ranges)."""
    return _remote_reader_factory(ds.fs, ranges) if ds.remote else _local_reader


def serves_ranges(ds: Dataset, streamed: Sequence[FileEntry]) -> bool:
    """Whether ``ds``'s server answers a byte range of its first large file with that range:
    an HTTP server that ignores ``Range`` sends the whole file to every request, so regions
    past a file's start cannot be read and a loader reads the file whole. One read of a
    byte at offset 1; the body of a whole-file answer is not downloaded. True for local
    files, without large files, and where the check itself fails (the pass meets that
    failure and counts it)."""
    if not ds.remote or not streamed or ds.fs is None:
        return True
    try:
        with ds.fs.open(streamed[0].path, "rb", block_size=4096) as fh:
            fh.seek(1)
            fh.read(1)
    except ValueError as exc:
        return "range" not in str(exc).lower()
    except Exception:  # backends raise their own types; the pass reports the failure
        return True
    return True


def run_level(
    reader: Callable[..., None],
    items: Sequence[Item],
    concurrency: int,
    seconds: float,
    *,
    seed: int = 0,
    on_poll: Callable[[int], None] | None = None,
    hard_s: float | None = None,
    first_stream: int | None = None,
    cycle: bool = False,
) -> LevelResult:
    """Read ``items`` in a shuffled order with ``concurrency`` threads for at most ``seconds``;
    with ``cycle``, for ``seconds`` however soon they are read through (again, in the same
    order: only where reading them again reads what they did, warm or remote).

    Items from ``first_stream`` on (None: none) are streamed regions, read in 1 MiB reads and
    timed per read. Reads in flight at ``seconds`` finish and count; at ``hard_s`` (None:
    never) the level stops waiting for them, and what they would have read is not counted."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    start = time.perf_counter_ns()
    level = _Level(
        items=items,
        order=order,
        counter=itertools.count(),
        deadline_ns=start + int(seconds * 1e9),
        latencies=[[] for _ in range(concurrency)],
        progress=[0] * concurrency,
        errors=[],
        first_stream=len(items) if first_stream is None else first_stream,
        cycle=cycle and bool(items),
    )
    hard_stop = None if hard_s is None else start + int(hard_s * 1e9)
    abandoned = _run_threads(reader, level, concurrency, on_poll, hard_stop)
    elapsed = (time.perf_counter_ns() - start) / 1e9
    all_lat = [x for lst in level.latencies for x in lst]
    errors = list(level.errors)  # abandoned threads may still append
    return LevelResult(
        concurrency=concurrency,
        bytes=sum(level.progress),
        items=len(all_lat),
        seconds=elapsed,
        latencies_ns=all_lat,
        errors=len(errors),
        first_error=f"{errors[0][0]}: {errors[0][2]}" if errors else None,
        failures=errors,
        abandoned=abandoned,
    )


def _run_threads(
    reader: Callable[..., None],
    level: _Level,
    concurrency: int,
    on_poll: Callable[[int], None] | None,
    hard_stop_ns: int | None = None,
) -> int:
    """Run ``reader(level, slot)`` on ``concurrency`` threads; ``on_poll`` sees the bytes
    read so far every 0.1 s until all have finished or ``hard_stop_ns`` passes. The threads
    still reading then (daemons: they end with their read) are abandoned and counted."""
    threads = [
        threading.Thread(target=reader, args=(level, i), daemon=True, name=f"ioprobe-read-{i}")
        for i in range(concurrency)
    ]
    for t in threads:
        start_quiet(t)
    for t in threads:
        while t.is_alive():
            if hard_stop_ns is not None and time.perf_counter_ns() >= hard_stop_ns:
                return sum(t.is_alive() for t in threads)
            t.join(0.1)
            if on_poll is not None:
                on_poll(sum(level.progress))
    return 0


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


RESIDENT_WINDOW = 16384  # pages read by one mincore call (64 MiB of a file in 4 KiB pages)
RESIDENT_WINDOWS = 256  # windows looked at in one file, at most; beyond, evenly spread ones


def resident_pages(path: str) -> tuple[int, int]:
    """(resident, total) pages of ``path`` in the page cache, via read-only mappings of a
    window at a time. A file of more than ``RESIDENT_WINDOWS`` windows (16 GiB) is looked at
    in that many windows spread evenly over it and its count scaled up: one byte per page
    of a 2 TiB file is half a gigabyte, and counting it took longer than a probe."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    page = mmap.PAGESIZE
    fd = os.open(path, READ_FLAGS)
    try:
        size = os.fstat(fd).st_size
        pages = (size + page - 1) // page
        if pages == 0:
            return 0, 0
        windows = (pages + RESIDENT_WINDOW - 1) // RESIDENT_WINDOW
        step = max(1, windows // RESIDENT_WINDOWS)
        seen = resident = 0
        for w in range(0, windows, step):
            first = w * RESIDENT_WINDOW
            n = min(RESIDENT_WINDOW, pages - first)
            resident += _resident_in(fd, first * page, min(n * page, size - first * page))
            seen += n
        return round(resident * pages / seen), pages
    finally:
        os.close(fd)


def _resident_in(fd: int, offset: int, length: int) -> int:
    """The pages of ``length`` bytes from ``offset`` (a multiple of the page) in the cache."""
    assert _libc is not None
    page = mmap.PAGESIZE
    addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        raise OSError(ctypes.get_errno(), "mmap failed")
    try:
        pages = (length + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        if _libc.mincore(addr, length, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return pages - bytes(vec).count(0)  # the kernel sets the low bit of a resident page
    finally:
        _libc.munmap(addr, length)


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
            fd = os.open(p, READ_FLAGS)
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


def latency_ms(sorted_ns: list[int], q: float) -> float | None:
    """The ``q`` quantile of sorted read times in nanoseconds, in milliseconds."""
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
        latency_p50_ms=latency_ms(lat, 0.50),
        latency_p95_ms=latency_ms(lat, 0.95),
        latency_p99_ms=latency_ms(lat, 0.99),
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


def _eviction_note(local: bool, cache: str) -> str | None:
    if not local:
        return "none needed: a remote target has no local page cache"
    if cache == "cold":
        return "posix_fadvise(DONTNEED) before each level, checked with mincore"
    return None


@dataclass
class _PassPlan:
    """What every level of one pass reads, with which reader, in which cache state: the
    small files as one item each, the streamed ones cut into regions for each level's
    readers."""

    reader: Callable[..., None]
    small: list[Item]
    streamed: list[FileEntry]
    total_bytes: int
    paths: list[str]
    check: list[str]  # the files whose residency is checked before each level
    local: bool
    cold: bool
    ranges: bool = True  # whether the server serves byte ranges: else no file is cut

    @classmethod
    def of(cls, ds: Dataset, selection: Sequence[FileEntry], cache: str, seed: int) -> _PassPlan:
        local = not ds.remote
        small_entries, streamed = split_streamed(selection)
        small = plan_items(small_entries)
        paths = [e.path for e in selection]
        # mincore on every file of a large selection would cost more than the level itself
        check = (
            paths
            if len(paths) <= RESIDENCY_SAMPLE
            else random.Random(seed).sample(paths, RESIDENCY_SAMPLE)
        )
        ranges = serves_ranges(ds, streamed)
        return cls(
            reader=reader_for(ds, ranges),
            small=small,
            streamed=streamed,
            total_bytes=sum(n for _, _, n in small) + sum(e.size for e in streamed),
            paths=paths,
            check=check,
            local=local,
            cold=local and cache == "cold",
            ranges=ranges,
        )

    @property
    def pattern(self) -> Literal["files", "streams", "mixed"]:
        if not self.streamed:
            return "files"
        return "mixed" if self.small else "streams"

    def items_for(self, readers: int) -> tuple[list[Item], int]:
        """A level's items for ``readers`` readers, and where its streamed regions start."""
        streams = plan_streams(self.streamed, readers if self.ranges else 1)
        return self.small + streams, len(self.small)

    def settle_cache(self) -> float | None:
        """Evict the files before a cold level; the resident share of ``check`` then, None
        for a remote target (no local page cache)."""
        if not self.local:
            return None
        if self.cold:
            evict(self.paths)
        return resident_fraction(self.check)


class _Plateau:
    """The sweep's stop rule: ``STALE_LEVELS`` levels in a row that gain less than
    ``MIN_GAIN`` over the best rate so far."""

    __slots__ = ("best", "stale")

    def __init__(self) -> None:
        self.best = 0.0
        self.stale = 0

    def reached(self, rate: float) -> bool:
        gain = rate / self.best - 1 if self.best else 1.0
        self.best = max(self.best, rate)
        self.stale = self.stale + 1 if gain < MIN_GAIN else 0
        return self.stale >= STALE_LEVELS


@dataclass(frozen=True)
class _Timing:
    """A pass's clock: when it ends, how long a level reads, and how long past the end reads
    in flight are waited for."""

    deadline: float  # time.monotonic()
    per_level: float
    grace: float

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def level(self) -> tuple[float, float]:
        """(seconds the next level starts reads, seconds until it stops waiting for them): a
        read stuck on storage that stopped answering may hold it to the pass's end."""
        left = self.left()
        soft = min(self.per_level, max(left, 0.2))
        return soft, max(soft, left + self.grace)


def _settle(plan: _PassPlan, timing: _Timing) -> float | None:
    """``plan.settle_cache()`` within the pass's time: eviction and mincore open each file,
    which blocks on a file system that stopped answering. Residency is unknown then."""
    try:
        return within(max(timing.left(), 0.2), plan.settle_cache)
    except Overdue:
        return None


def _measure_level(
    plan: _PassPlan,
    concurrency: int,
    timing: _Timing,
    seed: int,
    rep: Reporter,
    failures: ReadFailures,
) -> tuple[SweepPoint, LevelResult]:
    """One level of the sweep, from its cache state to its point."""
    resident = _settle(plan, timing)

    def poll(done: int) -> None:
        share = done / max(plan.total_bytes, 1)
        rep.update(share, f"{concurrency} threads  {units.size(done):>9}")

    soft, hard = timing.level()
    items, first_stream = plan.items_for(concurrency)
    res = run_level(
        plan.reader,
        items,
        concurrency,
        soft,
        seed=seed,
        on_poll=poll,
        hard_s=hard,
        first_stream=first_stream,
    )
    for path, key, text in res.failures:
        failures.add(path, key, text)
    return _point(res, resident), res


def _report(rep: Reporter, point: SweepPoint) -> None:
    rep.result(
        f"{point.concurrency:>2} threads: {units.bandwidth(point.read_bytes_per_s):>11}  "
        f"{point.files_per_s:9.1f} reads/s  p99 {point.latency_p99_ms or 0:.2f} ms"
    )


def _pattern_line(plan: _PassPlan) -> str:
    """What the pass streams, said once before its levels."""
    n = len(plan.streamed)
    files = f"{n} file{'s' if n != 1 else ''} of {units.memory(STREAM_MIN)} or more"
    also = f", {len(plan.small)} smaller ones read whole in a shuffled order" if plan.small else ""
    cut = (
        "cut into one region per thread where there are fewer files than threads"
        if plan.ranges
        else "each whole by one thread (the server serves no byte ranges)"
    )
    return f"streams: {files} read start to end in 1 MiB reads, {cut}{also}"


def _nothing_read(res: LevelResult) -> OSError:
    """Why a pass that has read nothing by the end of a level cannot go on: every read
    failed (a TimeoutError where each timed out), or none finished in time."""
    if not res.errors:
        return TimeoutError(
            f"no read finished within {res.seconds:.1f} s; a larger --time-budget allows "
            "slower reads"
        )
    tally = ReadFailures()
    for path, key, text in res.failures:
        tally.add(path, key, text)
    kind = TimeoutError if tally.only("timeout") else OSError
    return kind(f"every read failed ({tally.summary()}), e.g. {tally.example}")


def _summarise(out: StoragePass, cold: bool) -> None:
    """Copy the fastest level's figures to the pass, and for a cold pass the most that any
    level found still resident after eviction."""
    top = max(out.sweep, key=lambda p: p.read_bytes_per_s)
    out.best_concurrency = top.concurrency
    out.read_bytes_per_s = top.read_bytes_per_s
    out.files_per_s = top.files_per_s
    out.latency_p50_ms = top.latency_p50_ms
    out.latency_p95_ms = top.latency_p95_ms
    out.latency_p99_ms = top.latency_p99_ms
    residents = [p.resident_fraction_before for p in out.sweep] if cold else []
    known = [r for r in residents if r is not None]
    if known:
        out.resident_fraction_after_evict = max(known)


def measure_pass(
    ds: Dataset,
    selection: Sequence[FileEntry],
    cache: str,
    budget_s: float,
    *,
    levels: Sequence[int] = LEVELS,
    reporter: Reporter | None = None,
    seed: int = 0,
    failures: ReadFailures | None = None,
    partial: Callable[[StoragePass], object] | None = None,
) -> StoragePass:
    """Sweep concurrency over ``selection``; cold passes evict local files before each level.

    Ctrl-C (a KeyboardInterrupt) propagates; before it does, the levels that ended are
    handed to ``partial`` as a pass of their own, so an interrupted probe keeps them.

    The sweep stops when three levels in a row gain less than 5% over the best so far (one or
    two noisy levels on a shared disk should not end it), or when the budget is spent. Reads
    in flight at the end are waited for at most ``LEVEL_GRACE_S`` (or a tenth of the budget)
    past it. Files that fail to read are counted in ``failures`` and the sweep goes on; it
    raises OSError only when nothing has been read by the end of a level (TimeoutError where
    storage did not answer).
    """
    rep = reporter or SilentReporter()
    failures = failures if failures is not None else ReadFailures()
    plan = _PassPlan.of(ds, selection, cache, seed)
    out = StoragePass(cache="cold" if cache == "cold" else "warm", pattern=plan.pattern)
    out.byte_ranges = None if plan.local or not plan.streamed else plan.ranges
    out.eviction = _eviction_note(plan.local, cache)
    if plan.streamed:
        rep.result(_pattern_line(plan))
    deadline = time.monotonic() + budget_s
    if plan.local and not plan.cold:
        # a warm pass measures page-cache reads: fill the cache first, untimed, so the first
        # level does not pay for the misses; it may take half the pass, the levels the rest
        rep.update(0.0, "warming the page cache")
        warm_s = max(budget_s / 2, MIN_LEVEL_S)
        items, first_stream = plan.items_for(8)
        run_level(
            plan.reader, items, 8, warm_s, seed=seed, hard_s=budget_s, first_stream=first_stream
        )
    per_level = max((deadline - time.monotonic()) / len(levels), MIN_LEVEL_S)
    timing = _Timing(deadline, per_level, max(LEVEL_GRACE_S, 0.1 * budget_s))
    try:
        _sweep(plan, levels, out, timing, seed, rep, failures)
    except BaseException as exc:
        # Ctrl-C, or the host's limits met (a reader thread it would not start): the levels
        # that ended stand
        stands = isinstance(exc, KeyboardInterrupt) or (
            isinstance(exc, OSError) and exc.errno in LIMIT_ERRNOS
        )
        if stands and out.sweep and partial is not None:
            _summarise(out, plan.cold)
            partial(out)
        raise
    _summarise(out, plan.cold)
    return out


def _sweep(
    plan: _PassPlan,
    levels: Sequence[int],
    out: StoragePass,
    timing: _Timing,
    seed: int,
    rep: Reporter,
    failures: ReadFailures,
) -> None:
    """The concurrency levels in order, each appended to ``out.sweep`` as it ends."""
    plateau = _Plateau()
    for i, c in enumerate(levels):
        if timing.left() <= 0.05 and out.sweep:
            break
        point, res = _measure_level(plan, c, timing, seed + i, rep, failures)
        if res.items == 0 and not any(p.items for p in out.sweep):
            raise _nothing_read(res)
        out.sweep.append(point)
        _report(rep, point)
        if plateau.reached(point.read_bytes_per_s):
            break

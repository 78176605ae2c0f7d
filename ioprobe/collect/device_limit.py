"""The device's own limit: direct reads of the dataset's files at a queue-depth sweep.

The storage passes read as a loader does: buffered, each file whole or streamed in 1 MiB
reads, one read in flight per thread. What the device itself can do may be more, and the
gap is what bigger reads, more reads in flight, direct I/O or GPUDirect Storage could buy.
This pass reads the same files with ``O_DIRECT`` (past the page cache: nothing to evict)
at random block-aligned offsets, as ``fio --rw=randread --direct=1`` does over them, with
small (4 KiB) and large (1 MiB, or as large as most files hold) blocks, at queue depths 1,
2, 4, ... 64:

- through io_uring (``collect/uring.py``: one thread keeps ``depth`` reads in flight, as
  fio's io_uring engine does) where the kernel allows one;
- else one thread per read in flight, each a blocking ``preadv`` that releases the GIL.

A block size's sweep stops where two depths in a row gain less than 5%, or at its share of
the time. Files smaller than a block are left out of that block's reads; a file system that
refuses ``O_DIRECT`` (tmpfs, some FUSE and network mounts) gives a pass with the reason and
no points.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import mmap
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Literal

from ioprobe import units
from ioprobe.collect import direct_loop
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.quiet import start_quiet
from ioprobe.collect.storage import latency_ms
from ioprobe.collect.uring import Ring, UringUnavailable
from ioprobe.record import DeviceLimit, DirectPoint

SMALL_BLOCK = 4096
LARGE_BLOCK = 1 << 20
DEPTHS = (1, 2, 4, 8, 16, 32, 64)
MIN_GAIN = 0.05
STALE_DEPTHS = 2
MIN_POINT_S = 0.25
MAX_FILES = 1024  # files opened for the pass at most (a random choice of the larger ones)
TARGETS = 1 << 14  # offsets drawn per block size, cycled through
REAP_SHARE = 8  # a wake-up reaps 1/8 of the depth
DRAIN_S = 2.0  # the longest a stopped point waits for its reads in flight
DRAIN_POLL_S = 0.001  # between its looks at the completion queue
# buffers (and the views pinning them) of points whose reads did not all come back
_ABANDONED: list[tuple[mmap.mmap, object]] = []
ALIGN = 4096  # O_DIRECT's alignment of offset, length and buffer on every common device


def measure_device(
    entries: Sequence[FileEntry],
    seconds: float,
    *,
    reporter: Reporter | None = None,
    blocks: Sequence[int] | None = None,
    depths: Sequence[int] = DEPTHS,
    engine: Literal["io_uring", "threads"] | None = None,
    seed: int = 0,
    plateau: bool = True,
) -> DeviceLimit:
    """Direct reads of ``entries`` at each block size and queue depth within ``seconds``.
    ``engine`` forces "io_uring" or "threads" (a test's choice); by default io_uring where
    it can be set up. Without ``plateau`` every depth is read (a benchmark's full sweep)."""
    rep = reporter or SilentReporter()
    rng = random.Random(seed)
    files = [e for e in entries if e.size >= ALIGN]
    if len(files) > MAX_FILES:
        files = sorted(files, key=lambda e: -e.size)[: MAX_FILES * 4]
        files = rng.sample(files, MAX_FILES)
    out = DeviceLimit(engine=engine or "io_uring", files=len(files))
    if not files:
        out.note = "no file of 4 KiB or more to read directly"
        return out
    fds: list[tuple[int, int]] = []
    try:
        for e in files:
            try:
                fds.append((os.open(e.path, os.O_RDONLY | os.O_DIRECT | os.O_NONBLOCK), e.size))
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    out.note = "the file system does not take direct reads (O_DIRECT)"
                    return out
                continue  # unreadable now: left out, as the storage pass counts it
        out.files = len(fds)
        if not fds:
            out.note = "no file could be opened for direct reads"
            return out
        out.bytes_spanned = sum(size for _, size in fds)
        blocks = blocks or blocks_for([s for _, s in fds])
        _sweep(out, fds, seconds, rep, blocks, depths, rng, STALE_DEPTHS if plateau else 0)
    finally:
        for fd, _ in fds:
            os.close(fd)
    return out


def _sweep(
    out: DeviceLimit,
    fds: list[tuple[int, int]],
    seconds: float,
    rep: Reporter,
    blocks: Sequence[int],
    depths: Sequence[int],
    rng: random.Random,
    stale_depths: int,
) -> None:
    reader = _Reader(out, max(depths))
    try:
        end = time.perf_counter() + seconds
        for b, block in enumerate(blocks):
            targets = _targets(fds, block, rng)
            if not targets:
                continue
            share = (end - time.perf_counter()) / (len(blocks) - b)
            block_end = time.perf_counter() + share
            best, stale = 0.0, 0
            for d, depth in enumerate(depths):
                left = block_end - time.perf_counter()
                point_s = max(MIN_POINT_S, left / (len(depths) - d))
                try:
                    point = reader.point(targets, block, depth, point_s)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        # a read the device failed (EIO): what was swept stands, the rest
                        # is not measured; the storage passes count such files as read errors
                        out.note = f"a direct read failed ({exc.strerror}): the sweep stopped there"
                        return
                    out.note = f"direct reads of {units.memory(block)} refused: {exc.strerror}"
                    break
                out.sweep.append(point)
                rep.result(
                    f"{units.memory(block)} x {depth:2d} in flight: "
                    f"{units.bandwidth(point.read_bytes_per_s):>10}  {point.reads_per_s:9.0f} reads/s"
                    f"  p99 {point.latency_p99_ms or 0:.2f} ms"
                )
                gain = point.read_bytes_per_s / best - 1 if best else 1.0
                best = max(best, point.read_bytes_per_s)
                stale = 0 if gain >= MIN_GAIN else stale + 1
                if (stale_depths and stale >= stale_depths) or time.perf_counter() >= block_end:
                    break
    finally:
        reader.close()


class _Reader:
    """How a point's reads are kept in flight: the C loop (``direct_loop``) where the install
    built it, else the Python ring, else one thread per read (``out.engine`` says which of
    the last two, and its note why not io_uring)."""

    def __init__(self, out: DeviceLimit, depth: int) -> None:
        self.out, self.depth = out, depth
        self.ring: Ring | None = None
        self.native = out.engine == "io_uring" and direct_loop.available()
        self._targets: tuple[list[tuple[int, int]], direct_loop.Targets] | None = None
        if out.engine == "io_uring" and not self.native:
            self._set_up_ring()

    def _set_up_ring(self) -> None:
        try:
            self.ring = Ring(self.depth)
        except UringUnavailable as exc:
            self.out.engine = "threads"
            self.out.note = (
                f"io_uring not available ({exc.strerror}): one thread per read in flight"
            )

    def point(
        self, targets: list[tuple[int, int]], block: int, depth: int, seconds: float
    ) -> DirectPoint:
        if self.native:
            if self._targets is None or self._targets[0] is not targets:
                self._targets = (targets, direct_loop.Targets.of(targets))
            point = _point(None, self._targets[1], block, depth, seconds)
            if point is not None:
                return point
            self.native = False  # no ring for the C loop here: the Python loop says why
            self._set_up_ring()
        point = _point(self.ring, targets, block, depth, seconds)
        assert point is not None
        return point

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()


def blocks_for(sizes: Sequence[int]) -> tuple[int, int]:
    """The small block (4 KiB) and the large: 1 MiB, or where half the files are smaller,
    the largest power of two the median file holds (a folder of 128 KiB images is read in
    128 KiB blocks, the whole file, as a loader reads it)."""
    median = sorted(sizes)[len(sizes) // 2]
    large = LARGE_BLOCK
    while large > 2 * SMALL_BLOCK and large > median:
        large //= 2
    return SMALL_BLOCK, large


def _targets(fds: list[tuple[int, int]], block: int, rng: random.Random) -> list[tuple[int, int]]:
    """Random (descriptor, offset) pairs, the offset a multiple of the block inside a file
    that holds the whole block (fio's randread aligns to its block size)."""
    fit = [(fd, size // block) for fd, size in fds if size >= block]
    if not fit:
        return []
    return [(fd, rng.randrange(n) * block) for fd, n in (rng.choice(fit) for _ in range(TARGETS))]


def _point(
    ring: Ring | None,
    targets: list[tuple[int, int]] | direct_loop.Targets,
    block: int,
    depth: int,
    seconds: float,
) -> DirectPoint | None:
    """One depth's point, by the C loop (``targets`` as C arrays), the Python ring or threads;
    None where the C loop could set up no ring."""
    buffers = mmap.mmap(-1, block * depth)  # page-aligned, as O_DIRECT asks
    try:
        if isinstance(targets, direct_loop.Targets):
            done = _native_reads(targets, buffers, block, depth, seconds)
            if done is None:
                return None
            reads, got, wall, lat = done
        elif ring is not None:
            reads, got, wall, lat = _ring_reads(ring, buffers, targets, block, depth, seconds)
        else:
            reads, got, wall, lat = _thread_reads(buffers, targets, block, depth, seconds)
    finally:
        with contextlib.suppress(BufferError):  # a view pins them: kept (``_ABANDONED``)
            buffers.close()
    lat.sort()
    return DirectPoint(
        block_bytes=block,
        queue_depth=depth,
        reads=reads,
        seconds=wall,
        read_bytes_per_s=got / wall if wall > 0 else 0.0,
        reads_per_s=reads / wall if wall > 0 else 0.0,
        latency_p50_ms=latency_ms(lat, 0.5),
        latency_p99_ms=latency_ms(lat, 0.99),
    )


def _native_reads(
    targets: direct_loop.Targets, buffers: mmap.mmap, block: int, depth: int, seconds: float
) -> tuple[int, int, float, list[int]] | None:
    """The C loop's reads, bytes, wall time and latencies; None where it could set up no
    ring. A failed read raises, as the Python loop's does."""
    view = ctypes.c_char.from_buffer(buffers)
    try:
        done = direct_loop.reads(targets, block, depth, seconds, ctypes.addressof(view))
    finally:
        del view
    if isinstance(done, int):
        return None
    if done.in_flight:  # reads that never came back may still land in the buffers
        _ABANDONED.append((buffers, memoryview(buffers)))
    if done.failed:
        raise OSError(done.failed, os.strerror(done.failed))
    return done.reads, done.bytes, done.seconds, done.latencies_ns


def _ring_reads(
    ring: Ring,
    buffers: mmap.mmap,
    targets: list[tuple[int, int]],
    block: int,
    depth: int,
    seconds: float,
) -> tuple[int, int, float, list[int]]:
    """``depth`` reads kept in flight on one ring until ``seconds`` pass, then drained: the
    reads, bytes and wall time from the first submission to the last completion, and each
    read's latency (submission to the reap that saw it)."""
    view = ctypes.c_char.from_buffer(buffers)
    base = ctypes.addressof(view)
    clock = time.perf_counter_ns
    n = len(targets)
    lat: list[int] = []
    reads = got = 0
    start = clock()
    deadline = start + int(seconds * 1e9)
    k = _fill(ring, targets, base, block, depth)
    sent = [start] * depth
    inflight = depth
    submit, add = ring.submit, lat.append
    # each wake-up reaps an eighth of the depth: a system call per read would cost this
    # thread more than the device's 4 KiB read at depth 64, and 7/8 stay in flight meanwhile
    batch = max(1, depth // REAP_SHARE)
    failed = 0  # the first failed read's errno: the others in flight are reaped, then raised
    try:
        while inflight:
            ring.enter(min(batch, inflight))
            now = clock()
            more = now < deadline and not failed
            for slot, res in ring.completions():
                if res < 0:
                    failed, more = failed or -res, False
                    inflight -= 1
                    continue
                add(now - sent[slot])
                reads += 1
                got += res
                if more:
                    fd, off = targets[k % n]
                    k += 1
                    submit(slot, fd, off)
                    sent[slot] = now
                else:
                    inflight -= 1
    except BaseException:
        if not _drain(ring, inflight):
            # reads still in flight may land in the buffers: they are kept mapped (the view
            # pins them) rather than freed under the kernel
            _ABANDONED.append((buffers, view))
        raise
    finally:
        del view
    if failed:
        raise OSError(failed, os.strerror(failed))
    return reads, got, (clock() - start) / 1e9, lat


def _fill(ring: Ring, targets: list[tuple[int, int]], base: int, block: int, depth: int) -> int:
    """A read in each of ``depth`` slots (slot k's buffer is the k-th block from ``base``),
    from the first targets; the next target's index."""
    for slot in range(depth):
        ring.prepare(slot, base + slot * block, block, slot)
        fd, off = targets[slot % len(targets)]
        ring.submit(slot, fd, off)
    return depth


def _drain(ring: Ring, inflight: int) -> bool:
    """Wait for the reads still in flight, so no read lands in a buffer after it is freed;
    at most ``DRAIN_S`` (a Ctrl-C or SIGHUP must end the probe, not wait on a device), and
    whether they all came back. It polls, never waiting in the kernel: a signal raised
    between a reap and its count can leave ``inflight`` above the truth, and a wait in the
    kernel for a completion that never comes holds the probe until a second signal."""
    deadline = time.monotonic() + DRAIN_S
    while inflight > 0 and time.monotonic() < deadline:
        try:
            inflight -= len(ring.completions())
            if inflight > 0:
                time.sleep(DRAIN_POLL_S)
        except KeyboardInterrupt:  # a second signal: the deadline still holds
            continue
    return inflight <= 0


def _thread_reads(
    buffers: mmap.mmap, targets: list[tuple[int, int]], block: int, depth: int, seconds: float
) -> tuple[int, int, float, list[int]]:
    """``depth`` threads, each with one direct read in flight at a time."""
    clock = time.perf_counter_ns
    counter = itertools.count()
    n = len(targets)
    lats: list[list[int]] = [[] for _ in range(depth)]
    totals = [0] * depth
    failed: list[OSError] = []
    start = clock()
    deadline = start + int(seconds * 1e9)
    view = memoryview(buffers)

    def reader(slot: int) -> None:
        buf = view[slot * block : (slot + 1) * block]
        lat, preadv, total = lats[slot], os.preadv, 0
        try:
            for k in counter:
                fd, off = targets[k % n]
                t0 = clock()
                total += preadv(fd, [buf], off)
                t1 = clock()
                lat.append(t1 - t0)
                if t1 >= deadline:
                    break
        except OSError as exc:
            failed.append(exc)
        finally:
            totals[slot] = total
            buf.release()

    threads = [threading.Thread(target=reader, args=(s,), daemon=True) for s in range(depth)]
    for t in threads:
        start_quiet(t)
    for t in threads:
        t.join()
    view.release()
    if failed:
        raise failed[0]
    wall = (clock() - start) / 1e9
    lat = [x for per in lats for x in per]
    return len(lat), sum(totals), wall, lat

"""The end-to-end loop with an emulated accelerator, as MLPerf Storage's DLIO emulates one.

Worker processes each read a batch of files and decode them, like DataLoader workers; the main
process consumes batches in order and sleeps ``compute_s`` per batch, standing in for the GPU
step. ``2 x workers`` batches are in flight, DataLoader's default prefetch. The consumer's time
blocked waiting for the next batch is the data stall; ``gpu_idle_fraction`` is stall time over
wall time, the first batch excluded because it includes worker start-up.

A sample whose read or decode fails is counted as an error, never as a delivered sample. The
run ends at its budget whatever the storage does: the consumer waits for a batch at most a
grace period past it, and never computes past it.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections.abc import Sequence
from multiprocessing.pool import AsyncResult, Pool
from typing import Any

from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.decode import Decoder, resolve
from ioprobe.collect.failures import ReadFailures, cause
from ioprobe.collect.remote import cat_range
from ioprobe.collect.storage import READ_FLAGS
from ioprobe.collect.timeline import MAIN_COLUMNS, MAIN_ROWS, WORKER_COLUMNS, WORKER_ROWS, Series
from ioprobe.collect.workers import quiet_worker, spawn_pool
from ioprobe.record import PipelineRun, Track

_fs: Any = None
_decoder: Decoder | None = None


def _init(decoder_name: str, fs: Any) -> None:
    quiet_worker()
    global _fs, _decoder
    _fs = fs
    _decoder = resolve(decoder_name)


def read_whole(fs: Any, entry: FileEntry, limit: int | None = None) -> bytes:
    """A file's bytes (its first ``limit`` bytes if given), as a loader reads a sample."""
    size = entry.size if limit is None else min(entry.size, limit)
    if fs is not None:
        if size < entry.size:
            return cat_range(fs, entry.path, 0, size)
        # a listed size can be an estimate (an HTTP listing sampled for sizes): the whole
        # file is read, but a server sending without end is cut 64 MiB past it
        return cat_range(fs, entry.path, 0, entry.size + (64 << 20))
    buf = bytearray(size)
    view = memoryview(buf)
    fd = os.open(entry.path, READ_FLAGS)
    try:
        got = 0
        while got < size:
            n = os.preadv(fd, [view[got:]], got)  # positioned: a FIFO fails (ESPIPE)
            if n == 0:
                break
            got += n
    finally:
        os.close(fd)
    return bytes(view[:got])


FailedRead = tuple[str, str]  # path, cause key
BatchResult = tuple[int, int, int, int, int, int, int, int, tuple[FailedRead, ...]]
GRACE_S = 0.5  # at least this long past the budget for a batch in flight to arrive


def _batch_task(batch: list[FileEntry]) -> BatchResult:
    """(samples delivered, bytes, errors, pid, start ns, end ns, read ns, CPU ns, failed reads)
    of one batch; times on perf_counter, the host-wide monotonic clock the parent shares. A
    sample that fails to read or decode is an error, not a delivered sample."""
    assert _decoder is not None
    clock = time.perf_counter_ns
    nbytes = 0
    errors = 0
    read_ns = 0
    failed: list[FailedRead] = []
    t_start = clock()
    c0 = time.thread_time_ns()
    for entry in batch:
        r0 = clock()
        try:
            data = read_whole(_fs, entry)
        except Exception as exc:  # counted, like a loader that skips unreadable samples
            failed.append((entry.path, cause(exc)))
            continue
        read_ns += clock() - r0
        nbytes += len(data)
        try:
            _decoder(data)
        except Exception:  # a sample the decoder rejects is skipped too
            errors += 1
    errors += len(failed)
    cpu = time.thread_time_ns() - c0
    pid = os.getpid()
    return len(batch) - errors, nbytes, errors, pid, t_start, clock(), read_ns, cpu, tuple(failed)


class _Consumer:
    """The main process's side of the loop: what it waited for each batch, and the tracks."""

    def __init__(self) -> None:
        self.waits: list[float] = []  # seconds blocked per batch, the first batch excluded
        self.samples = 0  # in the batches of ``waits``
        self.errors = 0  # samples that failed to read or decode, in every batch taken
        self.failed: list[FailedRead] = []
        self.first_done = 0.0  # perf_counter when the first batch's compute ended
        self.end = 0.0
        self.main = Series(MAIN_COLUMNS, MAIN_ROWS)
        self.per_worker: dict[int, Series] = {}  # by pid, numbered in order of first batch
        self.origin = 0  # perf_counter ns of the first wait: the tracks' zero

    def took(self, t0_ns: int, t1_ns: int, result: BatchResult) -> None:
        """A batch arrived at ``t1_ns`` after waiting from ``t0_ns``."""
        n, _, errors, pid, w_start, w_end, read_ns, cpu_ns, failed = result
        self.errors += errors
        self.failed.extend(failed)
        self.origin = self.origin or t0_ns
        self.main.add((t0_ns, t1_ns, t1_ns - t0_ns, 1, n, 0))
        ws = self.per_worker.setdefault(pid, Series(WORKER_COLUMNS, WORKER_ROWS))
        ws.add((w_start, w_end, 1, n, w_end - w_start, cpu_ns, read_ns))
        if self.first_done:
            self.waits.append(t1_ns / 1e9 - t0_ns / 1e9)
            self.samples += n

    def tracks(self) -> list[Track]:
        if not self.origin:
            return []
        main = self.main.to_record("main process", None, self.origin)
        workers = self.per_worker.values()
        return [
            main,
            *(ws.to_record(f"worker {i}", i, self.origin) for i, ws in enumerate(workers)),
        ]


def _consume(
    pool: Pool, batches: list[list[FileEntry]], workers: int, compute_s: float, budget_s: float
) -> _Consumer:
    """Take batches in order, ``2 x workers`` in flight, sleeping ``compute_s`` after each,
    until every batch is taken or a batch arrives past the budget. A batch still not there a
    grace period past the budget (storage that stopped answering) is not waited for, and no
    compute runs past the budget."""
    consumer = _Consumer()
    pending: list[AsyncResult[BatchResult]] = []
    nxt = 0
    deadline = time.perf_counter() + budget_s
    hard_stop = deadline + max(GRACE_S, 0.1 * budget_s)
    while True:
        while nxt < len(batches) and len(pending) < 2 * workers:
            pending.append(pool.apply_async(_batch_task, (batches[nxt],)))
            nxt += 1
        if not pending:
            break
        t0_ns = time.perf_counter_ns()
        try:
            result = pending.pop(0).get(timeout=max(hard_stop - time.perf_counter(), 0.0))
        except multiprocessing.TimeoutError:
            break
        t1_ns = time.perf_counter_ns()
        consumer.took(t0_ns, t1_ns, result)
        time.sleep(min(compute_s, max(deadline - time.perf_counter(), 0.0)))
        if not consumer.first_done:
            consumer.first_done = time.perf_counter()
        if t1_ns / 1e9 >= deadline:
            break
    consumer.end = time.perf_counter()
    return consumer


def _wait_ms(ordered: list[float], q: float) -> float | None:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3 if ordered else None


def run_pipeline(
    entries: Sequence[FileEntry],
    fs: Any,
    decoder_name: str,
    *,
    workers: int,
    batch_size: int,
    compute_s: float,
    budget_s: float,
    cache: str,
    seed: int = 0,
    failures: ReadFailures | None = None,
) -> PipelineRun:
    """One shuffled pass over ``entries`` in batches, for at most ``budget_s``; files that
    fail to read are added to ``failures``."""
    order = list(entries)
    random.Random(seed).shuffle(order)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    workers = max(1, min(workers, len(batches)))  # a worker with no batch is a wasted spawn
    with spawn_pool(workers, _init, (decoder_name, fs)) as pool:
        run = _consume(pool, batches, workers, compute_s, budget_s)
        pool.terminate()  # batches still in flight are not needed
    if failures is not None:
        for path, key in run.failed:
            failures.add(path, key)
    first_done = run.first_done
    wall = max(run.end - first_done, 1e-9) if first_done else 0.0
    wait_total = sum(run.waits)
    ordered = sorted(run.waits)
    return PipelineRun(
        workers=workers,
        batch_size=batch_size,
        compute_seconds_per_batch=compute_s,
        batches=len(run.waits),
        samples=run.samples,
        seconds=wall,
        samples_per_s=run.samples / wall if wall else 0.0,
        wait_seconds=wait_total,
        gpu_idle_fraction=min(wait_total / wall, 1.0) if wall else 0.0,
        cache=cache,
        wait_p50_ms=_wait_ms(ordered, 0.5),
        wait_p95_ms=_wait_ms(ordered, 0.95),
        tracks=run.tracks(),
        errors=run.errors,
    )

"""CPU stage of the probe: CPU seconds per sample and how decode scales over worker processes.

A process pool (spawn: safe beside the reader threads and fsspec's event loop) decodes a
fixed set of payloads held in memory by each worker, so what is timed is decode alone, not
I/O or IPC. The payloads reach the workers through a temporary file, not the pool's
start-up arguments: spawn writes those arguments down a pipe that the new process must drain
before the next one is started, so megabytes of payloads there serialise the workers' start
(3.2 s for 16 workers on a GPU host, against 0.3 s for 2 here). Each worker decodes one
payload before it is timed: the first decode in a process pays the library's own set-up
(Pillow registers its plugins: 30 ms of CPU), and at one task in flight successive tasks land
on different idle workers, so without it the one-worker level, the figure the model takes as
a sample's uncontended cost, read 36 ms per image where 3 ms was right. Each sample's cost is the worker thread's CPU time around the decode call
(``time.thread_time``), which ignores time the process was descheduled. The sweep runs
1, 2, 4, ... workers up to the usable cores, keeping exactly k tasks in flight at level k.
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.pool import AsyncResult, Pool
from typing import Any

from ioprobe import capacity
from ioprobe.collect import leftovers
from ioprobe.collect.budget import Overdue, within
from ioprobe.collect.decode import Decoder, output_nbytes, resolve
from ioprobe.collect.failures import ReadFailures
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.workers import (
    FirstCalls,
    Terminated,
    WorkerLost,
    lost_worker,
    mark_lost,
    pool_start_s,
    quiet_worker,
    spawn_pool,
    wait_started,
)
from ioprobe.errors import BadInputError
from ioprobe.record import CpuLevel, CpuStage

_payloads: list[bytes] = []
_decoder: Decoder | None = None
_sized = 0  # outputs this worker has sized (SIZED_PER_WORKER at most)
# the decoded size of a sample (what crosses to the device) from this many outputs per
# worker: sized there, where the --loader function runs, never in the probe's own process
SIZED_PER_WORKER = 8
# a level's least time: long enough to decode a few dozen images per worker
MIN_LEVEL_S = 0.3


# What a decoder's call may raise that counts as that sample's error: anything but the
# worker's own SIGTERM (``Terminated``). A pool worker ignores SIGINT (quiet_worker), so a
# KeyboardInterrupt there is the --loader function's own (a library's interrupted call
# re-raised); a SystemExit, a GeneratorExit or a BaseException of its own likewise. Uncaught,
# each printed a traceback from every worker and ended them all as they started.
DECODER_ERRORS = BaseException


def _init(decoder_name: str, payload_file: str, first: FirstCalls) -> None:
    quiet_worker()
    global _payloads, _decoder
    with open(payload_file, "rb") as fh:
        _payloads = pickle.load(fh)
    _decoder = resolve(decoder_name)
    # the library's first-call set-up, before any timing; an error counts in the timed tasks
    with first.calling():
        try:
            _decoder(_payloads[0])
        except Terminated:
            raise
        except DECODER_ERRORS:
            pass


def _ready(_: int) -> int:
    time.sleep(0.05)  # long enough that every worker takes one and finishes its imports
    return 0


# decoded, CPU seconds, errors, first error, bytes of the outputs sized, outputs sized
TaskResult = tuple[int, float, int, str | None, int, int]


def _decode_task(start: int, count: int) -> TaskResult:
    global _sized
    assert _decoder is not None
    n = len(_payloads)
    clock = time.thread_time
    cpu = 0.0
    ok = 0
    errors = 0
    first: str | None = None
    out_bytes = out_n = 0
    for i in range(start, start + count):
        data = _payloads[i % n]
        t0 = clock()
        try:
            out = _decoder(data)
        except Terminated:
            raise
        except DECODER_ERRORS as exc:  # a user's decoder may raise anything
            errors += 1
            first = first or f"{type(exc).__name__}: {exc}".removesuffix(": ")
            continue
        cpu += clock() - t0
        ok += 1
        if _sized < SIZED_PER_WORKER:  # after the clock: sizing is not decoding
            _sized += 1
            size = None
            with suppress(Exception):  # an output that cannot say its size has none
                size = output_nbytes(out)
            if size is not None:
                out_bytes += size
                out_n += 1
    return ok, cpu, errors, first, out_bytes, out_n


def least_seconds(usable_cores: int) -> float:
    """The least time ``measure_cpu`` takes whatever its budget: its pool's start and
    ``MIN_LEVEL_S`` per level."""
    levels = levels_for(usable_cores)
    return pool_start_s(max(levels)) + MIN_LEVEL_S * len(levels)


def levels_for(cores: int) -> list[int]:
    out = [1]
    while out[-1] * 2 < cores:
        out.append(out[-1] * 2)
    if cores > 1:
        out.append(cores)
    return out


class _Feed:
    """Hands out decode tasks: each starts where the last ended in the payloads, and their
    size grows until a task is long enough that IPC stays a small share of it."""

    __slots__ = ("batch", "cursor", "out_bytes", "out_n", "workers")

    def __init__(self) -> None:
        self.batch = 1
        self.cursor = 0
        self.out_bytes = self.out_n = 0  # the decoded outputs the workers sized
        # the pool's processes as it started them: one that dies is replaced in the pool's
        # own list, and the task it held is never handed to another (``_result``)
        self.workers: list[Any] = []

    def submit(self, pool: Pool) -> AsyncResult[TaskResult]:
        task = pool.apply_async(_decode_task, (self.cursor, self.batch))
        self.cursor += self.batch
        return task

    def adapt(self, ok: int, cpu: float) -> None:
        if ok and cpu / ok * self.batch < 0.02 and self.batch < 4096:
            self.batch *= 2  # keep a task near 20 ms so IPC stays a small share


class PhaseCut(Exception):
    """The CPU phase ended early: a pool worker died or stopped while it held a task, which
    the pool never hands to another (``reason`` says which); ``stage`` holds the levels
    measured before it."""

    def __init__(self, stage: CpuStage, reason: str) -> None:
        super().__init__(reason)
        self.stage = stage
        self.reason = reason


# How long past its level's end a task may take before it is taken for lost: a task is
# about 20 ms, or one sample where a sample takes longer (``_Feed``)
LOST_TASK_S = 10.0


def _result(workers: list[Any], task: AsyncResult[TaskResult], deadline: float) -> TaskResult:
    """``task``'s result. One whose worker died or was stopped (``workers``: the pool's
    processes as started) never comes: that is ``_Lost`` as soon as it is seen, and so is a
    task not done LOST_TASK_S past ``deadline``."""
    give_up = max(deadline, time.perf_counter()) + LOST_TASK_S
    while not task.ready():
        task.wait(0.25)
        how = lost_worker(workers)
        if how is None and time.perf_counter() > give_up and not task.ready():
            how = f"a task did not return within {LOST_TASK_S:.0f} s of its level's end"
        if how is not None and not task.ready():
            raise _Lost(how)
    return task.get()


class _Lost(Exception):
    pass


def _decode_for(
    pool: Pool,
    feed: _Feed,
    workers: int,
    seconds: float,
    stage: CpuStage,
    decoder_name: str,
    rep: Reporter,
) -> tuple[int, float, float]:
    """Keep ``workers`` tasks in flight for ``seconds``; (samples, CPU seconds, wall seconds).

    Decode errors are added to ``stage.errors``; a level where nothing decodes raises, and
    one that lost a worker (a task lost with it, or fewer workers than the level names)
    raises ``_Lost``.
    """
    samples = 0
    cpu = 0.0
    inflight: list[AsyncResult[TaskResult]] = []
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        while len(inflight) < workers and time.perf_counter() < deadline:
            inflight.append(feed.submit(pool))
        if not inflight:
            break
        ok, c, errs, first, out_bytes, out_n = _result(feed.workers, inflight.pop(0), deadline)
        feed.out_bytes += out_bytes
        feed.out_n += out_n
        samples += ok
        cpu += c
        stage.errors += errs
        if errs and not ok and samples == 0:
            raise BadInputError(f"--loader {decoder_name}: decoding fails: {first}")
        feed.adapt(ok, c)
        rep.update((time.perf_counter() - start) / seconds, f"{workers} workers")
    wall = time.perf_counter() - start
    lost = lost_worker(feed.workers)
    if lost is not None:  # the level ran with fewer workers than it names: not its figure
        raise _Lost(lost)
    if samples == 0:
        raise BadInputError(f"--loader {decoder_name}: no sample could be decoded")
    return samples, cpu, wall


def measure_cpu(
    decoder_name: str,
    payloads: list[bytes],
    usable_cores: int,
    budget_s: float,
    *,
    reporter: Reporter | None = None,
    levels: Sequence[int] | None = None,
) -> CpuStage:
    began = time.perf_counter()
    rep = reporter or SilentReporter()
    resolve(decoder_name)  # fail fast, in this process, on a bad --loader
    levels = list(levels or levels_for(usable_cores))
    stage = CpuStage(loader=decoder_name, usable_cores=usable_cores)
    feed = _Feed()
    base: float | None = None
    first = FirstCalls(f"--loader {decoder_name}")
    with (
        _payload_file(payloads) as path,
        spawn_pool(max(levels), _init, (decoder_name, path, first)) as pool,
    ):
        try:
            wait_started(pool, max(levels), _ready, first)
        except WorkerLost as lost:
            mark_lost(pool)
            raise PhaseCut(stage, str(lost)) from None
        feed.workers = list(getattr(pool, "_pool", []))
        # the pool's start is part of the phase: the levels share what it left. A floor keeps
        # a level long enough to decode a few dozen images per worker; on a host of many
        # cores a small budget is still spread over five or more levels
        per_level = max((budget_s - (time.perf_counter() - began)) / len(levels), MIN_LEVEL_S)
        for k in levels:
            try:
                samples, cpu, wall = _decode_for(pool, feed, k, per_level, stage, decoder_name, rep)
            except _Lost as lost:
                mark_lost(pool)
                _settle(stage, feed)
                raise PhaseCut(stage, f"{lost} at the {k}-worker level") from None
            sps = samples / wall
            base = base or sps
            level = CpuLevel(
                workers=k,
                samples=samples,
                seconds=wall,
                samples_per_s=sps,
                cpu_seconds_per_sample=cpu / samples,
                efficiency=sps / (k * base),
            )
            stage.sweep.append(level)
            rep.result(
                f"{k} workers: {sps:9.1f} samples/s  {level.cpu_seconds_per_sample * 1e3:.3f} ms CPU/sample"
            )
    _settle(stage, feed)
    return stage


def _settle(stage: CpuStage, feed: _Feed) -> None:
    """The stage's figures from the levels it measured (none: left unmeasured), and the
    mean decoded size of a sample where the workers could size their outputs."""
    if feed.out_n:
        stage.output_bytes_per_sample = feed.out_bytes / feed.out_n
    if not stage.sweep:
        return
    # the uncontended figure: one worker owns a core, no SMT sibling or memory contention
    stage.cpu_seconds_per_sample = stage.sweep[0].cpu_seconds_per_sample
    stage.capacity_samples_per_s = capacity.best_level([lv.samples_per_s for lv in stage.sweep])


PAYLOAD_PREFIX = "ioprobe-payloads-"


@contextmanager
def _payload_file(payloads: list[bytes]) -> Iterator[str]:
    """The payloads pickled to a private temporary file, removed on the way out (Ctrl-C
    included). Its name holds this process's pid: a probe killed with SIGKILL cannot remove
    its file, so each new one first removes those of probes no longer running
    (``leftovers.remove_stale``)."""
    leftovers.remove_stale(tempfile.gettempdir(), PAYLOAD_PREFIX)
    fd, path = tempfile.mkstemp(prefix=leftovers.own_prefix(PAYLOAD_PREFIX))
    try:
        with os.fdopen(os.dup(fd), "wb") as fh:
            pickle.dump(payloads, fh, protocol=pickle.HIGHEST_PROTOCOL)
        # the workers open it through this process's descriptor: a temporary-file cleaner
        # that removes the name mid-probe (tmpreaper, systemd-tmpfiles) leaves it readable
        held = f"/proc/{os.getpid()}/fd/{fd}"
        yield held if os.path.exists(held) else path
    finally:
        os.close(fd)
        with suppress(FileNotFoundError):  # removed by such a cleaner: nothing left to do
            os.unlink(path)


def load_payloads(
    read: Callable[[Any], bytes],
    entries: Sequence[Any],
    max_files: int = 128,
    max_bytes: int = 64 << 20,
    *,
    seconds: float = math.inf,
    failures: ReadFailures | None = None,
) -> list[bytes]:
    """Read up to ``max_files`` whole files (at least one) totalling at most ``max_bytes``,
    for at most ``seconds``: a read still running then is abandoned and reading stops.

    With ``failures``, a file that fails to read is counted there and skipped (the caller
    decides whether what is left is enough); without, its error is raised.
    """
    out: list[bytes] = []
    total = 0
    stop = time.monotonic() + seconds
    for e in entries:
        if out and (len(out) >= max_files or total + e.size > max_bytes):
            break
        if time.monotonic() >= stop:
            break
        try:
            data = within(stop - time.monotonic(), read, e)
        except Overdue:
            break
        except Exception as exc:  # remote backends raise their own types, not OSError
            if failures is None:
                raise
            failures.add_exception(e.path, exc)
            continue
        out.append(data)
        total += len(data)
    return out

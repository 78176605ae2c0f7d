"""The read check: how a dataset's reads scale with readers, measured after a watched run.

A watched run tells a per-request latency from a shared bandwidth by how a sample's time
blocked grew with the reads in flight beside it (``capacity.read_scaling``). Where its
workers read at every moment, its reads in flight never varied and it cannot tell: more
workers could read 4x faster, or not at all. The check settles it the way the loader would
meet it: at a few counts of reader processes (forked as DataLoader workers are, each loading
the dataset's own samples through its ``__getitem__`` in a loop for ``LEVEL_S``), each
sample's time blocked (wall time less its CPU time and its wait for a core) and the readers
blocked at once give the same points the run's own fit takes.

The readers are the dataset's, in processes of their own: what they change of their
process (a random generator's state, a file a dataset opens lazily) dies with them, and
what they print goes to ``/dev/null``. But they run the user's ``__getitem__`` outside the
training's schedule, and what it does beyond its process stays done: a line appended to
a log file it holds open, a cache entry written, a counter shared with the training bumped.
So the check runs only where the user asks for it (``IOPROBE_READ_CHECK=1``).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ioprobe import capacity
from ioprobe.collect.procfs import parse_runqueue_ns
from ioprobe.record import ReadScaling, ScalingPoint

# Each count of readers loads samples for this long; a reader past it by GRACE_S more (a
# read that does not end) is ended.
LEVEL_S = 0.3
GRACE_S = 2.0
# The counts tried, as multiples of the run's workers, never past MAX_READERS.
LEVELS = (1, 2, 4)
MAX_READERS = 16
# A count whose readers finished fewer reads than this gives no point.
MIN_READS = 10
SCHEDSTAT = "/proc/thread-self/schedstat"


@dataclass(frozen=True)
class Level:
    """One count of readers: what they loaded in LEVEL_S."""

    readers: int
    reads: int
    blocked_s: float  # every reader's time blocked, summed
    wall_s: float  # every reader's time loading, summed


def readers_for(workers: int) -> list[int]:
    """The counts of readers the check tries for a run of ``workers``: LEVELS times them,
    at least two apart, at most MAX_READERS."""
    return sorted({min(max(workers, 1) * k, MAX_READERS) for k in LEVELS})


def check(dataset: Any, size: int, workers: int) -> ReadScaling | None:
    """How reads of ``dataset`` (map-style, ``size`` samples) scale with readers, by the
    module's check at ``readers_for(workers)``; None where fewer than two counts gave a
    point, or where the check could not fork."""
    if "fork" not in multiprocessing.get_all_start_methods() or size < 1:
        return None
    levels = []
    for n in readers_for(workers):
        lv = _level(dataset, size, n)
        if lv is None:  # none of its readers answered: more of them would not either
            break
        levels.append(lv)
    return scaling(levels)


def scaling(levels: Sequence[Level]) -> ReadScaling | None:
    """The read scaling the levels show: per level, its readers blocked at once (reads in
    flight: time blocked over time loading, times readers) and its mean time blocked per
    read, fitted as the run's own (``capacity.scaling_exponent``). None where fewer than
    two levels read MIN_READS each or none was blocked."""
    points = [
        ScalingPoint(
            reads_in_flight=lv.readers * lv.blocked_s / lv.wall_s,
            read_ms=lv.blocked_s / lv.reads * 1e3,
            samples=lv.reads,
        )
        for lv in levels
        if lv.reads >= MIN_READS and lv.blocked_s > 0 and lv.wall_s > 0
    ]
    if len(points) < 2:
        return None
    exponent = capacity.scaling_exponent(points)
    counts = ", ".join(str(lv.readers) for lv in levels)
    return ReadScaling(
        exponent=exponent,
        limit=capacity.scaling_limit(exponent),
        reads_in_flight_mean=points[0].reads_in_flight,
        reads_in_flight_max=max(p.reads_in_flight for p in points),
        samples=sum(p.samples for p in points),
        points=points,
        checked=(
            f"a read check after the run: {counts} processes loading the dataset's samples "
            f"for {LEVEL_S:g} s each"
        ),
    )


def _level(dataset: Any, size: int, readers: int) -> Level | None:
    """``readers`` processes loading samples of ``dataset`` at once for LEVEL_S; None where
    none reported."""
    ctx = multiprocessing.get_context("fork")
    procs, conns = [], []
    # the readers begin together: forked one after another, the first ones read alone a
    # while, blocked less than the count's truth, and a capped store looked as if it grew
    # with readers (1.29x predicted against its cap, under a loaded host's slower forks)
    go = ctx.Event()
    try:
        for k in range(readers):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_read, args=(dataset, size, k, send, go), daemon=True)
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
        go.set()
        # one deadline for the count's readers: readers that never answer (a lock held by
        # a thread the fork left behind) cost LEVEL_S + GRACE_S once, not once each
        deadline = time.monotonic() + LEVEL_S + GRACE_S
        got = [_answer(c, deadline) for c in conns]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        for c in conns:
            c.close()
    done = [g for g in got if g is not None]
    if not done:
        return None
    return Level(
        readers,
        sum(r for r, _, _ in done),
        sum(b for _, b, _ in done),
        sum(w for _, _, w in done),
    )


def _answer(conn: Any, deadline: float) -> tuple[int, float, float] | None:
    """A reader's (reads, blocked, wall), or None where it failed or had not answered by
    ``deadline`` (``time.monotonic``)."""
    if not conn.poll(max(deadline - time.monotonic(), 0.0)):
        return None
    try:
        got = conn.recv()
    except (EOFError, OSError):
        return None
    return got if isinstance(got, tuple) and len(got) == 3 else None


def _read(dataset: Any, size: int, seed: int, conn: Any, go: Any) -> None:
    """A reader: once ``go`` is set (every reader of the count started), load samples in a
    random order for LEVEL_S, then send (reads, seconds blocked, seconds loading); anything
    the dataset prints goes to /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    # where the script's streams write elsewhere than descriptors 1 and 2 (a tee, a logger)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - until the process ends
    order = random.Random(seed)
    reads, blocked = 0, 0.0
    if not go.wait(GRACE_S):
        conn.send(None)
        return
    t0 = time.perf_counter()
    end = t0 + LEVEL_S
    try:
        while time.perf_counter() < end:
            i = order.randrange(size)
            w0, c0, q0 = time.perf_counter(), time.thread_time(), _runqueue()
            dataset[i]
            cpu = time.thread_time() - c0
            wait = (_runqueue() - q0) / 1e9
            blocked += max(time.perf_counter() - w0 - cpu - wait, 0.0)
            reads += 1
        conn.send((reads, blocked, time.perf_counter() - t0))
    except BaseException:  # the dataset's error: this reader gives no figures
        conn.send(None)


def _runqueue() -> int:
    """This thread's wait for a core so far, in ns (0 where /proc cannot say)."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return parse_runqueue_ns(f.read())
    except OSError:
        return 0


__all__ = ["LEVEL_S", "Level", "check", "readers_for", "scaling"]

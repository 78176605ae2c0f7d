"""One simulator behind every loader setting: the run's own batches replayed under a change.

A DataLoader's rate under another ``num_workers``, ``prefetch_factor`` or ``in_order`` depends
on more than each stage's mean cost: a rare slow sample holds its batch and, in order, every
batch behind it; workers beyond the cores share them; workers blocked on reads leave their
core to another, and reads in flight share the storage as the run measured it. The stage
model (``scenario.evaluate``) spreads a slow sample evenly over all of them; this module
replays the run's batch log instead.

``simulate`` is a discrete-event simulation with fluid sharing. Each logged batch keeps what
its worker spent on it, split into time blocked (reads, sleeps) and CPU time. Workers take
batches by PyTorch's dispatch rules (``_MultiProcessingDataLoaderIter``: ``prefetch_factor``
batches per worker handed out at the start, one more each time the consumer takes one; in
order round robin, out of order the next worker with a free slot) and make them one after
another: first the batch's blocked time, then its CPU time. A worker's CPU runs at its share
of the usable cores less the training loop's, or, where other work runs on the host (as
``capacity.cpu_context`` and ``foreign_cores`` read it), at the fair share of the usable
cores among every runnable thread; a blocked read takes
longer or shorter with the reads in flight beside it by the exponent the run measured
(``capacity.read_scaling``: storage throughput follows reads in flight ** exponent). The
consumer takes the batches (in order, or whichever is done first) and spends each logged
step time before it asks for the next. An IterableDataset's worker makes its own stream's
batches whatever index it is handed: at the run's worker count each logged batch stays in
its stream, a worker whose stream has ended is handed none, and the rate is the whole
replay's, as an epoch's streams end (``Costs.streams``).

``predict`` states a setting's rate as the measured rate times simulated(setting) /
simulated(as run), so what the simulation leaves out cancels to first order; ``replay``
reports how close the simulation of the run as it was comes to what was measured, the
evidence that the ratio can be trusted. ``search`` tries the neighbourhood of the recorded
setting and the combinations, and ``best`` picks the cheapest setting within reach of the
best rate.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence

from ioprobe import capacity
from ioprobe.analysis.epochs import epoch_starts, per_epoch_saving
from ioprobe.analysis.model import MIN_GAIN
from ioprobe.analysis.queueing import replayable
from ioprobe.analysis.scenario import FOREIGN_SHARE, LINEAR_STORAGE, recorded_cores
from ioprobe.capacity import FOREIGN_FLOOR
from ioprobe.record import BatchLog, Change, RunRecord

# Batches the replay runs: the logged ones cycled until the queue has settled past the
# deepest prefetch tried, so a deep queue filled at the start does not count as speed.
MIN_REPLAY = 600
# Most logged batches one replay takes (a log holds up to 10,000): enough stragglers to
# weigh them, few enough that a search of dozens of settings stays under a second.
MAX_LOGGED = 800
# Batches a replay runs per worker at least where the storage is a bandwidth: workers that
# start together and share it finish their batches in waves, which settle only after some
# tens of rounds (48 workers on a capped store: +13% from 600 batches, +6% from 1,440, +2%
# from 2,880 against 8,000)
PER_WORKER = 60
# Most batches one replay hands out: the queues of any setting a host can run fill well
# before it (64 workers x prefetch 16 x 4), and a setting past any host's (a million
# workers) is answered in a second rather than never
MAX_REPLAY = 20_000
# A setting is worth advising when it predicts at least model.MIN_GAIN more throughput, and a
# setting within NEAR of the best is as good as it (the cheaper of the two is advised: the
# replay's last few percent between worker counts are the fair share it gives the training
# loop, finer than a rerun can tell).
NEAR = 0.97
# The worker counts tried go up to this many per usable core (blocked workers leave their
# core to another, so more workers than cores can help), and never past MAX_WORKERS.
WORKERS_PER_CORE = 4
MAX_WORKERS = 64
# Cores shared by more worker processes than there are give the loader less than their whole
# time: each wake-up lands on one core's queue, where it may wait while the other core idles
# until the balancer moves it. On the 2-core development VM, 8 and 12 workers whose samples
# sleep 3 ms and then burn 1 ms kept the host 84% busy with 4-6 ms a batch spent waiting for
# a core, and the replay of those runs as they were came within 3% of them at 1.85 of the 2
# cores (it was 10-16% high at 2). A run with no more workers than cores cannot show it.
CROWDED_SHARE = 0.925
# And each worker process past the cores makes every batch's CPU time this share longer, the
# workers' and the main process's alike: a process that waits for a core finds its caches
# taken by the others when it gets one. On the same VM, the mixed loader's batches took
# 4.80-4.86 ms of CPU with 2 workers, 5.11-5.21 with 8, 5.20-5.30 with 12 and 5.31-5.40 with
# 16; skewed-remote's 1.85 with 4 and 2.09 with 24 (docs/benchmarks.md, at 90b64a8).
CROWDED_GROWTH = 0.007
CROWDED = (
    f"cores shared by more worker processes than there are give them about "
    f"{CROWDED_SHARE:.0%} of their time, and each process past the cores makes a batch's "
    f"CPU time {CROWDED_GROWTH:.1%} longer (measured on a 2-core VM, not on this host)"
)


@dataclasses.dataclass(frozen=True)
class Setting:
    """A DataLoader's settings the queue depends on."""

    workers: int
    prefetch_factor: int
    in_order: bool

    def changes(self, base: Setting) -> list[tuple[str, str, str]]:
        """(name, from, to) of each setting that differs from ``base``, as a user sets it."""
        out = []
        for name in ("workers", "prefetch_factor", "in_order"):
            a, b = getattr(base, name), getattr(self, name)
            if a != b:
                out.append(("num_workers" if name == "workers" else name, str(a), str(b)))
        return out

    def change(self, base: Setting) -> Change:
        """The what-if that turns ``base`` into this setting: what differs, the rest None."""
        return Change(
            workers=self.workers if self.workers != base.workers else None,
            prefetch_factor=(
                self.prefetch_factor if self.prefetch_factor != base.prefetch_factor else None
            ),
            in_order=self.in_order if self.in_order != base.in_order else None,
        )

    def overrides(self) -> dict[str, int | bool]:
        """The DataLoader arguments that set this setting (a trial of ``ioprobe tune``)."""
        return {
            "num_workers": self.workers,
            "prefetch_factor": self.prefetch_factor,
            "in_order": self.in_order,
        }

    def cost(self) -> tuple[int, int, int]:
        """What a setting asks of the host, to prefer the cheaper of two equal ones: cores
        and memory for workers, memory for queued batches; keeping the order is free."""
        return (self.workers, self.workers * self.prefetch_factor, 0 if self.in_order else 1)


@dataclasses.dataclass(frozen=True)
class Costs:
    """What the replay reads from a record: per logged batch (in the sampler's order) the
    worker's blocked and CPU seconds and the consumer's step after it, and the host the
    workers shared."""

    blocked: tuple[float, ...]
    cpu: tuple[float, ...]
    steps: tuple[float, ...]
    samples_per_batch: float
    usable_cores: float
    loop_cores: float  # the training loop's share (the main process)
    other_threads: float  # the host's other runnable threads sharing cores thread by thread
    # storage throughput ~ reads in flight ** exponent; None: the run could not tell
    exponent: float | None
    reads_in_flight: float  # what the run's blocked times were measured at
    reads_in_flight_max: float  # the most the run saw: past it, the curve is extrapolated
    cpu_split: str  # "per batch" (logged), "per epoch" (the epoch's CPU share, older records)
    transit: float = 0.0  # from a worker's finish to the main process having the batch
    handover: float = 0.0  # the main thread's time in next() for a batch already there
    # the main process's CPU per batch (its loop, taking batches): its share of the cores
    # grows with the rate; 0 where not known (``loop_cores`` then stands, as measured)
    main_cpu_per_batch: float = 0.0
    # cores that other scheduling groups (another session, another cgroup) keep whatever
    # the workers, and whether the run told its other load apart so (``apart_cores``)
    held_cores: float = 0.0
    apart_known: bool = False
    # the cores are a cgroup's CPU quota, not a CPU set: workers past it are throttled by
    # time, not left waiting on one core's queue while another idles
    quota: bool = False
    # the workers the costs were measured with (CPU times grow past the cores: CROWDED_GROWTH);
    # 0: as many as any setting's, nothing to scale
    run_workers: int = 0
    # host memory: a worker's private bytes, one batch's bytes (twice with pin_memory: the
    # pinned copy), and what the loader may hold in all; None where not measured
    worker_bytes: float | None = None
    batch_bytes: float | None = None
    memory_limit: float | None = None
    # an IterableDataset's streams: the worker (0 to ``stream_workers`` - 1) whose stream
    # each logged batch came from; a replay with that many workers keeps each batch in its
    # stream (``_Replay``). Empty: batches go to whichever worker is handed them
    streams: tuple[int, ...] = ()
    stream_workers: int = 0

    @property
    def bandwidth(self) -> bool:
        """Whether the storage was measured as one shared bandwidth: its throughput holds
        past the most reads in flight measured (``capacity.BANDWIDTH_EXPONENT``)."""
        return self.exponent is not None and self.exponent <= capacity.BANDWIDTH_EXPONENT


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A setting, the rate predicted for it and what that prediction rests on."""

    setting: Setting
    samples_per_s: float
    gain: float  # over the measured rate
    simulated_samples_per_s: float  # the replay's own figure for the setting
    assumptions: tuple[str, ...]
    memory_bytes: float | None = None  # what the setting holds in host memory (``memory``)
    fits: bool = True  # within the memory the host had free


@dataclasses.dataclass(frozen=True)
class Replay:
    """The run as it was, replayed: how far the simulation is from the measurement."""

    setting: Setting
    batches: int  # logged batches replayed
    measured_samples_per_s: float
    simulated_samples_per_s: float

    @property
    def error(self) -> float:
        """Simulated over measured, less one."""
        return self.simulated_samples_per_s / self.measured_samples_per_s - 1.0


def recorded_setting(rec: RunRecord) -> Setting | None:
    """The watched DataLoader's setting; None for a record without one (a probe, DALI,
    loading in the main process)."""
    w = rec.watch
    if w is None or w.settings.framework != "torch" or w.settings.workers < 1:
        return None
    return Setting(w.settings.workers, w.settings.prefetch_factor or 2, w.settings.in_order)


def costs(rec: RunRecord) -> Costs | None:
    """The replay's inputs from ``rec``'s batch log (one epoch's steady batches: the first
    round, which waited on the workers' start-up, left out); None where the record has no
    log to replay (``queueing.replayable``) or is not a DataLoader's, and for an
    IterableDataset whose batches hold stragglers: its items are dealt to the workers as
    streams, so a straggler belongs to its worker's stream, not to a batch the queue could
    hand to another worker, and a replay by batch would move it where it cannot go."""
    c = logged_costs(rec)
    iterable = rec.watch is not None and rec.watch.settings.iterable
    return None if c is None or (iterable and _skewed(c)) else c


def steady_batches(rec: RunRecord) -> list[int] | None:
    """The logged batches a replay reads: one epoch's (``queueing.replayable``) past its
    first round, which waited on the workers' start-up, MAX_LOGGED at most; None where the
    record has none to replay."""
    seg, w = replayable(rec), rec.watch
    return None if seg is None or w is None else list(seg)[w.settings.workers :][:MAX_LOGGED]


def logged_costs(rec: RunRecord) -> Costs | None:
    """``costs`` for any loader, an IterableDataset's included: its batches in the order
    the consumer took them, each dealt in turn to the worker that made it."""
    idx, w = steady_batches(rec), rec.watch
    if idx is None or w is None or w.batch_log is None or recorded_setting(rec) is None:
        return None
    log = w.batch_log
    blocked, cpu, split = _split(rec, log, idx)
    # next() holds the main thread for its CPU time (unpickling, mapping shared memory):
    # measured where the record has it, else the wait of batches long ready when asked for
    # (an upper bound: a batch still in the pipe waits too); and a finished batch reaches
    # the main process that much later than its worker finished it, beyond that hold
    # (pickled and sent by the worker's feeder thread, which waits for the worker's GIL)
    latency = [log.arrival[i] - max(log.ready[i], log.request[i]) for i in idx]
    handover = (w.next_cpu_ms or 0.0) / 1e3
    if w.next_cpu_ms is None:
        ready_early = [
            log.arrival[i] - log.request[i] for i in idx if log.ready[i] <= log.request[i]
        ]
        handover = min(ready_early, default=0.0)
    transit = max(statistics.median(latency) - handover, 0.0) if latency else 0.0
    steps = tuple(max(log.request[j] - log.arrival[i], 0.0) for i, j in itertools.pairwise(idx))
    usable = recorded_cores(rec)
    ctx = capacity.cpu_context(w.epochs, w.settings.workers, usable)
    rs = w.read_scaling
    exponent = rs.exponent if rs is not None else None
    m = rs.reads_in_flight_mean if rs is not None and rs.reads_in_flight_mean > 0 else None
    blocked_share = sum(blocked) / max(sum(blocked) + sum(cpu), 1e-12)
    # without the run's figure, its reads in flight were the workers' share of time blocked
    m0 = m if m is not None else max(w.settings.workers * blocked_share, 1.0)
    pinned = 2.0 if w.settings.pin_memory else 1.0
    apart = apart_cores(rec, max(usable, 1.0))
    streams = _streams([log.worker[i] for i in idx]) if w.settings.iterable else ()
    out = Costs(
        streams=streams,
        stream_workers=w.settings.workers if streams else 0,
        worker_bytes=w.worker_private_bytes,
        batch_bytes=w.batch_bytes * pinned if w.batch_bytes else None,
        memory_limit=memory_limit(rec),
        blocked=blocked,
        cpu=cpu,
        steps=steps or (0.0,),
        samples_per_batch=sum(log.samples[i] for i in idx) / len(idx),
        usable_cores=max(usable, 1.0),
        loop_cores=ctx.loop_cores,
        other_threads=max(ctx.contention, foreign_cores(rec) if apart is None else apart[1]),
        held_cores=apart[0] if apart is not None else 0.0,
        quota=rec.host.cpu_quota_cores is not None,
        apart_known=apart is not None,
        exponent=exponent,
        reads_in_flight=m0,
        reads_in_flight_max=rs.reads_in_flight_max if rs is not None else m0,
        cpu_split=split,
        run_workers=w.settings.workers,
        main_cpu_per_batch=_main_cpu_per_batch(rec),
        transit=transit,
        handover=handover,
    )
    return out


def in_streams(c: Costs, s: Setting) -> bool:
    """Whether a replay of ``c`` under ``s`` keeps each batch in its worker's stream: an
    IterableDataset's, at the worker count its streams were logged with."""
    return bool(c.streams) and s.workers == c.stream_workers


def _streams(workers: list[int]) -> tuple[int, ...]:
    """Each logged batch's stream, numbered in the order the workers' first batches came
    (in order, the replay's worker k is handed the segment's k-th batch first)."""
    number = {w: k for k, w in enumerate(dict.fromkeys(workers))}
    return tuple(number[w] for w in workers)


# Of the host's memory, the share kept out of any advice: page cache, the training process's
# growth, other jobs.
MEMORY_MARGIN = 0.1


def memory_limit(rec: RunRecord) -> float | None:
    """The most host memory a loader setting may hold: what was available at the end of the
    run less MEMORY_MARGIN of the host's total; None where the record does not say."""
    avail, total = rec.host.memory_available_bytes, rec.host.memory_bytes
    if not avail:
        return None
    return max(avail - MEMORY_MARGIN * (total or avail), 0.0)


def memory(c: Costs, s: Setting) -> float | None:
    """Host memory setting ``s`` holds: each worker's private memory, and the batches in
    flight (``prefetch_factor`` per worker, and the one the consumer holds); None where the
    run measured neither."""
    if c.worker_bytes is None and c.batch_bytes is None:
        return None
    return s.workers * (c.worker_bytes or 0.0) + (s.workers * s.prefetch_factor + 1) * (
        c.batch_bytes or 0.0
    )


def fits(c: Costs, s: Setting, base: Setting) -> bool:
    """Whether ``s`` fits the host's memory: within the limit, or no more than the setting
    as run already held (which ran)."""
    need, limit = memory(c, s), c.memory_limit
    if need is None or limit is None:
        return True
    was = memory(c, base) or 0.0
    return need <= max(limit, was)


def _split(
    rec: RunRecord, log: BatchLog, idx: list[int]
) -> tuple[tuple[float, ...], tuple[float, ...], str]:
    """Each batch's blocked and CPU seconds. A batch's work is its CPU time, its wait for a
    core (which the replay makes again from the workers it runs) and the rest, blocked.
    Records made before the log kept CPU per batch share each batch's work out by the
    epochs' CPU share instead."""
    if len(log.cpu_ms) == len(log.work_ms) and len(log.runqueue_ms) == len(log.work_ms):
        blocked = tuple(
            max(log.work_ms[i] - log.cpu_ms[i] - log.runqueue_ms[i], 0.0) / 1e3 for i in idx
        )
        # the worker process's CPU per batch where logged: what moving a batch costs it
        # (pickling, the queue's feeder thread) on top of the samples and the collate
        proc = log.process_cpu_ms if len(log.process_cpu_ms) == len(log.work_ms) else None
        cpu = tuple(
            max(min(log.cpu_ms[i], log.work_ms[i]), proc[i] if proc else 0.0) / 1e3 for i in idx
        )
        return blocked, cpu, "per batch"
    assert rec.watch is not None
    eps = capacity.worker_epochs(rec.watch.epochs)
    wall = sum(e.sample_wall_seconds + e.collate_seconds for e in eps)
    c = sum(e.sample_cpu_seconds + e.collate_seconds for e in eps)
    q = sum(e.runqueue_seconds for e in eps)
    cpu_share = c / wall if wall > 0 else 1.0
    blocked_share = max(1.0 - cpu_share - (q / wall if wall > 0 else 0.0), 0.0)
    return (
        tuple(log.work_ms[i] / 1e3 * blocked_share for i in idx),
        tuple(log.work_ms[i] / 1e3 * cpu_share for i in idx),
        "per epoch",
    )


def simulate(c: Costs, s: Setting, batches: int | None = None) -> list[float]:
    """When each of ``batches`` batches reaches the consumer (the logged ones cycled), under
    setting ``s``: the event simulation the module docstring describes."""
    per_worker = PER_WORKER * s.workers if c.bandwidth else 0  # its waves settle slowly
    fill = min(max(4 * s.workers * s.prefetch_factor, per_worker), MAX_REPLAY)
    n = batches or max(MIN_REPLAY, fill, 2 * len(c.cpu))
    return _Replay(c, s, n).run()


class _Replay:
    """One replay's state: each worker's queue of batches, the phase of the one it works on
    (0 idle, 1 blocked, 2 CPU), the batches done and not yet taken, the consumer's clock.

    Every worker in a phase runs at that phase's one speed (``_rates``), so each phase keeps
    a clock of the full-speed seconds it has given each of its workers, and a heap of when,
    on that clock, each of its workers' phase ends: the next event is the nearest end of
    either heap, found without visiting every worker (a replay of 64 workers costs about
    what one of 4 does)."""

    def __init__(self, c: Costs, s: Setting, n: int) -> None:
        self.c, self.s = c, s
        # an IterableDataset's worker makes its own stream's batches whatever it is handed,
        # and its stream ends: each stream is its logged batches, repeated as often as the
        # whole log is to make ``n``, and a worker whose stream is done is handed no more
        self.stream: list[list[int]] | None = None
        if in_streams(c, s):
            rounds = max(math.ceil(n / len(c.streams)), 1)
            own: list[list[int]] = [[] for _ in range(s.workers)]
            for i, k in enumerate(c.streams):
                own[k].append(i)
            self.stream = [x * rounds for x in own]
            n = sum(len(x) for x in self.stream)
        self.active = sum(1 for x in self.stream or () if x)  # streams that go on
        self.n = n
        # a worker past the n-th is never handed a batch, in turn or out of order
        workers = self.workers = min(s.workers, n)
        self.queue: list[deque[int]] = [deque() for _ in range(workers)]
        self.phase = [0] * workers
        self.clock = [0.0, 0.0, 0.0]  # by phase: full-speed seconds given so far
        self.ends: list[list[tuple[float, int]]] = [[], [], []]  # by phase: (end, worker)
        self.outstanding = [0] * workers
        self.made = [0] * workers  # of its stream, the batches each worker was handed
        self.owner = [0] * n
        self.logged = [i % len(c.cpu) for i in range(n)]  # the logged batch each one is
        self.done = [-1.0] * n
        self.finished: list[tuple[float, int]] = []  # out of order: (done, index) not yet taken
        self.turn = itertools.count()
        self.sent = 0
        # what the cores give the loader: less where its workers outnumber them (a core
        # idles while a worker waits on another's queue; where other groups hold cores,
        # their threads take up such a gap and the job keeps its fair share: 8 workers
        # beside another session's busy loop ran as 1; nor where a CPU quota, not a CPU
        # set, bounds them), and each batch's CPU time grows with the processes past them
        # (CROWDED)
        idle_gaps = crowded(c, s) and c.held_cores <= 0 and not c.quota
        self.cores = c.usable_cores * (CROWDED_SHARE if idle_gaps else 1.0)
        self.cpu_scale = cpu_growth(c, s.workers)

    def run(self) -> list[float]:
        # one loop with its state in locals: a search replays dozens of settings, each
        # thousands of events
        c, s, n = self.c, self.s, self.n
        in_order, transit, handover, steps = s.in_order, c.transit, c.handover, c.steps
        clock, done, finished = self.clock, self.done, self.finished
        io, cpu = self.ends[1], self.ends[2]
        rates = self._rates
        inf = float("inf")
        for _ in range(min(s.prefetch_factor * s.workers, n)):  # no more than there are
            self._hand_out()
        t = 0.0
        asks = 0.0  # when the consumer asks for its next batch
        taken = 0
        arrivals: list[float] = []
        while taken < n:
            # the consumer takes a batch the moment it has asked and one is there for it
            if in_order:
                here = done[taken] + transit if done[taken] >= 0 else inf
            else:
                here = finished[0][0] + transit if finished else inf
            if t >= asks and t >= here:
                i = taken if in_order else heapq.heappop(finished)[1]
                arrivals.append(t + handover)
                self.outstanding[self.owner[i]] -= 1
                self._hand_out()
                asks = t + handover + steps[taken % len(steps)]
                taken += 1
                continue
            # the next event: the consumer's, or the first of the workers' phases to end
            io_rate, cpu_rate = rates(len(io), len(cpu))
            dt = max(asks, here) - t
            if io:
                dt = min(dt, max(io[0][0] - clock[1], 0.0) / io_rate)
            if cpu:
                dt = min(dt, max(cpu[0][0] - clock[2], 0.0) / cpu_rate)
            if dt == inf:  # nothing runs and the consumer waits: a lost batch
                raise RuntimeError("the simulated loader stalled")  # pragma: no cover
            t += dt
            clock[1] += dt * io_rate
            clock[2] += dt * cpu_rate
            # blocked times that end go on to their CPU time; batches whose CPU time ends
            # are done now
            while io and io[0][0] - clock[1] <= 1e-12:
                w = heapq.heappop(io)[1]
                self._begin(w, 2, c.cpu[self.logged[self.queue[w][0]]] * self.cpu_scale)
            while cpu and cpu[0][0] - clock[2] <= 1e-12:
                w = heapq.heappop(cpu)[1]
                b = self.queue[w].popleft()
                done[b] = t
                if not in_order:
                    heapq.heappush(finished, (t, b))
                self._start(w)
        return arrivals

    def _begin(self, w: int, phase: int, seconds: float) -> None:
        """Worker ``w`` enters ``phase`` (1 or 2) with ``seconds`` of it at full speed."""
        self.phase[w] = phase
        heapq.heappush(self.ends[phase], (self.clock[phase] + seconds, w))

    def _start(self, w: int) -> None:
        """Worker ``w`` begins the next batch in its queue, if any."""
        if not self.queue[w]:
            self.phase[w] = 0
            return
        c = self.c
        i = self.logged[self.queue[w][0]]
        if c.blocked[i] > 0:
            self._begin(w, 1, c.blocked[i])
        else:
            self._begin(w, 2, c.cpu[i] * self.cpu_scale)

    def _hand_out(self) -> None:
        """The next batch index to a worker: in turn, or (out of order) to the next one with
        room under its prefetch; of a stream's, only to a worker whose stream goes on."""
        workers = self.workers
        if self.sent >= self.n:
            return
        w = next(self.turn) % workers
        for _ in range(workers - 1):
            if self._takes(w):
                break
            w = next(self.turn) % workers
        if self.stream is not None:
            # every stream that goes on is full: the first of them takes it all the same
            if self.made[w] >= len(self.stream[w]):
                w = next((k for k in range(workers) if self._left(k)), -1)
                if w < 0:  # every stream is done
                    return
            self.logged[self.sent] = self.stream[w][self.made[w]]
            self.made[w] += 1
            if not self._left(w):
                self.active -= 1
        self.queue[w].append(self.sent)
        self.owner[self.sent] = w
        self.outstanding[w] += 1
        self.sent += 1
        if self.phase[w] == 0:
            self._start(w)

    def _left(self, w: int) -> bool:
        """Whether worker ``w``'s stream has a batch it was not handed yet."""
        return self.stream is None or self.made[w] < len(self.stream[w])

    def _takes(self, w: int) -> bool:
        """Whether worker ``w`` takes the next batch: in order, any worker whose stream (if
        any) goes on; out of order, one with room under its prefetch too, where the streams
        that go on share the prefetch of those that ended (PyTorch's share of its tasks
        among the workers still active)."""
        if not self._left(w):
            return False
        room = self.s.prefetch_factor
        if self.stream is not None:
            room = self.s.prefetch_factor * self.workers // max(self.active, 1)
        return self.s.in_order or self.outstanding[w] < room

    def _rates(self, n_io: int, n_cpu: int) -> tuple[float, float]:
        """Speed of a blocked read and of CPU work, with ``n_io`` workers blocked and
        ``n_cpu`` on the CPU."""
        c = self.c
        cores = self.cores
        # the training loop is served first (workers past the cores do not take its share);
        # other work on the host shares the cores fairly with every runnable thread
        if not n_cpu:
            cpu_rate = 1.0
        elif c.other_threads > 0 or c.held_cores > 0:
            # other groups keep their cores; what is left is shared thread by thread
            runnable = n_cpu + c.loop_cores + c.other_threads
            cpu_rate = min(1.0, (cores - c.held_cores) / runnable)
        else:
            cpu_rate = min(1.0, max(cores - c.loop_cores, 0.5) / n_cpu)
        io_rate = 1.0
        if n_io and c.exponent is not None:
            # time per read ~ (reads in flight) ** (1 - exponent), as measured at m0; a
            # bandwidth's throughput holds past the most reads in flight measured
            top = c.reads_in_flight_max
            if c.bandwidth and n_io > top >= c.reads_in_flight:
                io_rate = (top / c.reads_in_flight) ** (c.exponent - 1.0) * top / n_io
            else:
                io_rate = (n_io / c.reads_in_flight) ** (c.exponent - 1.0)
        return io_rate, cpu_rate


# Rounds of the replay that settle the main process's share of the cores with its rate.
MAIN_ROUNDS = 3


def simulated_rate(c: Costs, s: Setting) -> float:
    """Samples/s the replay delivers under ``s``, over its second half (the queue settled).
    The main process's CPU grows with the batches it takes: its share of the cores is set
    from the rate the replay gives, and the replay run again, until they agree. Where the
    workers make their own streams (``Costs.streams``), the rate is the whole replay's: its
    streams end as an epoch's do, the slowest last, and its last batches are the epoch's."""
    rate = _rate(c, s, simulate(c, s))
    main_cpu = c.main_cpu_per_batch * cpu_growth(c, s.workers)
    for _ in range(MAIN_ROUNDS if c.main_cpu_per_batch > 0 else 0):
        if not 0 < rate < float("inf"):
            break
        loop = main_cpu * rate / c.samples_per_batch
        was = rate
        rate = _rate(c, s, simulate(dataclasses.replace(c, loop_cores=loop), s))
        if rate == was:  # the next round's share would be this one's: the same replay
            break
    return rate


def _rate(c: Costs, s: Setting, arrivals: Sequence[float]) -> float:
    """Samples/s of a replay's ``arrivals``: the steady rate, or of streams, the whole's."""
    if not in_streams(c, s):
        return steady_rate(arrivals, c.samples_per_batch)
    return len(arrivals) * c.samples_per_batch / arrivals[-1] if arrivals[-1] > 0 else math.inf


def foreign_cores(rec: RunRecord) -> float:
    """Cores the host spent on other work while the loader ran: its busy CPU time over the
    epochs (/proc/stat) less the workers' and the main process's, over the epochs' wall
    time. The workers' wait for a core (``capacity.cpu_context``) sees other work only when
    it took their cores; with a core to spare, this does. 0 where not read or below
    FOREIGN_FLOOR."""
    assert rec.watch is not None
    eps = [e for e in capacity.worker_epochs(rec.watch.epochs) if e.host_busy_seconds is not None]
    wall = sum(e.host_wall_seconds for e in eps)
    if wall <= 0:
        return 0.0
    ours = sum(e.worker_process_cpu_seconds + e.main_cpu_seconds for e in eps)
    other = (sum(e.host_busy_seconds or 0.0 for e in eps) - ours) / wall
    return other if other >= FOREIGN_FLOOR else 0.0


def apart_cores(rec: RunRecord, usable: float) -> tuple[float, float] | None:
    """The host's other load told apart by how the scheduler shares the cores with it:
    (cores held by processes in other scheduling groups, ``capacity.held_cores``; cores of
    other load sharing them thread by thread, the rest of the host's busy time less this
    job's, below ``FOREIGN_FLOOR`` none); None where no epoch scanned the host's processes.
    That rest is this session's own load, or processes that ended before the epoch did."""
    assert rec.watch is not None
    held = capacity.held_cores(rec.watch.epochs, usable)
    apart = capacity.apart_cores(rec.watch.epochs)
    if held is None or apart is None:
        return None
    same = foreign_cores(rec) - apart
    return held, same if same >= FOREIGN_FLOOR else 0.0


def _main_cpu_per_batch(rec: RunRecord) -> float:
    """The main process's CPU seconds per batch over the epochs its workers timed."""
    assert rec.watch is not None
    eps = capacity.worker_epochs(rec.watch.epochs)
    batches = sum(e.batches for e in eps)
    return sum(e.main_cpu_seconds for e in eps) / batches if batches else 0.0


def steady_rate(arrivals: Sequence[float], samples_per_batch: float) -> float:
    """Samples/s over the second half of ``arrivals``: the batches that arrived after the
    middle one, over the time since it (batches made side by side arrive together: counting
    from the middle one's moment leaves its bunch out whole)."""
    t0 = arrivals[len(arrivals) // 2]
    after = sum(1 for a in arrivals if a > t0)
    span = arrivals[-1] - t0
    return after * samples_per_batch / span if span > 0 else float("inf")


def replay(rec: RunRecord) -> Replay | None:
    """The run as it was, replayed, beside its measured rate; None without a log to replay
    or a measured rate."""
    c, s, measured = costs(rec), recorded_setting(rec), rec.measured_samples_per_s
    if c is None or s is None or not measured:
        return None
    return Replay(s, len(c.cpu), measured, simulated_rate(c, s))


def predict(rec: RunRecord, setting: Setting, c: Costs | None = None) -> Prediction | None:
    """The rate a rerun with ``setting`` delivers: measured x simulated(setting) /
    simulated(as run), with what the number assumes; None where the record has no batch
    log to replay, no measured rate, or no DataLoader setting."""
    c = c if c is not None else costs(rec)
    base, measured = recorded_setting(rec), rec.measured_samples_per_s
    if c is None or base is None or not measured:
        return None
    was = rate_of(c, base)
    now = rate_of(c, setting)
    if not 0 < was < float("inf"):
        return None
    pred = measured * now / was
    return Prediction(
        setting,
        pred,
        pred / measured,
        now,
        assumptions(c, base, setting),
        memory(c, setting),
        fits(c, setting, base),
    )


@functools.lru_cache(maxsize=512)
def rate_of(c: Costs, s: Setting) -> float:
    """``simulated_rate``, kept: a search and the rules ask for the same settings again."""
    return simulated_rate(c, s)


def cpu_growth(c: Costs, workers: int) -> float:
    """How much longer a batch's CPU time is with ``workers`` worker processes than as
    measured: CROWDED_GROWTH for each process past the usable cores, against the run's own
    (1.0 where the costs do not say how many workers they were measured with)."""
    if c.run_workers < 1:
        return 1.0

    def past(n: int) -> float:
        return 1.0 + CROWDED_GROWTH * max(n - c.usable_cores, 0.0)

    return past(workers) / past(c.run_workers)


def crowded(c: Costs, s: Setting) -> bool:
    """Whether ``s``'s workers outnumber the usable cores (``CROWDED_SHARE`` applies)."""
    return s.workers > c.usable_cores


def assumptions(c: Costs, base: Setting, s: Setting) -> tuple[str, ...]:
    """What a prediction for ``s`` rests on that the run could not check."""
    out: list[str] = []
    if crowded(c, s) and s.workers > base.workers:  # more past the cores than the run saw
        out.append(CROWDED)
    if c.other_threads > 0 and s.workers > base.workers and not c.apart_known:
        out.append(FOREIGN_SHARE)
    blocked = sum(c.blocked) / max(sum(c.blocked) + sum(c.cpu), 1e-12)
    more_reads = s.workers > base.workers and blocked > 0.05
    if more_reads and c.exponent is None:
        out.append(LINEAR_STORAGE)
    elif more_reads and s.workers * blocked > c.reads_in_flight_max * 1.25 and not c.bandwidth:
        out.append(
            f"storage's scaling extrapolated past the {c.reads_in_flight_max:.1f} reads in "
            "flight the run saw"
        )
    if c.cpu_split == "per epoch":
        out.append("each batch's CPU and blocked time split by the epoch's CPU share")
    return tuple(out)


def candidates(base: Setting, c: Costs) -> list[Setting]:
    """The settings a search tries: worker counts from one up to as many as keep the usable
    cores busy at the run's CPU share of a worker's time (at least WORKERS_PER_CORE per
    core: workers blocked on reads leave their core to another), every count near the
    recorded one and a geometric ladder beyond; the recorded prefetch factor, double and
    four times it; each in and out of order."""
    work = sum(c.cpu) + sum(c.blocked)
    cpu_share = max(sum(c.cpu) / work if work > 0 else 1.0, 1.0 / MAX_WORKERS)
    busy = math.ceil(2 * c.usable_cores / cpu_share)
    top = min(max(int(WORKERS_PER_CORE * c.usable_cores), busy, base.workers + 1), MAX_WORKERS)
    counts = set(range(max(base.workers - 2, 1), min(base.workers + 3, top) + 1))
    k = 1
    while k <= top:
        counts.update({k, min(int(k * 1.5), top)})
        k *= 2
    counts.add(top)
    depths = {base.prefetch_factor, 2 * base.prefetch_factor, 4 * base.prefetch_factor}
    return [
        Setting(w, p, o)
        for w in sorted(counts)
        for p in sorted(depths)
        for o in ((True, False) if base.in_order else (False,))
    ]


# An IterableDataset's batch whose worker time is over this many times the median one's:
# its stream holds stragglers, which another worker count would deal out differently.
STREAM_SKEW = 3.0


def search(rec: RunRecord) -> list[Prediction]:
    """Every candidate setting's prediction, best rate first; empty where the record has
    nothing to replay (``costs``: an IterableDataset whose batches hold stragglers among
    them, over STREAM_SKEW times the median batch, is not replayed)."""
    c, base = costs(rec), recorded_setting(rec)
    if c is None or base is None:
        return []
    out = [p for s in candidates(base, c) if (p := predict(rec, s, c)) is not None]
    return sorted(out, key=lambda p: -p.samples_per_s)


def _skewed(c: Costs) -> bool:
    work = sorted(b + u for b, u in zip(c.blocked, c.cpu, strict=True))
    median = work[len(work) // 2]
    return median > 0 and work[-1] > STREAM_SKEW * median


def best(predictions: Sequence[Prediction], base: Setting) -> Prediction | None:
    """The setting to advise: among those within NEAR of the best predicted rate, the one
    that asks least of the host (``Setting.cost``), and as few changes to the recorded
    setting as that allows; never one past the host's free memory (``fits``). None when
    nothing that fits gains MIN_GAIN."""
    top = max((p.samples_per_s for p in predictions if p.fits), default=0.0)
    near = [
        p for p in predictions if p.fits and p.samples_per_s >= NEAR * top and p.gain >= MIN_GAIN
    ]
    if not near:
        return None
    return min(near, key=preference(base))


def preference(base: Setting) -> Callable[[Prediction], tuple[tuple[int, int, int], int]]:
    """The order ``best`` prefers settings in: cheapest (``Setting.cost``), then fewest
    changes to ``base``."""
    return lambda p: (p.setting.cost(), len(p.setting.changes(base)))


@dataclasses.dataclass(frozen=True)
class QueuePrediction:
    """One loader setting changed alone, and the rate the replay predicts for it: the
    figures a report's head-of-line line gives beside the measured loss."""

    setting: str  # "in_order", "prefetch_factor" or "num_workers"
    current: str
    proposed: str
    predicted_samples_per_s: float
    gain: float  # predicted / measured


def queue_predictions(rec: RunRecord) -> list[QueuePrediction]:
    """The rate a rerun would deliver with ``in_order=False``, with twice the
    ``prefetch_factor`` and with twice the workers, each alone, by ``predict``. Empty where
    the record has nothing to replay."""
    c, base = costs(rec), recorded_setting(rec)
    if c is None or base is None:
        return []
    tried: list[tuple[str, object, object, Setting]] = []
    if base.in_order:
        tried.append(("in_order", True, False, dataclasses.replace(base, in_order=False)))
    p2 = 2 * base.prefetch_factor
    tried.append(
        ("prefetch_factor", base.prefetch_factor, p2, dataclasses.replace(base, prefetch_factor=p2))
    )
    w2 = 2 * base.workers
    tried.append(("num_workers", base.workers, w2, dataclasses.replace(base, workers=w2)))
    out = []
    for name, was, now, s in tried:
        p = predict(rec, s, c)
        if p is not None:
            out.append(QueuePrediction(name, str(was), str(now), p.samples_per_s, p.gain))
    return out


# Where the epochs' worker start-ups and shutdowns take at least this share of the run, the
# advice weighs loader settings end to end, start-ups included
START_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class EpochRestarts:
    """The run's epochs restarting their workers: what that cost as run, and the run as it
    was modelled end to end (the baseline of gains stated end to end)."""

    seconds: float  # every epoch's worker start-up and shutdown together, as run
    per_epoch: float  # one epoch's, with the recorded workers
    workers: int
    samples: int
    baseline_samples_per_s: float  # the steady time of the run's samples plus ``seconds``


def epoch_restarts(rec: RunRecord) -> EpochRestarts | None:
    """Where the workers start again at every epoch (``persistent_workers=False``) and their
    start-ups and shutdowns take at least START_SHARE of the run: what they cost. None
    otherwise, or where the record did not time its epochs from their ``iter()``."""
    starts, base, measured = epoch_starts(rec), recorded_setting(rec), rec.measured_samples_per_s
    if starts is None or starts.persistent or base is None or not measured:
        return None
    per_epoch = per_epoch_saving(starts)
    epochs = sum(e.merged for e in starts.epochs)
    if per_epoch is None or starts.run_seconds <= 0:
        return None
    cost = per_epoch * epochs
    if cost < START_SHARE * starts.run_seconds:
        return None
    steady = starts.samples / measured
    return EpochRestarts(
        cost, per_epoch, base.workers, starts.samples, starts.samples / (steady + cost)
    )


def end_to_end(p: Prediction, restarts: EpochRestarts) -> Prediction:
    """``p`` restated over the run's epochs, each starting its workers again: the steady
    time of the run's samples at ``p``'s rate plus every epoch's start-up and shutdown,
    scaled from the recorded worker count to ``p``'s (the main process forks each worker,
    and the first batch waits on workers that all start at once); its gain against the run
    as it was, modelled the same way."""
    scaled = restarts.seconds * p.setting.workers / max(restarts.workers, 1)
    rate = restarts.samples / (restarts.samples / p.samples_per_s + scaled)
    assumed = (
        f"each epoch's worker start-up and shutdown ({restarts.per_epoch:.2f} s with "
        f"{restarts.workers}) in proportion to the workers",
    )
    return dataclasses.replace(
        p,
        samples_per_s=rate,
        gain=rate / restarts.baseline_samples_per_s,
        assumptions=p.assumptions + assumed,
    )


def weighed_search(rec: RunRecord) -> tuple[list[Prediction], EpochRestarts | None]:
    """``search``'s predictions as the advice weighs them: end to end where the epochs'
    worker restarts cost the run (``epoch_restarts``, also returned), else steady."""
    tried, restarts = search(rec), epoch_restarts(rec)
    if restarts is not None:
        tried = [end_to_end(p, restarts) for p in tried]
    return tried, restarts


def advice(rec: RunRecord) -> Prediction | None:
    """The loader setting to advise for ``rec``: ``best`` of ``weighed_search``; or None."""
    base = recorded_setting(rec)
    return best(weighed_search(rec)[0], base) if base is not None else None


def capped_gain(rec: RunRecord, setting: Setting) -> float | None:
    """The gain ``setting`` would bring if the storage were one shared bandwidth (reads in
    flight share it, exponent 0): the other end of the range where the run could not tell
    a cap from a latency limit. None where the record has nothing to replay."""
    c, base, measured = costs(rec), recorded_setting(rec), rec.measured_samples_per_s
    if c is None or base is None or not measured:
        return None
    capped = dataclasses.replace(c, exponent=0.0)
    was = rate_of(capped, base)
    return rate_of(capped, setting) / was if 0 < was < float("inf") else None


__all__ = [
    "Costs",
    "Prediction",
    "QueuePrediction",
    "Replay",
    "Setting",
    "advice",
    "assumptions",
    "best",
    "candidates",
    "capped_gain",
    "costs",
    "cpu_growth",
    "fits",
    "foreign_cores",
    "in_streams",
    "logged_costs",
    "memory",
    "memory_limit",
    "predict",
    "preference",
    "queue_predictions",
    "rate_of",
    "recorded_setting",
    "replay",
    "search",
    "simulate",
    "simulated_rate",
    "steady_batches",
    "steady_rate",
]

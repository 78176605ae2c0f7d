"""How a DataLoader's queue of batches costs time: head-of-line blocking, measured and predicted.

A multi-worker DataLoader hands batches out in the sampler's order. One slow sample makes
its batch slow, and with ``in_order=True`` every batch behind it waits too, ready or not,
while the other workers run out of prefetch slots and idle. The record's batch log
(``WatchData.batch_log``) holds each of the run's first batches: when the consumer asked for
it, when it got it, when its worker had finished it and how long the worker spent on it.

From it this module measures the loss (``head_of_line``) and predicts the cures
(``queue_predictions``) with a small simulation of PyTorch's own queue (``simulate``): the
workers' recorded times replayed through the dispatch rules of
``torch.utils.data.dataloader._MultiProcessingDataLoaderIter`` under a changed
``in_order``, ``prefetch_factor`` or ``num_workers``. A prediction is the measured rate
times the simulated ratio, so the simulation's own simplifications cancel to first order.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import statistics
from collections.abc import Sequence

from ioprobe.analysis.scenario import evaluate, recorded_cores
from ioprobe.errors import BadInputError
from ioprobe.record import BatchLog, Change, RunRecord

# Batches a prediction needs past the first round: fewer and the queue never settles.
MIN_BATCHES = 50
# A sample slower than this many times the median is a straggler its batch waits on.
STRAGGLER = 2.0
# A cure is worth naming when it predicts at least this much more throughput.
MIN_GAIN = 1.05


@dataclasses.dataclass(frozen=True)
class HeadOfLine:
    """What a run's queue of batches cost it, over ``batches`` steady batches."""

    batches: int
    seconds: float  # first to last arrival of those batches
    stall_seconds: float  # the consumer's time blocked in next() over them
    # stall while a later batch was already made: the in-order queue held it back
    queue_seconds: float
    # worker time batches spent on a straggler (a sample over STRAGGLER x the median) beyond
    # what a typical sample takes
    slow_sample_seconds: float
    work_seconds: float  # all the workers' time on those batches
    typical_sample_ms: float  # the median sample, what "slow" is measured against


@dataclasses.dataclass(frozen=True)
class QueuePrediction:
    """One loader setting changed, and the rate the simulated queue predicts for it."""

    setting: str  # "in_order", "prefetch_factor" or "num_workers"
    current: str
    proposed: str
    predicted_samples_per_s: float
    gain: float  # predicted / measured


def _segment(log: BatchLog) -> range:
    """The logged batches of the epoch with the most of them: one epoch's queue, no worker
    restart inside it; none where a column of the log is missing or cut short (a damaged or
    hand-edited record), which no replay can read."""
    n = len(log.epoch)
    columns = (log.request, log.arrival, log.ready, log.worker, log.work_ms, log.slowest_ms)
    if any(len(c) != n for c in (*columns, log.samples)):
        return range(0)
    counts: dict[int, int] = {}
    for e in log.epoch:
        counts[e] = counts.get(e, 0) + 1
    if not counts:
        return range(0)
    best = max(counts, key=lambda e: (counts[e], -e))
    idx = [i for i, e in enumerate(log.epoch) if e == best]
    return range(idx[0], idx[-1] + 1)


def head_of_line(rec: RunRecord) -> HeadOfLine | None:
    """The consumer's stall that the in-order queue caused, and the worker time lost to slow
    samples, over the steady batches of the best-logged epoch.

    ``queue_seconds`` sums, for each batch, the part of the consumer's wait for it after
    some later batch (by arrival) was already finished and sent (its worker's finish plus the
    median transit to the main process), less what ``next()`` costs for a batch already
    there: with ``in_order=False`` the consumer would have taken that one instead. ``slow_sample_seconds`` sums each batch's slowest
    sample beyond the run's median sample, where that sample is a straggler (over STRAGGLER
    times the median; below it, ordinary jitter): the time the batch waited on it. None
    without a batch log or with too few steady batches.
    """
    w = rec.watch
    if w is None or w.batch_log is None or w.settings.workers < 1:
        return None
    log = w.batch_log
    seg = _segment(log)
    skip = w.settings.workers  # the first round waits for the workers' start-up
    idx = list(seg)[skip:]
    if len(idx) < MIN_BATCHES:
        return None
    # a finished batch reaches the main process a little later (pickled, sent, unpickled):
    # the batches the consumer was already waiting for show that transit alone
    transits = [log.arrival[i] - log.ready[i] for i in idx if log.request[i] < log.ready[i]]
    transit = statistics.median(transits) if transits else 0.0
    # and next() costs a little even for a batch already there: the queue is not to blame
    handed = [
        log.arrival[i] - log.request[i] for i in idx if log.ready[i] + transit <= log.request[i]
    ]
    cost = statistics.median(handed) if handed else 0.0
    later_ready = [0.0] * len(idx)
    best = float("inf")
    for k in range(len(idx) - 1, -1, -1):
        later_ready[k] = best
        best = min(best, log.ready[idx[k]] + transit)
    queue = stall = 0.0
    for k, i in enumerate(idx):
        req, arr = log.request[i], log.arrival[i]
        stall += max(arr - req, 0.0)
        queue += max(arr - max(req + cost, later_ready[k]), 0.0)
    typical = statistics.median(w.sample_ms.values) if w.sample_ms.values else 0.0
    bar = STRAGGLER * typical
    slow = sum(
        (log.slowest_ms[i] - typical) / 1e3
        for i in idx
        if log.samples[i] > 1 and log.slowest_ms[i] > bar
    )
    return HeadOfLine(
        batches=len(idx),
        seconds=log.arrival[idx[-1]] - log.arrival[idx[0]],
        stall_seconds=stall,
        queue_seconds=queue,
        slow_sample_seconds=slow,
        work_seconds=sum(log.work_ms[i] for i in idx) / 1e3,
        typical_sample_ms=typical,
    )


def simulate(
    work: Sequence[float], steps: Sequence[float], workers: int, prefetch: int, in_order: bool
) -> list[float]:
    """When each batch reaches the consumer, for batches that take ``work[i]`` seconds in
    a worker and a consumer that takes ``steps[k]`` after its k-th batch, under PyTorch's
    queue rules: ``prefetch * workers`` batches are handed out at the start and one more each
    time the consumer takes one; in order, batch i goes to worker ``i % workers`` and the
    consumer takes batches in index order; out of order, a batch goes to the next worker in
    turn with fewer than ``prefetch`` outstanding and the consumer takes whichever is done
    first. Each worker makes its batches one after another."""
    n = len(work)
    free = [0.0] * workers
    done = [0.0] * n
    owner = [0] * n
    outstanding = [0] * workers
    ready: list[tuple[float, int]] = []  # out of order: (done, index) of batches handed out
    turn = 0
    sent = 0

    def hand_out(t: float) -> None:
        nonlocal turn, sent
        if sent >= n:
            return
        w = turn % workers
        turn += 1
        if not in_order:
            for _ in range(workers - 1):
                if outstanding[w] < prefetch:
                    break
                w = turn % workers
                turn += 1
        start = max(free[w], t)
        done[sent] = free[w] = start + work[sent]
        owner[sent] = w
        outstanding[w] += 1
        if not in_order:
            heapq.heappush(ready, (done[sent], sent))
        sent += 1

    for _ in range(prefetch * workers):
        hand_out(0.0)
    t = 0.0
    arrivals: list[float] = []
    for k in range(n):
        i = k if in_order else heapq.heappop(ready)[1]
        a = max(t, done[i])
        outstanding[owner[i]] -= 1
        hand_out(a)
        arrivals.append(a)
        t = a + steps[k % len(steps)]
    return arrivals


def _rate(arrivals: list[float], samples: float, skip: int) -> float:
    """Batches per second after the first ``skip`` (in samples/s when ``samples`` is the mean
    batch size)."""
    span = arrivals[-1] - arrivals[skip]
    return (len(arrivals) - 1 - skip) * samples / span if span > 0 else float("inf")


def replayable(rec: RunRecord) -> range | None:
    """The logged batches ``queue_predictions`` replays (one epoch's), or None where it
    predicts nothing: no batch log, no workers, no measured rate, or too few batches past the
    first round for the queue to settle. Cheap: no simulation runs."""
    w = rec.watch
    if w is None or w.batch_log is None or rec.measured_samples_per_s is None:
        return None
    if w.settings.workers < 1:
        return None
    seg = _segment(w.batch_log)
    return seg if len(seg) - w.settings.workers >= MIN_BATCHES else None


def queue_predictions(rec: RunRecord) -> list[QueuePrediction]:
    """The rate a rerun would deliver with ``in_order=False``, with twice the
    ``prefetch_factor``, and with more workers, from the logged batches replayed through
    ``simulate``: measured rate x simulated(changed) / simulated(as run).

    The workers' batch times and the consumer's step times are replayed as recorded, in the
    sampler's order. More workers also change what each batch costs when the workers
    outnumber the cores or share a storage bandwidth, which the queue alone cannot see: that
    prediction is capped by the pipeline model's (``scenario.evaluate``) for the same count.
    Empty without a batch log, with too few batches, or without a measured rate.
    """
    seg = replayable(rec)
    w, measured = rec.watch, rec.measured_samples_per_s
    if seg is None or w is None or w.batch_log is None or not measured:
        return []  # a measured rate of 0 has no ratio to scale
    log = w.batch_log
    idx = list(seg)
    workers = w.settings.workers
    work = [log.work_ms[i] / 1e3 for i in idx]
    steps = [max(log.request[j] - log.arrival[i], 0.0) for i, j in itertools.pairwise(idx)]
    prefetch = w.settings.prefetch_factor or 2
    skip = workers
    mean = sum(log.samples[i] for i in idx) / len(idx)

    def rate(n_workers: int, n_prefetch: int, in_order: bool) -> float:
        return _rate(simulate(work, steps or [0.0], n_workers, n_prefetch, in_order), mean, skip)

    base = rate(workers, prefetch, w.settings.in_order)
    if not 0 < base < float("inf"):
        return []
    out: list[QueuePrediction] = []

    def add(setting: str, current: object, proposed: object, simulated: float) -> None:
        pred = measured * simulated / base
        out.append(QueuePrediction(setting, str(current), str(proposed), pred, pred / measured))

    if w.settings.in_order:
        add("in_order", True, False, rate(workers, prefetch, False))
    add("prefetch_factor", prefetch, 2 * prefetch, rate(workers, 2 * prefetch, w.settings.in_order))
    more = _more_workers(rec, workers)
    if more is not None:
        simulated = rate(more, prefetch, w.settings.in_order)
        add("num_workers", workers, more, simulated)
        model = _model_rate(rec, more)
        last = out[-1]
        if model is not None and model < last.predicted_samples_per_s:
            out[-1] = dataclasses.replace(
                last, predicted_samples_per_s=model, gain=model / measured
            )
    return out


def _more_workers(rec: RunRecord, workers: int) -> int | None:
    """Twice the workers, up to twice the usable cores (workers blocked on storage leave
    their core to another, as ``recommend.workers_rule`` allows); None past that."""
    cores = max(int(recorded_cores(rec)), 1)
    more = min(2 * workers, 2 * cores)
    return more if more > workers else None


def _model_rate(rec: RunRecord, workers: int) -> float | None:
    try:
        return evaluate(rec, Change(workers=workers)).predicted_samples_per_s
    except (BadInputError, ValueError):
        return None


def best_cure(predictions: Sequence[QueuePrediction]) -> QueuePrediction | None:
    """The change that pays: the highest predicted rate among those gaining MIN_GAIN, the
    cheaper setting on a tie within 2% (in_order costs nothing, a deeper prefetch costs
    memory, more workers cost cores)."""
    cost = {"in_order": 0, "prefetch_factor": 1, "num_workers": 2}
    paying = [p for p in predictions if p.gain >= MIN_GAIN]
    if not paying:
        return None
    top = max(p.predicted_samples_per_s for p in paying)
    near = [p for p in paying if p.predicted_samples_per_s >= 0.98 * top]
    return min(near, key=lambda p: cost.get(p.setting, 9))


__all__ = [
    "HeadOfLine",
    "QueuePrediction",
    "best_cure",
    "head_of_line",
    "queue_predictions",
    "replayable",
    "simulate",
]

"""How a DataLoader's queue of batches costs time: head-of-line blocking, measured and predicted.

A multi-worker DataLoader hands batches out in the sampler's order. One slow sample makes
its batch slow, and with ``in_order=True`` every batch behind it waits too, ready or not,
while the other workers run out of prefetch slots and idle. The record's batch log
(``WatchData.batch_log``) holds each of the run's first batches: when the consumer asked for
it, when it got it, when its worker had finished it and how long the worker spent on it.

From it this module measures the loss (``head_of_line``) and says which logged batches a
replay can take (``replayable``); ``loader_sim`` replays them to predict the cures.
"""

from __future__ import annotations

import dataclasses
import statistics

from ioprobe.record import BatchLog, RunRecord

# Batches a prediction needs past the first round: fewer and the queue never settles.
MIN_BATCHES = 50
# A sample slower than this many times the median is a straggler its batch waits on.
STRAGGLER = 2.0


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


__all__ = ["HeadOfLine", "head_of_line", "replayable"]

"""Where each epoch's start goes, and each worker's time to make a batch once warm.

A DataLoader without ``persistent_workers`` starts its workers again at every epoch: new
processes, imports, ``worker_init_fn``, the dataset copied in. The GPU waits for all of it
before the epoch's first batch. The collector times each epoch's ``iter()``, the wait for
its first batch and each started worker's time from ``iter()`` to its first sample
(``WatchEpoch.worker_startup_seconds``); the batch log gives each worker's batch times.
"""

from __future__ import annotations

import dataclasses
import statistics

from ioprobe.analysis.measures import percentile
from ioprobe.record import RunRecord

# Batches a worker needs, past its first, for its percentiles to mean anything.
MIN_WORKER_BATCHES = 10


@dataclasses.dataclass(frozen=True)
class EpochStart:
    index: int
    seconds: float  # the loader's iter() and the wait for the first batch
    workers_started: int
    worker_startup_seconds: float | None
    lost_seconds: float  # beyond what a steady batch takes


@dataclasses.dataclass(frozen=True)
class EpochStarts:
    epochs: list[EpochStart]
    batch_seconds: float  # a steady batch interval, median over the run
    run_seconds: float  # every epoch from its iter() to its last batch
    samples: int
    end_to_end_samples_per_s: float
    persistent: bool
    # with persistent_workers=True: the seconds the run would save (epochs after the first
    # start no workers) and the end-to-end rate it would reach; None where nothing is saved
    saved_seconds: float | None
    predicted_samples_per_s: float | None


@dataclasses.dataclass(frozen=True)
class WorkerLatency:
    """One worker's time to make a batch once warm (its first batch of each epoch left out)."""

    worker: int
    batches: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def epoch_starts(rec: RunRecord) -> EpochStarts | None:
    """Each epoch's start-up and what it lost beyond a steady batch, the run's end-to-end
    rate (epoch starts included, unlike the steady rate), and what ``persistent_workers``
    would save: the started workers' start-up in every epoch after the first (the first
    epoch starts them either way). Where only one epoch was watched, the saving is stated
    per further epoch by ``per_epoch_saving``. None for a record without epochs timed from
    their ``iter()`` (older records, DALI)."""
    w = rec.watch
    if w is None or not w.epochs or any(e.iter_seconds is None for e in w.epochs):
        return None
    steps = [e.seconds / (e.batches - 1) for e in w.epochs if e.batches > 1 and e.seconds > 0]
    batch = statistics.median(steps) if steps else 0.0
    out = []
    run = 0.0
    for e in w.epochs:
        start = (e.iter_seconds or 0.0) + (e.first_batch_seconds or 0.0)
        run += start + e.seconds
        out.append(
            EpochStart(
                index=e.index,
                seconds=start,
                workers_started=e.workers_started,
                worker_startup_seconds=e.worker_startup_seconds,
                lost_seconds=max(start - batch, 0.0),
            )
        )
    samples = sum(e.samples for e in w.epochs)
    persistent = w.settings.persistent_workers or w.settings.workers == 0
    saved = sum((e.worker_startup_seconds or 0.0) for e in w.epochs[1:]) if not persistent else 0.0
    rate = samples / run if run > 0 else 0.0
    return EpochStarts(
        epochs=out,
        batch_seconds=batch,
        run_seconds=run,
        samples=samples,
        end_to_end_samples_per_s=rate,
        persistent=persistent,
        saved_seconds=saved if saved > 0 else None,
        predicted_samples_per_s=samples / (run - saved) if 0 < saved < run else None,
    )


def per_epoch_saving(starts: EpochStarts) -> float | None:
    """The seconds ``persistent_workers=True`` saves each epoch after the first: the mean
    start-up of the workers the later epochs started, or, with one epoch watched, the first
    epoch's (later epochs fork the same process and pay the same); None where workers
    persist already."""
    if starts.persistent:
        return None
    later = [e.worker_startup_seconds for e in starts.epochs[1:] if e.worker_startup_seconds]
    if later:
        return statistics.mean(later)
    return starts.epochs[0].worker_startup_seconds if starts.epochs else None


def worker_latency(rec: RunRecord) -> list[WorkerLatency]:
    """Each worker's batch times after warm-up, from the batch log: the 50th, 95th and 99th
    percentile of the time it took to make a batch (its samples and collate). A worker far
    above the others is a straggler (a slow disk behind it, a noisy core)."""
    w = rec.watch
    if w is None or w.batch_log is None:
        return []
    log = w.batch_log
    seen: set[tuple[int, int]] = set()
    times: dict[int, list[float]] = {}
    for worker, epoch, ms in zip(log.worker, log.epoch, log.work_ms, strict=False):
        if (worker, epoch) not in seen:  # its first batch of the epoch carries start-up
            seen.add((worker, epoch))
            continue
        times.setdefault(worker, []).append(ms)
    return [
        WorkerLatency(
            worker=k,
            batches=len(v),
            p50_ms=percentile(v, 0.5),
            p95_ms=percentile(v, 0.95),
            p99_ms=percentile(v, 0.99),
        )
        for k, v in sorted(times.items())
        if len(v) >= MIN_WORKER_BATCHES
    ]


__all__ = [
    "EpochStart",
    "EpochStarts",
    "WorkerLatency",
    "epoch_starts",
    "per_epoch_saving",
    "worker_latency",
]

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
from ioprobe.record import RunRecord, WatchEpoch

# Batches a worker needs, past its first, for its percentiles to mean anything.
MIN_WORKER_BATCHES = 10
# A first round that fetched less than this from the storage device read from the page
# cache (a worker's first samples page in a few modules' files even when the data is warm).
COLD_BYTES = 1 << 20
# ... and less than this share of what the round read(): a warm round whose few pages the
# kernel had dropped (under memory pressure) fetched a sliver, not its data
COLD_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class EpochStart:
    index: int
    seconds: float  # the loader's iter() and the wait for the first batch
    workers_started: int
    worker_startup_seconds: float | None
    lost_seconds: float  # beyond what a steady batch takes
    # the first batch's wait on reads the storage device served (not the page cache): what a
    # warm cache would have saved this start; None where the round read nothing from it
    cold_read_seconds: float | None = None
    cold_read_bytes: int = 0
    # the epochs it stands for: past the record's cap on kept epochs, an entry merges
    # consecutive ones (``WatchEpoch.merged``), and the figures above are its epochs' means
    merged: int = 1


@dataclasses.dataclass(frozen=True)
class EpochStarts:
    epochs: list[EpochStart]
    batch_seconds: float  # a steady batch interval, median over the run
    # every epoch from its iter() to its iterator's end (its last batch, in older records)
    run_seconds: float
    samples: int
    end_to_end_samples_per_s: float
    persistent: bool
    # with persistent_workers=True: the seconds the run would save (epochs after the first
    # start no workers) and the end-to-end rate it would reach; None where nothing is saved
    saved_seconds: float | None
    predicted_samples_per_s: float | None
    # with the data in the page cache at every epoch's start: the seconds saved and the
    # end-to-end rate; None where no start read from the device, or the data cannot fit
    warm_saved_seconds: float | None = None
    warm_predicted_samples_per_s: float | None = None
    fits_in_memory: bool | None = None  # an epoch's bytes against the memory available
    # the mean time an epoch's final next() took to end it: where workers do not persist,
    # their shutdown; None where no epoch ran to its end or workers persist
    shutdown_seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class WorkerLatency:
    """One worker's time to make a batch once warm (its first batch of each epoch left out)."""

    worker: int
    batches: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def mean_epoch(e: WatchEpoch) -> WatchEpoch:
    """The mean epoch of an entry that merges ``e.merged`` consecutive epochs (its figures
    are their sums): what a per-epoch rule (a cold first round, an epoch's bytes) reads. An
    entry of one epoch is itself."""
    if e.merged <= 1:
        return e
    out = dataclasses.replace(e)
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if f.name not in ("index", "merged") and type(v) in (int, float):
            setattr(out, f.name, v / e.merged)
    return out


def epoch_count(rec: RunRecord) -> int:
    """The epochs a watched run took, those merged past the record's cap included."""
    return sum(e.merged for e in rec.watch.epochs) if rec.watch is not None else 0


def epoch_starts(rec: RunRecord) -> EpochStarts | None:
    """Each epoch's start-up and what it lost beyond a steady batch, the run's end-to-end
    rate (epoch starts and ends included, unlike the steady rate: each epoch from its
    ``iter()`` to its iterator's end, the last step and the workers' shutdown with it), and
    what ``persistent_workers`` would save: the started workers' start-up in every epoch
    after the first (the first epoch starts them either way) and their shutdown at every
    epoch's end (kept workers are shut down once, when the loader goes). Where only one
    epoch was watched, the saving is stated per further epoch by ``per_epoch_saving``. None
    for a record without epochs timed from their ``iter()`` (older records, DALI).

    An entry that merges epochs past the record's cap (``WatchEpoch.merged``) gives one
    ``EpochStart`` of its mean epoch; the run's sums count each of its epochs."""
    w = rec.watch
    if w is None or not w.epochs or any(e.iter_seconds is None for e in w.epochs):
        return None
    batch = _steady_batch(w.epochs)
    out = _starts(rec, w.epochs, batch, max(w.settings.workers, 1))
    samples = sum(e.samples for e in w.epochs)
    persistent = w.settings.persistent_workers or w.settings.workers == 0
    shutdown, saved = _persistent_saving(w.epochs, persistent)
    run = sum(_span(e) for e in w.epochs)
    fits = _fits(rec)
    warm = sum((e.cold_read_seconds or 0.0) * e.merged for e in out) if fits is not False else 0.0
    return EpochStarts(
        epochs=out,
        batch_seconds=batch,
        run_seconds=run,
        samples=samples,
        end_to_end_samples_per_s=samples / run if run > 0 else 0.0,
        persistent=persistent,
        saved_seconds=saved if saved > 0 else None,
        predicted_samples_per_s=samples / (run - saved) if 0 < saved < run else None,
        warm_saved_seconds=warm if warm > 0 else None,
        warm_predicted_samples_per_s=samples / (run - warm) if 0 < warm < run else None,
        fits_in_memory=fits,
        shutdown_seconds=shutdown,
    )


def _starts(rec: RunRecord, epochs: list[WatchEpoch], batch: float, lanes: int) -> list[EpochStart]:
    """Each entry's start (its mean epoch's), what it lost beyond a steady ``batch``, and
    what a cold first round cost."""
    means = [mean_epoch(e) for e in epochs]
    warm_rounds = [e.startup_sample_wall_seconds / lanes for e in means if _warm_round(e)]
    logged = _logged_batches(rec, lanes)
    out = []
    for e, mean in zip(epochs, means, strict=True):
        start = ((e.iter_seconds or 0.0) + (e.first_batch_seconds or 0.0)) / e.merged
        cold = None
        if _cold_round(mean):
            first, later = logged.get(e.index, (None, None)) if e.merged == 1 else (None, None)
            cold = _cold_read(mean, lanes, first, _warm_batch(mean, lanes, warm_rounds, later))
            cold = min(cold, start)
        out.append(
            EpochStart(
                index=e.index,
                seconds=start,
                workers_started=round(mean.workers_started),
                worker_startup_seconds=mean.worker_startup_seconds,
                lost_seconds=max(start - batch, 0.0),
                cold_read_seconds=cold,
                cold_read_bytes=round(mean.startup_read_bytes),
                merged=e.merged,
            )
        )
    return out


def _span(e: WatchEpoch) -> float:
    """An entry's time end to end: its ``iter()``, first batch, batches and end."""
    return (
        (e.iter_seconds or 0.0)
        + (e.first_batch_seconds or 0.0)
        + e.seconds
        + (e.end_seconds or 0.0)
    )


def _persistent_saving(epochs: list[WatchEpoch], persistent: bool) -> tuple[float | None, float]:
    """The mean shutdown at an epoch's end, and what ``persistent_workers`` saves over the
    run: the workers' start-up in every epoch after the first and every shutdown."""
    if persistent:
        return None, 0.0
    ended = [e for e in epochs if e.shutdown_seconds is not None]
    ends = sum(e.shutdown_seconds or 0.0 for e in ended)
    shutdown = ends / sum(e.merged for e in ended) if ended else None
    return shutdown, sum((e.worker_startup_seconds or 0.0) for e in epochs[1:]) + ends


def _steady_batch(epochs: list[WatchEpoch]) -> float:
    """The median time between a steady epoch's batches: an epoch of b batches has b - 1
    intervals between them; a merged entry, b - merged."""
    steps = [
        e.seconds / (e.batches - e.merged) for e in epochs if e.batches > e.merged and e.seconds > 0
    ]
    return statistics.median(steps) if steps else 0.0


def _cold_read(mean: WatchEpoch, lanes: int, first: float | None, warm: float) -> float:
    """What a cold first round cost beyond a warm batch. The round's batches were made side
    by side, one per worker: the first batch took its worker's time (the batch log's
    ``first``, for an epoch kept whole; else one worker's share of the round's); warm, a
    batch takes what the epoch's warm batches took."""
    made = first if first is not None else mean.startup_sample_wall_seconds / lanes
    return max(made - warm, 0.0)


def _cold_round(e: WatchEpoch) -> bool:
    """Whether the first round fetched its data from the device: a megabyte or more, and
    (where the round's read() bytes are known) a twentieth of them or more."""
    read = e.startup_read_chars
    return e.startup_read_bytes >= COLD_BYTES and (
        read <= 0 or e.startup_read_bytes >= COLD_SHARE * read
    )


def _warm_round(e: WatchEpoch) -> bool:
    return not _cold_round(e) and e.startup_samples > 0


def _logged_batches(rec: RunRecord, lanes: int) -> dict[int, tuple[float, float | None]]:
    """Per epoch in the batch log: the seconds its first batch took in its worker, and the
    median of its batches after the first round (None with none)."""
    w = rec.watch
    if w is None or w.batch_log is None:
        return {}
    rows: dict[int, list[float]] = {}
    for epoch, ms in zip(w.batch_log.epoch, w.batch_log.work_ms, strict=False):
        rows.setdefault(epoch, []).append(ms / 1e3)
    return {
        e: (v[0], statistics.median(v[lanes:]) if len(v) > lanes else None) for e, v in rows.items()
    }


def _warm_batch(e: WatchEpoch, lanes: int, warm_rounds: list[float], later: float | None) -> float:
    """What one batch of the first round would take with its reads in the page cache: the
    same epoch's later batches where the device served almost none of their reads (under a
    tenth of the bytes; their median from the batch log, else their mean), else another
    epoch's warm first round, else the round's own CPU time (a warm read is a copy: this
    leaves out only the kernel's work on the cold reads, so the saving it gives is a lower
    bound)."""
    later_chars = e.read_chars - e.startup_read_chars
    later_bytes = e.read_bytes - e.startup_read_bytes
    later_batches = e.batches - lanes
    if later_batches > 0 and later_chars > 0 and later_bytes < 0.1 * later_chars:
        if later is not None:
            return later
        return (e.sample_wall_seconds - e.startup_sample_wall_seconds) / later_batches
    if warm_rounds:
        return min(warm_rounds)
    return e.startup_sample_cpu_seconds / lanes


def _fits(rec: RunRecord) -> bool | None:
    """Whether an epoch's reads fit in the memory the host had available: a page cache can
    only hold the data if they do. None where either is unknown."""
    w, avail = rec.watch, rec.host.memory_available_bytes
    if w is None or not avail or not w.epochs:
        return None
    per_epoch = max(e.read_chars / e.merged for e in w.epochs)
    return per_epoch <= avail if per_epoch else None


def per_epoch_saving(starts: EpochStarts) -> float | None:
    """The seconds ``persistent_workers=True`` saves each epoch after the first: the mean
    start-up of the workers the later epochs started, or, with one epoch watched, the first
    epoch's (later epochs fork the same process and pay the same), plus the mean shutdown
    at an epoch's end; None where workers persist already."""
    if starts.persistent:
        return None
    later = [e for e in starts.epochs[1:] if e.worker_startup_seconds]
    start = (
        sum((e.worker_startup_seconds or 0.0) * e.merged for e in later)
        / sum(e.merged for e in later)
        if later
        else (starts.epochs[0].worker_startup_seconds if starts.epochs else None)
    )
    if start is None:
        return None
    return start + (starts.shutdown_seconds or 0.0)


@dataclasses.dataclass(frozen=True)
class WatchCost:
    """What watching cost the loader: the workers' time in ioprobe's own work, and the main
    process's at each epoch's start and end."""

    seconds: float  # over the run, all workers together
    per_batch_ms: float
    share: float  # of the workers' time on samples, collates and this
    # the main process's, per epoch (its start and end), and that over the epochs' time
    epoch_ms: float = 0.0
    epoch_share: float = 0.0
    # each spawned worker's import of the watch's worker module at its start: how many, and
    # the mean
    imports: int = 0
    import_ms: float = 0.0


def watch_cost(rec: RunRecord) -> WatchCost | None:
    """The workers' time in the watch's own work after each collate (counters read, mapped
    files listed, the batch's measurements packed), as they timed it, per batch and as a
    share of their time; and the main process's time in it at each epoch's start and end
    (the host's processes scanned, the GPU side's marks), per epoch and as a share of the
    epochs' time; and each spawned worker's import of the watch's worker module at its
    start (every epoch's start without persistent workers), per start: what watching took
    from the run beyond its per-batch clock reads. None where none was timed (records from
    before they were kept)."""
    w = rec.watch
    if w is None:
        return None
    eps = [e for e in w.epochs if e.workers_measured]
    spent = sum(e.watch_worker_seconds for e in eps)
    batches = sum(e.batches for e in eps)
    work = sum(e.sample_wall_seconds + e.collate_seconds for e in eps)
    main = sum(e.watch_main_seconds for e in w.epochs)
    epochs = sum(e.merged for e in w.epochs)
    wall = sum(e.seconds for e in w.epochs)
    workers = spent > 0 and batches > 0 and work > 0
    imports = sum(e.watch_imports for e in w.epochs)
    imported = sum(e.watch_import_seconds for e in w.epochs)
    if not workers and main <= 0 and not imports:
        return None
    return WatchCost(
        seconds=spent,
        per_batch_ms=spent / batches * 1e3 if workers else 0.0,
        share=spent / (work + spent) if workers else 0.0,
        epoch_ms=main / epochs * 1e3 if epochs else 0.0,
        epoch_share=main / wall if wall > 0 else 0.0,
        imports=imports,
        import_ms=imported / imports * 1e3 if imports else 0.0,
    )


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
    "WatchCost",
    "WorkerLatency",
    "epoch_count",
    "epoch_starts",
    "mean_epoch",
    "per_epoch_saving",
    "watch_cost",
    "worker_latency",
]

"""An IterableDataset's workers' streams: where one carries more than its share of the work,
the loader runs at its pace whatever its settings, and the advice is to deal the work out.

Each worker of an IterableDataset makes the batches of the items its own split of the
stream deals it, and the loader takes the workers' batches in turn. A straggler there
belongs to its worker's stream: the replay by batch (``loader_sim``) would move it where it
cannot go, and the stages' means would spread it over every worker. What the run does show
is each stream's work, and what the same batches would do dealt at random.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import statistics

from ioprobe import units
from ioprobe.analysis import loader_sim
from ioprobe.analysis.model import MIN_GAIN, PipelineFindings
from ioprobe.record import Recommendation, RunRecord

# A stream whose worker's mean batch takes over this many times the other workers' median
# one carries more than its share: the loader runs at its pace.
STREAM_IMBALANCE = 1.5


@dataclasses.dataclass(frozen=True)
class StreamImbalance:
    """An IterableDataset whose workers' streams carry unequal work: each worker makes its
    own stream's batches and the loader takes them in turn, so the slowest stream sets the
    pace, and no loader setting moves its items to another worker."""

    worker: int  # the slowest stream's worker
    slowest_ms: float  # its mean work per batch
    others_ms: float  # the other workers' mean work per batch, their median
    share: float  # its share of all the workers' work
    workers: int


def stream_imbalance(rec: RunRecord) -> StreamImbalance | None:
    """Where an IterableDataset's logged batches (``loader_sim.steady_batches``) show one
    worker's stream carrying over STREAM_IMBALANCE times the work of the others' (mean work
    per batch, its median over the other workers): that worker and the figures. Cheap: no
    replay runs. None for a map-style dataset, fewer than two workers, or no log to read."""
    idx, w = loader_sim.steady_batches(rec), rec.watch
    if idx is None or w is None or w.batch_log is None or not w.settings.iterable:
        return None
    if loader_sim.recorded_setting(rec) is None:  # not a DataLoader's: nothing to advise on
        return None
    log = w.batch_log
    by_worker: dict[int, list[float]] = {}
    for i in idx:
        by_worker.setdefault(log.worker[i], []).append(log.work_ms[i])
    if len(by_worker) < 2:
        return None
    means = {k: statistics.fmean(v) for k, v in by_worker.items()}
    slow = max(means, key=lambda k: (means[k], -k))
    others = statistics.median(v for k, v in means.items() if k != slow)
    if others <= 0 or means[slow] <= STREAM_IMBALANCE * others:
        return None
    total = sum(sum(v) for v in by_worker.values())
    return StreamImbalance(
        worker=slow,
        slowest_ms=means[slow],
        others_ms=others,
        share=sum(by_worker[slow]) / total if total > 0 else 0.0,
        workers=len(by_worker),
    )


def dealt_evenly_rate(rec: RunRecord) -> float | None:
    """The rate with the stream's work dealt evenly: dealt so, the slow batches still hold
    the in-order queue as any straggler does, and each stream still ends when its own
    items do, so it is the replay's (``loader_sim.simulate``) of this run's batches dealt
    at random to the workers' streams (``dealt_rate``) over its replay of them as logged,
    times the measured rate, and never below the measured rate. None where the record has
    nothing to replay."""
    run = _as_logged(rec)
    if run is None:
        return None
    return max(run.measured * dealt_rate(run.costs, run.setting) / run.was, run.measured)


SEEDS = (1, 2, 3)  # the random deals a balanced stream's prediction is the mean of


@dataclasses.dataclass(frozen=True)
class _Logged:
    """What every figure here is read against: the run's batches as logged, its setting, its
    measured rate and the replay's of it as run."""

    costs: loader_sim.Costs
    setting: loader_sim.Setting
    measured: float
    was: float


def _as_logged(rec: RunRecord) -> _Logged | None:
    """The run as logged, replayed; None where the record has nothing to replay."""
    c, base = loader_sim.logged_costs(rec), loader_sim.recorded_setting(rec)
    measured = rec.measured_samples_per_s
    if c is None or base is None or not measured:
        return None
    was = loader_sim.rate_of(c, base)
    return _Logged(c, base, measured, was) if 0 < was < float("inf") else None


def dealt_rate(c: loader_sim.Costs, s: loader_sim.Setting, seeds: int = len(SEEDS)) -> float:
    """The replay's rate under ``s`` of ``c``'s batches dealt at random to its workers'
    streams, the mean of the first ``seeds`` of ``SEEDS``' deals. One worker makes every
    batch in turn whatever the deal: one deal does."""
    deals = SEEDS[: seeds if s.workers > 1 else 1]
    return statistics.fmean(loader_sim.rate_of(_dealt_at_random(c, k, s.workers), s) for k in deals)


@functools.lru_cache(maxsize=64)
def _dealt_at_random(c: loader_sim.Costs, seed: int, workers: int) -> loader_sim.Costs:
    """``c`` with its batches in a random order (the consumer's steps as they were), dealt
    in turn to ``workers`` streams: the slow ones fall to the workers at random, as a stream
    split by item after shuffling its shards or items deals them, and each worker still
    makes its own stream's batches, so one that drew more slow ones ends its stream last."""
    order = list(range(len(c.cpu)))
    random.Random(seed).shuffle(order)
    return dataclasses.replace(
        c,
        blocked=tuple(c.blocked[i] for i in order),
        cpu=tuple(c.cpu[i] for i in order),
        streams=tuple(i % workers for i in range(len(order))),
        stream_workers=workers,
    )


def _kept_together(c: loader_sim.Costs, workers: int) -> loader_sim.Costs:
    """``c`` dealt to ``workers`` streams with the slowest stream's batches all in the first
    (a split that keeps the slow items together, as whole shards can), the others' dealt in
    turn over the rest."""
    work: dict[int, list[float]] = {}
    for k, b, u in zip(c.streams, c.blocked, c.cpu, strict=True):
        work.setdefault(k, []).append(b + u)
    slow = max(work, key=lambda k: statistics.fmean(work[k]))
    rest = itertools.count()
    dealt = tuple(0 if k == slow else 1 + next(rest) % (workers - 1) for k in c.streams)
    return dataclasses.replace(c, streams=dealt, stream_workers=workers)


def other_workers(rec: RunRecord, setting: loader_sim.Setting) -> loader_sim.Prediction | None:
    """A worker count other than the run's, for an IterableDataset whose streams carry
    unequal work (``stream_imbalance``): how the dataset splits its items over that many
    workers decides the rate, and the run cannot tell it. The prediction is the replay's
    of this run's batches dealt at random over them (the mean of ``SEEDS``' deals), and it
    states the rate with the slowest stream's batches kept on one worker beside it: the
    two ends of what a split by item and one by whole shard give. One worker makes every
    batch, whatever the split: its replay needs no range. None where the record has no
    imbalance, nothing to replay or the run's own worker count."""
    run = _as_logged(rec)
    if run is None or setting.workers == run.setting.workers or stream_imbalance(rec) is None:
        return None
    c, measured, was = run.costs, run.measured, run.was
    now = dealt_rate(c, setting)
    pred = measured * now / was
    said: tuple[str, ...] = ()
    if setting.workers > 1:
        kept = measured * loader_sim.rate_of(_kept_together(c, setting.workers), setting) / was
        said = (
            f"the dataset's split decides: {setting.workers} workers dealt this run's "
            "batches at random, as this figure; the slowest stream's kept on one worker, "
            f"{units.samples_per_s(kept)} samples/s ({kept / measured:.2f}x); `ioprobe tune` "
            "measures it",
        )
    return loader_sim.Prediction(setting, pred, pred / measured, now, said)


def balanced_setting(rec: RunRecord) -> loader_sim.Prediction | None:
    """The loader setting to apply with the streams dealt out: with the slow items dealt
    evenly, the stream no longer sets the pace, and more workers, a deeper queue or
    ``in_order=False`` act as on any loader whose samples are slow at random. Every candidate
    (``loader_sim.candidates``) is replayed on this run's batches dealt at random to its
    workers' streams (``dealt_rate``: one deal for the search, and the mean of ``SEEDS``'
    deals for those within SEARCH_SPREAD of its best) against the replay as logged, times
    the measured rate; the setting kept is ``loader_sim.best``'s, and only where it gains
    MIN_GAIN over the run's own setting dealt so. None otherwise, or where the record has
    nothing to replay."""
    run = _as_logged(rec)
    if run is None:
        return None
    c, base, measured, was = run.costs, run.setting, run.measured, run.was

    def predict(s: loader_sim.Setting, seeds: int) -> loader_sim.Prediction:
        now = dealt_rate(c, s, seeds)
        return loader_sim.Prediction(
            s,
            measured * now / was,
            now / was,
            now,
            loader_sim.assumptions(c, base, s),
            loader_sim.memory(c, s),
            loader_sim.fits(c, s, base),
        )

    tried = sorted(
        (predict(s, 1) for s in loader_sim.candidates(base, c)), key=loader_sim.preference(base)
    )
    high = max(tried, key=lambda p: p.samples_per_s, default=None)
    if high is None:
        return None
    close = [p for p in tried if p.samples_per_s >= SEARCH_SPREAD * high.samples_per_s]
    again = {p.setting for p in close[:SEARCH_KEPT]} | {high.setting}
    top = loader_sim.best([predict(s, len(SEEDS)) for s in again], base)
    if top is None or top.setting == base:
        return None
    return top if top.samples_per_s >= MIN_GAIN * predict(base, len(SEEDS)).samples_per_s else None


# A search over one deal keeps the cheapest SEARCH_KEPT settings within this share of its
# best (in ``loader_sim.preference``'s order), and the best, for the mean of every deal:
# one deal's luck moves a rate by about a tenth, and ``loader_sim.best`` keeps the
# cheapest setting near the best.
SEARCH_SPREAD, SEARCH_KEPT = 0.9, 8


def stream_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """An IterableDataset whose workers' streams carry unequal work: deal the work out.

    Each worker makes its own stream's batches and the loader takes them in turn, so the
    slowest stream sets the pace (``stream_imbalance``). More workers, a deeper
    queue or ``in_order=False`` cannot move its items to another worker: how the dataset
    splits its items among workers decides what they do, so no loader setting is advised
    alone. The prediction is the replay's of the run's batches dealt at random, within the
    stage model's rate (the stages at their means). Once the items are dealt out, a loader
    setting acts as on any loader: where one gains beside the deal (``balanced_setting``),
    the advice is the two together, with the replay's figure for both."""
    imb = stream_imbalance(rec)
    evenly = dealt_evenly_rate(rec) if imb is not None else None
    measured = rec.measured_samples_per_s
    if imb is None or evenly is None or measured is None:
        return []
    pred = min(evenly, pf.predicted_samples_per_s)
    if pred < MIN_GAIN * measured:  # the stage model's rate is the balanced one
        return []
    others = "the other worker's" if imb.workers == 2 else "the other workers' (median)"
    text = (
        f"Deal the slow items across the workers' streams: worker {imb.worker}'s "
        f"batches take {imb.slowest_ms:,.0f} ms of work each against "
        f"{imb.others_ms:,.0f} ms for {others} ({units.percent(imb.share)} of the "
        f"{imb.workers} workers' work). An IterableDataset gives each worker "
        "the items its own split deals it, so the loader runs at its slowest "
        "stream's pace, and num_workers, prefetch_factor or in_order=False cannot "
        "move them. Split the stream by item, each worker keeping every n-th item after "
        "the shards are read: this run's batches replayed dealt at random predict "
        f"{pred / measured - 1:+.0%}. A shard list shuffled before the split deals whole "
        f"shards and gains less the fewer shards each worker gets{_shard_shuffle(rec)}."
    )
    out = Recommendation(
        kind="balance_streams",
        text=text
        + " What other worker counts do depends on that split: `ioprobe tune` measures them.",
        predicted_samples_per_s=pred,
        evidence=(
            f"worker {imb.worker}: {imb.slowest_ms:,.0f} ms of work per batch, the others "
            f"{imb.others_ms:,.0f} ms"
        ),
    )
    both, base = balanced_setting(rec), loader_sim.recorded_setting(rec)
    return [out if both is None or base is None else _paired(out, text, both, base)]


def _paired(
    alone: Recommendation, text: str, both: loader_sim.Prediction, base: loader_sim.Setting
) -> Recommendation:
    """The stream advice ``alone`` with the loader setting ``both`` (``balanced_setting``)
    paired with the deal: the text says what to set beside it, and the prediction, change
    and assumptions are the two together's."""
    moved = both.setting.changes(base)
    sets = ", ".join(f"{name}={now}" for name, _, now in moved)
    return dataclasses.replace(
        alone,
        text=text
        + (
            f" Dealt so, the stream no longer sets the pace and the queue can: set {sets} "
            f"(now {', '.join(was for _, was, _ in moved)}) with it, and the same batches "
            f"replayed predict {both.gain - 1:+.0%} for the two together (the split decides "
            "what other worker counts do: `ioprobe tune` measures them)."
        ),
        predicted_samples_per_s=both.samples_per_s,
        change=both.setting.change(base),
        unchecked=list(both.assumptions),
    )


def _shard_shuffle(rec: RunRecord) -> str:
    """What WebDataset's own shard shuffle does, for a WebDataset's advice: it shuffles each
    worker's shards after the split (``shardshuffle``), so it moves none between them."""
    w = rec.watch
    if w is None or w.settings.dataset != "WebDataset":
        return ""
    return (
        " (WebDataset's shardshuffle shuffles each worker's own shards after the split and "
        "moves none; shuffle the URL list before building the dataset, or use resampled=True)"
    )


__all__ = [
    "STREAM_IMBALANCE",
    "StreamImbalance",
    "balanced_setting",
    "dealt_evenly_rate",
    "dealt_rate",
    "other_workers",
    "stream_imbalance",
    "stream_rule",
]

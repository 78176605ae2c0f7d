"""Before and after: what changed between two records, and whether the prediction held.

``ioprobe compare A.json B.json`` answers "did the change work, and was the tool right": each
stage's capacity and the delivered rate side by side, the configuration that differs, and,
when B applied one of A's recommendations, that recommendation's predicted rate against the
rate B measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ioprobe.analysis import dali_queue
from ioprobe.analysis.epochs import epoch_starts
from ioprobe.analysis.scenario import recorded_cores, recorded_gpus, recorded_workers
from ioprobe.analysis.streams import stream_imbalance
from ioprobe.errors import BadInputError
from ioprobe.record import STAGE_NAMES, Change, Recommendation, RunRecord, StageName

# a recorded core count within this of the recommended one counts as applied: affinity
# masks and cgroup quotas rarely land on the exact integer
CORES_TOLERANCE = 0.5


@dataclass
class StageChange:
    stage: StageName
    before: float | None
    after: float | None
    ratio: float | None  # after / before


@dataclass
class ConfigChange:
    what: str
    before: str
    after: str


@dataclass
class AppliedCheck:
    """One of A's recommendations that B carried out, and how its prediction fared."""

    kind: str
    text: str
    how: str  # how the match was made
    predicted_samples_per_s: float
    measured_samples_per_s: float
    predicted_gain: float | None  # predicted / A's rate
    measured_gain: float | None  # B's rate / A's rate
    error: float  # (measured - predicted) / predicted
    end_to_end: bool = False  # both rates end to end, epoch starts and ends included


@dataclass
class Comparison:
    before: str
    after: str
    basis: str  # "measured" or "predicted": which rate both sides are compared on
    rate_before: float | None
    rate_after: float | None
    rate_ratio: float | None
    bottleneck_before: StageName
    bottleneck_after: StageName
    idle_before: float | None
    idle_after: float | None
    stages: list[StageChange] = field(default_factory=list)
    config: list[ConfigChange] = field(default_factory=list)
    applied: AppliedCheck | None = None
    warnings: list[str] = field(default_factory=list)


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None


def _loader(rec: RunRecord, key: str) -> str | None:
    return rec.watch.loader.get(key) if rec.watch is not None else None


def config_changes(a: RunRecord, b: RunRecord) -> list[ConfigChange]:
    """The recorded settings that differ: workers, cores, GPUs, loader options, storage."""
    pairs: list[tuple[str, object, object]] = [
        ("dataset", a.dataset.target, b.dataset.target),
        ("num_workers", recorded_workers(a), recorded_workers(b)),
        ("usable cores", f"{recorded_cores(a):g}", f"{recorded_cores(b):g}"),
        ("GPUs", recorded_gpus(a), recorded_gpus(b)),
    ]
    for key in ("batch_size", "pin_memory", "prefetch_factor", "persistent_workers", "sampler"):
        pairs.append((key, _loader(a, key), _loader(b, key)))
    fa, fb = a.host.filesystem, b.host.filesystem
    pairs.append(("storage", fa.device_class if fa else None, fb.device_class if fb else None))
    pairs.append(("host", a.host.hostname, b.host.hostname))
    return [
        ConfigChange(what, str(x), str(y))
        for what, x, y in pairs
        if x != y and x is not None and y is not None
    ]


def _matches(r: Recommendation, b: RunRecord) -> str | None:
    """How B shows it carried out ``r``, or None. Only what a record states can match:
    worker, core and GPU counts, the prefetch factor and the order; storage, caches and
    decoders need ``--applied``."""
    c = r.change
    if c is None or not _counts_only(c):
        return None
    if r.kind == "balance_streams" and stream_imbalance(b) is not None:
        return None  # the setting came without the deal: B's streams are as unequal
    how = _counts_applied(c, b)
    return ", ".join(how) if how else None


def _counts_only(c: Change) -> bool:
    """``c`` changes nothing but worker, core and GPU counts and the DataLoader's queue."""
    return (
        c.storage is None
        and c.cache_bytes is None
        and not c.gpu_decode
        and not c.pcie
        and not c.decode
    )


def _counts_applied(c: Change, b: RunRecord) -> list[str] | None:
    """Each count ``c`` sets that B's record shows, as a phrase; None when B contradicts one."""
    how = []
    dali = dali_queue.recorded_setting(b)  # a DALI pipeline's threads and queue depth
    if c.workers is not None:
        if recorded_workers(b) != c.workers:
            return None
        how.append(f"{'num_threads' if dali else 'num_workers'} {c.workers}")
    if c.cores is not None:
        if recorded_cores(b) + CORES_TOLERANCE < c.cores:
            return None
        how.append(f"{recorded_cores(b):g} cores")
    if c.gpus is not None:
        if recorded_gpus(b) != c.gpus:
            return None
        how.append(f"{c.gpus} GPUs")
    settings = b.watch.settings if b.watch is not None else None
    if c.prefetch_factor is not None:
        depth = dali.prefetch_factor if dali else settings and (settings.prefetch_factor or 2)
        if depth != c.prefetch_factor:
            return None
        how.append(f"{'prefetch_queue_depth' if dali else 'prefetch_factor'} {depth}")
    if c.in_order is not None:
        if settings is None or settings.in_order != c.in_order:
            return None
        how.append(f"in_order={c.in_order}")
    return how


def applied_check(
    a: RunRecord, b: RunRecord, rate_a: float | None, rate_b: float | None, kind: str | None
) -> AppliedCheck | None:
    """The recommendation of A that B applied (named by ``kind``, else found from B's
    recorded settings) with its predicted rate against B's rate."""
    if rate_b is None:
        return None
    chosen = _applied(a, b, kind)
    if chosen is None:
        return None
    r, how = chosen
    pred = r.predicted_samples_per_s
    if pred is None or pred <= 0:
        return None
    e2e = _end_to_end(a, b, r)
    if e2e is not None:
        rate_a, rate_b = e2e
    return AppliedCheck(
        kind=r.kind,
        text=r.text,
        how=how,
        predicted_samples_per_s=pred,
        measured_samples_per_s=rate_b,
        predicted_gain=_ratio(rate_a, pred),
        measured_gain=_ratio(rate_a, rate_b),
        error=(rate_b - pred) / pred,
        end_to_end=e2e is not None,
    )


def _end_to_end(a: RunRecord, b: RunRecord, r: Recommendation) -> tuple[float, float] | None:
    """A's and B's end-to-end rates (each epoch from its ``iter()`` to its end, start-ups
    and shutdowns included), where ``r`` predicted an end-to-end rate (it states its own
    baseline: ``persistent_workers``, a loader setting weighed over short epochs): held to
    B's steady rate it would count the saved start-ups twice, or miss them. None where
    either record has no epochs timed from their ``iter()``."""
    if r.baseline_samples_per_s is None:
        return None
    ea, eb = epoch_starts(a), epoch_starts(b)
    if ea is None or eb is None or not eb.end_to_end_samples_per_s:
        return None
    return ea.end_to_end_samples_per_s, eb.end_to_end_samples_per_s


def _applied(a: RunRecord, b: RunRecord, kind: str | None) -> tuple[Recommendation, str] | None:
    """A's recommendation that B carried out, and how that is known: the one named ``kind``,
    else the first whose change B's recorded counts show."""
    if kind is not None:
        return _named(a, kind), "named with --applied"
    for r in a.recommendations:
        how = _matches(r, b)
        if how is not None:
            return r, f"the second run has {how}"
    return None


def _named(a: RunRecord, kind: str) -> Recommendation:
    """A's first recommendation of ``kind``; a user error when it has none."""
    found = [r for r in a.recommendations if r.kind == kind]
    if not found:
        kinds = ", ".join(r.kind for r in a.recommendations) or "none"
        raise BadInputError(
            f"--applied {kind}: the first record has no such recommendation (it has: {kinds})"
        )
    return found[0]


def compare(
    a: RunRecord, b: RunRecord, *, names: tuple[str, str], applied: str | None = None
) -> Comparison:
    """Everything ``ioprobe compare`` shows for A (before) and B (after)."""
    for rec, name in zip((a, b), names, strict=True):
        if rec.kind == "size":
            raise BadInputError(f"{name}: a size record holds a table, not a run; compare runs")
    measured = a.measured_samples_per_s is not None and b.measured_samples_per_s is not None
    if measured:
        rate_a, rate_b, basis = a.measured_samples_per_s, b.measured_samples_per_s, "measured"
    else:
        rate_a, rate_b, basis = a.predicted_samples_per_s, b.predicted_samples_per_s, "predicted"
    ca, cb = a.stages.capacities(), b.stages.capacities()
    check = applied_check(a, b, rate_a, rate_b, applied) if measured or applied else None
    return Comparison(
        before=names[0],
        after=names[1],
        basis=basis,
        rate_before=rate_a,
        rate_after=rate_b,
        rate_ratio=_ratio(rate_a, rate_b),
        bottleneck_before=a.bottleneck,
        bottleneck_after=b.bottleneck,
        idle_before=a.gpu_idle_fraction,
        idle_after=b.gpu_idle_fraction,
        stages=[StageChange(s, ca[s], cb[s], _ratio(ca[s], cb[s])) for s in STAGE_NAMES],
        config=config_changes(a, b),
        applied=check,
        warnings=_warnings(a, b, measured),
    )


def _warnings(a: RunRecord, b: RunRecord, measured: bool) -> list[str]:
    """What makes A and B less than like for like."""
    warnings = []
    if a.dataset.target != b.dataset.target:
        warnings.append("the two records read different datasets")
    if a.kind != b.kind:
        warnings.append(
            f"a {a.kind} record against a {b.kind} record: rates are comparable, methods differ"
        )
    if not measured:
        warnings.append("not both runs measured a delivered rate: comparing the model's rates")
    return warnings

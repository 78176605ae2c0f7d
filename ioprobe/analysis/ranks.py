"""A loader watched in every rank of a data-parallel job: each rank's figures, the job's
record, the spread across ranks, the stragglers and what the slowest rank costs everyone.

Each rank of a job run under ``torchrun`` or ``srun`` watches its own loader and makes its own
record (``WatchData.rank`` says which rank). ``merge_ranks`` takes the records of one loader
from every rank and makes one: the slowest rank's record (``slowest_rank``; the lowest
rank's where none stands out) with ``distributed`` filled, each rank's figures
(``rank_figures``, each with its own verdict) in it. In synchronous data-parallel training
every step waits for the slowest rank, so a rank that waits for its data holds back the
whole job: the exposed wait is that cost, step by step, and the job's verdict is that rank's. ``rank_spread`` reads the merged record and names
the stragglers and their cause. Nothing here measures; docs/watch.md (section "Under DDP")
states the rules and their thresholds.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Literal

from ioprobe import units
from ioprobe.analysis.epochs import worker_latency
from ioprobe.analysis.measures import percentile, share_text
from ioprobe.record import (
    BatchLog,
    Distributed,
    LoaderSettings,
    RankFigures,
    RankInfo,
    RunRecord,
    WatchData,
)

Cause = Literal["storage", "cpu", "node", "unknown"]

# A straggler stalls more than the other ranks' median by at least STRAGGLER_MARGIN (a share
# of its wall time) or MAD_FACTOR median absolute deviations of their stalls, whichever is
# more, and at least STRAGGLER_RATIO times their median: ranks that all wait a little, or
# all a lot, have no straggler.
STRAGGLER_MARGIN = 0.05
MAD_FACTOR = 3.0
STRAGGLER_RATIO = 2.0
# Without a verdict of its own to name the cause, a straggler's CPU time per sample (or its
# storage's rate) must differ from the median rank's by this factor to be named.
EVIDENCE_RATIO = 1.5
NAMED = 3  # stragglers the sentence names; the rest are counted
PREFETCH_DEFAULT = 2  # a DataLoader's prefetch_factor when its workers run


@dataclasses.dataclass(frozen=True)
class Straggler:
    """A rank whose stall stands far above the others', and why."""

    rank: int
    host: str
    stall_fraction: float
    median_stall: float  # the other ranks' median
    cause: Cause
    evidence: str


@dataclasses.dataclass(frozen=True)
class RankSpread:
    """How a watched job's ranks differ: their stall and data-ready latency, the stragglers,
    and the wait the slowest rank exposed to the whole job."""

    ranks: int  # ranks with loader figures
    stall_median: float
    stall_min: float
    stall_max: float
    ready_p99_median_ms: float | None
    ready_p99_max_ms: float | None
    stragglers: list[Straggler]
    exposed_fraction: float | None
    exposed_wait_seconds: float | None
    text: str


def first_round(settings: LoaderSettings) -> int:
    """Batches the loader hands out at each epoch's ``iter()``, before the consumer asks for
    any: ``num_workers x prefetch_factor`` (one where the main process loads). They wait for
    the workers' start-up and come bunched, so they say nothing of the steady wait."""
    if settings.workers < 1:
        return 1
    return settings.workers * (settings.prefetch_factor or PREFETCH_DEFAULT)


def _positions(log: BatchLog) -> list[int]:
    """Each logged batch's position within its epoch (0 for an epoch's first batch)."""
    seen: dict[int, int] = {}
    out = []
    for e in log.epoch:
        out.append(seen.get(e, 0))
        seen[e] = out[-1] + 1
    return out


def steady_steps(w: WatchData) -> dict[tuple[int, int], tuple[float, float]]:
    """The logged batches past each epoch's first round, by (epoch, position in it): the
    consumer's wait for the batch in ``next()`` and the time since the previous batch's
    arrival (the step that batch ended: the previous step's work, then this wait)."""
    log = w.batch_log
    if log is None:
        return {}
    skip = first_round(w.settings)  # at least 1: the first batch has no previous arrival
    out = {}
    for i, k in enumerate(_positions(log)):
        if k >= skip:
            wait = max(log.arrival[i] - log.request[i], 0.0)
            out[(log.epoch[i], k)] = (wait, max(log.arrival[i] - log.arrival[i - 1], 0.0))
    return out


def rank_figures(rec: RunRecord) -> RankFigures:
    """One rank's figures from the record its loader made: where it ran, its stall (time
    blocked in ``next()`` over the time from each epoch's first batch to its last, as the
    record's host-clock idle share), its step (the median time between batch arrivals) and
    its data-ready latency (how long ``next()`` blocked, 50th/95th/99th percentile), both
    past each epoch's first round (``first_round``); each worker's median batch time from
    ``epochs.worker_latency``; its stages' CPU time per sample and storage rate, and its
    verdict where the record was judged (a predicted rate is what judging sets)."""
    w = rec.watch
    info = w.rank if w is not None else None
    out = RankFigures(
        rank=info.rank if info is not None else 0,
        host=rec.host.hostname,
        local_rank=info.local_rank if info is not None else 0,
        read_bytes=rec.dataset.bytes,
        read_bytes_per_s=rec.stages.storage.read_bytes_per_s,
        storage_samples_per_s=rec.stages.storage.capacity_samples_per_s,
        cpu_seconds_per_sample=rec.stages.cpu.cpu_seconds_per_sample,
        cpu_samples_per_s=rec.stages.cpu.capacity_samples_per_s,
        usable_cores=rec.host.usable_cores,
        samples_per_s=rec.measured_samples_per_s,
        bottleneck=rec.bottleneck if rec.predicted_samples_per_s > 0 else None,
    )
    if w is None:
        return out
    wall = sum(e.seconds for e in w.epochs)
    out.samples = sum(e.samples for e in w.epochs)
    out.wall_seconds = wall if wall > 0 else None
    out.stall_fraction = sum(e.stall_seconds for e in w.epochs) / wall if wall > 0 else None
    steps = steady_steps(w)
    ready = [wait * 1e3 for wait, _ in steps.values()] or list(w.stall_ms.values)
    gaps = [gap * 1e3 for _, gap in steps.values()] or [
        # b batches make b - 1 steps in an epoch; in an entry merging epochs, b - merged
        e.seconds / (e.batches - e.merged) * 1e3
        for e in w.epochs
        if e.batches > e.merged
    ]
    if gaps:
        out.step_ms = statistics.median(gaps)
    if ready:
        out.ready_ms_p50 = percentile(ready, 0.5)
        out.ready_ms_p95 = percentile(ready, 0.95)
        out.ready_ms_p99 = percentile(ready, 0.99)
    out.worker_batch_ms_p50 = {str(lat.worker): lat.p50_ms for lat in worker_latency(rec)}
    return out


def _delivered(rec: RunRecord) -> int:
    return sum(e.batches for e in rec.watch.epochs) if rec.watch is not None else 0


def _info(rec: RunRecord) -> RankInfo | None:
    return rec.watch.rank if rec.watch is not None else None


def merge_ranks(records: Sequence[RunRecord]) -> RunRecord:
    """One record for a loader watched in every rank of a job: the slowest rank's record
    (``slowest_rank``; the lowest rank's where no rank stands out), so that its stages,
    verdict and advice are the job's, with ``distributed`` holding each rank's figures
    (sorted by rank), the hosts they ran on, the ranks of the world with no record or one
    that delivered no batch (``missing_ranks``), the exposed wait (``exposed_wait``) and
    which rank's record it is (``verdict_rank``). A rank seen twice (a restarted worker)
    counts by its record that delivered the most batches. A single record comes back unchanged: a
    one-rank world behaves as a run without a launcher. Raises ValueError for no records,
    or several of which one carries no rank (they are not one job's)."""
    if not records:
        raise ValueError("no records to merge")
    if len(records) == 1:
        return records[0]
    infos = [_info(r) for r in records]
    if any(i is None for i in infos):
        raise ValueError("records without a rank are not one distributed job's")
    by_rank: dict[int, RunRecord] = {}
    for rec in records:
        info = _info(rec)
        assert info is not None
        kept = by_rank.get(info.rank)
        if kept is None or _delivered(rec) > _delivered(kept):
            by_rank[info.rank] = rec
    present = {r: rec for r, rec in sorted(by_rank.items()) if _delivered(rec) > 0}
    first = by_rank[min(present or by_rank)]
    world = max(i.world_size for i in infos if i is not None)
    figures = [rank_figures(rec) for rec in present.values()]
    hosts: list[str] = []
    for f in figures:
        if f.host not in hosts:
            hosts.append(f.host)
        f.node = hosts.index(f.host)
    judged = slowest_rank(figures)
    base = present[judged] if judged is not None else first
    base_info = _info(base)
    assert base_info is not None
    exposed, fraction, aligned = exposed_wait(list(present.values()))
    dist = Distributed(
        launcher=base_info.launcher,
        world_size=world,
        nodes=max(len(hosts), base_info.nodes or 0),
        hosts=hosts,
        ranks=figures,
        missing_ranks=[r for r in range(world) if r not in present],
        exposed_wait_seconds=exposed,
        exposed_fraction=fraction,
        steps_aligned=aligned,
        verdict_rank=base_info.rank,
    )
    return dataclasses.replace(base, distributed=dist)


def slowest_rank(ranks: Sequence[RankFigures]) -> int | None:
    """The rank whose record stands for the job: the most stalled straggler (``stragglers``),
    since in synchronous data-parallel training every step ends when the slowest rank has
    its batch, so its loader's stages set the job's rate and the change that speeds it is
    the one that speeds the job; the other ranks wait for it in their collectives, which
    their own records count as training time. None where no rank stands out: the ranks
    are alike, and the lowest stands for them."""
    found = stragglers([f for f in ranks if f.stall_fraction is not None])
    return found[0].rank if found else None


def exposed_wait(records: Sequence[RunRecord]) -> tuple[float | None, float | None, int]:
    """The wait the slowest rank exposed to the job, its share of the job's time, and the
    steps compared. In synchronous data-parallel training a step ends when every rank has
    done it, so step k costs the job the longest of the ranks' waits for their batch k.
    The ranks' batch logs (each run's first batches) are aligned by epoch and position in
    it, past each epoch's first round, on the steps every rank logged; the longest wait of
    each step is summed, over the longest of the ranks' times across those same steps (from
    the batch before each to its arrival). (None, None, 0) with fewer than two ranks' logs or
    no step in common."""
    steps = [steady_steps(r.watch) for r in records if r.watch is not None]
    if len(steps) < 2 or any(not s for s in steps):
        return None, None, 0
    common = set(steps[0]).intersection(*steps[1:])
    if not common:
        return None, None, 0
    exposed = sum(max(s[k][0] for s in steps) for k in common)
    wall = max(sum(s[k][1] for k in common) for s in steps)
    return exposed, min(exposed / wall, 1.0) if wall > 0 else None, len(common)


def rank_spread(rec: RunRecord) -> RankSpread | None:
    """The spread of a merged record's ranks: their stall (median, least, most) and 99th
    percentile data-ready latency, the stragglers with their cause (``stragglers``), the
    exposed wait, and a sentence that says it. None for a record of one process, or with
    fewer than two ranks that have loader figures."""
    d = rec.distributed
    if d is None:
        return None
    ranks = [f for f in d.ranks if f.stall_fraction is not None]
    if len(ranks) < 2:
        return None
    stalls = [_stall(f) for f in ranks]
    p99 = [f.ready_ms_p99 for f in ranks if f.ready_ms_p99 is not None]
    found = stragglers(ranks)
    return RankSpread(
        ranks=len(ranks),
        stall_median=statistics.median(stalls),
        stall_min=min(stalls),
        stall_max=max(stalls),
        ready_p99_median_ms=statistics.median(p99) if p99 else None,
        ready_p99_max_ms=max(p99) if p99 else None,
        stragglers=found,
        exposed_fraction=d.exposed_fraction,
        exposed_wait_seconds=d.exposed_wait_seconds,
        text=_sentence(stalls, found, d.exposed_fraction, d.verdict_rank),
    )


def rank_verdict(f: RankFigures, spread: RankSpread | None) -> str:
    """A rank's verdict as the per-rank table states it: its loader's own, except the
    GPU-bound verdict of a rank that is no straggler where the job has stragglers. In a
    synchronous job every rank waits in the collective for the slowest, so such a rank's
    step holds the stragglers' wait and its GPU stage reads as slow as their pace: it waits
    on them, not on its own GPU. "-" where the rank was not judged."""
    if f.bottleneck is None:
        return "-"
    slow = sorted(s.rank for s in spread.stragglers) if spread is not None else []
    if f.bottleneck != "gpu" or not slow or f.rank in slow:
        return f.bottleneck
    if len(slow) > 2:
        return f"waits on {len(slow)} stragglers"
    return f"waits on rank{'s' * (len(slow) > 1)} {', '.join(map(str, slow))}"


def _stall(f: RankFigures) -> float:
    return f.stall_fraction or 0.0


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def stragglers(ranks: Sequence[RankFigures]) -> list[Straggler]:
    """The ranks whose stall stands above the other ranks' (each compared with the rest, so
    that in a world of two the slow rank does not pull the median up to itself): above their
    median by more than ``max(STRAGGLER_MARGIN, MAD_FACTOR x their median absolute
    deviation)`` and at least ``STRAGGLER_RATIO`` times their median. Most stalled first.
    The cause: "node" where every rank on its host (two or more) is a straggler and ranks
    ran on other hosts too; else its own verdict where that is storage or CPU; else the one
    its figures show against the median rank's (``EVIDENCE_RATIO``); else "unknown"."""
    slow: list[tuple[RankFigures, float]] = []
    for f in ranks:
        others = [_stall(g) for g in ranks if g is not f]
        ref = statistics.median(others)
        mad = statistics.median(abs(s - ref) for s in others)
        if _stall(f) > ref + max(STRAGGLER_MARGIN, MAD_FACTOR * mad) and (
            _stall(f) >= STRAGGLER_RATIO * ref
        ):
            slow.append((f, ref))
    flagged = {f.rank for f, _ in slow}
    out = []
    for f, ref in sorted(slow, key=lambda p: (-_stall(p[0]), p[0].rank)):
        cause, evidence = _cause(f, ranks, flagged)
        out.append(Straggler(f.rank, f.host, _stall(f), ref, cause, evidence))
    return out


def _cause(f: RankFigures, ranks: Sequence[RankFigures], flagged: set[int]) -> tuple[Cause, str]:
    mates = [g for g in ranks if g.host == f.host]
    away = [g for g in ranks if g.host != f.host]
    rest = [_stall(g) for g in away]
    if rest and len(mates) > 1 and all(g.rank in flagged for g in mates):
        names = ", ".join(str(g.rank) for g in mates)
        return "node", (
            f"every rank on {f.host} ({names}) stalls, against a median of "
            f"{share_text(statistics.median(rest))} on the other hosts"
        )
    # in a synchronous job only the slowest rank of a slow node waits on its loader: its
    # mates wait in the collective for it, so a mate counts when its own reads or CPU are as
    # slow against the other hosts' ranks
    held = {g.rank: _held_back(g, away) for g in mates if g.rank not in flagged}
    if rest and len(mates) > 1 and all(g.rank in flagged or held.get(g.rank) for g in mates):
        said = "; ".join(
            f"rank {g.rank} {held[g.rank]}" if g.rank in held else f"rank {g.rank} stalls"
            for g in mates
        )
        return "node", f"every rank on {f.host} is slow against the other hosts': {said}"
    others = [g for g in ranks if g is not f]
    cpu = _cpu_evidence(f, others)
    storage = _storage_evidence(f, others)
    if f.bottleneck == "cpu":
        return "cpu", cpu[1] if cpu else "its loader is CPU-bound by its own verdict"
    if f.bottleneck == "storage":
        return "storage", storage[
            1
        ] if storage else "its loader is storage-bound by its own verdict"
    if cpu is not None and cpu[0] >= EVIDENCE_RATIO:
        return "cpu", cpu[1]
    if storage is not None and storage[0] >= EVIDENCE_RATIO:
        return "storage", storage[1]
    verdict = f"its loader's own verdict is {f.bottleneck}" if f.bottleneck else "no verdict"
    return "unknown", (
        f"{verdict}, and neither its CPU time per sample nor its storage rate is "
        f"{EVIDENCE_RATIO:g}x the median rank's"
    )


def _held_back(f: RankFigures, away: Sequence[RankFigures]) -> str | None:
    """Why ``f`` is slow against the ranks on other hosts (its storage or CPU at least
    ``EVIDENCE_RATIO`` times theirs), in its evidence's words less their subject; None where
    it is not."""
    for found in (_storage_evidence(f, away), _cpu_evidence(f, away)):
        if found is not None and found[0] >= EVIDENCE_RATIO:
            return found[1].removeprefix("it ").replace("its ", "", 1)
    return None


def _cpu_evidence(f: RankFigures, others: Sequence[RankFigures]) -> tuple[float, str] | None:
    """How many times the median other rank's CPU time one of its samples takes, and that
    in words; None where either is unknown."""
    ref = _median([g.cpu_seconds_per_sample for g in others])
    mine = f.cpu_seconds_per_sample
    if mine is None or not ref:
        return None
    ratio = mine / ref
    text = (
        f"samples take {ratio:.3g}x the median rank's CPU time: "
        f"{mine * 1e3:.3g} ms against {ref * 1e3:.3g} ms"
    )
    cores = _median([g.usable_cores for g in others])
    if f.usable_cores is not None and cores is not None and f.usable_cores < cores:
        text += f", on {f.usable_cores} cores against {cores:g}"
    return ratio, text


def _storage_evidence(f: RankFigures, others: Sequence[RankFigures]) -> tuple[float, str] | None:
    """How many times slower its storage is than the median other rank's (its rate in
    samples/s; bytes/s in words where both are known), and that in words; None where its
    own rate is unknown. The other ranks' storage not limiting at all counts as infinitely
    faster."""
    mine = f.storage_samples_per_s
    if not mine:
        return None
    rates = [g.storage_samples_per_s for g in others]
    if all(r is None for r in rates):
        return float("inf"), (
            f"its workers wait on reads ({mine:.3g} samples/s at most); the other ranks' never do"
        )
    ref = statistics.median(r if r is not None else float("inf") for r in rates)
    ratio = ref / mine
    mine_b, ref_b = f.read_bytes_per_s, _median([g.read_bytes_per_s for g in others])
    if mine_b and ref_b:
        return ratio, (
            f"it reads {units.bandwidth(mine_b)} against the median rank's {units.bandwidth(ref_b)}"
        )
    return ratio, f"its storage gives {mine:.3g} samples/s against the median rank's {ref:.3g}"


_CAUSE_WORDS: dict[Cause, str] = {
    "cpu": "its CPU",
    "storage": "its storage",
    "node": "its node",
    "unknown": "cause unclear",
}


def _sentence(
    stalls: list[float], found: list[Straggler], exposed: float | None, judged: int | None = None
) -> str:
    """E.g. "rank 1 (host-b) stalls 43% against a median of 2%: its CPU (samples take 3.1x
    the median rank's CPU time ...); the job loses 38% of its time to the slowest rank's
    data; the job's verdict and advice are rank 1's, the rank it waits for". ``judged`` is
    the rank whose record the merged one is (``Distributed.verdict_rank``): named where a
    straggler was, since then it is not simply the first rank."""
    parts = [
        f"rank {s.rank} ({s.host or 'unknown host'}) stalls {share_text(s.stall_fraction)} against a "
        f"median of {share_text(s.median_stall)}: {_CAUSE_WORDS[s.cause]} ({s.evidence})"
        for s in found[:NAMED]
    ]
    if len(found) > NAMED:
        parts.append(f"{len(found) - NAMED} more ranks stall as far above the rest")
    if not found:
        parts.append(
            f"no straggler: {len(stalls)} ranks stall {share_text(min(stalls))} to "
            f"{share_text(max(stalls))} (median {share_text(statistics.median(stalls))})"
        )
    if exposed is not None:
        parts.append(f"the job loses {share_text(exposed)} of its time to the slowest rank's data")
    if judged is not None and found:
        parts.append(
            f"the job's verdict, stages and advice are rank {judged}'s, the rank it waits "
            "for; each rank's own verdict is in its row"
        )
    return "; ".join(parts)


__all__ = [
    "Cause",
    "RankSpread",
    "Straggler",
    "exposed_wait",
    "first_round",
    "merge_ranks",
    "rank_figures",
    "rank_spread",
    "rank_verdict",
    "slowest_rank",
    "steady_steps",
    "stragglers",
]

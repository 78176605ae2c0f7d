"""The stall over a run's time: the share of each second the training loop waited for data,
what the loader workers were busy with in that second, and the bursts where the waiting stood
well above the run's usual level.

Nothing here measures. A watched run (and a probe's pipeline run) records per-batch timelines
(``record.Track``); these functions bin those rows by time, so a run that was fed well except
for three bad minutes says so instead of averaging them away. docs/methodology.md (section
"Stall over time") states the rules and their thresholds.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from ioprobe.analysis.measures import share_text
from ioprobe.analysis.timelines import complete_tracks, spread
from ioprobe.record import RunRecord, Track

# what the workers' tracks say a bin's samples spent their time on
Cause = Literal["storage", "cpu", "other", "unknown"]
CAUSES: tuple[Cause, ...] = ("storage", "cpu", "other", "unknown")  # ties go to the first

MAX_BINS = 2_000  # past this many bins, a bin widens by whole multiples of the asked width
MIN_COVER = 0.2  # a bin the run observed for less than this share of it has no fraction
MOST = 0.5  # a cause names a bin when its share of the workers' sample time exceeds this
# a burst stands above max(BURST_FACTOR x median, median + BURST_MARGIN) of the run's bins
BURST_FACTOR = 2.0
BURST_MARGIN = 0.2
BURST_GAP = 1  # bursts this many quiet bins apart are one burst
MIN_BINS = 4  # fewer bins with a fraction than this give no typical level to stand above
# the sentence needs its bursts to hold this share of the run's stall, and this share of the
# run's observed time in stall: a second's hiccup in an hour is not a finding
MEANINGFUL_STALL = 0.25
MEANINGFUL_RUN = 0.01


@dataclass
class StallSeries:
    """The consumer's wait for data in equal time bins: bin ``i`` spans ``t0_s + i * bin_s``
    to the next (seconds from the first batch request), clipped to ``end_s``, the last batch's
    arrival. Per bin: the seconds the run was observed in it (``covered_s``: each epoch from
    the end of its start-up round to its last batch's arrival), the stall seconds in it (the
    start-up round's left out), the stall fraction
    (stall over observed time; None where the run was observed for under ``MIN_COVER`` of
    the bin), the samples delivered per observed second (None likewise, or where the main
    track lacks its samples) and the cause the workers' tracks name."""

    bin_s: float
    t0_s: float
    end_s: float
    stall_fraction: list[float | None] = field(default_factory=list)
    stall_s: list[float] = field(default_factory=list)
    covered_s: list[float] = field(default_factory=list)
    samples_per_s: list[float | None] = field(default_factory=list)
    cause: list[Cause] = field(default_factory=list)
    total_stall_s: float = 0.0  # every epoch's start-up round left out


@dataclass
class Burst:
    """Consecutive bins whose stall stood well above the run's usual level."""

    start_s: float  # seconds from the first batch request
    end_s: float
    stall_fraction: float  # its stall seconds over its observed seconds
    cause: Cause  # the cause most of its bins name
    stall_s: float


@dataclass
class StallOverTime:
    """A report's view of the stall over time: the series, the level a burst stands above
    (None where the run has too few bins to have a usual level), the bursts, and the sentence
    that names them when they matter (None otherwise)."""

    series: StallSeries
    threshold: float | None
    bursts: list[Burst] = field(default_factory=list)
    verdict: str | None = None


def stall_over_time(rec: RunRecord, width_s: float = 1.0) -> StallOverTime | None:
    """The stall series of ``rec``, its bursts and their sentence, or None for a record
    without a main timeline; what the findings carry for the renderers to draw."""
    series = stall_series(rec, width_s)
    if series is None:
        return None
    found = bursts(series)
    return StallOverTime(
        series=series,
        threshold=burst_threshold(series),
        bursts=found,
        verdict=burst_sentence(series, found),
    )


def stall_series(rec: RunRecord, width_s: float = 1.0) -> StallSeries | None:
    """The share of each ``width_s`` seconds of the run the consumer spent blocked in
    ``next()``, with the samples delivered and the workers' cause in each bin, or None where
    the record has no complete main timeline. A single batch's stall lies at the end of its
    row (``end - stall`` to ``end``); a merged row's summed stall is spread evenly over the row,
    whose batches waited somewhere in it. Each epoch's start-up round (the first batch of each
    worker) is left out, as the record's steady-state rates leave it out: its wait is the
    workers starting, not the pipeline's pace. A long run widens its bins (by whole multiples of ``width_s``) to keep at
    most ``MAX_BINS``, so the findings of an hours-long run stay small."""
    if not (width_s > 0 and math.isfinite(width_s)):
        raise ValueError(f"width_s must be a positive number of seconds, got {width_s}")
    tracks, _, _ = complete_tracks(rec)
    main = next((t for t in tracks if t.worker is None), None)
    if main is None or not main.columns["start"]:
        return None
    c = main.columns
    t0, t1 = min(c["start"]), max(c["end"])
    if not t1 > t0:
        return None
    width, bins = _bins(t1 - t0, width_s)
    stall_acc, cover_acc, samples_acc = [0.0] * bins, [0.0] * bins, [0.0] * bins
    firsts = {e.index: e.first_batch_seconds for e in rec.watch.epochs} if rec.watch else {}
    workers = max(rec.watch.settings.workers, 1) if rec.watch else 1
    for lo_row, hi_row in _epochs(c.get("epoch"), len(c["start"])):
        begin, first = _steady_start(c, lo_row, hi_row, workers, firsts)
        if begin >= hi_row:
            continue
        arrival = c["end"][begin - 1] if begin > lo_row else c["start"][begin] + first
        last = max(c["end"][begin:hi_row])
        if last > arrival:
            _place(cover_acc, arrival, last, last - arrival, t0, width)
        for k in range(begin, hi_row):
            _place_row(stall_acc, main, k, first if k == begin else 0.0, t0, width)
            if "samples" in c:
                single = c["batches"][k] <= 1
                lo = c["end"][k] if single else c["start"][k]
                _place(samples_acc, lo, c["end"][k], max(c["samples"][k], 0.0), t0, width)
    fractions = [
        min(s / cov, 1.0) if cov >= MIN_COVER * width else None
        for s, cov in zip(stall_acc, cover_acc, strict=True)
    ]
    return StallSeries(
        bin_s=width,
        t0_s=t0,
        end_s=t1,
        stall_fraction=[None if f is None else round(f, 4) for f in fractions],
        stall_s=[round(s, 6) for s in stall_acc],
        covered_s=[round(cov, 6) for cov in cover_acc],
        samples_per_s=[
            None if f is None or "samples" not in c else round(n / cov, 3)
            for f, n, cov in zip(fractions, samples_acc, cover_acc, strict=True)
        ],
        cause=_causes([t for t in tracks if t.worker is not None], bins, t0, width),
        total_stall_s=round(sum(stall_acc), 6),
    )


def bursts(series: StallSeries) -> list[Burst]:
    """The runs of consecutive bins whose stall fraction exceeds ``burst_threshold``, those
    ``BURST_GAP`` quiet bins apart merged into one: the stretches where the loop waited far
    more than it usually did. Each gives its span, its stall over its observed time, the
    cause most of its bins name and the stall seconds it holds. A run stalled throughout has
    none (its usual level is already high), and neither has a flat one."""
    threshold = burst_threshold(series)
    if threshold is None:
        return []
    groups: list[list[int]] = []  # first and last bin of each burst
    for i, f in enumerate(series.stall_fraction):
        if f is None or f <= threshold:
            continue
        if groups and i - groups[-1][1] <= BURST_GAP + 1:
            groups[-1][1] = i
        else:
            groups.append([i, i])
    return [_burst(series, a, b) for a, b in groups]


def burst_threshold(series: StallSeries) -> float | None:
    """The stall fraction a bin must exceed to belong to a burst: twice the run's median
    bin, and at least 20 points above it, so a well-fed run (median near 0) needs a fifth of
    a bin in stall and a half-stalled one needs the whole bin; None where fewer than
    ``MIN_BINS`` bins have a fraction, too few for a usual level."""
    values = [f for f in series.stall_fraction if f is not None]
    if len(values) < MIN_BINS:
        return None
    typical = statistics.median(values)
    return max(BURST_FACTOR * typical, typical + BURST_MARGIN)


def burst_sentence(series: StallSeries, found: list[Burst]) -> str | None:
    """One line for a report, e.g. "storage-bound for 12% of the run, in 3 bursts (longest
    4.0 s at 31 s), holding 64% of its stall": the cause the bursts' stall mostly falls under,
    the share of the run its bursts span, the longest of them and the stall they hold; bursts
    of other causes (a second where the whole host stalled) are counted after it, never
    folded into its figures. None where there are no bursts or they hold too little of the
    stall (``MEANINGFUL_STALL``) or of the run (``MEANINGFUL_RUN``) to matter: then the run's
    overall verdict says all there is."""
    if not found:
        return None
    held = sum(b.stall_s for b in found)
    observed = sum(series.covered_s)
    if held < MEANINGFUL_STALL * series.total_stall_s or held < MEANINGFUL_RUN * observed:
        return None
    by_cause = {k: sum(b.stall_s for b in found if b.cause == k) for k in CAUSES}
    cause = max(CAUSES, key=lambda k: (by_cause[k], -CAUSES.index(k)))
    mine = [b for b in found if b.cause == cause]
    span = sum(b.end_s - b.start_s for b in mine) / max(series.end_s - series.t0_s, 1e-9)
    longest = max(mine, key=lambda b: (b.end_s - b.start_s, -b.start_s))
    at = f"{longest.end_s - longest.start_s:.1f} s at {_seconds(longest.start_s)}"
    where = f"in 1 burst ({at})" if len(mine) == 1 else f"in {len(mine)} bursts (longest {at})"
    text = f"{LABELS[cause]} for {share_text(span)} of the run, {where}, holding {_held(by_cause[cause], series)} of its stall"
    others = len(found) - len(mine)
    if others:
        rest = held - by_cause[cause]
        noun = "burst" if others == 1 else "bursts"
        text += f"; {others} more {noun} of another cause, holding {_held(rest, series)}"
    return text


def _held(stall_s: float, series: StallSeries) -> str:
    """``stall_s`` as a share of the run's stall."""
    total = series.total_stall_s
    return share_text(stall_s / total if total > 0 else 1.0)


LABELS: dict[Cause, str] = {
    "storage": "storage-bound",
    "cpu": "CPU-bound",
    "other": "stalled (workers neither reading through ioprobe's opener nor on a CPU)",
    "unknown": "stalled",
}


def _seconds(t: float) -> str:
    return f"{t:.1f} s" if abs(t) < 10 else f"{t:,.0f} s"


def _bins(span: float, width_s: float) -> tuple[float, int]:
    """The bin width and count for a run ``span`` seconds long: ``width_s`` wide while that
    takes at most ``MAX_BINS`` bins, else the smallest whole multiple of it that does."""
    n = max(math.ceil(span / width_s - 1e-9), 1)
    if n <= MAX_BINS:
        return width_s, n
    width = width_s * math.ceil(span / (width_s * MAX_BINS))
    return width, min(max(math.ceil(span / width - 1e-9), 1), MAX_BINS)


def _epochs(epoch: list[float] | None, n: int) -> list[tuple[int, int]]:
    """The main track's rows split where the epoch changes: (first row, one past the last)."""
    if not epoch:
        return [(0, n)]
    cuts = [0] + [k for k in range(1, n) if epoch[k] != epoch[k - 1]] + [n]
    return list(itertools.pairwise(cuts))


def _steady_start(
    c: dict[str, list[float]],
    lo: int,
    hi: int,
    workers: int,
    firsts: dict[int, float | None],
) -> tuple[int, float]:
    """Where the epoch in rows ``lo``..``hi`` reaches its steady state: the first row after
    its start-up round, and the seconds of that row's stall that are start-up too. The round
    is the first batch of each worker (``workers`` batches; one for a loader without
    workers), made while the workers start and import what their dataset needs, as the
    record's steady-state rates leave it out. In single-batch rows the round's rows are left
    out whole; in a long run's merged rows only the wait the record keeps for the epoch's
    first batch is, from the epoch's first row (to within a row: merging may have put that
    batch at the end of the row before)."""
    n = min(workers, hi - lo)
    if all(c["batches"][k] <= 1 for k in range(lo, lo + n)):
        return lo + n, 0.0
    epoch = c.get("epoch")
    recorded = firsts.get(int(epoch[lo])) if epoch else firsts.get(0)
    return lo, min(max(recorded or 0.0, 0.0), max(c["stall"][lo], 0.0))


def _place_row(
    acc: list[float], main: Track, k: int, left_out: float, t0: float, width: float
) -> None:
    """Row ``k``'s stall, less ``left_out`` seconds of it, into the bins where it waited."""
    c = main.columns
    start, end = c["start"][k], c["end"][k]
    stall = max(c["stall"][k] - left_out, 0.0)
    if c["batches"][k] <= 1:
        _place(acc, max(end - stall, start), end, stall, t0, width)
    else:
        _place(acc, start + left_out, end, stall, t0, width)


def _place(acc: list[float], lo: float, hi: float, amount: float, t0: float, width: float) -> None:
    """Spread ``amount`` evenly over ``lo``..``hi`` seconds into ``acc``'s bins of ``width``
    seconds from ``t0``; the share that falls outside the bins is dropped."""
    bins = len(acc)
    a, b = (lo - t0) / width, (hi - t0) / width
    if b - a < 1e-9:
        if 0 <= a <= bins:
            acc[min(int(a), bins - 1)] += amount
        return
    ca, cb = max(a, 0.0), min(b, float(bins))
    if cb > ca:
        spread(acc, ca, cb, amount * (cb - ca) / (b - a))


def _causes(workers: list[Track], bins: int, t0: float, width: float) -> list[Cause]:
    """Per bin, what the workers' samples spent most of their time on there: "storage" where
    metered reads took most of their wall time, "cpu" where CPU did, "other" where neither
    did (unmetered reads, locks, sleeps), "unknown" where no worker track had work in the bin
    (a DALI pipeline records none)."""
    wall, cpu, read = [0.0] * bins, [0.0] * bins, [0.0] * bins
    for t in workers:
        w = t.columns
        for s, e, wa, cp, rd in zip(
            w["start"], w["end"], w["wall"], w["cpu"], w["read"], strict=True
        ):
            _place(wall, s, e, max(wa, 0.0), t0, width)
            _place(cpu, s, e, max(cp, 0.0), t0, width)
            _place(read, s, e, max(rd, 0.0), t0, width)
    return [_cause(*v) for v in zip(wall, cpu, read, strict=True)]


def _cause(wall: float, cpu: float, read: float) -> Cause:
    if wall <= 0:
        return "unknown"
    if read > MOST * wall:
        return "storage"
    if cpu > MOST * wall:
        return "cpu"
    return "other"


def _burst(s: StallSeries, first: int, last: int) -> Burst:
    """Bins ``first``..``last`` as a burst."""
    span = range(first, last + 1)
    stall = sum(s.stall_s[i] for i in span)
    observed = sum(s.covered_s[i] for i in span)
    votes = Counter(s.cause[i] for i in span)
    return Burst(
        start_s=s.t0_s + first * s.bin_s,
        end_s=min(s.t0_s + (last + 1) * s.bin_s, s.end_s),
        stall_fraction=round(min(stall / observed, 1.0), 4) if observed > 0 else 0.0,
        cause=max(CAUSES, key=lambda k: (votes[k], -CAUSES.index(k))),
        stall_s=round(stall, 6),
    )

"""What each sample costs: percentiles, a histogram and the heaviest samples of a watched run.

The collector keeps every sample's wall time, CPU time and metered bytes in bounded
reservoirs (``WatchData.sample_ms`` and ``WatchData.sample_costs``) and the heaviest samples
by index. This module reduces them to what a reader scans: a row of percentiles per cost, a
log-spaced histogram of wall time (a heavy tail shows as a second hump), and the samples to
look at first.
"""

from __future__ import annotations

import dataclasses
import math

from ioprobe.analysis.measures import percentile
from ioprobe.record import Distribution, HeavySample, RunRecord

HISTOGRAM_BINS = 24


@dataclasses.dataclass(frozen=True)
class CostRow:
    """One per-sample cost's spread."""

    name: str  # "wall", "CPU", "bytes"
    unit: str  # "ms", "kB"
    count: int
    exact: bool  # every sample, not a reservoir of them
    p50: float
    p90: float
    p99: float
    max: float
    mean: float


@dataclasses.dataclass(frozen=True)
class SampleCostView:
    rows: list[CostRow]
    histogram: list[tuple[float, float, int]]  # wall ms: (low edge, high edge, samples)
    heaviest: list[HeavySample]
    index_kind: str
    tail_share: float | None  # share of all sample wall time in the slowest 1% of samples


def _row(name: str, unit: str, d: Distribution, scale: float = 1.0) -> CostRow | None:
    values = sorted(v * scale for v in d.values)
    if not values:
        return None
    return CostRow(
        name=name,
        unit=unit,
        count=d.count,
        exact=d.exact,
        p50=percentile(values, 0.5),
        p90=percentile(values, 0.9),
        p99=percentile(values, 0.99),
        max=values[-1],
        mean=d.total * scale / d.count if d.count else 0.0,
    )


def histogram(values: list[float], bins: int = HISTOGRAM_BINS) -> list[tuple[float, float, int]]:
    """Counts of ``values`` over ``bins`` log-spaced bins from the smallest positive value to
    the largest: sample costs span orders of magnitude, and the tail is what matters."""
    pos = [v for v in values if v > 0]
    if not pos:
        return []
    lo, hi = min(pos), max(pos)
    if hi <= lo * 1.0001:
        return [(lo, hi, len(pos))]
    base = math.log(lo)
    step = (math.log(hi) - base) / bins
    counts = [0] * bins
    for v in pos:
        counts[min(int((math.log(v) - base) / step), bins - 1)] += 1
    edges = [math.exp(base + k * step) for k in range(bins)] + [hi]
    return [(edges[k], edges[k + 1], c) for k, c in enumerate(counts)]


def tail_share(values: list[float]) -> float | None:
    """The share of all the samples' time spent in the slowest 1% of them: about 0.01 for
    uniform costs, far more where a few pathological samples dominate."""
    if len(values) < 100:
        return None
    ordered = sorted(values)
    total = sum(ordered)
    return sum(ordered[-max(len(ordered) // 100, 1) :]) / total if total > 0 else None


def sample_costs(rec: RunRecord) -> SampleCostView | None:
    """The spread of the per-sample costs of a watched run, and its heaviest samples; None for
    a record without per-sample times (a probe, a DALI pipeline)."""
    w = rec.watch
    if w is None or w.sample_costs is None or not w.sample_ms.values:
        return None
    sc = w.sample_costs
    rows = [
        _row("wall", "ms", w.sample_ms),
        _row("CPU", "ms", sc.cpu_ms),
        _row("bytes", "kB", sc.bytes, 1e-3),
    ]
    return SampleCostView(
        rows=[r for r in rows if r is not None],
        histogram=histogram(w.sample_ms.values),
        heaviest=list(sc.heaviest),
        index_kind=sc.index_kind,
        tail_share=tail_share(w.sample_ms.values),
    )


__all__ = ["CostRow", "SampleCostView", "histogram", "sample_costs", "tail_share"]

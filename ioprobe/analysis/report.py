"""What a report shows, computed once from a record: the findings every renderer draws.

Renderers (terminal, HTML, Markdown) format these and compute nothing. Long runs are reduced
here, by summing neighbours, so a million-batch record turns into a few hundred points whose
totals still match the record's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ioprobe.analysis.cluster import (
    NodeShare,
    RankTable,
    Saturation,
    per_node,
    rank_table,
    saturation,
)
from ioprobe.analysis.epochs import (
    EpochStarts,
    WatchCost,
    WorkerLatency,
    epoch_starts,
    watch_cost,
    worker_latency,
)
from ioprobe.analysis.loader_sim import QueuePrediction, queue_predictions
from ioprobe.analysis.measures import KeyNumbers, key_numbers
from ioprobe.analysis.pcie import CopyRow, copy_rows
from ioprobe.analysis.queueing import HeadOfLine, head_of_line
from ioprobe.analysis.ranks import RankSpread, rank_spread
from ioprobe.analysis.samples import SampleCostView, sample_costs
from ioprobe.analysis.stall_series import StallOverTime, stall_over_time
from ioprobe.analysis.streams import stream_imbalance
from ioprobe.analysis.timelines import complete_tracks, spread
from ioprobe.record import (
    MERGE_RULES,
    STAGE_NAMES,
    RunRecord,
    SizeRow,
    StageName,
    Track,
)

MAX_BATCH_POINTS = 400  # bars in the consumer timeline
# slices per track in a trace: more than this and trace viewers crawl; a longer track merges
# neighbours
MAX_TRACE_ROWS = 50_000
MAX_TIME_BINS = 120  # points per worker throughput line
MAX_WORKER_LINES = 16


@dataclass
class StageBar:
    stage: StageName
    capacity: float | None
    limiting: bool


@dataclass
class ConsumerPoint:
    """Consecutive batches ``first``..``last`` (1-based) of the main track, summed."""

    first: int
    last: int
    start_s: float
    stall_s: float
    compute_s: float


@dataclass
class WorkerLine:
    name: str
    samples_per_s: list[float]


@dataclass
class Throughput:
    bin_s: float  # width of each time bin
    lines: list[WorkerLine] = field(default_factory=list)
    hidden: int = 0  # worker lines left out to keep the chart legible


@dataclass
class SweepLine:
    name: str  # "cold", "warm", "remote"
    concurrency: list[int]
    mb_per_s: list[float]
    p50_ms: list[float | None]
    p95_ms: list[float | None]
    p99_ms: list[float | None]
    best: int | None


@dataclass
class HeatCell:
    utilization: float
    bottleneck: str
    samples_per_s: float


@dataclass
class Heatmap:
    storage: list[str]
    gpus: list[int]
    cells: list[list[HeatCell | None]]  # [storage][gpus]
    target: float


@dataclass
class OperatorRow:
    """One DALI operator: its cost per pipeline iteration and its share of all operators' CPU."""

    name: str
    device: str
    stage: str
    cpu_ms: float  # per iteration (one batch), executor plus pool threads
    wall_ms: float  # per iteration, on its executor thread
    cpu_share: float


@dataclass
class SeriesView:
    """The NVML series reduced for a page: at most ``MAX_SERIES_POINTS`` bins, each the mean
    of its rows (None where no row in the bin answered that reading)."""

    t: list[float]
    sm_util: list[float | None]
    mem_util: list[float | None]
    pcie_rx_gbps: list[float | None]
    pcie_tx_gbps: list[float | None]
    power_w: list[float | None]
    interval_s: float
    rows: int


MAX_SERIES_POINTS = 400


def _binned(values: list[float | None], edges: list[int], scale: float) -> list[float | None]:
    out: list[float | None] = []
    for a, b in itertools.pairwise(edges):
        got = [v for v in values[a:b] if v is not None]
        out.append(sum(got) / len(got) * scale if got else None)
    return out


def gpu_series_view(rec: RunRecord, points: int = MAX_SERIES_POINTS) -> SeriesView | None:
    """The record's NVML series in at most ``points`` bins of consecutive rows, for charts."""
    s = rec.gpu_series
    if s is None or not s.columns.get("t"):
        return None
    cols = s.columns
    n = len(cols["t"])
    bins = min(points, n)
    edges = [round(i * n / bins) for i in range(bins + 1)]
    empty: list[float | None] = [None] * n

    def col(name: str, scale: float = 1.0) -> list[float | None]:
        return _binned(cols.get(name, empty), edges, scale)

    t = [v if v is not None else 0.0 for v in _binned(cols["t"], edges, 1.0)]
    return SeriesView(
        t=t,
        sm_util=col("sm_util"),
        mem_util=col("mem_util"),
        pcie_rx_gbps=col("pcie_rx_bytes_per_s", 1e-9),
        pcie_tx_gbps=col("pcie_tx_bytes_per_s", 1e-9),
        power_w=col("power_w"),
        interval_s=s.interval_s,
        rows=n,
    )


@dataclass
class Advice:
    """A ranked recommendation with its gain over today's rate."""

    kind: str
    text: str
    predicted: float | None
    gain: float | None  # predicted / delivered
    evidence: str
    unchecked: list[str] = field(default_factory=list)  # what the prediction assumes, unchecked


@dataclass
class Findings:
    """Everything a report draws from one record, as numbers and structures; the renderers
    put them in words (``ioprobe.render.facts``) and pictures."""

    kind: str
    delivered: float | None  # measured when there is a measurement, else the model's rate
    delivered_label: str
    stages: list[StageBar] = field(default_factory=list)
    recommendations: list[Advice] = field(default_factory=list)
    consumer: list[ConsumerPoint] = field(default_factory=list)
    consumer_batches: int = 0
    throughput: Throughput | None = None
    storage_sweep: list[SweepLine] = field(default_factory=list)
    cpu_sweep: list[tuple[int, float]] = field(default_factory=list)  # (workers, samples/s)
    heatmap: Heatmap | None = None
    operators: list[OperatorRow] = field(default_factory=list)
    copies: list[CopyRow] = field(default_factory=list)  # the host-to-device probe, by size
    gpu_series: SeriesView | None = None  # NVML over the run, reduced
    cache_gap: SizeRow | None = None  # a sizing's row where a cache helps most
    close_call: CloseCall | None = None  # a stage within CLOSE_CALL of the bottleneck
    numbers: KeyNumbers = field(default_factory=KeyNumbers)  # behind the key measurements
    notes: list[str] = field(default_factory=list)
    # the record's timelines at most MAX_TRACE_ROWS rows each (the trace lays them out): the
    # host's (main process first, then workers) and the device's stream
    timeline: list[Track] = field(default_factory=list)
    device_timeline: Track | None = None
    # the stall fraction second by second, its bursts and the sentence naming them
    stall_over_time: StallOverTime | None = None
    # what each sample costs, and the heaviest samples
    sample_costs: SampleCostView | None = None
    # what the in-order queue of batches cost, and the loader settings that would free it
    head_of_line: HeadOfLine | None = None
    queue: list[QueuePrediction] = field(default_factory=list)
    # each epoch's start-up, and each worker's batch time once warm
    epoch_starts: EpochStarts | None = None
    worker_latency: list[WorkerLatency] = field(default_factory=list)
    watch_cost: WatchCost | None = None  # what watching cost the loader's workers
    # a run across ranks: each rank's figures, a watched job's spread and stragglers, where a
    # probe's shared storage saturated and what each node did
    ranks: RankTable | None = None
    rank_spread: RankSpread | None = None
    saturation: Saturation | None = None
    nodes: list[NodeShare] = field(default_factory=list)


def coarsen(track: Track, max_rows: int) -> Track:
    """``track`` with neighbouring rows merged until at most ``max_rows`` remain, by the
    rules the collector itself merges a long run with (``record.MERGE_RULES``)."""
    cols = track.columns
    n = len(cols.get("start", []))
    if n <= max_rows:
        return track
    group = -(-n // max_rows)
    out: dict[str, list[float]] = {}
    for name, values in cols.items():
        rule = MERGE_RULES.get(name, "sum")
        if rule == "first":
            out[name] = values[::group]
        elif rule == "last":
            out[name] = [values[min(i + group, n) - 1] for i in range(0, n, group)]
        else:
            out[name] = [sum(values[i : i + group]) for i in range(0, n, group)]
    return Track(
        name=track.name,
        worker=track.worker,
        batches_per_row=track.batches_per_row * group,
        columns=out,
    )


def consumer_points(main: Track, limit: int = MAX_BATCH_POINTS) -> tuple[list[ConsumerPoint], int]:
    """Stall and compute per batch of the main track, neighbours summed down to ``limit``.

    Stall is the consumer's time blocked in ``next()``; compute is the time from a batch's
    arrival to the next request (the training step). The last row has no next request, so
    its compute is unknown and left at zero. Returns the points and the batch count.
    """
    c = main.columns
    start, end, stall, batches = c["start"], c["end"], c["stall"], c["batches"]
    n = len(start)
    if n == 0:
        return [], 0
    compute = [max(start[i + 1] - end[i], 0.0) for i in range(n - 1)] + [0.0]
    # merged rows hold several batches: their own span beyond the stall was compute too
    for i in range(n):
        if batches[i] > 1:
            compute[i] += max(end[i] - start[i] - stall[i], 0.0)
    group = -(-n // limit)
    points = []
    seen = 0
    for lo in range(0, n, group):
        hi = min(lo + group, n)
        count = int(sum(batches[lo:hi]))
        points.append(
            ConsumerPoint(
                first=seen + 1,
                last=seen + count,
                start_s=start[lo],
                stall_s=sum(stall[lo:hi]),
                compute_s=sum(compute[lo:hi]),
            )
        )
        seen += count
    return points, seen


def worker_throughput(tracks: list[Track], bins: int = MAX_TIME_BINS) -> Throughput | None:
    """Samples per second each worker finished, in equal time bins over the run.

    A row's samples are spread evenly over its span (start to end), so a merged row of many
    batches and a single slow batch both land where the work happened.
    """
    workers = [t for t in tracks if t.worker is not None and t.columns.get("end")]
    if not workers:
        return None
    t0 = min(min(t.columns["start"]) for t in workers)
    t1 = max(max(t.columns["end"]) for t in workers)
    span = max(t1 - t0, 1e-9)
    width = span / bins
    out = Throughput(bin_s=width, hidden=max(len(workers) - MAX_WORKER_LINES, 0))
    for t in workers[:MAX_WORKER_LINES]:
        acc = _binned_samples(t, t0, width, bins)
        out.lines.append(WorkerLine(name=t.name, samples_per_s=[round(a / width, 3) for a in acc]))
    return out


def _binned_samples(track: Track, t0: float, width: float, bins: int) -> list[float]:
    """The samples of ``track`` in each of ``bins`` bins ``width`` seconds wide from ``t0``."""
    acc = [0.0] * bins
    c = track.columns
    for s, e, n in zip(c["start"], c["end"], c["samples"], strict=True):
        spread(acc, (s - t0) / width, (e - t0) / width, n)
    return acc


def storage_lines(rec: RunRecord) -> list[SweepLine]:
    """Read bandwidth and latency percentiles against concurrency, one line per pass."""
    lines = []
    for p in (rec.stages.storage.cold, rec.stages.storage.warm):
        if p is None or not p.sweep:
            continue
        pts = sorted(p.sweep, key=lambda s: s.concurrency)
        lines.append(
            SweepLine(
                name="remote" if rec.dataset.remote else p.cache,
                concurrency=[s.concurrency for s in pts],
                mb_per_s=[s.read_bytes_per_s / 1e6 for s in pts],
                p50_ms=[s.latency_p50_ms for s in pts],
                p95_ms=[s.latency_p95_ms for s in pts],
                p99_ms=[s.latency_p99_ms for s in pts],
                best=p.best_concurrency,
            )
        )
    return lines


def heatmap(rec: RunRecord) -> Heatmap | None:
    """GPU utilisation for each storage class and GPU count of a size record."""
    sz = rec.sizing
    if sz is None or not sz.rows:
        return None
    names = list(dict.fromkeys(r.storage for r in sz.rows))
    gpus = sorted({r.gpus for r in sz.rows})
    cells: list[list[HeatCell | None]] = [[None] * len(gpus) for _ in names]
    for r in sz.rows:
        cells[names.index(r.storage)][gpus.index(r.gpus)] = HeatCell(
            utilization=r.gpu_utilization,
            bottleneck=r.bottleneck,
            samples_per_s=r.predicted_samples_per_s,
        )
    return Heatmap(storage=names, gpus=gpus, cells=cells, target=sz.inputs.target_utilization)


def stage_bars(rec: RunRecord) -> list[StageBar]:
    """Each stage's capacity in samples/s, and whether it limits the pipeline."""
    caps = rec.stages.capacities()
    return [
        StageBar(stage=s, capacity=caps[s], limiting=s == rec.bottleneck and caps[s] is not None)
        for s in STAGE_NAMES
    ]


# a stage this close above the bottleneck may bind instead on a rerun: shared hosts move a
# stage's measured capacity by 5-8% from run to run (docs/benchmarks.md)
CLOSE_CALL = 0.10


@dataclass(frozen=True)
class CloseCall:
    """The stage next to the bottleneck, where it is within ``CLOSE_CALL`` of it."""

    stage: str
    capacity: float  # samples/s
    gap: float  # its capacity / the bottleneck's - 1


def close_call(rec: RunRecord) -> CloseCall | None:
    """The measured stage nearest above the bottleneck, where its capacity is within
    ``CLOSE_CALL`` (10%) of the bottleneck's; None otherwise, and for a sizing or a record
    with no verdict. Two stages that close are one measurement's noise apart: reruns may name
    either, and raising the named one alone gains at most the gap, so the verdict says so
    rather than let a user chase whichever stage this run happened to name."""
    if rec.kind == "size" or rec.predicted_samples_per_s <= 0:
        return None
    caps = rec.stages.capacities()
    low = caps.get(rec.bottleneck)
    others = [(v, s) for s, v in caps.items() if s != rec.bottleneck and v is not None and v > 0]
    if not low or not others:
        return None
    cap, stage = min(others)
    gap = cap / low - 1.0
    return CloseCall(stage=stage, capacity=cap, gap=gap) if gap <= CLOSE_CALL else None


def cache_gap(rec: RunRecord) -> SizeRow | None:
    """The sizing row where a cache helps most: storage binds below the target, nothing else
    would (the CPU keeps up), and the GPU count is the largest such; the cheapest cache among
    ties."""
    sz = rec.sizing
    if sz is None:
        return None
    target = sz.inputs.target_utilization
    rows = [r for r in sz.rows if _cache_would_lift(r, target)]
    if not rows:
        return None
    top = max(r.gpus for r in rows)
    return min((r for r in rows if r.gpus == top), key=lambda r: r.cache_bytes_static or 0.0)


def _cache_would_lift(r: SizeRow, target: float) -> bool:
    """Storage alone keeps the row below ``target`` and the sizing found the cache that lifts it."""
    storage_binds = r.bottleneck == "storage" and r.gpu_utilization < target
    cpu_keeps_up = (
        r.cpu_samples_per_s is None or r.cpu_samples_per_s >= target * r.gpu_samples_per_s
    )
    return storage_binds and bool(r.cache_bytes_static and r.cache_bytes_lru) and cpu_keeps_up


def dali_operators(rec: RunRecord) -> list[OperatorRow]:
    """A watched DALI pipeline's operators, costliest first, per iteration: operators run once
    per batch, and the pipeline runs ahead of the consumer, so totals over a run would mix in
    the iterations it prefetched."""
    d = rec.dali
    if d is None:
        return []
    total = sum(o.cpu_seconds for o in d.operators) or 1.0
    return [
        OperatorRow(
            name=o.name,
            device=o.device,
            stage=o.stage,
            cpu_ms=o.cpu_seconds / o.calls * 1e3,
            wall_ms=o.wall_seconds / o.calls * 1e3,
            cpu_share=o.cpu_seconds / total,
        )
        for o in d.operators
        if o.calls
    ]


# advice that changes nothing: its "prediction" is today's model, not a gain to claim
NO_CHANGE = frozenset({"balanced"})


def advice(rec: RunRecord) -> list[Advice]:
    """The recommendations in rank order, each with predicted / today's rate (the measured
    rate where the run measured one, else the model's, or the advice's own baseline where it
    predicts another rate: an end-to-end rate against the end-to-end rate, not the steady
    one, which read as "0.2x" for a 64% gain); none for advice that changes nothing (a
    balanced pipeline said "nothing to gain", then "1.7x": the model's rate over the
    measured one)."""
    today = rec.measured_samples_per_s or rec.predicted_samples_per_s
    out = []
    for r in rec.recommendations:
        now = r.baseline_samples_per_s or today
        pred = None if r.kind in NO_CHANGE else r.predicted_samples_per_s
        out.append(
            Advice(
                kind=r.kind,
                text=r.text,
                predicted=pred,
                gain=pred / now if pred is not None and now else None,
                evidence=r.evidence,
                unchecked=list(r.unchecked) if pred is not None else [],
            )
        )
    return out


def _queue(rec: RunRecord) -> list[QueuePrediction]:
    """The loader settings' replayed figures, none for an unequal stream: the queue moves no
    item from it, so each figure would promise a gain no rerun gives."""
    return [] if stream_imbalance(rec) is not None else queue_predictions(rec)


def findings(rec: RunRecord) -> Findings:
    """All of a report's content for ``rec``."""
    tracks, device, left_out = complete_tracks(rec)
    main = next((t for t in tracks if t.worker is None), None)
    consumer, batches = consumer_points(main) if main is not None else ([], 0)
    spread = rank_spread(rec) if rec.distributed is not None else None
    delivered = rec.measured_samples_per_s
    label = "measured"
    if delivered is None:
        delivered, label = (rec.predicted_samples_per_s or None), "predicted"
    return Findings(
        kind=rec.kind,
        delivered=delivered,
        delivered_label=label,
        stages=stage_bars(rec) if rec.kind != "size" else [],
        recommendations=advice(rec),
        consumer=consumer,
        consumer_batches=batches,
        throughput=worker_throughput(tracks),
        storage_sweep=storage_lines(rec),
        cpu_sweep=[(lv.workers, lv.samples_per_s) for lv in rec.stages.cpu.sweep],
        heatmap=heatmap(rec),
        operators=dali_operators(rec),
        copies=copy_rows(rec),
        gpu_series=gpu_series_view(rec),
        cache_gap=cache_gap(rec),
        close_call=close_call(rec),
        numbers=key_numbers(rec),
        notes=list(rec.notes) + left_out,
        timeline=[coarsen(t, MAX_TRACE_ROWS) for t in tracks],
        device_timeline=_device_timeline(device),
        stall_over_time=stall_over_time(rec),
        sample_costs=sample_costs(rec),
        head_of_line=head_of_line(rec),
        queue=_queue(rec),
        epoch_starts=epoch_starts(rec),
        watch_cost=watch_cost(rec),
        worker_latency=worker_latency(rec),
        ranks=rank_table(rec, [s.rank for s in spread.stragglers] if spread else None),
        rank_spread=spread,
        saturation=saturation(rec),
        nodes=per_node(rec),
    )


def _device_timeline(gpu: Track | None) -> Track | None:
    if gpu is None or not gpu.columns.get("start"):
        return None
    return coarsen(gpu, MAX_TRACE_ROWS)

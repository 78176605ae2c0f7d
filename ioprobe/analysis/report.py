"""What a report shows, computed once from a record: the findings every renderer draws.

Renderers (terminal, HTML, Markdown) format these and compute nothing. Long runs are reduced
here, by summing neighbours, so a million-batch record turns into a few hundred points whose
totals still match the record's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ioprobe.analysis.decode_paths import facts as decode_facts
from ioprobe.analysis.pcie import (
    CopyRow,
    copy_rows,
    disk_to_gpu_facts,
    link_facts,
    link_verdict,
)
from ioprobe.collect.timeline import MERGE_RULES
from ioprobe.record import (
    STAGE_NAMES,
    PipelineRun,
    RunRecord,
    StageName,
    Track,
    WatchData,
)

MAX_BATCH_POINTS = 400  # bars in the consumer timeline
MAX_TIME_BINS = 120  # points per worker throughput line
MAX_WORKER_LINES = 16


def rate(x: float | None) -> str:
    """Samples per second as people read them: thousands separated, one decimal below 100."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _bytesrate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:,.1f} MB/s"


def stage_detail(rec: RunRecord, name: str) -> str:
    """What a stage's capacity was measured from, in a line."""
    st = rec.stages
    if name == "storage":
        parts = []
        for p in (st.storage.cold, st.storage.warm):
            if p is not None and p.read_bytes_per_s is not None:
                label = "remote" if rec.dataset.remote else p.cache
                parts.append(
                    f"{label} {_bytesrate(p.read_bytes_per_s)} @ {p.best_concurrency} threads, "
                    f"p99 {p.latency_p99_ms or 0:.1f} ms"
                )
        return "; ".join(parts) or st.storage.basis or "not measured"
    if name == "cpu":
        if st.cpu.cpu_seconds_per_sample is None:
            return "not measured"
        loader = f" ({st.cpu.loader})" if st.cpu.loader else ""
        return (
            f"{st.cpu.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample{loader}, "
            f"{st.cpu.usable_cores} usable cores"
        )
    if name == "pcie":
        pc = st.pcie
        if pc.copies and pc.bytes_per_s is not None:
            line = f"pinned {pc.bytes_per_s / 1e9:,.1f} GB/s"
            if pc.pageable_bytes_per_s:
                line += f", pageable {pc.pageable_bytes_per_s / 1e9:,.1f} GB/s"
            if pc.bytes_per_sample:
                line += f" per batch, {pc.bytes_per_sample / 1e3:,.1f} kB/sample"
            return line
        if pc.bytes_per_s is None or pc.bytes_per_sample is None:
            return pc.method
        return (
            f"{pc.bytes_per_sample / 1e3:,.1f} kB/sample at {_bytesrate(pc.bytes_per_s)}, "
            f"{pc.pinned_fraction or 0:.0%} pinned ({pc.method.split(',')[0]})"
        )
    gpu = st.gpu
    if gpu.method == "emulated" and gpu.step_seconds is not None:
        return f"emulated: {gpu.step_seconds * 1e3:g} ms per batch of {gpu.batch_size}"
    return gpu.method


@dataclass
class StageBar:
    stage: StageName
    capacity: float | None
    detail: str
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


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def series_facts(rec: RunRecord) -> list[tuple[str, str]]:
    """One key-measurements line for the NVML series: means and peaks, rate and cost."""
    s = rec.gpu_series
    if s is None:
        return []
    if not s.columns.get("t"):
        return [("NVML", s.status)]  # sampled, nothing came: say why
    cols = s.columns
    parts = []
    sm = _mean(cols.get("sm_util", []))
    if sm is not None:
        parts.append(f"SM busy {sm:.0f}% mean")
    rx = [v for v in cols.get("pcie_rx_bytes_per_s", []) if v is not None]
    if rx:
        parts.append(f"PCIe to GPU {max(rx) / 1e9:.1f} GB/s peak")
    power = _mean(cols.get("power_w", []))
    if power is not None:
        parts.append(f"{power:.0f} W mean")
    rate_hz = f"{1 / s.interval_s:.3g} Hz, {len(cols['t']):,} rows"
    cost = ""
    if s.poll_seconds is not None:  # µs for a stand-in or a fast driver, ms for a real GPU
        p = s.poll_seconds
        cost = f", {p * 1e6:.0f} µs per poll" if p < 1e-3 else f", {p * 1e3:.1f} ms per poll"
    return [("NVML", "; ".join(parts) + f" ({rate_hz}{cost})")]


@dataclass
class Advice:
    """A ranked recommendation with its gain over today's rate."""

    kind: str
    text: str
    predicted: float | None
    gain: float | None  # predicted / delivered
    evidence: str


@dataclass
class Findings:
    """Everything a report draws, from one record."""

    title: str
    kind: str
    verdict: str
    delivered: float | None  # measured when there is a measurement, else the model's rate
    delivered_label: str
    stages: list[StageBar] = field(default_factory=list)
    recommendations: list[Advice] = field(default_factory=list)
    measurements: list[tuple[str, str]] = field(default_factory=list)
    measurements_title: str = "Key measurements"
    consumer: list[ConsumerPoint] = field(default_factory=list)
    consumer_batches: int = 0
    throughput: Throughput | None = None
    storage_sweep: list[SweepLine] = field(default_factory=list)
    cpu_sweep: list[tuple[int, float]] = field(default_factory=list)  # (workers, samples/s)
    heatmap: Heatmap | None = None
    operators: list[OperatorRow] = field(default_factory=list)
    copies: list[CopyRow] = field(default_factory=list)  # the host-to-device probe, by size
    gpu_series: SeriesView | None = None  # NVML over the run, reduced
    notes: list[str] = field(default_factory=list)


def verdict(rec: RunRecord) -> str:
    """The one line that answers "what limits me": the binding stage, the rate it allows,
    the measured rate when there is one, and the GPU's waiting share."""
    if rec.kind == "size" and rec.sizing is not None and rec.sizing.cheapest is not None:
        return rec.sizing.cheapest.text
    link_only = link_verdict(rec)
    if link_only is not None:
        return link_only
    line = (
        f"{rec.bottleneck}-bound: the pipeline can deliver "
        f"{rate(rec.predicted_samples_per_s)} samples/s"
    )
    if rec.measured_samples_per_s is not None:
        line += f" (measured {rate(rec.measured_samples_per_s)})"
    if rec.gpu_idle_fraction is not None:
        line += f"; the GPU waits {rec.gpu_idle_fraction:.0%} of the time"
    return line


def tracks_of(rec: RunRecord) -> list[Track]:
    """The record's timelines: a watched run's, else the probe's pipeline run's."""
    if rec.watch is not None and rec.watch.tracks:
        return rec.watch.tracks
    if rec.pipeline is not None:
        return rec.pipeline.tracks
    return []


def coarsen(track: Track, max_rows: int) -> Track:
    """``track`` with neighbouring rows merged until at most ``max_rows`` remain, by the
    rules the collector itself merges a long run with (``ioprobe.collect.timeline``)."""
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
        acc = [0.0] * bins
        c = t.columns
        for s, e, n in zip(c["start"], c["end"], c["samples"], strict=True):
            lo, hi = (s - t0) / width, (e - t0) / width
            if hi - lo < 1e-9:
                acc[min(int(lo), bins - 1)] += n
                continue
            # share the row's samples among the bins its span covers
            b = int(lo)
            while b < hi and b < bins:
                overlap = min(hi, b + 1) - max(lo, b)
                acc[b] += n * overlap / (hi - lo)
                b += 1
        out.lines.append(WorkerLine(name=t.name, samples_per_s=[round(a / width, 3) for a in acc]))
    return out


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
    """Each stage's capacity in samples/s with a line on what it was measured from."""
    caps = rec.stages.capacities()
    return [
        StageBar(
            stage=s,
            capacity=caps[s],
            detail=stage_detail(rec, s),
            limiting=s == rec.bottleneck and caps[s] is not None,
        )
        for s in STAGE_NAMES
    ]


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


def _dali_facts(rec: RunRecord) -> list[tuple[str, str]]:
    d = rec.dali
    if d is None:
        return []
    p = d.pipeline
    out = [
        (
            "DALI pipeline",
            ", ".join(
                f"{k}={p[k]}"
                for k in ("batch_size", "num_threads", "prefetch_queue_depth", "exec_dynamic")
                if k in p
            ),
        ),
        (
            "operator timing",
            "NVTX ranges (ioprobe's injection library)"
            if d.timing == "nvtx"
            else f"DALI threads' CPU time only: {d.timing_note}",
        ),
        ("DALI threads' CPU", f"{sum(d.threads.values()):,.2f} s in {len(d.threads)} threads"),
    ]
    if d.reads:
        out.append(("reader fetches", f"{d.reads:,}, {d.read_seconds / d.reads * 1e3:.3f} ms each"))
    if d.consumer_cpu_seconds:
        out.append(("consumer CPU in next()", f"{d.consumer_cpu_seconds:,.2f} s"))
    if d.worker_cpu_seconds:
        out.append(("external_source workers' CPU", f"{d.worker_cpu_seconds:,.2f} s"))
    pre = rec.stages.gpu.preprocess_seconds
    if pre is not None:
        out.append(("GPU preprocessing", f"{pre * 1e3:.2f} ms per batch (mixed and GPU operators)"))
    return out


def _device_facts(w: WatchData) -> list[tuple[str, str]]:
    """Copies and the host's view of the wait, where the device's own clock was used."""
    out = []
    eps = w.epochs
    nbytes = sum(e.h2d_bytes for e in eps)
    if nbytes:
        pinned = sum(e.h2d_pinned_bytes for e in eps)
        secs = sum(e.h2d_seconds for e in eps)
        out.append(
            (
                "host-to-device",
                f"{sum(e.h2d_copies for e in eps):,} copies, {nbytes / 1e6:,.1f} MB in "
                f"{secs:.3f} s ({_bytesrate(nbytes / secs) if secs > 0 else 'n/a'}), "
                f"{pinned / nbytes:.0%} from pinned memory",
            )
        )
    timed = [e for e in eps if e.gpu_wait_seconds is not None]
    if timed:
        stall = sum(e.stall_seconds for e in timed)
        wall = sum(e.seconds for e in timed)
        if wall > 0:
            out.append(
                (
                    "host stall",
                    f"{stall / wall:.1%} of the time blocked in next() (host clock; the device "
                    "clock above is the GPU's own)",
                )
            )
    return out


def measurements(rec: RunRecord) -> list[tuple[str, str]]:
    """The handful of numbers a reader checks first, as (label, value) pairs."""
    ds = rec.dataset
    out = [("dataset", ds.target)]
    if ds.files:
        out.append(
            (
                "size",
                f"{ds.files:,} samples, {ds.bytes / 1e6:,.1f} MB, mean "
                f"{ds.sample_bytes_mean / 1e3:,.1f} kB ({ds.density} density)",
            )
        )
    if rec.measured_samples_per_s is not None:
        out.append(("measured", f"{rate(rec.measured_samples_per_s)} samples/s"))
    if any(rec.stages.capacities().values()):
        out.append(("model", f"{rate(rec.predicted_samples_per_s)} samples/s ({rec.bottleneck})"))
    if rec.gpu_idle_fraction is not None:
        out.append(("GPU waiting", f"{rec.gpu_idle_fraction:.1%} ({rec.gpu_idle_method or ''})"))
    w = rec.watch
    if w is not None and rec.dali is not None:
        out += _dali_facts(rec)
    elif w is not None:
        loader = w.loader
        out.append(
            (
                "loader",
                ", ".join(
                    f"{k}={loader[k]}"
                    for k in ("num_workers", "batch_size", "pin_memory", "prefetch_factor")
                    if k in loader
                ),
            )
        )
    if w is not None:
        out += _device_facts(w)
        batches = sum(e.batches for e in w.epochs)
        out.append(("batches", f"{batches:,} in {len(w.epochs)} epoch(s)"))
        if w.stall_ms.count:
            vals = sorted(w.stall_ms.values)
            out.append(
                (
                    "stall per batch",
                    f"median {vals[len(vals) // 2]:.2f} ms, p95 "
                    f"{vals[min(len(vals) - 1, int(0.95 * len(vals)))]:.2f} ms",
                )
            )
    out += decode_facts(rec)
    out += link_facts(rec)
    out += disk_to_gpu_facts(rec)
    out += series_facts(rec)
    p = rec.pipeline
    if p is not None:
        out.append(("pipeline run", _pipeline_line(p)))
    if rec.stages.gpu.busy_fraction is not None:
        out.append(
            ("GPU busy", f"{rec.stages.gpu.busy_fraction:.0%} ({rec.stages.gpu.busy_method})")
        )
    if rec.duration_s is not None:
        out.append(("took", f"{rec.duration_s:,.1f} s"))
    return out


def whatif_facts(rec: RunRecord) -> list[tuple[str, str]]:
    """A what-if's change, its starting point and each stage it moved, with the reason."""
    from ioprobe.analysis.whatif import describe

    w = rec.whatif
    if w is None:
        return []
    was = w.base_measured_samples_per_s or w.base_predicted_samples_per_s
    out = [
        (
            "change",
            "  ".join(f"--{k.replace('_', '-')} {v}" for k, v in describe(w.change).items()),
        ),
        (
            "was",
            f"{w.base_bottleneck}-bound at {rate(was)} samples/s "
            + ("(measured)" if w.base_measured_samples_per_s else "(predicted)"),
        ),
    ]
    for d in w.deltas:
        out.append((d.stage, f"{rate(d.before)} -> {rate(d.after)} samples/s: {d.why}"))
    out += [("assumes", a) for a in w.assumptions]
    return out


def size_facts(rec: RunRecord) -> list[tuple[str, str]]:
    """The numbers a sizing was computed from, and where each came from."""
    sz = rec.sizing
    if sz is None:
        return []
    i = sz.inputs
    out = [
        ("sample size", f"{i.sample_bytes / 1e3:,.1f} kB"),
        ("one GPU consumes", f"{rate(i.gpu_samples_per_s)} samples/s"),
        ("nodes", str(i.nodes)),
        ("target", f"{i.target_utilization:.0%} GPU utilisation"),
    ]
    if i.cpu_seconds_per_sample is not None:
        out.append(("CPU per sample", f"{i.cpu_seconds_per_sample * 1e3:.2f} ms"))
    if i.cores is not None:
        out.append(("cores per node", f"{i.cores:g}"))
    out += [(f"source: {k}", v) for k, v in sorted(i.sources.items())]
    out += [("assumes", a) for a in sz.assumptions]
    return out


def _pipeline_line(p: PipelineRun) -> str:
    return (
        f"{p.workers} workers, batch {p.batch_size}, {p.compute_seconds_per_batch * 1e3:g} ms "
        f"compute: {rate(p.samples_per_s)} samples/s, GPU idle {p.gpu_idle_fraction:.0%}"
    )


def advice(rec: RunRecord) -> list[Advice]:
    """The recommendations in rank order, each with predicted / today's rate (the measured
    rate where the run measured one, else the model's)."""
    now = rec.measured_samples_per_s or rec.predicted_samples_per_s
    out = []
    for r in rec.recommendations:
        pred = r.predicted_samples_per_s
        out.append(
            Advice(
                kind=r.kind,
                text=r.text,
                predicted=pred,
                gain=pred / now if pred is not None and now else None,
                evidence=r.evidence,
            )
        )
    return out


def title(rec: RunRecord) -> str:
    return (
        f"ioprobe {rec.kind}: {rec.dataset.target}" if rec.dataset.target else f"ioprobe {rec.kind}"
    )


def findings(rec: RunRecord) -> Findings:
    """All of a report's content for ``rec``."""
    tracks = tracks_of(rec)
    main = next((t for t in tracks if t.worker is None), None)
    consumer, batches = consumer_points(main) if main is not None else ([], 0)
    delivered = rec.measured_samples_per_s
    label = "measured"
    if delivered is None:
        delivered, label = (rec.predicted_samples_per_s or None), "predicted"
    return Findings(
        title=title(rec),
        kind=rec.kind,
        verdict=verdict(rec),
        delivered=delivered,
        delivered_label=label,
        stages=stage_bars(rec) if rec.kind != "size" else [],
        recommendations=advice(rec),
        measurements=(
            size_facts(rec) if rec.kind == "size" else whatif_facts(rec) + measurements(rec)
        ),
        measurements_title={"size": "Inputs", "whatif": "The change"}.get(
            rec.kind, "Key measurements"
        ),
        consumer=consumer,
        consumer_batches=batches,
        throughput=worker_throughput(tracks),
        storage_sweep=storage_lines(rec),
        cpu_sweep=[(lv.workers, lv.samples_per_s) for lv in rec.stages.cpu.sweep],
        heatmap=heatmap(rec),
        operators=dali_operators(rec),
        copies=copy_rows(rec),
        gpu_series=gpu_series_view(rec),
        notes=list(rec.notes),
    )

"""What a report says about a record, in words: the title, the verdict line, a line per stage
on what it was measured from, and the key measurements as (label, value) pairs. Every
renderer (terminal, HTML, Markdown) shows these same sentences; units come from
``ioprobe.render.format``."""

from __future__ import annotations

from ioprobe import units

# a rate in the analysis's sentences and in the report's own reads by one rule
from ioprobe.analysis.cluster import RankTable
from ioprobe.analysis.decode_paths import label
from ioprobe.analysis.epochs import epoch_count, per_epoch_saving
from ioprobe.analysis.measures import (
    LEVER_GAIN,
    CopyPeak,
    CopyTotals,
    DaliTotals,
    DecodeRow,
    Delivery,
    SeriesSummary,
)
from ioprobe.analysis.pcie import link_label
from ioprobe.analysis.ranks import RankSpread, rank_verdict
from ioprobe.analysis.report import Findings
from ioprobe.analysis.scenario import node_cores, ranks_on_host, recorded_cores
from ioprobe.record import GpuSeries, PipelineRun, RankFigures, RunRecord, WatchData
from ioprobe.render.format import change_flags

Facts = list[tuple[str, str]]


def title(rec: RunRecord) -> str:
    return (
        f"ioprobe {rec.kind}: {rec.dataset.target}" if rec.dataset.target else f"ioprobe {rec.kind}"
    )


def incomplete(rec: RunRecord) -> str:
    """The header's warning on a record that Ctrl-C or SIGTERM cut short; "" when complete."""
    if rec.complete:
        return ""
    return f"incomplete: interrupted during {rec.interrupted or 'the run'}"


def unchecked_text(unchecked: list[str]) -> str:
    """What a prediction assumes that its run could not check, to print beside the number."""
    return "; ".join(unchecked)


def judged(rec: RunRecord) -> bool:
    """Whether the record names a bottleneck. A watch whose loader side went unmeasured has
    none (``analysis.finalize_watch``): its ``bottleneck`` field is then no finding."""
    return rec.kind != "watch" or rec.predicted_samples_per_s > 0


def verdict(rec: RunRecord, f: Findings) -> str:
    """The one line that answers "what limits me": the binding stage, the rate it allows,
    the measured rate when there is one, and the GPU's waiting share. A sizing's is its
    answer: the nodes a measured shared storage feeds, else the cheapest configuration."""
    sz = rec.sizing if rec.kind == "size" else None
    if sz is not None and sz.cluster is not None and sz.cluster.fits:
        return sz.cluster.fits[0].text
    if rec.kind == "size" and rec.sizing is not None and rec.sizing.cheapest is not None:
        return rec.sizing.cheapest.text
    link_only = link_verdict(rec, f)
    if link_only is not None:
        return link_only
    if not judged(rec):
        batches = rec.watch is not None and any(e.batches for e in rec.watch.epochs)
        why = "the loader's side was not measured" if batches else "no batch was delivered"
        line = f"no verdict: {why}"
    else:
        line = (
            f"{rec.bottleneck}-bound: the pipeline can deliver "
            f"{units.samples_per_s(rec.predicted_samples_per_s)} samples/s"
        )
        if rec.whatif is not None and rec.whatif.unchecked:
            line += f" ({unchecked_text(rec.whatif.unchecked)})"
    if rec.measured_samples_per_s is not None:
        got = units.samples_per_s(rec.measured_samples_per_s)
        line += f" (measured {got})" if judged(rec) else f"; {got} samples/s delivered"
    if rec.gpu_idle_fraction is not None:
        line += f"; the GPU waits {rec.gpu_idle_fraction:.0%} of the time"
    c = f.close_call
    if c is not None:
        line += (
            f". A close call: {c.stage} is within {c.gap:.0%} ({units.samples_per_s(c.capacity)} samples/s), "
            f"so a rerun may name it, and raising {rec.bottleneck} alone gains at most that"
        )
    return line


def link_verdict(rec: RunRecord, f: Findings) -> str | None:
    """The verdict of a probe with no pipeline (``--pcie-only``); None for any other record."""
    pc = rec.stages.pcie
    if any(rec.stages.capacities().values()) or not pc.copies:
        return None
    h2d = next((c for c in f.numbers.copy_peaks if c.direction == "h2d"), None)
    line = f"host-to-device: pinned copies reach {units.bandwidth(h2d.pinned if h2d else 0.0)}"
    if pc.link is not None:
        line += f" on a {link_label(pc.link)} link"
    if pc.efficiency is not None:
        line += f" ({pc.efficiency:.0%} of its rate)"
    return line


# -- one line per stage: what its capacity was measured from --------------------------------


def stage_detail(rec: RunRecord, name: str) -> str:
    """What a stage's capacity was measured from, in a line."""
    return {
        "storage": _storage_detail,
        "cpu": _cpu_detail,
        "pcie": _pcie_detail,
        "gpu": _gpu_detail,
    }[name](rec)


def _storage_detail(rec: RunRecord) -> str:
    st = rec.stages.storage
    parts = []
    for p in (st.cold, st.warm):
        if p is not None and p.read_bytes_per_s is not None:
            cache = "remote" if rec.dataset.remote else p.cache
            parts.append(
                f"{cache} {units.bandwidth(p.read_bytes_per_s)} @ {p.best_concurrency} threads, "
                f"p99 {p.latency_p99_ms or 0:.1f} ms"
            )
    return "; ".join(parts) or st.basis or "not measured"


def _cpu_detail(rec: RunRecord) -> str:
    cpu = rec.stages.cpu
    if cpu.cpu_seconds_per_sample is None:
        return "not measured"
    loader = f" ({cpu.loader})" if cpu.loader else ""
    n = ranks_on_host(rec)
    # one rank of several on a host: its loader was modelled on its share of the cores
    share = f", {recorded_cores(rec):.3g} per rank ({n} ranks on the host)" if n > 1 else ""
    nodes = node_cores(rec)
    if nodes:  # a probe across nodes sums them: no one machine has them all
        each = (
            f"{nodes[0]:.0f} per node"
            if len(set(nodes)) == 1
            else "per node " + ", ".join(f"{c:.0f}" for c in nodes)
        )
        share = f" ({each})"
    return (
        f"{cpu.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample{loader}, "
        f"{cpu.usable_cores} usable cores{share}"
    )


def _pcie_detail(rec: RunRecord) -> str:
    pc = rec.stages.pcie
    if pc.copies and pc.bytes_per_s is not None:
        line = f"pinned {units.bandwidth(pc.bytes_per_s)}"
        if pc.pageable_bytes_per_s:
            line += f", pageable {units.bandwidth(pc.pageable_bytes_per_s)}"
        if pc.bytes_per_sample:
            line += f" per batch, {units.size(pc.bytes_per_sample)}/sample"
        return line
    if pc.bytes_per_s is None or pc.bytes_per_sample is None:
        return pc.method
    return (
        f"{units.size(pc.bytes_per_sample)}/sample at {units.bandwidth(pc.bytes_per_s)}, "
        f"{pc.pinned_fraction or 0:.0%} pinned ({pc.method.split(',')[0]})"
    )


def _gpu_detail(rec: RunRecord) -> str:
    gpu = rec.stages.gpu
    if gpu.method == "emulated" and gpu.step_seconds is not None:
        return f"emulated: {gpu.step_seconds * 1e3:g} ms per batch of {gpu.batch_size}"
    return gpu.method


# -- key measurements ------------------------------------------------------------------------


def facts_title(rec: RunRecord) -> str:
    return {"size": "Inputs", "whatif": "The change"}.get(rec.kind, "Key measurements")


def key_facts(rec: RunRecord, f: Findings) -> Facts:
    """The facts a report lists for ``rec``: a sizing's inputs, a what-if's change and its
    measurements, or a run's measurements."""
    if rec.kind == "size":
        return size_facts(rec)
    return whatif_facts(rec) + measurements(rec, f)


def measurements(rec: RunRecord, f: Findings) -> Facts:
    """The handful of numbers a reader checks first, as (label, value) pairs."""
    n = f.numbers
    out = _rates(rec)
    w = rec.watch
    if w is not None:
        out += _dali_facts(rec, n.dali) if rec.dali is not None else [_loader_line(w)]
        if w.rank is not None:
            r = w.rank
            node = (
                f", node {r.node_rank} of {r.nodes}" if r.node_rank is not None and r.nodes else ""
            )
            out.append(("rank", f"{r.rank} of {r.world_size} ({r.launcher}{node})"))
        out += _copies_fact(n.copies) + _delivery_facts(n.delivery)
        out += sample_facts(f) + queue_facts(f) + epoch_facts(f) + worker_facts(f)
        out += watch_cost_facts(f)
    out += cluster_facts(rec, f)
    out += device_facts(rec, f)
    out += decode_facts(rec, f) + link_facts(rec, f) + disk_to_gpu_facts(rec, f)
    out += series_facts(rec, f)
    if rec.pipeline is not None:
        out.append(("pipeline run", _pipeline_line(rec.pipeline)))
    gpu = rec.stages.gpu
    if gpu.busy_fraction is not None:
        out.append(("GPU busy", f"{gpu.busy_fraction:.0%} ({gpu.busy_method})"))
    if rec.duration_s is not None:
        out.append(("took", f"{rec.duration_s:,.1f} s"))
    return out


def size_line(rec: RunRecord, formats: str = "") -> str:
    """How big the dataset is, its density (and ``formats``); for a watched run whose workers
    read no file bytes, that they were not seen rather than a mean of 0 kB."""
    ds = rec.dataset
    if rec.watch is not None and not rec.watch.storage_metered:
        return (
            f"{ds.files:,} samples; bytes per sample not seen (reads through memory maps, "
            "and a client that receives in C such as uvloop or a CRT-based S3 client, show "
            "in no counter; ioprobe.loaders.files meters them)"
        )
    density = f"({ds.density} density" + (f", {formats})" if formats else ")")
    if rec.watch is not None and rec.watch.bytes_seen == "mmap":
        # the files' size stands in for reads that page faults made, which no counter shows
        k = rec.watch.mapped_files
        return (
            f"{ds.files:,} samples, {units.size(ds.bytes)} in {k:,} memory-mapped "
            f"file{'s' * (k != 1)}, {units.size(ds.sample_bytes_mean)} per sample {density}; "
            "read through page faults: the files' size, not bytes counted as read"
        )
    if rec.watch is not None:
        # the bytes are what the workers read over every epoch, not the dataset's size
        n = epoch_count(rec)
        return (
            f"{ds.files:,} samples, {units.size(ds.bytes)} read in {n} epoch{'s' * (n != 1)}, "
            f"{units.size(ds.sample_bytes_mean)} per sample {density}"
        )
    if ds.samples is not None:
        # packed: the files are shards, chunks or tables, and the mean is per sample
        return (
            f"{ds.files:,} {ds.layout} holding {ds.samples:,} samples ({ds.samples_basis}), "
            f"{units.size(ds.bytes)}, {units.size(ds.sample_bytes_mean)} per sample {density}"
        )
    return (
        f"{ds.files:,} files, {units.size(ds.bytes)}, mean "
        f"{units.size(ds.sample_bytes_mean)} {density}"
    )


def _rates(rec: RunRecord) -> Facts:
    """The dataset, and the rates measured and modelled on it."""
    ds = rec.dataset
    out = [("dataset", ds.target)]
    if ds.files:
        out.append(("size", size_line(rec)))
    if rec.measured_samples_per_s is not None:
        out.append(("measured", f"{units.samples_per_s(rec.measured_samples_per_s)} samples/s"))
    if any(rec.stages.capacities().values()) and judged(rec):
        out.append(
            (
                "model",
                f"{units.samples_per_s(rec.predicted_samples_per_s)} samples/s ({rec.bottleneck})",
            )
        )
    if rec.gpu_idle_fraction is not None:
        out.append(("GPU waiting", f"{rec.gpu_idle_fraction:.1%} ({rec.gpu_idle_method or ''})"))
    return out


def _loader_line(w: WatchData) -> tuple[str, str]:
    keys = ("num_workers", "batch_size", "pin_memory", "prefetch_factor")
    return ("loader", ", ".join(f"{k}={w.loader[k]}" for k in keys if k in w.loader))


def sample_facts(f: Findings) -> Facts:
    """The spread of what a sample costs and the heaviest samples, by index (and source)."""
    sc = f.sample_costs
    if sc is None:
        return []
    spread = "; ".join(
        f"{r.name} median {units.figure(r.p50)} {r.unit}, p99 {units.figure(r.p99)}, max {units.figure(r.max)}"
        for r in sc.rows
    )
    if sc.tail_share is not None and sc.tail_share >= 0.05:
        spread += f"; the slowest 1% of samples took {sc.tail_share:.0%} of the time"
    out = [("per sample", spread)]
    if sc.heaviest:
        shown = ", ".join(
            f"#{h.index} {units.figure(h.wall_ms)} ms" + (f" ({h.path})" if h.path else "")
            for h in sc.heaviest[:3]
            if h.index >= 0
        )
        if shown:
            out.append(("heaviest", f"{shown} (by {sc.index_kind})"))
    return out


def queue_facts(f: Findings) -> Facts:
    """What the in-order queue of batches cost, and what each loader setting would gain."""
    h = f.head_of_line
    if h is None or h.seconds <= 0:
        return []
    line = (
        f"waited {h.queue_seconds:.2f} s of {h.seconds:.2f} s behind a slow batch while a "
        f"later one was ready; stragglers held their batches {h.slow_sample_seconds:.2f} s"
    )
    if f.queue:
        line += (
            "; "
            + ", ".join(f"{p.setting}={p.proposed} {p.gain - 1:+.0%}" for p in f.queue)
            + " (simulated)"
        )
    return [("head-of-line", line)]


def epoch_facts(f: Findings) -> Facts:
    """What each epoch's start cost, and what persistent workers would save."""
    st = f.epoch_starts
    if st is None or not st.epochs:
        return []
    starts = ", ".join(f"{e.seconds:.2f}" for e in st.epochs[:6])  # kept whole (EPOCHS_HEAD)
    total = sum(e.merged for e in st.epochs)
    shown = sum(e.merged for e in st.epochs[:6])
    more = f" (+{total - shown:,} more)" if total > shown else ""
    line = f"{starts}{more} s from iter() to the first batch"
    first = st.epochs[0]
    if first.worker_startup_seconds is not None:
        line += f"; workers took {first.worker_startup_seconds:.2f} s to start"
    if st.shutdown_seconds is not None and st.shutdown_seconds >= 0.01:
        line += f" and {st.shutdown_seconds:.2f} s to shut down at an epoch's end"
    saving = per_epoch_saving(st)
    if saving is not None and saving >= 0.01:
        line += f"; persistent_workers=True saves {saving:.2f} s each epoch after the first"
    cold = [e for e in st.epochs if e.cold_read_seconds]
    if cold and st.warm_saved_seconds:
        n = sum(e.merged for e in cold)
        cold_bytes = sum(e.cold_read_bytes * e.merged for e in cold) / n
        line += (
            f"; {st.warm_saved_seconds / n:.2f} s of the first batch's wait read "
            f"{units.size(cold_bytes)} from the device in {n:,} of {total:,} starts: a warm "
            "page cache saves it"
            + (" (an epoch's data fits in the memory available)" if st.fits_in_memory else "")
        )
    return [("epoch start", line)]


def watch_cost_facts(f: Findings) -> Facts:
    """What the watch itself took from the loader's workers and from the main process at
    each epoch's start and end."""
    c = f.watch_cost
    if c is None:
        return []
    parts = []
    if c.per_batch_ms > 0:
        parts.append(
            f"{c.per_batch_ms:.2f} ms per batch in the workers ({c.share:.2%} of their time): "
            "ioprobe's own work after each collate"
        )
    if c.epoch_ms > 0:
        parts.append(
            f"{c.epoch_ms:.1f} ms per epoch in the main process ({c.epoch_share:.2%} of the "
            "epochs' time): its own work at each epoch's start and end"
        )
    if c.imports:
        parts.append(
            f"{c.import_ms:.1f} ms per worker start importing ioprobe's worker module "
            f"({c.imports:,} spawned {'start' if c.imports == 1 else 'starts'})"
        )
    return [("watch cost", "; ".join(parts))] if parts else []


def worker_facts(f: Findings) -> Facts:
    """Each warm worker's time to make a batch: p50/p95/p99, so one slow worker shows."""
    if not f.worker_latency:
        return []
    shown = "; ".join(
        f"{w.worker}: {units.figure(w.p50_ms)}/{units.figure(w.p95_ms)}/{units.figure(w.p99_ms)}"
        for w in f.worker_latency[:8]
    )
    more = f" (+{len(f.worker_latency) - 8} more)" if len(f.worker_latency) > 8 else ""
    return [("batch ms by worker", f"p50/p95/p99 after warm-up, {shown}{more}")]


def _delivery_facts(d: Delivery | None) -> Facts:
    """The host clock's stall share where the device's own clock timed the run, the batches,
    and the consumer's wait per batch."""
    if d is None:
        return []
    out = []
    if d.host_stall_share is not None:
        out.append(
            (
                "host stall",
                f"{d.host_stall_share:.1%} of the time blocked in next() (host clock; the "
                "device clock above is the GPU's own)",
            )
        )
    out.append(("batches", f"{d.batches:,} in {d.epochs} epoch(s)"))
    if d.stall_p50_ms is not None and d.stall_p95_ms is not None:
        out.append(
            ("stall per batch", f"median {d.stall_p50_ms:.2f} ms, p95 {d.stall_p95_ms:.2f} ms")
        )
    return out


def _dali_facts(rec: RunRecord, t: DaliTotals | None) -> Facts:
    d = rec.dali
    if d is None or t is None:
        return []
    p = d.pipeline
    keys = ("batch_size", "num_threads", "prefetch_queue_depth", "exec_dynamic")
    out = [
        ("DALI pipeline", ", ".join(f"{k}={p[k]}" for k in keys if k in p)),
        (
            "operator timing",
            "NVTX ranges (ioprobe's injection library)"
            if d.timing == "nvtx"
            else f"DALI threads' CPU time only: {d.timing_note}",
        ),
        ("DALI threads' CPU", f"{t.thread_cpu_seconds:,.2f} s in {t.threads} threads"),
    ]
    if t.fetch_ms is not None:
        out.append(("reader fetches", f"{d.reads:,}, {t.fetch_ms:.3f} ms each"))
    if d.consumer_cpu_seconds:
        out.append(("consumer CPU in next()", f"{d.consumer_cpu_seconds:,.2f} s"))
    if d.worker_cpu_seconds:
        out.append(("external_source workers' CPU", f"{d.worker_cpu_seconds:,.2f} s"))
    pre = rec.stages.gpu.preprocess_seconds
    if pre is not None:
        out.append(("GPU preprocessing", f"{pre * 1e3:.2f} ms per batch (mixed and GPU operators)"))
    return out


def _copies_fact(c: CopyTotals | None) -> Facts:
    if c is None:
        return []
    speed = units.bandwidth(c.bytes_per_s) if c.bytes_per_s is not None else "n/a"
    return [
        (
            "host-to-device",
            f"{c.copies:,} copies, {units.size(c.bytes)} in {c.seconds:.3f} s ({speed}), "
            f"{c.pinned_share:.0%} from pinned memory",
        )
    ]


def _pipeline_line(p: PipelineRun) -> str:
    return (
        f"{p.workers} workers, batch {p.batch_size}, {p.compute_seconds_per_batch * 1e3:g} ms "
        f"compute: {units.samples_per_s(p.samples_per_s)} samples/s, GPU idle {p.gpu_idle_fraction:.0%}"
        + (f", {p.errors:,} samples failed to read or decode" if p.errors else "")
    )


def series_facts(rec: RunRecord, f: Findings) -> Facts:
    """One key-measurements line for the NVML series: means and peaks, rate and cost."""
    s = rec.gpu_series
    if s is None:
        return []
    summary = f.numbers.series
    if summary is None:
        return [("NVML", s.status)]  # sampled, nothing came: say why
    return [("NVML", "; ".join(_series_readings(summary)) + f" ({_series_sampling(s, summary)})")]


def _series_readings(s: SeriesSummary) -> list[str]:
    """The readings a reader looks for first; a reading the device never gave is left out."""
    parts = []
    if s.sm_mean is not None:
        parts.append(f"SM busy {s.sm_mean:.0f}% mean")
    if s.pcie_rx_peak is not None:
        parts.append(f"PCIe to GPU {units.bandwidth(s.pcie_rx_peak)} peak")
    if s.power_mean is not None:
        parts.append(f"{s.power_mean:.0f} W mean")
    return parts


def _series_sampling(s: GpuSeries, summary: SeriesSummary) -> str:
    """How often the sampler read, how many rows it kept, and what one poll cost."""
    hz = f"{summary.hz:.3g} Hz, " if summary.hz is not None else ""
    rate_hz = f"{hz}{summary.rows:,} rows"
    if s.poll_seconds is None:
        return rate_hz
    p = s.poll_seconds  # µs for a stand-in or a fast driver, ms for a real GPU
    cost = f", {p * 1e6:.0f} µs per poll" if p < 1e-3 else f", {p * 1e3:.1f} ms per poll"
    return rate_hz + cost


def decode_facts(rec: RunRecord, f: Findings) -> Facts:
    """Key-measurement lines comparing the measured decode paths, as (label, value) pairs:
    one per path, rates relative to Pillow's, and the path the CPU stage uses."""
    n = f.numbers
    out: Facts = [(f"decode {r.path.path}", _decode_line(r)) for r in n.decode]
    if n.decode_in_use is not None:
        out.append(
            ("decode in use", f"{label(n.decode_in_use)}: the CPU stage's capacity is its rate")
        )
    return out


def _decode_line(r: DecodeRow) -> str:
    """A path's rate (against Pillow's), its CPU cost, and what it ran on."""
    p = r.path
    if p.error is not None or not p.samples_per_s:
        return f"not measured: {p.error or 'no images decoded'}"
    text = f"{p.samples_per_s:,.0f} images/s"
    if r.vs_pillow is not None:
        text += f" ({r.vs_pillow:.2f}x Pillow)"
    if p.cpu_seconds_per_sample is not None:
        text += f", {p.cpu_seconds_per_sample * 1e3:.2f} ms CPU/image"
    unit = "worker" if p.path == "pillow" else "thread"
    text += f", {p.threads} {unit}{'s' if p.threads != 1 else ''}, {p.files} files"
    if p.warmed_up is False:
        # the warm-up ended at its time limit while the rate was still rising
        text += (
            f"; short run: {p.timed_batches} batches timed after a {p.warmup_batches}-batch "
            "warm-up still speeding up, below the steady rate (a longer --time-budget warms it)"
        )
    return text


def link_facts(rec: RunRecord, f: Findings) -> Facts:
    """Key measurements of the host-to-device probe, as (label, value) pairs."""
    pc = rec.stages.pcie
    out: Facts = []
    if pc.link is not None:
        value = link_label(pc.link)
        if pc.link.theoretical_bytes_per_s:
            value += f", {units.bandwidth(pc.link.theoretical_bytes_per_s)} per direction"
        out.append(("PCIe link", value))
    if not pc.copies:
        return out
    parts = [_copy_peak(c) for c in f.numbers.copy_peaks]
    if pc.efficiency is not None:
        parts.append(f"pinned peak {pc.efficiency:.0%} of the link")
    out.append(("copies", "; ".join(parts)))
    return out


def _copy_peak(c: CopyPeak) -> str:
    name = {"h2d": "host→device", "d2h": "device→host"}[c.direction]
    line = f"{name} pinned {units.bandwidth(c.pinned)}"
    if c.pageable:
        line += f", pageable {units.bandwidth(c.pageable)}"
    return line


def device_facts(rec: RunRecord, f: Findings) -> Facts:
    """The device limit (``probe --device-limit``): the best direct reads of each block size
    beside the loader's cold reads, and the levers the sweep shows would close the gap."""
    dev = rec.stages.storage.device
    if dev is None:
        return []
    h = f.numbers.headroom
    if h is None:
        return [("device limit", f"not measured: {dev.note or 'no direct read completed'}")]
    parts = []
    if h.large is not None:
        b = h.large
        line = (
            f"{units.bandwidth(b.read_bytes_per_s)} in direct {units.memory(b.block_bytes)} "
            f"reads, {b.depth} in flight"
        )
        if h.ratio is not None and h.loader_bytes_per_s:
            line += (
                f": {units.ratio(h.ratio)} the loader's cold reads "
                f"({units.bandwidth(h.loader_bytes_per_s)} at {h.loader_depth} threads)"
            )
        parts.append(line)
    if h.small is not None:
        parts.append(
            f"4 KiB reads: {h.small.reads_per_s:,.0f}/s at {h.small.depth} in flight "
            f"({units.bandwidth(h.small.read_bytes_per_s)})"
        )
    levers = []
    if "direct" in h.levers and h.at_loader_depth and h.loader_bytes_per_s:
        levers.append(
            "reads past the page cache (direct I/O, GPUDirect Storage: "
            f"{units.ratio(h.at_loader_depth / h.loader_bytes_per_s)} at the same "
            f"{h.loader_depth} in flight)"
        )
    if "depth" in h.levers and h.large is not None and h.at_loader_depth:
        levers.append(
            f"more reads in flight ({h.large.depth}: "
            f"{units.ratio(h.large.read_bytes_per_s / h.at_loader_depth)} over "
            f"{h.loader_depth} direct)"
        )
    if levers:
        parts.append("what would buy it: " + "; ".join(levers))
    elif h.ratio is not None and h.ratio < LEVER_GAIN:
        parts.append("the loader's reads already get what the device gives")
    if dev.engine == "threads":
        parts.append("one thread per read in flight (no io_uring here)")
    return [("device limit", "; ".join(parts))]


def disk_to_gpu_facts(rec: RunRecord, f: Findings) -> Facts:
    """The disk-to-GPU path beside the stages it joins: its end-to-end rate, the storage
    pass's rate on its own, and what cuFile did where kvikio was there."""
    path = rec.stages.pcie.disk_to_gpu
    if path is None:
        return []
    if path.bytes_per_s is None:
        return [("disk→GPU", path.method)]
    line = f"{units.bandwidth(path.bytes_per_s)} end to end ({path.cache}, {path.method})"
    beside = f.numbers.storage_beside_path
    if beside is not None:
        one, cache = beside
        how = f" ({cache}, 1 thread as the path reads)" if cache is not None else ""
        line += f"; storage alone {units.bandwidth(one)}{how}"
    if path.cufile_bytes_per_s is not None:
        line += f"; cuFile {units.bandwidth(path.cufile_bytes_per_s)} ({path.cufile})"
    elif path.cufile:
        line += f"; cuFile: {path.cufile}"
    return [("disk→GPU", line)]


# -- a distributed run -----------------------------------------------------------------------


def cluster_title(rec: RunRecord) -> str | None:
    """The heading over a distributed run's ranks: how many, on how many nodes, launched how."""
    d = rec.distributed
    if d is None:
        return None
    return f"Across {d.world_size} ranks on {d.nodes} node{'s' * (d.nodes != 1)} ({d.launcher})"


def cluster_sentence(f: Findings) -> str | None:
    """What the ranks say together: a watched job's spread and stragglers, or where a
    probe's shared storage saturated; None where neither was found."""
    if f.rank_spread is not None:
        text = f.rank_spread.text
    elif f.saturation is not None:
        text = f.saturation.text
    else:
        return None
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def curve_line(rec: RunRecord) -> str | None:
    """A probe's aggregate read against the clients reading at once, point by point."""
    d = rec.distributed
    if d is None or not d.curve:
        return None
    pts = sorted(d.curve, key=lambda p: p.clients)
    return "aggregate read by clients reading at once: " + ", ".join(
        f"{p.clients}: {units.bandwidth(p.read_bytes_per_s)}" for p in pts
    )


RankColumns = list[tuple[str, bool]]  # (heading, numeric)
PROBE_COLUMNS: RankColumns = [
    ("rank", True),
    ("host", False),
    ("read MB/s", True),
    ("files/s", True),
    ("p99 ms", True),
    ("CPU samples/s", True),
    ("cores", True),
    ("errors", True),
]
WATCH_COLUMNS: RankColumns = [
    ("rank", True),
    ("host", False),
    ("stall", True),
    ("step ms", True),
    ("ready p50/p95/p99 ms", True),
    ("samples/s", True),
    ("verdict", False),
    ("straggler", False),
]


def rank_columns(t: RankTable) -> RankColumns:
    """The per-rank table's columns: a probe's read and CPU figures, a watch's loader's."""
    return WATCH_COLUMNS if t.kind == "watch" else PROBE_COLUMNS


def _opt(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def rank_cells(t: RankTable, r: RankFigures, spread: RankSpread | None) -> list[str]:
    """One rank's row of the per-rank table, in ``rank_columns`` order."""
    if t.kind != "watch":
        return [
            str(r.rank),
            r.host,
            _opt(None if r.read_bytes_per_s is None else r.read_bytes_per_s / 1e6, ",.1f"),
            _opt(r.files_per_s, ",.0f"),
            _opt(r.latency_p99_ms, ",.1f"),
            units.samples_per_s(r.cpu_samples_per_s),
            _opt(r.usable_cores, "d"),
            str(r.read_errors),
        ]
    ready = (r.ready_ms_p50, r.ready_ms_p95, r.ready_ms_p99)
    slow = next((s for s in spread.stragglers if s.rank == r.rank), None) if spread else None
    return [
        str(r.rank),
        r.host,
        _opt(r.stall_fraction, ".1%"),
        "-" if r.step_ms is None else units.figure(r.step_ms),
        "/".join("-" if v is None else units.figure(v) for v in ready),
        units.samples_per_s(r.samples_per_s),
        rank_verdict(r, spread),
        f"yes: {slow.cause}" if slow is not None else "",
    ]


def rank_rest(t: RankTable) -> str | None:
    """The line under a short per-rank table for the ranks it leaves out."""
    rest = t.rest
    if rest is None:
        return None
    more = f"{rest.ranks:,} more rank{'s' * (rest.ranks != 1)}"
    if rest.low is None or rest.high is None or rest.median is None:
        return f"{more}, not measured"
    if rest.figure == "stall":
        return f"{more}: stall {rest.low:.1%} to {rest.high:.1%} (median {rest.median:.1%})"
    return (
        f"{more}: read {units.bandwidth(rest.low)} to {units.bandwidth(rest.high)} "
        f"(median {units.bandwidth(rest.median)})"
    )


def missing_line(t: RankTable) -> str | None:
    """The ranks that were lost before the end, whose figures the table lacks."""
    if not t.missing:
        return None
    names = ", ".join(str(r) for r in t.missing)
    return f"lost before the end: rank{'s' * (len(t.missing) != 1)} {names} (no figures)"


MAX_NODE_FACTS = 8


def cluster_facts(rec: RunRecord, f: Findings) -> Facts:
    """Key-measurement lines of a distributed run: its ranks and nodes, a probe's threads
    per rank and each node's sums, a watched job's exposed wait."""
    d = rec.distributed
    if d is None:
        return []
    line = f"{d.world_size} on {d.nodes} node{'s' * (d.nodes != 1)} ({d.launcher})"
    if d.threads_per_rank:
        line += f", {d.threads_per_rank} read threads per rank"
    out = [("ranks", line)]
    probed = rec.kind == "probe" and f.nodes
    if probed and any(n.read_bytes_per_s or n.cpu_samples_per_s for n in f.nodes):
        shown = "; ".join(
            f"{n.host}: {n.ranks} ranks, read {units.bandwidth(n.read_bytes_per_s)}, "
            f"{units.samples_per_s(n.cpu_samples_per_s)} samples/s decoded"
            for n in f.nodes[:MAX_NODE_FACTS]
        )
        more = len(f.nodes) - MAX_NODE_FACTS
        out.append(("per node", shown + (f" (+{more} more)" if more > 0 else "")))
    if d.exposed_wait_seconds is not None:
        share = f", {d.exposed_fraction:.1%} of the job's time" if d.exposed_fraction else ""
        out.append(
            (
                "exposed wait",
                f"{d.exposed_wait_seconds:,.2f} s waiting on the slowest rank's data{share} "
                f"({d.steps_aligned:,} steps compared across ranks)",
            )
        )
    return out


# -- what-if and sizing ----------------------------------------------------------------------


def was_line(rec: RunRecord) -> str:
    """A what-if's starting point: the recorded verdict and rate."""
    w = rec.whatif
    assert w is not None
    was = w.base_measured_samples_per_s or w.base_predicted_samples_per_s
    return f"{w.base_bottleneck}-bound at {units.samples_per_s(was)} samples/s " + (
        "(measured)" if w.base_measured_samples_per_s else "(predicted)"
    )


def whatif_facts(rec: RunRecord) -> Facts:
    """A what-if's change, its starting point and each stage it moved, with the reason."""
    w = rec.whatif
    if w is None:
        return []
    out = [("change", change_flags(w.change)), ("was", was_line(rec))]
    for d in w.deltas:
        out.append(
            (
                d.stage,
                f"{units.samples_per_s(d.before)} -> {units.samples_per_s(d.after)} samples/s: {d.why}",
            )
        )
    out += [("assumes", a) for a in w.assumptions]
    return out


def size_facts(rec: RunRecord) -> Facts:
    """The numbers a sizing was computed from, and where each came from."""
    sz = rec.sizing
    if sz is None:
        return []
    i = sz.inputs
    out = [
        ("sample size", f"{units.size(i.sample_bytes)}"),
        ("one GPU consumes", f"{units.samples_per_s(i.gpu_samples_per_s)} samples/s"),
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


__all__ = [
    "Facts",
    "cluster_facts",
    "cluster_sentence",
    "cluster_title",
    "curve_line",
    "decode_facts",
    "disk_to_gpu_facts",
    "facts_title",
    "key_facts",
    "link_facts",
    "link_verdict",
    "measurements",
    "missing_line",
    "rank_cells",
    "rank_columns",
    "rank_rest",
    "series_facts",
    "size_facts",
    "stage_detail",
    "title",
    "unchecked_text",
    "verdict",
    "was_line",
    "whatif_facts",
]

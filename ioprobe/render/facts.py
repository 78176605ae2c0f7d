"""What a report says about a record, in words: the title, the verdict line, a line per stage
on what it was measured from, and the key measurements as (label, value) pairs. Every
renderer (terminal, HTML, Markdown) shows these same sentences; units come from
``ioprobe.render.format``."""

from __future__ import annotations

from collections.abc import Sequence

from ioprobe.analysis.decode_paths import current_path, label, measured
from ioprobe.analysis.pcie import link_label
from ioprobe.capacity import peak_copy_rate, single_thread_rate
from ioprobe.record import (
    CopyPoint,
    DecodePath,
    GpuSeries,
    PipelineRun,
    RunRecord,
    WatchData,
    WatchEpoch,
)
from ioprobe.render.format import change_flags, mb_per_s, rate

Facts = list[tuple[str, str]]


def title(rec: RunRecord) -> str:
    return (
        f"ioprobe {rec.kind}: {rec.dataset.target}" if rec.dataset.target else f"ioprobe {rec.kind}"
    )


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


def link_verdict(rec: RunRecord) -> str | None:
    """The verdict of a probe with no pipeline (``--pcie-only``); None for any other record."""
    pc = rec.stages.pcie
    if any(rec.stages.capacities().values()) or not pc.copies:
        return None
    pinned = peak_copy_rate(pc.copies, "h2d", "pinned") or 0.0
    line = f"host-to-device: pinned copies reach {pinned / 1e9:.1f} GB/s"
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
                f"{cache} {mb_per_s(p.read_bytes_per_s)} @ {p.best_concurrency} threads, "
                f"p99 {p.latency_p99_ms or 0:.1f} ms"
            )
    return "; ".join(parts) or st.basis or "not measured"


def _cpu_detail(rec: RunRecord) -> str:
    cpu = rec.stages.cpu
    if cpu.cpu_seconds_per_sample is None:
        return "not measured"
    loader = f" ({cpu.loader})" if cpu.loader else ""
    return (
        f"{cpu.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample{loader}, "
        f"{cpu.usable_cores} usable cores"
    )


def _pcie_detail(rec: RunRecord) -> str:
    pc = rec.stages.pcie
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
        f"{pc.bytes_per_sample / 1e3:,.1f} kB/sample at {mb_per_s(pc.bytes_per_s)}, "
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


def key_facts(rec: RunRecord) -> Facts:
    """The facts a report lists for ``rec``: a sizing's inputs, a what-if's change and its
    measurements, or a run's measurements."""
    if rec.kind == "size":
        return size_facts(rec)
    return whatif_facts(rec) + measurements(rec)


def measurements(rec: RunRecord) -> Facts:
    """The handful of numbers a reader checks first, as (label, value) pairs."""
    out = _rates(rec)
    w = rec.watch
    if w is not None:
        out += _dali_facts(rec) if rec.dali is not None else [_loader_line(w)]
        out += _device_facts(w) + _batch_facts(w)
    out += decode_facts(rec) + link_facts(rec) + disk_to_gpu_facts(rec) + series_facts(rec)
    p = rec.pipeline
    if p is not None:
        out.append(("pipeline run", _pipeline_line(p)))
    gpu = rec.stages.gpu
    if gpu.busy_fraction is not None:
        out.append(("GPU busy", f"{gpu.busy_fraction:.0%} ({gpu.busy_method})"))
    if rec.duration_s is not None:
        out.append(("took", f"{rec.duration_s:,.1f} s"))
    return out


def _rates(rec: RunRecord) -> Facts:
    """The dataset, and the rates measured and modelled on it."""
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
    return out


def _loader_line(w: WatchData) -> tuple[str, str]:
    keys = ("num_workers", "batch_size", "pin_memory", "prefetch_factor")
    return ("loader", ", ".join(f"{k}={w.loader[k]}" for k in keys if k in w.loader))


def _batch_facts(w: WatchData) -> Facts:
    out = [("batches", f"{sum(e.batches for e in w.epochs):,} in {len(w.epochs)} epoch(s)")]
    if w.stall_ms.count:
        vals = sorted(w.stall_ms.values)
        out.append(
            (
                "stall per batch",
                f"median {vals[len(vals) // 2]:.2f} ms, p95 "
                f"{vals[min(len(vals) - 1, int(0.95 * len(vals)))]:.2f} ms",
            )
        )
    return out


def _dali_facts(rec: RunRecord) -> Facts:
    d = rec.dali
    if d is None:
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


def _device_facts(w: WatchData) -> Facts:
    """Copies and the host's view of the wait, where the device's own clock was used."""
    return _copies_fact(w.epochs) + _host_stall_fact(w.epochs)


def _copies_fact(eps: Sequence[WatchEpoch]) -> Facts:
    nbytes = sum(e.h2d_bytes for e in eps)
    if not nbytes:
        return []
    pinned = sum(e.h2d_pinned_bytes for e in eps)
    secs = sum(e.h2d_seconds for e in eps)
    return [
        (
            "host-to-device",
            f"{sum(e.h2d_copies for e in eps):,} copies, {nbytes / 1e6:,.1f} MB in "
            f"{secs:.3f} s ({mb_per_s(nbytes / secs) if secs > 0 else 'n/a'}), "
            f"{pinned / nbytes:.0%} from pinned memory",
        )
    ]


def _host_stall_fact(eps: Sequence[WatchEpoch]) -> Facts:
    """The host clock's stall share beside the device clock's, over the epochs timed on both."""
    timed = [e for e in eps if e.gpu_wait_seconds is not None]
    stall = sum(e.stall_seconds for e in timed)
    wall = sum(e.seconds for e in timed)
    if wall > 0:
        return [
            (
                "host stall",
                f"{stall / wall:.1%} of the time blocked in next() (host clock; the device "
                "clock above is the GPU's own)",
            )
        ]
    return []


def _pipeline_line(p: PipelineRun) -> str:
    return (
        f"{p.workers} workers, batch {p.batch_size}, {p.compute_seconds_per_batch * 1e3:g} ms "
        f"compute: {rate(p.samples_per_s)} samples/s, GPU idle {p.gpu_idle_fraction:.0%}"
    )


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def series_facts(rec: RunRecord) -> Facts:
    """One key-measurements line for the NVML series: means and peaks, rate and cost."""
    s = rec.gpu_series
    if s is None:
        return []
    if not s.columns.get("t"):
        return [("NVML", s.status)]  # sampled, nothing came: say why
    return [("NVML", "; ".join(_series_readings(s.columns)) + f" ({_series_sampling(s)})")]


def _series_readings(cols: dict[str, list[float | None]]) -> list[str]:
    """The readings a reader looks for first; a reading the device never gave is left out."""
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
    return parts


def _series_sampling(s: GpuSeries) -> str:
    """How often the sampler read, how many rows it kept, and what one poll cost."""
    rate_hz = f"{1 / s.interval_s:.3g} Hz, {len(s.columns['t']):,} rows"
    if s.poll_seconds is None:
        return rate_hz
    p = s.poll_seconds  # µs for a stand-in or a fast driver, ms for a real GPU
    cost = f", {p * 1e6:.0f} µs per poll" if p < 1e-3 else f", {p * 1e3:.1f} ms per poll"
    return rate_hz + cost


def decode_facts(rec: RunRecord) -> Facts:
    """Key-measurement lines comparing the measured decode paths, as (label, value) pairs:
    one per path, rates relative to Pillow's, and the path the CPU stage uses."""
    paths = rec.stages.cpu.decode_paths
    if not paths:
        return []
    base = measured(rec, "pillow")
    out: Facts = [(f"decode {p.path}", _decode_line(p, base)) for p in paths]
    cur = current_path(rec)
    if cur is not None:
        out.append(("decode in use", f"{label(cur)}: the CPU stage's capacity is its rate"))
    return out


def _decode_line(p: DecodePath, base: DecodePath | None) -> str:
    """A path's rate (against Pillow's, ``base``), its CPU cost, and what it ran on."""
    if p.error is not None or not p.samples_per_s:
        return f"not measured: {p.error or 'no images decoded'}"
    text = f"{p.samples_per_s:,.0f} images/s"
    if base is not None and p is not base and base.samples_per_s:
        text += f" ({p.samples_per_s / base.samples_per_s:.2f}x Pillow)"
    if p.cpu_seconds_per_sample is not None:
        text += f", {p.cpu_seconds_per_sample * 1e3:.2f} ms CPU/image"
    unit = "worker" if p.path == "pillow" else "thread"
    return text + f", {p.threads} {unit}{'s' if p.threads != 1 else ''}, {p.files} files"


def link_facts(rec: RunRecord) -> Facts:
    """Key measurements of the host-to-device probe, as (label, value) pairs."""
    pc = rec.stages.pcie
    out: Facts = []
    if pc.link is not None:
        value = link_label(pc.link)
        if pc.link.theoretical_bytes_per_s:
            value += f", {pc.link.theoretical_bytes_per_s / 1e9:.1f} GB/s per direction"
        out.append(("PCIe link", value))
    if not pc.copies:
        return out
    parts = _copy_peaks(pc.copies)
    if pc.efficiency is not None:
        parts.append(f"pinned peak {pc.efficiency:.0%} of the link")
    out.append(("copies", "; ".join(parts)))
    return out


def _copy_peaks(copies: Sequence[CopyPoint]) -> list[str]:
    """Each direction's best pinned and pageable copy; a direction not measured is left out."""
    parts = []
    for direction, name in (("h2d", "host→device"), ("d2h", "device→host")):
        pinned = peak_copy_rate(copies, direction, "pinned")
        if pinned is None:
            continue
        line = f"{name} pinned {pinned / 1e9:.1f} GB/s"
        pageable = peak_copy_rate(copies, direction, "pageable")
        if pageable:
            line += f", pageable {pageable / 1e9:.1f} GB/s"
        parts.append(line)
    return parts


def _storage_beside(rec: RunRecord, cold: bool) -> str | None:
    """The storage pass's rate to set beside the path: one thread, as the path reads, in the
    same page-cache state where that pass ran; the best rate where no one-thread level is."""
    st = rec.stages.storage
    one = single_thread_rate(st, cold)
    if one is not None:
        return f"{one[0] / 1e9:,.2f} GB/s ({one[1]}, 1 thread as the path reads)"
    if st.read_bytes_per_s:
        return f"{st.read_bytes_per_s / 1e9:,.2f} GB/s"
    return None


def disk_to_gpu_facts(rec: RunRecord) -> Facts:
    """The disk-to-GPU path beside the stages it joins: its end-to-end rate, the storage
    pass's rate on its own, and what cuFile did where kvikio was there."""
    path = rec.stages.pcie.disk_to_gpu
    if path is None:
        return []
    if path.bytes_per_s is None:
        return [("disk→GPU", path.method)]
    line = f"{path.bytes_per_s / 1e9:,.2f} GB/s end to end ({path.cache}, {path.method})"
    storage = _storage_beside(rec, path.cache == "cold")
    if storage:
        line += f"; storage alone {storage}"
    if path.cufile_bytes_per_s is not None:
        line += f"; cuFile {path.cufile_bytes_per_s / 1e9:,.2f} GB/s ({path.cufile})"
    elif path.cufile:
        line += f"; cuFile: {path.cufile}"
    return [("disk→GPU", line)]


# -- what-if and sizing ----------------------------------------------------------------------


def was_line(rec: RunRecord) -> str:
    """A what-if's starting point: the recorded verdict and rate."""
    w = rec.whatif
    assert w is not None
    was = w.base_measured_samples_per_s or w.base_predicted_samples_per_s
    return f"{w.base_bottleneck}-bound at {rate(was)} samples/s " + (
        "(measured)" if w.base_measured_samples_per_s else "(predicted)"
    )


def whatif_facts(rec: RunRecord) -> Facts:
    """A what-if's change, its starting point and each stage it moved, with the reason."""
    w = rec.whatif
    if w is None:
        return []
    out = [("change", change_flags(w.change)), ("was", was_line(rec))]
    for d in w.deltas:
        out.append((d.stage, f"{rate(d.before)} -> {rate(d.after)} samples/s: {d.why}"))
    out += [("assumes", a) for a in w.assumptions]
    return out


def size_facts(rec: RunRecord) -> Facts:
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


__all__ = [
    "Facts",
    "decode_facts",
    "disk_to_gpu_facts",
    "facts_title",
    "key_facts",
    "link_facts",
    "link_verdict",
    "measurements",
    "series_facts",
    "size_facts",
    "stage_detail",
    "title",
    "verdict",
    "was_line",
    "whatif_facts",
]

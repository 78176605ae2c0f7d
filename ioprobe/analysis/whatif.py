"""What-if: the pipeline model re-run from a record with some resources changed.

``evaluate(rec, change)`` recomputes each stage's capacity from what the record measured
(CPU seconds per sample, the storage sweep, the consumer's step time) under the new
resources, and runs the pipeline model on the result. ``whatif(rec, change)`` wraps that in a
record of kind ``whatif``. The recommendation rules use ``evaluate`` too, so every predicted
gain in a report is a what-if the user can re-run and check.

Each capacity is scaled as a ratio to the recorded one, ``cap_new = cap_old * f(new) / f(old)``,
so an empty change reproduces the record exactly and only the scaling law ``f`` is assumed.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re

from ioprobe.analysis.cache import steady_hit_rate
from ioprobe.analysis.catalog import read_rate
from ioprobe.analysis.decode_paths import current_path, decodes_on_gpu, label, measured
from ioprobe.analysis.model import PipelineFindings, cpu_context, loader_cores, pipeline_model
from ioprobe.errors import BadInputError
from ioprobe.record import (
    STAGE_NAMES,
    CacheOrder,
    Change,
    CpuLevel,
    RunRecord,
    StageDelta,
    StageName,
    Stages,
    SweepPoint,
    WhatIfData,
)

# PCIe payload rate per lane and direction, after line coding (128b/130b from Gen3 on; Gen6
# is FLIT-mode PAM4): GT/s * coding / 8 bits.
PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
# Share of that a large pinned cudaMemcpy reaches once TLP headers and flow control are paid;
# host-to-device copies on Gen4 x16 typically measure 24-26 GB/s of 31.5.
PCIE_EFFICIENCY = 0.8
# Images/s one GPU's nvJPEG decoder (DALI's "mixed" device) sustains on ImageNet-sized JPEGs,
# used until the record has DALI's own measurement. An assumption, see docs/methodology.md.
GPU_DECODE_IMAGES_PER_S = 3000.0
# Share of the CPU time per image left on the CPU when decode moves to the GPU: file reads,
# JPEG header parsing and, on GPUs without a hardware decoder, part of Huffman decoding.
GPU_DECODE_CPU_FRACTION = 0.25

_PCIE = re.compile(r"^gen([1-6])\s*x\s*(1|2|4|8|16)$", re.IGNORECASE)


def parse_pcie(text: str) -> float:
    """``gen4x16`` to the link's usable host-to-device bytes/s."""
    m = _PCIE.match(text.strip())
    if not m:
        raise BadInputError(
            f"--pcie {text!r}: expected genG xW, e.g. gen4x16 (G 1-6, W 1, 2, 4, 8 or 16)"
        )
    return PCIE_LANE_BYTES_PER_S[int(m.group(1))] * int(m.group(2)) * PCIE_EFFICIENCY


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A record's stages under a change, and what the model makes of them."""

    stages: Stages
    findings: PipelineFindings
    deltas: tuple[StageDelta, ...]
    assumptions: tuple[str, ...]

    @property
    def predicted_samples_per_s(self) -> float:
        return self.findings.predicted_samples_per_s


def split_base(rec: RunRecord) -> tuple[RunRecord, Change]:
    """The measured record a what-if started from, and the change already applied to it."""
    if rec.whatif is None:
        return rec, Change()
    w = rec.whatif
    base = dataclasses.replace(
        rec,
        kind=w.base_kind,
        stages=w.base_stages,
        bottleneck=w.base_bottleneck,
        predicted_samples_per_s=w.base_predicted_samples_per_s,
        measured_samples_per_s=w.base_measured_samples_per_s,
        gpu_idle_fraction=w.base_gpu_idle_fraction,
        whatif=None,
    )
    return base, w.change


def merge(first: Change, then: Change) -> Change:
    """``then`` applied on top of ``first``: each field ``then`` sets wins."""
    out = copy.deepcopy(first)
    default = Change()
    for f in dataclasses.fields(Change):
        value = getattr(then, f.name)
        if value != getattr(default, f.name):
            setattr(out, f.name, copy.deepcopy(value))
    return out


def recorded_workers(rec: RunRecord) -> int:
    """Loader workers per GPU process in the recorded run (0: loading in the main process)."""
    if rec.watch is not None:
        try:
            return max(int(rec.watch.loader.get("num_workers", "0")), 0)
        except ValueError:
            return 0
    if rec.stages.cpu.sweep:
        best = max(rec.stages.cpu.sweep, key=lambda lv: lv.samples_per_s)
        return best.workers
    return rec.settings.workers or rec.stages.cpu.usable_cores or rec.host.usable_cores or 1


# Samplers that read every sample once per epoch in a fresh random order; anything else that
# is not sequential (weighted, custom) is treated as shuffled too, the common case.
_SEQUENTIAL_SAMPLERS = {"SequentialSampler"}


def recorded_order(rec: RunRecord) -> CacheOrder:
    """The order the recorded loader read samples in, as the cache model needs it: a
    ``SequentialSampler`` or an iterable dataset (a stream, the same order every epoch) is
    sequential; everything else, and a probe, is shuffled."""
    if rec.watch is not None:
        info = rec.watch.loader
        if info.get("iterable") == "True" or info.get("sampler") in _SEQUENTIAL_SAMPLERS:
            return "sequential"
    return "shuffled"


def recorded_gpus(rec: RunRecord) -> int:
    return max(rec.settings.gpus, 1)


def recorded_cores(rec: RunRecord) -> float:
    return float(rec.stages.cpu.usable_cores or rec.host.usable_cores or 1)


def dataset_bytes(rec: RunRecord) -> float:
    """The dataset's size: samples x mean sample size (a watch's ``bytes`` counts re-reads)."""
    ds = rec.dataset
    if ds.files and ds.sample_bytes_mean:
        return ds.files * ds.sample_bytes_mean
    return float(ds.bytes)


def _curve(points: list[tuple[float, float]], x: float, extrapolate: bool) -> float:
    """Piecewise-linear through (0, 0) and ``points``; beyond the last point either the last
    point's per-unit rate continues (``extrapolate``) or the curve stays flat."""
    pts = sorted([(0.0, 0.0), *points])
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    xl, yl = pts[-1]
    if extrapolate and xl > 0:
        return yl * x / xl
    return max(y for _, y in pts)


def _cpu_parallelism(rec: RunRecord, workers: int, gpus: int, cores: float) -> float:
    """How many samples the loader can decode at once: its effective cores."""
    lanes = max(workers, 1) * gpus
    if rec.watch is not None:
        # the rule the watcher used, with one training loop per GPU process
        ctx = cpu_context(rec.watch.epochs, recorded_workers(rec), recorded_cores(rec))
        per_gpu_loop = dataclasses.replace(ctx, loop_cores=ctx.loop_cores * gpus)
        return loader_cores(lanes, cores, per_gpu_loop, workers)
    return min(lanes, cores)


def _cpu_rate(rec: RunRecord, parallel: float) -> float:
    """Samples/s at ``parallel`` workers: the probe's measured scaling curve where there is
    one (efficiency of the last measured level carried on), linear otherwise."""
    sweep: list[CpuLevel] = rec.stages.cpu.sweep
    if rec.watch is None and sweep:
        return _curve([(lv.workers, lv.samples_per_s) for lv in sweep], parallel, True)
    return parallel


def _storage_lanes(rec: RunRecord, workers: int, gpus: int, workers_changed: bool) -> float:
    """Reads in flight: one per loader worker; a probe's default is its best concurrency."""
    if rec.watch is None and not workers_changed:
        p = rec.stages.storage.cold or rec.stages.storage.warm
        if p is not None and p.best_concurrency:
            return float(p.best_concurrency)
    return float(max(workers, 1) * gpus)


def _storage_rate(rec: RunRecord, lanes: float) -> tuple[float, bool]:
    """Relative storage rate at ``lanes`` reads in flight, and whether a measured curve gave it.
    A probe's sweep is the curve (flat beyond its last level: storage saturates); a watch
    has one level, so it scales linearly with the reads in flight."""
    st = rec.stages.storage
    p = st.cold or st.warm  # the pass the probe took the capacity from
    sweep: list[SweepPoint] = p.sweep if p is not None else []
    if rec.watch is None and sweep:
        pts = [(float(s.concurrency), s.read_bytes_per_s) for s in sweep if s.read_bytes_per_s]
        if pts:
            return _curve(pts, lanes, False), True
    return lanes, False


def resources(rec: RunRecord, ch: Change) -> tuple[int, int, float]:
    """Workers per GPU process, GPU processes and cores under ``ch`` (a full change, as
    merged onto the base record): what is unchanged keeps the recorded value, except that a
    probe's loader uses every core it is given."""
    w = ch.workers if ch.workers is not None else recorded_workers(rec)
    g = ch.gpus if ch.gpus is not None else recorded_gpus(rec)
    cores = float(ch.cores) if ch.cores is not None else recorded_cores(rec)
    if rec.watch is None and ch.cores is not None and ch.workers is None:
        w = ch.cores
    return w, g, cores


def evaluate(rec: RunRecord, change: Change) -> Scenario:
    """The record's stage capacities under ``change``, through the pipeline model.

    CPU: capacity scales with the loader's effective cores (workers x GPU processes, at most
    the usable cores less what the training loops use), along the probe's measured worker
    curve when it has one. Storage: a new class is modelled from its datasheet at this sample
    size and number of reads in flight (``catalog.read_rate``); otherwise the capacity
    follows the measured concurrency sweep, or scales linearly with reads in flight for a
    watched run. A cache mixes cached and uncached reads by the hit rate of its size and the
    access order. GPU and PCIe scale with the number of GPUs, each with its own link.
    """
    base, before = split_base(rec)
    ch = merge(before, change)
    assumptions: list[str] = []
    deltas: list[StageDelta] = []
    old_caps = base.stages.capacities()
    stages = copy.deepcopy(base.stages)

    w0, g0, c0 = recorded_workers(base), recorded_gpus(base), recorded_cores(base)
    w, g, cores = resources(base, ch)
    size = base.dataset.sample_bytes_mean

    # -- cpu ------------------------------------------------------------------------------
    # cpu_scale: the recorded capacity over the new one at equal cores; cost_scale: the new
    # CPU time per sample as a share of the recorded one (the same, unless a path was measured)
    cpu_scale = cost_scale = 1.0
    gpu_decode_rate: float | None = None
    if ch.gpu_decode:
        gd = gpu_decode_figures(base)
        if gd is None:
            assumptions.append("the recorded pipeline already decodes on the GPU: unchanged")
        else:
            cpu_scale, gpu_decode_rate, how = gd
            cost_scale = cpu_scale
            assumptions.append(
                f"GPU decode leaves {cpu_scale:.0%} of the CPU time per sample on the CPU and "
                f"costs each GPU 1/{gpu_decode_rate:.0f} s per image ({how})"
            )
        if ch.decode is not None:
            assumptions.append(f"--gpu-decode replaces the CPU decode path {ch.decode}")
    elif ch.decode is not None:
        cpu_scale, cost_scale, how = decode_scale(base, ch.decode)
        assumptions.append(how)
    cpu_cap = old_caps["cpu"]
    if cpu_cap is not None:
        old_par = _cpu_rate(base, _cpu_parallelism(base, w0, g0, c0))
        new_par = _cpu_rate(base, _cpu_parallelism(base, w, g, cores))
        cpu_cap = cpu_cap * new_par / old_par / cpu_scale if old_par > 0 else cpu_cap
        if (w, g, cores) != (w0, g0, c0):
            assumptions.append(
                "CPU scales with workers up to the usable cores"
                + (
                    ", along the probe's measured worker curve"
                    if base.watch is None and base.stages.cpu.sweep
                    else " (linear: the record has one worker count, so no measured curve)"
                )
            )
        if stages.cpu.cpu_seconds_per_sample is not None:
            stages.cpu.cpu_seconds_per_sample *= cost_scale
        stages.cpu.usable_cores = int(cores)
    if gpu_decode_rate is not None:
        stages.cpu.loader = "dali-gpu"
    elif ch.decode is not None and not ch.gpu_decode:
        stages.cpu.loader = ch.decode
    stages.cpu.capacity_samples_per_s = cpu_cap

    # -- storage ----------------------------------------------------------------------------
    st_cap = old_caps["storage"]
    lanes = _storage_lanes(base, w, g, ch.workers is not None)
    if ch.storage is not None:
        if size <= 0:
            raise BadInputError(
                "the record has no bytes per sample (reads were not metered), so a storage "
                "class can't be applied; wrap reads with ioprobe.loaders.files"
            )
        latency = base.stages.storage.request_latency_s
        if ch.storage.scope == "given" and latency:
            # the run timed its requests' fixed cost apart from the transfer: each of the
            # `lanes` readers pays it, then shares the new bandwidth with the others
            st_cap = 1.0 / (latency / lanes + size / ch.storage.seq_read_bytes_per_s)
            rate = st_cap * size
            assumptions.append(
                f"each read keeps its measured {latency * 1e3:.1f} ms of request latency; "
                "only the transfer speeds up"
            )
        else:
            rate = read_rate(ch.storage, size, int(lanes))
            st_cap = rate / size
        stages.storage.read_bytes_per_s = rate
        stages.storage.basis = (
            f"what-if: {ch.storage.name} ({ch.storage.label}) at {lanes:.0f} reads in flight"
        )
        if ch.storage.scope != "given":
            assumptions.append(
                f"{ch.storage.name} modelled from its catalog figures (docs/storage-catalog.md)"
            )
    elif st_cap is not None:
        old_lanes = _storage_lanes(base, w0, g0, False)
        old_rate, _ = _storage_rate(base, old_lanes)
        new_rate, curved = _storage_rate(base, lanes)
        if old_rate > 0 and new_rate != old_rate:
            st_cap = st_cap * new_rate / old_rate
            assumptions.append(
                "storage follows the measured concurrency sweep"
                if curved
                else "storage scales linearly with reads in flight (one level was measured)"
            )
    if ch.cache_bytes is not None and st_cap is not None:
        total = dataset_bytes(base)
        order = ch.cache_order or recorded_order(base)
        hit = steady_hit_rate(ch.cache_bytes, total, order)
        warm = base.stages.storage.warm
        warm_cap = warm.read_bytes_per_s / size if warm and warm.read_bytes_per_s and size else None
        per_sample = (1 - hit) / st_cap + (hit / warm_cap if warm_cap else 0.0)
        st_cap = 1.0 / per_sample if per_sample > 0 else None
        assumptions.append(
            f"a {ch.cache_bytes / 1e9:.1f} GB {order} cache over "
            f"{total / 1e9:.1f} GB serves {hit:.0%} of reads in steady state"
            + ("" if warm_cap else "; cached reads are free next to storage (no warm pass)")
        )
    stages.storage.capacity_samples_per_s = st_cap

    # -- pcie -----------------------------------------------------------------------------
    pcie_cap = old_caps["pcie"]
    if ch.pcie is not None:
        per_sample = stages.pcie.bytes_per_sample or size
        if per_sample <= 0:
            raise BadInputError("the record has no bytes per sample, so --pcie can't be applied")
        pcie_cap = parse_pcie(ch.pcie) * g / per_sample
        stages.pcie.method = f"what-if: {ch.pcie} per GPU"
        if not stages.pcie.bytes_per_sample:
            assumptions.append(
                "samples cross PCIe at their stored size (decoded tensors are often larger)"
            )
    elif pcie_cap is not None and g != g0:
        pcie_cap = pcie_cap * g / g0
    stages.pcie.capacity_samples_per_s = pcie_cap

    # -- gpu ------------------------------------------------------------------------------
    gpu_cap = old_caps["gpu"]
    if gpu_cap is not None and g != g0:
        gpu_cap = gpu_cap * g / g0
        assumptions.append("GPUs scale linearly: one training process per GPU, no sync cost")
    if gpu_decode_rate is not None:
        decode = gpu_decode_rate * g
        gpu_cap = 1.0 / (1.0 / gpu_cap + 1.0 / decode) if gpu_cap else decode
    stages.gpu.capacity_samples_per_s = gpu_cap

    for name in STAGE_NAMES:
        new = stages.capacities()[name]
        if not _same(old_caps[name], new):
            deltas.append(
                StageDelta(stage=name, before=old_caps[name], after=new, why=_why(name, ch))
            )
    findings = pipeline_model(stages)
    return Scenario(stages, findings, tuple(deltas), tuple(assumptions))


def gpu_decode_figures(rec: RunRecord) -> tuple[float, float, str] | None:
    """For moving decode to the GPU: the share of the CPU time per sample left on the CPU,
    one GPU's images/s, and where they come from; None when the record decodes on the GPU.

    With the probe's measured ``dali-gpu`` path, the share is its CPU seconds per image over
    the current path's (both measured on the same images with the same threads) and the rate
    is the one it reached; otherwise both are the assumed constants.
    """
    if decodes_on_gpu(rec):
        return None
    gpu = measured(rec, "dali-gpu")
    cur = measured(rec, current_path(rec))
    cur_cpu = cur.cpu_seconds_per_sample if cur is not None else None
    cur_cpu = cur_cpu or rec.stages.cpu.cpu_seconds_per_sample
    if gpu is not None and gpu.samples_per_s and gpu.cpu_seconds_per_sample and cur_cpu:
        return (
            gpu.cpu_seconds_per_sample / cur_cpu,
            gpu.samples_per_s,
            f"measured by the probe: DALI's mixed decoder on {gpu.files} images, "
            f"{gpu.threads} threads",
        )
    return (
        GPU_DECODE_CPU_FRACTION,
        GPU_DECODE_IMAGES_PER_S,
        "assumed, not measured: run `ioprobe probe --loader dali` on a GPU host to measure it",
    )


def decode_scale(rec: RunRecord, path: str) -> tuple[float, float, str]:
    """Decode path ``path`` against the record's current one, as the probe measured both on
    the same images with the same threads: the current rate over the new one, the new CPU time
    per image over the current one, and the assumption that says so."""
    new = measured(rec, path)
    cur_name = current_path(rec)
    cur = measured(rec, cur_name)
    if new is None or cur is None or new.samples_per_s is None or cur.samples_per_s is None:
        raise BadInputError(
            f"--decode {path}: the record lacks {path} or its current decode path measured "
            "side by side; `ioprobe probe --loader dali` measures them"
        )
    cost = (
        new.cpu_seconds_per_sample / cur.cpu_seconds_per_sample
        if new.cpu_seconds_per_sample and cur.cpu_seconds_per_sample
        else cur.samples_per_s / new.samples_per_s
    )
    return (
        cur.samples_per_s / new.samples_per_s,
        cost,
        (
            f"decode with {label(path)} at {new.samples_per_s:,.0f} images/s instead of "
            f"{label(cur_name or '')} at {cur.samples_per_s:,.0f} (measured by the probe on "
            "the same images and cores)"
        ),
    )


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9)


def _why(stage: StageName, ch: Change) -> str:
    reasons = {
        "cpu": [
            (ch.workers is not None, f"{ch.workers} workers"),
            (ch.cores is not None, f"{ch.cores} cores"),
            (ch.gpus is not None, f"{ch.gpus} GPU processes"),
            (ch.gpu_decode, "decode moved to the GPU"),
            (ch.decode is not None and not ch.gpu_decode, f"decode with {ch.decode}"),
        ],
        "storage": [
            (ch.storage is not None, f"storage {ch.storage.name if ch.storage else ''}"),
            (ch.workers is not None, f"{ch.workers} workers reading"),
            (ch.gpus is not None, f"{ch.gpus} GPU processes reading"),
            (ch.cache_bytes is not None, "cache"),
        ],
        "pcie": [(ch.pcie is not None, f"link {ch.pcie}"), (ch.gpus is not None, "more links")],
        "gpu": [(ch.gpus is not None, f"{ch.gpus} GPUs"), (ch.gpu_decode, "GPU decode")],
    }[stage]
    return ", ".join(text for on, text in reasons if on) or "unchanged"


def describe(ch: Change) -> dict[str, str]:
    """The change as the flags a user would type, for reports."""
    out: dict[str, str] = {}
    if ch.workers is not None:
        out["workers"] = str(ch.workers)
    if ch.cores is not None:
        out["cores"] = str(ch.cores)
    if ch.storage is not None:
        out["storage"] = ch.storage.name
    if ch.gpus is not None:
        out["gpus"] = str(ch.gpus)
    if ch.cache_bytes is not None:
        out["cache"] = f"{ch.cache_bytes / 1e9:g} GB" + (
            f" {ch.cache_order}" if ch.cache_order else ""
        )
    if ch.pcie is not None:
        out["pcie"] = ch.pcie
    if ch.gpu_decode:
        out["gpu_decode"] = "yes"
    if ch.decode is not None:
        out["decode"] = ch.decode
    return out


def whatif(rec: RunRecord, change: Change) -> RunRecord:
    """A ``whatif`` record: ``rec`` with ``change`` applied, its verdict and recommendations
    recomputed. Applied to a what-if record, the changes compose on the original run."""
    from ioprobe.analysis import finalize

    sc = evaluate(rec, change)
    base, before = split_base(rec)
    was = pipeline_model(base.stages)  # the verdict as this version of the model sees it
    f = sc.findings
    gpu_cap = f.capacities["gpu"]
    out = dataclasses.replace(
        base,
        kind="whatif",
        stages=sc.stages,
        measured_samples_per_s=None,
        gpu_idle_fraction=(1.0 - f.predicted_samples_per_s / gpu_cap) if gpu_cap else None,
        gpu_idle_method="predicted: 1 - delivered / GPU capacity" if gpu_cap else None,
        recommendations=[],
        pipeline=None,
        whatif=WhatIfData(
            change=merge(before, change),
            base_kind=base.kind,
            base_stages=base.stages,
            base_bottleneck=was.bottleneck,
            base_predicted_samples_per_s=was.predicted_samples_per_s,
            base_measured_samples_per_s=base.measured_samples_per_s,
            base_gpu_idle_fraction=base.gpu_idle_fraction,
            deltas=list(sc.deltas),
            assumptions=list(sc.assumptions) + list(f.assumptions),
        ),
        notes=list(base.notes),
    )
    return finalize(out)


__all__ = [
    "GPU_DECODE_CPU_FRACTION",
    "GPU_DECODE_IMAGES_PER_S",
    "PCIE_EFFICIENCY",
    "Scenario",
    "dataset_bytes",
    "decode_scale",
    "describe",
    "evaluate",
    "gpu_decode_figures",
    "merge",
    "parse_pcie",
    "recorded_cores",
    "recorded_gpus",
    "recorded_order",
    "recorded_workers",
    "resources",
    "split_base",
    "whatif",
]

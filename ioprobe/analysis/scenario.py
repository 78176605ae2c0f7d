"""A record's stages under a change: the pipeline model re-run with some resources changed.

``evaluate(rec, change)`` recomputes each stage's capacity from what the record measured (CPU
seconds per sample, the storage sweep, the consumer's step time) under the new resources, one
function per stage, and runs the pipeline model on the result. The recommendation rules use
``evaluate``, so every predicted gain in a report is a what-if the user can re-run and check
(``ioprobe.analysis.whatif`` makes the record of one).

Each capacity is scaled as a ratio to the recorded one, ``cap_new = cap_old * f(new) / f(old)``,
where ``f`` is the rule in ``ioprobe.capacity`` the collector used: an empty change reproduces
the record exactly, and only the scaling law is assumed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from typing import Any

from ioprobe import capacity, units
from ioprobe.analysis.cache import steady_hit_rate
from ioprobe.analysis.catalog import read_rate
from ioprobe.analysis.decode_paths import current_path, decodes_on_gpu, label, measured
from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.errors import BadInputError
from ioprobe.record import (
    STAGE_NAMES,
    CacheOrder,
    Change,
    CpuStage,
    GpuStage,
    PcieStage,
    RunRecord,
    StageDelta,
    StageName,
    Stages,
    StorageStage,
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
    # the assumptions the predicted rate rests on that the run could not check, in short:
    # what a report prints beside the number (``unchecked_assumptions``)
    unchecked: tuple[str, ...] = ()

    @property
    def predicted_samples_per_s(self) -> float:
        return self.findings.predicted_samples_per_s


@dataclasses.dataclass(frozen=True)
class Resources:
    """What a pipeline runs with: loader workers per GPU process (0: loading in the main
    process), GPU processes, and the cores the loaders may use."""

    workers: int
    gpus: int
    cores: float


@dataclasses.dataclass(frozen=True)
class Decode:
    """What a change of decode path does to the CPU and GPU stages."""

    cpu_scale: float = 1.0  # the recorded CPU capacity over the new one, at equal cores
    cost_scale: float = 1.0  # the new CPU time per sample over the recorded one
    gpu_rate: float | None = None  # one GPU's images/s, when decode moves to the GPU
    loader: str | None = None  # the CPU stage's decode path afterwards, when it changes
    assumptions: tuple[str, ...] = ()


# The record's fields a what-if keeps from the run it started from, as WhatIfData.base_<name>:
# the one statement of that mirror, read both ways (base_of packs, split_base unpacks).
BASE_FIELDS = (
    "kind",
    "stages",
    "bottleneck",
    "predicted_samples_per_s",
    "measured_samples_per_s",
    "gpu_idle_fraction",
)


def base_of(rec: RunRecord) -> dict[str, Any]:
    """``rec``'s fields as a what-if keeps them: ``WhatIfData(**base_of(rec), ...)``."""
    return {f"base_{name}": getattr(rec, name) for name in BASE_FIELDS}


def split_base(rec: RunRecord) -> tuple[RunRecord, Change]:
    """The measured record a what-if started from, and the change already applied to it."""
    w = rec.whatif
    if w is None:
        return rec, Change()
    kept = {name: getattr(w, f"base_{name}") for name in BASE_FIELDS}
    return dataclasses.replace(rec, **kept, whatif=None), w.change


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
        return rec.watch.settings.workers
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
        s = rec.watch.settings
        if s.iterable or s.sampler in _SEQUENTIAL_SAMPLERS:
            return "sequential"
    return "shuffled"


def recorded_gpus(rec: RunRecord) -> int:
    return max(rec.settings.gpus, 1)


def ranks_on_host(rec: RunRecord) -> int:
    """How many of a distributed job's ranks shared the recorded loader's host: the
    launcher's count of processes on the node (``RankInfo.local_world_size``), else the
    merged record's ranks on the same host; 1 outside a job, and for a probe (whose
    distributed CPU stage already counts every rank's cores)."""
    w = rec.watch
    if w is None or w.rank is None:
        return 1
    if w.rank.local_world_size:
        return max(w.rank.local_world_size, 1)
    d = rec.distributed
    if d is None:
        return 1
    return max(sum(1 for f in d.ranks if f.host == rec.host.hostname), 1)


def node_cores(rec: RunRecord) -> list[float]:
    """A distributed probe's cores node by node (each node's ranks' shares summed), where it
    ran on more than one node: its CPU stage sums every rank's cores, which no one machine
    has, so what a rule says of cores it says per node. Empty for any other record."""
    d = rec.distributed
    if rec.watch is not None or d is None:
        return []
    by_node: dict[int, float] = {}
    for r in d.ranks:
        if r.usable_cores is not None:
            by_node[r.node] = by_node.get(r.node, 0.0) + r.usable_cores
    return [by_node[k] for k in sorted(by_node)] if len(by_node) > 1 else []


def recorded_cores(rec: RunRecord) -> float:
    """The cores the recorded loader's CPU work could have: the process's usable cores, and
    for one rank of a distributed job its share of them, the host's cores over the job's
    ranks on that host (``ranks_on_host``). Every rank runs the same loader with the same
    settings, so the other ranks' workers are the job's own load, not a foreign one: a
    change of ``num_workers`` applies to every rank at once, and each rank's workers get
    only its share of the cores. A launcher that pins each rank to cores of its own
    gives each an affinity that is already its share: where the record holds the rank's
    share by the affinity sets of the ranks beside it (``RankInfo.core_share``, each core
    over the ranks that may run on it), that share is taken instead (not where a CPU quota,
    which the ranks share whatever their sets, narrowed the usable cores)."""
    usable = float(rec.stages.cpu.usable_cores or rec.host.usable_cores or 1)
    ranks = ranks_on_host(rec)
    rank = rec.watch.rank if rec.watch is not None else None
    if ranks > 1 and rank is not None and rank.core_share and rec.host.cpu_quota_cores is None:
        return min(rank.core_share, usable)
    return usable / ranks


def recorded_resources(rec: RunRecord) -> Resources:
    return Resources(recorded_workers(rec), recorded_gpus(rec), recorded_cores(rec))


def dataset_bytes(rec: RunRecord) -> float:
    """The dataset's size: samples x mean sample size (a watch's ``bytes`` counts re-reads)."""
    ds = rec.dataset
    n = capacity.dataset_samples(ds)
    if n and ds.sample_bytes_mean:
        return n * ds.sample_bytes_mean
    return float(ds.bytes)


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
    """The record's stage capacities under ``change``, through the pipeline model: each
    stage's own function (below) gives its new capacity and the assumptions it took."""
    base, before = split_base(rec)
    ch = merge(before, change)
    old, new = recorded_resources(base), Resources(*resources(base, ch))
    decode = decode_change(base, ch)
    cpu, cpu_why = cpu_estimate(base, old, new, decode)
    storage, storage_why = storage_estimate(base, ch, old, new)
    pcie, pcie_why = pcie_estimate(base, ch, old, new)
    gpu, gpu_why = gpu_estimate(base, old, new, decode)
    stages = Stages(storage=storage, cpu=cpu, pcie=pcie, gpu=gpu)
    if not any(stages.capacities().values()):
        # e.g. a cache that serves every read of a run that measured its storage alone
        raise BadInputError(
            "under this change no measured stage limits the pipeline any more, so there is "
            "no rate to predict; the record needs another measured stage"
        )
    assumptions = (*decode.assumptions, *cpu_why, *storage_why, *pcie_why, *gpu_why)
    model = pipeline_model(stages)
    unchecked = unchecked_assumptions(base, ch, old, new, model.predicted_samples_per_s)
    return Scenario(stages, model, _deltas(base.stages, stages, ch), assumptions, unchecked)


# Beside a prediction that assumes storage linear in reads in flight, unchecked
LINEAR_STORAGE = (
    "assumes storage linear in reads in flight, unchecked: nothing measured tells a "
    "bandwidth cap from a latency limit; whatif --probe PROBE.json measures it, as does "
    "a watched rerun with IOPROBE_READ_CHECK=1"
)


# Other work on the host is taken to share the cores thread by thread with the workers, as it
# does in the job's own session and cgroup. Linux shares the cores between sessions (where
# autogroup is on, in the root cpu cgroup) and between cgroups first: there, the other job
# keeps its share whatever the workers. On the 2-core VM, 3 ms of CPU per sample beside one
# busy loop: 1 worker gave 307 samples/s and 8 gave 517 with the loop in the same session
# (the replay said 512), and 306 and 311 with the loop in a session of its own.
FOREIGN_SHARE = (
    "the host's other load gives up cores to more workers thread by thread, as it does from "
    "this job's own session and cgroup; a job in another session or cgroup keeps its share "
    "of the cores, and more workers then take none of it"
)


# A prediction rests on an assumption where, without it, it would be lower by more than
# this factor: the gain below which no advice is given either (model.MIN_GAIN)
UNCHECKED_MARGIN = 1.05


def unchecked_assumptions(
    rec: RunRecord, ch: Change, old: Resources, new: Resources, predicted: float
) -> tuple[str, ...]:
    """The assumptions the rate ``predicted`` under ``ch`` rests on that the run could not
    check: more workers taking cores from the host's other load (``FOREIGN_SHARE``), and
    storage read with more reads in flight and no measured curve (a probe's sweep, a
    probe of the same storage, or this run's own fit of read time against reads in flight)
    is taken as linear; a storage capped in total bandwidth stays at its recorded rate
    instead (a server capped at 8 MB/s: "2.00x, 4 workers reading" predicted 248 samples/s,
    a rerun gave 130). So where the recorded storage rate is below the prediction by more
    than ``UNCHECKED_MARGIN`` (the gain the advice itself asks for), the prediction rests on
    that assumption; a new storage class, a cache too small for more readers (held at this
    run's rate) and an unchanged count rest on no such thing."""
    foreign: tuple[str, ...] = ()
    w = rec.watch
    if w is not None and new.workers > old.workers:
        usable = recorded_cores(rec)
        contention = capacity.cpu_context(w.epochs, w.settings.workers, usable).contention
        # a run that scanned the host's processes told that load apart by scheduling group
        if contention > 0 and capacity.apart_cores(w.epochs) is None:
            foreign = (FOREIGN_SHARE,)
    return foreign + _unchecked_storage(rec, ch, old, new, predicted)


def _unchecked_storage(
    rec: RunRecord, ch: Change, old: Resources, new: Resources, predicted: float
) -> tuple[str, ...]:
    """``unchecked_assumptions``' storage part: linear in reads in flight, where it was
    not measured."""
    st = rec.stages.storage
    cap = st.capacity_samples_per_s
    if not cap or cap * UNCHECKED_MARGIN >= predicted or ch.storage is not None:
        return ()
    if ch.storage_sweep and rec.watch is not None:
        return ()
    if new.workers > old.workers and cache_room(rec, new.workers):
        return ()
    lanes = _storage_lanes(rec, new, ch.workers is not None)
    if lanes <= _storage_lanes(rec, old, False):
        return ()
    return () if _storage_rate(rec, lanes)[1] else (LINEAR_STORAGE,)


def _deltas(before: Stages, after: Stages, ch: Change) -> tuple[StageDelta, ...]:
    old, new = before.capacities(), after.capacities()
    return tuple(
        StageDelta(stage=name, before=old[name], after=new[name], why=_why(name, ch))
        for name in STAGE_NAMES
        if not _same(old[name], new[name])
    )


# -- cpu -----------------------------------------------------------------------------------


def decode_change(rec: RunRecord, ch: Change) -> Decode:
    """Decode moved to the GPU (``--gpu-decode``) or to another CPU path the probe measured
    (``--decode``): the CPU's new cost and capacity as shares of the recorded ones."""
    if ch.gpu_decode:
        gd = gpu_decode_figures(rec)
        if gd is None:
            why = ["the recorded pipeline already decodes on the GPU: unchanged"]
            out = Decode()
        else:
            share, rate, how = gd
            why = [
                f"GPU decode leaves {share:.0%} of the CPU time per sample on the CPU and "
                f"costs each GPU 1/{rate:.0f} s per image ({how})"
            ]
            out = Decode(cpu_scale=share, cost_scale=share, gpu_rate=rate, loader="dali-gpu")
        if ch.decode is not None:
            why.append(f"--gpu-decode replaces the CPU decode path {ch.decode}")
        return dataclasses.replace(out, assumptions=tuple(why))
    if ch.decode is not None:
        cpu_scale, cost_scale, how = decode_scale(rec, ch.decode)
        return Decode(cpu_scale, cost_scale, None, ch.decode, (how,))
    return Decode()


def cpu_parallelism(rec: RunRecord, r: Resources) -> float:
    """How many samples the loader decodes at once with ``r``: its effective cores, by the
    rule the collector used (``capacity.watch_cores`` for a watched loader; for a probe's
    loader, one core per worker up to the cores), read along the probe's measured worker
    curve where it has one."""
    if rec.watch is not None:
        return capacity.watch_cores(
            rec.watch.settings,
            rec.watch.epochs,
            recorded_cores(rec),
            workers=r.workers,
            gpus=r.gpus,
            usable=r.cores,
        )
    lanes = float(min(max(r.workers, 1) * r.gpus, r.cores))
    sweep = rec.stages.cpu.sweep
    if sweep:
        return capacity.sweep_rate([(lv.workers, lv.samples_per_s) for lv in sweep], lanes, True)
    return lanes


def cpu_estimate(
    rec: RunRecord, old: Resources, new: Resources, decode: Decode
) -> tuple[CpuStage, list[str]]:
    """CPU capacity scales with the loader's effective cores (workers x GPU processes, at
    most the usable cores less what the training loops use), along the probe's measured
    worker curve when it has one, and with the CPU cost of the decode path."""
    cpu = copy.deepcopy(rec.stages.cpu)
    why: list[str] = []
    cap = cpu.capacity_samples_per_s
    if cap is not None:
        was, now = cpu_parallelism(rec, old), cpu_parallelism(rec, new)
        if was > 0 and now != was:  # x * y / y is not always x in floating point
            cap = cap * now / was
        cap = cap / decode.cpu_scale
        if new != old:
            why.append(
                "CPU scales with workers up to the usable cores"
                + (
                    ", along the probe's measured worker curve"
                    if rec.watch is None and cpu.sweep
                    else " (linear: the record has one worker count, so no measured curve)"
                )
            )
        if cpu.cpu_seconds_per_sample is not None:
            cpu.cpu_seconds_per_sample *= decode.cost_scale
        if new.cores != old.cores:
            # a rank's recorded share of its host may be fractional: left as recorded
            cpu.usable_cores = max(int(new.cores), 1)
    if decode.loader is not None:
        cpu.loader = decode.loader
    cpu.capacity_samples_per_s = cap
    return cpu, why


# -- storage -------------------------------------------------------------------------------


def _storage_lanes(rec: RunRecord, r: Resources, workers_changed: bool) -> float:
    """Reads in flight: one per loader worker; a probe's default is its best concurrency."""
    if rec.watch is None and not workers_changed:
        p = rec.stages.storage.cold or rec.stages.storage.warm
        if p is not None and p.best_concurrency:
            return float(p.best_concurrency)
    return float(max(r.workers, 1) * r.gpus)


def _storage_rate(rec: RunRecord, lanes: float) -> tuple[float, bool]:
    """Relative storage rate at ``lanes`` reads in flight, and whether a measured curve gave it.
    A probe's sweep is the curve (flat beyond its last level: storage saturates); a watch
    has one worker count, and its reads in flight as they varied give the exponent the rate
    follows (``capacity.read_scaling``); where they did not vary enough, linear."""
    st = rec.stages.storage
    p = st.cold or st.warm  # the pass the probe took the capacity from
    pts = capacity.sweep_points(p.sweep) if p is not None else []
    if rec.watch is None and pts:
        return capacity.sweep_rate(pts, lanes, False), True
    scale = capacity.storage_scale(rec.watch.read_scaling if rec.watch else None, lanes)
    return (scale, True) if scale is not None else (lanes, False)


def storage_estimate(
    rec: RunRecord, ch: Change, old: Resources, new: Resources
) -> tuple[StorageStage, list[str]]:
    """A new storage class is modelled from its datasheet at this sample size and number of
    reads in flight (``catalog.read_rate``); otherwise the capacity follows the measured
    concurrency sweep: a probe's own, or for a watched run a probe's of the same storage
    (``Change.storage_sweep``), else the run's own exponent or, lacking one, linear. A cache
    then mixes cached and uncached reads by the hit rate of its size and the access order."""
    st = copy.deepcopy(rec.stages.storage)
    lanes = _storage_lanes(rec, new, ch.workers is not None)
    if ch.storage is not None:
        why = _new_class(rec, ch, st, lanes)
        if ch.storage_sweep and rec.watch is not None:
            why.append(
                "the probe's sweep is not used: a new storage class replaces the measured one"
            )
    elif ch.storage_sweep and rec.watch is not None:
        why = _along_probe(rec, ch, st, _storage_lanes(rec, old, False), lanes)
    else:
        room = cache_room(rec, new.workers) if new.workers > old.workers else None
        why = [room] if room else _more_readers(rec, st, old, lanes)
    # a zero capacity is no measurement (the model leaves it out too): nothing to cache
    if ch.cache_bytes is not None and st.capacity_samples_per_s:
        why.append(_cached(rec, ch, st))
    return st, why


def cache_room(rec: RunRecord, workers: int) -> str | None:
    """Why more readers would not read faster from a chunked format's local cache too small
    for them, or None where it has room (or sets no size). Each litdata worker holds the
    chunk it reads and the ``max_pre_download`` it fetches ahead; where ``workers`` of them
    need more than ``max_cache_size``, downloads wait for room and more workers read slower.
    With 1 MB of cache and 131 kB chunks (2 ahead), 2 workers read 272-279 samples/s, 3 read
    175 and 4 read 217-235, where the linear rule said 564 for 4. Storage then stays at this
    run's rate, an upper bound. The chunk size is the mapped files' mean: the chunks the
    index names."""
    w = rec.watch
    s = w.settings if w is not None else None
    if w is None or s is None or not s.cache_limit_bytes or not s.chunks_ahead:
        return None
    if w.bytes_seen != "mmap" or not w.mapped_files:
        return None
    chunk = w.mapped_bytes / w.mapped_files
    need = workers * (s.chunks_ahead + 1) * chunk
    if need <= s.cache_limit_bytes:
        return None
    return (
        f"storage at most this run's rate: the format's cache ({units.size(s.cache_limit_bytes)}, "
        f"litdata's max_cache_size) is smaller than {workers} workers x {s.chunks_ahead + 1} "
        f"chunks of {units.size(chunk)} (the one each reads, {s.chunks_ahead} downloaded ahead: "
        f"{units.size(need)}), so downloads wait for room and more workers may read slower; give "
        "the cache room for them"
    )


def _new_class(rec: RunRecord, ch: Change, st: StorageStage, lanes: float) -> list[str]:
    cls = ch.storage
    assert cls is not None
    size = rec.dataset.sample_bytes_mean
    if size <= 0:
        raise BadInputError(
            "the record has no bytes per sample (reads were not metered), so a storage "
            "class can't be applied; wrap reads with ioprobe.loaders.files"
        )
    why: list[str] = []
    latency = rec.stages.storage.request_latency_s
    # packed samples are read a shard or chunk at a time: a request's cost is shared by them
    request = capacity.request_bytes(rec.dataset)
    if cls.scope == "given" and latency:
        # the run timed its requests' fixed cost apart from the transfer: each of the
        # `lanes` readers pays it, then shares the new bandwidth with the others
        per_sample = latency * size / request
        cap = 1.0 / (per_sample / lanes + size / cls.seq_read_bytes_per_s)
        rate = cap * size
        why.append(
            f"each read keeps its measured {latency * 1e3:.1f} ms of request latency; "
            "only the transfer speeds up"
        )
    else:
        rate = read_rate(cls, request, int(lanes))
        cap = capacity.storage_from_rate(rate, size)
    st.capacity_samples_per_s = cap
    st.read_bytes_per_s = rate
    st.basis = f"what-if: {cls.name} ({cls.label}) at {lanes:.0f} reads in flight"
    if cls.scope != "given":
        why.append(f"{cls.name} modelled from its catalog figures (docs/storage-catalog.md)")
    return why


def _more_readers(rec: RunRecord, st: StorageStage, old: Resources, lanes: float) -> list[str]:
    cap = st.capacity_samples_per_s
    if cap is None:
        return []
    was, _ = _storage_rate(rec, _storage_lanes(rec, old, False))
    now, curved = _storage_rate(rec, lanes)
    if was <= 0 or now == was:
        return []
    st.capacity_samples_per_s = cap * now / was
    return [_readers_why(rec, curved, lanes / _storage_lanes(rec, old, False))]


def _readers_why(rec: RunRecord, curved: bool, ratio: float) -> str:
    scaling = rec.watch.read_scaling if rec.watch is not None else None
    if rec.watch is None and curved:
        return "storage follows the measured concurrency sweep"
    if scaling is None:
        return "storage scales linearly with reads in flight (one level was measured)"
    if scaling.exponent is None:
        why = scaling.limit.removeprefix("undetermined: ")
        return (
            "storage scales linearly with reads in flight (assumed: this run can't tell a "
            f"bandwidth cap from a latency limit, its {why}; a probe of the same storage "
            "measures it: whatif --probe)"
        )
    beyond = ratio * scaling.reads_in_flight_mean > scaling.reads_in_flight_max
    return (
        f"storage throughput follows (reads in flight) ** {scaling.exponent:.2f}, measured in "
        f"this run from {scaling.samples:,} samples' read times against the reads in flight "
        f"beside them: a {scaling.limit} limit"
        + (
            f"; extrapolated past the {scaling.reads_in_flight_max:.1f} reads in flight seen"
            if beyond
            else ""
        )
    )


# The probe's sweep and the run's own exponent disagree strongly past this gap over the same
# reads in flight (a latency limit, 1, and a bandwidth cap, 0, are 1 apart)
EXPONENT_DISAGREES = 0.3


@dataclasses.dataclass(frozen=True)
class RunOnCurve:
    """Where a watched run's reads sit on a probe's concurrency curve of the same storage."""

    read_s: float  # the run's time per read (per sample)
    compute_s: float  # a worker's compute between reads (CPU and run-queue wait)
    reads_in_flight: float  # as its reads saw them
    how: str  # how that is known
    scale: float  # the run's time per read over the curve's at those reads in flight
    sample_bytes: float  # bytes per read; 1 where unknown (the scale absorbs it)


def run_on_curve(
    rec: RunRecord, points: list[tuple[float, float]], lanes: int, cap: float
) -> RunOnCurve:
    """A watched run placed on a probe's curve ``points`` (reads in flight, bytes/s).

    Its ``lanes`` workers each read and then compute: the run's capacity ``cap`` is what they
    deliver busy, reading at the reads in flight the run had (``capacity.all_lanes_reading``),
    and the compute is the workers' steady CPU and run-queue time per sample, so the read
    time is what gives ``cap`` with it (``capacity.read_seconds_of``). Its reads in flight are the run's own measure where it has one; else
    where the curve's time per read (``capacity.curve_read_seconds``) is the run's, between
    one read and the lanes; else (a run faster than the probe's one reader, or slower than
    all its lanes reading) each worker is taken to have been busy, and the curve is scaled
    to the run's time per read (``capacity.closed_loop_scale``)."""
    assert rec.watch is not None
    scaling = rec.watch.read_scaling
    # a capacity from workers' per-sample times holds their compute; other loaders' do not
    eps = [e for e in capacity.worker_epochs(rec.watch.epochs) if e.samples]
    cpu = rec.stages.cpu.cpu_seconds_per_sample or 0.0
    compute = capacity.computing_per_sample(eps, cpu) if eps else 0.0
    read = capacity.read_seconds_of(cap, lanes, compute, scaling)
    if read <= 0:  # nothing left for the reads: take the whole cycle as read time
        read, compute = capacity.read_seconds_of(cap, lanes, 0.0, scaling), 0.0
    size = rec.dataset.sample_bytes_mean or 0.0
    measured = scaling.reads_in_flight_mean if scaling is not None else 0.0
    if size > 0 and measured > 0:
        k = min(max(measured, 1.0), float(lanes))
        scale = read / capacity.curve_read_seconds(points, size, k)
        return RunOnCurve(read, compute, k, "measured in this run", scale, size)

    def per_read(k: float) -> float:
        return capacity.curve_read_seconds(points, size, k)

    if size > 0 and lanes > 1 and per_read(1.0) <= read <= per_read(lanes):
        lo, hi = 1.0, float(lanes)
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if per_read(mid) < read else (lo, mid)
        how = "where the sweep's time per read is this run's"
        return RunOnCurve(read, compute, (lo + hi) / 2, how, 1.0, size)
    size = size or 1.0
    scale = capacity.closed_loop_scale(points, size, compute, lanes, read)
    at = capacity.closed_loop(points, size, scale, compute, lanes)
    how = "assumed: every worker busy"
    return RunOnCurve(read, compute, at.reads_in_flight, how, scale, size)


def _along_probe(
    rec: RunRecord, ch: Change, st: StorageStage, lanes: float, new_lanes: float
) -> list[str]:
    """A watched run's storage at ``new_lanes`` workers along a probe's sweep of the same
    storage: the run placed on the curve (``run_on_curve``), then its workers, each reading
    and computing as in the run, at the new count (``capacity.closed_loop``); and the
    sentences that say where the curve came from."""
    cap = st.capacity_samples_per_s
    pts = capacity.sweep_points(ch.storage_sweep)
    if not cap or new_lanes == lanes or not pts or rec.watch is None:
        return []
    scaling = rec.watch.read_scaling
    run = run_on_curve(rec, pts, round(lanes), cap)
    new = capacity.closed_loop(pts, run.sample_bytes, run.scale, run.compute_s, round(new_lanes))
    factor = new.samples_per_s / cap
    st.capacity_samples_per_s = new.samples_per_s
    m = run.reads_in_flight
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    computing = (
        f", each computing {run.compute_s * 1e3:.1f} ms per sample between reads"
        if run.compute_s > 0
        else ""
    )
    why = [
        f"storage follows the concurrency sweep of {ch.storage_sweep_source or 'a probe'}: "
        f"{len(pts)} levels, {min(xs):g}-{max(xs):g} reads in flight, "
        f"{units.bandwidth(min(ys))} to {units.bandwidth(max(ys))}; from the {m:.1f} reads in "
        f"flight this run had ({run.how}) to {new.reads_in_flight:.1f} with {new_lanes:g} "
        f"workers{computing}, {factor:.2f}x its capacity"
        + (
            f"; past the sweep's last level ({max(xs):g}) storage is taken as saturated (flat)"
            if new.reads_in_flight > max(xs)
            else ""
        )
    ]
    if scaling is not None and scaling.exponent is not None and new_lanes != m:
        seen = math.log(
            capacity.sweep_rate(pts, new_lanes, False) / capacity.sweep_rate(pts, m, False)
        ) / math.log(new_lanes / m)
        if abs(seen - scaling.exponent) > EXPONENT_DISAGREES:
            why.append(
                f"this run's own reads gave storage throughput ~ (reads in flight) ** "
                f"{scaling.exponent:.2f} (a {scaling.limit} limit), the probe's sweep "
                f"** {seen:.2f} over the same reads in flight; the sweep, measured at "
                f"{len(pts)} levels, is used"
            )
    return why


def _cached(rec: RunRecord, ch: Change, st: StorageStage) -> str:
    """``st`` behind a cache of ``ch.cache_bytes``: a sample costs a miss's share of the
    uncached time and a hit's share of the warm (page-cache) time."""
    assert ch.cache_bytes is not None and st.capacity_samples_per_s
    size = rec.dataset.sample_bytes_mean
    total = dataset_bytes(rec)
    order = ch.cache_order or recorded_order(rec)
    hit = steady_hit_rate(ch.cache_bytes, total, order)
    warm = rec.stages.storage.warm
    warm_cap = warm.read_bytes_per_s / size if warm and warm.read_bytes_per_s and size else None
    per_sample = (1 - hit) / st.capacity_samples_per_s + (hit / warm_cap if warm_cap else 0.0)
    st.capacity_samples_per_s = 1.0 / per_sample if per_sample > 0 else None
    return (
        f"a {units.size(ch.cache_bytes)} {order} cache over "
        f"{units.size(total)} serves {hit:.0%} of reads in steady state"
        + ("" if warm_cap else "; cached reads are free next to storage (no warm pass)")
    )


# -- pcie and gpu --------------------------------------------------------------------------


def pcie_estimate(
    rec: RunRecord, ch: Change, old: Resources, new: Resources
) -> tuple[PcieStage, list[str]]:
    """A given link (``--pcie gen4x16``) carries its usable rate per GPU; otherwise each GPU
    has its own link, so the capacity scales with the GPU count."""
    pcie = copy.deepcopy(rec.stages.pcie)
    why: list[str] = []
    cap = pcie.capacity_samples_per_s
    if ch.pcie is not None:
        per_sample = pcie.bytes_per_sample or rec.dataset.sample_bytes_mean
        if per_sample <= 0:
            raise BadInputError("the record has no bytes per sample, so --pcie can't be applied")
        cap = capacity.pcie_from_rate(parse_pcie(ch.pcie) * new.gpus, per_sample)
        pcie.method = f"what-if: {ch.pcie} per GPU"
        if not pcie.bytes_per_sample:
            why.append("samples cross PCIe at their stored size (decoded tensors are often larger)")
    elif cap is not None and new.gpus != old.gpus:
        cap = cap * new.gpus / old.gpus
    pcie.capacity_samples_per_s = cap
    return pcie, why


def gpu_estimate(
    rec: RunRecord, old: Resources, new: Resources, decode: Decode
) -> tuple[GpuStage, list[str]]:
    """GPUs scale linearly (one training process each, no sync cost); decoding on them
    shares each GPU with training (``capacity.shared_gpu``)."""
    gpu = copy.deepcopy(rec.stages.gpu)
    why: list[str] = []
    cap = gpu.capacity_samples_per_s
    if cap is not None and new.gpus != old.gpus:
        cap = cap * new.gpus / old.gpus
        why.append("GPUs scale linearly: one training process per GPU, no sync cost")
    if decode.gpu_rate is not None:
        rate = decode.gpu_rate * new.gpus
        cap = capacity.shared_gpu(cap, rate) if cap else rate
    gpu.capacity_samples_per_s = cap
    return gpu, why


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
            (bool(ch.storage_sweep) and ch.storage is None, "along the probe's sweep"),
            (ch.cache_bytes is not None, "cache"),
        ],
        "pcie": [(ch.pcie is not None, f"link {ch.pcie}"), (ch.gpus is not None, "more links")],
        "gpu": [(ch.gpus is not None, f"{ch.gpus} GPUs"), (ch.gpu_decode, "GPU decode")],
    }[stage]
    return ", ".join(text for on, text in reasons if on) or "unchanged"


__all__ = [
    "EXPONENT_DISAGREES",
    "FOREIGN_SHARE",
    "GPU_DECODE_CPU_FRACTION",
    "GPU_DECODE_IMAGES_PER_S",
    "PCIE_EFFICIENCY",
    "UNCHECKED_MARGIN",
    "Decode",
    "Resources",
    "RunOnCurve",
    "Scenario",
    "cpu_estimate",
    "cpu_parallelism",
    "dataset_bytes",
    "decode_change",
    "decode_scale",
    "evaluate",
    "gpu_decode_figures",
    "gpu_estimate",
    "merge",
    "parse_pcie",
    "pcie_estimate",
    "ranks_on_host",
    "recorded_cores",
    "recorded_gpus",
    "recorded_order",
    "recorded_resources",
    "recorded_workers",
    "resources",
    "run_on_curve",
    "split_base",
    "storage_estimate",
    "unchecked_assumptions",
]

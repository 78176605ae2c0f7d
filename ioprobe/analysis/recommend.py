"""Recommendations: small rules over a record's findings, each with its predicted rate.

A rule takes the record and the pipeline findings and returns zero or more
``Recommendation``s. Wherever it can, a rule states its change as a what-if (``Change``) and
takes the predicted rate from ``whatif.evaluate``, so the gain printed beside a
recommendation is the one ``ioprobe whatif`` would give, and a rerun with the change applied
measures the prediction's error. ``recommend`` runs every rule and ranks by predicted rate.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable

from ioprobe import capacity, units
from ioprobe.analysis import dali_queue, loader_sim
from ioprobe.analysis.cache import steady_hit_rate
from ioprobe.analysis.catalog import Catalog, shipped_catalog
from ioprobe.analysis.decode_paths import current_path, decodes_on_gpu, label, measured
from ioprobe.analysis.epochs import epoch_starts, per_epoch_saving
from ioprobe.analysis.model import MIN_GAIN, PipelineFindings, gains, other_stages
from ioprobe.analysis.pcie import (
    degraded_link_rule,
    low_efficiency_rule,
    pin_memory_rule,
    probe_pageable_rule,
)
from ioprobe.analysis.queueing import head_of_line
from ioprobe.analysis.scenario import (
    LINEAR_STORAGE,
    Scenario,
    dataset_bytes,
    evaluate,
    node_cores,
    ranks_on_host,
    recorded_cores,
    recorded_gpus,
    recorded_workers,
)
from ioprobe.analysis.streams import stream_imbalance, stream_rule
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Change,
    DecodePath,
    Recommendation,
    RunRecord,
    StorageClassInfo,
    WatchData,
)

Rule = Callable[[RunRecord, PipelineFindings], list[Recommendation]]

# A change is worth recommending when it predicts at least this much more throughput.
# Within this share of the best predicted rate, a setting is as good as the best.
NEAR = loader_sim.NEAR
# Beyond this many jobs per GPU, MIG has no smaller slice (A100/H100: 7 instances).
MAX_JOBS_PER_GPU = 7
# Device classes from /sys/block -> the catalog class that stands for them.
DEVICE_TO_CLASS = {
    "nvme": "nvme-gen4",
    "sata-ssd": "sata-ssd",
    "hdd": "hdd",
    "network": "nfs-10gbe",
}


def _scenario(rec: RunRecord, change: Change) -> Scenario | None:
    """The record under ``change``, or None where the record cannot take it (no bytes per
    sample for a storage class, no stage left to model)."""
    try:
        return evaluate(rec, change)
    except (BadInputError, ValueError):
        return None


def _predict(rec: RunRecord, change: Change) -> float | None:
    sc = _scenario(rec, change)
    return sc.predicted_samples_per_s if sc is not None else None


def _if_gain(
    rec: RunRecord, pf: PipelineFindings, change: Change, kind: str, text: str, evidence: str
) -> list[Recommendation]:
    """The recommendation to make ``change``, with its predicted rate, when the model
    predicts it gains at least MIN_GAIN; otherwise none."""
    pred = _predict(rec, change)
    if pred is None or not gains(pred, pf):
        return []
    return [
        Recommendation(
            kind=kind, text=text, predicted_samples_per_s=pred, evidence=evidence, change=change
        )
    ]


def workers_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """Raise ``num_workers`` to the smallest count that reaches the best predicted rate.

    Tries every count up to twice the usable cores (I/O-bound workers spend most of their
    time blocked, so more of them than cores can still help) and keeps the smallest that
    comes within 2% of the best, so the advice never asks for workers that buy nothing.
    Where the best is the most tried and still rising, the advice says so rather than that
    more add nothing: blocked workers add reads in flight past twice the cores.
    """
    if rec.watch is None or pf.bottleneck not in ("cpu", "storage"):
        return []
    if _replayed(rec):  # the replay of its batches judges it instead
        return []
    if stream_imbalance(rec) is not None:  # its means spread the slow stream's work
        return []
    found = _fewest_workers(rec, pf)
    if found is None:
        return []
    w, p, rising = found
    w0 = recorded_workers(rec)
    # DALI's thread pool is what stands for the workers there (loaders/dali.py)
    dali = rec.watch.settings.framework == "dali"
    who = "threads" if dali else "workers"
    setting = "the DALI pipeline's num_threads" if dali else "num_workers"
    if rising:
        beyond = (
            f"{w} is the most tried (twice the cores) and the rate still rises there: more "
            f"may add more (`ioprobe whatif --workers N` predicts another count)"
        )
    else:
        beyond = f"more {who} than that add nothing"
    return [
        Recommendation(
            kind="num_workers",
            text=f"Raise {setting} from {w0} to {w}: {_workers_why(rec, pf, who, w)}; {beyond}.",
            predicted_samples_per_s=p,
            evidence=f"{pf.bottleneck} delivers {pf.predicted_samples_per_s:,.0f} samples/s with {w0}",
            change=Change(workers=w),
        )
    ]


def workers_ceiling(rec: RunRecord) -> int:
    """The most workers the advice tries: twice the usable cores (more only where the run
    already has more), 64 at most. Beyond it the stage model leaves out what grows with the
    count (each epoch starts every worker again, each holds its own memory)."""
    return min(max(int(2 * recorded_cores(rec)), recorded_workers(rec) + 1), 64)


def _fewest_workers(rec: RunRecord, pf: PipelineFindings) -> tuple[int, float, bool] | None:
    """The smallest worker count within 2% of the best predicted rate up to
    ``workers_ceiling``, its rate, and whether that count is the ceiling with the rate
    still rising there (more than 2% over one worker fewer); None when no count gains
    enough."""
    w0, top = recorded_workers(rec), workers_ceiling(rec)
    preds = {
        w: p for w in range(w0 + 1, top + 1) if (p := _predict(rec, Change(workers=w))) is not None
    }
    best = max(preds.values(), default=None)
    if best is None or not gains(best, pf):
        return None
    w = min(k for k, p in preds.items() if p >= best * 0.98)
    p = preds[w]
    below = preds.get(w - 1) or _predict(rec, Change(workers=w - 1)) or p
    return w, p, w == top and below < p / 1.02


def _workers_why(rec: RunRecord, pf: PipelineFindings, who: str, w: int) -> str:
    """Why more workers help, by what the record shows: the CPU cost per sample when the CPU
    limits and the count fits the cores; blocked reads only where the workers were blocked
    on reads (a storage stage was measured), which is also why a count beyond the cores
    helps; else, beyond the cores, the host's other load that the scheduler shares cores
    with thread by thread (``capacity.cpu_context``), which more workers take more of."""
    cpu_s = rec.stages.cpu.cpu_seconds_per_sample
    cores = recorded_cores(rec)
    blocked = rec.stages.storage.capacity_samples_per_s is not None
    if pf.bottleneck == "cpu" and w <= cores:
        cost = f"each sample costs {cpu_s * 1e3:.1f} ms of CPU and " if cpu_s else ""
        return f"{cost}{_cores_usable(rec)}"
    if blocked and w > cores:
        return (
            f"{who} spend part of their time blocked on reads, so {w} of them keep "
            f"{_the_cores(rec)} busy"
        )
    if blocked:
        return f"{who} spend their time blocked on reads, so more of them keep more reads in flight"
    return _contention_why(rec, who, w)


def _contention_why(rec: RunRecord, who: str, w: int) -> str:
    """Why more workers than cores help when storage never blocked them: the host's other
    runnable threads, inferred from the workers' run-queue wait, share the cores with ours
    thread by thread, so more of ours get a larger part of them."""
    other = 0.0
    if rec.watch is not None:
        s = rec.watch.settings
        other = capacity.cpu_context(rec.watch.epochs, s.workers, recorded_cores(rec)).contention
    if other > 0:
        return (
            f"storage never blocked them, but about {other:.1f} other runnable threads share "
            f"{_the_cores(rec)} (the {who}' wait for a core says so) and the scheduler "
            f"shares cores per thread, so {w} {who} get a larger part of them"
        )
    return f"storage never blocked them; {w} {who} keep more of {_the_cores(rec)} busy"


def _cores_usable(rec: RunRecord) -> str:
    """E.g. "8 cores are usable", or for one of several ranks on a host "1 of the host's 2
    cores per rank is usable (2 ranks share them)"."""
    cores, n = recorded_cores(rec), ranks_on_host(rec)
    if n == 1:
        return f"{cores:.0f} cores are usable"
    verb = "is" if cores <= 1 else "are"
    return (
        f"{cores:.3g} of the host's {cores * n:.0f} cores per rank {verb} usable "
        f"({n} ranks share them)"
    )


def _the_cores(rec: RunRecord) -> str:
    """E.g. "the 2 usable cores", or "this rank's 1 of the host's 2 cores (2 ranks share
    them)"."""
    cores, n = recorded_cores(rec), ranks_on_host(rec)
    if n == 1:
        return f"the {cores:.0f} usable cores"
    return f"this rank's {cores:.3g} of the host's {cores * n:.0f} cores ({n} ranks share them)"


def _gives(rec: RunRecord) -> str:
    """What the loader has of the machine: "this machine gives 8", for one of several ranks
    on a host "each of the host's 2 ranks gets 1 of its 2", for a probe across nodes "each
    of the 2 nodes gives 16"."""
    cores, n = recorded_cores(rec), ranks_on_host(rec)
    nodes = node_cores(rec)
    if nodes:
        if len(set(nodes)) == 1:
            return f"each of the {len(nodes)} nodes gives {nodes[0]:.0f}"
        return f"the {len(nodes)} nodes give {', '.join(f'{c:.0f}' for c in nodes)}"
    if n == 1:
        return f"this machine gives {cores:.0f}"
    return f"each of the host's {n} ranks gets {cores:.3g} of its {cores * n:.0f}"


def _need(rec: RunRecord, need: int) -> str:
    """The cores a change needs, as the user buys them: "54 cores", or across nodes "54 cores
    (27 per node)"."""
    nodes = node_cores(rec)
    if not nodes:
        return f"{need} cores"
    return f"{need} cores ({math.ceil(need / len(nodes))} per node)"


def cores_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """CPU-bound with workers already on every core: how many cores the next stage could use."""
    cpu = rec.stages.cpu
    if pf.bottleneck != "cpu" or not cpu.cpu_seconds_per_sample:
        return []
    others = other_stages(pf, "cpu")
    if not others:
        return []
    target = min(others)
    need = math.ceil(target * cpu.cpu_seconds_per_sample)
    cores = recorded_cores(rec)
    if need <= cores:
        return []
    # a watched loader keeps its num_workers unless told; a probe uses every core it gets
    workers = max(need, recorded_workers(rec)) if rec.watch is not None else None
    return _if_gain(
        rec,
        pf,
        Change(cores=need, workers=workers),
        "more_cpu",
        f"Each sample costs {cpu.cpu_seconds_per_sample * 1e3:.2f} ms of CPU; feeding "
        f"the next stage ({target:,.0f} samples/s) takes about {_need(rec, need)} of loader "
        f"workers; {_gives(rec)}.",
        f"CPU delivers {pf.predicted_samples_per_s:,.0f} samples/s",
    )


def decode_path_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """The probe measured a CPU decode path faster than the one in use: switch to it.

    Paths are compared as ``probe --loader dali`` measured them, on the same images and the
    same cores, so the switch needs no more of them; the prediction is the what-if
    ``--decode PATH``. DALI's GPU path is ``gpu_decode_rule``'s.
    """
    cur_name = current_path(rec)
    cur = measured(rec, cur_name)
    if cur is None or cur.samples_per_s is None or cur_name == "dali-gpu":
        return []
    best = _faster_cpu_path(rec, cur.path, cur.samples_per_s)
    if best is None:
        return []
    return _if_gain(
        rec,
        pf,
        Change(decode=best.path),
        "decode_path",
        f"Decode with {label(best.path)}: {best.samples_per_s:,.0f} images/s vs "
        f"{cur.samples_per_s:,.0f} with {label(cur.path)}, same cores ({best.threads} threads).",
        f"measured side by side on the same {best.files} images",
    )


def _faster_cpu_path(rec: RunRecord, current: str, rate: float) -> DecodePath | None:
    """The fastest CPU decode path the probe measured above ``rate``, other than ``current``."""
    faster = [
        p
        for p in rec.stages.cpu.decode_paths
        if p.path in ("pillow", "dali-cpu")
        and p.path != current
        and measured(rec, p.path) is not None
        and (p.samples_per_s or 0.0) > rate
    ]
    return max(faster, key=lambda p: p.samples_per_s or 0.0, default=None)


def gpu_decode_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """CPU-bound on image decode: DALI's mixed decoder moves JPEG decode to the GPU.

    The gain uses the probe's measured ``dali-gpu`` path when the record has one, assumed
    figures otherwise; a pipeline that already decodes on the GPU gets no such advice.
    """
    if pf.bottleneck != "cpu" or not _is_images(rec) or decodes_on_gpu(rec):
        return []
    if rec.dali is not None:
        how = (
            "Set device='mixed' on fn.decoders.image in the DALI pipeline: JPEG decode moves "
            "to the GPU."
        )
    else:
        how = (
            "Decode images on the GPU with NVIDIA DALI (fn.decoders.image, device='mixed'): "
            "JPEG decode leaves the CPU."
        )
    return _if_gain(
        rec,
        pf,
        Change(gpu_decode=True),
        "gpu_decode",
        how + _gpu_decode_basis(rec),
        "CPU-bound on image decode",
    )


def _gpu_decode_basis(rec: RunRecord) -> str:
    """The sentence that says what the GPU decode rate rests on: the probe's measurement, or
    an assumption and why nothing was measured."""
    gpu = measured(rec, "dali-gpu")
    if gpu is not None and gpu.samples_per_s:
        cur = measured(rec, current_path(rec))
        versus = (
            f" vs {cur.samples_per_s:,.0f} with {label(cur.path)}"
            if cur is not None and cur.samples_per_s
            else ""
        )
        return f" The probe measured {gpu.samples_per_s:,.0f} images/s with it{versus}."
    tried = next((p for p in rec.stages.cpu.decode_paths if p.path == "dali-gpu"), None)
    if tried is not None and tried.error:
        return (
            " The gain assumes a GPU decode rate: the probe could not measure it here "
            f"({tried.error})."
        )
    return " The gain assumes a GPU decode rate; `ioprobe probe --loader dali` measures it."


def _is_images(rec: RunRecord) -> bool:
    if current_path(rec) is not None:
        return True
    fmts = rec.dataset.formats
    images = sum(v for k, v in fmts.items() if k in ("jpeg", "png", "webp", "image"))
    return bool(fmts) and images >= 0.5 * sum(fmts.values())


def cache_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """Storage-bound and the dataset fits in RAM (or local NVMe): cache it, and say which kind.

    The page cache is an LRU: under a shuffled order it serves only about ``c**2 / 2`` of
    reads when a fraction ``c`` of the dataset fits, so the advice differs between "fits" (the page cache
    does it for free after one epoch) and "part fits" (pin a fixed subset: hit rate ``c``).
    """
    if pf.bottleneck != "storage":
        return []
    through = reads_through_page_cache(rec)
    if through is None:
        return []  # no file reads seen (sockets, memory maps): the premise cannot be checked
    total = dataset_bytes(rec)
    avail = rec.host.memory_available_bytes
    if total <= 0 or not avail:
        return []
    budget = 0.8 * avail
    if not through:
        return _local_cache(rec, pf, total, avail) if total <= budget else []
    if total <= budget:
        change = Change(cache_bytes=total)
        text = (
            f"The dataset ({units.size(total)}) fits in free RAM "
            f"({units.size(avail)}): from the second epoch the page cache serves it."
        )
    else:
        change = Change(cache_bytes=budget, cache_order="static")
        text = (
            f"Pin {units.size(budget)} of the {units.size(total)} dataset in RAM as a fixed "
            f"subset (the page cache, an LRU under a shuffled order, would serve only "
            f"{steady_hit_rate(budget, total, 'shuffled'):.0%} of reads)."
        )
    return _if_gain(
        rec,
        pf,
        change,
        "cache_in_ram",
        text,
        f"storage delivers {pf.predicted_samples_per_s:,.0f} samples/s",
    )


def reads_through_page_cache(rec: RunRecord) -> bool | None:
    """Whether the dataset's reads pass through this host's page cache: a probe knows from
    its target (local files do, fsspec URLs do not); a watched run from its workers' file
    reads in steady state (bytes read() per sample) or the data files they memory-mapped
    (mapped pages are page-cache pages), None where it saw neither. Bytes received over
    sockets do not pass through it, and a watched dataset that names a remote source
    (litdata or MDS from object storage) does not either: it maps chunks it downloaded, and
    what its cache evicts comes over the network again."""
    if rec.dataset.remote:
        return False
    if rec.watch is None:
        return True
    if rec.watch.bytes_seen == "socket":
        return False
    if rec.watch.bytes_seen == "mmap":
        return True
    return True if capacity.file_bytes_per_sample(rec.watch.epochs) > 0 else None


def _local_cache(
    rec: RunRecord, pf: PipelineFindings, total: float, avail: float
) -> list[Recommendation]:
    """Remote data that fits in RAM: the page cache never sees it, a local copy would. A
    streaming format that names its remote source keeps such a copy itself, in a cache of
    the size it is given."""
    how = (
        "give the format's own cache room for all of it (litdata's max_cache_size, "
        "mosaicml-streaming's cache_limit)"
        if rec.watch is not None and rec.watch.settings.source
        else "cache it on this host (copy it to local disk, or open it through fsspec's "
        "simplecache:: or filecache:: URL prefix)"
    )
    return _if_gain(
        rec,
        pf,
        Change(cache_bytes=total),
        "local_cache",
        f"Reads go over the network, where the page cache never sees them; the dataset "
        f"({units.size(total)}) fits in free RAM ({units.size(avail)}): {how}, and from the "
        "second epoch local reads serve it.",
        f"storage delivers {pf.predicted_samples_per_s:,.0f} samples/s",
    )


def shard_rule(rec: RunRecord, pf: PipelineFindings, catalog: Catalog) -> list[Recommendation]:
    """Storage-bound on small files: pack them into shards so reads stream.

    With shards of 100 MB or more each request is large, so per-file latency and IOPS stop
    mattering and the store delivers its sequential bandwidth; the prediction models the
    store as its catalog class read in large requests (object storage per connection).
    """
    mean = rec.dataset.sample_bytes_mean
    # unknown sizes (unmetered reads) read as 0: no claim about them
    if pf.bottleneck != "storage" or rec.dataset.density != "low" or mean <= 0:
        return []
    if _already_streamed(rec):
        return []
    cls = _current_class(rec, catalog) if catalog else None
    pred = _sharded_rate(rec, cls) if cls is not None else None
    if pred is not None and not gains(pred, pf):
        return []
    basis = (
        f"The gain assumes {cls.name}'s sequential rate."
        if cls is not None and pred is not None
        else "Gain not predicted: the storage class is unknown."
    )
    return [
        Recommendation(
            kind="shard_small_files",
            text=(
                f"Samples average {units.size(mean)}, so reads pay "
                "per-file latency and IOPS. Pack them into shards (tar / WebDataset) of 100 MB "
                "or more so storage streams. " + basis
            ),
            predicted_samples_per_s=pred,
            evidence=_read_latency(rec),
        )
    ]


def _already_streamed(rec: RunRecord) -> bool:
    """Whether the samples are already read in large pieces: a probe found them packed in
    shards, chunks or tables, or a watched loader streams an IterableDataset (the pattern of
    WebDataset and the chunked formats: its reads are the shards', not the samples')."""
    if rec.dataset.layout != "files":
        return True
    return rec.watch is not None and rec.watch.settings.iterable


def _sharded_rate(rec: RunRecord, cls: StorageClassInfo) -> float | None:
    """The predicted rate with the dataset in 100 MB shards on ``cls``: its sequential
    bandwidth, and its per-request latency paid once per shard instead of once per sample."""
    streaming = StorageClassInfo(
        name=f"{cls.name}, sharded",
        label="large sequential reads",
        scope=cls.scope,
        seq_read_bytes_per_s=cls.seq_read_bytes_per_s,
        latency_s=cls.latency_s * rec.dataset.sample_bytes_mean / 100e6,
    )
    return _predict(rec, Change(storage=streaming))


def _read_latency(rec: RunRecord) -> str:
    """The evidence that reads are small: their p99 latency, else the mean sample size."""
    st = rec.stages.storage
    p = st.cold or st.warm
    if p and p.latency_p99_ms is not None:
        return f"p99 read latency {p.latency_p99_ms:.1f} ms"
    return f"mean sample {rec.dataset.sample_bytes_mean:.0f} bytes"


def _current_class(rec: RunRecord, catalog: Catalog) -> StorageClassInfo | None:
    if rec.dataset.remote:
        return catalog.get("object-storage")
    fs = rec.host.filesystem
    name = DEVICE_TO_CLASS.get(fs.device_class) if fs else None
    return catalog.get(name) if name else None


def faster_storage_rule(
    rec: RunRecord, pf: PipelineFindings, catalog: Catalog
) -> list[Recommendation]:
    """Storage-bound: the cheapest catalog class that lifts storage off the critical path,
    and how many GPUs it would carry at 90%."""
    if pf.bottleneck != "storage" or rec.dataset.sample_bytes_mean <= 0 or not catalog:
        return []
    found = _cheapest_faster_class(rec, pf, catalog)
    if found is None:
        return []
    cls, sc = found
    return [
        Recommendation(
            kind="faster_storage",
            text=f"Move the dataset to {cls.name} ({cls.label}).{_gpus_fed(rec, sc)}",
            predicted_samples_per_s=sc.predicted_samples_per_s,
            evidence=f"storage delivers {pf.predicted_samples_per_s:,.0f} samples/s",
            change=Change(storage=cls),
        )
    ]


def _cheapest_faster_class(
    rec: RunRecord, pf: PipelineFindings, catalog: Catalog
) -> tuple[StorageClassInfo, Scenario] | None:
    """The first class, in catalog order (cheapest first), that lifts the pipeline to the
    next stage's rate; when none does, the best of those that gain, a class beating an
    earlier one only by more than 2%."""
    others = other_stages(pf, "storage")
    goal = min(others) if others else None
    best: tuple[StorageClassInfo, Scenario] | None = None
    for cls in catalog.values():
        sc = _scenario(rec, Change(storage=cls))
        if sc is None or not gains(sc.predicted_samples_per_s, pf):
            continue
        pred = sc.predicted_samples_per_s
        if goal is not None and pred >= goal * 0.98:
            return cls, sc
        if best is None or pred > best[1].predicted_samples_per_s * 1.02:
            best = (cls, sc)
    return best


def _gpus_fed(rec: RunRecord, sc: Scenario) -> str:
    """The sentence saying how many GPUs like the recorded ones the new storage feeds at
    90%, or, short of one, how busy it keeps one; empty when the GPU's or the new storage's
    rate is unknown."""
    gpu = rec.stages.gpu.capacity_samples_per_s
    st_cap = sc.stages.storage.capacity_samples_per_s
    if not gpu or not st_cap:
        return ""
    per_gpu = gpu / recorded_gpus(rec)
    fed = int(st_cap / (0.9 * per_gpu))
    if fed < 1:
        return f" It would keep a GPU like this one {st_cap / per_gpu:.0%} busy."
    return f" It would feed {fed} GPU{'s' if fed > 1 else ''} like this one at 90%."


def prefetch_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """Batches arrive in bursts: a deeper prefetch queue absorbs stragglers.

    The model assumes the prefetch queue hides batch-to-batch jitter; when the measured rate
    falls more than 10% short of the model's and the consumer's stalls are spiky (the 95th
    percentile far above the median), the queue is too shallow for the stragglers. The queue
    must hold a straggler's worth of steps: p95 stall / median step batches, spread over the
    workers, and fewer than an epoch's batches (deeper, it is no longer a queue). The
    prediction is the model's rate, the one a deep enough queue reaches.
    """
    w = rec.watch
    if w is None or rec.measured_samples_per_s is None or recorded_workers(rec) == 0:
        return []
    if _replayed(rec):  # the replay of its batches judges it instead
        return []
    if stream_imbalance(rec) is not None:  # no queue moves a stream's items
        return []
    if rec.measured_samples_per_s >= 0.9 * pf.predicted_samples_per_s:
        return []
    spikes = _stall_spikes(w)
    if spikes is None:
        return []
    p50, p95, step = spikes
    workers = recorded_workers(rec)
    current = w.settings.prefetch_factor or 2  # torch's default
    depth = math.ceil(p95 / step)
    factor = max(current + 1, current + math.ceil(depth / workers))
    # a queue as deep as an epoch is no queue: stalls that long are not stragglers it
    # could absorb (an epoch's start, a stop in the data), and it would hold the epoch
    if factor * workers >= max((e.batches / e.merged for e in w.epochs), default=0):
        return []
    pred = pf.predicted_samples_per_s
    return [
        Recommendation(
            kind="prefetch_factor",
            text=(
                f"Batches arrive in bursts (stall p95 {p95:.0f} ms vs median {p50:.1f} ms): raise "
                f"prefetch_factor from {current} to {factor} so {factor * workers} batches are "
                "queued, enough to cover a straggler; the stages then deliver their steady "
                "rate."
            ),
            predicted_samples_per_s=pred,
            evidence=f"measured {rec.measured_samples_per_s:,.0f} samples/s vs model {pred:.0f}",
        )
    ]


def loader_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """The DataLoader setting that pays most, found by replaying this run's batches.

    ``loader_sim.search`` replays the logged batches under every nearby ``num_workers``,
    ``prefetch_factor`` and ``in_order`` and their combinations (workers sharing the cores,
    reads sharing the storage as measured, one slow batch holding the queue), and
    ``loader_sim.best`` keeps the cheapest setting within reach of the best rate. The text
    says why from the same replay, what the prediction assumes that the run could not check
    and, where the storage's scaling is unknown, the gain if it were one shared bandwidth.
    Nothing for an unequal stream (``stream_imbalance``): its slowest stream's work bounds
    the epoch whatever the queue does, and another worker count splits it anew unseen.
    """
    if stream_imbalance(rec) is not None:  # the stream rule's: no queue moves a stream's items
        return []
    base = loader_sim.recorded_setting(rec)
    tried, restarts = loader_sim.weighed_search(rec)  # short epochs: restarts weigh in
    pred = loader_sim.best(tried, base) if base is not None else None
    if pred is None or base is None:
        return []
    s = pred.setting
    changes = s.changes(base)
    sets = ", ".join(f"{name}={now}" for name, _, now in changes)
    was = ", ".join(was for _, was, _ in changes)
    why = "; ".join(_loader_why(rec, base, s))
    over = (
        f", end to end with each of its epochs starting its workers again ({restarts.per_epoch:.2f} s "
        f"with {base.workers} of them)"
        if restarts is not None
        else ""
    )
    text = (
        f"Set {sets} (now {was}): {why}; this run's batches replayed under it predict "
        f"{pred.gain - 1:+.0%}{over}."
    )
    capped = loader_sim.capped_gain(rec, s) if LINEAR_STORAGE in pred.assumptions else None
    if capped is not None:
        text += (
            f" Were the storage one shared bandwidth, {capped - 1:+.0%}: `ioprobe probe` of "
            "the same storage, given to `ioprobe whatif --probe`, tells which, as does a "
            "rerun with IOPROBE_READ_CHECK=1 (it loads samples through the dataset's own "
            "__getitem__ in extra processes after the run)."
        )
    text += _memory_stop(rec, tried, pred)
    kind = changes[0][0] if len(changes) == 1 else "loader_settings"
    return [
        Recommendation(
            kind=kind,
            text=text,
            predicted_samples_per_s=pred.samples_per_s,
            baseline_samples_per_s=restarts.baseline_samples_per_s if restarts else None,
            evidence=_replay_evidence(rec),
            unchecked=list(pred.assumptions),
            change=s.change(base),
        )
    ]


def _replay_evidence(rec: RunRecord) -> str:
    """What the advice stands on: the replay of the run as it was against its measured rate,
    and the wait behind unfinished batches where the queue cost the run."""
    replay = loader_sim.replay(rec)
    evidence = ""
    if replay is not None:
        evidence = (
            f"the run as it was, replayed from {replay.batches:,} logged batches: "
            f"{units.samples_per_s(replay.simulated_samples_per_s)} samples/s against "
            f"{units.samples_per_s(replay.measured_samples_per_s)} measured"
        )
    hol = head_of_line(rec)
    if hol is not None and hol.seconds > 0 and hol.queue_seconds > 0.05 * hol.seconds:
        evidence += (
            f"; over {hol.batches:,} batches the consumer waited {hol.queue_seconds:.2f} s of "
            f"{hol.seconds:.2f} s behind an unfinished batch while a later one was ready"
        )
    return evidence


def _memory_stop(
    rec: RunRecord, tried: list[loader_sim.Prediction], chosen: loader_sim.Prediction
) -> str:
    """The sentence saying that host memory, not speed, stops at ``chosen``: where a setting
    the replay rates higher would not fit the memory the host had free."""
    over = [p for p in tried if not p.fits and p.samples_per_s > chosen.samples_per_s / NEAR]
    c = loader_sim.costs(rec)
    if not over or c is None or c.memory_limit is None:
        return ""
    top = max(over, key=lambda p: p.samples_per_s)
    sets = ", ".join(f"{n}={v}" for n, _, v in top.setting.changes(chosen.setting)) or "it"
    return (
        f" Memory stops short of more: {sets} would give {top.gain - 1:+.0%} but hold "
        f"{units.memory(top.memory_bytes or 0.0)} against {units.memory(c.memory_limit)} the host can spare "
        f"(a worker holds {units.memory(c.worker_bytes or 0.0)}, a batch {units.memory(c.batch_bytes or 0.0)})."
    )


def _loader_why(rec: RunRecord, base: loader_sim.Setting, s: loader_sim.Setting) -> list[str]:
    """Why each changed setting helps, from what the replay read from the record."""
    c = loader_sim.costs(rec)
    out: list[str] = []
    if c is None:
        return out
    work = sum(c.cpu) + sum(c.blocked)
    blocked = sum(c.blocked) / work if work > 0 else 0.0
    if s.workers > base.workers:
        if blocked >= 0.5:
            out.append(
                f"workers spend {blocked:.0%} of their time blocked (reads, waits), not on a "
                f"core, so {s.workers} of them share the {c.usable_cores:.0f} usable cores"
            )
        if blocked >= 0.5 and c.bandwidth:
            out.append(
                "storage reads as one shared bandwidth (throughput ~ readers ** "
                f"{c.exponent:.2f}), so more readers read no faster: the gain is the time "
                "workers spend off storage, filled"
            )
        else:
            cpu_ms = sum(c.cpu) / len(c.cpu) / c.samples_per_batch * 1e3
            out.append(
                f"each sample costs {cpu_ms:.2f} ms of CPU and {c.usable_cores:.0f} cores "
                f"are usable; {s.workers} workers keep more of them busy"
            )
    elif s.workers < base.workers:
        out.append(f"{s.workers} workers deliver as much on {c.usable_cores:.0f} cores")
    if s.in_order != base.in_order:
        out.append(
            "batches are handed over as they are finished, so one slow batch no longer "
            "holds the ready ones behind it (PyTorch >= 2.6; the batch order then varies "
            "run to run)"
        )
    if s.prefetch_factor > base.prefetch_factor:
        out.append(
            f"{s.workers * s.prefetch_factor} batches queued keep the workers busy while a "
            "slow batch holds the queue"
        )
    return out


def persistent_workers_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """Workers restarted at every epoch: keep them with ``persistent_workers=True``.

    The premise is measured: the epochs after the first started workers again, each taking
    ``worker_startup_seconds`` from the loader's ``iter()`` to its first sample (with one
    epoch watched, the first epoch's start-up stands for the later ones'), and shut them
    down at each epoch's end. The prediction is the end-to-end rate (epoch starts and ends
    included) with that start-up gone from every epoch after the first and the shutdown
    from every epoch: over the watched epochs where there were several, else per further
    epoch. A rerun with the setting measures the same end-to-end rate.
    """
    starts = epoch_starts(rec)
    if starts is None or starts.persistent:
        return []
    saving = per_epoch_saving(starts)
    n = sum(e.merged for e in starts.epochs)  # an entry may merge epochs past the cap
    if saving is None or n == 0 or starts.run_seconds <= 0:
        return []
    epoch = starts.run_seconds / n
    if n > 1 and starts.predicted_samples_per_s is not None:
        pred, over = starts.predicted_samples_per_s, f"over these {n} epochs"
    elif epoch > saving:
        pred, over = starts.samples / n / (epoch - saving), "for each epoch after the first"
    else:
        return []
    now = starts.end_to_end_samples_per_s
    if pred < now * MIN_GAIN:
        return []
    stop = starts.shutdown_seconds or 0.0
    cost = (
        f"{saving - stop:.2f} s from iter() to their first sample and {stop:.2f} s to shut "
        "them down at its end"
        if stop >= 0.01
        else f"{saving:.2f} s from iter() to their first sample"
    )
    return [
        Recommendation(
            kind="persistent_workers",
            text=(
                f"Set persistent_workers=True: every epoch starts its workers again, "
                f"{cost} while the GPU waits; kept, they save that each epoch after the "
                f"first: {pred:,.0f} samples/s end to end {over}, from {now:,.0f} "
                f"({pred / now - 1:+.0%})."
            ),
            predicted_samples_per_s=pred,
            baseline_samples_per_s=now,
            evidence=(
                f"epoch starts {', '.join(f'{e.seconds:.2f}' for e in starts.epochs[:4])} s; "
                f"a steady batch takes {starts.batch_seconds * 1e3:.1f} ms"
            ),
        )
    ]


def _stall_spikes(w: WatchData) -> tuple[float, float, float] | None:
    """The median and 95th-percentile stall and the median step, in ms, when the stalls are
    spiky (p95 over three times the median and over 1 ms); None otherwise, with too few
    stalls (under 20) to tell, or without a step time."""
    stalls = sorted(w.stall_ms.values)
    steps = w.step_ms.values
    if len(stalls) < 20 or not steps:
        return None
    p50 = statistics.median(stalls)
    p95 = stalls[int(0.95 * (len(stalls) - 1))]
    step = statistics.median(steps)
    if p95 <= max(3 * p50, 1.0) or step <= 0:
        return None
    return p50, p95, step


def share_gpu_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """The GPU is mostly idle even when data is ready: run several jobs on it (MPS or MIG).

    ``busy_fraction`` is the share of compute time the GPU ran kernels (NVML, stalls
    excluded). ``k = floor(1 / busy)`` jobs fit before they contend for the GPU; the
    prediction treats them as ``k`` GPUs sharing this host's CPU and storage, so a data-bound
    pipeline gets no credit it couldn't feed. Small models leave most of a large GPU idle,
    and co-locating jobs has been reported to give about 3x the throughput.
    """
    busy = rec.stages.gpu.busy_fraction
    if busy is None or busy <= 0 or busy >= 0.5:
        return []
    k = min(int(1.0 / busy), MAX_JOBS_PER_GPU)
    if k < 2:
        return []
    g = recorded_gpus(rec)
    method = rec.stages.gpu.busy_method or ""
    what = (
        f"Steps with their data on the device keep {busy:.0%} of the GPU's SMs busy"
        if "gpm" in method
        else f"The GPU ran kernels {busy:.0%} of the time it had data"
    )
    return _if_gain(
        rec,
        pf,
        Change(gpus=g * k),
        "share_gpu",
        f"{what}: run {k} jobs per GPU (MPS, or MIG slices; small models have been reported "
        "to gain about 3x in total on an A100 with MIG); the gain is in total, shared CPU "
        "and storage permitting, and running the k jobs measures it.",
        method or f"GPU busy {busy:.0%}",
    )


def balanced_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """GPU-bound: the input pipeline keeps up; say by how much, so nobody buys storage.

    Not where a loader setting pays (``loader_rule`` or ``dali_queue.rule`` advises it): every stage's capacity
    may keep up on average while the queue of batches still holds the GPU back."""
    if pf.bottleneck != "gpu" or loader_sim.advice(rec) or dali_queue.advice(rec):
        return []
    slack = min((v for k, v in pf.headroom.items() if k != "gpu"), default=None)
    text = "Balanced: the GPU is the bottleneck and the input pipeline keeps up; nothing to gain on the data side."
    if slack is not None:
        text += f" The next slowest stage has {slack:.0%} headroom."
    return [
        Recommendation(
            kind="balanced",
            text=text,
            predicted_samples_per_s=pf.predicted_samples_per_s,
            evidence=f"GPU capacity {pf.predicted_samples_per_s:,.0f} samples/s",
        )
    ]


def rules(catalog: Catalog) -> tuple[Rule, ...]:
    """Every rule, in the order ties are listed; the storage rules compare against
    ``catalog``."""
    return (
        workers_rule,
        cores_rule,
        decode_path_rule,
        gpu_decode_rule,
        cache_rule,
        functools.partial(shard_rule, catalog=catalog),
        functools.partial(faster_storage_rule, catalog=catalog),
        prefetch_rule,
        stream_rule,
        loader_rule,
        dali_queue.rule,
        persistent_workers_rule,
        pin_memory_rule,
        probe_pageable_rule,
        degraded_link_rule,
        low_efficiency_rule,
        share_gpu_rule,
        balanced_rule,
    )


def recommend(
    rec: RunRecord, pf: PipelineFindings, catalog: Catalog | None = None
) -> list[Recommendation]:
    """Every rule's advice, best predicted rate first; advice without a prediction goes last.

    A record that is a what-if is judged as the changed pipeline, so its advice is what to do
    next; a GPU-bound result with nothing to gain elsewhere says so, once. ``catalog``: the
    storage classes to suggest (the shipped ones unless the caller loaded a user's file).
    """
    cat = shipped_catalog() if catalog is None else catalog
    out = [r for rule in rules(cat) for r in rule(rec, pf)]
    if not out:
        out = [
            Recommendation(
                kind="balanced",
                text=(
                    f"Nothing predicts a gain of {MIN_GAIN - 1:.0%} or more: {pf.bottleneck} "
                    "limits the pipeline and the recorded numbers offer no cheaper lever."
                ),
                predicted_samples_per_s=pf.predicted_samples_per_s,
            )
        ]
    replayed = _replayed(rec)
    for r in out:
        # the loader replay states its own; the rest are the stage model's what-ifs
        if not ((replayed and r.kind in LOADER_KINDS) or r.kind in REPLAYED_KINDS):
            r.unchecked = _unchecked(rec, r)
    hardware = needs_hardware(rec)
    return sorted(out, key=lambda r: _rank(r, hardware))


def _replayed(rec: RunRecord) -> bool:
    """Whether the loader's settings are judged by a replay of this run's batches: a
    DataLoader's (``loader_sim``) or a DALI pipeline's (``dali_queue``)."""
    return loader_sim.costs(rec) is not None or dali_queue.costs(rec) is not None


def _unchecked(rec: RunRecord, r: Recommendation) -> list[str]:
    """What the advice's predicted rate assumes that the run could not check: its what-if's
    (``scenario.unchecked_assumptions``); none for advice without a what-if."""
    if r.change is None or r.predicted_samples_per_s is None:
        return []
    sc = _scenario(rec, r.change)
    return list(sc.unchecked) if sc is not None else []


# the advice the loader replay gives where a record has batches to replay
LOADER_KINDS = frozenset({"num_workers", "prefetch_factor", "in_order", "loader_settings"})
# advice whose figure is always the loader replay's (a stream's batches dealt out)
REPLAYED_KINDS = frozenset({"balance_streams"})
# advice that asks for hardware this host does not have
NEEDS_HARDWARE = frozenset({"more_cpu", "faster_storage"})


def needs_hardware(rec: RunRecord) -> frozenset[str]:
    """The advice that needs hardware this host lacks: more cores, faster storage, and GPU
    decode where the host has no GPU (a probe run away from the training machine)."""
    return NEEDS_HARDWARE if rec.host.gpus else NEEDS_HARDWARE | {"gpu_decode"}


def _rank(r: Recommendation, hardware: frozenset[str]) -> tuple[bool, bool, float]:
    """What the user can change today first (best predicted rate first), then what needs
    new hardware; advice without a prediction after the predicted advice of its group."""
    return (
        r.kind in hardware,
        r.predicted_samples_per_s is None,
        -(r.predicted_samples_per_s or 0.0),
    )

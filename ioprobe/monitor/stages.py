"""From what a watch measured to stage capacities: pure functions, shared by every framework.

A collector hands over a ``Measured`` (its epochs, the loader's settings, the step times it
kept); a framework adapter picks the functions that fit it: ``loader_stages`` for loaders whose
workers report per-sample times (DataLoader), ``dali_stages`` for DALI's operator timings.
Every capacity comes from a rule in ``ioprobe.capacity``, the rules the what-if re-runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ioprobe import capacity
from ioprobe.capacity import worker_epochs
from ioprobe.record import (
    CpuStage,
    DaliData,
    GpuStage,
    LoaderSettings,
    PcieStage,
    ReadScaling,
    Stages,
    StorageStage,
    WatchEpoch,
)

METERED_BASIS = "metered reads through ioprobe.loaders.files"
# how bytes per sample were seen (WatchData.bytes_seen), where the storage stage says so
_BYTES_BASIS = {
    "mmap": "; bytes per sample from the memory-mapped data files' size",
    "socket": "; bytes per sample received over the workers' sockets",
}
HOST_STEP_METHOD = "wall clock: consumer time between batches"
ONE_BATCH_NOTE = "only one batch per epoch: no step time to measure"
# a loader that spends less than this share of a sample's wall time blocked is not waiting
# on storage: without that wait its workers would deliver under 5% more, the least gain the
# advice counts (analysis.model.MIN_GAIN = 1.05, 1 - 1/1.05 = 4.8%), while timer noise,
# queue hand-over and scheduling on a busy host leave a CPU-bound worker blocked 2-3% of
# its time, which named storage the bottleneck of a run whose samples only burned CPU
BLOCKED_MIN_SHARE = 1.0 - 1.0 / 1.05


@dataclass(frozen=True)
class Measured:
    """What a collector holds when its record is made: the inputs of every stage rule."""

    settings: LoaderSettings
    epochs: Sequence[WatchEpoch]
    usable_cores: int
    sample_bytes: float  # mean bytes read per sample; 0 when reads were not metered
    batch_size: int | None
    step_ns: Sequence[int]  # the consumer's time per batch on the host clock (a sample)
    # the device's own clock (CUDA events), when batches went to a device: its step times,
    # and the timing's name ("cuda events on cuda:0", "host clock")
    device_step_ns: Sequence[int] = ()
    timing: str | None = None
    on_device_clock: bool = False
    device: str | None = None  # where watch(..., device=) moved the batches
    # how a sample's time on storage grew with the reads in flight (capacity.read_scaling)
    read_scaling: ReadScaling | None = None
    # where ``sample_bytes`` came from (WatchData.bytes_seen): "mmap" is the mapped files'
    # size per sample, not bytes counted as they were read
    bytes_seen: str = "read"

    @property
    def worker_epochs(self) -> list[WatchEpoch]:
        """The epochs the worker-side rules read (``capacity.worker_epochs``)."""
        return worker_epochs(self.epochs)

    @property
    def samples(self) -> int:
        """Samples whose workers measured them: what per-sample figures divide by."""
        return sum(e.samples for e in self.worker_epochs)


def gpu_stage(m: Measured, step_ns: Sequence[int], method: str) -> GpuStage | None:
    """Batch size / the median of ``step_ns`` (one value per batch); None without a step.
    The median, not the mean: a checkpoint or an evaluation pass between batches is not the
    step's cost."""
    if not step_ns:
        return None
    median_step = statistics.median(step_ns) / 1e9
    eps = m.epochs
    bs = m.batch_size or (sum(e.samples for e in eps) / max(sum(e.batches for e in eps), 1))
    return GpuStage(
        capacity_samples_per_s=capacity.gpu_from_step(bs, median_step),
        method=method,
        step_seconds=median_step,
        batch_size=m.batch_size,
    )


# -- loaders whose workers time each sample (DataLoader) -----------------------------------


def loader_stages(m: Measured) -> tuple[Stages, list[str]]:
    """Every stage of a loader whose workers report per-sample wall and CPU time: CPU from
    CPU time per sample on the cores the workers get, storage from metered reads or from the
    time the workers were blocked, the GPU from the consumer's steps, PCIe from timed copies."""
    stages = Stages(pcie=PcieStage(method="not measured: batches stay on the host"))
    delivered = sum(e.batches for e in m.epochs)
    if not delivered:
        return stages, ["no batch was delivered"]
    notes: list[str] = []
    unmeasured = [e.index for e in m.epochs if not e.workers_measured]
    if unmeasured:
        notes.append(unmeasured_note(unmeasured, bool(m.samples)))
    if m.samples:
        stages.cpu = worker_cpu(m, notes)
        stages.storage = worker_storage(m, stages.cpu.cpu_seconds_per_sample or 0.0)
    gpu = gpu_stage(m, m.step_ns, HOST_STEP_METHOD)
    if gpu is not None:
        stages.gpu = gpu
    else:
        notes.append(ONE_BATCH_NOTE)
    device_stages(m, stages)
    return stages, notes


def unmeasured_note(indices: Sequence[int], others: bool) -> str:
    """What a record says of epochs whose workers measured nothing (``capacity.worker_epochs``),
    and where their CPU and storage figures come from instead."""
    which = (
        "epoch " + ", ".join(str(i) for i in indices[:5]) + (", ..." if len(indices) > 5 else "")
    )
    rest = (
        "CPU and storage come from the other epochs"
        if others
        else "CPU and storage are not measured (`ioprobe run` watches the loader from its first pass)"
    )
    return (
        f"{which}: the loader's workers were started before it was watched (its state_dict() "
        "was taken first, as Accelerate's prepare() does), so they timed nothing; the batches "
        f"are the ones it gives unwatched; {rest}"
    )


def worker_cpu(m: Measured, notes: list[str]) -> CpuStage:
    """CPU seconds per sample in the workers (collate included, both in thread CPU time:
    ``capacity.worker_cpu_seconds``) on the cores they get: the affinity set less what the
    training loop uses, shared fairly with whatever else the host ran
    (``capacity.watch_cores``)."""
    eps = m.worker_epochs
    cpu_per_sample = sum(capacity.worker_cpu_seconds(e) for e in eps) / m.samples
    ctx = capacity.cpu_context(eps, m.settings.workers, m.usable_cores)
    if ctx.contention >= 0.25 or ctx.held >= 0.25:
        notes.append(_contention_note(ctx))
    cores = capacity.watch_cores(m.settings, eps, m.usable_cores)
    return CpuStage(
        capacity_samples_per_s=capacity.cpu_capacity(cores, cpu_per_sample),
        cpu_seconds_per_sample=cpu_per_sample,
        loader=m.settings.dataset,
        usable_cores=m.usable_cores,
    )


def _contention_note(ctx: capacity.CpuContext) -> str:
    """What the host's other load took from the workers: the cores another scheduling group
    kept (whatever the workers) and the threads that shared the rest with them."""
    parts = []
    if ctx.held >= 0.25:
        parts.append(
            f"another session or cgroup kept {ctx.held:.1f} cores busy, which it keeps "
            "however many workers run"
        )
    if ctx.contention >= 0.25:
        parts.append(f"other processes kept about {ctx.contention:.1f} threads runnable")
    return f"{'; '.join(parts)}: the workers ran {ctx.share:.0%} of the time they were ready to"


def worker_storage(m: Measured, cpu_per_sample: float) -> StorageStage:
    """Storage from the reads the workers timed through ``ioprobe.loaders.files`` when there
    are any; otherwise from the time they were blocked (wall - CPU - run-queue wait, collate
    included): each loading lane spends that long per sample waiting on reads, and then its
    CPU time with its wait for a core, one after the other (``capacity.worker_lanes``):
    what the workers deliver while they wait on storage."""
    eps, samples = m.worker_epochs, m.samples
    lanes = max(m.settings.workers, 1)
    mean_bytes = m.sample_bytes
    metered_s, open_s = capacity.metered_per_sample(eps, samples)
    runq = sum(e.runqueue_seconds for e in eps) / samples
    computing = capacity.computing_per_sample(eps, cpu_per_sample)
    storage = StorageStage()
    if metered_s > 0:
        cap = capacity.all_lanes_reading(lanes, metered_s, computing, m.read_scaling)
        storage.capacity_samples_per_s = cap
        storage.read_bytes_per_s = cap * mean_bytes if mean_bytes else None
        storage.basis = METERED_BASIS
        storage.request_latency_s = open_s
        return storage
    wall_per_sample = sum(capacity.worker_wall_seconds(e) for e in eps) / samples
    blocked = max(wall_per_sample - cpu_per_sample - runq, 0.0)
    if blocked > 0 and blocked > BLOCKED_MIN_SHARE * wall_per_sample:
        cap = capacity.all_lanes_reading(lanes, blocked, computing, m.read_scaling)
        storage.capacity_samples_per_s = cap
        storage.read_bytes_per_s = cap * mean_bytes if mean_bytes else None
        storage.unmetered_seconds = blocked * samples if mean_bytes == 0 else 0.0
        if not mean_bytes:
            bytes_basis = "; no bytes in the I/O or socket counters: unmetered"
        else:
            bytes_basis = _BYTES_BASIS.get(m.bytes_seen, "")
        storage.basis = "blocked time in the workers (wall - CPU - run-queue wait)" + bytes_basis
    else:
        storage.basis = "workers were never blocked on reads: storage is not limiting"
    return storage


def device_stages(m: Measured, stages: Stages) -> None:
    """The PCIe stage from timed copies, and the GPU stage from the device's own clock
    where it has one: a step's device time, not the host's, which only launches it."""
    moved = [e for e in m.epochs if e.h2d_bytes]
    if moved:
        stages.pcie = copies_stage(moved, m.timing)
    elif m.timing is not None and m.device is None:
        stages.pcie.method = (
            "not measured: batches were not moved through ioprobe.to_device or watch(..., device=)"
        )
    if m.on_device_clock:
        gpu = gpu_stage(
            m,
            m.device_step_ns,
            f"{m.timing}: device time from a batch's arrival to the next request, copies excluded",
        )
        if gpu is not None:
            stages.gpu = gpu


def copies_stage(moved: Sequence[WatchEpoch], timing: str | None) -> PcieStage:
    """Samples per second of copy time over the epochs that copied, with each kind of host
    memory's own rate: pinned copies run asynchronously on the copy engine, pageable ones
    go through a bounce buffer."""
    n = sum(e.samples for e in moved)
    nbytes = sum(e.h2d_bytes for e in moved)
    secs = sum(e.h2d_seconds for e in moved)
    pinned = sum(e.h2d_pinned_bytes for e in moved)
    pinned_s = sum(e.h2d_pinned_seconds for e in moved)
    return PcieStage(
        capacity_samples_per_s=_per(n, secs),
        method=f"{timing}, around ioprobe.to_device: {pinned / nbytes:.0%} of bytes pinned",
        bytes_per_sample=nbytes / n if n else None,
        bytes_per_s=_per(nbytes, secs),
        pinned_fraction=pinned / nbytes,
        pinned_bytes_per_s=_per(pinned, pinned_s),
        pageable_bytes_per_s=_per(nbytes - pinned, secs - pinned_s),
    )


def _per(amount: float, seconds: float) -> float | None:
    """A rate, where there was something timed to make one."""
    return amount / seconds if amount > 0 and seconds > 0 else None


# -- DALI: operator timings from NVTX, or its threads' CPU time ----------------------------


def dali_stages(
    m: Measured, d: DaliData, samples_per_iteration: int, reader_bytes: float | None
) -> tuple[Stages, list[str]]:
    """A DALI pipeline's stages: CPU from its operators (or its threads' CPU time when the
    operators were not timed), storage from its readers' per-sample fetches, the GPU from
    the consumer's steps, with the mixed and GPU operators' time per batch beside it.
    ``reader_bytes`` is the mean file size the readers' arguments name: DALI maps files into
    memory, so the I/O counters miss those reads."""
    stages = Stages(pcie=PcieStage(method="not measured: DALI copies batches itself"))
    if not m.samples:
        return stages, ["no batch was delivered"]
    notes = [d.timing_note] if d.timing_note else []
    stages.cpu = dali_cpu(m, d, samples_per_iteration)
    stages.storage = dali_storage(d, m.sample_bytes if reader_bytes is None else reader_bytes)
    gpu = gpu_stage(m, m.step_ns, HOST_STEP_METHOD)
    if gpu is not None:
        gpu_ops = [o for o in d.operators if o.stage == "gpu" and o.calls]
        if gpu_ops:
            gpu.preprocess_seconds = sum(o.wall_seconds / o.calls for o in gpu_ops)
        stages.gpu = gpu
    else:
        notes.append(ONE_BATCH_NOTE)
    return stages, notes


def dali_cpu(m: Measured, d: DaliData, samples_per_iteration: int) -> CpuStage:
    """CPU per sample: the operators' CPU per iteration (the pipeline runs ahead of the
    consumer, so operators ran a few more iterations than were delivered: per iteration,
    then per sample), plus what ran outside them (the consumer's thread in ``next()`` and
    parallel external_source workers); without operator timing, DALI's threads' CPU time."""
    outside = (d.consumer_cpu_seconds + d.worker_cpu_seconds) / m.samples
    cores = capacity.watch_cores(m.settings, m.epochs, m.usable_cores)
    if d.operators:
        per_iter_cpu = sum(o.cpu_seconds / o.calls for o in d.operators if o.calls)
        cpu_per_sample = per_iter_cpu / samples_per_iteration + outside
        cpu_ops = [o for o in d.operators if o.stage == "cpu" and o.calls]
        per_iter_wall = sum(o.wall_seconds / o.calls for o in cpu_ops)
        cap = capacity.dali_cpu_capacity(
            samples_per_iteration, per_iter_wall, cores, cpu_per_sample
        )
    else:
        cpu_per_sample = sum(d.threads.values()) / m.samples + outside
        cap = capacity.cpu_capacity(cores, cpu_per_sample)
    return CpuStage(
        capacity_samples_per_s=cap,
        cpu_seconds_per_sample=cpu_per_sample,
        loader="dali",
        usable_cores=m.usable_cores,
    )


def dali_storage(d: DaliData, sample_bytes: float) -> StorageStage:
    """The readers' fetches: one prefetch thread per reader fetches samples one after
    another, so its fetch time per sample is the capacity."""
    storage = StorageStage()
    if d.reads and d.read_seconds > 0:
        storage.capacity_samples_per_s = capacity.storage_from_lanes(1, d.read_seconds / d.reads)
        storage.read_bytes_per_s = (
            storage.capacity_samples_per_s * sample_bytes if sample_bytes else None
        )
        storage.basis = "DALI readers' per-sample fetches (NVTX), one prefetch thread each"
    elif d.operators:
        storage.basis = "no DALI file reader: samples come from external_source"
    else:
        storage.basis = "not separated from CPU time: per-operator timing unavailable"
    return storage


__all__ = [
    "METERED_BASIS",
    "Measured",
    "copies_stage",
    "dali_cpu",
    "dali_stages",
    "dali_storage",
    "device_stages",
    "gpu_stage",
    "loader_stages",
    "worker_cpu",
    "worker_storage",
]

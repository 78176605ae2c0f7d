"""The record's host, dataset and stages: where a run ran, what it read, and what each stage
of the pipeline (storage, cpu, pcie, gpu) measured, with the probe's sweeps and the NVML
series. The names a stage or a record's kind may take are here too, the vocabulary every
other part of the record uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

StageName = Literal["storage", "cpu", "pcie", "gpu"]
STAGE_NAMES: tuple[StageName, ...] = ("storage", "cpu", "pcie", "gpu")
Kind = Literal["probe", "watch", "whatif", "size"]


@dataclass
class FilesystemInfo:
    """Where a local path lives: block device, its class and the mount."""

    path: str
    mount_point: str | None = None
    fs_type: str | None = None
    device: str | None = None
    device_class: str = "unknown"  # nvme, sata-ssd, hdd, virtual, network, tmpfs, unknown
    rotational: bool | None = None
    model: str | None = None


@dataclass
class GpuInfo:
    index: int
    name: str
    memory_bytes: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None


@dataclass
class HostInfo:
    hostname: str = ""
    platform: str = ""
    python: str = ""
    cpu_model: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    usable_cores: int | None = None  # this process's CPU affinity, less where a quota caps it
    # what this process may use: the host's, or less where its cgroup is limited (below)
    memory_bytes: int | None = None
    memory_available_bytes: int | None = None
    # the tightest limits of this process's cgroups (a container's, a job scheduler's): CPU
    # time per second in cores, and memory in bytes; None where none is set
    cpu_quota_cores: float | None = None
    memory_limit_bytes: int | None = None
    filesystem: FilesystemInfo | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    gpu_probe: str = "not checked"  # why the GPU list is what it is


@dataclass
class DatasetProfile:
    """What the target holds. In a probe, one file is one sample unless ``samples`` says
    otherwise (shards, chunked formats, tables: ``layout``); then ``sample_bytes_mean`` is
    bytes per sample and the ``size_*`` figures stay the files'. In a watch, ``files`` is the
    samples the dataset holds."""

    target: str
    files: int = 0
    bytes: int = 0
    sample_bytes_mean: float = 0.0
    density: str = "unknown"  # low, medium, high
    size_p50: int | None = None
    size_p90: int | None = None
    size_max: int | None = None
    size_stdev: float | None = None  # bytes; None in records made before it was kept
    formats: dict[str, int] = field(default_factory=dict)
    remote: bool = False
    sizes_estimated: bool = False  # a huge tree: sizes from a random sample of stat() calls
    listing_truncated: bool = False
    # where the walk stopped at its share of the budget: the names it passed, the standard
    # error of ``files`` (the folders left, estimated) and whether ``files`` is only a lower
    # bound (a folder too large, or a bucket with no folders, not counted in time)
    files_listed: int | None = None
    files_error: int | None = None
    files_at_least: bool = False
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    # files that were listed but failed to read when the probe read them (vanished, refused,
    # timed out), each counted once by cause (collect/failures.py names the causes)
    read_errors: dict[str, int] = field(default_factory=dict)
    # files, tar shards, MDS shards, litdata chunks, parquet, arrow, packed files (the flag)
    layout: str = "files"
    samples: int | None = None  # samples the files hold; None: one per file
    samples_basis: str | None = None  # how ``samples`` was counted (an index, tar headers)
    index_files: int = 0  # index and metadata files listed beside the data: not samples


@dataclass
class SweepPoint:
    """One concurrency level of a storage read pass."""

    concurrency: int
    bytes: int
    items: int
    seconds: float
    read_bytes_per_s: float
    files_per_s: float
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    resident_fraction_before: float | None = None  # page-cache residency just before the level
    errors: int = 0


@dataclass
class StoragePass:
    cache: Literal["cold", "warm"]
    sweep: list[SweepPoint] = field(default_factory=list)
    best_concurrency: int | None = None
    read_bytes_per_s: float | None = None
    files_per_s: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    resident_fraction_after_evict: float | None = None
    eviction: str | None = None  # how cold was obtained, or why it could not be
    # how the files were read: "files" (each whole, in a shuffled order), "streams" (each
    # large file streamed from start to end by one reader, or cut into one region per reader),
    # "mixed" (both kinds in one selection)
    pattern: Literal["files", "streams", "mixed"] = "files"
    # whether a remote server answered a byte range with that range (None: local files, or
    # no file large enough to stream); without, each large file was streamed whole
    byte_ranges: bool | None = None


@dataclass
class DirectPoint:
    """Direct reads of one block size at one queue depth (the device-limit pass)."""

    block_bytes: int
    queue_depth: int
    reads: int
    seconds: float
    read_bytes_per_s: float
    reads_per_s: float
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None


@dataclass
class DeviceLimit:
    """What the device gives direct reads (O_DIRECT, random block-aligned offsets over the
    dataset's files) at a queue-depth sweep, small and large blocks: the ceiling beside what
    the loader-like passes got."""

    engine: Literal["io_uring", "threads"] = "io_uring"
    files: int = 0
    bytes_spanned: int = 0
    sweep: list[DirectPoint] = field(default_factory=list)
    note: str | None = None  # why a part or all of it was not measured


@dataclass
class StorageStage:
    capacity_samples_per_s: float | None = None
    read_bytes_per_s: float | None = None
    basis: str | None = None  # which pass the capacity is taken from, and why
    cold: StoragePass | None = None
    warm: StoragePass | None = None
    unmetered_seconds: float | None = None
    # per sample, time before any byte moves (open, metadata, HTTP HEAD): what does not
    # shrink with more bandwidth
    request_latency_s: float | None = None
    # direct reads at a queue-depth sweep (probe --device-limit): the device's own ceiling
    device: DeviceLimit | None = None


@dataclass
class CpuLevel:
    workers: int
    samples: int
    seconds: float
    samples_per_s: float
    cpu_seconds_per_sample: float
    efficiency: float  # samples_per_s / (workers * samples_per_s at 1 worker)


@dataclass
class DecodePath:
    """One way to decode the same images, measured side by side by the probe."""

    path: str  # pillow, dali-cpu, dali-gpu
    samples: int = 0
    seconds: float = 0.0
    samples_per_s: float | None = None
    cpu_seconds_per_sample: float | None = None
    threads: int = 0  # decode threads (or worker processes for Pillow)
    files: int = 0  # distinct encoded files cycled through, the same set for every path
    error: str | None = None  # why it could not be measured here
    # DALI's paths: untimed batches before the timed ones, the timed batches, and whether the
    # warm-up's rate had levelled off (False: it ended at its time limit while still speeding
    # up, so the rate is a short run's, below the path's steady rate); None for Pillow
    warmup_batches: int = 0
    timed_batches: int = 0
    warmed_up: bool | None = None


@dataclass
class CpuStage:
    capacity_samples_per_s: float | None = None
    cpu_seconds_per_sample: float | None = None
    loader: str | None = None
    usable_cores: int | None = None
    sweep: list[CpuLevel] = field(default_factory=list)
    errors: int = 0
    decode_paths: list[DecodePath] = field(default_factory=list)  # probe --loader dali
    # what one decoded sample holds (uint8 pixels, arrays): the bytes a loader would copy to
    # the device; None where the decoder's output has no size (a custom callable's object)
    output_bytes_per_sample: float | None = None


@dataclass
class PcieLink:
    """The GPU's PCIe link as NVML reports it, and what it can carry per direction."""

    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    # per direction, after line encoding (128b/130b from gen 3): the ceiling a copy can reach
    theoretical_bytes_per_s: float | None = None  # at the current generation and width
    max_bytes_per_s: float | None = None  # at the generation and width both ends support


@dataclass
class CopyPoint:
    """One size of the host-to-device probe: a direction, a kind of host memory, a size."""

    direction: Literal["h2d", "d2h"]
    memory: Literal["pinned", "pageable"]
    size_bytes: int
    bytes_per_s: float  # median of the trials
    trials: list[float] = field(default_factory=list)  # bytes/s of each trial


@dataclass
class DiskToGpu:
    """Storage read into pinned buffers and copied to the device while the next read runs."""

    bytes_per_s: float | None = None  # end to end, first read to last copy done
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    read_seconds: float = 0.0  # summed time in reads
    copy_seconds: float = 0.0  # summed device time of the copies
    buffer_bytes: int = 0
    method: str = "not measured"
    cache: str | None = None  # cold, warm: the state of the page cache when it ran
    # GPUDirect Storage through kvikio (cuFile), when importable: its rate and whether it ran in
    # compatibility mode (through a host bounce buffer, no direct path)
    cufile_bytes_per_s: float | None = None
    cufile: str | None = None


@dataclass
class PcieStage:
    capacity_samples_per_s: float | None = None
    method: str = "not measured"
    bytes_per_sample: float | None = None  # what crosses the link per sample, when known
    # measured host-to-device copies (ioprobe.to_device, watch(..., device=)): the rate over
    # all of them, the share of bytes that came from pinned memory, and each kind's own rate
    bytes_per_s: float | None = None
    pinned_fraction: float | None = None
    pinned_bytes_per_s: float | None = None
    pageable_bytes_per_s: float | None = None
    # the standalone host-to-device probe (ioprobe probe on a CUDA machine)
    link: PcieLink | None = None
    copies: list[CopyPoint] = field(default_factory=list)
    # the best pinned host-to-device rate over the link's theoretical rate
    efficiency: float | None = None
    disk_to_gpu: DiskToGpu | None = None


@dataclass
class GpuAlone:
    """The training step on its own: its batch already on the device, no data to wait for."""

    samples_per_s: float | None = None
    step_seconds: float | None = None
    steps: int = 0
    batch_size: int = 0
    timing: str = ""  # "cuda events on cuda:0", "host clock"
    # the share of the GPU those steps filled, and how it was read (GPM: the share of SMs
    # busy; NVML utilisation: the share of time a kernel ran, which overstates a small model)
    sm_active: float | None = None
    sm_method: str | None = None
    note: str | None = None  # why SM activity is missing


@dataclass
class GpuStage:
    capacity_samples_per_s: float | None = None
    method: str = "not measured"  # emulated, cuda-events, wall-clock
    step_seconds: float | None = None
    batch_size: int | None = None
    # share of time the GPU ran kernels while the consumer computed (stalls excluded), from
    # NVML utilisation samples; low values mean the model leaves the GPU mostly idle
    busy_fraction: float | None = None
    busy_method: str | None = None
    # DALI's mixed and GPU operators per batch: preprocessing that shares the GPU with training
    preprocess_seconds: float | None = None
    alone: GpuAlone | None = None  # ioprobe.gpu_alone / Watched.measure_gpu_alone


@dataclass
class GpuSeries:
    """NVML readings over a run, sampled on a background thread, column by column.

    ``t`` is seconds from the series' start on the host's monotonic clock (``t0_host`` places
    it on the run's timeline). Every other column has one value per row, None where the device
    or driver did not answer that reading. Rates: utilisation in percent, PCIe in bytes/s,
    power in watts, clocks in MHz, memory in bytes.
    """

    device_index: int = 0
    interval_s: float = 0.1
    t0_host: float = 0.0  # seconds from the run's start when the series' t is 0
    columns: dict[str, list[float | None]] = field(default_factory=dict)
    poll_seconds: float | None = None  # median host time of one poll: the sampler's cost
    rows_dropped: int = 0  # rows thinned away once the buffer filled
    status: str = "not sampled"


@dataclass
class Stages:
    storage: StorageStage = field(default_factory=StorageStage)
    cpu: CpuStage = field(default_factory=CpuStage)
    pcie: PcieStage = field(default_factory=PcieStage)
    gpu: GpuStage = field(default_factory=GpuStage)

    def capacities(self) -> dict[StageName, float | None]:
        return {name: getattr(self, name).capacity_samples_per_s for name in STAGE_NAMES}

"""The run record: everything one probe or watch measured, as plain data.

A ``RunRecord`` carries no behaviour beyond (de)serialisation. Collectors build one, analysis
reads one and returns findings, renderers turn findings into text. A record saved today can be
re-analysed and re-rendered by a later ioprobe (``ioprobe report run.json``).

The JSON form is versioned by ``schema``; loading (``codec.Codec``) checks every field's
type, that every number is finite, within 1e30 and (but for the ``SIGNED_FIELDS``) not
negative, and names the offending path (``stages.storage.sweep[2].concurrency``) when
something is wrong.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from ioprobe.codec import Codec, check_columns, join, to_plain
from ioprobe.errors import BadInputError, RecordError
from ioprobe.outputs import read_input, write_output
from ioprobe.redact import redacted_all

SCHEMA = "ioprobe.run/1"

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
    usable_cores: int | None = None  # this process's CPU affinity
    memory_bytes: int | None = None
    memory_available_bytes: int | None = None
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


@dataclass
class CpuLevel:
    workers: int
    samples: int
    seconds: float
    samples_per_s: float
    cpu_seconds_per_sample: float
    efficiency: float  # samples_per_s / (workers * samples_per_s at 1 worker)


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


@dataclass
class PipelineRun:
    """The end-to-end loop: readers, decode workers, batches and an emulated consumer."""

    workers: int
    batch_size: int
    compute_seconds_per_batch: float
    batches: int
    samples: int
    seconds: float
    samples_per_s: float
    wait_seconds: float
    gpu_idle_fraction: float
    cache: str
    wait_p50_ms: float | None = None
    wait_p95_ms: float | None = None
    tracks: list[Track] = field(default_factory=list)  # as in WatchData: main, then workers
    # samples that failed to read or decode, in every batch taken (the first too): counted
    # here, never in ``samples``
    errors: int = 0


@dataclass
class WatchEpoch:
    """One pass over a watched loader; times in seconds, summed over batches unless noted.

    Past ``WatchData``'s first epochs (``ioprobe.watch.collector.EPOCHS_HEAD``), an entry may
    stand for ``merged`` consecutive epochs (``index`` to ``index + merged - 1``), so that a
    loop taking one batch per ``iter()`` keeps a bounded list: every field is then the sum
    over those epochs (a per-epoch figure such as ``iter_seconds`` too: divide by ``merged``
    for the mean epoch), ``error`` the last one raised."""

    index: int
    batches: int = 0
    samples: int = 0
    seconds: float = 0.0  # wall time from the first batch's arrival to the last's
    stall_seconds: float = 0.0  # consumer blocked in next(), first batch excluded
    step_seconds: float = 0.0  # consumer time between batches
    first_batch_seconds: float | None = None  # includes worker start-up
    # the loader's iter(): where a DataLoader without persistent workers starts them
    iter_seconds: float | None = None
    # from the last batch's arrival to the iterator's end (StopIteration): the consumer's
    # last step and the final next(), where a DataLoader without persistent workers joins
    # its workers (``shutdown_seconds``, that next() alone); None where the pass was not
    # run to its end (a break, an error) or the record predates them
    end_seconds: float | None = None
    shutdown_seconds: float | None = None
    # workers that started in this epoch (none where persistent workers carried over), and
    # their mean time from the loader's iter() to their first sample: process start, imports,
    # worker_init_fn
    workers_started: int = 0
    worker_startup_seconds: float | None = None
    # The first round of batches (one per worker) is made concurrently and arrives bunched;
    # steady-state rates leave it out: samples and seconds up to the last of that round.
    startup_samples: int = 0
    startup_seconds: float = 0.0
    startup_metered_read_seconds: float = 0.0  # the first round's opens pay session set-up
    startup_metered_open_seconds: float = 0.0
    # what the workers read() in that round: a worker's first samples import the modules
    # its dataset loads lazily (fsspec, aiohttp, codecs), bytes that are not the dataset's
    startup_read_chars: int = 0
    startup_socket_bytes: int = 0  # and what they received over sockets
    # the same round's bytes fetched from the storage device (not the page cache), and its
    # samples' wall, CPU and run-queue time: what a cold start cost
    startup_read_bytes: int = 0
    startup_sample_wall_seconds: float = 0.0
    startup_sample_cpu_seconds: float = 0.0
    startup_runqueue_seconds: float = 0.0
    sample_wall_seconds: float = 0.0  # in the workers, per sample
    sample_cpu_seconds: float = 0.0
    runqueue_seconds: float = 0.0  # workers runnable but waiting for a core
    collate_seconds: float = 0.0  # wall time
    # the collate's thread CPU time (its wall beyond that is waiting); None in records from
    # before it was measured, where the collate's wall time counted as CPU
    collate_cpu_seconds: float | None = None
    # the watch's own work in the workers (their counters read, mapped files listed, each
    # batch's measurements packed), as the workers timed it: what watching cost them
    watch_worker_seconds: float = 0.0
    read_chars: int = 0  # bytes passed to read()/pread() by the workers
    read_bytes: int = 0  # bytes the workers caused to be fetched from storage
    # bytes the workers received over Python's sockets (HTTP, object stores): the network
    # reads read_chars leaves out
    socket_bytes: int = 0
    metered_bytes: int = 0  # read through ioprobe.loaders.files
    metered_read_seconds: float = 0.0  # opens and reads
    metered_open_seconds: float = 0.0  # opens alone: per-request latency
    main_cpu_seconds: float = 0.0  # the main process, all its threads
    # the host's CPUs busy over the epoch (every process, /proc/stat) and the epoch's wall
    # time from its iter() to its end; with the workers' own process CPU, what else ran
    # (None where not read)
    host_busy_seconds: float | None = None
    host_wall_seconds: float = 0.0
    worker_process_cpu_seconds: float = 0.0
    error: str | None = None  # the exception that ended the epoch, if any
    # On the device's own clock (CUDA events at step boundaries), first batch excluded: time
    # from the end of a step's GPU work to the next batch's arrival (the GPU had nothing to
    # do), and from each arrival to the next request (the step's work, copies excluded).
    gpu_wait_seconds: float | None = None
    gpu_step_seconds: float | None = None
    # host-to-device copies through ioprobe.to_device; pinned: calls whose every byte came
    # from page-locked memory (a call mixing both counts as pageable)
    h2d_copies: int = 0
    h2d_bytes: int = 0
    h2d_seconds: float = 0.0
    h2d_pinned_bytes: int = 0
    h2d_pinned_seconds: float = 0.0
    # False for a pass the loader began before it was watched (its state_dict() taken first,
    # as Accelerate's prepare() does): its workers were started without ioprobe's timing, so
    # only the consumer's side of it (arrivals, waits, steps) is in this epoch
    workers_measured: bool = True
    merged: int = 1  # the epochs this entry stands for (see above)


@dataclass
class WorkerStats:
    worker: int  # -1: the main process (num_workers=0)
    batches: int = 0
    samples: int = 0
    sample_wall_seconds: float = 0.0
    sample_cpu_seconds: float = 0.0


@dataclass
class Distribution:
    """A sample of a series: exact up to ``kept`` values, a uniform reservoir beyond."""

    count: int = 0
    total: float = 0.0
    exact: bool = True
    values: list[float] = field(default_factory=list)


# How each column of a Track is written and merged: (name, merge, scale). "first"/"last"
# columns are times, kept as the first or the last batch's of a merged row and written
# relative to the run's origin; "sum" columns add up. Scale turns the collectors' integer
# nanoseconds into seconds.
ColumnSpec = tuple[tuple[str, str, float], ...]
MAIN_COLUMNS: ColumnSpec = (
    ("start", "first", 1e-9),
    ("end", "last", 1e-9),
    ("stall", "sum", 1e-9),
    ("batches", "sum", 1.0),
    ("samples", "sum", 1.0),
    ("epoch", "first", 1.0),
)
WORKER_COLUMNS: ColumnSpec = (
    ("start", "first", 1e-9),
    ("end", "last", 1e-9),
    ("batches", "sum", 1.0),
    ("samples", "sum", 1.0),
    ("wall", "sum", 1e-9),
    ("cpu", "sum", 1e-9),
    ("read", "sum", 1e-9),
)
# column name -> how neighbouring rows merge, for whatever coarsens a recorded track
MERGE_RULES = {name: merge for name, merge, _ in MAIN_COLUMNS + WORKER_COLUMNS}


@dataclass
class Track:
    """One timeline of a watched run, column by column (a row per batch, or per
    ``batches_per_row`` consecutive batches once a long run outgrew the kept rows).

    Times (``start``, ``end``) are seconds from the first batch request of the watch; the other
    columns are sums over the row's batches. The main track (``worker`` None) has ``stall``,
    the consumer's time blocked in ``next()``; worker tracks have ``cpu``, ``wall`` (sample
    time in the worker) and ``read`` (metered reads), and a ``worker`` of -1 is loading done
    in the main process (num_workers=0).
    """

    name: str
    worker: int | None = None
    batches_per_row: int = 1
    columns: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class LoaderSettings:
    """A watched loader's settings, typed: parsed once where the loader is described, and
    read by every rule that needs them (the stage capacities, the what-if, the advice)."""

    framework: str = "torch"  # torch, dali
    dataset: str = "dataset"  # the dataset's class name, or what a DALI pipeline reads
    # where the dataset says it reads from (a chunked streaming format's input directory or
    # URL, as given, redacted); "" where it names none
    source: str = ""
    # the bytes a chunked streaming format's local cache may hold (litdata's max_cache_size
    # given as a size), and the chunks each worker downloads ahead of the one it reads
    # (litdata's max_pre_download); 0 where the dataset sets none or names no such thing
    cache_limit_bytes: int = 0
    chunks_ahead: int = 0
    # samples loaded at once: a DataLoader's num_workers (0: the main process loads), a DALI
    # pipeline's num_threads (its thread pool plays the workers' part)
    workers: int = 0
    batch_size: int | None = None
    iterable: bool = False  # an IterableDataset: a stream, read in the same order each epoch
    sampler: str | None = None  # the sampler's class name
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    # batches reach the consumer in the sampler's order (PyTorch's default; False from 2.6
    # hands over whichever batch is ready first)
    in_order: bool = True

    @classmethod
    def parse(cls, loader: dict[str, str]) -> LoaderSettings:
        """From a loader's description as records before typed settings held it: strings
        such as ``{"num_workers": "8", "pin_memory": "True"}``; what does not parse keeps
        its default."""

        def num(key: str) -> int | None:
            try:
                return int(loader[key])
            except (KeyError, ValueError):
                return None

        return cls(
            framework=loader.get("framework", "torch"),
            dataset=loader.get("dataset", "dataset"),
            source=loader.get("source", ""),
            cache_limit_bytes=max(num("cache_limit_bytes") or 0, 0),
            chunks_ahead=max(num("chunks_ahead") or 0, 0),
            workers=max(num("num_workers") or 0, 0),
            batch_size=num("batch_size"),
            iterable=loader.get("iterable") == "True",
            sampler=loader.get("sampler"),
            pin_memory=loader.get("pin_memory") == "True",
            prefetch_factor=num("prefetch_factor"),
            persistent_workers=loader.get("persistent_workers") == "True",
            in_order=loader.get("in_order") != "False",
        )


@dataclass
class ScalingPoint:
    """Samples that read while about ``reads_in_flight`` reads were in flight."""

    reads_in_flight: float  # their mean: their own read and the other workers' at the time
    read_ms: float  # their mean time blocked on storage
    samples: int


@dataclass
class ReadScaling:
    """How a sample's time on storage grew with the reads in flight beside it, in one watched
    run: the evidence whether more loader workers read faster (a per-request latency limit)
    or share one bandwidth (a cap). Storage throughput follows (reads in flight) **
    ``exponent``: 1 scales linearly, 0 is a fixed bandwidth."""

    exponent: float | None  # None: the run's reads in flight varied too little to tell
    limit: str  # "per-request latency", "bandwidth", "partly bandwidth", or why undetermined
    reads_in_flight_mean: float
    reads_in_flight_max: float  # the most the fit saw: beyond it, the curve is extrapolated
    samples: int
    points: list[ScalingPoint] = field(default_factory=list)


@dataclass
class RankInfo:
    """Where the process that made a record sat in a distributed job, as its launcher or its
    initialised process group told it (``collect.distributed``); absent outside one, and in
    a world of one rank."""

    # "torchrun", "slurm", "lightning", "mpirun", "accelerate", or "torch.distributed" (a
    # process group whose launcher set nothing ioprobe reads)
    launcher: str
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int | None = None  # processes on this node, where the launcher says
    node_rank: int | None = None
    nodes: int | None = None
    master: str | None = None  # the rendezvous host (and port), or SLURM's first node
    node_names: list[str] = field(default_factory=list)  # SLURM's node list, expanded


@dataclass
class RankFigures:
    """One rank's part of a distributed run: where it ran and what it measured. A probe's
    ranks fill the read and CPU figures; a watched job's ranks the loader figures."""

    rank: int
    host: str = ""
    local_rank: int = 0
    node: int = 0  # index into Distributed.hosts
    # the probe: this rank's reads while every rank read (the whole world's level)
    read_bytes: int = 0
    read_seconds: float | None = None
    read_bytes_per_s: float | None = None
    files_per_s: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    read_errors: int = 0
    cpu_seconds_per_sample: float | None = None
    cpu_samples_per_s: float | None = None  # its share of the node's cores, all ranks decoding
    usable_cores: int | None = None
    # a watched job: this rank's loader
    samples: int = 0
    wall_seconds: float | None = None
    samples_per_s: float | None = None
    stall_fraction: float | None = None  # of its wall time, waiting for a batch
    step_ms: float | None = None  # median time between batches, its training step included
    ready_ms_p50: float | None = None  # data-ready latency: how long next() blocked,
    ready_ms_p95: float | None = None  # after the first round of batches
    ready_ms_p99: float | None = None
    worker_batch_ms_p50: dict[str, float] = field(default_factory=dict)  # by worker id
    bottleneck: str | None = None  # this rank's own verdict: storage, cpu, ...
    # its loader's storage stage: the evidence a storage-bound straggler is set against
    storage_samples_per_s: float | None = None


@dataclass
class ClientsPoint:
    """Aggregate read bandwidth with ``clients`` ranks reading at once (each with the same
    threads): the curve that shows where shared storage saturates."""

    clients: int
    nodes: int  # distinct hosts among them
    read_bytes_per_s: float  # all bytes over the span from the first start to the last end
    per_client_bytes_per_s: float
    rank_sum_bytes_per_s: float  # each rank's own rate, summed
    seconds: float
    latency_p99_ms: float | None = None
    ranks: list[int] = field(default_factory=list)


@dataclass
class Distributed:
    """A run across the ranks of a distributed job, as rank 0 gathered it."""

    launcher: str  # as RankInfo.launcher
    world_size: int
    nodes: int
    hosts: list[str] = field(default_factory=list)
    ranks: list[RankFigures] = field(default_factory=list)
    curve: list[ClientsPoint] = field(default_factory=list)  # the probe's saturation curve
    threads_per_rank: int | None = None  # the probe's concurrent reads in each rank
    one_client: StoragePass | None = None  # rank 0 alone, sweeping its threads
    missing_ranks: list[int] = field(default_factory=list)  # gone before the end
    # a watched job: waiting that the slowest rank exposed to every rank (synchronous steps)
    exposed_wait_seconds: float | None = None
    exposed_fraction: float | None = None  # of the job's wall time
    steps_aligned: int = 0  # steps whose waits were compared across ranks
    # a watched job: the rank whose record the merged one is (its stages, host, verdict and
    # advice): the slowest, since every synchronous step waits for it; None in records made
    # before it was chosen, which took the lowest rank's
    verdict_rank: int | None = None


@dataclass
class HeavySample:
    """One of the samples that took longest to load: where to look for a pathological file."""

    # the dataset index it was loaded by; for an iterable dataset, its position in the stream
    # of the worker that read it; -1 where the index was not an integer
    index: int
    worker: int  # -1: the main process loaded it
    epoch: int
    wall_ms: float
    cpu_ms: float
    bytes: int | None = None  # read through ioprobe.loaders.files while it loaded
    path: str | None = None  # where the dataset names its source


@dataclass
class SampleCosts:
    """Per-sample costs in the workers: the distributions and the heaviest samples.

    ``wall_ms`` is in ``WatchData.sample_ms``; this adds each sample's CPU time and, where the
    dataset reads through ioprobe.loaders.files, its bytes, kept the same bounded way."""

    cpu_ms: Distribution = field(default_factory=Distribution)
    bytes: Distribution = field(default_factory=Distribution)  # empty where reads are unmetered
    heaviest: list[HeavySample] = field(default_factory=list)  # by wall time, heaviest first
    index_kind: str = "dataset index"  # or "position in its worker's stream" (iterable)


@dataclass
class BatchLog:
    """The run's first batches one by one, as they reached the consumer: what the queueing
    of batches (the in-order queue, the prefetch depth, the workers) is simulated from.

    Times are seconds from the watch's first request: when the consumer asked for the batch,
    when it got it, and when its worker had finished it (``ready``: before that, the consumer
    could not have had it; after it, only the queue held it back)."""

    request: list[float] = field(default_factory=list)
    arrival: list[float] = field(default_factory=list)
    ready: list[float] = field(default_factory=list)
    worker: list[int] = field(default_factory=list)
    work_ms: list[float] = field(default_factory=list)  # the worker's time on it: samples, collate
    slowest_ms: list[float] = field(default_factory=list)  # its slowest sample
    samples: list[int] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    # of work_ms, the worker's CPU time (its samples' and its collate's thread CPU) and its wait for
    # a core; the rest it spent blocked (reads, sleeps). Empty in records made before they
    # were kept
    cpu_ms: list[float] = field(default_factory=list)
    runqueue_ms: list[float] = field(default_factory=list)
    # the worker process's CPU time (every thread) since its previous batch: the samples,
    # the collate and what moving a batch costs it (pickling, the queue's feeder thread);
    # 0 for a worker's first batch
    process_cpu_ms: list[float] = field(default_factory=list)
    dropped: int = 0  # batches past the kept ones


@dataclass
class WatchData:
    loader: dict[str, str] = field(default_factory=dict)  # as described, for reports
    settings: LoaderSettings = field(default_factory=LoaderSettings)
    epochs: list[WatchEpoch] = field(default_factory=list)
    # epochs held in merged entries (``WatchEpoch.merged`` > 1) past the cap on kept entries:
    # 0 where every epoch is kept one by one
    epochs_merged: int = 0
    workers: list[WorkerStats] = field(default_factory=list)
    stall_ms: Distribution = field(default_factory=Distribution)  # per batch
    step_ms: Distribution = field(default_factory=Distribution)  # per batch
    sample_ms: Distribution = field(default_factory=Distribution)  # worker wall per sample
    storage_metered: bool = True
    # where the bytes per sample came from: "metered" (ioprobe.loaders.files), "socket" (what
    # the workers received over Python's sockets), "read" (the workers' read() calls),
    # "mmap" (the data files the workers had memory-mapped), "none" (nothing seen: no reads,
    # or a client that receives in C); "" in records made before it was kept
    bytes_seen: str = ""
    # data files mapped into the workers (libraries, Python's own files, devices and shared
    # memory left out): their mapped bytes, each file counted once whichever workers mapped it
    mapped_bytes: int = 0
    mapped_files: int = 0
    tracks: list[Track] = field(default_factory=list)  # main first, then workers by index
    device: str | None = None  # where watch(..., device=) moved the batches
    # how the device-side figures were timed: "cuda events on cuda:0", or "host clock" for a
    # device without CUDA events (copies only); None when nothing ran on a device
    gpu_timing: str | None = None
    gpu_step_ms: Distribution = field(default_factory=Distribution)  # per batch, device clock
    # the device's timeline, placed on the host's from the epoch's first batch: per row a
    # step's start and end, the wait before it and its copies (columns start, end, wait,
    # copy, batches)
    gpu_track: Track | None = None
    # per-sample storage time against the reads in flight: None where nothing was blocked on
    # reads or the loader had no workers
    read_scaling: ReadScaling | None = None
    # per-sample CPU time, bytes and the heaviest samples; None where the framework does not
    # time samples (DALI)
    sample_costs: SampleCosts | None = None
    batch_log: BatchLog | None = None  # None where no worker reports its batches (DALI)
    rank: RankInfo | None = None  # this process's rank in a distributed job, if in one
    # what a DataLoader's settings cost in host memory, read once per epoch after its first
    # round: a worker's private memory (the most of any, over the epochs) and the bytes of
    # the tensors in one batch (the largest seen); None where not measured
    worker_private_bytes: int | None = None
    batch_bytes: int | None = None
    # the main thread's CPU time per next() (one call in 16 timed): what taking a batch from
    # the workers costs the consumer; None where not measured
    next_cpu_ms: float | None = None

    def __post_init__(self) -> None:
        # described but not typed (a record from before settings were typed, or one built
        # by hand): the description is the only source, so the settings come from it
        if self.loader and self.settings == LoaderSettings():
            self.settings = LoaderSettings.parse(self.loader)


@dataclass
class DaliOperator:
    """One DALI operator over a watched run, from its NVTX ranges."""

    name: str  # its type as users write it: "decoders.image", "Resize", "readers.file"
    device: str  # cpu, mixed, gpu
    stage: StageName  # readers are storage, CPU operators cpu, mixed and GPU operators gpu
    calls: int  # iterations it ran in
    wall_seconds: float  # summed time it ran on its executor thread
    # the executor thread, plus the pool threads' CPU time while it ran (an operator hands
    # its samples to the pool and waits)
    cpu_seconds: float


@dataclass
class DaliData:
    """What a watched DALI pipeline did besides delivering batches."""

    pipeline: dict[str, str] = field(default_factory=dict)  # batch_size, num_threads, ...
    timing: str = "thread cpu"  # "nvtx": per-operator ranges; "thread cpu": threads only
    timing_note: str | None = None  # why per-operator timing is missing
    operators: list[DaliOperator] = field(default_factory=list)
    reads: int = 0  # samples the readers fetched (their ReadOne ranges)
    read_seconds: float = 0.0  # wall time of those fetches, on the readers' prefetch threads
    threads: dict[str, float] = field(default_factory=dict)  # DALI thread -> CPU seconds
    worker_cpu_seconds: float = 0.0  # parallel external_source worker processes
    consumer_cpu_seconds: float = 0.0  # the consumer's thread inside next() / run()
    # Pipeline.executor_statistics(): operator -> reserved bytes per output (exec_dynamic=False)
    memory: dict[str, list[int]] = field(default_factory=dict)


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
class Recommendation:
    kind: str
    text: str
    predicted_samples_per_s: float | None = None
    # today's rate that prediction is to be read against, where it is not the run's
    # measured steady rate: an end-to-end rate, epoch starts included
    baseline_samples_per_s: float | None = None
    evidence: str = ""
    # the what-if that predicts it, when it is one; `ioprobe compare` matches a later run to it
    change: Change | None = None
    # assumptions the prediction rests on that the run could not check (printed beside it)
    unchecked: list[str] = field(default_factory=list)


@dataclass
class ProbeSettings:
    loader: str = "auto"
    passes: list[str] = field(default_factory=lambda: ["cold", "warm"])
    time_budget_s: float = 60.0
    workers: int | None = None
    batch_size: int | None = None
    compute_ms_per_batch: float | None = None
    gpu_samples_per_s: float | None = None
    gpus: int = 1
    samples_per_file: int | None = None  # --samples-per-file: what each data file holds


StorageScope = Literal["local", "network", "object", "given"]


@dataclass
class StorageClassInfo:
    """A kind of storage by its datasheet figures (see ioprobe.analysis.catalog).

    ``local`` figures are per device in each node, ``network`` ones are a filer reached over
    one link and shared by all nodes, ``object`` ones are per connection. ``given`` is a rate
    typed on the command line: bandwidth only.
    """

    name: str
    label: str
    scope: StorageScope
    seq_read_bytes_per_s: float
    iops_4k: float | None = None  # None: no per-request limit
    iops_128k: float | None = None
    latency_s: float = 0.0
    source: str = ""
    # a shared storage a distributed probe measured: what one node read from it, where
    # seq_read_bytes_per_s is what every node together read; None: no per-node limit
    node_bytes_per_s: float | None = None


CacheOrder = Literal["shuffled", "sequential", "static"]


@dataclass
class Change:
    """A what-if: the resources to change, everything else as recorded. None: unchanged."""

    workers: int | None = None  # loader workers per GPU process
    # a DataLoader's queue: batches each worker may hold, and whether they are handed over
    # in the sampler's order (predicted by replaying the run's batches, loader_sim)
    prefetch_factor: int | None = None
    in_order: bool | None = None
    cores: int | None = None  # CPU cores per node the loader may use
    storage: StorageClassInfo | None = None
    gpus: int | None = None  # GPUs per node, one training process each
    cache_bytes: float | None = None  # RAM (or local NVMe) cache in front of storage
    cache_order: CacheOrder | None = None  # None: the recorded sampler's order
    pcie: str | None = None  # e.g. gen4x16
    gpu_decode: bool = False
    # a decode path the probe measured (pillow, dali-cpu; dali-gpu is gpu_decode, measured)
    decode: str | None = None
    # a probe of the same storage (whatif --probe): its concurrency sweep, the curve a
    # watched run's storage follows at a new number of readers in place of the run's own
    # evidence; empty: none given
    storage_sweep: list[SweepPoint] = field(default_factory=list)
    storage_sweep_source: str | None = None  # that probe: its file, target and pass


@dataclass
class StageDelta:
    stage: StageName
    before: float | None
    after: float | None
    why: str


@dataclass
class WhatIfData:
    """What a ``whatif`` record changed, and the record it started from."""

    change: Change
    base_kind: Kind
    base_stages: Stages
    base_bottleneck: StageName
    base_predicted_samples_per_s: float
    base_measured_samples_per_s: float | None = None
    base_gpu_idle_fraction: float | None = None
    deltas: list[StageDelta] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    # those of them the predicted rate rests on that the run could not check
    unchecked: list[str] = field(default_factory=list)


@dataclass
class SizeInputs:
    """The numbers a sizing is computed from, and where each came from."""

    sample_bytes: float
    gpu_samples_per_s: float  # one GPU's appetite with data always ready
    cpu_seconds_per_sample: float | None = None
    cores: float | None = None  # per node; None: CPU not limiting
    nodes: int = 1
    target_utilization: float = 0.9
    in_flight: int = 64  # reads in flight per node
    dataset_bytes: float | None = None
    nic_bytes_per_s: float | None = None  # per node
    # a node's ranks decoding at once, as a distributed probe measured them: the CPU stage
    # per node in place of cores / cpu_seconds_per_sample; None: from those two
    node_cpu_samples_per_s: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    # bytes per read request where it is not a sample: samples packed in shards are read a
    # shard at a time (None: a sample per request)
    request_bytes: float | None = None


@dataclass
class SizeRow:
    storage: str
    gpus: int  # per node
    nodes: int
    predicted_samples_per_s: float
    gpu_utilization: float
    bottleneck: StageName
    storage_samples_per_s: float
    cpu_samples_per_s: float | None
    gpu_samples_per_s: float
    cores_needed: float | None = None  # per node, to feed these GPUs fully
    cache_bytes_static: float | None = None  # a pinned cache that lifts storage to the GPUs
    cache_bytes_lru: float | None = None  # the same with a shuffled LRU page cache
    cost: float | None = None  # the configuration's price (--cost); None: not priced
    cost_per_sample_per_s: float | None = None  # the price of each delivered sample/s


@dataclass
class ClassUnits:
    """One storage class in MLPerf Storage's terms: the accelerators it keeps at or above
    the target accelerator utilisation (AU), and the throughput that takes. MLPerf Storage
    gives the storage all the client hosts it wants; ``storage_accelerators`` is that count,
    ``accelerators`` the count with this sizing's hosts (their cores and NICs)."""

    storage: str
    accelerators: int  # all nodes, with the hosts' limits
    accelerators_per_node: int
    au: float | None  # the AU at ``accelerators``; None where it keeps none
    samples_per_s: float  # delivered at ``accelerators``, all nodes
    mib_per_s: float  # the same in MiB/s (2**20 bytes per MiB), as MLPerf Storage states it
    storage_accelerators: int  # the storage alone: hosts never bind
    binds: str  # what stops one accelerator more per node: storage, cpu, nic, or none
    cores_per_node: float | None = None  # loader cores ``accelerators_per_node`` need
    node_bytes_per_s: float = 0.0  # what one node pulls at ``accelerators_per_node``
    cost: float | None = None  # with --cost: the price of ``accelerators`` on this class
    cost_per_sample_per_s: float | None = None


@dataclass
class DensityRow:
    """What one storage class delivers to one node at a sample size, and which of its
    limits sets that: its bandwidth, its random-read IOPS, or the latency of each read."""

    storage: str
    bytes_per_s: float
    share_of_bandwidth: float  # of the datasheet's sequential read
    limit: str  # bandwidth, iops or latency


@dataclass
class DensityGuide:
    """The dataset's density and the storage bandwidth and reads one GPU needs at it, with
    each class's delivery at this sample size and at one of the other density."""

    sample_bytes: float
    density: str  # low, medium or high
    gpu_samples_per_s: float  # one GPU's appetite: reads per second
    gpu_bytes_per_s: float  # one GPU fed fully
    target_bytes_per_s: float  # one GPU at the target utilisation
    node_gpus: int = 8  # the node shape the guidance states a node's need for
    rows: list[DensityRow] = field(default_factory=list)
    contrast_bytes: float = 0.0  # a sample size of the other regime
    contrast_rows: list[DensityRow] = field(default_factory=list)


@dataclass
class ReferencePoint:
    """A published MLPerf Storage result, and how many nodes like the sized one it would feed."""

    system: str
    version: str
    division: str
    workload: str
    accelerator: str
    accelerators: int
    bytes_per_s: float
    source: str
    hosts: int = 0  # client hosts; 0: not published
    sample_bytes: float = 0.0  # the workload's record size; 0: not known
    nodes_fed: float = 0.0  # bytes_per_s / one sized node's need at the target


@dataclass
class References:
    node_gpus: int  # the node shape the need is stated for
    node_bytes_per_s: float  # one such node's need at the target utilisation
    points: list[ReferencePoint] = field(default_factory=list)
    source: str = ""


@dataclass
class CostInputs:
    """Prices from --cost: per GPU, per CPU core, per storage class (a local class per node,
    a network or object class once for every node)."""

    currency: str
    source: str  # the file
    gpu: float | None = None
    core: float | None = None
    storage: dict[str, float] = field(default_factory=dict)


@dataclass
class Cheapest:
    storage: str
    gpus: int
    utilization: float
    cores_needed: float | None
    text: str
    cost: float | None = None  # with --cost: the configuration's price


@dataclass
class NodeFit:
    """How many nodes of ``gpus`` GPUs a measured shared storage feeds at the target."""

    gpus: int  # per node
    nodes: int  # the most nodes kept at or above the target utilisation
    next_bound: str  # what binds one node more: storage, cpu
    next_utilization: float  # with one node more
    asked_nodes: int | None = None  # --nodes, where above 1
    asked_utilization: float | None = None
    asked_bound: str | None = None
    text: str = ""


@dataclass
class ClusterSizing:
    """A sizing across nodes from a distributed probe: the figures it measured and the
    nodes they feed."""

    aggregate_bytes_per_s: float  # the clients curve's peak: all nodes together
    node_bytes_per_s: float  # what one node reads from the storage
    node_cpu_samples_per_s: float | None  # a node's ranks decoding at once
    clients: int  # the most clients the curve measured
    hosts: int
    saturated: bool  # whether the curve flattened: if not, the storage may give more
    fits: list[NodeFit] = field(default_factory=list)


@dataclass
class TuneTrial:
    """One trial of ``ioprobe tune``: the unchanged script run under one DataLoader setting,
    stopped once its batches were measured."""

    workers: int
    prefetch_factor: int
    in_order: bool
    predicted_samples_per_s: float | None  # the loader replay's, from the first trial
    measured_samples_per_s: float | None  # None: the trial delivered no record
    memory_bytes: float | None = None  # what the setting holds (loader_sim.memory)
    batches: int = 0  # batches it measured
    exit_code: int | None = None  # the script's, stopped by the trial (0) or on its own
    note: str = ""  # why it has no figure, or what it changes beyond speed


@dataclass
class TuneData:
    """What ``ioprobe tune`` tried: the setting as the script has it first, then the
    settings the loader replay ranked, each measured by a trial."""

    trials: list[TuneTrial] = field(default_factory=list)
    trial_batches: int = 0  # batches each trial measured after its workers' first round
    best: int | None = None  # index of the measured best trial


@dataclass
class SizeData:
    inputs: SizeInputs
    storage: list[StorageClassInfo] = field(default_factory=list)
    gpu_counts: list[int] = field(default_factory=list)
    rows: list[SizeRow] = field(default_factory=list)
    cheapest: Cheapest | None = None
    assumptions: list[str] = field(default_factory=list)
    cluster: ClusterSizing | None = None  # from a distributed probe's clients curve
    units: list[ClassUnits] = field(default_factory=list)  # per class, MLPerf Storage's terms
    density: DensityGuide | None = None
    references: References | None = None  # published MLPerf Storage results beside the need
    costs: CostInputs | None = None  # --cost: rows carry a price and the cheapest is by price


@dataclass
class RunRecord:
    kind: Kind
    host: HostInfo
    dataset: DatasetProfile
    stages: Stages = field(default_factory=Stages)
    bottleneck: StageName = "storage"
    predicted_samples_per_s: float = 0.0
    measured_samples_per_s: float | None = None
    gpu_idle_fraction: float | None = None
    gpu_idle_method: str | None = None
    recommendations: list[Recommendation] = field(default_factory=list)
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    pipeline: PipelineRun | None = None
    watch: WatchData | None = None
    dali: DaliData | None = None
    whatif: WhatIfData | None = None
    sizing: SizeData | None = None
    tune: TuneData | None = None  # ioprobe tune's trials, on the first trial's record
    gpus_supported: dict[str, int] | None = None  # size: GPUs per node kept at the target
    gpu_series: GpuSeries | None = None  # NVML readings during the probe or the watched run
    distributed: Distributed | None = None  # a run across ranks: what each measured
    notes: list[str] = field(default_factory=list)
    created: str = ""
    ioprobe_version: str = ""
    duration_s: float | None = None
    schema: str = SCHEMA
    # False when Ctrl-C or SIGTERM stopped the run: the record holds what was measured before
    complete: bool = True
    interrupted: str | None = None  # where it stopped: the probe's phase, the watched epoch

    def to_json(self) -> dict[str, Any]:
        return to_plain(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: Any, source: str = "record") -> RunRecord:
        if not isinstance(data, dict):
            raise RecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise RecordError(
                f"{source}: unsupported schema {schema!r} (this ioprobe reads {SCHEMA!r})"
            )
        try:
            rec: RunRecord = _CODEC.load(cls, data)
        except RecordError as exc:
            raise RecordError(f"{source}: {exc}") from None
        return rec

    def dumps(self) -> str:
        """The record as JSON text; every string in it redacted (``redact.redacted_all``):
        whatever field a URL reached (a catalog's source, a library's error in a note), its
        credentials are never written."""
        data = redacted_all(self.to_json())
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write as ``outputs.write_output`` does: a file atomically (a crash mid-write never
        leaves half a record), a symlink's target, a device or FIFO in place; anything else
        (a directory, a socket) raises BadInputError, and nothing but a regular file is ever
        replaced."""
        write_output(path, self.dumps())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        name = os.fspath(path)
        try:
            # a FIFO or /dev/zero given as a record must neither block nor fill the memory
            text = read_input(path, name, MAX_RECORD_BYTES)
        except BadInputError as exc:
            raise RecordError(str(exc).replace("expected a file", "expected a run file")) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(
                f"{name}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except (ValueError, RecursionError) as exc:
            # an integer of thousands of digits, or lists nested thousands deep
            raise RecordError(f"{name}: not a usable JSON document: {exc}") from None
        return cls.from_json(data, source=name)


# the largest record file loaded: a day's watched run with every series is well under it
MAX_RECORD_BYTES = 1 << 30
# Fields whose numbers may be negative: a worker index of -1 is the main process; timelines
# and the NVML series hold times relative to the run's origin, which a sampler started
# before it precedes; every other count, size, rate and duration a record holds is >= 0
SIGNED_FIELDS = frozenset(
    {
        "WorkerStats.worker",
        "Track.worker",
        "Track.columns",
        "GpuSeries.t0_host",
        "GpuSeries.columns",
        "HeavySample.index",
        "HeavySample.worker",
        "TuneTrial.exit_code",
        "BatchLog.request",
        "BatchLog.arrival",
        "BatchLog.ready",
        "BatchLog.worker",
    }
)
# Tables held column by column: a row per index, so every column has one length
_COLUMN_TABLES: tuple[type, ...] = (Track, GpuSeries)


def _check_tables(tp: type, kwargs: dict[str, Any], path: str) -> None:
    """A table held column by column has one length in every column; an epoch entry stands
    for one epoch or more."""
    if "columns" in kwargs and tp in _COLUMN_TABLES:
        check_columns(kwargs["columns"], join(path, "columns"))
    if tp is WatchEpoch and kwargs.get("merged", 1) < 1:  # readers divide by it
        raise RecordError(
            f"{join(path, 'merged')}: an entry stands for one epoch or more, got {kwargs['merged']}"
        )
    if tp is BatchLog:  # the CPU columns are empty where a log was made without them
        optional = ("cpu_ms", "runqueue_ms", "process_cpu_ms")
        check_columns(
            {k: v for k, v in kwargs.items() if isinstance(v, list) and (v or k not in optional)},
            path,
        )


_CODEC = Codec(SIGNED_FIELDS, _check_tables)


__all__ = [
    "MAIN_COLUMNS",
    "MERGE_RULES",
    "SCHEMA",
    "STAGE_NAMES",
    "WORKER_COLUMNS",
    "BatchLog",
    "CacheOrder",
    "Change",
    "Cheapest",
    "ClassUnits",
    "ClusterSizing",
    "CostInputs",
    "CpuLevel",
    "CpuStage",
    "DatasetProfile",
    "DecodePath",
    "DensityGuide",
    "DensityRow",
    "Distribution",
    "FilesystemInfo",
    "GpuInfo",
    "GpuStage",
    "HeavySample",
    "HostInfo",
    "LoaderSettings",
    "NodeFit",
    "PcieStage",
    "PipelineRun",
    "ProbeSettings",
    "RankInfo",
    "ReadScaling",
    "Recommendation",
    "ReferencePoint",
    "References",
    "RunRecord",
    "SampleCosts",
    "ScalingPoint",
    "SizeData",
    "SizeInputs",
    "SizeRow",
    "StageDelta",
    "StageName",
    "Stages",
    "StorageClassInfo",
    "StoragePass",
    "StorageScope",
    "StorageStage",
    "SweepPoint",
    "TuneData",
    "TuneTrial",
    "WatchData",
    "WatchEpoch",
    "WhatIfData",
    "WorkerStats",
    "to_plain",
]

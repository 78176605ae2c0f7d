"""What a watched run keeps: its epochs, workers and per-batch tracks, the loader's settings,
the per-sample costs and the batch log, DALI's operators; and the probe's end-to-end loop,
which keeps the same tracks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ioprobe.record.distributed import RankInfo
from ioprobe.record.stages import StageName


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

    Past ``WatchData``'s first epochs (``ioprobe.monitor.collector.EPOCHS_HEAD``), an entry may
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
    # and in the main process at the epoch's start and end (the host's processes scanned,
    # the GPU side's marks, the rank's share of the cores found): off the batches' path
    watch_main_seconds: float = 0.0
    # and in each worker that imported the watch's worker module at its start (a spawned
    # one: every epoch's start without persistent workers), how many did and what it took
    watch_import_seconds: float = 0.0
    watch_imports: int = 0
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
    # of that, the CPU of processes the scheduler shares the cores with apart from this
    # job's threads (another session's autogroup, another cgroup) over the wall time
    # between the two scans of /proc, and the most such groups busy at once: work that
    # keeps its share of the cores however many workers run (None where not scanned)
    apart_cpu_seconds: float | None = None
    apart_wall_seconds: float = 0.0
    apart_groups: int = 0
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
    # where the reads in flight did not vary in the run: the read check after it that
    # measured the curve instead (``collect.read_check``), in words; "" for the run's own
    checked: str = ""


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

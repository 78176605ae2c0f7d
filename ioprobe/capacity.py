"""The rules that turn measurements into stage capacities: one place, used by the probe, the
watch collectors and the what-if alike, so a capacity is computed by the same rule when it is
measured and when it is predicted. A ground-floor module: it imports only the record.

Each rule is a small pure function of numbers a collector measured (CPU seconds per sample,
seconds blocked per sample, a read rate, a step time) and the resources it ran with (cores,
workers, GPUs). ``ioprobe.analysis.scenario`` re-runs the same rules with the resources changed.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from ioprobe.record import (
    CopyPoint,
    DatasetProfile,
    LoaderSettings,
    ReadScaling,
    ScalingPoint,
    StorageStage,
    SweepPoint,
    WatchEpoch,
)

# -- dataset density: bytes per sample, which decides what limits storage -----------------

# Bytes per sample that separate density classes. Below 256 KiB a sample costs more in
# per-request latency than in transfer on every storage class (a 128 KiB read is ~20 us of
# NVMe bandwidth but ~80 us of NVMe latency), so throughput is IOPS-bound; above 8 MiB a
# sample is a long sequential transfer (3D volumes, video clips) and bandwidth decides.
DENSITY_LOW_MAX = 256 * 1024
DENSITY_HIGH_MIN = 8 * 1024 * 1024


# A worker's index queue arrives over a pipe, and those read()s count in its rchar: a few
# dozen bytes per sample. Less than this per sample is IPC, not the dataset reading.
METERED_MIN_BYTES_PER_SAMPLE = 512


def worker_epochs(epochs: Sequence[WatchEpoch]) -> list[WatchEpoch]:
    """The epochs whose workers measured their samples. A pass the loader began before it
    was watched has workers started without ioprobe's timing: the consumer's side of it
    (waits, steps, copies) counts, the worker-side rules (CPU, storage, bytes per sample)
    leave it out rather than read its samples as costing nothing."""
    return [e for e in epochs if e.workers_measured]


def apart_cores(epochs: Sequence[WatchEpoch]) -> float | None:
    """Cores that processes in other scheduling groups (another session's autogroup in the
    root cpu cgroup, another cpu cgroup) spent while the workers ran, over the epochs that scanned the host's
    processes (``WatchEpoch.apart_cpu_seconds``); None where none did. Linux gives such a
    group its share of the cores before it shares them between threads: that load keeps
    its cores however many workers run."""
    eps = [e for e in worker_epochs(epochs) if e.apart_cpu_seconds is not None]
    wall = sum(e.apart_wall_seconds for e in eps)
    return sum(e.apart_cpu_seconds or 0.0 for e in eps) / wall if wall > 0 else None


def worker_cpu_seconds(e: WatchEpoch) -> float:
    """The CPU seconds an epoch's workers spent on its samples and collates: each thread's
    CPU time, not its wall time (a collate that waits for memory or a core does not burn
    CPU while it waits). A record from before the collate's CPU time was measured has only
    its wall time, counted as CPU as it was then."""
    collate = e.collate_cpu_seconds if e.collate_cpu_seconds is not None else e.collate_seconds
    return e.sample_cpu_seconds + collate


def worker_wall_seconds(e: WatchEpoch) -> float:
    """The wall seconds an epoch's workers spent on its samples and collates: what, less
    their CPU time (``worker_cpu_seconds``) and run-queue wait, they spent blocked."""
    return e.sample_wall_seconds + e.collate_seconds


def steady(epochs: Sequence[WatchEpoch]) -> list[WatchEpoch]:
    """The epochs that ran past their first round of batches (one per worker): made together
    and arriving bunched, that round is left out of steady-state rates. An epoch too short to
    finish it keeps ``startup_*`` at zero and counts whole."""
    return [e for e in epochs if e.samples > e.startup_samples and e.seconds > e.startup_seconds]


# What a worker's first round reads besides the dataset and the module files it imports
# (those are not counted: loaders.torch_worker): files C code opens as a library loads, a CA bundle or
# locale tables, a few hundred kB. A first round that read more per worker read data.
FIRST_ROUND_DATA_MIN = 1 << 20
# A first round that read this many times the steady bytes per sample read ahead in lumps
LUMPY_RATIO = 2.0


def file_bytes_per_sample(epochs: Sequence[WatchEpoch]) -> float:
    """Bytes the workers passed to read() per sample; 0 when that is no more than IPC, as
    reads over sockets and through memory maps leave it.

    From the steady batches: a worker's first samples also set up what its dataset imports
    lazily (C code reading a CA bundle as an HTTP client loads). But a reader that reads
    ahead in lumps (a shard, a file or a row group at a time) reads much of its data in that
    first round: up front, whole, where each worker's shard is read at its first sample, and
    the steady batches then understate it or read nothing. Where the first round read
    ``FIRST_ROUND_DATA_MIN`` or more per worker started and ``LUMPY_RATIO`` times the
    steady bytes per sample or more, the whole epochs count."""
    return _bytes_per_sample(epochs, attrgetter("read_chars"), attrgetter("startup_read_chars"))


def socket_bytes_per_sample(epochs: Sequence[WatchEpoch]) -> float:
    """Bytes the workers received over sockets per sample (``loaders.sockets``); 0 below
    what a sample of data holds at the least (a worker's stray requests). From the steady
    batches, and the whole epochs where the first round received in lumps, as
    ``file_bytes_per_sample`` reads read() and for its reasons: a worker's first round also
    sets its client up (a credentials or region lookup, an endpoint list), and a reader that
    downloads a shard or a chunk before its first sample receives much of its data then."""
    return _bytes_per_sample(epochs, attrgetter("socket_bytes"), attrgetter("startup_socket_bytes"))


def _bytes_per_sample(
    epochs: Sequence[WatchEpoch],
    total: Callable[[WatchEpoch], int],
    first_round: Callable[[WatchEpoch], int],
) -> float:
    """Bytes per sample of one of the workers' counters (``total``, with what the first
    round had counted, ``first_round``): the steady batches', or the whole epochs' where the
    first round counted in lumps (``file_bytes_per_sample``); 0 below
    ``METERED_MIN_BYTES_PER_SAMPLE``."""
    epochs = worker_epochs(epochs)
    ok = steady(epochs)
    n = sum(e.samples - e.startup_samples for e in ok)
    if not n:
        samples = sum(e.samples for e in epochs)
        mean = sum(total(e) for e in epochs) / samples if samples else 0.0
        return mean if mean >= METERED_MIN_BYTES_PER_SAMPLE else 0.0
    mean = sum(total(e) - first_round(e) for e in ok) / n
    floor = LUMPY_RATIO * max(mean, METERED_MIN_BYTES_PER_SAMPLE)
    lumpy = [
        e
        for e in ok
        if e.workers_started
        and first_round(e) >= FIRST_ROUND_DATA_MIN * e.workers_started
        and first_round(e) >= floor * e.startup_samples
    ]
    if lumpy:
        mean = sum(total(e) for e in lumpy) / sum(e.samples for e in lumpy)
    return mean if mean >= METERED_MIN_BYTES_PER_SAMPLE else 0.0


def steady_read_bytes_per_sample(epochs: Sequence[WatchEpoch]) -> float | None:
    """Bytes the workers passed to read() per sample in the steady batches alone (the first
    round, which also sets up what the dataset imports, left out); 0 at or below what IPC
    accounts for, None where no epoch had steady batches. The evidence that a loader reads
    its data through read() at all, whatever its first round read."""
    _, mean = _steady_reads(worker_epochs(epochs))
    if mean is None:
        return None
    return mean if mean >= METERED_MIN_BYTES_PER_SAMPLE else 0.0


def _steady_reads(epochs: Sequence[WatchEpoch]) -> tuple[list[WatchEpoch], float | None]:
    """The epochs with steady batches, and the bytes read() per steady sample over them
    (None where there were none)."""
    ok = steady(epochs)
    n = sum(e.samples - e.startup_samples for e in ok)
    return ok, (sum(e.read_chars - e.startup_read_chars for e in ok) / n if n else None)


def mapped_bytes_per_sample(mapped_bytes: int, samples: int) -> float:
    """Bytes per sample of a dataset read through memory maps (NumPy memmap, Arrow): the data
    files mapped into the loader's workers, each counted once, over the samples the dataset
    holds; 0 below what a dataset's samples hold at the least (a small index file mapped
    beside data read otherwise).

    The files' mapped size, not the file pages the workers fault in: the kernel maps more
    than a sample touches (fault-around, and large page-cache folios: on Linux 6.18 a
    worker's resident file pages grew by 38 MB in one batch of 2 MB of samples, and covered
    most of a 200 MB file within ten batches), pages resident from an earlier epoch fault no
    more, and a per-batch reading would cost a /proc read per batch. The size is what the
    dataset holds, not what a pass read: a dataset that uses part of its files (some
    columns, a subset of rows) reads less per sample than this says."""
    if samples <= 0:
        return 0.0
    mean = mapped_bytes / samples
    return mean if mean >= METERED_MIN_BYTES_PER_SAMPLE else 0.0


def dataset_samples(ds: DatasetProfile) -> int:
    """The samples a dataset holds: its files, or what its shards, chunks or tables hold
    (``samples``, counted by the probe from the format's index or headers)."""
    return ds.samples if ds.samples is not None else ds.files


def request_bytes(ds: DatasetProfile) -> float:
    """Bytes a loader asks storage for at a time: a sample, or where samples are packed in
    shards, chunks or tables, the file that holds them (a loader streams it whole), which is
    what a storage class's per-request latency is paid on."""
    if ds.samples is not None and ds.files and ds.bytes:
        return ds.bytes / ds.files
    return ds.sample_bytes_mean


def density_class(mean_bytes: float) -> str:
    """``low``, ``medium`` or ``high``: the mean sample size against the thresholds above."""
    if mean_bytes < DENSITY_LOW_MAX:
        return "low"
    if mean_bytes < DENSITY_HIGH_MIN:
        return "medium"
    return "high"


# -- cpu -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuContext:
    """What else competed for the CPU while a loader ran."""

    loop_cores: float  # cores the training loop (main process) used
    contention: float  # other runnable threads sharing the cores thread by thread
    share: float  # of the time the workers were runnable, the share they ran
    held: float = 0.0  # cores other scheduling groups keep whatever the workers (held_cores)


def cpu_context(epochs: Sequence[WatchEpoch], workers: int, usable: float) -> CpuContext:
    """Infer the host's other load from how long the workers waited for a core.

    Linux's scheduler shares cores fairly among runnable threads: with ``N`` cores and ``R``
    runnable threads each runs ``min(1, N / R)`` of the time. The workers' run-queue wait
    (``/proc/thread-self/schedstat``) against their CPU time gives that share ``s``; with our
    own ``k`` runnable threads (busy workers and the training loop), ``R = N / s`` and the
    rest, ``N / s - k``, is someone else's. A share above 0.95 is read as no contention: with
    a free core the wait says nothing about how much else is running. Where the run scanned
    the host's processes, the cores other scheduling groups held (``held_cores``) are not
    ours to share: ``N`` is the usable cores less those.
    """
    epochs = worker_epochs(epochs)  # an epoch whose workers timed nothing tells nothing
    wall = sum(e.seconds for e in epochs)
    # with no workers the main process loaded too: its CPU is not the training loop's alone
    loop = sum(e.main_cpu_seconds for e in epochs) / wall if wall > 0 and workers > 0 else 0.0
    cpu = sum(worker_cpu_seconds(e) for e in epochs)
    runq = sum(e.runqueue_seconds for e in epochs)
    share = cpu / (cpu + runq) if cpu + runq > 0 else 1.0
    mine = max(workers, 1) + loop
    held = held_cores(epochs, usable) or 0.0
    other = max((usable - held) / share - mine, 0.0) if 0.0 < share < 0.95 else 0.0
    return CpuContext(loop_cores=loop, contention=other, share=share, held=held)


# Cores of other work below this are the host's own noise (kernel threads, the watch's
# sampler), not a load that takes a worker's core.
FOREIGN_FLOOR = 0.25


def held_cores(epochs: Sequence[WatchEpoch], usable: float) -> float | None:
    """The cores that other scheduling groups keep however many workers run: what they
    spent (``apart_cores``), up to their fair share beside this job's group,
    ``usable * g / (g + 1)`` for ``g`` groups busy at once (none below ``FOREIGN_FLOOR``);
    None where no epoch scanned the host's processes. A busy loop in another session on 2
    cores kept its core: 3 ms of CPU per sample gave 306 samples/s with 1 worker and 311
    with 8."""
    apart = apart_cores(epochs)
    if apart is None:
        return None
    if apart < FOREIGN_FLOOR:
        return 0.0
    groups = max(e.apart_groups for e in worker_epochs(epochs))
    return min(apart, usable * groups / (groups + 1))


def loader_cores(lanes: float, usable: float, ctx: CpuContext, workers: int) -> float:
    """Cores a loader with ``lanes`` busy workers gets on ``usable`` cores.

    Without contention: one core per worker, up to the usable cores less the training
    loop's. With no workers, each process loads on its main thread between training steps,
    so its one core is shared with its loop. With other runnable threads, each of ours gets
    the fair share ``N / (others + ours)`` of a core (see ``cpu_context``).
    """
    loop = ctx.loop_cores
    if workers > 0:
        alone = min(lanes, max(usable - loop, 0.5))
    else:
        # every process's core is shared with its loop, and all of them with the host's
        alone = min(max(lanes - loop, 0.5 * lanes), max(usable - loop, 0.5))
    if ctx.held > 0:  # other groups keep their cores: the rest is shared thread by thread
        ours = max(usable - ctx.held, 0.5)
        alone = min(alone, max(ours - (loop if workers > 0 else 0.0), 0.5))
        return min(alone, lanes * min(1.0, ours / (ctx.contention + lanes + loop)))
    if ctx.contention <= 0:
        return alone
    return min(alone, lanes * min(1.0, usable / (ctx.contention + lanes + loop)))


def watch_cores(
    settings: LoaderSettings,
    epochs: Sequence[WatchEpoch],
    recorded_usable: float,
    *,
    workers: int | None = None,
    gpus: int = 1,
    usable: float | None = None,
) -> float:
    """The cores a watched loader's CPU work gets: as recorded, or with ``workers`` per GPU
    process, ``gpus`` processes and ``usable`` cores instead.

    A DataLoader's workers get ``loader_cores``, with the host's other load inferred from the
    recorded run (``cpu_context``) and one training loop per GPU process. A DALI pipeline's
    thread pool runs on at most the usable cores; DALI's executor and its consumer are
    already in the measured CPU per sample, so no training loop is taken off.
    """
    w = settings.workers if workers is None else workers
    cores = recorded_usable if usable is None else usable
    lanes = max(w, 1) * gpus
    if settings.framework == "dali":
        return float(min(lanes, cores))
    ctx = cpu_context(epochs, settings.workers, recorded_usable)
    per_gpu_loop = CpuContext(ctx.loop_cores * gpus, ctx.contention, ctx.share, ctx.held)
    return loader_cores(lanes, cores, per_gpu_loop, w)


def cpu_capacity(cores: float, cpu_seconds_per_sample: float) -> float | None:
    """Samples/s that ``cores`` sustain at ``cpu_seconds_per_sample``: CPU work divides
    evenly over cores, so capacity is linear in them (None when nothing was measured)."""
    return cores / cpu_seconds_per_sample if cpu_seconds_per_sample > 0 else None


def dali_cpu_capacity(
    samples_per_iteration: int,
    cpu_op_wall_per_iteration: float,
    cores: float,
    cpu_seconds_per_sample: float,
) -> float | None:
    """A DALI pipeline's CPU capacity: the lesser of what its CPU operators' wall time per
    iteration allows (they run one after another within an iteration) and what its CPU
    time per sample allows on ``cores``."""
    by_wall = (
        samples_per_iteration / cpu_op_wall_per_iteration if cpu_op_wall_per_iteration > 0 else None
    )
    by_cores = cpu_capacity(cores, cpu_seconds_per_sample)
    if by_wall is None or by_cores is None:
        return by_wall if by_cores is None else by_cores
    return min(by_wall, by_cores)


def best_level(rates: Sequence[float]) -> float:
    """A loader swept over worker counts delivers at best its fastest level: more workers than
    that one only contend (for cores, memory bandwidth, the GIL of a shared process)."""
    return max(rates)


def sweep_rate(points: list[tuple[float, float]], x: float, extrapolate: bool) -> float:
    """A measured scaling curve read at ``x``: piecewise-linear through (0, 0) and
    ``points``; beyond the last point either its per-unit rate continues (``extrapolate``,
    CPU workers) or the curve stays flat (storage saturates)."""
    pts = sorted([(0.0, 0.0), *points])
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    xl, yl = pts[-1]
    if extrapolate and xl > 0:
        return yl * x / xl
    return max(y for _, y in pts)


# -- storage -------------------------------------------------------------------------------


def storage_from_lanes(lanes: float, seconds_per_sample: float) -> float:
    """Samples/s from ``lanes`` readers that each spend ``seconds_per_sample`` on storage
    per sample (timed reads, or time blocked): the readers overlap, so they add up."""
    return lanes / seconds_per_sample


def worker_lanes(lanes: float, blocked_seconds: float, cpu_seconds: float) -> float:
    """Samples/s from ``lanes`` loader workers that each, per sample, wait
    ``blocked_seconds`` (on reads) and compute ``cpu_seconds`` (their CPU time, with the
    wait for a core a busy host adds to it): inside one worker the two run one after the
    other, not overlapped, so a worker's time per sample is their sum; the workers run side
    by side, so their rates add up. Where the cores cannot give every worker its CPU time,
    the CPU stage (``cpu_capacity``) is the lower bound."""
    return storage_from_lanes(lanes, blocked_seconds + cpu_seconds)


def storage_from_rate(read_bytes_per_s: float, sample_bytes: float) -> float:
    """Samples/s a measured read rate delivers at ``sample_bytes`` per sample."""
    return read_bytes_per_s / max(sample_bytes, 1.0)


def single_thread_rate(storage: StorageStage, cold: bool) -> tuple[float, str] | None:
    """The storage pass's one-thread read rate and that pass's cache: the cold pass when
    ``cold`` and it ran, else the warm one. The disk-to-GPU path reads on one thread, so this
    is the rate it is sized by and compared with."""
    passes = (storage.cold, storage.warm) if cold else (storage.warm, storage.cold)
    for p in passes:
        one = next((s for s in p.sweep if s.concurrency == 1), None) if p else None
        if p is not None and one is not None and one.read_bytes_per_s > 0:
            return one.read_bytes_per_s, p.cache
    return None


def sweep_points(sweep: Sequence[SweepPoint]) -> list[tuple[float, float]]:
    """A storage pass's (reads in flight, bytes/s) curve, the levels that moved bytes."""
    return [(float(s.concurrency), s.read_bytes_per_s) for s in sweep if s.read_bytes_per_s]


# -- gpu -----------------------------------------------------------------------------------


def gpu_from_step(batch_size: float, step_seconds: float) -> float | None:
    """Samples/s of a consumer that takes ``step_seconds`` per batch; None for a step too
    short to time (below a microsecond)."""
    return batch_size / step_seconds if step_seconds > 1e-6 else None


def gpu_emulated(batch_size: int, step_seconds: float, gpus: int) -> float | None:
    """An emulated accelerator computing ``step_seconds`` per batch on each of ``gpus``."""
    return batch_size / step_seconds * gpus if step_seconds > 0 else None


def gpus_linear(per_gpu: float, gpus: float) -> float:
    """``gpus`` GPUs each training at ``per_gpu`` samples/s when fed: data-parallel training
    with one process per GPU and no synchronisation cost."""
    return per_gpu * gpus


def shared_gpu(gpu_capacity: float, decode_capacity: float) -> float:
    """The GPU's capacity when it also decodes: training and decode share the device, so
    their times per sample add."""
    return 1.0 / (1.0 / gpu_capacity + 1.0 / decode_capacity)


# -- pcie ----------------------------------------------------------------------------------


def pcie_from_rate(bytes_per_s: float, bytes_per_sample: float) -> float:
    """Samples/s a link carries at ``bytes_per_s`` when each sample is ``bytes_per_sample`` on
    the device (decoded, often larger than on disk)."""
    return bytes_per_s / bytes_per_sample


def copy_rate_at(points: Sequence[CopyPoint], direction: str, memory: str, size: float) -> float:
    """The copy rate at ``size`` bytes, interpolated between the measured sizes.

    Interpolation is on a log scale of size, the way copy rate curves rise from latency-bound
    to bandwidth-bound; beyond the measured sizes the nearest measured rate holds.
    """
    pts = sorted(
        (p.size_bytes, p.bytes_per_s)
        for p in points
        if p.direction == direction and p.memory == memory
    )
    if not pts:
        raise ValueError(f"no {memory} {direction} copies measured")
    if size <= pts[0][0]:
        return pts[0][1]
    for (s0, r0), (s1, r1) in itertools.pairwise(pts):
        if size <= s1:
            w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return r0 + w * (r1 - r0)
    return pts[-1][1]


def peak_copy_rate(copies: Sequence[CopyPoint], direction: str, memory: str) -> float | None:
    """The fastest measured copy of one direction and kind of host memory, over all sizes:
    what the link carries at best (the probe's efficiency, the reports' headline rate)."""
    rates = [c.bytes_per_s for c in copies if c.direction == direction and c.memory == memory]
    return max(rates) if rates else None


# -- how storage scales with readers, from one watched run ---------------------------------

# a sample blocked less than this share of its time did not wait on storage
READ_MIN_SHARE = 0.02
SCALING_MIN_SAMPLES = 300
# the reads in flight must span this ratio (10th to 90th percentile of samples) for a slope
SCALING_MIN_SPREAD = 1.25
SCALING_BIN = 0.25  # reads in flight per bin of the fit


@dataclass(frozen=True)
class SampleSpan:
    """One sample a loader worker made: when, on the host's monotonic clock, and how long of
    it the worker was blocked (wall - CPU - run-queue wait: on storage)."""

    worker: int
    start_ns: int
    end_ns: int
    blocked_ns: int


def read_scaling(spans: Sequence[SampleSpan]) -> ReadScaling | None:
    """Whether more readers read faster, from the reads one run had in flight at once.

    A sample's read is taken to come first in its span (a dataset reads a file, then
    decodes it), lasting its blocked time. Its reads in flight are its own plus the other
    workers' reads overlapping it, as a time average over it. Under a per-request latency
    limit a sample's blocked time does not depend on them; under a shared bandwidth it grows
    in proportion. A least-squares line through log(mean blocked time) against log(reads in
    flight), per bin of reads in flight and weighted by samples, has slope b; storage
    throughput then follows (reads in flight) ** (1 - b). One run has one worker count, but
    its reads in flight vary as workers alternate reading with decoding, so the answer is in
    the run; where they varied too little, it says so rather than guess. None where no
    sample waited on storage or a single lane read."""
    reading = [
        s
        for s in spans
        if s.blocked_ns > 0 and s.blocked_ns >= READ_MIN_SHARE * (s.end_ns - s.start_ns)
    ]
    workers = {s.worker for s in reading}
    if len(reading) < SCALING_MIN_SAMPLES or len(workers) < 2:
        return None
    flight = _reads_in_flight(reading)
    flight.sort()
    lo, hi = flight[len(flight) // 10][0], flight[(9 * len(flight)) // 10][0]
    mean_n = sum(n for n, _ in flight) / len(flight)
    points = _binned(flight)
    out = ReadScaling(
        exponent=None,
        limit="",
        reads_in_flight_mean=mean_n,
        reads_in_flight_max=hi,
        samples=len(flight),
        points=points,
    )
    if hi < SCALING_MIN_SPREAD * lo:
        out.limit = (
            f"undetermined: reads in flight stayed between {lo:.2f} and {hi:.2f} "
            "(10th to 90th percentile of samples)"
        )
        return out
    out.exponent = scaling_exponent(points)
    out.limit = scaling_limit(out.exponent)
    return out


# Reads whose throughput grows with readers by this exponent or less share a bandwidth:
# past the most readers measured, their throughput is taken to hold, not to grow.
BANDWIDTH_EXPONENT = 0.3


def scaling_exponent(points: Sequence[ScalingPoint]) -> float:
    """Storage throughput's exponent in reads in flight, from reads binned by them: a
    least-squares line through log(mean read time) against log(reads in flight), weighted
    by reads, has slope b, and throughput follows (reads in flight) ** (1 - b), held to
    0..1."""
    slope = _weighted_slope(
        [(math.log(p.reads_in_flight), math.log(p.read_ms), p.samples) for p in points]
    )
    return min(max(1.0 - slope, 0.0), 1.0)


def scaling_limit(exponent: float) -> str:
    """What limits reads with that exponent: a per-request latency (more readers read
    faster), a bandwidth (they share it), or some of each."""
    if exponent >= 0.7:
        return "per-request latency"
    return "bandwidth" if exponent <= BANDWIDTH_EXPONENT else "mixed latency and bandwidth"


def _reads_in_flight(reading: Sequence[SampleSpan]) -> list[tuple[float, int]]:
    """Each read's reads in flight (its own and the other workers' overlapping it, as a time
    average over it) with its blocked time."""
    by_worker: dict[int, list[tuple[int, int]]] = {}
    for s in sorted(reading, key=lambda s: s.start_ns):
        by_worker.setdefault(s.worker, []).append((s.start_ns, s.start_ns + s.blocked_ns))
    starts = {w: [a for a, _ in reads] for w, reads in by_worker.items()}
    flight = []
    for s in reading:
        a, b = s.start_ns, s.start_ns + s.blocked_ns
        n = 1.0
        for w, reads in by_worker.items():
            if w == s.worker:
                continue
            # the other worker's reads that overlap this one: from the last to start before
            # it ends, back while they end after it starts (a worker's reads don't overlap)
            i = bisect.bisect_left(starts[w], b) - 1
            while i >= 0 and reads[i][1] > a:
                n += (min(reads[i][1], b) - max(reads[i][0], a)) / (b - a)
                i -= 1
        flight.append((n, s.blocked_ns))
    return flight


def _binned(flight: Sequence[tuple[float, int]]) -> list[ScalingPoint]:
    """The reads binned by reads in flight: each bin's mean reads in flight and read time."""
    bins: dict[int, list[tuple[float, int]]] = {}
    for n, b in flight:
        bins.setdefault(int(n / SCALING_BIN), []).append((n, b))
    return [
        ScalingPoint(
            reads_in_flight=sum(n for n, _ in v) / len(v),
            read_ms=sum(b for _, b in v) / len(v) / 1e6,
            samples=len(v),
        )
        for _, v in sorted(bins.items())
    ]


def _weighted_slope(points: Sequence[tuple[float, float, int]]) -> float:
    w = sum(n for _, _, n in points)
    mx = sum(x * n for x, _, n in points) / w
    my = sum(y * n for _, y, n in points) / w
    sxx = sum(n * (x - mx) ** 2 for x, _, n in points)
    sxy = sum(n * (x - mx) * (y - my) for x, y, n in points)
    return sxy / sxx if sxx > 0 else 0.0


def computing_per_sample(epochs: Sequence[WatchEpoch], cpu_per_sample: float) -> float:
    """A loader worker's CPU seconds per sample with its wait for a core, in steady state: a
    worker's first samples import what its dataset loads lazily (an HTTP client, a codec),
    a one-off that its time per sample should not carry. Where no epoch ran past its first
    round, the whole run's: ``cpu_per_sample`` and the run-queue wait per sample."""
    ok = steady(epochs)
    n = sum(e.samples - e.startup_samples for e in ok)
    if not n:
        samples = sum(e.samples for e in epochs)
        runq = sum(e.runqueue_seconds for e in epochs) / samples if samples else 0.0
        return cpu_per_sample + runq
    return (
        sum(
            worker_cpu_seconds(e)
            - e.startup_sample_cpu_seconds
            + e.runqueue_seconds
            - e.startup_runqueue_seconds
            for e in ok
        )
        / n
    )


def metered_per_sample(epochs: Sequence[WatchEpoch], samples: int) -> tuple[float, float]:
    """Seconds of metered storage time (opens and reads) and of opens alone, per sample, in
    steady state: each worker's first opens pay for its session (an aiohttp loop, a TLS
    handshake), a one-off the per-sample figure should not carry."""
    ok = steady(epochs)
    n = sum(e.samples - e.startup_samples for e in ok)
    if not n:
        return (
            sum(e.metered_read_seconds for e in epochs) / samples,
            sum(e.metered_open_seconds for e in epochs) / samples,
        )
    read = sum(e.metered_read_seconds - e.startup_metered_read_seconds for e in ok)
    opened = sum(e.metered_open_seconds - e.startup_metered_open_seconds for e in ok)
    return read / n, opened / n


def curve_read_seconds(points: list[tuple[float, float]], sample_bytes: float, k: float) -> float:
    """A read's time with ``k`` reads in flight on storage whose concurrency curve is
    ``points`` (reads in flight, bytes/s, flat past the last): by Little's law, k reads of
    ``sample_bytes`` in flight at T(k) bytes/s take k * sample_bytes / T(k) each."""
    k = max(k, 1.0)
    return k * sample_bytes / sweep_rate(points, k, False)


@dataclass(frozen=True)
class ClosedLoop:
    """Loader workers that each read a sample and then compute it, over and over."""

    samples_per_s: float
    read_s: float  # one read's time
    reads_in_flight: float  # as a read sees them: its own and the others beside it


# The most readers the closed-loop analyses iterate over (one step per reader): a record
# of more loader workers than any host runs (a hand-edited one, a million) is read as this
# many, where each analysis, repeated by the bisections above it, took minutes
MAX_LANES = 4096


def closed_loop(
    points: list[tuple[float, float]],
    sample_bytes: float,
    scale: float,
    compute_s: float,
    lanes: int,
) -> ClosedLoop:
    """What ``lanes`` workers deliver when each, per sample, reads from storage with the
    concurrency curve ``points`` (``curve_read_seconds``, times ``scale``: the run's reads
    against the probe's) and then computes for ``compute_s``.

    Mean value analysis of the closed loop: with n workers, a read finds the others' reads
    in flight that n - 1 workers had, Q(n - 1), and takes the curve's time at 1 + Q(n - 1)
    reads in flight; a worker's cycle is that read plus its compute, so X(n) = n / (R(n) +
    compute_s), and by Little's law Q(n) = X(n) * R(n). Exact for a bandwidth shared evenly
    among its reads and for a per-request latency (a flat time per read); between them the
    curve says which. Workers that compute between reads keep fewer reads in flight than
    there are workers, so a shared bandwidth fills only when there are more of them: 2
    workers decoding 15 ms after each 50 kB read from a server capped at 2 MB/s deliver 31
    samples/s, 4 deliver the cap's 40."""
    q, out = 0.0, ClosedLoop(0.0, 0.0, 0.0)
    for n in range(1, min(max(lanes, 1), MAX_LANES) + 1):
        k = 1.0 + q
        read = scale * curve_read_seconds(points, sample_bytes, k)
        x = n / (read + compute_s) if read + compute_s > 0 else 0.0
        q = x * read
        out = ClosedLoop(x, read, k)
    return out


def closed_loop_scale(
    points: list[tuple[float, float]],
    sample_bytes: float,
    compute_s: float,
    lanes: int,
    read_s: float,
) -> float:
    """The ``scale`` at which ``closed_loop`` gives ``lanes`` workers a read time of
    ``read_s``: the factor between a run's reads and a probe's curve, where the run's own
    reads in flight are not known and each worker is taken to have been busy. The read time
    grows with the scale, so a bisection finds it."""
    lanes = min(lanes, MAX_LANES)
    guess = read_s / curve_read_seconds(points, sample_bytes, float(max(lanes, 1)))
    lo, hi = guess * 1e-3, guess * 1e3
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if closed_loop(points, sample_bytes, mid, compute_s, lanes).read_s < read_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def all_lanes_reading(
    lanes: int, read_s: float, compute_s: float, scaling: ReadScaling | None
) -> float:
    """Samples/s from ``lanes`` workers that each, per sample, wait ``read_s`` on storage and
    then compute ``compute_s``, with every worker busy: what storage lets the loader deliver.

    Without the run's read scaling, each worker's time per sample is the sum of the two
    (``worker_lanes``). With it, a read takes longer or shorter with the reads in flight
    beside it: ``read_s`` at the run's own (``reads_in_flight_mean``, as its reads saw them),
    ``read_s * (k / mean) ** (1 - exponent)`` at k. The workers are then a closed loop
    (``closed_loop``'s mean value analysis): with n of them a read sees 1 + Q(n - 1) reads in
    flight, X(n) = n / (R(n) + compute_s) and Q(n) = X(n) * R(n). A run whose workers waited
    for the consumer had fewer reads in flight than with every worker busy, which a shared
    bandwidth makes slower; workers that compute between reads keep fewer reads in flight
    than there are workers, which it does not. With no compute every lane reads and this is
    lanes / read time at ``lanes`` reads in flight."""
    if scaling is None or scaling.exponent is None or scaling.reads_in_flight_mean <= 0:
        return worker_lanes(lanes, read_s, compute_s)
    mean, power = scaling.reads_in_flight_mean, 1.0 - scaling.exponent
    q = x = 0.0
    for n in range(1, min(max(lanes, 1), MAX_LANES) + 1):
        read = read_s * ((1.0 + q) / mean) ** power
        x = n / (read + compute_s) if read + compute_s > 0 else 0.0
        q = x * read
    return x


def read_seconds_of(cap: float, lanes: int, compute_s: float, scaling: ReadScaling | None) -> float:
    """The read time per sample at which ``all_lanes_reading`` gives ``cap`` (the inverse:
    the delivery falls as the read time grows, so a bisection finds it)."""
    if cap <= 0:
        return 0.0
    if scaling is None or scaling.exponent is None or scaling.reads_in_flight_mean <= 0:
        return max(lanes / cap - compute_s, 0.0)
    lo, hi = 0.0, lanes / cap
    while all_lanes_reading(lanes, hi, compute_s, scaling) > cap:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if all_lanes_reading(lanes, mid, compute_s, scaling) > cap:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def storage_scale(scaling: ReadScaling | None, lanes_ratio: float) -> float | None:
    """Storage throughput at ``lanes_ratio`` times the run's readers, relative to the run:
    ``lanes_ratio ** exponent`` (None where the run could not tell)."""
    if scaling is None or scaling.exponent is None:
        return None
    return float(lanes_ratio**scaling.exponent)


__all__ = [
    "BANDWIDTH_EXPONENT",
    "DENSITY_HIGH_MIN",
    "DENSITY_LOW_MAX",
    "ClosedLoop",
    "CpuContext",
    "SampleSpan",
    "all_lanes_reading",
    "best_level",
    "closed_loop",
    "closed_loop_scale",
    "computing_per_sample",
    "copy_rate_at",
    "cpu_capacity",
    "cpu_context",
    "curve_read_seconds",
    "dali_cpu_capacity",
    "dataset_samples",
    "density_class",
    "gpu_emulated",
    "gpu_from_step",
    "gpus_linear",
    "loader_cores",
    "mapped_bytes_per_sample",
    "metered_per_sample",
    "pcie_from_rate",
    "peak_copy_rate",
    "read_scaling",
    "read_seconds_of",
    "request_bytes",
    "scaling_exponent",
    "scaling_limit",
    "shared_gpu",
    "single_thread_rate",
    "storage_from_lanes",
    "storage_from_rate",
    "storage_scale",
    "sweep_points",
    "sweep_rate",
    "watch_cores",
    "worker_cpu_seconds",
    "worker_lanes",
    "worker_wall_seconds",
]

"""``ioprobe.watch(loader)``: wrap a live data loader and measure it while training runs.

The wrapper behaves like the loader it wraps (iteration, ``len``, attributes) and exposes
``.run``, the RunRecord of what it measured, final once an epoch ends or the ``with`` block
exits. Framework code lives in ``ioprobe.loaders``; this module never imports torch.

The collector's per-batch work in the main process is a handful of integer operations and
appends into bounded buffers: every series is kept exactly up to ``MAX_KEPT`` values, then as
a uniform reservoir, so a 10M-sample epoch does not grow memory without bound.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import statistics
import time
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from ioprobe import __version__
from ioprobe.analysis.model import cpu_context, loader_cores
from ioprobe.collect import gpu_sampler
from ioprobe.collect.dataset import density_class
from ioprobe.collect.gpu_events import EventBackend, GpuTimeline
from ioprobe.collect.timeline import MAIN_COLUMNS, MAIN_ROWS, WORKER_COLUMNS, WORKER_ROWS, Series
from ioprobe.errors import BadInputError
from ioprobe.record import (
    CpuStage,
    DatasetProfile,
    Distribution,
    GpuAlone,
    GpuStage,
    PcieStage,
    RunRecord,
    Stages,
    StorageStage,
    Track,
    WatchData,
    WatchEpoch,
    WorkerStats,
)

MAX_KEPT = 100_000  # values kept exactly per series before switching to a reservoir
# collectors whose epoch is running, innermost last: where ioprobe.to_device reports copies
_ACTIVE: list[WatchCollector] = []
# A worker's index queue arrives over a pipe, and those read()s count in its rchar: a few
# dozen bytes per sample. Less than this per sample is IPC, not the dataset reading.
METERED_MIN_BYTES_PER_SAMPLE = 512


class Reservoir:
    """Exact up to ``limit`` values, then a uniform random sample of everything seen.

    Values are integers (nanoseconds), kept raw and multiplied by ``scale`` only when written
    out, so the per-batch path never converts or allocates. Past the limit it uses Li's
    Algorithm L: it draws how many values to skip before the next replacement, so a batch of
    values costs a few comparisons, not a random draw per value.
    """

    __slots__ = ("_next", "_w", "count", "limit", "rng", "scale", "total", "values")

    def __init__(self, limit: int, scale: float = 1.0) -> None:
        self.limit = limit
        self.scale = scale
        self.values = array("q")
        self.count = 0
        self.total = 0
        self.rng = random.Random(0)
        self._w = 1.0
        self._next = 0  # the 1-based count at which the next value replaces a kept one

    def _skip(self) -> None:
        self._w *= math.exp(math.log(self.rng.random() or 1e-300) / self.limit)
        gap = (
            math.floor(math.log(self.rng.random() or 1e-300) / math.log1p(-self._w))
            if self._w < 1
            else 0
        )
        self._next += gap + 1

    def _filled(self) -> None:
        self._next = self.limit
        self._skip()

    def add(self, v: int) -> None:
        self.count += 1
        self.total += v
        if len(self.values) < self.limit:
            self.values.append(v)
            if len(self.values) == self.limit:
                self._filled()
        elif self.count == self._next:
            self.values[self.rng.randrange(self.limit)] = v
            self._skip()

    def extend(self, vs: array[int], total: int | None = None) -> None:
        """Many values at once; ``total`` is their sum when the caller has it already."""
        n = len(vs)
        self.total += sum(vs) if total is None else total
        room = self.limit - len(self.values)
        if room > 0:
            self.values.extend(vs[:room])
            if len(self.values) == self.limit:
                self._filled()
        first = self.count + 1  # the count of vs[0]
        self.count += n
        while self.count >= self._next > 0 and self._next >= first:
            self.values[self.rng.randrange(self.limit)] = vs[self._next - first]
            self._skip()

    def to_record(self) -> Distribution:
        return Distribution(
            count=self.count,
            total=self.total * self.scale,
            exact=self.count <= self.limit,
            values=[v * self.scale for v in self.values],
        )


class WatchCollector:
    """Fills mutable buffers batch by batch; ``stop()`` returns the finished RunRecord."""

    def __init__(
        self,
        loader_info: dict[str, str],
        batch_size: int | None,
        dataset_len: int | None,
        device: str | None = None,
    ) -> None:
        self.info = loader_info
        self.device = device
        self.batch_size = batch_size
        self.dataset_len = dataset_len
        try:
            self._startup_batches = max(int(loader_info.get("num_workers", "0")), 1)
        except ValueError:
            self._startup_batches = 1
        self.epochs: list[WatchEpoch] = []
        self.workers: dict[int, WorkerStats] = {}
        # nanoseconds in, milliseconds out
        self.stall = Reservoir(MAX_KEPT, 1e-6)
        self.step = Reservoir(MAX_KEPT, 1e-6)
        self.sample = Reservoir(MAX_KEPT, 1e-6)
        self.main = Series(MAIN_COLUMNS, MAIN_ROWS)
        self.worker_series: dict[int, Series] = {}
        self._origin = 0
        self._cur: WatchEpoch | None = None
        self._prev_arrival = 0
        self._t_start = 0
        self._cpu_start = 0.0
        self._started = time.perf_counter()
        # GPU utilisation, sampled on its own thread while epochs run; the spans the stall
        # share is measured over, in the sampler's clock, pick the samples that count
        self._gpu: gpu_sampler.GpuBusySampler | None = None
        self._gpu_spans: list[tuple[float, float]] = []
        self.alone: GpuAlone | None = None  # Watched.measure_gpu_alone
        # the device's own timeline (CUDA events), once something runs on a device
        self.timeline: GpuTimeline | None = None
        self.gpu_step = Reservoir(MAX_KEPT, 1e-6)
        self.timeline_error: str | None = None
        self.created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")

    # -- hot path: one call per batch -------------------------------------------------------
    def begin_epoch(self) -> None:
        if self._cur is not None:
            # a new pass began before the last one ended: Lightning asks for the next
            # epoch's iterator after taking len(loader) batches, and drops the old one later
            self.end_epoch(None)
        self._cur = WatchEpoch(index=len(self.epochs))
        self.epochs.append(self._cur)
        self._prev_arrival = 0
        self._cpu_start = time.process_time()
        self._start_gpu_sampler()
        _ACTIVE.append(self)

    @property
    def current(self) -> WatchEpoch | None:
        """The epoch being iterated, None between passes."""
        return self._cur

    def use_device(self, backend: EventBackend | None) -> GpuTimeline | None:
        """Begin the device timeline with ``backend``'s events, unless one runs already."""
        if self.timeline is None and backend is not None:
            self.timeline = GpuTimeline(backend, self.gpu_step)
        return self.timeline

    def on_batch(self, t_request: int, t_arrival: int, stats: tuple[Any, ...]) -> None:
        worker, wall_b, cpu_b, collate, rchar, rbytes, runq, mbytes, mns, mopen, t_done = stats
        wall = array("q", wall_b)
        n = len(wall)
        wall_ns = sum(wall)
        wall_s = wall_ns / 1e9
        cpu_ns = sum(array("q", cpu_b))
        cpu_s = cpu_ns / 1e9
        ep = self.on_delivery(t_request, t_arrival, n)
        ws = self.worker_series.get(worker)
        if ws is None:
            ws = self.worker_series[worker] = Series(WORKER_COLUMNS, WORKER_ROWS)
        # the worker's samples ran back to back before its collate: the span they took
        ws.add((t_done - collate - wall_ns, t_done, 1, n, wall_ns, cpu_ns, mns))
        ep.metered_bytes += mbytes
        ep.metered_read_seconds += mns / 1e9
        ep.metered_open_seconds += mopen / 1e9
        if ep.batches == self._startup_batches:
            ep.startup_metered_read_seconds = ep.metered_read_seconds
            ep.startup_metered_open_seconds = ep.metered_open_seconds
        ep.sample_wall_seconds += wall_s
        ep.sample_cpu_seconds += cpu_s
        ep.collate_seconds += collate / 1e9
        ep.read_chars += rchar
        ep.read_bytes += rbytes
        ep.runqueue_seconds += runq / 1e9
        w = self.workers.get(worker)
        if w is None:
            w = self.workers[worker] = WorkerStats(worker=worker)
        w.batches += 1
        w.samples += n
        w.sample_wall_seconds += wall_s
        w.sample_cpu_seconds += cpu_s
        self.sample.extend(wall, wall_ns)

    def on_delivery(self, t_request: int, t_arrival: int, n: int) -> WatchEpoch:
        """The consumer's side of one batch of ``n`` samples: what every framework has."""
        ep = self._cur
        assert ep is not None
        if not self._origin:
            self._origin = t_request
        self.main.add((t_request, t_arrival, t_arrival - t_request, 1, n, ep.index))
        if self._prev_arrival:
            stall_ns = t_arrival - t_request
            step_ns = t_request - self._prev_arrival
            ep.stall_seconds += stall_ns / 1e9
            ep.step_seconds += step_ns / 1e9
            ep.seconds += (stall_ns + step_ns) / 1e9
            self.stall.add(stall_ns)
            self.step.add(step_ns)
        else:
            ep.first_batch_seconds = (t_arrival - t_request) / 1e9
        self._prev_arrival = t_arrival
        ep.batches += 1
        ep.samples += n
        if ep.batches == self._startup_batches:
            ep.startup_samples = ep.samples
            ep.startup_seconds = ep.seconds
        return ep

    def end_epoch(self, error: BaseException | None) -> None:
        ep = self._cur
        if ep is None:
            return
        ep.main_cpu_seconds = time.process_time() - self._cpu_start
        if error is not None:
            ep.error = f"{type(error).__name__}: {error}"
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.timeline is not None:
            self._end_timeline(ep)
        gpu = self._gpu
        if ep.batches > 1 and gpu is not None and gpu.running:
            # first to last arrival, as in the stall share, moved from perf_counter to the
            # sampler's clock
            last = self._prev_arrival / 1e9 + gpu.clock() - time.perf_counter_ns() / 1e9
            self._gpu_spans.append((last - ep.seconds, last))
        self._cur = None

    def _end_timeline(self, ep: WatchEpoch) -> None:
        tl = self.timeline
        assert tl is not None
        try:
            wait, busy, copy, copies, nbytes, pinned, pinned_ns = tl.end_epoch()
        except Exception as exc:  # a device error surfaces here: keep the host's figures
            self.timeline_error = f"{type(exc).__name__}: {exc}"
            self.timeline = None
            return
        if tl.backend.on_device_clock and wait + busy > 0:
            ep.gpu_wait_seconds = wait / 1e9
            ep.gpu_step_seconds = busy / 1e9
        ep.h2d_copies = copies
        ep.h2d_bytes = nbytes
        ep.h2d_seconds = copy / 1e9
        ep.h2d_pinned_bytes = pinned
        ep.h2d_pinned_seconds = pinned_ns / 1e9

    # -- once per epoch and after the run: GPU utilisation ---------------------------------
    def _start_gpu_sampler(self) -> None:
        # started here, not per batch: from now on its thread does all the work
        if self._gpu is None:
            self._gpu = gpu_sampler.new_sampler()
            # stop polling once the collector is dropped even if .run is never read; the
            # callback holds the sampler only, so it does not keep the collector alive
            weakref.finalize(self, self._gpu.stop)
        self._gpu.start()

    def _gpu_busy(self, idle_fraction: float | None) -> tuple[float | None, str | None]:
        """Stop the sampler; the GPU's busy share while computing, and how it was measured."""
        gpu = self._gpu
        if gpu is None:
            return None, None
        gpu.stop()
        times, values = gpu.samples()
        chosen: list[float] = []
        for lo, hi in self._gpu_spans:
            chosen.extend(values[bisect_left(times, lo) : bisect_right(times, hi)])
        busy = gpu_sampler.busy_fraction(chosen, idle_fraction)
        if busy is None:
            return None, None
        hz = 1.0 / (gpu.interval_s * gpu.stride)
        of = f", mean of {gpu.gpus} GPUs" if gpu.gpus > 1 else ""
        return busy, f"nvml utilization, {len(chosen)} samples at {hz:.3g} Hz{of}, stalls excluded"

    # -- after the run ---------------------------------------------------------------------
    def stop(self) -> RunRecord:
        from ioprobe.collect.hostinfo import host_info

        if self._cur is not None:
            self.end_epoch(None)
        host = host_info(None)
        usable = host.usable_cores or os.cpu_count() or 1
        eps = self.epochs
        samples = sum(e.samples for e in eps)
        # the first round of batches of each epoch waits for worker start-up and arrives
        # bunched: left out of the delivered rate (an epoch too short for it counts whole)
        steady = sum(e.samples - e.startup_samples for e in _steady(eps))
        steady_wall = sum(e.seconds - e.startup_seconds for e in _steady(eps))
        wall = sum(e.seconds for e in eps)
        # metered reads also count in rchar when they are local: never add the two
        metered = sum(e.metered_bytes for e in eps)
        read_chars = metered or sum(e.read_chars for e in eps)
        mean_bytes = read_chars / samples if samples else 0.0
        if mean_bytes < METERED_MIN_BYTES_PER_SAMPLE:
            mean_bytes = 0.0
        stages, notes = self._stages(usable, mean_bytes)
        stall = sum(e.stall_seconds for e in eps)
        idle = stall / wall if wall > 0 else None
        idle_method = "wall clock: consumer time in next() / time between batch arrivals"
        timing = self._timing()
        on_device = [e for e in eps if e.gpu_wait_seconds is not None]
        if on_device:
            dwait = sum(e.gpu_wait_seconds or 0.0 for e in on_device)
            dspan = dwait + sum((e.gpu_step_seconds or 0.0) + e.h2d_seconds for e in on_device)
            if dspan > 0:
                idle = dwait / dspan
                idle_method = (
                    f"{timing}: device time waiting for the next batch / device time from the "
                    "first batch to the last"
                )
        if self.timeline_error:
            notes.append(f"the device timeline stopped ({self.timeline_error}): host clock used")
        # without a GPU or NVML there is simply no value: normal, so nothing in the notes
        stages.gpu.busy_fraction, stages.gpu.busy_method = self._gpu_busy(idle)
        if self.alone is not None:
            stages.gpu.alone = self.alone
            if self.alone.sm_active is not None:
                # SM activity with the data on the device beats utilisation under stalls
                stages.gpu.busy_fraction = self.alone.sm_active
                stages.gpu.busy_method = f"{self.alone.sm_method}, data-free steps"
        ds = DatasetProfile(
            target=self.info.get("dataset", "dataset"),
            files=self.dataset_len if self.dataset_len is not None else samples,
            bytes=read_chars,
            sample_bytes_mean=mean_bytes,
            density=density_class(mean_bytes) if samples else "unknown",
        )
        rec = RunRecord(
            kind="watch",
            host=host,
            dataset=ds,
            stages=stages,
            measured_samples_per_s=steady / steady_wall if steady_wall > 0 else None,
            gpu_idle_fraction=idle,
            gpu_idle_method=idle_method,
            watch=WatchData(
                loader=dict(self.info),
                epochs=list(eps),
                workers=sorted(self.workers.values(), key=lambda w: w.worker),
                stall_ms=self.stall.to_record(),
                step_ms=self.step.to_record(),
                sample_ms=self.sample.to_record(),
                storage_metered=mean_bytes > 0,
                tracks=self._tracks(),
                device=self.device,
                gpu_timing=timing,
                gpu_step_ms=self.gpu_step.to_record(),
                gpu_track=self._gpu_track(),
            ),
            notes=notes,
            created=self.created,
            ioprobe_version=__version__,
            duration_s=time.perf_counter() - self._started,
        )
        if self._gpu is not None and self._origin:
            rec.gpu_series = gpu_sampler.series_record(self._gpu, self._origin / 1e9)
        return rec

    def _timing(self) -> str | None:
        tl = self.timeline
        if tl is not None:
            return tl.backend.name
        return "stopped after a device error" if self.timeline_error else None

    def _gpu_track(self) -> Track | None:
        tl = self.timeline
        if tl is None or not tl.backend.on_device_clock or not self._origin:
            return None
        return tl.series.to_record(
            f"{self.device or 'GPU'} ({tl.backend.name})", None, self._origin
        )

    def _tracks(self) -> list[Track]:
        if not self._origin:
            return []
        tracks = [self.main.to_record("main process", None, self._origin)]
        for w in sorted(self.worker_series):
            name = "loading in the main process" if w < 0 else f"worker {w}"
            tracks.append(self.worker_series[w].to_record(name, w, self._origin))
        return tracks

    def _stages(self, usable: int, mean_bytes: float) -> tuple[Stages, list[str]]:
        eps = self.epochs
        notes: list[str] = []
        samples = sum(e.samples for e in eps)
        workers = int(self.info.get("num_workers", "0"))
        lanes = max(workers, 1)  # samples being loaded at once
        stages = Stages(pcie=PcieStage(method="not measured: batches stay on the host"))
        if not samples:
            return stages, ["no batch was delivered"]
        cpu_per_sample = (
            sum(e.sample_cpu_seconds for e in eps) + sum(e.collate_seconds for e in eps)
        ) / samples
        # cores the workers can have: the affinity set less what the training loop itself
        # uses, shared fairly with whatever else the host was running
        ctx = cpu_context(eps, workers, usable)
        cores = loader_cores(lanes, usable, ctx, workers)
        if ctx.contention >= 0.25:
            notes.append(
                f"other processes kept about {ctx.contention:.1f} threads runnable: the "
                f"workers ran {ctx.share:.0%} of the time they were ready to"
            )
        stages.cpu = CpuStage(
            capacity_samples_per_s=cores / cpu_per_sample if cpu_per_sample > 0 else None,
            cpu_seconds_per_sample=cpu_per_sample,
            loader=self.info.get("dataset"),
            usable_cores=usable,
        )
        wall_per_sample = sum(e.sample_wall_seconds for e in eps) / samples
        runq = sum(e.runqueue_seconds for e in eps) / samples
        blocked = max(wall_per_sample - cpu_per_sample - runq, 0.0)
        # steady state: each worker's first opens pay for its session (an aiohttp loop, a
        # TLS handshake), a one-off the per-sample figure should not carry
        steady_n = sum(e.samples - e.startup_samples for e in _steady(eps))
        if steady_n:
            metered_s = sum(
                e.metered_read_seconds - e.startup_metered_read_seconds for e in _steady(eps)
            )
            open_s = sum(
                e.metered_open_seconds - e.startup_metered_open_seconds for e in _steady(eps)
            )
            metered_s, open_s = metered_s / steady_n, open_s / steady_n
        else:
            metered_s = sum(e.metered_read_seconds for e in eps) / samples
            open_s = sum(e.metered_open_seconds for e in eps) / samples
        storage = StorageStage()
        if metered_s > 0:
            # reads timed where they happen: no need to infer them from blocked time
            cap = lanes / metered_s
            storage.capacity_samples_per_s = cap
            storage.read_bytes_per_s = cap * mean_bytes if mean_bytes else None
            storage.basis = "metered reads through ioprobe.loaders.files"
            storage.request_latency_s = open_s
        elif blocked > 0.02 * wall_per_sample and blocked > 0:
            # each loading lane spends `blocked` seconds per sample waiting on reads
            cap = lanes / blocked
            storage.capacity_samples_per_s = cap
            storage.read_bytes_per_s = cap * mean_bytes if mean_bytes else None
            storage.unmetered_seconds = blocked * samples if mean_bytes == 0 else 0.0
            storage.basis = "blocked time in the workers (wall - CPU - run-queue wait)" + (
                "" if mean_bytes else "; no bytes in the I/O counters: unmetered (sockets?)"
            )
        else:
            storage.basis = "workers were never blocked on reads: storage is not limiting"
        stages.storage = storage
        gpu = self.gpu_stage(self.step, "wall clock: consumer time between batches")
        if gpu is not None:
            stages.gpu = gpu
        else:
            notes.append("only one batch per epoch: no step time to measure")
        self._device_stages(stages)
        return stages, notes

    def _device_stages(self, stages: Stages) -> None:
        """The PCIe stage from timed copies, and the GPU stage from the device's own clock
        where it has one: a step's device time, not the host's, which only launches it."""
        eps = self.epochs
        timing = self._timing()
        moved = [e for e in eps if e.h2d_bytes]
        if moved:
            n = sum(e.samples for e in moved)
            nbytes = sum(e.h2d_bytes for e in moved)
            secs = sum(e.h2d_seconds for e in moved)
            pinned = sum(e.h2d_pinned_bytes for e in moved)
            pinned_s = sum(e.h2d_pinned_seconds for e in moved)
            pageable_s = secs - pinned_s
            stages.pcie = PcieStage(
                capacity_samples_per_s=n / secs if secs > 0 else None,
                method=f"{timing}, around ioprobe.to_device: {pinned / nbytes:.0%} of bytes pinned",
                bytes_per_sample=nbytes / n if n else None,
                bytes_per_s=nbytes / secs if secs > 0 else None,
                pinned_fraction=pinned / nbytes,
                pinned_bytes_per_s=pinned / pinned_s if pinned and pinned_s > 0 else None,
                pageable_bytes_per_s=(
                    (nbytes - pinned) / pageable_s if nbytes > pinned and pageable_s > 0 else None
                ),
            )
        elif timing is not None and self.device is None:
            stages.pcie.method = (
                "not measured: batches were not moved through ioprobe.to_device or "
                "watch(..., device=)"
            )
        if self.timeline is not None and self.timeline.backend.on_device_clock:
            gpu = self.gpu_stage(
                self.gpu_step,
                f"{timing}: device time from a batch's arrival to the next request, copies excluded",
            )
            if gpu is not None:
                stages.gpu = gpu

    def gpu_stage(self, steps: Reservoir, method: str) -> GpuStage | None:
        """Batch size ÷ the median of ``steps`` (ns per batch); None without any step."""
        if not len(steps.values):
            return None
        median_step = statistics.median(steps.values) / 1e9
        eps = self.epochs
        bs = self.batch_size or (sum(e.samples for e in eps) / max(sum(e.batches for e in eps), 1))
        return GpuStage(
            capacity_samples_per_s=bs / median_step if median_step > 1e-6 else None,
            method=method,
            step_seconds=median_step,
            batch_size=self.batch_size,
        )


def _steady(eps: list[WatchEpoch]) -> list[WatchEpoch]:
    """The epochs that ran past their first round of batches (one per worker): made together
    and arriving bunched, that round is left out of steady-state rates. An epoch too short to
    finish it keeps ``startup_*`` at zero and counts whole."""
    return [e for e in eps if e.samples > e.startup_samples and e.seconds > e.startup_seconds]


class Watched:
    """What ``ioprobe.watch`` returns: the loader, plus ``.run`` (a RunRecord)."""

    def __init__(self, loader: Any, adapter: Any, device: Any = None) -> None:
        self._loader = loader
        self._adapter = adapter
        self._device = adapter.resolve_device(device) if device is not None else None
        self._inner = adapter.rebuild(loader)
        try:
            n: int | None = len(loader.dataset)
        except TypeError:
            n = None
        self._collector = WatchCollector(
            adapter.describe(loader),
            loader.batch_size,
            n,
            str(self._device) if self._device is not None else None,
        )
        self._run: RunRecord | None = None

    @property
    def run(self) -> RunRecord:
        """The record so far; complete once iteration has ended."""
        if self._run is None:
            self._run = finalize_watch(self._collector.stop())
        return self._run

    record = run

    def measure_gpu_alone(
        self, step: Callable[[Any], object], batch: Any, seconds: float = 1.0
    ) -> GpuAlone:
        """Time ``step(batch)`` with the batch already on the loader's device (see
        ``ioprobe.gpu_alone``) and keep it in this run's record: the GPU stage gets the
        data-free step rate and the share of the GPU a step fills, which the advice on
        sharing the GPU (MPS, MIG) needs."""
        gpu_alone = getattr(self._adapter, "gpu_alone", None)
        if gpu_alone is None:
            raise BadInputError("measure_gpu_alone: only for torch DataLoaders")
        alone: GpuAlone = gpu_alone(step, batch, self._device, seconds)
        self._collector.alone = alone
        self._run = None
        return alone

    def __iter__(self) -> Any:
        self._run = None
        self._collector.begin_epoch()
        epoch = self._collector.current

        def end(error: BaseException | None) -> None:
            # an iterator closed after a newer one began must not end the newer one's epoch
            if self._collector.current is epoch:
                self._collector.end_epoch(error)
            self._run = None

        # CUDA events when batches go to a CUDA device or the model is on one already
        self._collector.use_device(self._adapter.event_backend(self._device))
        return self._adapter.iterate(self._inner, self._collector, end, self._device)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __enter__(self) -> Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        self._run = None
        _ = self.run


def finalize_watch(rec: RunRecord) -> RunRecord:
    """The verdict and recommendations, once the record has something to model."""
    from ioprobe.analysis import finalize

    if rec.dataset.files and any(v for v in rec.stages.capacities().values()):
        return finalize(rec)
    return rec


def watch(loader: Any, device: Any = None) -> Any:
    """Wrap ``loader`` so that iterating it measures every stage: a PyTorch DataLoader, a DALI
    framework iterator (DALIGenericIterator, DALIClassificationIterator) or a DALI Pipeline
    driven with ``run()``. The wrapper behaves like what it wraps; ``.run`` (``.record`` for a
    Pipeline, whose ``run()`` stays DALI's) is the RunRecord.

    ``device`` (DataLoader only), e.g. ``"cuda"``: yield each batch already moved there, its
    host-to-device copy timed with CUDA events, as ``to_device`` does."""
    import sys

    if "torch" in sys.modules:
        from ioprobe.loaders import torch as adapter

        if adapter.is_torch_loader(loader):
            return Watched(loader, adapter, device)
    if "nvidia.dali" in sys.modules:
        from ioprobe.loaders import dali

        if dali.is_dali(loader):
            if device is not None:
                raise BadInputError(
                    "ioprobe.watch: device= is for DataLoaders; a DALI pipeline places its "
                    "outputs itself (device='gpu' or 'mixed' operators)"
                )
            return dali.watch(loader)
    raise BadInputError(
        f"ioprobe.watch: cannot watch a {type(loader).__qualname__} (expected a torch "
        "DataLoader, a DALI iterator or a DALI Pipeline)"
    )


def to_device(batch: Any, device: Any, non_blocking: bool | None = None) -> Any:
    """``batch`` (a tensor, or mappings, tuples and lists of them) moved to ``device``, like
    ``batch.to(device)``. Inside a watched loader's loop the copy is timed with CUDA events on
    the current stream, its bytes counted as pinned or pageable, and the record gets a PCIe
    stage. ``non_blocking`` defaults to True for tensors in pinned memory, False otherwise."""
    from ioprobe.loaders import torch as adapter

    dev = adapter.resolve_device(device)
    timeline = None
    if _ACTIVE:
        col = _ACTIVE[-1]
        timeline = col.timeline or col.use_device(adapter.event_backend(dev))
        # events on one CUDA device can't time a copy to another
        if timeline is not None and getattr(timeline.backend, "device", dev) != dev:
            timeline = None
    return adapter.move(batch, dev, non_blocking, timeline)

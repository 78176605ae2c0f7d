"""A watched loader's GPU side: the device's own timeline (CUDA events), the GPU's utilisation
sampled over the epochs, and the data-free steps of ``measure_gpu_alone``; what the record
says of the GPU's idle and busy shares, from them.

The collector holds one ``GpuSide`` and tells it when each epoch begins and ends (never per
batch); the loader's wrapper records its step boundaries and copies on ``timeline``.
"""

from __future__ import annotations

import time
import weakref
from bisect import bisect_left, bisect_right

from ioprobe.collect import gpu_sampler
from ioprobe.collect.gpu_events import EventBackend, GpuTimeline
from ioprobe.monitor.reservoir import Reservoir
from ioprobe.record import GpuAlone, GpuSeries, GpuStage, Track, WatchEpoch

GPU_SPANS_KEPT = 4_096  # epochs' spans the GPU's busy share is read over; merged past it


class GpuSide:
    """The device timeline, the utilisation sampler and the GPU-alone measurement of one
    watched loader."""

    def __init__(self, kept: int) -> None:
        # the device's own timeline (CUDA events), once something runs on a device
        self.timeline: GpuTimeline | None = None
        self.step = Reservoir(kept, 1e-6)  # the device's time per step, ns in, ms out
        self.error: str | None = None  # why the timeline stopped
        self.alone: GpuAlone | None = None  # Watched.measure_gpu_alone
        # GPU utilisation, sampled on its own thread while epochs run; the spans the stall
        # share is measured over, in the sampler's clock, pick the samples that count
        self._sampler: gpu_sampler.GpuBusySampler | None = None
        self._spans: list[tuple[float, float]] = []

    def use(self, backend: EventBackend | None) -> GpuTimeline | None:
        """Begin the device timeline with ``backend``'s events, unless one runs already."""
        if self.timeline is None and backend is not None:
            self.timeline = GpuTimeline(backend, self.step)
        return self.timeline

    @property
    def on_device_clock(self) -> bool:
        tl = self.timeline
        return tl is not None and tl.backend.on_device_clock

    @property
    def timing(self) -> str | None:
        """How the device's time was taken (the events' name), or why it stopped."""
        tl = self.timeline
        if tl is not None:
            return tl.backend.name
        return "stopped after a device error" if self.error else None

    def epoch_began(self) -> None:
        # started here, not per batch: from now on its thread does all the work
        if self._sampler is None:
            self._sampler = gpu_sampler.new_sampler()
            # stop polling once this is dropped even if .run is never read; the callback
            # holds the sampler only, so it does not keep this (or the collector) alive
            weakref.finalize(self, self._sampler.stop)
        self._sampler.start()

    def epoch_ended(self, ep: WatchEpoch, last_arrival_ns: int) -> None:
        """Add the device's figures to ``ep`` and keep its span for the busy share."""
        if self.timeline is not None:
            self._end_timeline(ep)
        sampler = self._sampler
        if ep.batches > 1 and sampler is not None and sampler.running:
            # first to last arrival, as in the stall share, moved from perf_counter to the
            # sampler's clock
            last = last_arrival_ns / 1e9 + sampler.clock() - time.perf_counter_ns() / 1e9
            self._spans.append((last - ep.seconds, last))
            if len(self._spans) > GPU_SPANS_KEPT:
                self._spans = merged_spans(self._spans)

    def _end_timeline(self, ep: WatchEpoch) -> None:
        tl = self.timeline
        assert tl is not None
        try:
            wait, busy, copy, copies, nbytes, pinned, pinned_ns = tl.end_epoch()
        except Exception as exc:  # a device error surfaces here: keep the host's figures
            self.error = f"{type(exc).__name__}: {exc}"
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

    def idle(self, epochs: list[WatchEpoch]) -> tuple[float | None, str]:
        """The GPU's idle share: on the device's own clock where batches went to a device,
        else the consumer's time blocked in next() on the host clock."""
        device = device_idle(epochs)
        if device is not None:
            return device, (
                f"{self.timing}: device time waiting for the next batch / device time "
                "from the first batch to the last"
            )
        wall = sum(e.seconds for e in epochs)
        idle = sum(e.stall_seconds for e in epochs) / wall if wall > 0 else None
        return idle, "wall clock: consumer time in next() / time between batch arrivals"

    def use_of(self, gpu: GpuStage, idle: float | None) -> None:
        """Set the GPU's busy share while it computed: SM activity with the data on the
        device (``measure_gpu_alone``) where there is one, it beats utilisation under
        stalls; else NVML utilisation sampled over the run; nothing without a GPU or NVML
        (normal, so not a note)."""
        gpu.busy_fraction, gpu.busy_method = self._busy(idle)
        alone = self.alone
        if alone is not None:
            gpu.alone = alone
            if alone.sm_active is not None:
                gpu.busy_fraction = alone.sm_active
                gpu.busy_method = f"{alone.sm_method}, data-free steps"

    def _busy(self, idle_fraction: float | None) -> tuple[float | None, str | None]:
        """Stop the sampler; the GPU's busy share while computing, and how it was measured."""
        sampler = self._sampler
        if sampler is None:
            return None, None
        sampler.stop()
        times, values = sampler.samples()
        chosen: list[float] = []
        for lo, hi in self._spans:
            chosen.extend(values[bisect_left(times, lo) : bisect_right(times, hi)])
        busy = gpu_sampler.busy_fraction(chosen, idle_fraction)
        if busy is None:
            return None, None
        hz = 1.0 / (sampler.interval_s * sampler.stride)
        of = f", mean of {sampler.gpus} GPUs" if sampler.gpus > 1 else ""
        return busy, f"nvml utilization, {len(chosen)} samples at {hz:.3g} Hz{of}, stalls excluded"

    def series(self, origin_ns: int) -> GpuSeries | None:
        """The utilisation samples as the record keeps them, from the run's time zero."""
        if self._sampler is None or not origin_ns:
            return None
        return gpu_sampler.series_record(self._sampler, origin_ns / 1e9)

    def track(self, device: str | None, origin_ns: int) -> Track | None:
        """The device's timeline as a trace track, where it ran on the device's clock."""
        tl = self.timeline
        if tl is None or not tl.backend.on_device_clock or not origin_ns:
            return None
        return tl.series.to_record(f"{device or 'GPU'} ({tl.backend.name})", None, origin_ns)


def merged_spans(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Neighbouring spans merged pairwise into the span from the first's start to the
    second's end: the gap between two epochs (the consumer's step after the last batch,
    iter()) then counts as computing, a sliver beside their batches'."""
    out = [(a[0], b[1]) for a, b in zip(spans[0::2], spans[1::2], strict=False)]
    if len(spans) % 2:
        out.append(spans[-1])
    return out


def device_time(epochs: list[WatchEpoch]) -> tuple[float, float]:
    """Over the ended epochs timed on the device's own clock: the seconds it waited for data,
    and its time from first batch to last (waiting, the steps and the copies)."""
    timed = [e for e in epochs if e.gpu_wait_seconds is not None]
    wait = sum(e.gpu_wait_seconds or 0.0 for e in timed)
    return wait, wait + sum((e.gpu_step_seconds or 0.0) + e.h2d_seconds for e in timed)


def device_idle(epochs: list[WatchEpoch]) -> float | None:
    """The share of the device's time from first batch to last that it waited for data, over
    the epochs timed on its own clock; None where none was."""
    wait, span = device_time(epochs)
    return wait / span if span > 0 else None

"""The GPU on its own: a training step's rate with its batch already on the device.

``measure_alone`` runs the user's step over and over on one batch that is already on the
device, so no data has to arrive: what it reaches is the step rate the GPU sustains by
itself. While it runs, an ``SmActivity`` reader says how much of the GPU those steps fill:
NVML's GPM "SM utilisation" (the share of streaming multiprocessors busy, on Hopper and
later) where the device supports it, else NVML's utilisation rate ("a kernel was running",
which a small model can hold at 100% while using a tenth of the SMs, and the record says
which one it is). A step that fills a small share of the SMs leaves room for other jobs on
the same GPU (MPS, or MIG slices), which the advice turns into a predicted gain.

Timing goes through the watch path's ``EventBackend`` (CUDA events on a GPU, the host clock
elsewhere) and SM activity through ``SmActivity``: the two seams tests replace.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from ioprobe.collect.gpu_events import EventBackend
from ioprobe.record import GpuAlone

WARMUP_STEPS = 3
SYNC_EVERY = 8  # steps queued ahead before the host waits: bounds the queue, not the rate


class SmActivity(Protocol):
    """How busy the device's SMs were between ``begin`` and ``end``."""

    method: str

    def begin(self) -> None: ...

    def end(self) -> float | None:
        """The fraction (0-1) over the interval; None when the reading failed."""
        ...


class GpmActivity:
    """NVML GPM's SM utilisation between two samples: the share of SMs that were busy."""

    method = "nvml gpm sm utilization (share of SMs busy)"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._samples: list[Any] = []

    def begin(self) -> None:
        n = self._nvml
        self._samples = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
        n.nvmlGpmSampleGet(self._handle, self._samples[0])

    def end(self) -> float | None:
        n = self._nvml
        try:
            n.nvmlGpmSampleGet(self._handle, self._samples[1])
            get = n.c_nvmlGpmMetricsGet_t()
            get.version = n.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = 1
            get.sample1, get.sample2 = self._samples
            get.metrics[0].metricId = n.NVML_GPM_METRIC_SM_UTIL
            n.nvmlGpmMetricsGet(get)
            if get.metrics[0].nvmlReturn != 0:
                return None
            return max(0.0, min(float(get.metrics[0].value) / 100.0, 1.0))
        except Exception:
            return None
        finally:
            for s in self._samples:
                with contextlib.suppress(Exception):
                    n.nvmlGpmSampleFree(s)
            self._samples = []


class UtilActivity:
    """NVML's utilisation rate: the share of the last sample period a kernel was running."""

    method = "nvml utilization (a kernel was running; not the share of SMs)"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    def begin(self) -> None:
        return None

    def end(self) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu) / 100.0
        except Exception:
            return None


def open_activity(cuda_index: int, nvml: Any = None) -> SmActivity | str:
    """The best SM activity reader for CUDA device ``cuda_index``, or why there is none."""
    from ioprobe.collect.gpu_sampler import cuda_handle

    try:
        if nvml is None:
            nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception as exc:
        return f"no NVML ({type(exc).__name__})"
    try:
        handle = cuda_handle(nvml, cuda_index)
        if handle is None:
            return "the CUDA device has no NVML counterpart"
    except Exception as exc:
        return f"NVML could not open the device ({type(exc).__name__})"
    try:
        if nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return GpmActivity(nvml, handle)
    except Exception:
        pass  # drivers before GPM, GPUs before Hopper: fall back to the utilisation rate
    return UtilActivity(nvml, handle)


def measure_alone(
    step: Callable[[Any], object],
    batch: Any,
    batch_size: int,
    backend: EventBackend,
    activity: SmActivity | str | None,
    seconds: float = 1.0,
    max_steps: int = 10_000,
) -> GpuAlone:
    """Run ``step(batch)`` for about ``seconds`` after a warm-up; the device's step time.

    The steps are timed between two events on the device's clock, so host gaps between
    launches count only if they leave the device idle (then they are part of what this
    step costs the GPU). The host waits every ``SYNC_EVERY`` steps so it never queues
    thousands of steps ahead and overshoots the time asked for.
    """
    for _ in range(WARMUP_STEPS):
        step(batch)
    sync = backend.new_event()
    backend.record(sync)
    backend.wait(sync)
    reader = None if isinstance(activity, str) else activity  # a str says why there is none
    if reader is not None:
        reader.begin()
    steps, first, last = _timed_steps(step, batch, backend, sync, seconds, max_steps)
    busy = reader.end() if reader is not None else None
    step_s = backend.elapsed_ns(first, last) / 1e9 / steps
    return GpuAlone(
        samples_per_s=batch_size / step_s if step_s > 0 else None,
        step_seconds=step_s,
        steps=steps,
        batch_size=batch_size,
        timing=backend.name,
        sm_active=busy,
        sm_method=reader.method if reader is not None else None,
        note=activity if isinstance(activity, str) else None,
    )


def _timed_steps(
    step: Callable[[Any], object],
    batch: Any,
    backend: EventBackend,
    sync: Any,
    seconds: float,
    max_steps: int,
) -> tuple[int, Any, Any]:
    """Steps between two events until ``seconds`` pass or ``max_steps`` ran: (steps, first
    event, last event), the last one complete."""
    first, last = backend.new_event(), backend.new_event()
    backend.record(first)
    steps, deadline = 0, time.perf_counter() + seconds
    while steps < max_steps:
        step(batch)
        steps += 1
        if steps % SYNC_EVERY == 0:
            backend.record(sync)
            backend.wait(sync)
            if time.perf_counter() >= deadline:
                break
    backend.record(last)
    backend.wait(last)
    return steps, first, last


__all__ = ["GpmActivity", "SmActivity", "UtilActivity", "measure_alone", "open_activity"]

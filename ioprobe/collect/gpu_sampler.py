"""How busy the GPU is while the training loop computes, sampled from NVML in the background.

``GpuBusySampler`` polls ``nvmlDeviceGetUtilizationRates`` on a daemon thread, at a fixed
interval, into a preallocated bounded buffer; the training loop's own thread does nothing per
batch. ``busy_fraction`` turns the samples and the record's stall share into "busy while data
was ready". A machine without a GPU, driver or nvidia-ml-py is normal: the sampler is then
simply unavailable (``start()`` returns False and ``status`` says why), never an error.

``new_sampler`` is what ``ioprobe.watcher`` calls to get one; tests replace it to inject a
stand-in NVML.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ioprobe.collect.quiet import start_quiet
from ioprobe.record import GpuSeries

MAX_SAMPLES = 100_000  # 2.8 hours at 10 Hz before the buffer starts thinning itself
MIN_SAMPLES = 5  # fewer than this is one or two NVML sample periods: not an average
MAX_IDLE_FRACTION = 0.95  # above this the compute share is too small to divide by
# consecutive polls where no device answered before the thread gives up (MIG, vGPU, a driver
# that reports "Not Supported"): polling on would only spin
MAX_FAILED_POLLS = 50

# Held by the sampler thread around every NVML call, and taken by the fork hooks below, so a
# fork (DataLoader workers) never happens while NVML or pynvml hold a lock internally: a child
# would inherit it held forever. The child never gets the thread itself; fork copies only the
# thread that called it.
_nvml_lock = threading.Lock()
_held_for_fork = [False]


def _before_fork() -> None:
    # bounded: a hung driver call must not hang the fork as well
    _held_for_fork[0] = _nvml_lock.acquire(timeout=1.0)


def _after_fork_in_parent() -> None:
    if _held_for_fork[0]:
        _held_for_fork[0] = False
        _nvml_lock.release()


def _after_fork_in_child() -> None:
    global _nvml_lock
    _nvml_lock = threading.Lock()
    _held_for_fork[0] = False


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def _halve(times: array[float], columns: Sequence[array[float]], capacity: int) -> int:
    """Keep every other row of a full buffer in its first half; the rows now in use."""
    half = capacity // 2
    times[:half] = times[0:capacity:2]
    for col in columns:
        col[:half] = col[0:capacity:2]
    return half


class SampleBuffer:
    """(timestamp, value) pairs in two preallocated arrays of ``capacity`` slots.

    When full it keeps every other sample and from then on stores every other one offered
    (the stride doubles), so a run of any length is covered end to end at an even spacing,
    in bounded memory.
    """

    __slots__ = ("capacity", "n", "seen", "stride", "times", "values")

    def __init__(self, capacity: int = MAX_SAMPLES) -> None:
        # even, so that halving leaves the next stored sample on the new stride
        self.capacity = max(2, capacity + capacity % 2)
        self.times = array("d", bytes(8 * self.capacity))
        self.values = array("f", bytes(4 * self.capacity))
        self.n = 0  # slots in use
        self.seen = 0  # samples offered
        self.stride = 1  # one in `stride` offered samples is stored

    def add(self, t: float, value: float) -> None:
        i = self.seen
        self.seen += 1
        if i % self.stride:
            return
        if self.n == self.capacity:
            self.n = _halve(self.times, [self.values], self.capacity)
            self.stride *= 2
        self.times[self.n] = t
        self.values[self.n] = value
        self.n += 1

    def items(self) -> tuple[array[float], array[float]]:
        """Copies of the timestamps and values stored so far, oldest first."""
        return self.times[: self.n], self.values[: self.n]


SERIES_COLUMNS = (
    "sm_util",
    "mem_util",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "power_w",
    "sm_clock_mhz",
    "mem_used_bytes",
)
# a reading that never answered in this many polls is not asked again (MIG slices, vGPUs
# and older boards answer "Not Supported" to some of these every time)
MAX_READING_FAILS = 5
MAX_COSTS = 4096  # polls whose cost is kept for the median


class SeriesBuffer:
    """Rows of NVML readings (a timestamp and one float per column, NaN where the reading
    did not answer) in preallocated arrays, thinned like ``SampleBuffer`` once full."""

    __slots__ = ("capacity", "columns", "n", "seen", "stride", "times")

    def __init__(self, capacity: int = MAX_SAMPLES, width: int = len(SERIES_COLUMNS)) -> None:
        self.capacity = max(2, capacity + capacity % 2)
        self.times = array("d", bytes(8 * self.capacity))
        self.columns = [array("d", bytes(8 * self.capacity)) for _ in range(width)]
        self.n = 0
        self.seen = 0
        self.stride = 1

    def add(self, t: float, row: Sequence[float]) -> None:
        i = self.seen
        self.seen += 1
        if i % self.stride:
            return
        if self.n == self.capacity:
            self.n = _halve(self.times, self.columns, self.capacity)
            self.stride *= 2
        self.times[self.n] = t
        for col, value in zip(self.columns, row, strict=True):
            col[self.n] = value
        self.n += 1

    @property
    def dropped(self) -> int:
        """Rows offered but not kept: the price of a bounded buffer on a long run."""
        return self.seen - self.n


class SeriesReader:
    """One row of NVML readings for one device, reading by reading, each allowed to fail.

    Utilisation comes from the sampler's own ``nvmlDeviceGetUtilizationRates`` answer (one
    call gives both the SM and the memory figure). PCIe throughput is NVML's KB/s over its
    own 20 ms window, converted to bytes/s; RX is what the GPU receives (host to device).
    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.fails = [0] * len(SERIES_COLUMNS)
        self.answered = [False] * len(SERIES_COLUMNS)
        self.costs = array("d")
        self._rx = getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1)
        self._tx = getattr(nvml, "NVML_PCIE_UTIL_TX_BYTES", 0)
        self._sm_clock = getattr(nvml, "NVML_CLOCK_SM", 1)

    def _value(self, k: int, handle: Any, util: Any) -> float:
        nvml = self.nvml
        if k == 0:
            return float(util.gpu)
        if k == 1:
            return float(util.memory)
        if k == 2:
            return float(nvml.nvmlDeviceGetPcieThroughput(handle, self._rx)) * 1024.0
        if k == 3:
            return float(nvml.nvmlDeviceGetPcieThroughput(handle, self._tx)) * 1024.0
        if k == 4:
            return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0
        if k == 5:
            return float(nvml.nvmlDeviceGetClockInfo(handle, self._sm_clock))
        return float(nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def read(self, handle: Any, util: Any) -> list[float]:
        row = []
        for k in range(len(SERIES_COLUMNS)):
            if not self.answered[k] and self.fails[k] >= MAX_READING_FAILS:
                row.append(math.nan)
                continue
            try:
                if util is None and k < 2:
                    raise LookupError("no utilisation this poll")
                row.append(self._value(k, handle, util))
                self.answered[k] = True
                self.fails[k] = 0
            except Exception:  # NotSupported, a driver hiccup: this reading only
                row.append(math.nan)
                self.fails[k] += 1
        return row


def visible_indices(count: int, env: str | None) -> list[int]:
    """The NVML device indices this process can use, from ``CUDA_VISIBLE_DEVICES``.

    Follows CUDA's reading of a list of integers: it stops at the first index that is negative
    or out of range, and an empty value hides every GPU. Anything else (UUIDs, MIG names) is
    not mapped here: all devices. NVML numbers devices in PCI bus order, CUDA by default
    fastest first, so on a machine with mixed GPU models the mapping can pick the wrong one
    unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set, as it usually is on such machines.
    """
    if env is None:
        return list(range(count))
    if not env.strip():
        return []
    chosen: list[int] = []
    for entry in env.split(","):
        try:
            index = int(entry.strip())
        except ValueError:
            return list(range(count))
        if not 0 <= index < count:
            break
        if index not in chosen:
            chosen.append(index)
    return chosen


def cuda_handle(nvml: Any, cuda_index: int) -> Any | None:
    """NVML's handle for the GPU that CUDA calls ``cuda_index`` (through
    ``CUDA_VISIBLE_DEVICES``), or None when that device is not visible. NVML must be
    initialised; its errors propagate."""
    indices = visible_indices(nvml.nvmlDeviceGetCount(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if cuda_index >= len(indices):
        return None
    return nvml.nvmlDeviceGetHandleByIndex(indices[cuda_index])


def busy_fraction(
    utilization_percent: Sequence[float], idle_fraction: float | None
) -> float | None:
    """The share of time the GPU ran kernels while the training loop was computing, 0 to 1.

    NVML's ``utilization.gpu`` is the percent of its last sample period (1/6 s to 1 s,
    depending on the product) in which at least one kernel was executing. Its mean over the
    watched span is the GPU's busy share of *all* that time. But for ``idle_fraction`` of the
    time the loop sat in ``next()`` waiting for data, and the GPU, having nothing queued, is
    taken to be idle then; that lost time is already reported as the data stall. Dividing by
    the share left, ``1 - idle_fraction``, gives how busy the GPU is when data is ready: the
    model's own use of the GPU, and the headroom that more jobs per GPU (MPS, MIG) could take.

    Where it is wrong: "a kernel was running" is not SM occupancy, so one small kernel running
    all the time reads 100%; a high value does not prove the GPU is full, a low one does prove
    it idles. Kernels still queued when the loop starts waiting keep running into the stall,
    which is credited to compute and can push the quotient above 1 (hence the clip). Other
    processes' kernels on the same GPU count too, and with several visible GPUs the samples
    are their mean.

    ``None`` when there are fewer than ``MIN_SAMPLES`` samples, when the idle share is unknown,
    or when it is ``MAX_IDLE_FRACTION`` or more (too little compute time to divide by).
    """
    n = len(utilization_percent)
    if n < MIN_SAMPLES or idle_fraction is None or not math.isfinite(idle_fraction):
        return None
    idle = max(idle_fraction, 0.0)
    if idle >= MAX_IDLE_FRACTION:
        return None
    mean = sum(utilization_percent) / n / 100.0
    return min(max(mean / (1.0 - idle), 0.0), 1.0)


def _utilisation(nvml: Any, handles: list[Any]) -> tuple[float, int, Any]:
    """The sum of utilisation percents over the GPUs that answered, how many did, and the
    first GPU's answer (None if it did not)."""
    total = 0.0
    answered = 0
    first: Any = None
    for i, handle in enumerate(handles):
        # anything a binding may raise: a traceback from the sampler thread would land in
        # the middle of the user's training output
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            total += float(util.gpu)
            answered += 1
            if i == 0:
                first = util
        except Exception:
            pass
    return total, answered, first


def _sample(
    nvml: Any, handles: list[Any], reader: SeriesReader | None, began: float
) -> tuple[float, int, list[float] | None]:
    """One poll: utilisation as ``_utilisation`` gives it and the first GPU's series row,
    None when there is no series or none of its readings answered. The poll's cost is kept
    for ``poll_seconds``."""
    row: list[float] | None = None
    with _nvml_lock:
        total, answered, first = _utilisation(nvml, handles)
        if reader is not None:
            row = reader.read(handles[0], first)
    if reader is not None and len(reader.costs) < MAX_COSTS:
        reader.costs.append(time.perf_counter() - began)
    # a MIG-mode or virtual GPU may refuse utilisation yet give power, clocks, memory and
    # PCIe: the series goes on without the busy figure
    if row is not None and all(map(math.isnan, row)):
        row = None
    return total, answered, row


class GpuBusySampler:
    """Polls NVML's GPU utilisation every ``interval_s`` on a daemon thread.

    ``nvml`` is the ``pynvml`` module, imported by ``start()`` when not given; tests pass a
    stand-in with the same function names and an ``NVMLError`` class. Timestamps come from
    ``clock`` (seconds). ``start()`` and ``stop()`` may alternate: samples accumulate across
    them in one buffer. Once NVML has proved unavailable, later ``start()`` calls return
    False at once; a driver does not appear mid-run.
    """

    def __init__(
        self,
        nvml: Any | None = None,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        capacity: int = MAX_SAMPLES,
        series: bool = True,
    ) -> None:
        self.nvml = nvml
        # the full NVML series (SM and memory utilisation, PCIe, power, clock, memory) of
        # the first visible GPU, the one a single-GPU job uses; the busy figure still
        # averages every visible GPU
        self.want_series = series
        self._series: SeriesBuffer | None = None
        self._reader: SeriesReader | None = None
        self.thread_cpu_s = 0.0  # the sampler thread's own CPU time, read as it exits
        self.interval_s = interval_s
        self.clock = clock
        self.capacity = capacity
        self.status = "not started"
        self.devices: list[int] = []  # NVML indices this process can see
        self.gpus = 0  # of those, the ones sampled
        self._unavailable = False
        self._buffer: SampleBuffer | None = None
        self._buffer_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._owner_pid = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._owner_pid == os.getpid()

    @property
    def stride(self) -> int:
        """One in this many polls is kept (1 until the buffer first fills)."""
        return self._buffer.stride if self._buffer is not None else 1

    def start(self) -> bool:
        """Begin sampling; False, with the reason in ``status``, when NVML or a GPU is missing."""
        if self.running:
            return True
        if self._unavailable:
            return False
        nvml = self._import_nvml()
        handles = self._open_devices(nvml) if nvml is not None else None
        if handles is None:
            return False
        self._launch(nvml, handles)
        return True

    def _import_nvml(self) -> Any | None:
        """The NVML binding given or ``pynvml``; None, having given up, without either."""
        if self.nvml is None:
            try:
                import pynvml
            except ImportError:
                self._give_up("none: nvidia-ml-py not installed")
                return None
            self.nvml = pynvml
        return self.nvml

    def _open_devices(self, nvml: Any) -> list[Any] | None:
        """Initialise NVML and open the GPUs this process can see; None, having given up
        (and shut NVML down again), when NVML fails or no GPU opens."""
        nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except Exception as exc:  # a missing library or driver surfaces as assorted errors
            self._give_up(f"none: NVML not available ({_reason(exc)})")
            return None
        try:
            self.devices = visible_indices(
                int(nvml.nvmlDeviceGetCount()), os.environ.get("CUDA_VISIBLE_DEVICES")
            )
            handles = []
            for index in self.devices:
                with contextlib.suppress(nvml_error):  # a GPU this process may not open
                    handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
        except Exception as exc:
            self._shutdown(nvml)
            self._give_up(f"none: NVML not available ({_reason(exc)})")
            return None
        if not handles:
            self._shutdown(nvml)
            self._give_up("none: no visible GPU")
            return None
        return handles

    def _launch(self, nvml: Any, handles: list[Any]) -> None:
        """Start the polling thread; buffers made by an earlier start() are kept."""
        if self._buffer is None:
            self._buffer = SampleBuffer(self.capacity)
        if self.want_series and self._series is None:
            self._series = SeriesBuffer(self.capacity)
            self._reader = SeriesReader(nvml)
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
            target=self._poll,
            args=(nvml, handles, self._stop_event, self._buffer),
            name="ioprobe-gpu-sampler",
            daemon=True,  # never what keeps a finished training script alive
        )
        self.gpus = len(handles)
        self._owner_pid = os.getpid()
        # before the thread runs: it may write its own status if the GPUs refuse to answer
        self.status = f"nvml: sampling {len(handles)} GPU{'s' if len(handles) != 1 else ''}"
        start_quiet(self._thread)

    def stop(self) -> None:
        """Stop and join the thread and shut NVML down; the samples stay readable."""
        thread, self._thread = self._thread, None
        if thread is None or self._owner_pid != os.getpid():
            # a forked child's copy: the thread and the NVML session belong to the parent
            return
        self._stop_event.set()
        # the thread wakes at once from its wait; only a hung driver call keeps it longer
        thread.join(timeout=5.0)
        if not thread.is_alive():
            self._shutdown(self.nvml)

    def samples(self) -> tuple[array[float], array[float]]:
        """Timestamps (``clock`` seconds) and mean utilisation percent, oldest first."""
        with self._buffer_lock:
            if self._buffer is None:
                return array("d"), array("f")
            return self._buffer.items()

    def _poll(
        self,
        nvml: Any,
        handles: list[Any],
        stop: threading.Event,
        buffer: SampleBuffer,
    ) -> None:
        failed = 0
        series, reader = self._series, self._reader
        try:
            for began in self._ticks(stop):
                total, answered, row = _sample(nvml, handles, reader, began)
                if not answered and row is None:
                    failed += 1
                    if failed >= MAX_FAILED_POLLS:
                        self.status = "none: NVML gives no utilisation for these GPUs"
                        return
                    continue
                failed = 0
                if stop.is_set():
                    return  # stop() may already be reading the buffer
                with self._buffer_lock:
                    t = self.clock()
                    if answered:
                        buffer.add(t, total / answered)
                    if series is not None and row is not None:
                        series.add(t, row)
        finally:
            self.thread_cpu_s = time.thread_time()

    def _ticks(self, stop: threading.Event) -> Iterator[float]:
        """The perf_counter time of each poll, every ``interval_s``, until ``stop`` is set.

        The schedule is fixed: a poll takes tens of ms (NVML's PCIe throughput call measures
        over 20 ms each), and waiting a full interval after it would lower the rate.
        """
        next_at = time.perf_counter() + self.interval_s
        while not stop.wait(max(next_at - time.perf_counter(), 0.0)):
            next_at += self.interval_s
            began = time.perf_counter()
            if began > next_at:
                next_at = began + self.interval_s  # fell behind: no burst to catch up
            yield began

    def series_columns(self, origin: float) -> tuple[dict[str, list[float | None]], int]:
        """The NVML series as record columns, ``t`` in seconds from ``origin`` (a ``clock``
        time), None where a reading did not answer; and the rows dropped by thinning.
        Readings that never answered are left out."""
        with self._buffer_lock:
            buf, reader = self._series, self._reader
            if buf is None or reader is None or buf.n == 0:
                return {}, 0
            n = buf.n
            out: dict[str, list[float | None]] = {
                "t": [round(x - origin, 6) for x in buf.times[:n]]
            }
            for name, col, ok in zip(SERIES_COLUMNS, buf.columns, reader.answered, strict=True):
                if ok:
                    out[name] = [None if math.isnan(v) else v for v in col[:n]]
            return out, buf.dropped

    def unanswered(self) -> list[str]:
        """The series' readings the device never gave (left out of the columns)."""
        reader = self._reader
        if reader is None:
            return []
        return [n for n, ok in zip(SERIES_COLUMNS, reader.answered, strict=True) if not ok]

    def poll_seconds(self) -> float | None:
        """The median host time of one poll, NVML calls included: the sampler's cost."""
        reader = self._reader
        if reader is None or not reader.costs:
            return None
        return float(sorted(reader.costs)[len(reader.costs) // 2])

    def _give_up(self, reason: str) -> bool:
        self._unavailable = True
        self.status = reason
        return False

    @staticmethod
    def _shutdown(nvml: Any) -> None:
        # nothing useful can be done if shutting NVML down fails
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def series_record(sampler: GpuBusySampler, origin: float) -> GpuSeries | None:
    """The sampler's NVML series for the record, times from ``origin`` (the run's start on
    ``time.perf_counter``'s clock).

    None where no series was attempted: no nvidia-ml-py, no driver, no visible GPU, or a
    sampler made without one. Where a GPU was sampled but gave no row (a run shorter than one
    poll, a device that refused every reading) the series is there with no columns and its
    ``status`` says why, so a report can tell "not sampled" from "sampled, nothing came".
    """
    if not sampler.want_series or sampler.gpus == 0:
        return None
    offset = sampler.clock() - time.perf_counter()  # the same instant on both clocks
    columns, dropped = sampler.series_columns(origin + offset)
    index = sampler.devices[0] if sampler.devices else 0
    rate = f"{1 / sampler.interval_s:.3g} Hz"
    if not columns:
        why = sampler.status if sampler.status.startswith("none: ") else "no reading in the run"
        status = f"nvml: GPU {index} at {rate}, nothing recorded ({why.removeprefix('none: ')})"
    else:
        refused = sampler.unanswered()
        status = f"nvml: GPU {index} at {rate}" + (
            f"; not given by this device: {', '.join(refused)}" if refused else ""
        )
    return GpuSeries(
        device_index=index,
        interval_s=sampler.interval_s,
        t0_host=0.0,
        columns=columns,
        poll_seconds=sampler.poll_seconds(),
        rows_dropped=dropped,
        status=status,
    )


RATE_ENV = "IOPROBE_NVML_HZ"  # the series' rate, 10 to 20 polls a second
DEFAULT_HZ, MIN_HZ, MAX_HZ = 10.0, 10.0, 20.0


def interval_from_env(value: str | None) -> float:
    """Seconds between polls for a rate given as text (``IOPROBE_NVML_HZ``), clamped to
    ``MIN_HZ``..``MAX_HZ``; unset or unreadable is ``DEFAULT_HZ``. Below 10 Hz the series
    misses the short stalls it is for; above 20 Hz a poll (tens of ms on a GPU, two PCIe
    throughput reads of 20 ms each) would no longer fit in its interval."""
    try:
        hz = float(value) if value and value.strip() else DEFAULT_HZ
    except ValueError:
        hz = DEFAULT_HZ
    if not math.isfinite(hz):
        hz = DEFAULT_HZ
    return 1.0 / min(max(hz, MIN_HZ), MAX_HZ)


def new_sampler() -> GpuBusySampler:
    """The sampler ``ioprobe.watch`` and the probe use: real NVML, 10 Hz unless
    ``IOPROBE_NVML_HZ`` says otherwise. Tests replace this function."""
    return GpuBusySampler(interval_s=interval_from_env(os.environ.get(RATE_ENV)))


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


__all__ = [
    "SERIES_COLUMNS",
    "GpuBusySampler",
    "SampleBuffer",
    "SeriesBuffer",
    "SeriesReader",
    "busy_fraction",
    "cuda_handle",
    "interval_from_env",
    "new_sampler",
    "series_record",
    "visible_indices",
]

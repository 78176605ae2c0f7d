"""The GPU busy sampler against a stand-in NVML, and ioprobe.watch filling busy_fraction."""

from __future__ import annotations

import itertools
import os
import threading
import time
import types
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.collect import gpu_sampler
from ioprobe.collect.gpu_sampler import (
    GpuBusySampler,
    SampleBuffer,
    busy_fraction,
    visible_indices,
)

# a stall's share of the time is measured: run alone (tests/conftest.py)
pytestmark = pytest.mark.serial


class _NVMLError(Exception):
    pass


class _FakeNvml:
    """Devices whose utilisation percent is whatever ``util[index]`` holds at the moment."""

    NVMLError = _NVMLError

    def __init__(self, util: list[float]) -> None:
        self.util = util
        self.init_calls = 0
        self.shutdown_calls = 0
        self.polled: list[int] = []

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.util)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        self.polled.append(handle)
        return types.SimpleNamespace(gpu=self.util[handle], memory=0)


class _FailingNvml(_FakeNvml):
    def nvmlInit(self) -> None:
        raise _NVMLError("NVML Shared Library Not Found")


class _UnsupportedNvml(_FakeNvml):
    """A GPU that is there but reports no utilisation (MIG, some vGPUs)."""

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        raise _NVMLError("Not Supported")


class _StepClock:
    """Advances one second per reading, so timestamps are 1, 2, 3..."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def _wait_for(pred: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ioprobe-gpu-sampler"]


@pytest.fixture(autouse=True)
def _all_devices_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# -- the sampler ---------------------------------------------------------------------------


def test_samples_at_the_interval_and_averages_over_devices() -> None:
    nvml = _FakeNvml([20.0, 60.0])
    clock = _StepClock()
    sampler = GpuBusySampler(nvml, interval_s=0.005, clock=clock)
    assert sampler.start()
    assert sampler.status == "nvml: sampling 2 GPUs"
    assert sampler.running and _sampler_threads()[0].daemon
    _wait_for(lambda: len(sampler.samples()[0]) >= 10)
    t0 = time.monotonic()
    n0 = len(sampler.samples()[0])
    time.sleep(0.2)
    rate = (len(sampler.samples()[0]) - n0) / (time.monotonic() - t0)
    sampler.stop()
    assert not sampler.running and not _sampler_threads()
    assert nvml.init_calls == 1 and nvml.shutdown_calls == 1
    times, values = sampler.samples()
    assert set(values) == {40.0}
    assert list(times) == [float(i) for i in range(1, len(times) + 1)]  # one clock read each
    assert set(nvml.polled) == {0, 1}
    # 200/s at most; a loaded machine can be slower, never faster
    assert 20 < rate <= 1 / 0.005 * 1.1
    sampler.stop()  # a second stop is harmless
    assert nvml.shutdown_calls == 1


def test_stop_and_start_again_accumulate_in_one_buffer() -> None:
    nvml = _FakeNvml([50.0])
    sampler = GpuBusySampler(nvml, interval_s=0.002)
    assert sampler.start() and sampler.start()  # already running: no second thread
    assert len(_sampler_threads()) == 1
    _wait_for(lambda: len(sampler.samples()[0]) >= 3)
    sampler.stop()
    n = len(sampler.samples()[0])
    assert sampler.start()
    _wait_for(lambda: len(sampler.samples()[0]) >= n + 3)
    sampler.stop()
    assert nvml.init_calls == nvml.shutdown_calls == 2
    times = sampler.samples()[0]
    assert list(times) == sorted(times)


def test_cuda_visible_devices_picks_device_1_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    nvml = _FakeNvml([10.0, 90.0, 30.0])
    sampler = GpuBusySampler(nvml, interval_s=0.002)
    assert sampler.start()
    assert sampler.devices == [1] and sampler.gpus == 1
    assert sampler.status == "nvml: sampling 1 GPU"
    _wait_for(lambda: len(sampler.samples()[0]) >= 5)
    sampler.stop()
    assert set(nvml.polled) == {1}
    assert set(sampler.samples()[1]) == {90.0}


@pytest.mark.parametrize(
    ("env", "count", "expected"),
    [
        (None, 3, [0, 1, 2]),
        ("1", 3, [1]),
        (" 2, 0 ", 3, [2, 0]),
        ("0,0", 2, [0]),
        ("0,5,1", 3, [0]),  # CUDA stops at the first index out of range
        ("1,-1,0", 3, [1]),
        ("", 3, []),
        ("GPU-8f3c2a1e-0000-0000-0000-000000000000", 2, [0, 1]),  # UUIDs: not mapped, all
        ("MIG-abc", 1, [0]),
    ],
)
def test_visible_indices(env: str | None, count: int, expected: list[int]) -> None:
    assert visible_indices(count, env) == expected


def test_nvml_init_failing_makes_the_sampler_unavailable_without_a_thread() -> None:
    nvml = _FailingNvml([50.0])
    sampler = GpuBusySampler(nvml, interval_s=0.002)
    assert sampler.start() is False
    assert sampler.status == "none: NVML not available (NVML Shared Library Not Found)"
    assert not sampler.running and not _sampler_threads()
    assert sampler.start() is False  # not retried
    sampler.stop()
    assert nvml.shutdown_calls == 0
    assert len(sampler.samples()[0]) == 0


def test_no_visible_gpu_is_unavailable_and_shuts_nvml_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nvml = _FakeNvml([50.0])
    sampler = GpuBusySampler(nvml)
    assert sampler.start() is False
    assert sampler.status == "none: no visible GPU"
    assert nvml.shutdown_calls == 1 and not _sampler_threads()


def test_real_nvml_on_this_machine_never_raises() -> None:
    sampler = GpuBusySampler(interval_s=0.01)
    started = sampler.start()
    assert started == sampler.status.startswith("nvml: ")
    sampler.stop()
    assert not _sampler_threads()


def test_a_gpu_without_utilisation_stops_the_thread_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpu_sampler, "MAX_FAILED_POLLS", 3)
    sampler = GpuBusySampler(_UnsupportedNvml([0.0]), interval_s=0.001)
    assert sampler.start()
    _wait_for(lambda: not _sampler_threads())
    assert sampler.status == "none: NVML gives no utilisation for these GPUs"
    sampler.stop()
    assert len(sampler.samples()[0]) == 0


# -- the buffer ----------------------------------------------------------------------------


def test_buffer_stays_bounded_and_evenly_spaced_when_run_long() -> None:
    buf = SampleBuffer(capacity=1000)
    before = (buf.times.buffer_info(), buf.values.buffer_info())
    for i in range(1_000_000):
        buf.add(float(i), float(i % 100))
    # the same two arrays, never grown: memory fixed at creation
    assert (buf.times.buffer_info(), buf.values.buffer_info()) == before
    assert buf.seen == 1_000_000
    assert 500 <= buf.n <= 1000
    times, values = buf.items()
    assert len(times) == len(values) == buf.n
    gaps = {b - a for a, b in itertools.pairwise(times)}
    assert gaps == {float(buf.stride)}  # one spacing from the first sample to the last
    assert times[0] == 0.0 and times[-1] > 1_000_000 - 2 * buf.stride
    assert values[5] == times[5] % 100


def test_buffer_odd_capacity_is_rounded_up() -> None:
    buf = SampleBuffer(capacity=5)
    for i in range(100):
        buf.add(float(i), 1.0)
    times = buf.items()[0]
    assert buf.capacity == 6
    assert len({b - a for a, b in itertools.pairwise(times)}) == 1


# -- the busy arithmetic -------------------------------------------------------------------


def test_busy_fraction_excludes_the_stalls() -> None:
    assert busy_fraction([40.0] * 10, 0.5) == pytest.approx(0.8)
    assert busy_fraction([30.0, 50.0] * 5, 0.0) == pytest.approx(0.4)
    assert busy_fraction([0.0] * 10, 0.3) == 0.0


def test_busy_fraction_clips_at_1() -> None:
    # kernels queued before a stall keep running into it: more than 100% of compute time
    assert busy_fraction([90.0] * 10, 0.5) == 1.0
    assert busy_fraction([40.0] * 10, -0.01) == pytest.approx(0.4)


def test_busy_fraction_needs_samples_and_compute_time() -> None:
    assert busy_fraction([40.0] * 4, 0.5) is None
    assert busy_fraction([], 0.0) is None
    assert busy_fraction([40.0] * 10, 0.95) is None
    assert busy_fraction([40.0] * 10, None) is None
    assert busy_fraction([40.0] * 10, float("nan")) is None
    assert busy_fraction([40.0] * 5, 0.94) == 1.0


# -- through ioprobe.watch -----------------------------------------------------------------


class _SleepDataset(Dataset[torch.Tensor]):
    """Each sample takes ``seconds`` of wall time: loading in the main process is the stall."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n = n
        self.seconds = seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.seconds)
        return torch.tensor([i])


def _use_fake(monkeypatch: pytest.MonkeyPatch, nvml: _FakeNvml) -> list[GpuBusySampler]:
    made: list[GpuBusySampler] = []

    def new_sampler() -> GpuBusySampler:
        made.append(GpuBusySampler(nvml, interval_s=0.002))
        return made[-1]

    monkeypatch.setattr(gpu_sampler, "new_sampler", new_sampler)
    return made


def test_watch_fills_busy_fraction_from_compute_time_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the fake GPU runs kernels 60% of the time while the loop computes, none while it waits
    nvml = _FakeNvml([0.0])
    made = _use_fake(monkeypatch, nvml)
    loader = ioprobe.watch(DataLoader(_SleepDataset(120, 0.005), batch_size=4))
    for _ in loader:
        nvml.util[0] = 60.0
        time.sleep(0.02)
        nvml.util[0] = 0.0
    run = loader.run
    assert len(made) == 1 and not made[0].running and not _sampler_threads()
    assert nvml.shutdown_calls == nvml.init_calls == 1
    idle = run.gpu_idle_fraction
    assert idle is not None and 0.2 < idle < 0.8  # the stall is a real share of the time
    gpu = run.stages.gpu
    assert gpu.busy_fraction is not None
    assert gpu.busy_fraction == pytest.approx(0.6, abs=0.12)
    # all time averaged would read about 0.6 * (1 - idle): the stalls really are left out
    assert gpu.busy_fraction > 0.6 * (1 - idle) + 0.05
    assert gpu.busy_method is not None
    assert gpu.busy_method.startswith("nvml utilization, ")
    assert gpu.busy_method.endswith(" Hz, stalls excluded")


def test_watch_counts_only_samples_inside_the_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _FakeNvml([40.0])
    _use_fake(monkeypatch, nvml)
    loader = ioprobe.watch(DataLoader(_SleepDataset(40, 0.0), batch_size=2))
    for _ in loader:
        time.sleep(0.01)
    # between epochs the GPU is flat out (validation, say): not part of the watched span
    nvml.util[0] = 100.0
    time.sleep(0.1)
    nvml.util[0] = 40.0
    for _ in loader:
        time.sleep(0.01)
    run = loader.run
    assert run.gpu_idle_fraction is not None
    assert run.stages.gpu.busy_fraction == pytest.approx(0.4 / (1 - run.gpu_idle_fraction))


def test_watch_without_nvml_leaves_busy_unset_and_says_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = _FailingNvml([50.0])
    made = _use_fake(monkeypatch, nvml)
    loader = ioprobe.watch(DataLoader(_SleepDataset(40, 0.0), batch_size=2))
    for _ in loader:
        time.sleep(0.002)
    run = loader.run
    assert made[0].status.startswith("none: ")
    assert run.stages.gpu.busy_fraction is None and run.stages.gpu.busy_method is None
    assert run.stages.gpu.step_seconds is not None  # the rest of the gpu stage is there
    assert not any("nvml" in n.lower() or "utili" in n.lower() for n in run.notes)


def test_a_forked_child_has_no_thread_and_leaves_nvml_alone() -> None:
    nvml = _FakeNvml([50.0])
    sampler = GpuBusySampler(nvml, interval_s=0.001)
    assert sampler.start()
    _wait_for(lambda: len(nvml.polled) >= 3)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            polled = len(nvml.polled)
            ok = not sampler.running and not _sampler_threads()
            sampler.stop()
            time.sleep(0.02)
            ok = ok and nvml.shutdown_calls == 0 and len(nvml.polled) == polled
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        answer = fh.read()
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert sampler.running  # the parent's thread carries on
    sampler.stop()
    assert nvml.shutdown_calls == 1


def test_watch_with_forked_workers_while_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    # workers fork while the sampler thread polls: the fork hooks must not deadlock
    nvml = _FakeNvml([50.0])
    made = _use_fake(monkeypatch, nvml)
    loader = ioprobe.watch(
        DataLoader(
            _SleepDataset(64, 0.001),
            batch_size=4,
            num_workers=2,
            multiprocessing_context="fork",
        )
    )
    for _ in range(2):
        for _ in loader:
            time.sleep(0.005)
    run = loader.run
    assert nvml.init_calls == nvml.shutdown_calls == 1
    assert not made[0].running and not _sampler_threads()
    assert run.stages.gpu.busy_fraction is not None

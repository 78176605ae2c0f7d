"""The GPU-alone measurement's logic: step timing on the host clock, SM activity through a
stand-in NVML, and what the record and the advice make of it.

The real path differs only behind the seams: CUDA events instead of the host clock, the
real pynvml instead of the stand-in (tests/integration/watch/test_gpu_alone_gpu.py runs it).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect import gpu_alone as ga
from ioprobe.errors import BadInputError
from ioprobe.loaders import torch as adapter
from tests.fixtures.datasets import SleepDataset


def spin(seconds: float) -> None:
    """Hold the thread for ``seconds`` of wall time: an emulated device step of known length."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Scripted:
    method = "scripted sm activity"

    def __init__(self, value: float | None) -> None:
        self.value = value
        self.calls: list[str] = []

    def begin(self) -> None:
        self.calls.append("begin")

    def end(self) -> float | None:
        self.calls.append("end")
        return self.value


def test_step_time_is_the_burned_time_and_activity_spans_the_timed_steps() -> None:
    calls: list[str] = []
    took: list[float] = []  # each step's own wall time: 4 ms, more where the host preempted it
    activity = Scripted(0.25)

    def step(batch: Any) -> None:
        calls.append("step")
        t0 = time.perf_counter()
        spin(0.004)
        took.append(time.perf_counter() - t0)

    alone = ga.measure_alone(step, "batch", 16, adapter.HostClock(), activity, seconds=0.3)
    assert len(calls) == alone.steps + ga.WARMUP_STEPS
    timed = took[ga.WARMUP_STEPS :]
    # the steps' own time, and only a little between them (the loop, the host clock's events)
    assert alone.step_seconds is not None and alone.step_seconds >= 0.004
    assert alone.step_seconds == pytest.approx(sum(timed) / len(timed), rel=0.05)
    assert alone.samples_per_s == pytest.approx(16 / alone.step_seconds)
    assert alone.steps >= 40 and alone.steps % ga.SYNC_EVERY == 0
    assert activity.calls == ["begin", "end"]
    assert (alone.sm_active, alone.sm_method, alone.timing) == (
        0.25,
        "scripted sm activity",
        "host clock",
    )


def test_a_missing_reader_is_a_note_not_an_error() -> None:
    alone = ga.measure_alone(
        lambda b: None, 0, 4, adapter.HostClock(), "no NVML (ImportError)", 0.05
    )
    assert alone.sm_active is None and alone.note == "no NVML (ImportError)"


class FakeGpm:
    """pynvml's GPM calls, as ctypes structures would behave."""

    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2

    def __init__(self, value: float, ret: int = 0, supported: bool = True) -> None:
        self.value, self.ret, self.supported = value, ret, supported
        self.alive: set[int] = set()
        self.got: list[int] = []
        self.asked: list[int] = []

    def c_nvmlGpmMetricsGet_t(self) -> Any:
        return SimpleNamespace(metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)])

    def nvmlGpmSampleAlloc(self) -> int:
        s = len(self.got) + len(self.alive) + 100
        self.alive.add(s)
        return s

    def nvmlGpmSampleFree(self, s: int) -> None:
        self.alive.remove(s)

    def nvmlGpmSampleGet(self, h: Any, s: int) -> None:
        self.got.append(s)

    def nvmlGpmMetricsGet(self, get: Any) -> None:
        assert get.sample1 != get.sample2 and get.numMetrics == 1
        self.asked.append(get.metrics[0].metricId)
        get.metrics[0].value = self.value
        get.metrics[0].nvmlReturn = self.ret

    # what open_activity needs
    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.supported))

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=97)


def test_gpm_reads_sm_utilisation_between_two_samples_and_frees_them() -> None:
    nvml = FakeGpm(37.5)
    act = ga.open_activity(0, nvml)
    assert isinstance(act, ga.GpmActivity)
    act.begin()
    assert act.end() == pytest.approx(0.375)
    assert nvml.asked == [FakeGpm.NVML_GPM_METRIC_SM_UTIL] and len(nvml.got) == 2
    assert nvml.alive == set()


def test_a_failed_gpm_metric_is_none() -> None:
    act = ga.open_activity(0, FakeGpm(50.0, ret=3))
    assert isinstance(act, ga.GpmActivity)
    act.begin()
    assert act.end() is None


def test_without_gpm_the_utilisation_rate_stands_in_and_says_what_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    act = ga.open_activity(1, FakeGpm(0.0, supported=False))
    assert isinstance(act, ga.UtilActivity)
    assert "not the share of SMs" in act.method
    act.begin()
    assert act.end() == pytest.approx(0.97)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert isinstance(ga.open_activity(1, FakeGpm(1.0)), str)  # one device visible


def test_gpu_alone_moves_the_batch_once_and_finds_its_size() -> None:
    seen: list[torch.Tensor] = []
    batch = {"x": torch.zeros(12, 3), "y": [torch.zeros(12)]}
    alone = ioprobe.gpu_alone(lambda b: seen.append(b["x"]), batch, device="cpu", seconds=0.05)
    assert alone.batch_size == 12 and alone.note == "not a CUDA device"
    assert all(t is seen[0] for t in seen)  # the same batch every step: no data to wait for
    with pytest.raises(BadInputError):
        ioprobe.gpu_alone(lambda b: None, {"label": "no tensors"}, device="cpu")


def test_a_watched_run_carries_the_alone_figures_into_its_record_and_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a GPU-bound loop (the consumer takes 20 ms a batch) whose steps fill 15% of the SMs:
    # six jobs would share the GPU, and the loader has room to feed them
    monkeypatch.setattr(adapter, "sm_activity", lambda dev: Scripted(0.15))
    loader = ioprobe.watch(
        DataLoader(SleepDataset(192, 0.0, 256), batch_size=16, num_workers=1), device="cpu"
    )
    last = None
    for batch in loader:
        spin(0.020)
        last = batch
    before = loader.run
    assert before.stages.gpu.alone is None
    alone = loader.measure_gpu_alone(lambda b: spin(0.020), last, seconds=0.3)
    rec = loader.run
    assert rec.stages.gpu.alone == alone
    assert alone.samples_per_s == pytest.approx(16 / 0.020, rel=0.15)
    assert rec.stages.gpu.busy_fraction == pytest.approx(0.15)
    assert "data-free steps" in (rec.stages.gpu.busy_method or "")
    share = [r for r in rec.recommendations if r.kind == "share_gpu"]
    assert share and "run 6 jobs per GPU" in share[0].text, rec.recommendations
    assert share[0].predicted_samples_per_s is not None
    assert share[0].predicted_samples_per_s > 1.5 * rec.predicted_samples_per_s

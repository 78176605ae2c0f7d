"""The device paths on a real CUDA device: CUDA events, pinned and pageable copies.

These run only where torch sees a CUDA device; tests/integration/watch/test_watch_device.py runs
the same code everywhere with a simulated device standing in for the driver calls. The
truths here are taken with the host clock around synchronised work, never with events.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.loader_sim import queue_predictions
from ioprobe.analysis.queueing import head_of_line
from ioprobe.record import RunRecord
from tests.fixtures.datasets import SkewedDataset, SleepDataset

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _host_timed(fn: object, reps: int = 5) -> float:
    """Median seconds of ``fn()`` run synchronously: the host clock's truth."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


@pytest.fixture(scope="module")
def spin_cycles_per_s() -> float:
    torch.cuda.init()
    cycles = 50_000_000
    return cycles / _host_timed(lambda: torch.cuda._sleep(cycles))


def test_events_see_the_gpu_busy_while_the_host_waits(spin_cycles_per_s: float) -> None:
    kernel = 0.020
    cycles = int(kernel * spin_cycles_per_s)
    loader = ioprobe.watch(
        DataLoader(SleepDataset(480, 0.003, 65536), batch_size=8, num_workers=1, pin_memory=True),
        device="cuda",
    )
    n = 0
    t0 = time.perf_counter()
    for batch in loader:
        assert batch.is_cuda
        torch.cuda._sleep(cycles)  # queued: the host returns at once
        n += 1
        if n == 1:
            t0 = time.perf_counter()
    torch.cuda.synchronize()
    period = (time.perf_counter() - t0) / (n - 1)
    rec = loader.run
    assert rec.watch is not None and rec.watch.gpu_timing.startswith("cuda events on cuda:")
    assert rec.gpu_idle_fraction == pytest.approx(1 - kernel / period, abs=0.06)
    assert rec.stages.gpu.capacity_samples_per_s == pytest.approx(8 / kernel, rel=0.1)
    assert rec.stages.pcie.pinned_fraction == 1.0  # pin_memory=True pinned every batch
    ep = rec.watch.epochs[0]
    assert ep.stall_seconds / ep.seconds > 0.7  # the host clock alone would blame the data


def test_pageable_copies_are_timed_at_the_rate_synchronous_copies_reach() -> None:
    floats = 4 * 1024 * 1024  # 16 MiB per sample, 64 MiB per batch
    host = torch.zeros(4 * floats)
    rate = host.nbytes / _host_timed(lambda: host.to("cuda"))
    loader = ioprobe.watch(
        DataLoader(SleepDataset(24, 0.0, floats), batch_size=4, num_workers=0), device="cuda"
    )
    for _ in loader:
        pass
    pc = loader.run.stages.pcie
    assert pc.pinned_fraction == 0.0
    assert pc.pageable_bytes_per_s == pytest.approx(rate, rel=0.25)
    assert pc.bytes_per_sample == pytest.approx(floats * 4, rel=1e-6)


def test_to_device_in_the_loop_with_the_model_on_the_gpu() -> None:
    weight = torch.randn(1024, 1024, device="cuda")  # CUDA in use before the loop
    loader = ioprobe.watch(
        DataLoader(SleepDataset(64, 0.0, 1024), batch_size=8, num_workers=0, pin_memory=True)
    )
    for x in loader:
        y = ioprobe.to_device(x, "cuda")
        (y @ weight).sum().item()
    rec = loader.run
    ep = rec.watch.epochs[0]
    assert ep.h2d_copies == 8 and ep.h2d_bytes == 64 * 1024 * 4
    assert ep.gpu_wait_seconds is not None
    assert rec.gpu_idle_method.startswith("cuda events")
    del weight


def test_the_live_panel_shows_the_gpu_waiting_by_the_device_clock(
    spin_cycles_per_s: float,
) -> None:
    # as test_watch_device.py builds it on the simulated device: batches of 8 that take
    # about 24 ms to load, a 12 ms kernel each; the GPU waits about half the time while the
    # host, back from each step at once, waits nearly all of it
    from tests.fixtures.live_frames import frames_while

    kernel = 0.012
    cycles = int(kernel * spin_cycles_per_s)
    loader = ioprobe.watch(
        DataLoader(SleepDataset(800, 0.003, 1024), batch_size=8, num_workers=1, pin_memory=True),
        device="cuda",
        live=True,
    )
    frames, period, n = frames_while(
        loader, lambda b: torch.cuda._sleep(cycles), torch.cuda.synchronize
    )
    assert len(frames) >= 2, f"{n} batches gave {len(frames)} frames"
    truth = 1 - kernel / period  # a 32 kB pinned copy takes microseconds
    last = frames[-1]
    assert last.gpu_waiting == pytest.approx(truth, abs=0.08)
    assert last.stall is not None and last.stall > 0.8
    assert last.samples_per_s == pytest.approx(8 / period, rel=0.1)
    gpu = {s.name: s for s in last.stages}["gpu"]
    assert gpu.capacity == pytest.approx(8 / kernel, rel=0.1)
    assert "device clock" in gpu.detail
    assert loader.run.gpu_idle_fraction == pytest.approx(truth, abs=0.06)


# head-of-line blocking as tests/integration/watch/test_head_of_line.py builds it (one sample in
# 50 waits 20 times as long), with each batch copied to the GPU and a kernel per step
N, BASE_S, EVERY, FACTOR, BATCH, STEP_S = 1500, 0.001, 50, 20.0, 2, 0.0015


def _skewed_on_the_gpu(cycles: int, **settings: object) -> RunRecord:
    kw: dict[str, object] = {"num_workers": 2, "prefetch_factor": 2, "in_order": True}
    kw.update(settings)
    loader = ioprobe.watch(
        DataLoader(
            SkewedDataset(N, BASE_S, EVERY, FACTOR), batch_size=BATCH, pin_memory=True, **kw
        ),  # type: ignore[arg-type]
        device="cuda",
    )
    for batch in loader:
        assert batch.is_cuda
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return loader.run


def test_per_sample_costs_the_batch_log_and_the_queue_replay_with_batches_on_the_gpu(
    spin_cycles_per_s: float,
) -> None:
    cycles = int(STEP_S * spin_cycles_per_s)
    base = _skewed_on_the_gpu(cycles)
    w = base.watch
    assert w is not None and w.gpu_timing is not None and w.gpu_timing.startswith("cuda events")
    # per-sample costs: the heaviest are exactly the samples made heavy
    assert w.sample_costs is not None
    heavy = w.sample_costs.heaviest
    assert len(heavy) == 20 and all(h.index % EVERY == 0 for h in heavy), heavy
    assert all(h.wall_ms > 0.8 * FACTOR * BASE_S * 1e3 for h in heavy)
    # the batch log holds every batch, each arriving after it was ready
    log = w.batch_log
    assert log is not None and len(log.arrival) + log.dropped == N // BATCH
    assert all(a >= r - 1e-3 for a, r in zip(log.arrival, log.ready, strict=True))
    hol = head_of_line(base)
    assert hol is not None
    first = 2 * BATCH
    truth = sum(1 for i in range(first, N) if i % EVERY == 0) * (FACTOR - 1) * BASE_S
    assert hol.slow_sample_seconds == pytest.approx(truth, rel=0.15)
    # the replay's in_order=False prediction against reruns on the GPU, paired
    (pred,) = [p for p in queue_predictions(base) if p.setting == "in_order"]
    gains = []
    for _ in range(3):
        before = _skewed_on_the_gpu(cycles).measured_samples_per_s
        after = _skewed_on_the_gpu(cycles, in_order=False).measured_samples_per_s
        assert before and after
        gains.append(after / before)
    assert pred.gain == pytest.approx(statistics.median(gains), rel=0.15), (pred.gain, gains)

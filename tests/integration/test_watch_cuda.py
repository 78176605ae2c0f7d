"""The device paths on a real CUDA device: CUDA events, pinned and pageable copies.

These run only where torch sees a CUDA device; tests/integration/test_watch_device.py runs
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
from tests.fixtures.datasets import SleepDataset

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

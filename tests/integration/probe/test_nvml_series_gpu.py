"""The NVML series on a real GPU against a load the test makes: alternating busy and idle
seconds, and a second of pinned host-to-device copies."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from ioprobe.collect.gpu_sampler import GpuBusySampler, series_record
from ioprobe.record import GpuSeries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

WINDOW = 1.0  # seconds of each busy or idle window
EDGE = 0.2  # NVML's reading trails the load by up to its sample period: edges are skipped
CYCLES = 3
KERNEL_S = 0.01  # each sleep kernel's length; a second is about 100 of them back to back
COPY_BYTES = 256 << 20


def sleep_cycles_per_second() -> float:
    """How many ``torch.cuda._sleep`` cycles the GPU spins per second, timed on the device."""
    probe = 10_000_000
    torch.cuda._sleep(probe)  # warm-up: the first launch also raises the clocks
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return probe / (start.elapsed_time(end) / 1e3)


def busy_for(seconds: float, cycles_per_s: float) -> None:
    """Queue ``seconds`` of sleep kernels back to back, then wait for the last one."""
    cycles = int(cycles_per_s * KERNEL_S)
    for _ in range(max(1, round(seconds / KERNEL_S))):
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()


def readings(series: GpuSeries, column: str, lo: float, hi: float) -> list[float]:
    """A column's values with ``lo <= t <= hi``, gaps left out."""
    cols = series.columns
    return [
        v
        for t, v in zip(cols["t"], cols.get(column, []), strict=False)
        if t is not None and v is not None and lo <= t <= hi
    ]


def test_sm_utilisation_follows_busy_and_idle_seconds_and_pcie_sees_copies() -> None:
    torch.cuda.init()
    per_s = sleep_cycles_per_second()
    host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    torch.cuda.synchronize()
    sampler = GpuBusySampler(interval_s=0.1)  # 10 Hz, the default rate
    started = time.perf_counter()
    assert sampler.start(), sampler.status
    time.sleep(WINDOW)  # the first readings may still carry the calibration's kernels
    windows = []
    for _ in range(CYCLES):
        for kind in ("busy", "idle"):
            t0 = time.perf_counter() - started
            if kind == "busy":
                busy_for(WINDOW, per_s)
            else:
                time.sleep(WINDOW)
            windows.append((kind, t0 + EDGE, time.perf_counter() - started - EDGE))
    copy_from = time.perf_counter() - started
    end = time.perf_counter() + WINDOW
    while time.perf_counter() < end:
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
    copy_to = time.perf_counter() - started
    sampler.stop()
    series = series_record(sampler, started)
    assert series is not None, sampler.status
    for kind, lo, hi in windows:
        got = readings(series, "sm_util", lo, hi)
        print(f"{kind} {lo:.2f}-{hi:.2f} s: SM util {got}")
        assert len(got) >= 4, (kind, lo, hi, series.columns["t"])
        # the median: on an H100 the first reading past the edge still shows the window
        # before (NVML trails the load by about one 10 Hz poll), and must not decide
        if kind == "busy":
            assert statistics.median(got) >= 80, (kind, got)
        else:
            assert statistics.median(got) <= 20, (kind, got)
    # NVML names PCIe directions from the GPU's side, so host-to-device traffic should be
    # what it receives (RX). The assertion takes whichever direction is larger, so a driver
    # or binding that names them the other way still shows the burst; the print says which.
    peaks = {
        name: max(readings(series, name, copy_from + EDGE, copy_to), default=0.0)
        for name in ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")
    }
    print(f"PCIe during {COPY_BYTES >> 20} MiB pinned host-to-device copies: {peaks}")
    assert max(peaks.values()) > 5e9, peaks
    assert series.poll_seconds is not None and series.poll_seconds < 0.1

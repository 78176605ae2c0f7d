"""The NVML series on a real GPU against a load the test makes: busy and idle windows, and a
burst of pinned host-to-device copies."""

from __future__ import annotations

import time

import pytest
import torch

from ioprobe.collect.gpu_sampler import GpuBusySampler, series_record

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

WINDOW = 2.0  # NVML averages utilisation over up to 1 s: windows twice that, edges skipped
EDGE = 0.5


def busy_for(seconds: float) -> None:
    """Kernels back to back for ``seconds`` of host time, then wait for them."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.cuda._sleep(1_000_000)  # about 0.5 ms each on an H100
        torch.cuda.synchronize()


def test_sm_utilisation_follows_busy_and_idle_windows_and_pcie_sees_copies() -> None:
    torch.cuda.init()
    sampler = GpuBusySampler(interval_s=0.1)
    started = time.perf_counter()
    assert sampler.start(), sampler.status
    windows = []
    for kind in ("idle", "busy", "idle", "busy"):
        t0 = time.perf_counter() - started
        if kind == "busy":
            busy_for(WINDOW)
        else:
            time.sleep(WINDOW)
        windows.append((kind, t0 + EDGE, time.perf_counter() - started - EDGE))
    host = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    copy_from = time.perf_counter() - started
    end = time.perf_counter() + WINDOW
    while time.perf_counter() < end:
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
    copy_to = time.perf_counter() - started
    sampler.stop()
    series = series_record(sampler, started)
    assert series is not None
    cols = series.columns
    t, sm = cols["t"], cols["sm_util"]
    for kind, lo, hi in windows:
        got = [
            v
            for ti, v in zip(t, sm, strict=True)
            if ti is not None and lo <= ti <= hi and v is not None
        ]
        assert len(got) >= 5, (kind, lo, hi, t)
        mean = sum(got) / len(got)
        print(f"{kind} {lo:.1f}-{hi:.1f} s: SM util mean {mean:.0f}% over {len(got)} readings")
        if kind == "busy":
            assert mean >= 80, (kind, got)
        else:
            assert mean <= 20, (kind, got)
    # NVML names directions from the GPU's side: host-to-device traffic is what it receives
    # (RX); whichever is larger is asserted, so a driver that swaps them still shows the burst
    in_copies = [
        i for i, ti in enumerate(t) if ti is not None and copy_from + EDGE <= ti <= copy_to
    ]
    peaks = {
        name: max((cols[name][i] or 0.0) for i in in_copies)
        for name in ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")
        if name in cols
    }
    print(f"PCIe during 256 MiB pinned copies: {peaks}")
    assert peaks and max(peaks.values()) > 5e9, peaks
    assert series.poll_seconds is not None and series.poll_seconds < 0.1

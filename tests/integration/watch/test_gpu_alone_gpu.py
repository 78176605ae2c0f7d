"""ioprobe.gpu_alone on a real CUDA device: the step time against a host-timed truth, and SM
activity that tells a small step from one that fills the GPU."""

from __future__ import annotations

import time

import pytest
import torch

import ioprobe

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def host_timed_step(step: object, batch: torch.Tensor, n: int = 50) -> float:
    """Seconds per step, synchronised, on the host clock: the truth."""
    for _ in range(3):
        step(batch)  # type: ignore[operator]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step(batch)  # type: ignore[operator]
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def test_a_heavy_step_is_timed_on_the_device_and_fills_the_gpu() -> None:
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step(x: torch.Tensor) -> torch.Tensor:
        return x @ w

    batch = torch.randn(8192, 8192, dtype=torch.bfloat16)  # on the host: gpu_alone moves it
    alone = ioprobe.gpu_alone(step, batch, seconds=1.0)
    truth = host_timed_step(step, batch.cuda())
    assert alone.timing.startswith("cuda events")
    assert alone.step_seconds == pytest.approx(truth, rel=0.15)
    assert alone.samples_per_s == pytest.approx(8192 / truth, rel=0.15)
    # GPM read 74-87% for one 8192² bf16 product on an H100: most SMs, not all, every moment
    assert alone.sm_active is not None and alone.sm_active > 0.6, alone


def test_a_tiny_step_leaves_most_of_the_gpu_idle_by_gpm() -> None:
    w = torch.randn(64, 64, device="cuda")

    def step(x: torch.Tensor) -> None:
        for _ in range(20):
            x = torch.tanh(x @ w)

    alone = ioprobe.gpu_alone(step, torch.randn(32, 64), seconds=1.0)
    assert alone.samples_per_s and alone.samples_per_s > 0
    if alone.sm_method is None or "gpm" not in alone.sm_method:
        pytest.skip(f"this GPU or driver has no GPM metrics ({alone.sm_method or alone.note})")
    # 32x64 matrices occupy one or two of the 132 SMs while a kernel runs
    assert alone.sm_active is not None and alone.sm_active < 0.3, alone

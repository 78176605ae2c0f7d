"""GPU idle from the host clock vs the device's, on a simulated CUDA stream.

  python tests/benchmarks/sim_device_idle.py [--repeats 3]

One worker makes a batch of 8 in about 28 ms; each step queues a 20 ms kernel and returns at
once. The truth is the kernel's share of the batch period the loop itself measures. The host
clock sees the consumer blocked in next() almost all the time; the device timeline
(tests/fixtures/sim_device.py standing in for the driver) sees the GPU busy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from torch.utils.data import DataLoader

import ioprobe
from ioprobe.loaders import torch as adapter
from tests.fixtures.datasets import SleepDataset
from tests.fixtures.sim_device import SimStream

KERNEL_S = 0.020


def once() -> str:
    sim = SimStream()
    adapter.event_backend = lambda device: sim  # type: ignore[assignment]
    loader = ioprobe.watch(
        DataLoader(SleepDataset(480, 0.003, 65536), batch_size=8, num_workers=1), device="meta"
    )
    n, t0 = 0, 0.0
    for _ in loader:
        sim.launch(KERNEL_S)
        n += 1
        if n == 1:
            t0 = time.perf_counter()
    sim.synchronize()
    period = (time.perf_counter() - t0) / (n - 1)
    copy = 8 * 65536 * 4 / sim.pageable_rate
    rec = loader.run
    assert rec.watch is not None
    ep = rec.watch.epochs[0]
    gpu = rec.stages.gpu.capacity_samples_per_s or 0.0
    return (
        f"| {period * 1e3:.1f} | {1 - (KERNEL_S + copy) / period:.3f} | "
        f"{rec.gpu_idle_fraction:.3f} | {ep.stall_seconds / ep.seconds:.3f} | "
        f"{gpu:.0f} (truth {8 / KERNEL_S:.0f}) |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(
        "| batch period ms | truth idle | device-clock idle | host-clock stall share | GPU samples/s |"
    )
    print("|---|---|---|---|---|")
    for _ in range(args.repeats):
        print(once())


if __name__ == "__main__":
    main()

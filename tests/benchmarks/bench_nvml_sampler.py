"""The NVML sampler's own cost at 10 Hz: the median poll and the sampler thread's CPU share.

  python tests/benchmarks/bench_nvml_sampler.py [--seconds 10] [--hz 10]

Uses the real NVML (nvidia-ml-py and a driver with a visible GPU) where there is one, and the
stand-in of tests/fixtures/scripted_nvml.py otherwise; the first line of output says which.
With the stand-in the figures are the sampler's own Python work per poll, without any driver
time: a floor, not what a GPU host pays (there the PCIe throughput reads dominate, see
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.collect.gpu_sampler import GpuBusySampler, series_record
from tests.fixtures.scripted_nvml import ScriptedNvml


def measure(seconds: float, hz: float) -> list[str]:
    """Sample for ``seconds`` at ``hz`` and describe the cost, real NVML first."""
    sampler = GpuBusySampler(interval_s=1.0 / hz)
    t0 = time.perf_counter()
    if sampler.start():
        which = f"real NVML ({sampler.status})"
    else:
        why = sampler.status
        sampler = GpuBusySampler(ScriptedNvml(), interval_s=1.0 / hz)
        t0 = time.perf_counter()
        assert sampler.start()
        which = f"stand-in NVML (tests/fixtures/scripted_nvml.py), real one unavailable: {why}"
    time.sleep(seconds)
    sampler.stop()
    wall = time.perf_counter() - t0
    series = series_record(sampler, t0)
    rows = len(series.columns.get("t", [])) if series is not None else 0
    readings = [k for k in (series.columns if series is not None else {}) if k != "t"]
    poll = sampler.poll_seconds()
    return [
        which,
        f"polls kept: {rows} in {wall:.1f} s (asked for {hz:g} Hz: {rows / wall:.2f} Hz)",
        f"readings: {', '.join(readings) or 'none'}",
        f"median poll: {poll * 1e6:,.1f} µs" if poll is not None else "median poll: none",
        f"sampler thread CPU: {sampler.thread_cpu_s * 1e3:.1f} ms, "
        f"{sampler.thread_cpu_s / wall:.3%} of one core",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--hz", type=float, default=10.0)
    args = ap.parse_args()
    print("\n".join(measure(args.seconds, args.hz)))


if __name__ == "__main__":
    main()

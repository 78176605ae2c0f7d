"""Where a short probe's time goes: each phase of ``probe --loader dali`` stamped, with the CPU
pool's start and each sweep level timed, over several probes in one process (the first pays
CUDA's and the codecs' start, as every CLI run does).

  python tests/benchmarks/probe_phases.py [--budget 10] [--repeats 3] [--files 60] [--sample]

The dataset is the GPU test's: 320x240 random-pixel JPEGs in a temporary folder (removed), or
with ``--sample`` the built-in sample of 2,000 JPEGs.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing.pool as mpp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.collect import cpu as cpu_mod
from ioprobe.collect.budget import PhasePlan, cost_words
from ioprobe.collect.probe import Probe, ProbeOptions

T0 = time.perf_counter()


def stamp(msg: str) -> None:
    print(f"{time.perf_counter() - T0:7.2f}  {msg}", flush=True)


class StampingReporter:
    def phase(self, name: str) -> None:
        stamp(f"phase {name}")

    def update(self, fraction: float, detail: str = "") -> None:
        pass

    def result(self, line: str) -> None:
        stamp("   " + line)

    def close(self) -> None:
        stamp("closed")


def time_pool_and_levels() -> None:
    """Wrap the pool's start and the sweep's levels with timers (this process only)."""
    for name in ("__init__", "map", "terminate"):
        orig = getattr(mpp.Pool, name)

        def wrapped(self: Any, *a: Any, _orig: Any = orig, _name: str = name, **k: Any) -> Any:
            t = time.perf_counter()
            r = _orig(self, *a, **k)
            stamp(f"Pool.{_name} took {time.perf_counter() - t:.2f} s")
            return r

        setattr(mpp.Pool, name, wrapped)
    decode_for = cpu_mod._decode_for

    def timed(pool: Any, feed: Any, workers: int, seconds: float, *a: Any) -> Any:
        t = time.perf_counter()
        r = decode_for(pool, feed, workers, seconds, *a)
        stamp(f"level {workers}: asked {seconds:.2f} s, took {time.perf_counter() - t:.2f} s")
        return r

    cpu_mod._decode_for = timed  # type: ignore[assignment]


def show_plan(plan: PhasePlan) -> None:
    """The probe's plan as it was made: the costs before the first phase, each phase's least
    and planned seconds, and the time it expects to take."""
    stamp(f"plan: {cost_words(plan.fixed_s)} before the first phase")
    for phase, seconds in plan.phases_s.items():
        stamp(f"plan:   {phase:<12} {seconds:5.2f} s (least {plan.floors_s[phase]:.2f} s)")
    stamp(f"plan: expects {plan.expected_s:.1f} s, holds: {plan.holds}")


def jpegs(root: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    for i in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(buf, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--sample", action="store_true", help="probe the built-in sample instead")
    args = ap.parse_args()
    time_pool_and_levels()
    root = Path(tempfile.mkdtemp(prefix="ioprobe-phases-"))
    try:
        if args.sample:
            from ioprobe.collect.sample_data import ensure_sample

            target = ensure_sample()
        else:
            jpegs(root, args.files)
            target = root
        for i in range(args.repeats):
            stamp(f"=== probe {i + 1}, budget {args.budget} s")
            t = time.perf_counter()
            opts = ProbeOptions(
                target=str(target), loader="dali", time_budget_s=args.budget, on_plan=show_plan
            )
            rec = Probe(opts, StampingReporter()).run()
            stamp(f"=== probe {i + 1} took {time.perf_counter() - t:.2f} s")
            for p in rec.stages.cpu.decode_paths:
                stamp(f"   {p.path}: {p.samples_per_s or 0:,.0f} images/s ({p.error or 'ok'})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

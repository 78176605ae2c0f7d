"""An unchanged DALI script plainly and under ``ioprobe run``, alternated (A B, then B A), per
../shared/BENCHMARKS.md: the samples/s the script itself saw (tests/fixtures/dali_train.py
prints it), so ioprobe's start-up and report are left out.

  python tests/benchmarks/bench_dali_run.py [--pairs 6] [--images 400] [--epochs 3]
      [--step-ms 2] [--mode generic]

Prints each run's rate and the median of the pairs' watched/plain ratios.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.fixtures.dali_pipes import make_jpegs  # noqa: E402


def _rate(cmd: list[str]) -> float:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
    m = re.search(r"^rate ([\d.]+) samples/s$", proc.stdout, re.M)
    assert m, proc.stdout + proc.stderr
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--mode", default="generic", choices=["generic", "classification", "pipeline"])
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ioprobe-bench-dali-"))
    try:
        make_jpegs(root, args.images, (240, 320))
        script = [
            sys.executable, str(REPO / "tests/fixtures/dali_train.py"), str(root), args.mode,
            str(args.epochs), str(args.step_ms),
        ]  # fmt: skip
        watched = [sys.executable, "-m", "ioprobe", "run", "--", *script]
        _rate(script)  # warm-up: page cache, imports
        plain, run, ratios = [], [], []
        for i in range(args.pairs):
            order = ((plain, script), (run, watched))
            for out, cmd in order if i % 2 == 0 else order[::-1]:
                out.append(_rate(cmd))
            ratios.append(run[-1] / plain[-1])
        print(f"plain samples/s: {', '.join(f'{x:,.0f}' for x in plain)}")
        print(f"ioprobe run:     {', '.join(f'{x:,.0f}' for x in run)}")
        print(
            f"watched/plain, median of {args.pairs} pairs: {statistics.median(ratios):.3f} "
            f"({', '.join(f'{r:.3f}' for r in ratios)})"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

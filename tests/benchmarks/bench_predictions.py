"""Prediction error over many predict-then-rerun pairs (the published accuracy figures).

  python tests/benchmarks/bench_predictions.py [--pairs 7]

For each case, records a run, predicts a change from the record alone, applies the change,
measures, and prints predicted, measured and the relative error per pair, then the median
and the worst. Cases: (1) 1 -> 2 loader workers, CPU-bound at 8 ms/sample; (2) a server
throttled to 2 MB/s -> 4 MB/s, storage-bound, 50 kB files, 2 workers; (3) case 1 while two
busy-looping processes share the machine, so the prediction must account for the contention
the first run saw.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.accuracy import cpu_workers_pair, relative_error, storage_rate_pair


def under_load(make: Callable[[], tuple[float, float]]) -> Callable[[], tuple[float, float]]:
    def run() -> tuple[float, float]:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            return make()
        finally:
            for p in spinners:
                p.kill()
                p.wait()

    return run


def report(name: str, make: Callable[[], tuple[float, float]], pairs: int) -> None:
    errors = []
    print(f"\n{name}")
    print(f"  {'pair':>4}  {'predicted':>10}  {'measured':>10}  {'error':>7}")
    for i in range(pairs):
        pred, meas = make()
        err = relative_error((pred, meas))
        errors.append(err)
        print(f"  {i + 1:>4}  {pred:>10.1f}  {meas:>10.1f}  {err:>7.1%}")
    print(f"  median error {statistics.median(errors):.1%}, worst {max(errors):.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=7)
    args = ap.parse_args()
    report("1 -> 2 workers, 8 ms CPU per sample", cpu_workers_pair, args.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        report(
            "2 MB/s -> 4 MB/s server, 50 kB files", lambda: storage_rate_pair(Path(tmp)), args.pairs
        )
    report(
        "1 -> 2 workers with two busy loops on the machine",
        under_load(cpu_workers_pair),
        args.pairs,
    )


if __name__ == "__main__":
    main()

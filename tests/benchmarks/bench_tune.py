"""`ioprobe tune` against a manual sweep, on the skewed loader of the validation matrix.

  python tests/benchmarks/bench_tune.py [--trials 5] [--trial-batches 300] [--modes runs,in-run]

Runs `ioprobe tune` on tests/fixtures/tune_train.py (2 ms blocked per sample, one in 50
blocked 300 ms, batch 16, a 5 ms step, 4 workers), then measures a grid of settings by hand
(the validation matrix's runs of the same loader, a steady window each) and prints the tune
table, the sweep and whether tune's measured best is within 5% of the sweep's best.
``--modes runs,in-run`` (the default, both): tune's trials as runs of their own, and as
windows of one epoch of 40,000 samples (the script runs that one epoch to its end); one sweep
for both.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.analysis.loader_sim import Setting
from ioprobe.record import RunRecord
from tests.support.validation import CASES, rate

REPO = Path(__file__).resolve().parents[2]
GRID = [Setting(w, p, o) for w in (4, 8, 16, 24, 32, 48) for p in (2, 4, 8) for o in (True, False)]


def tune(args: argparse.Namespace, in_run: bool) -> RunRecord:
    """One ``ioprobe tune`` of the skewed script: its record, the table printed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        cmd = [
            sys.executable, "-m", "ioprobe", "tune", "--trials", str(args.trials),
            "--trial-batches", str(args.trial_batches), "--json", str(out),
            *(["--in-run"] if in_run else []), "--",
            sys.executable, str(REPO / "tests/fixtures/tune_train.py"),
            *(["40000", str(Path(tmp) / "done"), "4", "1"] if in_run
              else ["200000", str(Path(tmp) / "done")]),
        ]  # fmt: skip
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        took = time.perf_counter() - t0
        print(f"## ioprobe tune{' --in-run' if in_run else ''} ({took:.0f} s)\n")
        print(done.stderr.split("\n\n", 1)[-1] if "\n\n" in done.stderr else done.stderr)
        return RunRecord.load(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--trial-batches", type=int, default=300)
    ap.add_argument(
        "--modes", default="runs,in-run", help="runs, in-run or both (the sweep is shared)"
    )
    args = ap.parse_args()
    found: dict[str, Setting] = {}
    rates: dict[str, float] = {}
    for mode in args.modes.split(","):
        rec = tune(args, mode == "in-run")
        assert rec.tune is not None and rec.tune.best is not None
        best = rec.tune.trials[rec.tune.best]
        found[mode] = Setting(best.workers, best.prefetch_factor, best.in_order)
        rates[mode] = best.measured_samples_per_s or 0.0
    case = dataclasses.replace(CASES["skewed-remote"], steady_batches=args.trial_batches)
    sweep = {
        s: statistics.median(rate(case, s) for _ in range(2)) for s in {*GRID, *found.values()}
    }
    top = max(sweep, key=lambda s: sweep[s])
    print("| setting | samples/s (median of 2) |\n|---|---:|")
    for s in sorted(sweep, key=lambda s: -sweep[s]):
        print(f"| {s.workers}, {s.prefetch_factor}, {s.in_order} | {sweep[s]:,.0f} |")
    for mode, mine in found.items():
        print(
            f"\n{mode}: best {mine.workers}/{mine.prefetch_factor}/{mine.in_order} at "
            f"{rates[mode]:,.0f}; sweep best {top.workers}/{top.prefetch_factor}/{top.in_order} "
            f"at {sweep[top]:,.0f}; {mode}'s best, measured in the sweep, over the sweep's "
            f"best: {sweep[mine] / sweep[top]:.3f}"
        )


if __name__ == "__main__":
    main()

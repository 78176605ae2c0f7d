"""`ioprobe tune` against a manual sweep, on the skewed loader of the validation matrix.

  python tests/benchmarks/bench_tune.py [--trials 5] [--trial-batches 300]

Runs `ioprobe tune` on tests/fixtures/tune_train.py (2 ms blocked per sample, one in 50
blocked 300 ms, batch 16, a 5 ms step, 4 workers), then measures a grid of settings by hand
(the validation matrix's runs of the same loader, a steady window each) and prints the tune
table, the sweep and whether tune's measured best is within 5% of the sweep's best.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.analysis.loader_sim import Setting
from ioprobe.record import RunRecord
from tests.support.validation import CASES, rate

REPO = Path(__file__).resolve().parents[2]
GRID = [Setting(w, p, o) for w in (4, 8, 16, 24, 32, 48) for p in (2, 4, 8) for o in (True, False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--trial-batches", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        cmd = [
            sys.executable, "-m", "ioprobe", "tune", "--trials", str(args.trials),
            "--trial-batches", str(args.trial_batches), "--json", str(out), "--",
            sys.executable, str(REPO / "tests/fixtures/tune_train.py"), "200000",
            str(Path(tmp) / "done"),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        print(done.stderr.split("\n\n", 1)[-1] if "\n\n" in done.stderr else done.stderr)
        rec = RunRecord.load(out)
    assert rec.tune is not None and rec.tune.best is not None
    found = rec.tune.trials[rec.tune.best]
    case = dataclasses.replace(CASES["skewed-remote"], steady_batches=args.trial_batches)
    mine = Setting(found.workers, found.prefetch_factor, found.in_order)
    sweep = {s: statistics.median(rate(case, s) for _ in range(2)) for s in {*GRID, mine}}
    best = max(sweep, key=lambda s: sweep[s])
    print("| setting | samples/s (median of 2) |\n|---|---:|")
    for s in sorted(sweep, key=lambda s: -sweep[s]):
        print(f"| {s.workers}, {s.prefetch_factor}, {s.in_order} | {sweep[s]:,.0f} |")
    found_rate = found.measured_samples_per_s or 0.0
    print(
        f"\ntune: {len(rec.tune.trials)} trials, best {found.workers}/{found.prefetch_factor}/"
        f"{found.in_order} at {found_rate:,.0f}; sweep best {best.workers}/"
        f"{best.prefetch_factor}/{best.in_order} at {sweep[best]:,.0f}; "
        f"tune's best, measured in the sweep, over the sweep's best: {sweep[mine] / sweep[best]:.3f}"
    )


if __name__ == "__main__":
    main()

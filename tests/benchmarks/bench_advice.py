"""The advice validation matrix: each loader's top recommendation applied and rerun.

  python tests/benchmarks/bench_advice.py [--pairs 3] [--cases a,b] [--out FILE]

For each case of ``tests/support/validation.py`` (a loader whose costs are built by construction):
watch one run, take the first recommendation if it changes a loader setting, rerun it
``--pairs`` times beside the setting as run (median of the paired gains), and sweep the
settings around the recorded one to find the measured best. Prints one Markdown row per case
and the summary the issue holds the advice to: predicted within 15% of the rerun, and the
advised setting within 5% of the sweep's best.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.validation import CASES, SWEEPS, Outcome, unmeasurable, validate


def row(case: str, o: Outcome, seconds: float) -> str:
    return (
        f"| {case} | {o.advice} | {o.predicted_gain:.2f}x | {o.measured_gain:.2f}x | "
        f"{o.error:.1%} | {o.best} ({o.best_gain:.2f}x) | {o.advised_vs_best:.2f} | "
        f"{seconds:.0f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    lines = [
        "| case | top advice | predicted | measured (median) | error | measured best | "
        "advised / best | s |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    outcomes = []
    for name in args.cases.split(","):
        t = time.monotonic()
        why = unmeasurable(CASES[name])
        if why:
            lines.append(f"| {name} | not measured here: {why} |")
            print(lines[-1], flush=True)
            continue
        o = validate(CASES[name], args.pairs, SWEEPS.get(name, []))
        outcomes.append(o)
        lines.append(row(name, o, time.monotonic() - t))
        print(lines[-1], flush=True)
    errors = [o.error for o in outcomes]
    within = sum(e <= 0.15 for e in errors)
    near = sum(o.advised_vs_best >= 0.95 for o in outcomes)
    summary = (
        f"\n{len(outcomes)} cases: predicted within 15% of the rerun in {within}, median "
        f"error {statistics.median(errors):.1%}, worst {max(errors):.1%}; advised setting "
        f"within 5% of the measured best in {near}."
    )
    lines.append(summary)
    print(summary)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

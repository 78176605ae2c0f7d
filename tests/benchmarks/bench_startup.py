"""Wall time of the command line's start-up, for one checkout or several side by side.

  python tests/benchmarks/bench_startup.py [--rounds 15] [CHECKOUT ...]

Each CHECKOUT (default: this one) must have its own ``.venv``. The commands run alternating
across checkouts, round after round, so a busy moment hits them alike; prints the median
milliseconds of each, and each checkout against the first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

COMMANDS = {
    "python -m ioprobe --help": ["-m", "ioprobe", "--help"],
    "python -m ioprobe env --help": ["-m", "ioprobe", "env", "--help"],
    'python -c "import ioprobe.cli"': ["-c", "import ioprobe.cli"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkouts", nargs="*", default=[str(Path(__file__).resolve().parents[2])])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    roots = [Path(c).resolve() for c in args.checkouts]
    ms: dict[tuple[str, Path], list[float]] = {(c, r): [] for c in COMMANDS for r in roots}
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            for root in roots:
                t0 = time.perf_counter()
                subprocess.run(
                    [str(root / ".venv" / "bin" / "python"), *argv],
                    cwd=root,
                    stdout=subprocess.DEVNULL,
                    check=True,
                )
                ms[(name, root)].append((time.perf_counter() - t0) * 1e3)
    heads = " | ".join(f"{r.name} ms" for r in roots)
    print(f"| command | {heads} |" + (" vs first |" if len(roots) > 1 else ""))
    print("|---|" + "--:|" * len(roots) + ("--:|" if len(roots) > 1 else ""))
    for name in COMMANDS:
        meds = [statistics.median(ms[(name, r)]) for r in roots]
        ratios = " | ".join(f"{m / meds[0]:.2f}" for m in meds[1:])
        cells = " | ".join(f"{m:.0f}" for m in meds)
        print(f"| `{name}` | {cells} |" + (f" {ratios} |" if ratios else ""))


if __name__ == "__main__":
    main()

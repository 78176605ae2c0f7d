"""The validation matrix's DALI case: a CPU pipeline (read, decode, resize noise JPEGs) with
one thread, its first advice (DALI's ``num_threads``) applied and rerun beside the pipeline
as it was, and thread counts swept for the measured best: the row ``bench_advice.py`` gives
for a DataLoader case.

    .venv/bin/python -W ignore -m tests.benchmarks.bench_dali_advice --pairs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from nvidia.dali.plugin.pytorch import DALIGenericIterator

import ioprobe
from ioprobe.record import Recommendation, RunRecord
from tests.fixtures.dali_pipes import decode_resize, make_jpegs

BATCH = 8
EPOCHS = 3
THREADS = 1  # as run
SWEEP = (1, 2, 3, 4)


def watched(root: Path, threads: int) -> RunRecord:
    """``EPOCHS`` epochs of the pipeline with ``threads`` threads, watched."""
    pipe = decode_resize(str(root), batch_size=BATCH, num_threads=threads)
    it: Any = ioprobe.watch(DALIGenericIterator(pipe, ["image", "label"], reader_name="Reader"))
    for _ in range(EPOCHS):
        for _ in it:
            pass
        it.reset()
    rec: RunRecord = it.run
    return rec


def rate(root: Path, threads: int) -> float:
    return watched(root, threads).measured_samples_per_s or 0.0


def advice(rec: RunRecord) -> Recommendation | None:
    """The first recommendation, where it changes the thread count."""
    first = rec.recommendations[0] if rec.recommendations else None
    return first if first is not None and first.change and first.change.workers else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--images", type=int, default=160)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dali-") as d:
        root = make_jpegs(Path(d), args.images)
        rec = watched(root, THREADS)
        top = advice(rec)
        advised = top.change.workers if top is not None and top.change else THREADS
        measured = rec.measured_samples_per_s or 0.0
        predicted = (top.predicted_samples_per_s or 0.0) / measured if top and measured else 1.0
        gains, runs = [], {THREADS: [], advised: []}  # type: dict[int, list[float]]
        for _ in range(args.pairs):
            before = rate(root, THREADS)
            after = rate(root, advised) if advised != THREADS else before
            runs[THREADS].append(before)
            runs[advised].append(after)
            gains.append(after / before)
        for t in SWEEP:
            runs.setdefault(t, []).extend(rate(root, t) for _ in range(2))
    rates = {t: statistics.median(r) for t, r in runs.items()}
    best = max(rates, key=lambda t: rates[t])
    gain = statistics.median(gains)
    print(
        "| case | top advice | predicted | measured (median) | error | measured best | advised / best |"
    )
    print("|---|---|---:|---:|---:|---|---:|")
    print(
        f"| dali-cpu | {f'num_threads={advised}' if top else 'none'} | {predicted:.2f}x | "
        f"{gain:.2f}x | {abs(predicted / gain - 1):.1%} | num_threads={best} "
        f"({rates[best] / rates[THREADS]:.2f}x) | {rates[advised] / rates[best]:.2f} |"
    )
    if top is not None:
        print(f"\nthe advice: {top.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

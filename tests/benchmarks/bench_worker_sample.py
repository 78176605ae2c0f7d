"""What watching costs one sample on the worker's side: ``TimedDataset.__getitem__`` around a
dataset that does nothing, plus a 32nd of a ``TimedCollate`` (the /proc counters, the message),
in this process.

  python tests/benchmarks/bench_worker_sample.py [--batches 2000] [--repeats 7]

Prints the median nanoseconds per sample over the repeats. Run it alternately in two trees
to compare them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.loaders import torch_worker as wt


class _Nothing:
    def __getitem__(self, i: int) -> int:
        return i

    def __len__(self) -> int:
        return 10**9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    dataset = wt.TimedDataset(_Nothing())
    collate = wt.TimedCollate(lambda xs: xs)
    runs = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.batches):
            for i in range(32):
                dataset[i]
            collate([0] * 32)
        runs.append((time.perf_counter() - t0) / (32 * args.batches) * 1e9)
    print(f"{statistics.median(runs):.0f} ns per sample", [round(x) for x in runs])


if __name__ == "__main__":
    main()

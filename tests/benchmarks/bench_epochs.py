"""One batch per ``iter()``: what a watched DataLoader keeps, however many epochs it makes.

  python tests/benchmarks/bench_epochs.py [--epochs 100000] [--workers 0]

Code that takes ``batch = next(iter(loader))`` once per step (RL, evaluation loops) makes one
epoch per batch. This drives a watched DataLoader over a trivial dataset that way (after 50
epochs of warm-up) and prints the loop's time per epoch, the main process's growth over the
epochs (traced Python allocations and resident memory), the time of the first ``.run`` and of
a second one, the saved record's size and the epoch entries it kept. ``--workers 2`` uses
persistent workers, so re-iterating does not start processes. tracemalloc slows the loop
about threefold; ``--no-trace`` leaves it off (resident memory only).

``--collector`` instead times the collector alone, in the tree the script sits in:
``bench_watch.py``'s ``main_process_cost_us`` (per batch of 32, early and past 100,000), and
the microseconds per one-batch epoch (``begin_epoch``, one ``on_delivery``, ``end_epoch``)
over 20,000 epochs past 1,000, where merging runs. Run it alternately in two trees to
compare them.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from torch.utils.data import DataLoader

import ioprobe


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def collector_costs() -> None:
    from ioprobe.loaders.torch import DataLoaderAdapter
    from ioprobe.monitor.collector import WatchCollector
    from ioprobe.record import LoaderSettings
    from tests.benchmarks.bench_watch import main_process_cost_us

    early, late = main_process_cost_us()
    adapter = DataLoaderAdapter(LoaderSettings(workers=0), {"num_workers": "0"})
    c = WatchCollector(adapter, 1, None)

    def epochs(n: int, t: int) -> None:
        for k in range(n):
            c.begin_epoch()
            c.on_delivery(t + k * 1000, t + k * 1000 + 10, 1)
            c.end_epoch(None)

    epochs(1000, 0)
    t0 = time.perf_counter()
    epochs(20_000, 10**9)
    per = (time.perf_counter() - t0) / 20_000 * 1e6
    print(
        f"per batch {early:.2f} us (first 2,000), {late:.2f} us (past 100,000); {per:.2f} us/epoch"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--collector", action="store_true", help="time the collector alone")
    args = ap.parse_args()
    if args.collector:
        collector_costs()
        return
    w = args.workers
    loader = ioprobe.watch(
        DataLoader(range(1 << 20), batch_size=1, num_workers=w, persistent_workers=w > 0)
    )
    for _ in range(50):
        next(iter(loader))
    gc.collect()
    if not args.no_trace:
        tracemalloc.start()
    r0, m0 = rss(), tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        next(iter(loader))
    loop = time.perf_counter() - t0
    gc.collect()
    m1, r1 = tracemalloc.get_traced_memory()[0], rss()
    tracemalloc.stop()
    t0 = time.perf_counter()
    rec = loader.run
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _ = loader.run
    again = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.json"
        rec.save(path)
        size = path.stat().st_size
    assert rec.watch is not None
    merged = getattr(rec.watch, "epochs_merged", 0)  # 0 in trees from before the field
    traced = (
        ""
        if args.no_trace
        else f"traced +{(m1 - m0) / 1e6:.1f} MB ({(m1 - m0) / args.epochs:.0f} B/epoch), "
    )
    print(
        f"num_workers={w}, {args.epochs:,} one-batch epochs: loop {loop / args.epochs * 1e6:.0f} "
        f"us/epoch, {traced}RSS +{(r1 - r0) / 1e6:.1f} MB, .run {first:.2f} s (again "
        f"{again:.2f} s), record {size / 1e6:.1f} MB, {len(rec.watch.epochs):,} epoch entries "
        f"({merged:,} epochs merged)"
    )


if __name__ == "__main__":
    main()

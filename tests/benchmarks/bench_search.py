"""The loader simulator's search of settings: seconds per search by the host's core count.

  python tests/benchmarks/bench_search.py [--repeats 3] [--batches 800]

The search (``loader_sim.candidates``, each replayed by ``simulated_rate``) runs whenever a
watched DataLoader's record is judged: at ``loader.run``, at the end of ``ioprobe run`` and in
``ioprobe report``. Its worker counts reach WORKERS_PER_CORE per usable core (64 at 16
cores), so its cost on a GPU host is what a user waits for at the end of a run. The costs
are built by construction: ``--batches`` logged batches of 1 ms blocked and 0.3 ms of CPU
each, one in 25 twenty times as long, a 1.5 ms step, the main process at 1.3 ms of CPU per
batch (as the head-of-line GPU test's record on an H100 host). Prints the median seconds of
``--repeats`` searches per core count, with the settings tried and the replays run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.analysis import loader_sim
from ioprobe.analysis.loader_sim import Costs, Setting


def costs(batches: int, cores: float) -> Costs:
    heavy = [20.0 if i % 25 == 0 else 1.0 for i in range(batches)]
    return Costs(
        blocked=tuple(0.001 * h for h in heavy),
        cpu=tuple(0.0003 * h for h in heavy),
        steps=(0.0015,),
        samples_per_batch=2.0,
        usable_cores=cores,
        loop_cores=0.6,
        other_threads=0.0,
        exponent=None,
        reads_in_flight=1.5,
        reads_in_flight_max=1.5,
        cpu_split="per batch",
        main_cpu_per_batch=0.0013,
    )


REPLAYS = [0]  # replays run, counted by the wrapper main() installs


def _counted(real: Callable[..., list[float]]) -> Callable[..., list[float]]:
    def counted(*a: Any, **k: Any) -> list[float]:
        REPLAYS[0] += 1
        return real(*a, **k)

    return counted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=800)
    args = ap.parse_args()
    base = Setting(2, 2, True)
    loader_sim.simulate = _counted(loader_sim.simulate)  # type: ignore[assignment]
    print("| usable cores | settings tried | replays | search, median s |")
    print("|---:|---:|---:|---:|")
    for cores in (2.0, 4.0, 16.0, 64.0):
        c = costs(args.batches, cores)
        settings = loader_sim.candidates(base, c)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for s in settings:
                loader_sim.simulated_rate(c, s)
            times.append(time.perf_counter() - t0)
        replays = REPLAYS[0] // args.repeats
        REPLAYS[0] = 0
        print(f"| {cores:.0f} | {len(settings)} | {replays} | {statistics.median(times):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

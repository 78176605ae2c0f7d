"""More workers beside another job's busy loop whose scheduling group is below the job's own:
the replay of 2, 4 and 8 workers from a 1-worker run, against reruns.

The job's process goes into a v1 cpu cgroup of its own and the loop into a child of it: the
nesting of a job started in the first session (the root group's own tasks) beside another
session's autogroup, one level down. Needs root and v1's cpu controller at
/sys/fs/cgroup/cpu; the cgroups are removed at the end.

    .venv/bin/python -m tests.benchmarks.bench_nested_group --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from ioprobe.analysis import loader_sim
from ioprobe.collect import procfs
from ioprobe.record import RunRecord
from tests.support.validation import CASES, rate, run

CPU = Path("/sys/fs/cgroup/cpu")


def _move(pid: int, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(pid))


@contextlib.contextmanager
def nested_loop() -> Iterator[subprocess.Popen[bytes]]:
    """This process in cgroup ``bench-job``, a busy loop in its child ``bench-loop``."""
    job = CPU / "bench-job"
    child = job / "bench-loop"
    child.mkdir(parents=True, exist_ok=True)
    _move(os.getpid(), job)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        _move(loop.pid, child)
        yield loop
    finally:
        loop.kill()
        loop.wait()
        _move(os.getpid(), CPU)
        child.rmdir()
        job.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not (CPU / "cgroup.procs").is_file() or not os.access(CPU / "cgroup.procs", os.W_OK):
        print(f"needs root and v1's cpu controller at {CPU}", file=sys.stderr)
        return 2
    case = dataclasses.replace(CASES["foreign-load"], load=0, steady_batches=150)
    with nested_loop() as loop:
        seen = procfs.group_cpu()
        if seen is not None:
            print(f"job's group {seen.own}, the loop's {seen.ticks[loop.pid][2]}")
        recs = sorted((run(case) for _ in range(args.repeats)), key=_rate)
        rec = recs[len(recs) // 2]
        print(f"| 1 | | {_rate(rec):.0f} |")
        for workers in (2, 4, 8):
            s = loader_sim.Setting(workers, 2, True)
            p = loader_sim.predict(rec, s)
            m = statistics.median(rate(case, s) for _ in range(args.repeats))
            print(f"| {workers} | {p.samples_per_s if p else float('nan'):.0f} | {m:.0f} |")
    return 0


def _rate(rec: RunRecord) -> float:
    return rec.measured_samples_per_s or 0.0


if __name__ == "__main__":
    sys.exit(main())

"""The validation matrix's DALI cases, each a row as ``bench_advice.py`` gives for a
DataLoader case: the pipeline watched as run, its first advice applied and rerun beside it,
and its settings swept for the measured best.

- ``dali-cpu``: read, decode, resize noise JPEGs with one thread and a consumer that does
  nothing; the advice is DALI's ``num_threads``.
- ``dali-queue``: the same pipeline with two threads and a consumer whose steps come in
  bursts (five of 2 ms, then one of 100 ms); the advice is a deeper ``prefetch_queue_depth``.

    .venv/bin/python -W ignore -m tests.benchmarks.bench_dali_advice --pairs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nvidia.dali.plugin.pytorch import DALIGenericIterator

import ioprobe
from ioprobe.record import Recommendation, RunRecord
from tests.fixtures.dali_pipes import decode_resize, make_jpegs

BATCH = 8
EPOCHS = 3


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    images: int
    size: tuple[int, int]
    threads: int  # as run
    depth: int
    steps_ms: tuple[float, ...]
    sweep: tuple[tuple[int, int], ...]  # (threads, depth)


CASES = (
    Case("dali-cpu", 160, (480, 640), 1, 2, (0.0,), tuple((t, 2) for t in (1, 2, 3, 4))),
    Case(
        "dali-queue",
        480,
        (240, 320),
        2,
        2,
        (2, 2, 2, 2, 2, 100),
        tuple((t, d) for t in (2, 3) for d in (1, 2, 4, 6, 8)),
    ),
)


def watched(root: Path, case: Case, threads: int, depth: int) -> RunRecord:
    """``EPOCHS`` epochs of the pipeline, the consumer stepping as the case says, watched."""
    pipe = decode_resize(
        str(root), batch_size=BATCH, num_threads=threads, prefetch_queue_depth=depth
    )
    it: Any = ioprobe.watch(DALIGenericIterator(pipe, ["image", "label"], reader_name="Reader"))
    n = 0
    for _ in range(EPOCHS):
        for _ in it:
            step = case.steps_ms[n % len(case.steps_ms)]
            if step:
                time.sleep(step / 1e3)
            n += 1
        it.reset()
    rec: RunRecord = it.run
    return rec


def rate(root: Path, case: Case, setting: tuple[int, int]) -> float:
    return watched(root, case, *setting).measured_samples_per_s or 0.0


def advised(rec: Recommendation | None, case: Case) -> tuple[int, int]:
    """The setting the first advice asks for, as (threads, depth); as run where none."""
    ch = rec.change if rec is not None else None
    if ch is None:
        return case.threads, case.depth
    return ch.workers or case.threads, ch.prefetch_factor or case.depth


def named(setting: tuple[int, int], case: Case) -> str:
    t, d = setting
    parts = [f"num_threads={t}"] if t != case.threads else []
    parts += [f"prefetch_queue_depth={d}"] if d != case.depth else []
    return ", ".join(parts) or "as run"


def row(case: Case, pairs: int) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-dali-") as d:
        root = make_jpegs(Path(d), case.images, size=case.size)
        base = (case.threads, case.depth)
        rec = watched(root, case, *base)
        top = next((r for r in rec.recommendations if r.change), None)
        setting = advised(top, case)
        measured = rec.measured_samples_per_s or 0.0
        predicted = (top.predicted_samples_per_s or 0.0) / measured if top and measured else 1.0
        gains, runs = [], {base: [], setting: []}  # type: list[float], dict[tuple[int, int], list[float]]
        for _ in range(pairs):
            before = rate(root, case, base)
            after = rate(root, case, setting) if setting != base else before
            runs[base].append(before)
            runs[setting].append(after)
            gains.append(after / before)
        for s in case.sweep:
            runs.setdefault(s, []).extend(rate(root, case, s) for _ in range(2))
    rates = {s: statistics.median(r) for s, r in runs.items()}
    best = max(rates, key=lambda s: rates[s])
    gain = statistics.median(gains)
    text = f"\n  the advice: {top.text}" if top is not None else ""
    return (
        f"| {case.name} | {named(setting, case) if top else 'none'} | {predicted:.2f}x | "
        f"{gain:.2f}x | {abs(predicted / gain - 1):.1%} | {named(best, case)} "
        f"({rates[best] / rates[base]:.2f}x) | {rates[setting] / rates[best]:.2f} |{text}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cases", default=",".join(c.name for c in CASES))
    args = ap.parse_args()
    wanted = args.cases.split(",")
    print(
        "| case | top advice | predicted | measured (median) | error | measured best | advised / best |"
    )
    print("|---|---|---:|---:|---:|---|---:|")
    for case in CASES:
        if case.name in wanted:
            print(row(case, args.pairs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

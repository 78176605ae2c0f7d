"""Prediction-vs-rerun pairs: record a run, predict a change, make the change, measure.

Shared by the accuracy tests (tests/integration/whatif/test_prediction_accuracy.py) and the
benchmark that reports the errors over many pairs (tests/benchmarks/bench_predictions.py).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.scenario import evaluate
from ioprobe.record import Change, RunRecord
from tests.fixtures.datasets import BurnDataset, MeteredHttpDataset, MeteredHttpDecodeDataset
from tests.support.servers import ThrottledHTTPServer, make_files

CPU_MS = 8.0
RATE, SIZE, FILES = 2_000_000, 50_000, 80


def watch_run(loader: DataLoader, step_s: float = 0.0) -> RunRecord:  # type: ignore[type-arg]
    watched = ioprobe.watch(loader)
    for _ in watched:
        if step_s:
            time.sleep(step_s)
    return watched.run


def cpu_workers_pair(
    samples: int = 300, one_worker: list[float] | None = None
) -> tuple[float, float]:
    """A CPU-bound run with 1 worker predicts 2 workers; then 2 workers are measured. The
    1-worker run's measured rate is appended to ``one_worker`` when given."""
    one = watch_run(DataLoader(BurnDataset(samples, CPU_MS / 1e3), batch_size=8, num_workers=1))
    if one_worker is not None and one.measured_samples_per_s is not None:
        one_worker.append(one.measured_samples_per_s)
    predicted = evaluate(one, Change(workers=2)).predicted_samples_per_s
    two = watch_run(DataLoader(BurnDataset(samples, CPU_MS / 1e3), batch_size=8, num_workers=2))
    assert two.measured_samples_per_s is not None
    return predicted, two.measured_samples_per_s


def _http_run(root: Path, rate: int) -> RunRecord:
    with ThrottledHTTPServer(root, rate_bytes_per_s=rate) as srv:
        urls = [srv.url + f"p0/f{i:05d}.bin" for i in range(FILES)]
        return watch_run(DataLoader(MeteredHttpDataset(urls), batch_size=4, num_workers=2))


def storage_rate_pair(root: Path) -> tuple[float, float]:
    """A run against a server throttled to R predicts 2R through the real CLI
    (`ioprobe whatif --storage 2R`); then the server is throttled to 2R and measured."""
    if not any(root.iterdir()):
        make_files(root, FILES, SIZE)
    slow = _http_run(root, RATE)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        slow.save(path)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "ioprobe",
                "whatif",
                path,
                "--storage",
                f"{2 * RATE / 1e6:g}MB/s",
                "--json",
                "-",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    predicted = float(json.loads(out.stdout)["predicted_samples_per_s"])
    fast = _http_run(root, 2 * RATE)
    assert fast.measured_samples_per_s is not None
    return predicted, fast.measured_samples_per_s


def remote_workers_pair(
    root: Path, *, rate: int | None = None, latency_s: float = 0.0, decode_s: float = 0.015
) -> tuple[float, float]:
    """A run with 2 workers that each read a file over HTTP and decode it for ``decode_s``
    predicts 4 workers (``Change(workers=4)``); then 4 workers are measured. The server
    shares ``rate`` bytes/s among all connections, or answers each request ``latency_s``
    late."""
    if not any(root.iterdir()):
        make_files(root, 2 * FILES, SIZE)
    with ThrottledHTTPServer(root, rate_bytes_per_s=rate, latency_s=latency_s) as srv:
        urls = [srv.url + f"p0/f{i:05d}.bin" for i in range(2 * FILES)]

        def run(workers: int) -> RunRecord:
            ds = MeteredHttpDecodeDataset(urls, decode_s)
            return watch_run(DataLoader(ds, batch_size=4, num_workers=workers))

        predicted = evaluate(run(2), Change(workers=4)).predicted_samples_per_s
        four = run(4)
    assert four.measured_samples_per_s is not None
    return predicted, four.measured_samples_per_s


def relative_error(pair: tuple[float, float]) -> float:
    predicted, measured = pair
    return abs(predicted - measured) / measured


def median_error(
    make_pair: Callable[[], tuple[float, float]], pairs: int
) -> tuple[float, list[tuple[float, float]]]:
    """The median error over ``pairs`` repetitions: one pair disturbed by another job on a
    shared machine can't decide the result, a model that is wrong fails every pair."""
    got = [make_pair() for _ in range(pairs)]
    return statistics.median(relative_error(p) for p in got), got

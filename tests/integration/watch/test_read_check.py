"""The read check after a watched run, against storage built here: two workers that read at
every moment leave the run unable to tell a bandwidth from a latency limit, so the advice
to add workers assumed storage linear in readers (on a capped store that was 9.26x
predicted against 1.05x measured). The check, asked for with IOPROBE_READ_CHECK=1, measures
it: on a store that serves one read at a time (READ_S each, after LATENCY_S that overlaps)
no worker count passes 1 / READ_S samples/s, and the advice must not promise more; on one
whose reads overlap freely, more workers read faster. Unasked, it never runs: it calls the
dataset's own code outside the training's schedule."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.analysis.scenario import LINEAR_STORAGE
from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli

pytestmark = pytest.mark.slow

N, BATCH, WORKERS, STEP_S = 400, 4, 2, 0.001
LATENCY_S, READ_S = 0.004, 0.004


class Capped(Dataset[torch.Tensor]):
    def __init__(self) -> None:
        self.lock = multiprocessing.get_context("fork").Lock()

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(LATENCY_S)
        with self.lock:
            time.sleep(READ_S)
        return torch.tensor([float(i)])


class Overlapping(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(LATENCY_S + READ_S)
        return torch.tensor([float(i)])


def watched(ds: Dataset[torch.Tensor]) -> tuple[RunRecord, list[float]]:
    loader = ioprobe.watch(DataLoader(ds, batch_size=BATCH, num_workers=WORKERS))
    seen = []
    for batch in loader:
        time.sleep(STEP_S)
        seen += batch.flatten().tolist()
    return loader.run, seen


def worker_advice(rec: RunRecord) -> list[tuple[float, list[str], str]]:
    return [
        (r.predicted_samples_per_s or 0.0, r.unchecked, r.text)
        for r in rec.recommendations
        if r.change is not None and r.change.workers
    ]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOPROBE_READ_CHECK", "1")


@pytest.mark.usefixtures("asked")
def test_a_capped_store_is_measured_as_one_and_no_advice_passes_its_cap() -> None:
    rec, seen = watched(Capped())
    assert seen == [float(i) for i in range(N)]  # the loader's batches, as unwatched
    assert rec.watch is not None and rec.watch.read_scaling is not None
    scaling = rec.watch.read_scaling
    assert scaling.exponent is not None and scaling.exponent <= 0.3, scaling
    assert scaling.checked.startswith("a read check after the run: 2, 4, 8 processes")
    assert any("measured by a read check after the run" in n for n in rec.notes), rec.notes
    for predicted, unchecked, text in worker_advice(rec):
        assert LINEAR_STORAGE not in unchecked
        assert predicted <= 1.1 / READ_S, (predicted, rec.measured_samples_per_s)
        # the reason it gives is the one measured: readers share the store
        assert "storage reads as one shared bandwidth" in text, text
    assert multiprocessing.active_children() == []


@pytest.mark.usefixtures("asked")
def test_reads_that_overlap_are_measured_as_a_latency_limit() -> None:
    rec, _ = watched(Overlapping())
    assert rec.watch is not None and rec.watch.read_scaling is not None
    scaling = rec.watch.read_scaling
    assert scaling.exponent is not None and scaling.exponent >= 0.7, scaling
    assert scaling.checked
    # more workers read faster: the advice adds them, with nothing assumed of storage
    advice = worker_advice(rec)
    assert advice and advice[0][0] > 1.5 * (rec.measured_samples_per_s or 0.0)
    assert all(LINEAR_STORAGE not in u for _, u, _ in advice)
    assert all("one shared bandwidth" not in t for _, _, t in advice)


class Logging(Overlapping):
    """Appends each index it loads to a log file of its own: what the user's code does
    beyond its process, which a read check would add lines to."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __getitem__(self, i: int) -> torch.Tensor:
        with self.log.open("a") as f:
            f.write(f"{i}\n")
        return super().__getitem__(i)


@pytest.mark.parametrize("setting", [None, "0"], ids=["unasked", "off"])
def test_the_check_is_left_out_unless_the_user_asks_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str | None
) -> None:
    if setting is None:
        monkeypatch.delenv("IOPROBE_READ_CHECK", raising=False)
    else:
        monkeypatch.setenv("IOPROBE_READ_CHECK", setting)
    rec, _ = watched(Capped())
    assert rec.watch is not None and rec.watch.read_scaling is not None
    assert rec.watch.read_scaling.exponent is None and not rec.watch.read_scaling.checked
    # the advice then says what it assumes beside its number, and how to measure it
    assert any(LINEAR_STORAGE in u for _, u, _ in worker_advice(rec)), rec.recommendations
    assert any("IOPROBE_READ_CHECK=1" in t for _, _, t in worker_advice(rec))
    # the user's own log holds the loader's loads, once each, as unwatched
    log = tmp_path / "loads.log"
    watched(Logging(log))
    assert sorted(map(int, log.read_text().split())) == list(range(N))


SCRIPT = """
import time
from torch.utils.data import DataLoader
from tests.integration.watch.test_read_check import BATCH, STEP_S, WORKERS, Capped
for b in DataLoader(Capped(), batch_size=BATCH, num_workers=WORKERS):
    time.sleep(STEP_S)
    print(int(b.sum()))
"""


def test_under_ioprobe_run_the_check_runs_at_exit_and_the_script_prints_as_unwatched(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "IOPROBE_READ_CHECK": "1"}
    plain = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    out = tmp_path / "run.json"
    proc = run_cli(
        "run",
        "--json",
        str(out),
        "--",
        sys.executable,
        str(script),
        env={"IOPROBE_READ_CHECK": "1"},
    )
    assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout), proc.stderr
    rec = RunRecord.load(out)
    assert rec.watch is not None and rec.watch.read_scaling is not None
    assert rec.watch.read_scaling.checked, rec.watch.read_scaling

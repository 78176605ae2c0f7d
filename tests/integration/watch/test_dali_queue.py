"""DALI's prefetch queue, advised from a watched pipeline and held to a rerun with the advice
applied: a consumer whose steps come in bursts (five of 2 ms, then one of 100 ms) beside a
pipeline about as fast on average, which a deeper queue lets run ahead through the bursts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nvidia.dali")

from nvidia.dali.plugin.pytorch import DALIGenericIterator

import ioprobe
from ioprobe.analysis import dali_queue
from ioprobe.analysis.loader_sim import Setting
from ioprobe.record import RunRecord
from tests.fixtures.dali_pipes import decode_resize, make_jpegs
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow

STEPS_MS = (2, 2, 2, 2, 2, 100)
EPOCHS = 2


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_jpegs(tmp_path_factory.mktemp("jpegs"), 320, size=(240, 320))


def watched(root: Path, depth: int) -> RunRecord:
    pipe = decode_resize(str(root), batch_size=8, num_threads=2, prefetch_queue_depth=depth)
    it: Any = ioprobe.watch(DALIGenericIterator(pipe, ["image", "label"], reader_name="Reader"))
    n = 0
    for _ in range(EPOCHS):
        for _ in it:
            time.sleep(STEPS_MS[n % len(STEPS_MS)] / 1e3)
            n += 1
        it.reset()
    rec: RunRecord = it.run
    return rec


def fastest(root: Path, depth: int) -> RunRecord:
    """The faster of two runs: a shared host only ever slows one down."""
    runs = [watched(root, depth) for _ in range(2)]
    return max(runs, key=lambda r: r.measured_samples_per_s or 0.0)


def test_a_deeper_queue_advised_for_a_bursty_consumer_comes_true_on_a_rerun(
    jpegs: Path, tmp_path: Path
) -> None:
    rec = fastest(jpegs, 2)
    first = rec.recommendations[0]
    assert first.change is not None and first.change.prefetch_factor, first.text
    depth = first.change.prefetch_factor
    assert depth > 2 and first.text.startswith("Set prefetch_queue_depth="), first.text
    assert first.predicted_samples_per_s is not None
    rerun = fastest(jpegs, depth).measured_samples_per_s
    assert rerun is not None
    predicted = first.predicted_samples_per_s
    assert rerun > 1.1 * (rec.measured_samples_per_s or 0.0), (rerun, rec.measured_samples_per_s)
    assert abs(predicted / rerun - 1) <= 0.15, (predicted, rerun, rec.measured_samples_per_s)
    # the what-if of the same depth is the same replay's
    path = tmp_path / "run.json"
    rec.save(path)
    pred = dali_queue.predict(rec, Setting(2, depth, True))
    assert pred is not None and pred.samples_per_s == pytest.approx(predicted)
    proc = run_cli("whatif", str(path), "--prefetch-factor", str(depth))
    assert proc.returncode == 0, proc.stderr
    assert "replaying the run's logged batches" in proc.stdout
    refused = run_cli("whatif", str(path), "--in-order", "false")
    assert refused.returncode == 2
    assert "a DALI pipeline hands its batches over in order" in refused.stderr

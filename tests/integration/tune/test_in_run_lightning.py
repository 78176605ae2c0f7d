"""``ioprobe tune --in-run`` around an unchanged Lightning script: the trials land in the
training loader's first epoch (not the validation loader that Lightning's sanity check
iterates first), and the Trainer trains every epoch whole, the epochs after the trials as
unwatched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli

pytest.importorskip("lightning")

pytestmark = pytest.mark.slow

SCRIPT = str(REPO / "tests" / "fixtures" / "lightning_in_run.py")


# 15-35 s of reruns on 2 cores: in `make validate`, so the default run keeps to 15 minutes
@pytest.mark.long
def test_in_run_trials_land_in_the_training_loader_and_the_trainer_trains_whole(
    tmp_path: Path,
) -> None:
    plain, tuned, record = tmp_path / "plain.json", tmp_path / "tuned.json", tmp_path / "t.json"
    # 200 batches an epoch: the first window (52) and one planned, of up to 64 workers (114)
    subprocess.run([sys.executable, SCRIPT, "3200", str(plain)], check=True, timeout=300)
    result = run_cli(
        "tune", "--in-run", "--trial-batches", "50", "--trials", "1", "--json", str(record),
        "--", sys.executable, SCRIPT, "3200", str(tuned),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rec = RunRecord.load(record)
    assert rec.tune is not None and rec.tune.in_run and len(rec.tune.trials) == 2
    # the training loader's: its 2 workers, shuffled 3,200 samples (the validation loader
    # has 1 worker and 3,200 in order)
    assert rec.tune.trials[0].workers == 2
    assert rec.watch is not None and rec.watch.settings.sampler == "RandomSampler"
    ran, want = json.loads(tuned.read_text()), json.loads(plain.read_text())
    assert [len(e) for e in ran["epochs"]] == [200, 200]
    assert sorted(ran["epochs"][0]) == sorted(want["epochs"][0])
    assert ran["epochs"][1] == want["epochs"][1]
    if all(t.in_order for t in rec.tune.trials):
        assert ran["weights"] == want["weights"]

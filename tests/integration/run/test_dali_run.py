"""`ioprobe run` on an unchanged DALI training script (tests/fixtures/dali_train.py): it trains
as it does plainly (the same lines, the same exit code) and leaves a record with DALI's
operators, timed by the NVTX injection library that `ioprobe run` arms, its verdict and its
capacities: for DALIGenericIterator, DALIClassificationIterator with auto_reset, and a
pipeline driven with run()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nvidia.dali")

from ioprobe.collect import nvtx
from tests.fixtures.dali_pipes import make_jpegs
from tests.support.cli import REPO, run_cli

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]

SCRIPT = str(REPO / "tests" / "fixtures" / "dali_train.py")
FILES, BATCH, EPOCHS = 44, 8, 2


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_jpegs(tmp_path_factory.mktemp("jpegs"), FILES, (240, 320))


@pytest.mark.parametrize("mode", ["generic", "classification", "pipeline"])
def test_an_unchanged_dali_script_trains_the_same_and_leaves_its_record(
    jpegs: Path, tmp_path: Path, mode: str
) -> None:
    args = [sys.executable, SCRIPT, str(jpegs), mode, str(EPOCHS), "2"]
    plain = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "run.json"
    watched = run_cli("run", "--json", str(out), "--", *args)
    assert watched.returncode == 0, watched.stderr
    lines = [ln for ln in plain.stdout.splitlines() if ln.startswith(("epoch", "run"))]
    assert lines and lines == [
        ln for ln in watched.stdout.splitlines() if ln.startswith(("epoch ", "run "))
    ]

    rec = json.loads(out.read_text())
    assert rec["kind"] == "watch" and rec["bottleneck"] in ("storage", "cpu", "gpu")
    assert rec["watch"]["settings"]["framework"] == "dali"
    dali = rec["dali"]
    assert dali["pipeline"]["wrapper"] == ("pipeline" if mode == "pipeline" else "iterator")
    ops = {o["name"]: o for o in dali["operators"]}
    if nvtx.library_path() is not None:  # the install built it: operators timed one by one
        assert dali["timing"] == "nvtx"
        assert {"decoders.image", "readers.file"} <= set(ops)
        # every batch the script took was decoded while watched, but those an iterator
        # prepared in its __init__ before the watch began: its prefetch queue (depth 2) and,
        # once in a full run (9 calls for 10), the run its asynchronous executor had begun
        taken = EPOCHS * 4 if mode == "pipeline" else EPOCHS * -(-FILES // BATCH) - 3
        assert ops["decoders.image"]["calls"] >= taken
        assert ops["decoders.image"]["cpu_seconds"] > 0
    # DALI's threads measured before DALI shut its pipelines down at exit
    assert dali["threads"] and sum(dali["threads"].values()) > 0
    assert rec["stages"]["cpu"]["capacity_samples_per_s"] > 0
    samples = sum(e["samples"] for e in rec["watch"]["epochs"])
    assert samples == (EPOCHS * 4 * BATCH if mode == "pipeline" else EPOCHS * FILES)
    if mode != "pipeline":
        assert len(rec["watch"]["epochs"]) == EPOCHS
    assert "What to change" in watched.stderr  # the report; the script keeps stdout

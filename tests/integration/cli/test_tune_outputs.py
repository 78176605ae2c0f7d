"""``ioprobe tune``'s outputs: one that cannot be written costs that one alone. Nothing here
measures against the clock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO, run_cli

IN_RUN = str(REPO / "tests" / "fixtures" / "in_run_train.py")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this host")
def test_an_output_that_cannot_be_written_costs_that_output_alone(tmp_path: Path) -> None:
    # --json failed first and --md was never tried: the trials' report was lost
    md = tmp_path / "tune.md"
    result = run_cli(
        "tune", "--in-run", "--trial-batches", "50", "--trials", "1",
        "--json", "/dev/full", "--md", str(md), "--",
        sys.executable, IN_RUN, "3200", str(tmp_path / "out.json"), "2", "1", "0.5",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("ioprobe: error: --json /dev/full")
    assert "Traceback" not in result.stderr
    assert "trial" in md.read_text()

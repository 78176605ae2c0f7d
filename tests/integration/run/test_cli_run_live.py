"""``ioprobe run --live``: the script's process draws the panel where stderr is a terminal,
and where it is not, nothing changes at all."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli, run_cli_on_terminal

pytestmark = pytest.mark.slow

TRAIN = (sys.executable, "-m", "tests.fixtures.train_script")
# one loader, exit code 0, 2 workers, 1,152 samples of 4 ms CPU: about 2.3 s of loading
ARGS = ("1", "0", "2", "12")


def _shape(rec: dict[str, Any]) -> dict[str, Any]:
    """What two runs of the same script agree on: everything but the timings, and the
    verdict drawn from them (a 0.4 s run's close call may tip either way on a busy host)."""
    return {
        "keys": sorted(rec),
        "kind": rec["kind"],
        "complete": rec["complete"],
        "epochs": [(e["samples"], e["batches"]) for e in rec["watch"]["epochs"]],
        "stages": sorted(k for k, v in rec["stages"].items() if v is not None),
    }


def test_with_stderr_not_a_terminal_live_changes_nothing(tmp_path: Path) -> None:
    plain = run_cli("run", "--json", str(tmp_path / "plain.json"), "--", *TRAIN, "1", "3")
    live = run_cli("run", "--live", "--json", str(tmp_path / "live.json"), "--", *TRAIN, "1", "3")
    assert (live.returncode, plain.returncode) == (3, 3), live.stderr
    assert live.stdout == plain.stdout == "trained on 96 samples\n"
    assert "\x1b" not in live.stderr  # no panel, no cursor control
    assert "ioprobe live" not in live.stderr
    numbers = re.compile(r"\d[\d,.]*")
    assert (
        numbers.sub("#", live.stderr).splitlines()[0]
        == numbers.sub("#", plain.stderr).splitlines()[0]
    )
    got = json.loads((tmp_path / "live.json").read_text())
    want = json.loads((tmp_path / "plain.json").read_text())
    assert _shape(got) == _shape(want)
    assert got["watch"]["epochs"][0]["samples"] == 96


SHOW_ENV = (
    "import os\n"
    "from ioprobe.loaders import run_hook\n"
    "print(os.environ.get('IOPROBE_LIVE'), run_hook.live_requested())\n"
)


def test_the_script_is_told_to_draw_by_live_alone() -> None:
    on = run_cli("run", "--live", "--", sys.executable, "-c", SHOW_ENV)
    assert on.returncode == 0, on.stderr
    assert on.stdout == "1 True\n"
    # without --live, a value left in the environment does not switch it on
    off = run_cli("run", "--", sys.executable, "-c", SHOW_ENV, env={"IOPROBE_LIVE": "1"})
    assert off.returncode == 0, off.stderr
    assert off.stdout == "None False\n"


def test_on_a_terminal_the_script_draws_the_panel_and_clears_it(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc, shown = run_cli_on_terminal("run", "--live", "--json", str(out), "--", *TRAIN, *ARGS)
    assert proc.returncode == 0, shown
    assert proc.stdout == b"trained on 1152 samples\n"  # stdout, a pipe, left alone
    assert "ioprobe live · BurnDataset · epoch 1" in shown
    assert "◀ limiting now" in shown
    assert shown.rindex("\x1b[?25h") > shown.rindex("\x1b[?25l")  # the cursor is back
    rec = json.loads(out.read_text())
    assert rec["watch"]["epochs"][0]["samples"] == 1152
    # the summary after it, as without --live: its verdict is the record's (which stage
    # binds is the diagnosis tests' to hold; a loaded machine may tip it)
    after = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown[shown.rindex("\x1b[?25h") :])
    assert f"{rec['bottleneck']}-bound: the pipeline can deliver" in after, after
    assert "What to change" in after, after

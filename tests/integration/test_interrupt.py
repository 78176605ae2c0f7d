from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.cli import REPO

pytestmark = pytest.mark.slow


def interrupt_after(
    seconds: float, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        start_new_session=True,  # a process group of its own, as a terminal's Ctrl-C sees it
    )
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_while_building_the_sample_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    res = interrupt_after(1.5, "probe", env={"IOPROBE_CACHE_DIR": str(cache)})
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == "ioprobe: error: interrupted"
    assert not cache.exists() or not any(cache.iterdir())


def test_ctrl_c_during_decode_workers_exits_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):
        (data / f"{i}.bin").write_bytes(os.urandom(1000))
    res = interrupt_after(
        4.0,
        "probe",
        str(data),
        "--warm",
        "--loader",
        "tests.fixtures.burn:burn_10ms",
        "--time-budget",
        "30",
        env={"PYTHONPATH": str(REPO)},
    )
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert "KeyboardInterrupt" not in res.stderr

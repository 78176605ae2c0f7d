"""A terminal that hangs up (an ssh connection dropped) under a running command: writes to
it fail with EIO from then on, and the SIGHUP it sends ends the command as documented (the
probe with its outputs and 143, run with the script's 129), where the failing writes made
every command exit 1 with nothing written."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.support.cli import REPO

pytestmark = pytest.mark.slow

SCRIPT = """\
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(4)


for batch in DataLoader(Slow(), batch_size=8, num_workers=1):
    pass
"""


def _hang_up_after(argv: list[str], seconds: float, cwd: Path) -> int:
    """``argv`` with a new terminal as its controlling one (stdin, stdout and stderr all on
    it), drained for ``seconds``; then its master side closed, as sshd does when the
    connection drops. The command's exit code."""
    master, slave = os.openpty()

    def own_terminal() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # whatever the test runner ignores
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"},
        start_new_session=True,
        preexec_fn=own_terminal,
    )
    os.close(slave)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([master], [], [], 0.05)[0]:
            try:
                os.read(master, 65536)
            except OSError:
                break
    os.close(master)
    return proc.wait(timeout=120)


def test_the_probe_hung_up_writes_what_it_measured_and_exits_143(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for k in range(400):
        (data / f"{k:03d}.bin").write_bytes(os.urandom(20_000))
    out = tmp_path / "run.json"
    code = _hang_up_after(
        [sys.executable, "-m", "ioprobe", "probe", str(data), "--time-budget", "20",
         "--json", str(out)],
        3.0,
        tmp_path,
    )  # fmt: skip
    assert code == 143
    rec = json.loads(out.read_text())
    assert rec["complete"] is False and rec["interrupted"]


def test_run_hung_up_passes_the_sighup_on_and_exits_as_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code = _hang_up_after(
        [sys.executable, "-m", "ioprobe", "run", "--", sys.executable, str(script)], 4.0, tmp_path
    )
    assert code == 128 + signal.SIGHUP

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


def _hang_up_after(
    argv: list[str], seconds: float, cwd: Path, hup: signal.Handlers = signal.SIG_DFL
) -> int:
    """``argv`` with a new terminal as its controlling one (stdin, stdout and stderr all on
    it), drained for ``seconds``; then its master side closed, as sshd does when the
    connection drops. ``hup``: the command's SIGHUP disposition (SIG_IGN: under nohup). The
    command's exit code."""
    master, slave = os.openpty()

    def own_terminal() -> None:
        signal.signal(signal.SIGHUP, hup)  # whatever the test runner ignores
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


def test_a_summary_for_a_terminal_gone_under_nohup_is_dropped_and_the_files_written(
    tmp_path: Path,
) -> None:
    # SIGHUP ignored, the terminal gone before the command writes: every write to it fails
    # with EIO, where the summary's failed write made the command an error (exit 2)
    data = tmp_path / "data"
    data.mkdir()
    for k in range(20):
        (data / f"{k:03d}.bin").write_bytes(os.urandom(20_000))
    rec = tmp_path / "run.json"
    subprocess.run(
        [sys.executable, "-m", "ioprobe", "probe", str(data), "--time-budget", "3", "-q",
         "--json", str(rec)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, timeout=120,
        capture_output=True,
    )  # fmt: skip
    md = tmp_path / "report.md"
    argv = [sys.executable, "-m", "ioprobe", "report", str(rec), "--md", str(md)]
    assert _hang_up_after(argv, 0.0, tmp_path, hup=signal.SIG_IGN) == 0
    assert md.read_text().startswith("#")


def test_a_terminal_closed_once_the_command_is_over_leaves_its_exit_code() -> None:
    # the window between a command's end and the process's: a SIGHUP there killed the
    # process (exit -1 for a probe that had written its record and was exiting 0)
    code = (
        "import signal, sys\n"
        "from ioprobe.cli import main\n"
        "sys.argv = ['ioprobe', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert out.stdout.split()[-1] == "True", out.stderr

"""Ctrl-C and SIGTERM during ``ioprobe run``: the script stops as it would unwatched, is
never left running, its temporary folder goes, and what it saved is still reported.

The script (tests/fixtures/interrupted_script.py) prints one line once it is training: its
pid, its SIGINT handler, and the records folder inside ioprobe's temporary one."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import REPO

pytestmark = pytest.mark.slow

SCRIPT = str(REPO / "tests" / "fixtures" / "interrupted_script.py")
READY = re.compile(r"ready pid=(\d+) sigint=(\S+) records=(\S+)")


@dataclass
class Watched:
    proc: subprocess.Popen[str]
    script_pid: int
    sigint: str  # "default" when the script got Python's own Ctrl-C handler
    temp_dir: Path  # ioprobe's ioprobe-run-* folder

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def next_line(self, deadline_s: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        assert ready, f"no line from the script within {deadline_s} s"
        return self.proc.stdout.readline().strip()

    def assert_nothing_left(self) -> None:
        assert not self.temp_dir.exists()
        # reaped by ioprobe, not orphaned: a running orphan would still answer
        with pytest.raises(ProcessLookupError):
            os.kill(self.script_pid, 0)


def start(mode: str, tmp_path: Path, *, terminal: int | None = None) -> Watched:
    """``ioprobe run`` of the script, in a session of its own; with ``terminal`` (a pty's
    follower side) that is its controlling terminal, else it has none."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", "run", "--", sys.executable, SCRIPT, mode],
        stdin=terminal if terminal is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)},
        start_new_session=terminal is None,
        preexec_fn=_own_terminal if terminal is not None else None,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    found = READY.search(line)
    if found is None:
        proc.kill()
        raise AssertionError(f"the script never got ready: {line!r} {proc.communicate()}")
    return Watched(proc, int(found[1]), found[2], Path(found[3]).parent)


def _own_terminal() -> None:
    # a new session whose controlling terminal is stdin, as a login shell's job has
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_ctrl_c_to_the_group_stops_the_script_and_reports_what_it_saved(tmp_path: Path) -> None:
    run = start("plain", tmp_path)
    assert run.sigint == "default"  # the script can be interrupted at all
    os.killpg(run.proc.pid, signal.SIGINT)
    code, _, err = run.finish()
    assert code == 130, err
    assert "KeyboardInterrupt" in err  # the script's own traceback, as unwatched
    assert "incomplete: interrupted during epoch 1" in err  # the loader's summary
    run.assert_nothing_left()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_to_ioprobe_alone_is_passed_on_and_the_script_is_not_orphaned(
    tmp_path: Path, signum: int
) -> None:
    run = start("plain", tmp_path)
    os.kill(run.proc.pid, signum)
    code, _, err = run.finish()
    assert code == 128 + signum, err
    assert f"killed by {signal.Signals(signum).name}" in err
    run.assert_nothing_left()


@pytest.mark.shared  # behaviour alone: nothing measured against the clock
def test_a_signal_passed_on_to_a_stopped_script_wakes_it_to_act_on_it(tmp_path: Path) -> None:
    # a stopped script keeps a signal it handles pending until it is continued: ioprobe
    # passed SIGTERM on and waited for ever; a shell's `kill` sends SIGCONT after it
    run = start("term", tmp_path)
    os.kill(run.script_pid, signal.SIGSTOP)
    os.kill(run.proc.pid, signal.SIGTERM)
    code, out, err = run.finish(timeout=20)
    assert code == 3, err  # the script's own exit, from its handler
    assert "saved" in out
    run.assert_nothing_left()


def _alive(pid: int, within_s: float) -> bool:
    """Whether ``pid`` is still running after up to ``within_s`` (a zombie is not)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_ioprobe_s_group_reaches_every_process_of_the_script_s_group(
    tmp_path: Path, signum: int
) -> None:
    # round eleven: a hang-up to the job's group ended the script alone, and its forkserver
    # and DataLoader workers lived on holding ioprobe's pipes; unwatched, all of them die
    run = start("helper", tmp_path)
    helper = int(run.next_line(deadline_s=10).split("=")[1])
    os.killpg(run.proc.pid, signum)
    code, _, err = run.finish()
    assert code == 128 + signum, err
    assert not _alive(helper, within_s=5)
    run.assert_nothing_left()


def test_a_signal_to_ioprobe_alone_leaves_the_script_s_own_processes_as_unwatched(
    tmp_path: Path,
) -> None:
    # a script killed by its PID leaves the processes it started: so does one whose ioprobe
    # was sent the signal alone
    run = start("helper", tmp_path)
    helper = int(run.next_line(deadline_s=10).split("=")[1])
    try:
        os.kill(run.proc.pid, signal.SIGTERM)
        code, _, err = run.finish()
        assert code == 143, err
        assert _alive(helper, within_s=0.5)
    finally:
        os.kill(helper, signal.SIGKILL)
    run.assert_nothing_left()


def test_the_script_gets_one_sigint_and_may_clean_up_before_it_exits(tmp_path: Path) -> None:
    # a second SIGINT would interrupt the cleanup and end the script with 130
    run = start("cleanup", tmp_path)
    os.killpg(run.proc.pid, signal.SIGINT)
    code, out, err = run.finish()
    assert (code, out.strip()) == (3, "cleaned up"), err
    run.assert_nothing_left()


def test_a_second_ctrl_c_kills_a_script_that_carries_on(tmp_path: Path) -> None:
    run = start("stubborn", tmp_path)
    os.killpg(run.proc.pid, signal.SIGINT)
    assert run.next_line(deadline_s=10) == "carrying on"  # it shrugged the first one off
    os.killpg(run.proc.pid, signal.SIGINT)
    sent = time.monotonic()
    code, _, err = run.finish(timeout=10)
    assert time.monotonic() - sent < 5
    assert code == 130, err
    assert err.strip().splitlines()[-1] == "ioprobe: error: interrupted"
    run.assert_nothing_left()


def test_ctrl_c_typed_at_a_terminal_reaches_the_script_once(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    try:
        run = start("cleanup", tmp_path, terminal=follower)
        os.write(leader, b"\x03")  # the terminal sends SIGINT to its foreground group
        code, out, err = run.finish()
    finally:
        os.close(leader)
        os.close(follower)
    assert (code, out.strip()) == (3, "cleaned up"), err
    run.assert_nothing_left()


HANGING_READS = """
import time, torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 4000
    def __getitem__(self, i):
        if i >= 400: time.sleep(3600)  # indices the run never asks for; the check does
        time.sleep(0.004)
        return torch.tensor([i])
loader = DataLoader(DS(), batch_size=4, num_workers=2, sampler=range(400))
print(sum(int(b.sum()) for b in loader), flush=True)
"""


def test_ctrl_c_during_the_read_check_at_exit_keeps_the_record(tmp_path: Path) -> None:
    # the check's readers hang (>= 2 s): a Ctrl-C then raised KeyboardInterrupt past the
    # exit hook, a traceback and no record of a run that had ended
    script = tmp_path / "train.py"
    script.write_text(HANGING_READS)
    out = tmp_path / "run.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", "run", "--json", str(out), "--", sys.executable, script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "IOPROBE_READ_CHECK": "1"},
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready and proc.stdout.readline().strip() == str(sum(range(400)))
    time.sleep(0.8)  # the training has ended: the read check's first readers hang
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, err
    assert out.exists() and json.loads(out.read_text())["watch"]["epochs"]

"""What `ioprobe run` was started with, the script gets: a signal ignored where ioprobe was
started (`trap '' INT`, nohup, a job started with `&` from a script, a supervisor) stays
ignored for the script, which survives it as it would unwatched, where it died watched (130
for SIGINT, 143 for SIGTERM)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = pytest.mark.shared

SCRIPT = """
import os, signal, time
os.kill(os.getpid(), signal.{name})
time.sleep(0.2)
print("survived")
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_ignored_where_run_starts_stays_ignored_for_the_script(
    tmp_path: Path, name: str
) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT.format(name=name))
    signum = getattr(signal, name)

    def ignored() -> None:
        signal.signal(signum, signal.SIG_IGN)

    def start(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=60, preexec_fn=ignored,
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
        )  # fmt: skip

    plain = start(sys.executable, str(script))
    assert (plain.returncode, plain.stdout) == (0, "survived\n"), plain.stderr
    watched = start(sys.executable, "-m", "ioprobe", "run", "--", sys.executable, str(script))
    assert (watched.returncode, watched.stdout) == (0, "survived\n"), watched.stderr


def test_a_script_may_start_a_session_of_its_own_as_it_could_unwatched(tmp_path: Path) -> None:
    # outside a terminal the script had a process group of its own that it led, and a group
    # leader may not call setsid(): PermissionError, exit 1 (0 unwatched)
    script = tmp_path / "ss.py"
    script.write_text("import os\nos.setsid()\nprint(os.getsid(0) == os.getpid())\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    # as from a script or a supervisor: a shell leads the job's group, the command is in it
    def job(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", "-c", " ".join(shlex.quote(c) for c in cmd)], capture_output=True,
            text=True, env=env, timeout=60, start_new_session=True,
        )  # fmt: skip

    plain = job(sys.executable, str(script))
    watched = job(sys.executable, "-m", "ioprobe", "run", "--", sys.executable, str(script))
    assert (plain.returncode, plain.stdout) == (0, "True\n"), plain.stderr
    assert (watched.returncode, watched.stdout) == (0, "True\n"), watched.stderr


USR_SCRIPT = """
import signal, sys, time
mode = sys.argv[1]
if mode == "caught":
    signal.signal(signal.SIGUSR1, lambda *a: (print("checkpoint", flush=True), sys.exit(0)))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("mode", "signum", "code", "out"),
    [
        ("caught", signal.SIGUSR1, 0, "checkpoint"),
        ("default", signal.SIGUSR1, 128 + signal.SIGUSR1, ""),
        ("default", signal.SIGXCPU, 128 + signal.SIGXCPU, ""),  # a scheduler's CPU limit
        ("default", signal.SIGRTMIN + 3, 128 + signal.SIGRTMIN + 3, ""),
    ],
    ids=["usr1-caught", "usr1", "xcpu", "rtmin+3"],
)
def test_a_signal_to_run_reaches_the_script_as_it_would_unwatched(
    tmp_path: Path, mode: str, signum: int, code: int, out: str
) -> None:
    # left at its default it ended ioprobe alone: the script ran on, orphaned, and the
    # temporary folder stayed
    script = tmp_path / "usr.py"
    script.write_text(USR_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", "run", "--", sys.executable, str(script), mode],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signum)  # to ioprobe alone, as `kill -USR1 PID` sends it
    rest, _err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert rest.strip() == out
    assert [p.name for p in tmp_path.iterdir()] == ["usr.py"]  # nothing of ioprobe's left

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import REPO

pytestmark = pytest.mark.slow


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ioprobe", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        start_new_session=True,  # a process group of its own, as a terminal's Ctrl-C sees it
    )


def interrupt_after(
    seconds: float, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    proc = start(*args, env=env)
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_while_building_the_sample_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = tmp_path / "out.json"
    res = interrupt_after(1.5, "probe", "--json", str(out), env={"IOPROBE_CACHE_DIR": str(cache)})
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == "ioprobe: error: interrupted"
    assert not cache.exists() or not any(cache.iterdir())
    assert not out.exists()  # nothing was measured: nothing is written


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


def small_files(root: Path, n: int = 500) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"{i}.bin").write_bytes(os.urandom(2000))
    return root


def wait_for_workers(proc: subprocess.Popen[str], deadline_s: float = 60.0) -> None:
    """Until the probe has started its CPU phase's worker pool: the storage passes have
    ended and it is measuring. (Other children come and go before: the host's tools.)"""
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if any("spawn_main" in " ".join(_cmdline(c)) for c in me.children()):
            return
        time.sleep(0.05)
    raise AssertionError("the probe never started its worker pool")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:  # gone since it was listed
        return []


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated"),
        (signal.SIGHUP, 143, "terminated"),  # a closed terminal: as SIGTERM
    ],
)
def test_a_signal_while_measuring_writes_what_was_measured_marked_incomplete(
    tmp_path: Path, signum: int, code: int, word: str
) -> None:
    data = small_files(tmp_path / "data")
    out = tmp_path / "out.json"
    env = {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = start("probe", str(data), "--time-budget", "60", "--json", str(out), "-q", env=env)
    wait_for_workers(proc)
    workers = psutil.Process(proc.pid).children(recursive=True)
    sent = time.monotonic()
    # the whole group, as a terminal's Ctrl-C or a service manager's stop: workers get it too
    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 3.0
    assert proc.returncode == code, err
    assert "Traceback" not in err and "leaked" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ioprobe: error: {word} during cpu"), lines[0]
    rec = json.loads(out.read_text())
    assert rec["complete"] is False
    assert rec["interrupted"].startswith("cpu")
    assert rec["stages"]["storage"]["capacity_samples_per_s"] > 0
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive  # the pool's workers ended with it
    assert sorted(tmp_path.iterdir()) == sorted([data, out])  # no temporary file left


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGUSR1], ids=["kill-9", "usr1"])
def test_a_probe_killed_outright_takes_its_workers_with_it_quietly(
    tmp_path: Path, signum: int
) -> None:
    # a signal no handler sees (SIGKILL) or one ioprobe leaves at its default (SIGUSR1) ends
    # the probe at once; its pool's workers, orphaned, printed BrokenPipeError tracebacks
    # as their pipe to it broke, or lived on
    data = small_files(tmp_path / "data")
    env = {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = start("probe", str(data), "--time-budget", "60", "-q", env=env)
    wait_for_workers(proc)
    # past the pool's start (about 0.6 s here): a worker killed while spawn still hands it
    # its start-up data prints spawn's own EOFError before any code of ioprobe's runs in it
    time.sleep(1.5)
    workers = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signum)  # the probe alone, not its group
    _, err = proc.communicate(timeout=30)  # the workers hold its stderr open until they end
    assert proc.returncode == -signum
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive
    assert "Traceback" not in err, err

"""Every command whose stdout is a full device (``> /dev/full``) ends in one line and exit 2:
no ENOSPC traceback, no "Exception ignored" at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ioprobe.analysis import finalize
from tests.support.cli import REPO
from tests.unit.analysis.test_whatif import probe_record

COMMANDS = {
    "env": ["env"],
    "env --json -": ["env", "--json", "-"],
    "report": ["report", "RUN"],
    "report --md -": ["report", "RUN", "--md", "-"],
    "report --json -": ["report", "RUN", "--json", "-"],
    "whatif": ["whatif", "RUN", "--workers", "3"],
    "size": ["size", "RUN", "--gpus", "1,2"],
    "compare": ["compare", "RUN", "RUN"],
}


@pytest.fixture(scope="module")
def run_json(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("full") / "run.json"
    finalize(probe_record()).save(path)
    return str(path)


# stdout buffered, as it is for most users (no PYTHONUNBUFFERED): the summary's text stayed
# in the buffer after its failed write and the exit's flush printed "Exception ignored",
# status 120
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.mark.parametrize("stdout", ["as set", "buffered"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_full_stdout_is_one_line_and_exit_2(name: str, stdout: str, run_json: str) -> None:
    args = [run_json if a == "RUN" else a for a in COMMANDS[name]]
    base = os.environ if stdout == "as set" else BUFFERED
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "ioprobe", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**base, "PYTHONPATH": str(REPO), "COLUMNS": "120"},
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ioprobe: error: ") and "No space left on device" in lines[0]
    assert Path(run_json).exists()  # the input is untouched


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_stdout_whose_reader_left_is_one_line_and_exit_2(name: str, run_json: str) -> None:
    # rich and click each answer a broken pipe with a silent exit 1: ioprobe's own answer is
    # the one for every failed write
    args = [run_json if a == "RUN" else a for a in COMMANDS[name]]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: `ioprobe ... | head -0`
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ioprobe", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
    finally:
        os.close(write)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Broken pipe" in lines[0], proc.stderr


def _closing(*fds: int) -> Any:
    def close() -> None:
        for fd in fds:
            os.close(fd)

    return close


def _closed(args: list[str], cwd: Path, *fds: int) -> subprocess.CompletedProcess[str]:
    """``ioprobe ARGS`` started with descriptors ``fds`` closed (``>&-``), its stderr kept."""
    return subprocess.run(
        [sys.executable, "-m", "ioprobe", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        preexec_fn=_closing(*fds),
    )


@pytest.mark.parametrize("name", ["env", "report", "whatif", "size"])
def test_a_closed_stdout_drops_the_summary_and_keeps_the_outputs(
    name: str, run_json: str, tmp_path: Path
) -> None:
    # `ioprobe report run.json --md r.md >&-`: Python's stdout is None, whose flush at the
    # end was an AttributeError traceback, exit 1
    args = [run_json if a == "RUN" else a for a in COMMANDS[name]]
    out = tmp_path / "out.json"
    proc = _closed([*args, "--json", str(out)], REPO, 0, 1)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert out.stat().st_size > 0


@pytest.mark.parametrize(
    "args",
    [
        ["report", "RUN", "--md", "-"],
        ["report", "RUN", "--json", "/dev/stdout"],
        ["size", "RUN", "--gpus", "1", "--md", "-"],
        ["env", "--json", "-"],
        ["export", "dlio", "RUN"],
    ],
    ids=" ".join,
)
def test_an_output_asked_for_on_a_closed_stdout_is_refused_before_any_work(
    args: list[str], run_json: str, tmp_path: Path
) -> None:
    # it went to the /dev/null that stands in for the closed descriptor: exit 0, nothing
    # written, nothing said (`cat FILE >&-` fails)
    args = [run_json if a == "RUN" else a for a in args]
    proc = _closed(args, tmp_path, 1)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "stdout is closed" in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_closed_stderr_leaves_the_summary_and_the_exit_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ioprobe", "env"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        preexec_fn=_closing(2),
    )
    assert proc.returncode == 0 and "python" in proc.stdout.lower()


def test_a_probe_with_stderr_closed_measures_and_writes_its_record(tmp_path: Path) -> None:
    # its first progress line went to a stderr of None: exit 1, and no record
    data = tmp_path / "d"
    data.mkdir()
    for i in range(8):
        (data / f"{i}.bin").write_bytes(os.urandom(4000))
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ioprobe", "probe", str(data), "--time-budget", "2",
         "--loader", "raw", "--json", str(out)],
        stdout=subprocess.DEVNULL, cwd=REPO, timeout=120, preexec_fn=_closing(2),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0
    assert out.stat().st_size > 0

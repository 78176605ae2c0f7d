"""Files the user names as input (a record, ``--catalog``, ``--cost``) are read with a size
limit and a deadline: a FIFO, /dev/zero or /dev/urandom ends the command in one line within
seconds, never a hang and never memory read without end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from tests.support.cli import REPO, assert_one_line_error, run_cli
from tests.unit.analysis.test_whatif import probe_record


@pytest.fixture
def run_json(tmp_path: Path) -> str:
    path = tmp_path / "run.json"
    finalize(probe_record()).save(path)
    return str(path)


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.fixture
def held_fifo(fifo: str) -> Iterator[str]:
    """A FIFO with a writer that never writes: a reader waits for its first byte."""
    fd = os.open(fifo, os.O_RDWR)
    yield fifo
    os.close(fd)


def _args(where: str, path: str, run_json: str) -> list[str]:
    return {
        "record": ["report", path],
        "catalog": ["size", run_json, "--gpus", "1,2", "--catalog", path],
        "cost": ["size", run_json, "--gpus", "1,2", "--cost", path],
    }[where]


@pytest.mark.parametrize("where", ["record", "catalog", "cost"])
@pytest.mark.parametrize(
    ("source", "says"),
    [("/dev/zero", "bytes allowed"), ("/dev/urandom", "bytes allowed"), ("DIR", "directory")],
)
def test_an_endless_device_or_a_directory_is_refused_in_one_line(
    where: str, source: str, says: str, run_json: str, tmp_path: Path
) -> None:
    path = str(tmp_path) if source == "DIR" else source
    if where == "record" and source != "DIR":
        says = "not valid JSON"  # a record is a JSON object: its first byte tells
    t0 = time.monotonic()
    proc = run_cli(*_args(where, path, run_json), timeout=60)
    assert_one_line_error(proc, path, says)
    assert time.monotonic() - t0 < 30


def test_a_stream_that_is_no_record_is_refused_at_its_first_byte() -> None:
    # `yes | ioprobe report /dev/stdin` read a gigabyte of "y" before it said so: 30 s
    t0 = time.monotonic()
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        proc = run_cli("report", "/dev/stdin", stdin=yes.stdout, timeout=60)
    finally:
        yes.kill()
        yes.wait()
    assert_one_line_error(proc, "/dev/stdin", "not valid JSON (it does not start with '{')")
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("where", ["record", "catalog", "cost"])
def test_a_fifo_no_one_writes_to_ends_at_once(where: str, fifo: str, run_json: str) -> None:
    t0 = time.monotonic()
    proc = run_cli(*_args(where, fifo, run_json), timeout=60)
    assert time.monotonic() - t0 < 20
    assert "Traceback" not in proc.stderr
    # nothing arrived: an empty document, which is no record and no catalog; an empty price
    # list prices nothing, and the sizing runs without prices
    if where == "cost":
        assert proc.returncode == 0, proc.stderr
    else:
        assert_one_line_error(proc, fifo, "not valid JSON" if where == "record" else "tables")


def test_a_fifo_whose_writer_never_writes_gives_up_after_its_deadline(
    held_fifo: str, run_json: str
) -> None:
    t0 = time.monotonic()
    proc = run_cli("report", held_fifo, timeout=60)
    took = time.monotonic() - t0
    assert_one_line_error(proc, held_fifo, "nothing arrived for 10 s")
    assert 9 < took < 30


def test_a_record_through_a_pipe_is_read(run_json: str, tmp_path: Path) -> None:
    # process substitution, <(cat run.json), hands ioprobe a pipe: it must still be read
    r, w = os.pipe()
    os.set_inheritable(r, True)
    data = Path(run_json).read_bytes()
    pid = os.fork()
    if pid == 0:  # the writer: slow, as a remote cat would be
        os.close(r)
        time.sleep(0.5)
        os.write(w, data)
        os._exit(0)
    os.close(w)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ioprobe", "report", f"/dev/fd/{r}"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"},
            timeout=60,
            pass_fds=(r,),
        )
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert proc.returncode == 0, proc.stderr
    assert "cpu-bound: the pipeline can deliver" in proc.stdout

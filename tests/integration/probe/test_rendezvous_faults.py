"""A distributed probe, and ``ioprobe.loaders.gather``, whose rendezvous (MASTER_ADDR and
MASTER_PORT) is no rank's store: a plain TCP listener that accepts and never speaks (it hung
for ever), a port another program holds for rank 0, a port nothing listens on. Each ends
within its timeout and a bounded margin, in one line, with a non-zero exit."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.collect.group import INIT_GRACE_S
from tests.support.cli import REPO

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0  # --rank-timeout and --time-budget: the group's timeout is the larger
GRACE_S = INIT_GRACE_S  # the watchdog's margin past torch's own timeout
# starting the interpreter and importing torch on a busy 2-core machine (about 3 s idle)
START_S = 20.0


@contextlib.contextmanager
def _silent_listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(srv.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        srv.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_env(rank: int, port: int) -> dict[str, str]:
    """What torchrun sets in one rank of two (no agent store: the ranks make their own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "SLURM"))}
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "COLUMNS": "120",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _probe(rank: int, port: int, data: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    args = [sys.executable, "-m", "ioprobe", "probe", str(data), "--loader", "raw", "-q"]
    args += ["--time-budget", f"{TIMEOUT_S:g}", "--rank-timeout", f"{TIMEOUT_S:g}"]
    args += ["--json", str(data.parent / "run.json")]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        env=_rank_env(rank, port),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return proc, time.monotonic() - start


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "a.bin").write_bytes(os.urandom(4096))
    return root


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ioprobe: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "frame #" not in proc.stderr
    return lines[0]


def test_a_listener_that_never_speaks_on_master_port_ends_the_probe_in_one_line(
    data: Path,
) -> None:
    with _silent_listener() as port:
        proc, took = _probe(1, port, data)
    line = _one_line(proc)
    assert proc.returncode == 3, proc.stderr
    assert f"nothing at 127.0.0.1:{port} answered as the ranks' store" in line
    assert "another program may hold MASTER_PORT" in line
    # it waited for ever; now torch's timeout, the watchdog's grace and the start
    assert TIMEOUT_S + GRACE_S <= took < TIMEOUT_S + GRACE_S + START_S, took
    assert not (data.parent / "run.json").exists()  # nothing was measured


def test_rank_zero_on_a_port_another_program_holds_says_so(data: Path) -> None:
    with _silent_listener() as port:
        proc, took = _probe(0, port, data)
    line = _one_line(proc)
    assert proc.returncode == 3, proc.stderr
    assert f"MASTER_PORT {port} is taken on this host by another program" in line
    assert took < TIMEOUT_S + START_S, took


def test_a_port_nothing_listens_on_ends_at_the_timeout_without_torchs_log(data: Path) -> None:
    port = _closed_port()
    proc, took = _probe(1, port, data)
    line = _one_line(proc)  # torch's C++ log of every retried connection stays off stderr
    assert proc.returncode == 3, proc.stderr
    assert "the ranks did not meet within 1 s" in line
    assert took < TIMEOUT_S + GRACE_S + START_S, took


def test_gather_under_a_silent_listener_returns_the_record_alone_in_bounded_time() -> None:
    """A training script's ``gather`` after its loop: it must not hang the script, which
    goes on with this rank's record and one line on stderr."""
    script = (
        "from ioprobe.loaders import gather as g\n"
        "out = g.gather(None, merge=lambda rs: rs[0], timeout_s=1.0)\n"
        "print('returned', out)\n"
    )
    with _silent_listener() as port:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", script],
            env={**_rank_env(1, port), "TORCH_CPP_LOG_LEVEL": "FATAL"},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "returned None"
    assert "the ranks' records were not gathered: rank 1: nothing at" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert 1.0 + GRACE_S <= took < 1.0 + GRACE_S + START_S, took

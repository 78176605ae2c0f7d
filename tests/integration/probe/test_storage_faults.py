"""The real CLI against storage that misbehaves on 127.0.0.1: a server that accepts and never
answers, one that lists fine and then trickles bytes, one that refuses every object, and one
that has lost half of them. The probe ends within its budget plus the documented margin,
with a record or one line, and never counts a failed read as a delivered sample."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path

import pytest

from ioprobe.collect.budget import margin_s
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import ThrottledHTTPServer, _Handler, make_files

pytestmark = pytest.mark.slow

BUDGET = 5.0
# the margin holds from the probe's start; the command's own start-up (the interpreter, the
# imports) comes on top, longer on a loaded host
STARTUP_S = 1.0
TRICKLE = -1  # a fault: answer 200, then send one byte every 0.1 s


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never says a word."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(sock.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


class _FaultyHandler(_Handler):
    server: FaultyHTTPServer

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        fault = self.server.fault(path) if path.endswith(".bin") else None
        if fault is None:
            super().do_GET()
        elif fault == TRICKLE:
            self._trickle()
        else:
            self._send_empty(HTTPStatus(fault))

    def _trickle(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up, or the server stopped
            for _ in range(1_000_000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)


class FaultyHTTPServer(ThrottledHTTPServer):
    """The repo's file server, whose GETs of ``.bin`` files get ``fault(path)``: an HTTP status,
    TRICKLE, or None for the file. Listings and HEAD requests stay healthy, so the target lists and
    every file has its size."""

    def __init__(self, root: Path, fault: Callable[[str], int | None]) -> None:
        super().__init__(root)
        self.fault = fault
        self.RequestHandlerClass = _FaultyHandler


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    make_files(root, 200, 1000, seed=5)
    return root


def _timed_probe(url: str, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    proc = run_cli("probe", url, "--loader", "raw", "--time-budget", f"{BUDGET:g}", "-q", *args)
    return time.monotonic() - t0, proc


def test_a_server_that_never_answers_fails_within_the_budget() -> None:
    with silent_server() as url:
        took, proc = _timed_probe(url)
    assert took < BUDGET + margin_s(BUDGET) + STARTUP_S, took
    assert_one_line_error(proc, url, "did not answer within the time budget")


def test_a_server_that_trickles_bytes_ends_within_the_budget(data: Path, tmp_path: Path) -> None:
    with FaultyHTTPServer(data, lambda path: TRICKLE) as srv:
        took, proc = _timed_probe(srv.url, "--json", str(tmp_path / "run.json"))
    assert took < BUDGET + margin_s(BUDGET) + STARTUP_S, took
    # nothing was read, so there is nothing to report: one line, no traceback
    assert_one_line_error(proc, srv.url, "did not answer within the time budget")


def test_a_slow_server_gives_a_record_within_the_budget(tmp_path: Path) -> None:
    root = tmp_path / "slow"
    make_files(root, 40, 20_000, seed=6)
    out = tmp_path / "run.json"
    # 100 kB/s: a file in 0.2 s, but an end-to-end batch of 32 files in 6.4 s
    with ThrottledHTTPServer(root, rate_bytes_per_s=100_000) as srv:
        took, proc = _timed_probe(srv.url, "--compute-ms-per-batch", "1", "--json", str(out))
    assert took < BUDGET + margin_s(BUDGET) + STARTUP_S, took
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["stages"]["storage"]["read_bytes_per_s"] == pytest.approx(100_000, rel=0.3)
    assert rec["duration_s"] < BUDGET + margin_s(BUDGET)
    # no batch could arrive in time: no rate is invented for the end-to-end run
    assert rec["pipeline"]["samples"] == 0
    assert rec["measured_samples_per_s"] is None


@pytest.mark.parametrize("status", [403, 500])
def test_every_get_refused_after_a_working_listing_is_one_line(data: Path, status: int) -> None:
    with FaultyHTTPServer(data, lambda path: status) as srv:
        took, proc = _timed_probe(srv.url)
    assert took < BUDGET + margin_s(BUDGET) + STARTUP_S, took
    assert_one_line_error(proc, "every read failed", f"HTTP {status}")


def _odd(path: str) -> int | None:
    return HTTPStatus.NOT_FOUND if int(path[-9:-4]) % 2 else None  # f00001.bin, f00003.bin, ...


def test_half_the_objects_missing_are_counted_and_never_delivered(
    data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run.json"
    with FaultyHTTPServer(data, _odd) as srv:
        proc = run_cli(
            "probe",
            srv.url,
            "--loader",
            "raw",
            "--time-budget",
            "8",
            "--compute-ms-per-batch",
            "1",
            "--batch-size",
            "20",
            "--workers",
            "2",
            "--json",
            str(out),
            "-q",
        )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["dataset"]["files"] == 200
    assert rec["dataset"]["read_errors"] == {"not_found": 100}
    assert rec["dataset"]["skipped"] == {}  # the listing lost nothing: no "0 vanished"
    pipeline = rec["pipeline"]
    delivered = pipeline["tracks"][0]["columns"]["samples"]
    assert sum(pipeline["tracks"][0]["columns"]["batches"]) == 10  # the whole dataset
    assert pipeline["errors"] == 100
    assert sum(delivered) == 100
    assert "100 of 200 files failed to read: 100 not found" in " ".join(proc.stdout.split())

"""A server on 127.0.0.1 that lists files with their sizes, then answers every GET by ignoring
Range and streaming bytes without end (no Content-Length): the probe's reads take no more than
they asked for, so it ends within its budget with its memory bounded, where fsspec's
``cat_file`` read the endless body into memory until the process held gigabytes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from ioprobe.collect.budget import margin_s
from tests.support.cli import REPO
from tests.support.servers import ThrottledHTTPServer, _Handler, make_files

pytestmark = pytest.mark.slow

BUDGET = 4.0
# The probe's peak memory (its worker processes' included), taken by a small Python that starts
# it and reads wait4's ru_maxrss: a process started straight from this one would count this
# process's own peak, which the kernel carries over exec (600 MB to 1.6 GB after the DALI and
# Accelerate tests have run here), not the probe's.
PEAK_OF = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


class _EndlessHandler(_Handler):
    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = self.server._resolve(path)  # type: ignore[attr-defined]
        if target is None or target.is_dir():
            super().do_GET()
            return
        self.send_response(200)  # Range ignored
        self.send_header("Connection", "close")
        self.end_headers()
        block = os.urandom(1 << 16)
        with contextlib.suppress(OSError):  # the client dropped the connection
            while True:
                self.wfile.write(block)
        self.close_connection = True


def test_a_server_streaming_without_end_cannot_grow_the_probe(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_files(root, 20, 50_000, seed=11)
    with ThrottledHTTPServer(root) as srv:
        srv.RequestHandlerClass = _EndlessHandler
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                *(sys.executable, "-c", PEAK_OF, str(tmp_path / "peak")),
                *(sys.executable, "-m", "ioprobe", "probe", srv.url, "--loader", "raw"),
                *("--time-budget", f"{BUDGET:g}", "-q", "--json", str(tmp_path / "run.json")),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        took = time.monotonic() - t0
    peak_mb = int((tmp_path / "peak").read_text()) / 1024
    stderr = proc.stderr
    assert "Traceback" not in stderr, stderr
    assert took < BUDGET + margin_s(BUDGET) + 3.0, took
    assert peak_mb < 600, peak_mb  # the interpreter, numpy and the reads' own buffers: 180 MB

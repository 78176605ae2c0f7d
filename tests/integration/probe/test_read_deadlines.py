"""Reads the probe makes before measuring (the TFRecord header check of files named without an
extension, an ``index.json``) against a server on 127.0.0.1 that answers every file GET by
sending one byte every half second: no socket read timeout trips, so only a deadline on the
read ends it. The probe must end within its budget plus the documented margin."""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from ioprobe.collect.budget import margin_s
from tests.support.cli import run_cli
from tests.support.servers import ThrottledHTTPServer, _Handler, make_files

pytestmark = pytest.mark.slow

BUDGET = 5.0
STARTUP_S = 1.5  # the interpreter's and the imports' start, on a loaded 2-core host


class _DripHandler(_Handler):
    server: DripServer

    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = self.server._resolve(path)
        if target is None or target.is_dir() or not self.server.drips(target):
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(target.stat().st_size))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up, or the server stopped
            for byte in target.read_bytes():
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.5)


class DripServer(ThrottledHTTPServer):
    """The repo's file server; a file GET for which ``drips(path)`` holds is sent a byte
    every 0.5 s (listings and HEADs stay healthy)."""

    def __init__(self, root: Path, drips: Callable[[Path], bool]) -> None:
        super().__init__(root)
        self.drips = drips
        self.RequestHandlerClass = _DripHandler


def _renamed_without_extension(root: Path) -> None:
    for i, p in enumerate(sorted(root.rglob("*.bin"))):
        p.rename(p.with_name(f"train-{i:05d}-of-00030"))


CASES = {
    # TensorFlow's shard names: the layout is found by reading each first file's header
    "no extension": lambda root: _renamed_without_extension(root),
    # an index.json beside the files: the layout is read from it first
    "index.json": lambda root: (root / "p0" / "index.json").write_text('{"shards": []}'),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_dripping_server_cannot_hold_the_layout_check_past_the_budget(
    case: str, tmp_path: Path
) -> None:
    root = tmp_path / "data"
    make_files(root, 30, 2_000, seed=7)
    CASES[case](root)
    with DripServer(root, lambda p: True) as srv:
        t0 = time.monotonic()
        proc = run_cli(
            "probe", srv.url, "--loader", "raw", "--time-budget", f"{BUDGET:g}", "-q", timeout=120
        )
        took = time.monotonic() - t0
    assert took < BUDGET + margin_s(BUDGET) + STARTUP_S, (took, proc.stderr)
    assert "Traceback" not in proc.stderr
    # every read drips: nothing can be measured in time, which is one line
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr

"""Servers that answer oddly, against the real CLI: a redirect loop, files with no
Content-Length, a HEAD that overstates a file's size, bodies shorter than their
Content-Length. Each ends in a line that says what happened, or a record that counts it;
nothing here measures against the clock."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, probe_json, run_cli


class _Odd(BaseHTTPRequestHandler):
    """``/loop/...`` redirects to itself; ``/nolen/`` lists two files whose responses carry
    no Content-Length (the body ends as the connection closes); ``/liar/`` lists four whose
    HEAD says 20,000 bytes, where each has 10,000 (``/liar/honest.bin``, listed there too,
    has what its HEAD says); ``/locked/`` lists three files, each answered 403 and
    ``/locked/gone.bin`` 404."""

    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:
        if self.path.startswith("/short/"):
            self._short()
        elif self.path.startswith("/liar/") and not self.path.endswith("/"):
            self.send_response(200)
            self.send_header("Content-Length", "10000" if "honest" in self.path else "20000")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
        else:
            self.do_GET()

    def _liar(self) -> None:
        if self.path.endswith("/"):
            names = [f"f{i}.bin" for i in range(4)] + ["honest.bin"]
            self._send(200, "".join(f'<a href="{n}">{n}</a> ' for n in names).encode())
            return
        body = b"x" * 10_000
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m is None:
            self._send(200, body)
            return
        start, end = int(m[1]), int(m[2] or len(body) - 1)
        part = body[start : end + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)

    def _short(self) -> None:
        """Files whose every response announces 20,000 bytes and sends 10,000, then closes."""
        if self.path.endswith("/"):
            self._send(200, b"".join(b'<a href="f%d">f</a> ' % i for i in range(4)))
            return
        self._cut_short("20000")

    def _cut_short(self, announced: str | None) -> None:
        """10,000 bytes, announced as ``announced`` (or with no length), then the close."""
        self.send_response(200)
        if announced is None:
            self.send_header("Connection", "close")
        else:
            self.send_header("Content-Length", announced)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"x" * 10_000)
        self.close_connection = True

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/locked/":
            names = ["a.bin", "b.bin", "c.bin", "gone.bin"]
            self._send(200, "".join(f'<a href="{n}">{n}</a> ' for n in names).encode())
        elif self.path.startswith("/locked/"):
            self._send(404 if "gone" in self.path else 403, b"no")
        elif self.path.startswith("/liar/"):
            self._liar()
        elif self.path.startswith("/short/"):
            self._short()
        elif self.path == "/nolen/":
            self._send(200, b'<a href="a.bin">a.bin</a> <a href="b.bin">b.bin</a>')
        elif self.path.startswith("/nolen/"):
            self._cut_short(None)
        else:
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("path", ["loop/", "loop/a.bin"], ids=["folder", "file"])
def test_a_redirect_loop_is_a_one_line_error_that_says_so(odd_server: str, path: str) -> None:
    proc = run_cli("probe", f"{odd_server}/{path}", "-q", "--time-budget", "4", timeout=60)
    assert_one_line_error(proc, path, "a redirect loop")
    assert "message=" not in proc.stderr  # aiohttp's own text: a status 0 and the URL again


def test_files_the_server_refuses_are_counted_as_refused_not_vanished(odd_server: str) -> None:
    # round ten: 403 on every file read "no non-empty files found (8 vanished)"
    proc = run_cli("probe", f"{odd_server}/locked/", "-q", "--time-budget", "4", timeout=60)
    assert_one_line_error(proc, "no non-empty files found (3 refused, 1 vanished)")


def test_files_the_server_gives_no_size_for_are_a_one_line_error_that_says_so(
    odd_server: str,
) -> None:
    proc = run_cli("probe", f"{odd_server}/nolen/", "-q", "--time-budget", "4", timeout=60)
    assert_one_line_error(proc, "no size (no Content-Length) for any file it listed (2)")


def test_files_shorter_than_their_head_says_are_counted_as_failed_reads(
    odd_server: str, tmp_path: Path
) -> None:
    # counted as read, their bytes went over sizes twice theirs, with no error said
    rec = probe_json(tmp_path, f"{odd_server}/liar/", "--loader", "raw", "--time-budget", "4")
    errors = rec["dataset"]["read_errors"]
    assert errors == {"short_response": 4}, errors
    assert rec["stages"]["storage"]["read_bytes_per_s"] > 0  # the honest file was read
    # every file listed overstated: the probe ends in one line that says why
    proc = run_cli(
        "probe", f"{odd_server}/liar/f0.bin", "-q", "--loader", "raw", "--time-budget", "4"
    )
    assert_one_line_error(
        proc, "response shorter than announced", "ended at byte 10,000 where its listed size"
    )


def test_bodies_shorter_than_their_content_length_are_a_one_line_error(odd_server: str) -> None:
    # the first read of a header (the layout's sniff) raised aiohttp's ClientPayloadError
    # past every handler: a traceback and exit 1
    proc = run_cli("probe", f"{odd_server}/short/", "-q", "--time-budget", "4", timeout=60)
    assert_one_line_error(proc, "every read failed", "response shorter than announced")

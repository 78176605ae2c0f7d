"""Failures are named by what happened, not by what a library wrapped them in: a server on
127.0.0.1 with a self-signed certificate is "TLS certificate not trusted" (fsspec called it
"not found"), and one whose bodies stop short of their Content-Length is "response shorter
than announced" (aiohttp's parser error carried status 400, which the server never sent)."""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import ThrottledHTTPServer, _Handler, make_files, self_signed_cert

pytestmark = pytest.mark.slow


class _TLSServer(ThrottledHTTPServer):
    def __init__(self, root: Path, cert: Path, key: Path) -> None:
        super().__init__(root)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self._ctx = ctx

    def get_request(self):  # type: ignore[no-untyped-def]
        conn, addr = super().get_request()
        conn.settimeout(5)
        with contextlib.suppress(OSError, ssl.SSLError):
            return self._ctx.wrap_socket(conn, server_side=True), addr
        conn.close()
        raise OSError("handshake failed")


def test_a_self_signed_certificate_is_named_so_not_not_found(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_files(root, 5, 2_000, seed=8)
    cert, key = self_signed_cert(tmp_path)
    with _TLSServer(root, cert, key) as srv:
        url = srv.url.replace("http://", "https://", 1)
        proc = run_cli("probe", url, "--time-budget", "3", "-q", timeout=60)
    assert_one_line_error(proc, url, "TLS certificate not trusted")
    assert "not found" not in proc.stderr


class _ShortHandler(_Handler):
    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = self.server._resolve(path)  # type: ignore[attr-defined]
        if target is None or target.is_dir():
            super().do_GET()
            return
        body = target.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])  # then the connection ends
        self.wfile.flush()
        self.close_connection = True


def test_bodies_shorter_than_announced_are_counted_as_such(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_files(root, 12, 2_000, seed=9)
    with ThrottledHTTPServer(root) as srv:
        srv.RequestHandlerClass = _ShortHandler
        t0 = time.monotonic()
        out = tmp_path / "run.json"
        proc = run_cli(
            "probe", srv.url, "--loader", "raw", "--time-budget", "4", "-q", "--json", str(out)
        )
    assert time.monotonic() - t0 < 30
    assert "Traceback" not in proc.stderr
    assert "HTTP 400" not in proc.stderr + proc.stdout
    if proc.returncode == 0:
        errors = json.loads(out.read_text())["dataset"]["read_errors"]
        assert set(errors) == {"short_response"}, errors
    else:  # every read failed: one line naming why
        assert_one_line_error(proc, "response shorter than announced")


class _NegativeLengthHandler(_Handler):
    def do_HEAD(self) -> None:
        self._negative()

    def do_GET(self) -> None:
        self._negative()

    def _negative(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = self.server._resolve(path)  # type: ignore[attr-defined]
        if target is None or target.is_dir():
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Length", "-5")  # no length an HTTP parser accepts
        self.end_headers()
        self.close_connection = True


@pytest.mark.shared  # behaviour alone: nothing measured against the clock
def test_a_negative_content_length_is_a_malformed_response_not_a_status_it_never_sent(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    make_files(root, 6, 2_000, seed=10)
    with ThrottledHTTPServer(root) as srv:
        srv.RequestHandlerClass = _NegativeLengthHandler
        proc = run_cli("probe", srv.url, "--loader", "raw", "--time-budget", "3", "-q")
    assert_one_line_error(proc, "6 response not valid HTTP")
    assert "400" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("scheme", ["ftp", "sftp"])
def test_a_backend_that_connects_as_it_is_made_fails_in_one_line_with_no_secret(
    scheme: str,
) -> None:
    # fsspec's FTP and SFTP filesystems connect in their constructor: a refused connection
    # was a traceback there, with the URL's password in it
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens on it
    result = run_cli("probe", f"{scheme}://u:PaSsWoRd99@127.0.0.1:{port}/x", "--time-budget", "2")
    assert "PaSsWoRd99" not in result.stdout + result.stderr
    assert_one_line_error(result)

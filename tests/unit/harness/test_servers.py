"""Fast checks of the loopback test servers in tests/support/servers.py."""

from __future__ import annotations

import http.client
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.servers import S3Server, ThrottledHTTPServer, make_files

# the throttled servers' rates are held to the clock: run alone (tests/conftest.py)
pytestmark = pytest.mark.serial

SIZE = 10_000


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_files(root, count=4, size=SIZE, subdirs=2)
    return root


@pytest.fixture
def server(tree: Path) -> Iterator[ThrottledHTTPServer]:
    with ThrottledHTTPServer(tree) as srv:
        yield srv


def _raw_get(srv: ThrottledHTTPServer, path: str) -> http.client.HTTPResponse:
    # http.client sends the path verbatim; requests/urllib3 would normalise "..".
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


def test_make_files_is_deterministic_and_spread_over_subdirs(tmp_path: Path) -> None:
    a = make_files(tmp_path / "a", count=5, size=300, seed=7, subdirs=2)
    b = make_files(tmp_path / "b", count=3, size=300, seed=7, subdirs=2)
    c = make_files(tmp_path / "c", count=1, size=300, seed=8)

    assert [p.relative_to(tmp_path / "a").as_posix() for p in a] == [
        "p0/f00000.bin",
        "p1/f00001.bin",
        "p0/f00002.bin",
        "p1/f00003.bin",
        "p0/f00004.bin",
    ]
    assert all(p.stat().st_size == 300 for p in a)
    # File i depends on (seed, i) only, not on how many files were made.
    assert [p.read_bytes() for p in a[:3]] == [p.read_bytes() for p in b]
    assert a[0].read_bytes() != a[1].read_bytes()
    assert c[0].read_bytes() != a[0].read_bytes()


def test_get_whole_file_returns_exact_bytes_and_headers(
    server: ThrottledHTTPServer, tree: Path
) -> None:
    r = requests.get(server.url + "p1/f00001.bin", timeout=5)

    assert r.status_code == 200
    assert r.content == (tree / "p1" / "f00001.bin").read_bytes()
    assert r.headers["Content-Length"] == str(SIZE)
    assert r.headers["Accept-Ranges"] == "bytes"
    assert r.headers["Content-Type"] == "application/octet-stream"


@pytest.mark.parametrize(
    ("range_header", "first", "last"),
    [
        ("bytes=10-19", 10, 19),
        ("bytes=9990-", 9990, SIZE - 1),
        ("bytes=-25", SIZE - 25, SIZE - 1),
        ("bytes=100-999999", 100, SIZE - 1),
        ("bytes=-999999", 0, SIZE - 1),
    ],
)
def test_range_request_returns_206_with_exactly_the_requested_bytes(
    server: ThrottledHTTPServer, tree: Path, range_header: str, first: int, last: int
) -> None:
    data = (tree / "p0" / "f00000.bin").read_bytes()

    r = requests.get(server.url + "p0/f00000.bin", headers={"Range": range_header}, timeout=5)

    assert r.status_code == 206
    assert r.content == data[first : last + 1]
    assert r.headers["Content-Length"] == str(last - first + 1)
    assert r.headers["Content-Range"] == f"bytes {first}-{last}/{SIZE}"


@pytest.mark.parametrize("range_header", ["bytes=10000-", "bytes=20000-20010", "bytes=-0"])
def test_unsatisfiable_range_returns_416(server: ThrottledHTTPServer, range_header: str) -> None:
    r = requests.get(server.url + "p0/f00000.bin", headers={"Range": range_header}, timeout=5)

    assert r.status_code == 416
    assert r.headers["Content-Range"] == f"bytes */{SIZE}"
    assert r.content == b""


def test_head_reports_content_length_and_sends_no_body(server: ThrottledHTTPServer) -> None:
    r = requests.head(server.url + "p0/f00002.bin", timeout=5)

    assert r.status_code == 200
    assert r.headers["Content-Length"] == str(SIZE)
    assert r.content == b""
    assert server.bytes_sent == 0


def test_keep_alive_serves_many_requests_on_one_connection(server: ThrottledHTTPServer) -> None:
    with requests.Session() as s:
        for _ in range(5):
            assert s.get(server.url + "p0/f00000.bin", timeout=5).status_code == 200

    assert server.requests == 5
    assert server.connections == 1


def test_counters_count_requests_and_file_payload_bytes_only(
    server: ThrottledHTTPServer,
) -> None:
    with requests.Session() as s:
        s.get(server.url + "p0/f00000.bin", timeout=5)
        s.get(server.url + "p0/f00000.bin", headers={"Range": "bytes=0-99"}, timeout=5)
        s.head(server.url + "p0/f00000.bin", timeout=5)
        s.get(server.url, timeout=5)

    assert server.requests == 4
    assert server.bytes_sent == SIZE + 100


def test_missing_file_returns_404(server: ThrottledHTTPServer) -> None:
    assert requests.get(server.url + "nope.bin", timeout=5).status_code == 404


def test_paths_escaping_root_return_404(
    server: ThrottledHTTPServer, tree: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("do not serve")
    (tree / "link.txt").symlink_to(tmp_path / "secret.txt")

    assert _raw_get(server, "/../secret.txt").status == 404
    assert _raw_get(server, "/p0/../../secret.txt").status == 404
    assert _raw_get(server, "/%2e%2e/secret.txt").status == 404
    assert _raw_get(server, "/link.txt").status == 404


def test_directory_index_links_files_and_subdirs_with_trailing_slash(
    server: ThrottledHTTPServer,
) -> None:
    top = requests.get(server.url, timeout=5)
    sub = requests.get(server.url + "p1", timeout=5)

    assert top.status_code == 200
    assert top.headers["Content-Type"].startswith("text/html")
    assert '<a href="p0/">' in top.text
    assert '<a href="p1/">' in top.text
    assert '<a href="f00001.bin">' in sub.text
    assert '<a href="f00003.bin">' in sub.text
    assert "f00000.bin" not in sub.text


def test_latency_delays_every_response(tree: Path) -> None:
    with ThrottledHTTPServer(tree, latency_s=0.15) as srv, requests.Session() as s:
        t0 = time.perf_counter()
        for _ in range(3):
            s.head(srv.url + "p0/f00000.bin", timeout=5)
        elapsed = time.perf_counter() - t0

    assert 0.45 <= elapsed < 1.5


def test_slow_window_delays_only_requests_inside_it_after_the_clock_starts(tree: Path) -> None:
    def head_s(srv: ThrottledHTTPServer, s: requests.Session) -> float:
        t0 = time.perf_counter()
        s.head(srv.url + "p0/f00000.bin", timeout=5)
        return time.perf_counter() - t0

    window = (0.3, 0.8)
    with (
        ThrottledHTTPServer(tree, slow_window=window, slow_latency_s=0.25) as srv,
        requests.Session() as s,
    ):
        assert head_s(srv, s) < 0.2  # the clock has not started: no window yet
        start = srv.start_slow_clock()
        assert head_s(srv, s) < 0.2  # before the window
        time.sleep(max(start + 0.4 - time.monotonic(), 0.0))
        assert srv.request_delay() == pytest.approx(0.25)
        assert 0.25 <= head_s(srv, s) < 1.0  # inside it
        time.sleep(max(start + 0.9 - time.monotonic(), 0.0))
        assert head_s(srv, s) < 0.2  # after it
    with pytest.raises(ValueError):
        ThrottledHTTPServer(tree, slow_window=(1.0, 0.5))


def test_listen_backlog_holds_32_pending_connections(tree: Path) -> None:
    # Connect before the server accepts anything: the kernel completes a handshake only
    # while the listen queue has room, so with the stdlib backlog of 5 most of these would
    # time out waiting for a SYN-ACK.
    srv = ThrottledHTTPServer(tree)
    socks: list[socket.socket] = []
    try:
        for _ in range(32):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=0.5)
            socks.append(s)
        srv.start()
        for s in socks:
            s.settimeout(5)
            s.sendall(b"HEAD /p0/f00000.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_client_hanging_up_mid_body_prints_no_traceback(
    tree: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    big = tree / "big.bin"
    big.write_bytes(b"x" * 2_000_000)
    with ThrottledHTTPServer(tree, rate_bytes_per_s=2_000_000) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert s.recv(1024)
        # SO_LINGER 0 makes close() send RST, so the server's next write fails at once.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        deadline = time.monotonic() + 3
        while srv._connections and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not srv._connections, "handler did not notice the client went away"
        assert srv.bytes_sent < big.stat().st_size

    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Exception occurred" not in err


def test_stop_closes_idle_keep_alive_connections(tree: Path) -> None:
    srv = ThrottledHTTPServer(tree).start()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    try:
        s.sendall(b"HEAD /p0/f00000.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        srv.stop()
        assert s.recv(4096) == b""
    finally:
        s.close()


def test_achieved_rate_is_the_throttle_when_the_host_keeps_up(tmp_path: Path) -> None:
    make_files(tmp_path, count=2, size=200_000)
    with ThrottledHTTPServer(tmp_path, rate_bytes_per_s=1_000_000) as srv:
        assert srv.achieved_rate is None  # nothing sent yet
        t0 = time.monotonic()
        for name in ("p0/f00000.bin", "p0/f00001.bin"):
            requests.get(srv.url + name, timeout=10).raise_for_status()
        wall = time.monotonic() - t0
        achieved = srv.achieved_rate
    assert achieved is not None
    # 400 kB at 1 MB/s: 0.4 s of slots; the span can only exceed them, never undercut them
    assert achieved <= 1_000_000 * 1.02
    assert achieved == pytest.approx(400_000 / wall, rel=0.25)
    assert achieved > 0.7 * 1_000_000


def test_rejects_nonpositive_rate(tree: Path) -> None:
    with pytest.raises(ValueError):
        ThrottledHTTPServer(tree, rate_bytes_per_s=0)


def test_s3_server_endpoint_requires_start() -> None:
    with pytest.raises(RuntimeError):
        _ = S3Server().endpoint_url

"""The loopback test servers under real clients: requests threads, fsspec/aiohttp, s3fs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest
import requests

from tests.support.servers import S3Server, ThrottledHTTPServer, make_files

pytestmark = pytest.mark.slow

RATE = 4_000_000
MB = 1_000_000


def _download_all(urls_per_client: list[list[str]]) -> tuple[float, list[int]]:
    """Fetch each client's URLs on its own keep-alive session, all clients at once.

    Returns the wall time from the common start to the last byte, and bytes per client.
    """
    n = len(urls_per_client)
    start = threading.Barrier(n + 1)
    received = [0] * n
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with requests.Session() as s:
                start.wait()
                for url in urls_per_client[i]:
                    r = s.get(url, timeout=30)
                    r.raise_for_status()
                    received[i] += len(r.content)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert not errors, errors
    return elapsed, received


def test_rate_limit_is_shared_by_four_concurrent_clients(tmp_path: Path) -> None:
    make_files(tmp_path, count=8, size=MB)
    with ThrottledHTTPServer(tmp_path, rate_bytes_per_s=RATE) as srv:
        # 4 clients x 2 files x 1 MB = 8 MB, about 2 s at 4 MB/s; a per-connection limit
        # would finish in about 0.5 s and read as 16 MB/s.
        urls = [[f"{srv.url}p0/f{2 * c + k:05d}.bin" for k in range(2)] for c in range(4)]
        elapsed, received = _download_all(urls)
        sent = srv.bytes_sent

    total = sum(received)
    assert total == sent == 8 * MB
    measured = total / elapsed
    # never above the one limit (per connection, four clients would read 16 MB/s); below it
    # only as far as a loaded host delays four client threads (a clean-clone run of the
    # whole suite on 2 cores read 3.19 MB/s once, 4.0 on each rerun)
    assert 0.75 * RATE <= measured <= 1.08 * RATE, f"{measured / 1e6:.3f} MB/s"


def test_single_client_gets_the_full_rate_within_8_percent(tmp_path: Path) -> None:
    make_files(tmp_path, count=4, size=MB)
    with ThrottledHTTPServer(tmp_path, rate_bytes_per_s=RATE) as srv:
        elapsed, received = _download_all([[f"{srv.url}p0/f{k:05d}.bin" for k in range(4)]])

    measured = sum(received) / elapsed
    assert measured == pytest.approx(RATE, rel=0.08), f"{measured / 1e6:.3f} MB/s"


def test_32_concurrent_clients_on_fresh_connections_all_succeed(tmp_path: Path) -> None:
    files = make_files(tmp_path, count=8, size=4096, subdirs=2)
    expected = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in files}
    n_threads, per_thread = 32, 5
    start = threading.Barrier(n_threads)
    failures: list[str] = []
    slowest = [0.0] * n_threads

    def client(i: int) -> None:
        start.wait()
        for k in range(per_thread):
            j = (i + k) % 8
            rel = f"p{j % 2}/f{j:05d}.bin"
            t0 = time.perf_counter()
            try:
                # No session: every request opens a new TCP connection, at the same moment
                # as 31 other threads, which is what overflows a small listen backlog.
                r = requests.get(srv.url + rel, timeout=10)
                if r.status_code != 200 or r.content != expected[rel]:
                    failures.append(f"{rel}: status {r.status_code}, {len(r.content)} bytes")
            except requests.RequestException as exc:
                failures.append(f"{rel}: {exc!r}")
            slowest[i] = max(slowest[i], time.perf_counter() - t0)

    with ThrottledHTTPServer(tmp_path) as srv:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        requests_seen = srv.requests
        connections_seen = srv.connections

    assert failures == []
    assert requests_seen == connections_seen == n_threads * per_thread
    # The kernel retries a dropped SYN only after 1 s, so an overflowing backlog shows up as
    # requests that succeed but take over a second; none may.
    assert max(slowest) < 0.9, f"slowest request took {max(slowest):.2f} s"


def test_fsspec_http_finds_nested_tree_and_reads_identical_bytes(tmp_path: Path) -> None:
    files = make_files(tmp_path, count=9, size=5000, subdirs=3)
    deep = tmp_path / "p1" / "deeper" / "leaf.bin"
    deep.parent.mkdir()
    deep.write_bytes(b"leaf-bytes" * 100)
    files.append(deep)
    (tmp_path / "empty").mkdir()

    with ThrottledHTTPServer(tmp_path) as srv:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        found = fs.find(srv.url)
        url = srv.url + "p2/f00005.bin"
        info = fs.info(url)
        whole = fs.cat_file(url)
        part = fs.cat_file(url, start=100, end=200)
        deep_bytes = fs.cat_file(srv.url + "p1/deeper/leaf.bin")

    assert sorted(found) == sorted(srv.url + p.relative_to(tmp_path).as_posix() for p in files)
    local = (tmp_path / "p2" / "f00005.bin").read_bytes()
    assert info["size"] == 5000
    assert whole == local
    assert part == local[100:200]
    assert deep_bytes == deep.read_bytes()


_S3_CHILD = """
import json, sys
import s3fs
fs = s3fs.S3FileSystem()
keys = sorted(fs.find(sys.argv[1]))
data = fs.cat_file(sys.argv[2])
print(json.dumps({"keys": keys, "hex": data.hex()}))
"""


def test_s3fs_in_subprocess_lists_and_reads_uploaded_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_files(src, count=5, size=2048, seed=3, subdirs=2)

    with S3Server() as srv:
        keys = srv.upload_tree("ioprobe-test", src, prefix="data/")
        proc = subprocess.run(
            [sys.executable, "-c", _S3_CHILD, "ioprobe-test/data", "ioprobe-test/" + keys[1]],
            env={**os.environ, **srv.env()},
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert keys == sorted(f"data/{p.relative_to(src).as_posix()}" for p in src.rglob("*.bin"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["keys"] == [f"ioprobe-test/{k}" for k in keys]
    assert bytes.fromhex(out["hex"]) == (src / keys[1].removeprefix("data/")).read_bytes()

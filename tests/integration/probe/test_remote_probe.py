"""The probe against real servers on 127.0.0.1: an HTTP server throttled to a known rate, and
an S3-compatible server (moto) read through s3fs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, probe_json, run_cli
from tests.support.servers import S3Server, ThrottledHTTPServer, make_files

pytestmark = pytest.mark.slow

RATE = 2_000_000  # bytes/s, the truth the storage stage must find
FILE = 100_000


@pytest.fixture(scope="module")
def http_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("http")
    make_files(root, 60, FILE, seed=3, subdirs=2)
    return root


def test_throttled_http_target_measures_the_rate_names_storage_and_leaves_the_gpu_idle(
    http_data: Path, tmp_path: Path
) -> None:
    with ThrottledHTTPServer(http_data, rate_bytes_per_s=RATE) as srv:
        rec = probe_json(
            tmp_path,
            srv.url,
            "--loader",
            "raw",
            "--time-budget",
            "14",
            "--compute-ms-per-batch",
            "1",
            "--batch-size",
            "4",
            "--workers",
            "2",
        )
    st = rec["stages"]["storage"]
    assert rec["dataset"]["files"] == 60
    assert rec["dataset"]["remote"] is True
    assert st["read_bytes_per_s"] == pytest.approx(RATE, rel=0.10)
    assert st["capacity_samples_per_s"] == pytest.approx(RATE / FILE, rel=0.10)
    assert st["warm"] is None  # a remote target has no page cache to warm
    assert rec["bottleneck"] == "storage"
    # fast compute: the GPU waits on the link nearly all the time
    assert rec["gpu_idle_fraction"] > 0.8
    # end to end, the pipeline can't beat the link: 20 samples/s
    assert rec["measured_samples_per_s"] == pytest.approx(RATE / FILE, rel=0.2)


def test_s3_target_through_s3fs(http_data: Path, tmp_path: Path) -> None:
    with S3Server() as s3:
        s3.upload_tree("bucket", http_data, prefix="train")
        rec = probe_json(
            tmp_path, "s3://bucket/train", "--loader", "raw", "--time-budget", "6", env=s3.env()
        )
    assert rec["dataset"]["files"] == 60
    assert rec["dataset"]["bytes"] == 60 * FILE
    assert rec["stages"]["storage"]["read_bytes_per_s"] > 0
    assert rec["stages"]["storage"]["cold"]["sweep"][0]["errors"] == 0


def test_missing_s3_bucket_is_a_one_line_error(tmp_path: Path) -> None:
    with S3Server() as s3:
        proc = run_cli("probe", "s3://no-such-bucket/x", "-q", env=s3.env(), timeout=60)
    assert_one_line_error(proc, "s3://no-such-bucket/x")


def test_http_404_is_a_one_line_error(http_data: Path) -> None:
    with ThrottledHTTPServer(http_data) as srv:
        proc = run_cli("probe", srv.url + "missing.bin", "-q", timeout=60)
    assert_one_line_error(proc, "missing.bin")


@pytest.mark.parametrize("ranges", [True, False])
def test_a_large_remote_file_is_streamed_with_or_without_byte_ranges(
    tmp_path: Path, ranges: bool
) -> None:
    """A server that ignores Range (as Python's http.server does) answers each request with
    the whole file: the probe finds that out, streams each large file whole with one GET
    instead of cutting it into regions it cannot fetch, and measures the link's rate with no
    failed read."""
    data = tmp_path / "data"
    data.mkdir()
    size, rate = 12 << 20, 8_000_000
    (data / "shard-0.tar").write_bytes(bytes(range(256)) * (size // 256))
    with ThrottledHTTPServer(data, rate_bytes_per_s=rate, ranges=ranges) as srv:
        rec = probe_json(tmp_path, srv.url, "--loader", "raw", "--time-budget", "8")
    cold = rec["stages"]["storage"]["cold"]
    assert cold["pattern"] == "streams"
    assert cold["byte_ranges"] is ranges
    assert all(p["errors"] == 0 for p in cold["sweep"])
    assert rec["stages"]["storage"]["read_bytes_per_s"] == pytest.approx(rate, rel=0.15)


def test_an_http_folder_linking_to_itself_is_listed_once(tmp_path: Path) -> None:
    # `again -> .` in a served folder: its index lists again/, whose index is the same
    # again; each level was walked, 8 files counted as 328 until the walk's time ran out
    from ioprobe.collect import dataset as ds

    make_files(tmp_path, 8, 20_000, seed=2)
    (tmp_path / "p0" / "again").symlink_to(".")
    (tmp_path / "p0" / "sub").mkdir()
    make_files(tmp_path / "p0" / "sub", 2, 20_000, seed=3)  # a real folder is still walked
    with ThrottledHTTPServer(tmp_path) as server:
        got = ds.resolve(f"{server.url}/p0/", budget_s=10)
    assert got.total_files == 10 and not got.listing_truncated
    assert sum(1 for e in got.entries if "/again/" in e.path) == 0


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback to serve on")
def test_an_http_target_at_an_ipv6_literal_is_probed(http_data: Path, tmp_path: Path) -> None:
    # fsspec reads "::" as a chain of URLs: the host [::1] once failed with a TypeError's text
    with ThrottledHTTPServer(http_data, host="::1") as srv:
        assert srv.url.startswith("http://[::1]:")
        rec = probe_json(tmp_path, srv.url, "--loader", "raw", "--time-budget", "4")
    assert rec["dataset"]["files"] == 60 and rec["dataset"]["remote"] is True
    assert rec["stages"]["storage"]["read_bytes_per_s"] > 0

"""`ioprobe probe` on packed datasets: every stage in samples/s, against datasets written with
a known number of samples and a decode of known CPU cost per sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.shards import write_litdata, write_tar_shards, write_tfrecords
from tests.support.cli import probe_json
from tests.support.servers import ThrottledHTTPServer

SHARDS, PER_SHARD = 4, 50


def kinds(rec: dict[str, Any]) -> list[str]:
    return [r["kind"] for r in rec.get("recommendations", [])]


def burned(tmp_path: Path, target: str, *extra: str) -> dict[str, Any]:
    """The probe's record of ``target`` decoded by a decoder that burns 4 ms a sample."""
    return probe_json(
        tmp_path,
        target,
        *extra,
        "--loader",
        "tests.fixtures.burn:burn_4ms",
        "--time-budget",
        "8",
    )


def test_tar_shards_are_measured_per_sample_not_per_shard(tmp_path: Path) -> None:
    data = tmp_path / "wds"
    write_tar_shards(data, SHARDS, PER_SHARD, size=8192)
    rec = burned(tmp_path, str(data), "--warm")
    ds = rec["dataset"]
    assert (ds["files"], ds["samples"], ds["layout"]) == (SHARDS, SHARDS * PER_SHARD, "tar shards")
    assert ds["samples_basis"] == "tar headers"
    total = sum(p.stat().st_size for p in data.iterdir())
    assert ds["sample_bytes_mean"] == pytest.approx(total / (SHARDS * PER_SHARD))
    st = rec["stages"]["storage"]
    # storage in samples/s: the bytes it reads over the bytes a sample takes in its shard
    assert st["capacity_samples_per_s"] == pytest.approx(
        st["read_bytes_per_s"] / ds["sample_bytes_mean"], rel=1e-6
    )
    # the decode ran on each sample cut from the shards: 4 ms each, not 4 ms a shard
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004, rel=0.15)
    assert "shard_small_files" not in kinds(rec)


def test_a_litdata_index_is_not_a_sample_and_its_chunks_are_cut(tmp_path: Path) -> None:
    data = tmp_path / "lit"
    write_litdata(data, chunks=3, per_chunk=40, size=4096)
    rec = burned(tmp_path, str(data), "--warm")
    ds = rec["dataset"]
    assert (ds["files"], ds["samples"], ds["index_files"]) == (3, 120, 1)
    assert ds["layout"] == "litdata chunks"
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004, rel=0.15)
    assert "shard_small_files" not in kinds(rec)


def test_samples_per_file_scales_a_decode_of_whole_files(tmp_path: Path) -> None:
    data = tmp_path / "chunks"
    data.mkdir()
    for i in range(8):
        (data / f"chunk-{i:03d}.npz").write_bytes(bytes(64 * 1024))
    (data / "index.json").write_text(json.dumps({"chunks": 8, "per_chunk": 64}))
    rec = burned(tmp_path, str(data), "--warm", "--samples-per-file", "64")
    ds = rec["dataset"]
    assert (ds["files"], ds["samples"], ds["layout"]) == (8, 512, "packed files")
    assert rec["settings"]["samples_per_file"] == 64
    assert ds["sample_bytes_mean"] == pytest.approx(1024)
    # this format is not cut: each whole file burned 4 ms for its 64 samples
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004 / 64, rel=0.15)
    assert any("per file times the samples per file" in n for n in rec.get("notes", []))


@pytest.mark.parametrize(
    ("kind", "layout", "basis"),
    [
        ("tfrecord", "tfrecord files", "tfrecord headers"),
        ("tfrecord.gz", "tfrecord files", "tfrecord headers, decompressed to count"),
        ("tar.gz", "tar.gz shards", "tar headers, decompressed to count"),
    ],
)
def test_records_and_compressed_shards_are_measured_per_sample(
    tmp_path: Path, kind: str, layout: str, basis: str
) -> None:
    data = tmp_path / "data"
    if kind == "tar.gz":
        write_tar_shards(data, SHARDS, PER_SHARD, size=8192, gz=True)
    else:
        write_tfrecords(data, SHARDS, PER_SHARD, size=8192, gz=kind.endswith(".gz"))
    rec = burned(tmp_path, str(data), "--warm")
    ds = rec["dataset"]
    assert (ds["files"], ds["samples"], ds["layout"]) == (SHARDS, SHARDS * PER_SHARD, layout)
    assert ds["samples_basis"] == basis
    total = sum(p.stat().st_size for p in data.iterdir())
    assert ds["sample_bytes_mean"] == pytest.approx(total / (SHARDS * PER_SHARD))
    # the decode ran on each sample cut from the files: 4 ms each, not 4 ms a file
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004, rel=0.15)
    assert "shard_small_files" not in kinds(rec)


def test_remote_parquet_rows_are_counted_over_http(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data = tmp_path / "pq"
    data.mkdir()
    rows = 200
    for n in range(SHARDS):
        table = pa.table({"x": list(range(rows)), "y": [bytes(512)] * rows})
        pq.write_table(table, data / f"part-{n:03d}.parquet")
    with ThrottledHTTPServer(data) as srv:
        rec = burned(tmp_path, srv.url)
    ds = rec["dataset"]
    assert (ds["files"], ds["samples"], ds["layout"]) == (SHARDS, SHARDS * rows, "parquet")
    assert ds["samples_basis"] == "parquet metadata"
    assert ds["remote"] is True
    # a Parquet file is decoded whole: 4 ms a file, for its 200 rows
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004 / rows, rel=0.15)

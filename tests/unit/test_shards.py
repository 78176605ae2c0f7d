"""Sample counts of packed datasets, against datasets written with a known number of samples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ioprobe.collect import dataset as ds_mod
from ioprobe.collect import shards
from tests.fixtures.shards import (
    offset_table_file,
    sample_bytes,
    write_litdata,
    write_mds,
    write_tar_shards,
)


def detect(root: Path, **kw: object) -> shards.Layout:
    ds = ds_mod.resolve(str(root))
    with shards.RangeReader(None) as read:
        return shards.detect(ds, read, **kw)  # type: ignore[arg-type]


def names(layout: shards.Layout) -> list[str]:
    return sorted(os.path.basename(e.path) for e in layout.data)


def test_plain_files_are_one_sample_each(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(b"x" * 100)
    layout = detect(tmp_path)
    assert layout.kind == "files"
    assert layout.samples is None
    assert len(layout.data) == 5


def test_tar_shards_count_one_sample_per_webdataset_key(tmp_path: Path) -> None:
    # three members per key, and keys under a directory prefix inside the tar
    write_tar_shards(tmp_path, shards=3, per_shard=37, main_ext="jpg", subdir="train/part")
    layout = detect(tmp_path)
    assert layout.kind == "tar shards"
    assert layout.samples == 3 * 37
    assert layout.basis == "tar headers"
    # a sample's format is its image member's, not the label's or the metadata's
    assert layout.sample_formats == {"jpeg": 111}
    assert layout.splitter == "tar"


def test_tar_shards_past_the_deadline_are_extrapolated_by_size(tmp_path: Path) -> None:
    write_tar_shards(tmp_path, shards=6, per_shard=20)
    layout = detect(tmp_path, seconds=0.0)
    assert layout.samples == 120  # equal shards: the one walked stands for the others exactly
    assert layout.basis is not None and "extrapolated" in layout.basis


def test_tar_walk_cut_short_covers_only_whole_samples(tmp_path: Path) -> None:
    import tarfile

    write_tar_shards(tmp_path, shards=1, per_shard=10, size=1000)
    path = tmp_path / "shard-00000.tar"
    entry = ds_mod.FileEntry(str(path), path.stat().st_size)
    with shards.RangeReader(None) as read:
        # a deadline already past: the walk stops at the first whole sample
        keys, covered, _ = shards.tar_keys(entry, read, deadline=-1.0)
    assert keys == 1
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    # the first sample (three members) ends where the second sample's first header starts
    assert covered == members[3].offset


def test_an_mds_index_names_its_shards_and_their_samples(tmp_path: Path) -> None:
    samples = write_mds(tmp_path, shards=4, per_shard=25)
    (tmp_path / "README.md").write_text("not a shard")
    layout = detect(tmp_path)
    assert layout.kind == "MDS shards"
    assert layout.samples == 100
    assert layout.index_files == 1
    assert names(layout) == [f"shard.{s:05d}.mds" for s in range(4)]
    assert any("no index names" in n for n in layout.notes)
    # each shard cuts into exactly the samples written into it
    cut = [
        part
        for e in sorted(layout.data, key=lambda e: e.path)
        for part in shards.split(layout, Path(e.path).read_bytes()) or []
    ]
    assert cut == samples


def test_a_litdata_index_names_its_chunks_and_their_samples(tmp_path: Path) -> None:
    samples = write_litdata(tmp_path, chunks=3, per_chunk=40, size=2000)
    layout = detect(tmp_path)
    assert layout.kind == "litdata chunks"
    assert layout.samples == 120
    assert layout.index_files == 1
    first = min(layout.data, key=lambda e: e.path)
    assert shards.split(layout, Path(first.path).read_bytes()) == samples[:40]


def test_a_compressed_mds_shard_is_counted_but_not_cut(tmp_path: Path) -> None:
    write_mds(tmp_path, shards=2, per_shard=10)
    index = json.loads((tmp_path / "index.json").read_text())
    for s in index["shards"]:
        raw = s["raw_data"]["basename"]
        s["zip_data"] = {"basename": raw + ".zstd", "bytes": 10, "hashes": {}}
        (tmp_path / raw).rename(tmp_path / (raw + ".zstd"))
    (tmp_path / "index.json").write_text(json.dumps(index))
    layout = detect(tmp_path)
    assert layout.samples == 20
    assert layout.splitter is None


def test_an_index_of_unknown_format_is_no_sample_and_says_so(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"chunk-{i}.npz").write_bytes(b"x" * 1000)
    (tmp_path / "index.json").write_text(json.dumps({"chunks": ["chunk-0.npz"], "per_chunk": 64}))
    layout = detect(tmp_path)
    assert layout.samples is None
    assert names(layout) == [f"chunk-{i}.npz" for i in range(4)]
    assert layout.index_files == 1
    assert any("--samples-per-file" in n for n in layout.notes)


def test_samples_per_file_overrides_and_answers_the_note(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"chunk-{i}.npz").write_bytes(b"x" * 1000)
    (tmp_path / "index.json").write_text("{}")
    layout = detect(tmp_path, samples_per_file=64)
    assert layout.samples == 256
    assert layout.kind == "packed files"
    assert layout.basis == "--samples-per-file 64"
    assert not any("--samples-per-file" in n for n in layout.notes)


def test_parquet_rows_come_from_the_footers(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    for n, rows in enumerate((100, 57)):
        table = pa.table({"x": list(range(rows)), "y": [b"z" * 10] * rows})
        pq.write_table(table, tmp_path / f"part-{n}.parquet")
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples, layout.basis) == ("parquet", 157, "parquet metadata")


def test_arrow_stream_files_of_a_saved_dataset_count_rows_and_leave_out_its_metadata(
    tmp_path: Path,
) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"x": list(range(300))})
    # Hugging Face's save_to_disk: stream-format Arrow files beside two JSON files
    path = str(tmp_path / "data-00000-of-00001.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=64):
            writer.write_batch(batch)
    (tmp_path / "dataset_info.json").write_text("{}")
    (tmp_path / "state.json").write_text("{}")
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("arrow", 300)
    assert layout.index_files == 2
    assert names(layout) == ["data-00000-of-00001.arrow"]


def test_split_of_a_tar_shard_gives_each_samples_main_member(tmp_path: Path) -> None:
    mains = write_tar_shards(tmp_path, shards=1, per_shard=12, main_ext="npy")
    layout = detect(tmp_path)
    parts = shards.split(layout, (tmp_path / "shard-00000.tar").read_bytes())
    assert parts == mains


def test_split_of_a_truncated_tar_keeps_the_samples_read_whole(tmp_path: Path) -> None:
    mains = write_tar_shards(tmp_path, shards=1, per_shard=12, size=3000)
    layout = detect(tmp_path)
    data = (tmp_path / "shard-00000.tar").read_bytes()
    parts = shards.split(layout, data[: len(data) // 2])
    assert parts and parts == mains[: len(parts)]
    assert len(parts) < 12


def test_an_offset_table_that_does_not_fit_is_not_cut() -> None:
    layout = shards.Layout(kind="litdata chunks", samples=1, basis="index")
    assert shards.split(layout, b"\xff\xff\xff\xff" + b"\0" * 100) is None
    good = offset_table_file([sample_bytes(0, 10), sample_bytes(1, 20)])
    # offsets that run backwards are damage, not samples
    bad = good[:8] + (0).to_bytes(4, "little") + good[12:]
    assert shards.split(layout, bad) is None
    assert shards.split(layout, good) == [sample_bytes(0, 10), sample_bytes(1, 20)]

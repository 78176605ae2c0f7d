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
    tfrecord_bytes,
    write_litdata,
    write_mds,
    write_tar_shards,
    write_tfrecords,
)
from tests.support.servers import ThrottledHTTPServer


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


def test_an_index_gives_the_sizes_of_the_files_it_names_though_the_cache_evicted_them(
    tmp_path: Path,
) -> None:
    write_litdata(tmp_path / "lit", chunks=4, per_chunk=10, size=1000)
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "lit").glob("*.bin")}
    for name in list(sizes)[1:]:
        (tmp_path / "lit" / name).unlink()  # evicted by the cache: the index still names it
    assert shards.indexed_sizes(str(tmp_path / "lit"), ".bin") == sizes
    write_mds(tmp_path / "mds", shards=3, per_shard=5, size=700)
    mds = {p.name: p.stat().st_size for p in (tmp_path / "mds").glob("*.mds")}
    assert shards.indexed_sizes(str(tmp_path / "mds"), ".mds") == mds
    assert len(mds) == 3


def test_no_readable_index_or_one_without_sizes_gives_no_sizes(tmp_path: Path) -> None:
    assert shards.indexed_sizes(str(tmp_path / "absent"), ".bin") == {}
    write_litdata(tmp_path, chunks=2, per_chunk=10, size=1000)
    assert shards.indexed_sizes(str(tmp_path), ".npy") == {}  # names no file with that ending
    index = json.loads((tmp_path / "index.json").read_text())
    del index["chunks"][1]["chunk_bytes"]
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert shards.indexed_sizes(str(tmp_path), ".bin") == {}
    (tmp_path / "index.json").write_text("{not json")
    assert shards.indexed_sizes(str(tmp_path), ".bin") == {}


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


# ------------------------------------------------------------------------------ TFRecord


def test_tfrecord_files_count_one_sample_per_record_under_each_spelling(tmp_path: Path) -> None:
    records = write_tfrecords(tmp_path, files=3, per_file=41, size=1000)
    write_tfrecords(tmp_path, files=1, per_file=7, name="extra-{i}.tfrecords")
    write_tfrecords(tmp_path, files=1, per_file=5, name="kaggle-{i}.tfrec")
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples, layout.basis) == (
        "tfrecord files",
        3 * 41 + 7 + 5,
        "tfrecord headers",
    )
    assert len(layout.data) == 5
    # the decode sees records, whatever a record's length bytes look like to a magic check
    assert layout.sample_formats == {"tfrecord": 135}
    assert layout.splitter == "tfrecord"
    # each file cuts into exactly its records' data, the checksums left out
    first = tmp_path / "train.tfrecord-00000-of-00003"
    assert shards.split(layout, first.read_bytes()) == records[:41]


def test_gzip_tfrecords_are_decompressed_to_count_and_to_cut(tmp_path: Path) -> None:
    records = write_tfrecords(tmp_path, files=2, per_file=30, size=2000, gz=True)
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("tfrecord files", 60)
    assert layout.basis == "tfrecord headers, decompressed to count"
    first = tmp_path / "train.tfrecord-00000-of-00002.gz"
    assert shards.split(layout, first.read_bytes()) == records[:30]
    # a prefix of the compressed file cuts into the records it holds whole
    cut = shards.split(layout, first.read_bytes()[: first.stat().st_size // 2])
    assert cut and cut == records[: len(cut)] and len(cut) < 30


def test_tfrecord_files_past_the_deadline_are_extrapolated_by_size(tmp_path: Path) -> None:
    write_tfrecords(tmp_path, files=5, per_file=20)
    layout = detect(tmp_path, seconds=0.0)
    assert layout.samples == 100  # equal files: the one walked stands for the others exactly
    assert layout.basis == "tfrecord headers of 1 of 5 files, extrapolated by size"


def test_tfrecord_walk_cut_short_covers_only_whole_records(tmp_path: Path) -> None:
    write_tfrecords(tmp_path, files=1, per_file=10, size=500, gz=False, name="a.tfrecord")
    path = tmp_path / "a.tfrecord"
    entry = ds_mod.FileEntry(str(path), path.stat().st_size)
    with shards.RangeReader(None) as read:
        count = shards.tfrecord_count(entry, read, deadline=-1.0)
    assert (count.samples, count.covered) == (1, 12 + 500 + 4)


def test_a_damaged_tfrecord_counts_the_records_before_the_damage_and_says_so(
    tmp_path: Path,
) -> None:
    write_tfrecords(tmp_path, files=2, per_file=10, size=1000, name="part-{i}.tfrecord")
    cut = tmp_path / "part-1.tfrecord"
    data = cut.read_bytes()
    # cut inside the 5th record: 4 whole records are left
    cut.write_bytes(data[: 4 * (12 + 1000 + 4) + 500])
    # a length that runs past the end, as random bytes give
    (tmp_path / "part-2.tfrecord").write_bytes(b"\xff" * 3000)
    layout = detect(tmp_path)
    assert layout.samples == 10 + 4
    assert any("2 of the tfrecord files counted are damaged" in n for n in layout.notes)
    assert any(
        "part-1.tfrecord (the record at byte 4,064 runs past the end)" in n for n in layout.notes
    )


def test_a_truncated_gzip_tfrecord_counts_what_came_through(tmp_path: Path) -> None:
    import gzip

    raw = tfrecord_bytes([sample_bytes(i, 3000) for i in range(20)])
    # level 0 keeps the compressed bytes in step with the records
    packed = gzip.compress(raw, compresslevel=0)
    (tmp_path / "x.tfrecord.gz").write_bytes(packed[: len(packed) // 2])
    layout = detect(tmp_path)
    assert layout.kind == "tfrecord files"
    assert layout.samples is not None and 7 <= layout.samples <= 10
    assert any("damaged" in n for n in layout.notes)


def test_files_of_random_bytes_named_tfrecord_count_as_files_with_a_note(
    tmp_path: Path,
) -> None:
    for i in range(3):
        (tmp_path / f"{i}.tfrecord").write_bytes(os.urandom(2000))
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("tfrecord files", None)
    assert any("no sample could be counted" in n for n in layout.notes)


# ------------------------------------------------------------------------------ tar.gz


def test_gzip_tar_shards_count_keys_by_decompressing(tmp_path: Path) -> None:
    mains = write_tar_shards(tmp_path, shards=3, per_shard=25, main_ext="jpg", gz=True)
    (tmp_path / "shard-00003.tgz").write_bytes(
        (tmp_path / "shard-00000.tar.gz").read_bytes()  # the .tgz spelling: 25 more
    )
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("tar.gz shards", 100)
    assert layout.basis == "tar headers, decompressed to count"
    assert layout.sample_formats == {"jpeg": 100}
    assert layout.splitter == "tar.gz"
    assert shards.split(layout, (tmp_path / "shard-00001.tar.gz").read_bytes()) == mains[25:50]


def test_gzip_tar_shards_past_the_deadline_are_extrapolated_by_compressed_size(
    tmp_path: Path,
) -> None:
    write_tar_shards(tmp_path, shards=4, per_shard=30, gz=True)
    layout = detect(tmp_path, seconds=0.0)
    assert layout.basis == (
        "tar headers of 1 of 4 shards, decompressed to count, extrapolated by compressed size"
    )
    # the shards compress alike, not to the byte
    assert layout.samples == pytest.approx(120, rel=0.05)


def test_a_truncated_gzip_tar_counts_the_samples_before_the_cut(tmp_path: Path) -> None:
    import gzip
    import tarfile

    mains = write_tar_shards(tmp_path, shards=1, per_shard=20, size=3000, gz=True)
    path = tmp_path / "shard-00000.tar.gz"
    raw = gzip.decompress(path.read_bytes())
    packed = gzip.compress(raw, compresslevel=0)
    path.write_bytes(packed[: len(packed) // 2])
    with tarfile.open(fileobj=__import__("io").BytesIO(raw)) as tar:
        members = tar.getmembers()
    # samples whose three members end before half the tar (level 0: bytes in step)
    whole = sum(1 for m in members[2::3] if m.offset_data + m.size <= len(raw) // 2 - 64)
    layout = detect(tmp_path)
    assert layout.samples is not None and whole <= layout.samples <= whole + 1
    assert any("damaged" in n for n in layout.notes)
    cut = shards.split(layout, path.read_bytes())
    assert cut and cut == mains[: len(cut)]


# ------------------------------------------------------------------------------ tables


class CountingReader:
    """A RangeReader that counts the bytes each read returns."""

    def __init__(self, inner: shards.RangeReader) -> None:
        self.inner = inner
        self.bytes = 0

    def __call__(self, entry: ds_mod.FileEntry, offset: int, length: int) -> bytes:
        out = self.inner(entry, offset, length)
        self.bytes += len(out)
        return out


def write_parquet(root: Path, rows: list[int]) -> list[int]:
    """Parquet files of ``rows[i]`` rows each (300-byte values, row groups of 50); their
    footer lengths."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root.mkdir(parents=True, exist_ok=True)
    footers = []
    for n, count in enumerate(rows):
        table = pa.table({"x": list(range(count)), "y": [os.urandom(300) for _ in range(count)]})
        path = root / f"part-{n}.parquet"
        pq.write_table(table, path, row_group_size=50)
        footers.append(int.from_bytes(path.read_bytes()[-8:-4], "little"))
    return footers


def write_arrow(path: Path, rows: int, *, stream: bool, batch: int = 64, **opts: object) -> None:
    """An Arrow IPC file (``stream``: the stream format) of ``rows`` rows in batches of
    ``batch``, with a dictionary column; ``opts`` go to the writer's IpcWriteOptions."""
    pa = pytest.importorskip("pyarrow")
    words = pa.array([f"w{i % 7}" for i in range(rows)]).dictionary_encode()
    table = pa.table({"x": list(range(rows)), "w": words, "b": [b"z" * 200] * rows})
    options = pa.ipc.IpcWriteOptions(**opts)
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, new(sink, table.schema, options=options) as w:
        for b in table.to_batches(max_chunksize=batch):
            w.write_batch(b)


def test_parquet_rows_are_read_from_the_footer_alone(tmp_path: Path) -> None:
    footers = write_parquet(tmp_path, [1500, 823, 777])
    ds = ds_mod.resolve(str(tmp_path))
    with shards.RangeReader(None) as inner:
        counting = CountingReader(inner)
        rows = [
            shards.parquet_rows(e, counting, 0.0).samples
            for e in sorted(ds.entries, key=lambda e: e.path)
        ]
    assert rows == [1500, 823, 777]
    # one read of the file's last 8 KiB, and the rest of the footer where it is longer
    assert counting.bytes <= sum(max(f + 8, shards.PARQUET_TAIL) for f in footers)
    assert counting.bytes < sum(e.size for e in ds.entries) / 20


def test_a_damaged_parquet_file_is_a_note_not_a_crash(tmp_path: Path) -> None:
    write_parquet(tmp_path, [200, 100])
    good = (tmp_path / "part-1.parquet").read_bytes()
    # the footer cut in its middle: the tail says PAR1, the metadata does not parse
    (tmp_path / "part-1.parquet").write_bytes(good[:-40] + good[-8:])
    (tmp_path / "part-2.parquet").write_bytes(os.urandom(5000))
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("parquet", 200)
    damaged = next(n for n in layout.notes if "damaged" in n)
    assert "part-1.parquet (footer unreadable" in damaged
    assert "part-2.parquet (no parquet footer)" in damaged


@pytest.mark.parametrize("stream", [True, False], ids=["stream format", "file format"])
def test_arrow_rows_come_from_the_batch_headers(tmp_path: Path, stream: bool) -> None:
    write_arrow(tmp_path / "a.arrow", 1000, stream=stream, batch=64)
    write_arrow(tmp_path / "b.arrow", 37, stream=stream, batch=64)
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples, layout.basis) == ("arrow", 1037, "arrow batch headers")


def test_arrow_rows_of_compressed_batches_and_old_prefixes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    write_arrow(tmp_path / "zstd.arrow", 300, stream=True, compression="zstd")
    # the length prefix without the continuation marker, as Arrow before 0.15 wrote it
    write_arrow(tmp_path / "legacy.arrow", 200, stream=False, use_legacy_format=True)
    assert detect(tmp_path).samples == 500


def test_arrow_walk_reads_headers_not_bodies(tmp_path: Path) -> None:
    write_arrow(tmp_path / "big.arrow", 20_000, stream=True, batch=1000)
    path = tmp_path / "big.arrow"
    entry = ds_mod.FileEntry(str(path), path.stat().st_size)
    with shards.RangeReader(None) as inner:
        counting = CountingReader(inner)
        count = shards.arrow_rows(entry, counting, float("inf"))
    assert count.samples == 20_000
    # 20 batches, a schema and dictionaries: a few KiB a message, not 4 MB of bodies
    assert counting.bytes < 40 * shards.ARROW_HEAD < entry.size / 10


def test_a_truncated_arrow_file_counts_its_whole_batches(tmp_path: Path) -> None:
    write_arrow(tmp_path / "a.arrow", 640, stream=True, batch=64)
    data = (tmp_path / "a.arrow").read_bytes()
    (tmp_path / "a.arrow").write_bytes(data[: len(data) // 2])
    layout = detect(tmp_path)
    assert layout.samples is not None and 0 < layout.samples < 640
    assert layout.samples % 64 == 0
    assert any("damaged" in n for n in layout.notes)


# ------------------------------------------------------------------------------ remote


def remote_detect(url: str, **kw: object) -> shards.Layout:
    ds = ds_mod.resolve(url)
    with shards.RangeReader(ds.fs) as read:
        return shards.detect(ds, read, **kw)  # type: ignore[arg-type]


def test_remote_parquet_rows_fetch_only_the_footers(tmp_path: Path) -> None:
    footers = write_parquet(tmp_path / "pq", [1400, 1250, 1300])
    total = sum(p.stat().st_size for p in (tmp_path / "pq").iterdir())
    with ThrottledHTTPServer(tmp_path / "pq") as srv:
        layout = remote_detect(srv.url)
        sent = srv.bytes_sent
    assert (layout.kind, layout.samples, layout.basis) == ("parquet", 3950, "parquet metadata")
    # the server's count: the last 8 KiB of each file (the footer), not the files
    assert sent <= sum(max(f + 8, shards.PARQUET_TAIL) for f in footers)
    assert sent < total / 20


@pytest.mark.parametrize("stream", [True, False], ids=["stream format", "file format"])
def test_remote_arrow_rows_fetch_only_the_batch_headers(tmp_path: Path, stream: bool) -> None:
    root = tmp_path / "arrow"
    root.mkdir()
    write_arrow(root / "data-00000-of-00002.arrow", 8000, stream=stream, batch=1000)
    write_arrow(root / "data-00001-of-00002.arrow", 3000, stream=stream, batch=1000)
    (root / "state.json").write_text("{}")
    total = sum(p.stat().st_size for p in root.glob("*.arrow"))
    with ThrottledHTTPServer(root) as srv:
        layout = remote_detect(srv.url)
        sent, requests = srv.bytes_sent, srv.requests
    assert (layout.kind, layout.samples) == ("arrow", 11_000)
    assert layout.index_files == 1
    # 11 batches, 2 schemas, 2 dictionaries, 2 end markers: one ranged read each
    assert sent <= 20 * shards.ARROW_HEAD < total / 10, (sent, requests)


def test_remote_tfrecords_and_gzip_tars_are_counted(tmp_path: Path) -> None:
    write_tfrecords(tmp_path / "tf", files=3, per_file=40, size=3000)
    write_tar_shards(tmp_path / "tgz", shards=2, per_shard=30, gz=True)
    with ThrottledHTTPServer(tmp_path / "tf") as srv:
        tf = remote_detect(srv.url)
    with ThrottledHTTPServer(tmp_path / "tgz") as srv:
        tgz = remote_detect(srv.url)
    assert (tf.kind, tf.samples, tf.basis) == ("tfrecord files", 120, "tfrecord headers")
    assert (tgz.kind, tgz.samples) == ("tar.gz shards", 60)


@pytest.mark.parametrize("gz", [False, True])
def test_tfrecord_files_named_without_an_extension_are_known_by_their_record_headers(
    tmp_path: Path, gz: bool
) -> None:
    """TensorFlow's shard names ("train-00000-of-00004") need no extension: the first record
    header's checksum of its length tells TFRecord from other bytes."""
    records = write_tfrecords(
        tmp_path, files=4, per_file=25, size=900, gz=gz, name="train-{i:05d}-of-{n:05d}"
    )
    layout = detect(tmp_path)
    assert (layout.kind, layout.samples) == ("tfrecord files", 100)
    assert any("TFRecord by their record headers" in n for n in layout.notes)
    first = next(p for p in sorted(tmp_path.iterdir()))
    assert shards.split(layout, first.read_bytes()) == records[:25]


def test_extensionless_files_that_are_not_tfrecord_stay_one_sample_each(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"part-{i:05d}").write_bytes(sample_bytes(i, 5000))
    layout = detect(tmp_path)
    assert (layout.kind, len(layout.data)) == ("files", 4)
    assert not any("TFRecord" in n for n in layout.notes)
    # a length whose checksum is wrong by one bit is not a record header
    good = tfrecord_bytes([sample_bytes(9, 100)])
    near = tmp_path / "near"
    near.write_bytes(good[:8] + bytes([good[8] ^ 1]) + good[9:])
    (tmp_path / "good").write_bytes(good)
    with shards.RangeReader(None) as read:
        seen = [
            shards.looks_tfrecord(ds_mod.FileEntry(str(p), p.stat().st_size), read)
            for p in (tmp_path / "good", near)
        ]
    assert seen == [True, False]


def test_crc32c_matches_the_standard_check_value() -> None:
    assert shards.crc32c(b"123456789") == 0xE3069283


def test_an_index_claiming_more_samples_than_a_shard_can_hold_is_not_believed(
    tmp_path: Path,
) -> None:
    # a damaged or hostile index.json: 10**40 samples in a shard made a record whose count no
    # record can hold, which the probe wrote and could not load back
    import json

    write_litdata(tmp_path, chunks=2, per_chunk=40, size=2000)
    index = tmp_path / "index.json"
    doc = json.loads(index.read_text())
    doc["chunks"][0]["chunk_size"] = 10**40
    doc["chunks"][1]["chunk_size"] = True  # a bool is no count either
    index.write_text(json.dumps(doc))
    assert shards._parse_index(index.read_bytes()) is None
    layout = detect(tmp_path)
    assert (layout.samples or 0) < shards.MAX_SHARD_SAMPLES
    # nested past the JSON parser's depth: no index, not a RecursionError
    index.write_text("[" * 100_000 + "]" * 100_000)
    assert shards._parse_index(index.read_bytes()) is None
    assert (detect(tmp_path).samples or 0) < shards.MAX_SHARD_SAMPLES

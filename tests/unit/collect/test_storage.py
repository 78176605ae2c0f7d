from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest

from ioprobe.collect import dataset as ds_mod
from ioprobe.collect import storage as st


def make_files(root: Path, count: int, size: int) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        p = root / f"f{i:04d}.bin"
        with open(p, "wb") as fh:
            fh.write(os.urandom(size))
            fh.flush()
            os.fsync(fh.fileno())
        paths.append(p)
    return paths


def test_large_files_are_split_into_chunks() -> None:
    entries = [ds_mod.FileEntry("a", 100), ds_mod.FileEntry("b", 20 << 20)]
    items = st.plan_items(entries, chunk=8 << 20)
    assert items == [
        ("a", 0, 100),
        ("b", 0, 8 << 20),
        ("b", 8 << 20, 8 << 20),
        ("b", 16 << 20, 4 << 20),
    ]


def test_a_level_reads_every_byte_exactly_once(tmp_path: Path) -> None:
    paths = make_files(tmp_path, 20, 300_000)
    items = [(str(p), 0, 300_000) for p in paths] + [(str(paths[0]), 1000, 5000)]
    res = st.run_level(st._local_reader, items, 4, seconds=30)
    assert res.items == 21
    assert res.bytes == 20 * 300_000 + 5000
    assert res.errors == 0
    assert len(res.latencies_ns) == 21


def test_a_vanished_file_is_counted_not_fatal(tmp_path: Path) -> None:
    paths = make_files(tmp_path, 3, 1000)
    items = [(str(p), 0, 1000) for p in paths] + [(str(tmp_path / "gone"), 0, 1000)]
    res = st.run_level(st._local_reader, items, 2, seconds=30)
    assert res.items == 3
    assert res.errors == 1
    assert "gone" in (res.first_error or "")


def test_eviction_empties_the_page_cache_and_reading_fills_it(tmp_path: Path) -> None:
    paths = [str(p) for p in make_files(tmp_path, 8, 1 << 20)]
    for p in paths:
        Path(p).read_bytes()
    assert st.resident_fraction(paths) == pytest.approx(1.0, abs=0.05)
    st.evict(paths)
    assert st.resident_fraction(paths) == pytest.approx(0.0, abs=0.05)


def test_eviction_works_on_freshly_written_dirty_files(tmp_path: Path) -> None:
    p = tmp_path / "dirty.bin"
    p.write_bytes(os.urandom(2 << 20))  # no fsync: pages are dirty
    st.evict([str(p)])
    assert st.resident_fraction([str(p)]) == pytest.approx(0.0, abs=0.05)
    assert len(p.read_bytes()) == 2 << 20  # and the file is unchanged


def test_cold_pass_is_slower_than_warm_and_starts_evicted(tmp_path: Path) -> None:
    make_files(tmp_path, 200, 256 * 1024)
    d = ds_mod.resolve(str(tmp_path))
    cold = st.measure_pass(d, d.entries, "cold", 6.0, levels=(1, 4))
    warm = st.measure_pass(d, d.entries, "warm", 4.0, levels=(1, 4))
    assert cold.resident_fraction_after_evict is not None
    assert cold.resident_fraction_after_evict < 0.05
    assert all(
        p.resident_fraction_before is not None and p.resident_fraction_before > 0.9
        for p in warm.sweep
    )
    assert cold.read_bytes_per_s is not None and warm.read_bytes_per_s is not None
    assert cold.read_bytes_per_s < warm.read_bytes_per_s
    assert cold.sweep[0].bytes == 200 * 256 * 1024  # the whole selection in one level


def test_sweep_stops_after_three_levels_without_gain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_files(tmp_path, 4, 1000)
    d = ds_mod.resolve(str(tmp_path))
    rates = iter([100.0, 101.0, 102.0, 103.0, 500.0, 600.0])

    def fake_level(
        reader: object, items: object, c: int, seconds: float, **kw: object
    ) -> st.LevelResult:
        return st.LevelResult(c, int(next(rates)), 1, 1.0, [1000], 0, None)

    monkeypatch.setattr(st, "run_level", fake_level)
    p = st.measure_pass(d, d.entries, "cold", 10.0)
    # levels 2, 4 and 8 gain < 5% over the best: the sweep ends there, never reaching 16
    assert [pt.concurrency for pt in p.sweep] == [1, 2, 4, 8]
    assert p.best_concurrency == 8


def test_selection_respects_the_byte_cap_but_keeps_one_file() -> None:
    entries = [ds_mod.FileEntry(f"f{i}", 100) for i in range(50)]
    assert sum(e.size for e in st.select_entries(entries, 1000, seed=1)) == 1000
    assert len(st.select_entries([ds_mod.FileEntry("big", 10**9)], 10, seed=1)) == 1


def test_cpu_stage_of_one_huge_raw_file_reads_only_a_prefix(tmp_path: Path) -> None:
    import resource

    from ioprobe.collect.probe import Probe, ProbeOptions

    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(600 << 20)  # sparse: cheap to make, 600 MiB to read
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rec = Probe(ProbeOptions(target=str(big), loader="raw", passes=["warm"], time_budget_s=4)).run()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert rec.stages.cpu.cpu_seconds_per_sample is not None
    assert grown_mib < 200, grown_mib  # not the whole 600 MiB file in memory


# --------------------------------------------------------------------------- streams

MiB = 1 << 20


def _covers_each_byte_once(regions: list[st.Item], entries: list[ds_mod.FileEntry]) -> bool:
    """Whether ``regions`` tile every file of ``entries`` exactly, no gap and no overlap."""
    for e in entries:
        spans = sorted((off, n) for path, off, n in regions if path == e.path)
        pos = 0
        for off, n in spans:
            if off != pos or n <= 0:
                return False
            pos += n
        if pos != e.size:
            return False
    return {path for path, _, _ in regions} == {e.path for e in entries}


def test_files_of_8_mib_and_more_are_streamed_and_smaller_ones_read_whole() -> None:
    entries = [
        ds_mod.FileEntry("img.jpg", 200_000),
        ds_mod.FileEntry("just-under", st.STREAM_MIN - 1),
        ds_mod.FileEntry("shard-0.tar", st.STREAM_MIN),
        ds_mod.FileEntry("video.mp4", 3 << 30),
    ]
    small, streamed = st.split_streamed(entries)
    assert [e.path for e in small] == ["img.jpg", "just-under"]
    assert [e.path for e in streamed] == ["shard-0.tar", "video.mp4"]


def test_one_large_file_is_cut_into_one_contiguous_region_per_reader() -> None:
    big = ds_mod.FileEntry("big.bin", 2 << 30)
    for readers in (1, 4, 16, 32, 64):
        regions = st.plan_streams([big], readers)
        assert len(regions) == readers
        # equal shares, as fio's offset_increment = size / jobs gives each job
        assert {n for _, _, n in regions} == {(2 << 30) // readers}
        assert _covers_each_byte_once(regions, [big])


def test_regions_start_on_mib_boundaries_and_the_last_takes_the_remainder() -> None:
    odd = ds_mod.FileEntry("odd.bin", 100 * MiB + 12345)
    regions = st.plan_streams([odd], 3)
    assert [off % MiB for _, off, _ in regions] == [0, 0, 0]
    assert [n for _, _, n in regions] == [34 * MiB, 34 * MiB, 32 * MiB + 12345]
    assert _covers_each_byte_once(regions, [odd])


def test_as_many_files_as_readers_or_more_are_streamed_whole() -> None:
    shards = [ds_mod.FileEntry(f"shard-{i}.tar", (64 + i) * MiB) for i in range(8)]
    for readers in (1, 4, 8):
        regions = st.plan_streams(shards, readers)
        assert regions == [(e.path, 0, e.size) for e in shards]


def test_fewer_files_than_readers_are_each_cut_so_every_reader_has_a_region() -> None:
    shards = [ds_mod.FileEntry(f"shard-{i}.tar", 96 * MiB) for i in range(3)]
    regions = st.plan_streams(shards, 8)
    assert len(regions) == 9  # ceil(8 / 3) = 3 regions of each file
    assert _covers_each_byte_once(regions, shards)


def test_a_file_is_never_cut_below_one_read() -> None:
    f = ds_mod.FileEntry("s.bin", 8 * MiB)
    regions = st.plan_streams([f], 64)
    assert [n for _, _, n in regions] == [MiB] * 8
    assert _covers_each_byte_once(regions, [f])


@pytest.mark.parametrize(("clients", "threads"), [(1, 4), (2, 4), (3, 2), (4, 16)])
def test_clients_share_small_files_and_stream_regions_of_large_ones_each_byte_once(
    clients: int, threads: int
) -> None:
    """The distributed probe's split: each client's share holds every clients-th small file
    and every clients-th stream region, so together they read each byte once, and a large
    file gives each of the clients' threads a region of its own."""
    entries = [ds_mod.FileEntry(f"img-{i}.jpg", 100_000) for i in range(10)]
    entries.append(ds_mod.FileEntry("big.bin", 1 << 30))
    small_all, streams_all = [], []
    for slot in range(clients):
        items, first_stream = st.plan_share(entries, clients, slot, threads)
        small, streams = items[:first_stream], items[first_stream:]
        assert all(n == 100_000 for _, _, n in small)
        assert all(p == "big.bin" for p, _, _ in streams)
        assert len(streams) == threads  # one region per thread of this client
        small_all += small
        streams_all += streams
    assert sorted(small_all) == [(f"img-{i}.jpg", 0, 100_000) for i in range(10)]
    assert _covers_each_byte_once(streams_all, [entries[-1]])


@pytest.mark.parametrize("readers", [1, 3, 4])
def test_a_streamed_level_reads_every_byte_of_a_real_file_once(
    tmp_path: Path, readers: int
) -> None:
    size = 20 * MiB + 4096  # not a whole number of regions or reads
    (path,) = make_files(tmp_path, 1, size)
    regions = st.plan_streams([ds_mod.FileEntry(str(path), size)], readers)
    res = st.run_level(st._local_reader, regions, readers, seconds=30, first_stream=0)
    assert res.errors == 0
    assert res.bytes == size
    # one timed read per MiB of each region (a region's last read may be short)
    assert res.items == sum(-(-n // MiB) for _, _, n in regions)


def test_small_files_and_streams_in_one_level_each_read_once(tmp_path: Path) -> None:
    small = make_files(tmp_path / "small", 10, 100_000)
    (big,) = make_files(tmp_path / "big", 1, 9 * MiB)
    items = [(str(p), 0, 100_000) for p in small]
    items += st.plan_streams([ds_mod.FileEntry(str(big), 9 * MiB)], 2)
    res = st.run_level(st._local_reader, items, 2, seconds=30, first_stream=len(small))
    assert res.bytes == 10 * 100_000 + 9 * MiB
    assert res.items == 10 + 9  # one per small file, one per MiB streamed
    assert res.errors == 0


def test_a_stream_stops_at_the_deadline_and_counts_what_it_read(tmp_path: Path) -> None:
    size = 64 * MiB
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as fh:
        fh.truncate(size)
    regions = st.plan_streams([ds_mod.FileEntry(str(sparse), size)], 1)
    res = st.run_level(st._local_reader, regions, 1, seconds=0.0, first_stream=0)
    # the deadline has passed before the first read returns: the stream ends after it
    assert res.bytes == MiB
    assert res.items == 1


def test_a_missing_streamed_file_is_counted_not_fatal(tmp_path: Path) -> None:
    (good,) = make_files(tmp_path, 1, 9 * MiB)
    items = [(str(tmp_path / "gone.tar"), 0, 9 * MiB), (str(good), 0, 9 * MiB)]
    res = st.run_level(st._local_reader, items, 1, seconds=30, first_stream=0)
    assert res.errors == 1
    assert "gone.tar" in (res.first_error or "")
    assert res.bytes == 9 * MiB


def test_a_cold_pass_over_one_large_file_streams_it_and_says_so(tmp_path: Path) -> None:
    size = 32 * MiB
    make_files(tmp_path, 1, size)
    d = ds_mod.resolve(str(tmp_path))
    p = st.measure_pass(d, d.entries, "cold", 8.0, levels=(1, 4))
    assert p.pattern == "streams"
    assert [pt.bytes for pt in p.sweep] == [size, size]  # each level reads the file once
    assert [pt.items for pt in p.sweep] == [32, 32]  # in 1 MiB reads
    assert p.resident_fraction_after_evict is not None
    assert p.resident_fraction_after_evict < 0.05


def test_a_pass_names_its_pattern_from_the_files_it_reads(tmp_path: Path) -> None:
    make_files(tmp_path / "a", 4, 1000)
    d = ds_mod.resolve(str(tmp_path / "a"))
    assert st.measure_pass(d, d.entries, "cold", 2.0, levels=(1,)).pattern == "files"
    make_files(tmp_path / "a" / "shards", 1, 8 * MiB)
    d = ds_mod.resolve(str(tmp_path / "a"))
    assert st.measure_pass(d, d.entries, "cold", 2.0, levels=(1,)).pattern == "mixed"


def test_a_remote_large_file_is_streamed_through_the_backends_open(tmp_path: Path) -> None:
    import fsspec

    size = 10 * MiB + 777
    (path,) = make_files(tmp_path, 1, size)
    # fsspec's local backend: a file object of its own per open(), as remote backends give
    # (the memory backend hands every open() one shared object, which threads can't share)
    fs = fsspec.filesystem("file", skip_instance_cache=True)
    opened: list[str] = []
    real_open = fs.open

    def counting_open(p: str, mode: str = "rb", **kw: object) -> object:
        opened.append(p)
        return real_open(p, mode, **kw)

    fs.open = counting_open  # type: ignore[method-assign]
    reader = st._remote_reader_factory(fs)
    regions = st.plan_streams([ds_mod.FileEntry(str(path), size)], 2)
    res = st.run_level(reader, regions, 2, seconds=30, first_stream=0)
    assert res.errors == 0
    assert res.bytes == size
    assert len(opened) == 2  # one open per region, read through in 1 MiB reads
    assert res.items == sum(-(-n // MiB) for _, _, n in regions)


def test_a_huge_file_is_counted_in_windows_in_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one vector byte per page of the whole file, summed in Python: a 2 TiB file (a sparse
    # one, as a single LMDB or tar file may be) took 29 s and 1.6 GB of a 2 s probe
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(2 << 40)
    start = time.monotonic()
    resident, pages = st.resident_pages(str(big))
    assert time.monotonic() - start < 2.0
    assert pages == (2 << 40) // mmap.PAGESIZE and resident == 0
    # windows spread evenly see what is cached: every other window looked at, 1/4 read
    monkeypatch.setattr(st, "RESIDENT_WINDOW", 16)
    monkeypatch.setattr(st, "RESIDENT_WINDOWS", 64)
    part = tmp_path / "part.bin"
    page = mmap.PAGESIZE
    part.write_bytes(os.urandom(16 * 128 * page))  # 128 windows of 16 pages
    st.evict([str(part)])
    fd = os.open(part, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead into other windows
        for w in range(128):  # two windows in eight, one looked at and one not
            if w % 8 in (0, 1):
                os.pread(fd, 16 * page, w * 16 * page)
    finally:
        os.close(fd)
    resident, pages = st.resident_pages(str(part))
    assert pages == 16 * 128 and resident == pytest.approx(pages / 4, rel=0.05)

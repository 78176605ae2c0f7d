from __future__ import annotations

import os
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

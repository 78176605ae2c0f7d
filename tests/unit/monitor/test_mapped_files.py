"""The mapped data files a worker lists, how the collector counts them, and what they cost."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
import torch

from ioprobe import capacity
from ioprobe.loaders import torch_worker as wt
from ioprobe.loaders.torch import DataLoaderAdapter
from ioprobe.loaders.torch_worker import Stamped, mapped_data_files, resident_files
from ioprobe.monitor.collector import WatchCollector
from ioprobe.monitor.message import MAPPED_FIELDS, BatchStats, folder_tag
from ioprobe.record import LoaderSettings
from ioprobe.render.facts import size_line

DEV = (0xFD << 32) | 0x01  # "fd:01"

MAPS = b"""\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 100 /usr/bin/python3.11
55d0c0001000-55d0c0200000 r-xp 00001000 fd:01 100 /usr/bin/python3.11
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0010000000 r--s 00000000 fd:01 200 /data/train/rows.bin
7f0010000000-7f0010100000 r--s 0fff0000 fd:01 200 /data/train/rows.bin
7f0020000000-7f0020400000 r--p 00000000 fd:01 201 /data/hf cache/data-00000-of-00002.arrow
7f0030000000-7f0030001000 r--p 00000000 fd:01 300 /opt/lib/libcustom.so.1
7f0030001000-7f0030002000 r-xp 00001000 fd:01 300 /opt/lib/libcustom.so.1
7f0031000000-7f0031001000 r--p 00000000 fd:01 301 /opt/lib/_ext.cpython-311.so
7f0031001000-7f0031002000 r-xp 00001000 fd:01 301 /opt/lib/plugin.bin
7f0032000000-7f0032002000 r--p 00000000 fd:01 302 /usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache
7f0033000000-7f0033200000 rw-s 00000000 00:19 303 /dev/shm/torch_123_456 (deleted)
7f0034000000-7f0034200000 rw-s 00000000 00:01 304 /memfd:torch (deleted)
7f0035000000-7f0035800000 r--s 00000000 fd:01 305 /data/old.bin (deleted)
7f0036000000-7f0036800000 r--p 00000000 fd:01 306 /models/weights.safetensors
7f0037000000-7f0037100000 r--p 00000000 fd:01 307 /venv/lib/python3.11/site-packages/pkg/table.dat
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]
"""


def as_files(flat: array[int]) -> dict[tuple[int, int], int]:
    return {(flat[k], flat[k + 1]): flat[k + 2] for k in range(0, len(flat), MAPPED_FIELDS)}


def test_each_file_carries_its_directorys_tag() -> None:
    flat = mapped_data_files(MAPS, skip=("/venv/",))
    tags = {flat[k + 1]: flat[k + 3] for k in range(0, len(flat), MAPPED_FIELDS)}
    assert tags == {200: folder_tag(b"/data/train"), 201: folder_tag(b"/data/hf cache")}


def test_only_data_files_are_listed_with_overlapping_mappings_counted_once() -> None:
    files = as_files(mapped_data_files(MAPS, skip=("/venv/",)))
    # rows.bin: 256 MiB from offset 0, and 1 MiB from 0x0fff0000 (64 KiB of it overlaps)
    assert files == {
        (DEV, 200): 0x10000000 + 0x100000 - 0x10000,
        (DEV, 201): 0x400000,  # a path with a space is kept whole
    }


def test_the_python_tree_is_skipped_by_default() -> None:
    prefix = sys.prefix.rstrip("/") + "/"
    maps = (
        f"7f0000000000-7f0000100000 r--p 00000000 fd:01 9 {prefix}lib/data.bin\n"
        "7f0001000000-7f0001100000 r--p 00000000 fd:01 10 /data/x.npy\n"
    ).encode()
    assert as_files(mapped_data_files(maps)) == {(DEV, 10): 0x100000}


def test_a_listing_without_data_files_gives_nothing() -> None:
    assert len(mapped_data_files(b"")) == 0
    assert len(mapped_data_files(MAPS.replace(b"/data/", b"/dev/"), skip=("/venv/",))) == 0


SMAPS = b"""7f0000000000-7f0000100000 r--s 00000000 fd:01 10 /data/read.npy
Size:               1024 kB
KernelPageSize:        4 kB
Rss:                  64 kB
Pss:                  64 kB
VmFlags: rd sh mr mw me ms sd
7f0001000000-7f0001100000 r--s 00000000 fd:01 11 /data/unread.npy
Size:               1024 kB
Rss:                   0 kB
THPeligible:    0
7f0002000000-7f0002001000 rw-p 00000000 00:00 0
Rss:                   4 kB
7f0003000000-7f0003100000 r--s 00100000 fd:01 11 /data/unread.npy
Rss:                   0 kB
"""


def test_a_file_is_resident_where_one_of_its_mappings_has_pages() -> None:
    assert resident_files(SMAPS) == {(DEV, 10)}
    assert resident_files(b"") == set()


def test_a_file_mapped_in_the_parent_is_resident_in_a_forked_child_only_once_it_reads_it(
    tmp_path: Path,
) -> None:
    """The premise of ``resident_files``: a fork copies no page-table entries of a file
    mapping, so the parent's reads do not show in its worker."""
    import numpy as np

    path = tmp_path / "rows.bin"
    np.arange(1 << 18, dtype=np.float64).tofile(path)
    rows = np.memmap(path, mode="r", dtype=np.float64)
    inode = os.stat(path).st_ino

    def resident() -> bool:
        with open("/proc/self/smaps", "rb") as f:
            return any(i == inode for _, i in resident_files(f.read()))

    assert float(rows[100]) == 100.0 and resident()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports before and after its own read, then leaves at once
        before = resident()
        assert float(rows[200_000]) == 200_000.0
        os.write(w, bytes([before, resident()]))
        os._exit(0)
    os.close(w)
    got = os.read(r, 2)
    os.waitpid(pid, 0)
    assert got == bytes([False, True])


def test_mapped_bytes_per_sample_is_the_size_over_the_samples_held() -> None:
    assert capacity.mapped_bytes_per_sample(3000 * 65536, 3000) == 65536
    assert capacity.mapped_bytes_per_sample(100 * 511, 100) == 0.0  # an index file, not data
    assert capacity.mapped_bytes_per_sample(1 << 20, 0) == 0.0


def _collector(dataset_len: int | None) -> WatchCollector:
    loader = {"num_workers": "2", "batch_size": "4", "dataset": "Rows"}
    return WatchCollector(DataLoaderAdapter(LoaderSettings.parse(loader), loader), 4, dataset_len)


def _feed(c: WatchCollector, batches: int, rchar: int, mapped: dict[int, bytes]) -> None:
    """``batches`` batches of 4 samples from workers 0 and 1, each reading ``rchar`` bytes;
    ``mapped``: batch number -> the listing its worker sent with it."""
    wall = (1000).to_bytes(8, "little") * 4
    c.begin_epoch()
    t = 10**12
    for i in range(batches):
        stats = BatchStats(i % 2, wall, wall, 0, rchar, 0, 0, 0, 0, 0, t, mapped=mapped.get(i, b""))
        c.on_batch(t, t + 1000, stats)
        t += 10**6
    c.end_epoch(None)


def _listing(*files: tuple[int, int], folder: int = 0) -> bytes:
    return array("q", [v for inode, size in files for v in (DEV, inode, size, folder)]).tobytes()


def test_a_file_mapped_by_every_worker_counts_once_at_its_largest_extent() -> None:
    c = _collector(1000)
    mb = 1 << 20
    _feed(c, 40, 0, {2: _listing((1, 500 * mb)), 3: _listing((1, 400 * mb), (2, 100 * mb))})
    rec = c.stop()
    assert rec.watch is not None
    assert rec.watch.bytes_seen == "mmap"
    assert rec.watch.mapped_files == 2 and rec.watch.mapped_bytes == 600 * mb
    assert rec.dataset.bytes == 600 * mb
    assert rec.dataset.sample_bytes_mean == pytest.approx(600 * mb / 1000)
    assert rec.dataset.density == "medium"
    line = size_line(rec)
    assert "629 MB in 2 memory-mapped files, 629 kB per sample (medium density)" in line


def test_read_bytes_win_over_mapped_files_and_nothing_is_added_twice() -> None:
    c = _collector(1000)
    _feed(c, 40, 4 * 65536, {2: _listing((1, 1 << 30))})
    rec = c.stop()
    assert rec.watch is not None and rec.watch.bytes_seen == "read"
    assert rec.dataset.sample_bytes_mean == pytest.approx(65536)
    assert rec.dataset.bytes == 40 * 4 * 65536


def test_without_a_dataset_length_the_samples_of_the_longest_epoch_stand_in() -> None:
    c = _collector(None)
    _feed(c, 50, 0, {2: _listing((7, 200 * 65536))})
    rec = c.stop()
    assert rec.dataset.sample_bytes_mean == pytest.approx(200 * 65536 / 200)


def test_an_evicting_cache_counts_every_file_its_index_names_and_nothing_twice(
    tmp_path: Path,
) -> None:
    """A cache smaller than the data (litdata's max_cache_size) evicts chunks before any
    look: of 16 chunks, a worker saw 3 mapped (one since evicted) and the directory holds 2
    when the collector first hears of it. The index names all 16; the files seen mapped there
    are among them, and a file mapped from elsewhere still counts."""
    from tests.fixtures.shards import write_litdata

    cache = tmp_path / "cache"
    write_litdata(cache, chunks=16, per_chunk=64, size=4096)
    chunks = sorted(cache.glob("*.bin"))
    total = sum(p.stat().st_size for p in chunks)
    for p in chunks[2:]:
        p.unlink()
    c = _collector(1024)
    tag = folder_tag(str(cache).encode())
    seen = [(11, chunks[0].stat().st_size), (12, chunks[1].stat().st_size), (13, 999)]
    wall = (1000).to_bytes(8, "little") * 4
    c.begin_epoch()
    t = 10**12
    for i in range(40):
        mapped = _listing(*seen, folder=tag) + _listing((90, 1 << 20)) if i == 2 else b""
        turned = f"{cache}/*.bin".encode() if i == 5 else b""
        stats = BatchStats(i % 2, wall, wall, 0, 0, 0, 0, 0, 0, 0, t, mapped=mapped, turned=turned)
        c.on_batch(t, t + 1000, stats)
        t += 10**6
    c.end_epoch(None)
    rec = c.stop()
    assert rec.watch is not None and rec.watch.bytes_seen == "mmap"
    assert rec.watch.mapped_bytes == total + (1 << 20)
    assert rec.watch.mapped_files == 17
    assert rec.dataset.sample_bytes_mean == pytest.approx((total + (1 << 20)) / 1024)
    (note,) = [n for n in rec.notes if "in turn" in n]
    assert f"{cache}/index.json" in note and "16 files" in note


def test_nothing_seen_at_all_says_so() -> None:
    c = _collector(1000)
    _feed(c, 40, 64, {})
    rec = c.stop()
    assert rec.watch is not None and rec.watch.bytes_seen == "none"
    assert rec.dataset.density == "unknown"
    assert "not seen" in size_line(rec)


def test_a_stamped_batch_carries_its_listing_across_a_pickle() -> None:
    listing = _listing((5, 4096))
    stats = BatchStats(1, b"", b"", 0, 0, 0, 0, 0, 0, 0, 1, mapped=listing)
    got = pickle.loads(pickle.dumps(Stamped(torch.zeros(2), stats), protocol=5))
    assert got.stats.mapped == listing


_LISTING_COST = """
import os, sys, tempfile, time
import numpy as np, torch  # a worker's imports: torch's libraries are most of its mappings
from ioprobe.loaders import torch_worker as wt
timings = []
with tempfile.TemporaryDirectory() as d:
    rows = None
    for label in ("no data file", "unchanged", "data file not read"):
        if label == "data file not read":
            path = os.path.join(d, "rows.bin")
            np.zeros(1 << 16).tofile(path)
            rows = np.memmap(path, mode="r")
        # CPU time (the kernel's listing included): a busy host stretches wall time
        t = time.process_time()
        for _ in range(20):
            if label != "unchanged":
                wt._S.listed = wt._S.sent = b""
            wt._mapped()
        timings.append((time.process_time() - t) / 20)
    del rows
print(*timings)
"""


def test_listing_the_mapped_files_costs_milliseconds_at_most_log2_times(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The per-batch cost: a counter and a bit test; at a worker's 1st, 2nd, 4th, 16th ...
    batch the maps listing, and the smaps listing while a data file is mapped and not yet
    resident; an unchanged listing whose files are all resident is not parsed again.

    Timed in a fresh interpreter with a worker's imports: the suite's own process has every
    framework of every test mapped (1,100 mappings, which doubled the smaps listing)."""
    import numpy as np

    out = subprocess.run(
        [sys.executable, "-c", _LISTING_COST], capture_output=True, text=True, check=True
    )
    none, unchanged, not_read = (float(v) for v in out.stdout.split())
    saved = wt._S.own, wt._S.listed, wt._S.sent
    try:
        path = tmp_path / "rows.bin"
        np.zeros(1 << 16).tofile(path)
        rows = np.memmap(path, mode="r")
        wt._S.listed = wt._S.sent = b""
        assert wt._mapped()[0] == b""  # mapped, not yet read here: left out
        assert int(rows[0]) == 0 and wt._mapped()[0] != b""  # read now: listed, then sent
        assert wt._mapped() == (b"", b"")
        # unmapped: its directory and ending are sent once, as a reader's in turn
        del rows
        assert wt._mapped()[1] == f"{tmp_path}/*.bin".encode()
        assert wt._mapped() == (b"", b"")
    finally:
        wt._S.own, wt._S.listed, wt._S.sent = saved
        wt._S.present = {}
        wt._S.turned.clear()
    with capsys.disabled():
        print(
            f"\nmapped files: no data file {none * 1e6:.0f} us, unchanged {unchanged * 1e6:.0f}"
            f" us, data file not read {not_read * 1e6:.0f} us"
        )
    assert none < 0.01 and not_read < 0.05
    assert unchanged < none + 0.002


def test_a_worker_lists_its_mapped_files_at_its_1st_2nd_4th_16th_64th_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed: list[int] = []

    def spy() -> tuple[bytes, bytes]:
        listed.append(wt._S.batches)
        return b"", b""

    monkeypatch.setattr(wt, "_mapped", spy)
    monkeypatch.setattr(wt, "_S", wt._WorkerState())  # a worker's state, fresh
    collate = wt.TimedCollate(torch.stack)
    for _ in range(300):
        collate([torch.zeros(2)])
    assert listed == [1, 2, 4, 16, 64, 256]


def test_a_file_replaced_by_another_on_the_same_inode_marks_its_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache that deletes a chunk and writes the next may hand the new file the old one's
    inode: by (device, inode) alone nothing was unmapped, and the directory went unmarked in
    one run of two."""
    line = "7f0000000000-7f0000100000 r--s 00000000 fd:01 77 /cache/chunk-{}.bin\n"
    smaps = [line.format(0).encode() + b"Rss: 4 kB\n"]
    listings = iter([line.format(0).encode(), line.format(1).encode()])

    def read_all(name: str) -> bytes:
        return next(listings) if name.endswith("/maps") else smaps[0]

    monkeypatch.setattr(wt, "_read_all", read_all)
    monkeypatch.setattr(wt, "_S", wt._WorkerState())  # a worker's state, fresh
    assert wt._mapped()[1] == b""
    smaps[0] = line.format(1).encode() + b"Rss: 4 kB\n"
    assert wt._mapped()[1] == b"/cache/*.bin"

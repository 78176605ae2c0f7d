"""Bytes read through memory maps in watched runs, against a file of a known size per sample.

The datasets read a temporary file of exactly ``S`` bytes per sample, through a NumPy memmap
(page faults: no byte shows in the workers' read counters) or through ``read()``; a
third reads nothing while a memmap of the same file stays alive in the parent, which every
forked worker inherits. The record must state the bytes per sample the file holds, say how
it saw them, and never count the same bytes twice or a file nobody read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe import units
from ioprobe.record import RunRecord
from ioprobe.render.facts import size_line

pytestmark = pytest.mark.slow

KIB = 1024


def make_file(path: Path, sample_bytes: int, samples: int) -> Path:
    """``samples`` records of ``sample_bytes`` random bytes each, written in 8 MiB pieces."""
    total = sample_bytes * samples
    with path.open("wb") as f:
        while total > 0:
            piece = min(total, 8 << 20)
            f.write(os.urandom(piece))
            total -= piece
    return path


class MemmapDataset(Dataset[torch.Tensor]):
    """Sample ``i`` is row ``i`` of a memmap: read through page faults when copied."""

    def __init__(self, path: Path, sample_bytes: int) -> None:
        self.rows = np.memmap(path, dtype=np.uint8, mode="r").reshape(-1, sample_bytes)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self.rows[i]))


class ReadDataset(Dataset[torch.Tensor]):
    """The same samples through open() and read(): every byte shows in rchar."""

    def __init__(self, path: Path, sample_bytes: int, samples: int) -> None:
        self.path, self.size, self.n = path, sample_bytes, samples

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        with self.path.open("rb") as f:
            f.seek(i * self.size)
            return torch.frombuffer(bytearray(f.read(self.size)), dtype=torch.uint8)


class NothingDataset(Dataset[torch.Tensor]):
    def __init__(self, samples: int) -> None:
        self.n = samples

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((16,), i)


def watched_run(ds: Dataset[Any], batch_size: int = 32) -> RunRecord:
    loader = DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(3),
    )
    w = ioprobe.watch(loader)
    for _ in w:
        pass
    return w.run


@pytest.mark.parametrize(
    ("sample_bytes", "samples", "density"),
    [(64 * KIB, 3000, "low"), (512 * KIB, 400, "medium")],
)
def test_memmap_reads_give_the_files_bytes_per_sample_and_density(
    tmp_path: Path, sample_bytes: int, samples: int, density: str
) -> None:
    path = make_file(tmp_path / "rows.bin", sample_bytes, samples)
    run = watched_run(MemmapDataset(path, sample_bytes), batch_size=32 if samples > 1000 else 8)
    w = run.watch
    assert w is not None
    assert w.bytes_seen == "mmap"
    assert w.mapped_files == 1 and w.mapped_bytes == sample_bytes * samples
    assert run.dataset.sample_bytes_mean == pytest.approx(sample_bytes, rel=0.1)
    assert run.dataset.density == density
    assert run.dataset.bytes == sample_bytes * samples
    # the workers' read() calls saw no more than IPC: the maps are where the bytes came from
    steady = sum(e.read_chars - e.startup_read_chars for e in w.epochs)
    assert steady / samples < 512
    line = size_line(run)
    assert "memory-mapped" in line and f"{units.size(sample_bytes)} per sample" in line
    again = RunRecord.from_json(run.to_json())
    assert again.watch is not None and again.watch.bytes_seen == "mmap"
    assert size_line(again) == line


def test_a_small_memmap_run_of_a_few_batches_per_worker_is_seen(tmp_path: Path) -> None:
    """8 MB in 512 samples, 8 batches per worker: a worker's first batch already shows its
    mapped file resident (a gate on the workers' resident file pages growing by 4 MiB
    missed this run)."""
    size, n = 16 * KIB, 512
    path = make_file(tmp_path / "rows.bin", size, n)
    run = watched_run(MemmapDataset(path, size))
    w = run.watch
    assert w is not None
    assert w.bytes_seen == "mmap"
    assert w.mapped_files == 1 and w.mapped_bytes == size * n
    assert run.dataset.sample_bytes_mean == pytest.approx(size)


def test_read_calls_still_count_through_rchar_with_the_same_file_mapped_in_the_parent(
    tmp_path: Path,
) -> None:
    size, n = 64 * KIB, 3000
    path = make_file(tmp_path / "rows.bin", size, n)
    mapped_in_parent = MemmapDataset(path, size)  # inherited by every forked worker
    assert int(mapped_in_parent.rows[0, 0]) >= 0
    run = watched_run(ReadDataset(path, size, n))
    w = run.watch
    assert w is not None
    assert w.bytes_seen == "read"
    assert w.mapped_bytes == 0  # no double count: the workers read, they faulted nothing
    assert run.dataset.sample_bytes_mean == pytest.approx(size, rel=0.1)
    assert run.dataset.density == "low"
    assert "read in 1 epoch" in size_line(run)


def test_a_dataset_reading_nothing_is_not_seen_though_a_mapped_file_is_inherited(
    tmp_path: Path,
) -> None:
    size, n = 64 * KIB, 3000
    path = make_file(tmp_path / "rows.bin", size, n)
    mapped_in_parent = MemmapDataset(path, size)
    assert int(mapped_in_parent.rows[-1, -1]) >= 0
    run = watched_run(NothingDataset(n))
    w = run.watch
    assert w is not None
    assert w.bytes_seen == "none" and not w.storage_metered
    assert w.mapped_bytes == 0
    assert run.dataset.sample_bytes_mean == 0.0 and run.dataset.density == "unknown"
    assert "bytes per sample not seen" in size_line(run)


class ChunkInTurnDataset(Dataset[torch.Tensor]):
    """Samples packed 64 to a chunk file, read as litdata reads a local chunk: the chunk is
    memory-mapped, and unmapped before the next one is mapped, so a worker holds one chunk at
    a time and most chunks come and go between two looks at its maps. Unshuffled, a batch
    of 32 reads half a chunk."""

    def __init__(self, folder: Path, sample_bytes: int, per_chunk: int, chunks: int) -> None:
        self.folder, self.size, self.per, self.n = folder, sample_bytes, per_chunk, chunks
        self.current: tuple[int, Any] | None = None

    def __len__(self) -> int:
        return self.per * self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        chunk, row = divmod(i, self.per)
        if self.current is None or self.current[0] != chunk:
            if self.current is not None:
                self.current[1]._mmap.close()  # unmapped now, not when collected
            self.current = None
            rows = np.memmap(self.folder / f"chunk-{chunk:03d}.bin", dtype=np.uint8, mode="r")
            self.current = (chunk, rows.reshape(-1, self.size))
        return torch.from_numpy(np.array(self.current[1][row]))


def test_chunks_mapped_in_turn_count_every_chunk_of_their_directory(tmp_path: Path) -> None:
    """16 chunks of 64 samples of 16 KiB, 2 workers taking batches of 32 in turn: each worker
    maps 8 chunks one after another, and its maps are looked at in only 4 of its 16 batches
    (at 1, 2, 4 and 16): before, the record counted the 6 chunks seen mapped, 6.1 kB per
    sample. A chunk unmapped between two looks marks its directory and ending, whose files
    all count; the index beside them does not."""
    size, per, chunks = 16 * KIB, 64, 16
    folder = tmp_path / "chunks"
    folder.mkdir()
    for c in range(chunks):
        make_file(folder / f"chunk-{c:03d}.bin", size, per)
    (folder / "index.json").write_text('{"chunks": 16}')
    loader = DataLoader(ChunkInTurnDataset(folder, size, per, chunks), batch_size=32, num_workers=2)
    w = ioprobe.watch(loader)
    for _ in w:
        pass
    run = w.run
    assert run.watch is not None and run.watch.bytes_seen == "mmap"
    assert run.watch.mapped_files == chunks
    assert run.dataset.bytes == size * per * chunks
    assert run.dataset.sample_bytes_mean == pytest.approx(size)
    (note,) = [n for n in run.notes if "in turn" in n]
    assert f"{folder}/*.bin" in note and "16 files" in note


class RemoteDir:
    """litdata's ``Dir``: the URL a StreamingDataset was given, and its local cache path."""

    def __init__(self, url: str) -> None:
        self.url, self.path = url, None


class DownloadedChunks(MemmapDataset):
    """A chunked format read from object storage, as litdata reads S3: each worker sets up its
    client at its first sample, reading ``setup_bytes`` of files (the CA bundle, the SDK's
    endpoint tables) through read(); the chunks come over a socket into a local cache and
    are mapped from there (here: already there), so no byte of data passes through read()."""

    def __init__(self, path: Path, sample_bytes: int, setup: Path) -> None:
        super().__init__(path, sample_bytes)
        self.input_dir = RemoteDir("s3://training-data/train")
        self.setup = setup
        self.ready = False  # per worker: each is a copy made at fork

    def __getitem__(self, i: int) -> torch.Tensor:
        if not self.ready:
            self.setup.read_bytes()
            self.ready = True
        return super().__getitem__(i)


def test_a_remote_chunk_reader_counts_its_mapped_chunks_not_its_client_set_up(
    tmp_path: Path,
) -> None:
    sample_bytes, samples = 16 * KIB, 2048
    path = make_file(tmp_path / "chunk-0.bin", sample_bytes, samples)
    setup = make_file(tmp_path / "ca-bundle.crt", 3 * KIB, 1024)  # 3 MiB per worker
    run = watched_run(DownloadedChunks(path, sample_bytes, setup))
    w = run.watch
    assert w is not None and w.bytes_seen == "mmap"
    # the first round read 6 MiB for 64 samples, 6 times the data: the lump is set-up
    assert sum(e.startup_read_chars for e in w.epochs) >= 2 * (3 << 20)
    assert run.dataset.sample_bytes_mean == pytest.approx(sample_bytes, rel=0.1)
    assert (
        run.dataset.remote and run.dataset.target == "DownloadedChunks (s3://training-data/train)"
    )
    assert w.settings.source == "s3://training-data/train"


class EvictingCache(ChunkInTurnDataset):
    """A chunked format streamed through a local cache with room for one chunk per worker, as
    litdata with a small ``max_cache_size`` runs: a chunk is downloaded into the cache when
    first needed (written from memory, as bytes off a socket are: nothing read()) and deleted
    as soon as the worker moves on, so almost every chunk comes and goes between two looks at
    the worker's maps or the cache's directory. The cache keeps the format's index, naming
    every chunk."""

    def __getitem__(self, i: int) -> torch.Tensor:
        chunk = i // self.per
        if self.current is not None and self.current[0] != chunk:
            self.current[1]._mmap.close()
            (self.folder / f"chunk-{self.current[0]:03d}.bin").unlink()  # evicted
            self.current = None
        if self.current is None:
            data = bytes([chunk]) * (self.size * self.per)
            (self.folder / f"chunk-{chunk:03d}.bin").write_bytes(data)  # downloaded
        return super().__getitem__(i)


def test_a_cache_that_evicts_its_chunks_still_counts_every_chunk_its_index_names(
    tmp_path: Path,
) -> None:
    """16 chunks of 64 samples of 16 KiB through a cache holding one chunk per worker: when
    the collector first lists the cache, 2 chunks at most are there (before, 2.0 kB per
    sample for 16 KiB); the index beside them names all 16 with their sizes."""
    size, per, chunks = 16 * KIB, 64, 16
    cache = tmp_path / "cache"
    cache.mkdir()
    listed = [
        {"chunk_bytes": size * per, "chunk_size": per, "filename": f"chunk-{c:03d}.bin"}
        for c in range(chunks)
    ]
    (cache / "index.json").write_text(json.dumps({"chunks": listed, "config": {}}))
    # a batch is a chunk: each worker's chunks are its own, as a litdata worker's are
    ds = EvictingCache(cache, size, per, chunks)
    w = ioprobe.watch(DataLoader(ds, batch_size=per, num_workers=2))
    for _ in w:
        pass
    run = w.run
    assert run.watch is not None and run.watch.bytes_seen == "mmap"
    assert run.watch.mapped_files == chunks
    assert run.dataset.sample_bytes_mean == pytest.approx(size)
    assert len(list(cache.glob("*.bin"))) <= 2  # the cache did evict
    (note,) = [n for n in run.notes if "in turn" in n]
    assert f"{cache}/index.json" in note

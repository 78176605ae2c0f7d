"""Hugging Face ``datasets`` read by a watched DataLoader trains as unwatched, and the record
states the bytes the workers read. The truth is built here: rows of 4,096 float32 (16,384
bytes) and an int64 label that is the row's id, saved as Arrow (``save_to_disk``, memory-mapped
back by ``load_from_disk``) or written as uncompressed Parquet files streamed by
``load_dataset(..., streaming=True)``. Run as a module (``python -m
tests.integration.watch.test_hf_datasets_real ARROW_DIR``), this file is the training script that
``ioprobe run`` wraps: it prints each batch's sums."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.record import RunRecord
from tests.support.cli import watched_and_plain

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only: never the Hub
# the dev extras install datasets; an image without it collects this module and skips it
datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]

ROWS, FLOATS, BATCH, EPOCHS = 512, 4096, 32, 2
ROW_BYTES = FLOATS * 4 + 8  # the float32 array and the int64 label


def table() -> Any:
    """ROWS rows of random float32 ``x`` and ``y`` = the row's id, in memory."""
    x = np.random.default_rng(0).standard_normal((ROWS, FLOATS), dtype=np.float32)
    return datasets.Dataset.from_dict({"x": list(x), "y": list(range(ROWS))})


def save_arrow(root: Path) -> Path:
    datasets.disable_progress_bars()
    path = root / "arrow"
    table().save_to_disk(str(path))
    return path


def write_parquet(root: Path, files: int) -> list[str]:
    """The rows cut into ``files`` contiguous Parquet files of one row group each, plain and
    uncompressed: a file holds its rows' bytes and little else."""
    rows = table().data.table
    per = ROWS // files
    paths = []
    for k in range(files):
        path = root / f"part-{k:02d}.parquet"
        pq.write_table(
            rows.slice(k * per, per), str(path), use_dictionary=False, compression="none"
        )
        paths.append(str(path))
    return paths


def stream(files: list[str], cache: Path) -> Any:
    return datasets.load_dataset(
        "parquet", data_files=files, split="train", streaming=True, cache_dir=str(cache)
    ).with_format("torch")


def epochs(loader: Any) -> list[dict[str, torch.Tensor]]:
    return [batch for _ in range(EPOCHS) for batch in loader]


def assert_same_batches(watched: list[Any], plain: list[Any]) -> None:
    assert len(watched) == len(plain) == EPOCHS * ROWS // BATCH
    for w, p in zip(watched, plain, strict=True):
        assert torch.equal(w["y"], p["y"])
        assert torch.equal(w["x"], p["x"])


def shuffled_loader(path: Path) -> DataLoader[Any]:
    return DataLoader(
        datasets.load_from_disk(str(path)).with_format("torch"),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(11),
    )


def test_a_watched_arrow_dataset_gives_the_same_batches_and_its_mapped_bytes_per_row(
    tmp_path: Path,
) -> None:
    path = save_arrow(tmp_path)
    plain = epochs(shuffled_loader(path))
    watched_loader = ioprobe.watch(shuffled_loader(path))
    watched = epochs(watched_loader)
    assert_same_batches(watched, plain)
    # shuffled, and each epoch holds every row once
    ids = [b["y"].tolist() for b in plain]
    half = len(ids) // 2
    assert sorted(i for b in ids[:half] for i in b) == list(range(ROWS))
    assert ids[:half] != ids[half:]
    run = watched_loader.run
    w = run.watch
    assert w is not None
    assert [e.samples for e in w.epochs] == [ROWS] * EPOCHS
    # Arrow files are memory-mapped: the bytes come as page faults, seen through the maps
    assert w.bytes_seen == "mmap"
    assert w.mapped_files == 1
    arrow_files = list(path.glob("*.arrow"))
    assert len(arrow_files) == 1 and w.mapped_bytes >= arrow_files[0].stat().st_size
    assert run.dataset.files == ROWS
    assert run.dataset.sample_bytes_mean == pytest.approx(ROW_BYTES, rel=0.1)


def test_a_watched_parquet_stream_gives_the_same_samples_as_unwatched(tmp_path: Path) -> None:
    files = write_parquet(tmp_path, 2)  # one file per worker

    def loader() -> DataLoader[Any]:
        return DataLoader(stream(files, tmp_path / "cache"), batch_size=BATCH, num_workers=2)

    plain = epochs(loader())
    watched_loader = ioprobe.watch(loader())
    watched = epochs(watched_loader)
    # the DataLoader takes the workers' batches in turn: the order is deterministic
    assert_same_batches(watched, plain)
    assert sorted(i for b in plain[: len(plain) // 2] for i in b["y"].tolist()) == list(range(ROWS))
    w = watched_loader.run.watch
    assert w is not None
    assert [e.samples for e in w.epochs] == [ROWS] * EPOCHS


def rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


def bytes_read_per_row(files: list[str], cache: Path) -> float:
    """What reading the stream costs, measured in this process: the bytes a pass passes to
    read(), per row, after a first pass that also read the modules imported lazily. Arrow
    reads each file whole and its tail once more for the footer (64 KiB), so this is more
    than the files hold."""
    ds = stream(files, cache)
    assert sum(1 for _ in ds) == ROWS
    before = rchar()
    assert sum(1 for _ in ds) == ROWS
    return (rchar() - before) / ROWS


def test_a_watched_parquet_stream_records_the_bytes_its_workers_read_per_row(
    tmp_path: Path,
) -> None:
    """One batch per file, eight files per worker: the workers' first round of batches (left
    out of bytes per sample, it also reads lazily imported modules) reads its own files, and
    every later batch reads one file, so the steady batches show what a row costs."""
    files = write_parquet(tmp_path, ROWS // BATCH)
    truth = bytes_read_per_row(files, tmp_path / "cache")
    held = sum(os.path.getsize(f) for f in files) / ROWS
    assert ROW_BYTES <= held <= truth < 1.2 * held
    loader = ioprobe.watch(
        DataLoader(stream(files, tmp_path / "cache"), batch_size=BATCH, num_workers=2)
    )
    ids = [i for b in epochs(loader) for i in b["y"].tolist()]
    assert sorted(ids) == sorted(list(range(ROWS)) * EPOCHS)
    run = loader.run
    w = run.watch
    assert w is not None
    assert w.bytes_seen == "read"
    assert run.dataset.sample_bytes_mean == pytest.approx(truth, rel=0.05)


def test_a_parquet_stream_read_whole_in_the_first_batch_still_shows_its_bytes(
    tmp_path: Path,
) -> None:
    files = write_parquet(tmp_path, 2)  # one file per worker, each read at its first row
    truth = bytes_read_per_row(files, tmp_path / "cache")
    loader = ioprobe.watch(
        DataLoader(stream(files, tmp_path / "cache"), batch_size=BATCH, num_workers=2)
    )
    epochs(loader)
    run = loader.run
    w = run.watch
    assert w is not None
    # what the workers read: each epoch read both files
    assert all(e.read_chars >= 0.9 * truth * ROWS for e in w.epochs)
    assert w.bytes_seen == "read"
    assert run.dataset.sample_bytes_mean == pytest.approx(truth, rel=0.15)


def test_ioprobe_run_around_an_arrow_training_script_prints_as_unwatched(
    tmp_path: Path,
) -> None:
    path = save_arrow(tmp_path)
    out = tmp_path / "run.json"
    watched, plain = watched_and_plain(
        out, sys.executable, "-m", "tests.integration.watch.test_hf_datasets_real", str(path)
    )
    assert watched.stdout == plain.stdout
    sums = [json.loads(line) for line in plain.stdout.splitlines()]
    assert len(sums) == EPOCHS * ROWS // BATCH
    rec = RunRecord.load(out)
    w = rec.watch
    assert w is not None
    assert [e.samples for e in w.epochs] == [ROWS] * EPOCHS
    assert w.bytes_seen == "mmap"
    assert rec.dataset.sample_bytes_mean == pytest.approx(ROW_BYTES, rel=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    for batch in epochs(shuffled_loader(Path(sys.argv[1]))):
        print(json.dumps([round(batch["x"].sum().item(), 3), batch["y"].tolist()]))

"""A watched DataLoader's memory, ``.run`` time and record stay bounded however it is driven.

Code that takes ``batch = next(iter(loader))`` once per step (RL, evaluation loops) makes one
epoch per batch. Before the epochs were bounded, 200,000 of them grew the main process by
1.7 kB each, ``.run`` took 22 s and the record was 269 MB. Here a real DataLoader over a
trivial dataset (``range``, ``num_workers=0``: the watch's own work is all there is) runs
long passes and one-batch epochs; the main process's resident memory, the time of ``.run``
and the saved record's size must hold whatever the length, and the record must say that it
merged epochs.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect.timeline import MAIN_COLUMNS, MAIN_ROWS, WORKER_COLUMNS, WORKER_ROWS
from ioprobe.monitor.assemble import LOG_COLUMNS
from ioprobe.monitor.collector import (
    BATCH_LOG_ROWS,
    EPOCHS_KEPT,
    MAX_KEPT,
    SPAN_SAMPLES,
)
from ioprobe.record import RunRecord

# What the bounded buffers hold when full, in bytes: the per-batch reservoirs (stall, step,
# sample wall and CPU, sample bytes, device step), the main and one worker track, the batch
# log (8-byte integers), the read-scaling spans (a tuple and two small bytes objects per
# one-sample batch, about 250 bytes) and the kept epochs (a WatchEpoch is about 2.2 kB).
CAP_BYTES = (
    8
    * (
        6 * MAX_KEPT
        + MAIN_ROWS * len(MAIN_COLUMNS)
        + WORKER_ROWS * len(WORKER_COLUMNS)
        + BATCH_LOG_ROWS * LOG_COLUMNS
    )
    + SPAN_SAMPLES * 250
    + EPOCHS_KEPT * 2_200
)


def rss() -> int:
    """The main process's resident bytes now (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass
class Outcome:
    grown: int  # resident bytes
    per_epoch: float  # traced bytes kept per one-batch epoch past the cap
    run_s: float
    size: int  # the saved record's bytes
    record: RunRecord


def drive(batches: int, epochs: int, tmp: Path) -> Outcome:
    """Take ``batches`` batches in one pass, then ``epochs`` one-batch epochs by
    ``next(iter(loader))``; the main process's growth in resident memory (after a warm-up
    pass of 2,000 batches, so imports and first allocations are left out), the traced
    allocations per one-batch epoch over a stretch past the cap, the seconds ``.run`` took,
    the saved record's bytes, and the record."""
    loader = ioprobe.watch(DataLoader(range(batches + 2_000), batch_size=1))
    it = iter(loader)
    for _ in range(2_000):
        next(it)
    gc.collect()
    before = rss()
    for _ in it:
        pass
    half = epochs // 2
    for _ in range(half):
        next(iter(loader))
    # allocations kept per epoch, well past the cap: what would grow without a bound
    probe = min(2_000, epochs - half)
    gc.collect()
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
    for _ in range(probe):
        next(iter(loader))
    gc.collect()
    per_epoch = (tracemalloc.get_traced_memory()[0] - t0) / probe
    tracemalloc.stop()
    for _ in range(epochs - half - probe):
        next(iter(loader))
    gc.collect()
    grown = rss() - before
    t0 = time.perf_counter()
    rec = loader.run
    run_s = time.perf_counter() - t0
    path = tmp / "run.json"
    rec.save(path)
    return Outcome(grown, per_epoch, run_s, path.stat().st_size, rec)


def check_record(rec: RunRecord, batches: int, epochs: int) -> None:
    """The record counts every batch and epoch, and says it merged epochs."""
    assert rec.watch is not None
    eps = rec.watch.epochs
    assert len(eps) <= EPOCHS_KEPT
    assert sum(e.merged for e in eps) == epochs + 1  # the long pass, then the one-batch ones
    assert sum(e.batches for e in eps) == batches + 2_000 + epochs
    assert rec.watch.epochs_merged > epochs // 2
    assert any(f"{epochs + 1:,} epochs" in n and "merged" in n for n in rec.notes)
    assert any("the batch log keeps the first" in n for n in rec.notes)
    assert rec.watch.batch_log is not None
    assert rec.watch.batch_log.dropped == batches + 2_000 + epochs - BATCH_LOG_ROWS


def test_one_batch_epochs_and_long_passes_keep_memory_time_and_record_bounded(
    tmp_path: Path,
) -> None:
    batches, epochs = 90_000, 10_000
    out = drive(batches, epochs, tmp_path)
    print(
        f"\n{batches:,} batches + {epochs:,} one-batch epochs: RSS +{out.grown / 1e6:.1f} MB "
        f"(cap {CAP_BYTES / 1e6:.1f} MB), {out.per_epoch:.0f} B traced per epoch past the "
        f"cap, .run {out.run_s:.2f} s, record {out.size / 1e6:.1f} MB"
    )
    # unbounded, each epoch kept about 2.1 kB
    assert out.per_epoch < 200
    assert out.grown < 2 * CAP_BYTES
    assert out.run_s < 2.0
    assert out.size < 20e6
    check_record(out.record, batches, epochs)


@pytest.mark.long
def test_a_million_batches_and_a_hundred_thousand_epochs_stay_flat(tmp_path: Path) -> None:
    """The done-when of issue 31's point 3: 10^6 batches and 10^5 epochs, main-process growth
    under 50 MB, ``.run`` under 2 s, the record under 20 MB."""
    batches, epochs = 1_000_000, 100_000
    out = drive(batches - epochs - 2_000, epochs, tmp_path)
    print(
        f"\n{batches:,} batches with {epochs:,} one-batch epochs: RSS +{out.grown / 1e6:.1f} "
        f"MB, {out.per_epoch:.0f} B traced per epoch past the cap, .run "
        f"{out.run_s:.2f} s, record {out.size / 1e6:.1f} MB"
    )
    assert out.grown < 50e6
    assert out.per_epoch < 200
    assert out.run_s < 2.0
    assert out.size < 20e6
    check_record(out.record, batches - epochs - 2_000, epochs)


def test_one_batch_epochs_on_persistent_workers_merge_and_read_sanely() -> None:
    """Two persistent workers (re-iterating is cheap, as an evaluation loop has it) and 600
    one-batch epochs, past the cap: the record counts every epoch and batch, and the
    analysis reads it whole (the epoch starts, the delivered rate, every view)."""
    from ioprobe.analysis.epochs import epoch_starts
    from ioprobe.analysis.report import findings
    from ioprobe.render import markdown

    epochs = 600
    loader = ioprobe.watch(
        DataLoader(range(10_000), batch_size=4, num_workers=2, persistent_workers=True)
    )
    for _ in range(epochs):
        next(iter(loader))
    rec = loader.run
    assert rec.watch is not None
    eps = rec.watch.epochs
    assert len(eps) <= EPOCHS_KEPT < epochs
    assert sum(e.merged for e in eps) == epochs and sum(e.batches for e in eps) == epochs
    assert sum(e.samples for e in eps) == 4 * epochs
    # the workers started once (each counted with the first batch it delivered)
    assert 1 <= sum(e.workers_started for e in eps) <= 2
    starts = epoch_starts(rec)
    assert starts is not None and starts.persistent and starts.samples == 4 * epochs
    assert sum(e.merged for e in starts.epochs) == epochs
    # each start is iter() and one batch's wait: a few ms, never the sum of a merged entry's
    assert max(e.seconds for e in starts.epochs[1:]) < 1.0
    text = markdown.render(rec, findings(rec))
    assert f"{epochs:,} epochs" in text

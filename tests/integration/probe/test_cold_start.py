"""A cold first batch: what a warm page cache would save at an epoch's start, against reruns.

The test writes its own files and drops the first round's (one batch per worker) from the
page cache with ``posix_fadvise(DONTNEED)``, so the epoch starts on reads the device serves
while the rest are cached; the rerun keeps them all cached. The predicted saving comes from
the cold run's record alone and is checked against the measured difference of the two
starts, paired.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.epochs import EpochStarts, epoch_starts
from ioprobe.analysis.report import findings
from ioprobe.record import RunRecord
from ioprobe.render.facts import epoch_facts
from tests.fixtures.datasets import FileBytes, evict

FILES, SIZE, BATCH, WORKERS = 64, 8 << 20, 16, 2
FIRST_ROUND = BATCH * WORKERS


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("cold-start")
    out = []
    for i in range(FILES):
        p = root / f"f{i:03d}.bin"
        p.write_bytes(os.urandom(SIZE))
        out.append(str(p))
    os.sync()  # dirty pages cannot be dropped
    return out


def run(paths: list[str], cold: bool) -> tuple[RunRecord, EpochStarts]:
    if cold:
        evict(paths[:FIRST_ROUND])
    loader = ioprobe.watch(DataLoader(FileBytes(paths), batch_size=BATCH, num_workers=WORKERS))
    for _ in loader:
        time.sleep(0.002)
    st = epoch_starts(loader.run)
    assert st is not None
    return loader.run, st


def test_a_warm_page_cache_saving_is_predicted_at_most_30_percent_high_and_never_low(
    paths: list[str],
) -> None:
    predicted, measured = [], []
    for _ in range(5):  # paired: cold, then warm, back to back
        cold_rec, cold = run(paths, cold=True)
        _, warm = run(paths, cold=False)
        e = cold.epochs[0]
        # the premise is in the record: the round fetched its files from the device
        assert e.cold_read_bytes >= 0.9 * FIRST_ROUND * SIZE
        assert e.cold_read_seconds is not None
        predicted.append(e.cold_read_seconds)
        measured.append(e.seconds - warm.epochs[0].seconds)
        # warm, the round fetched nothing worth naming and nothing is predicted
        assert warm.epochs[0].cold_read_seconds is None and warm.warm_saved_seconds is None
    # the prediction reads high: 8-17% over 24 pairs, and 25% in one clean-clone run of the
    # whole suite. A warm run's first batch also takes longer than its later ones (a new
    # process's first buffers), which a cold record cannot see. Low only where other work
    # slows a cold epoch past its first round, which the saving measured here then counts:
    # 20% low on the median of 3 pairs in one clean-clone run on 2 cores (0.18 s predicted,
    # 0.23 s measured). At most 30% high, at most 20% low, on the median of 5 pairs
    ratio = statistics.median(predicted) / statistics.median(measured)
    assert 0.8 <= ratio <= 1.3, (predicted, measured)
    assert cold.fits_in_memory is True
    (line,) = epoch_facts(findings(cold_rec))
    assert "a warm page cache saves it" in line[1]


def test_files_that_were_never_in_the_cache_beyond_the_round_still_predict_a_lower_bound(
    paths: list[str],
) -> None:
    # every file cold: the later batches read from the device too, so the warm batch time
    # falls back to the round's CPU time, and the saving is at least the reads' wait
    evict(paths)
    loader = ioprobe.watch(DataLoader(FileBytes(paths), batch_size=BATCH, num_workers=WORKERS))
    for _ in loader:
        pass
    st = epoch_starts(loader.run)
    assert st is not None
    e = st.epochs[0]
    assert e.cold_read_seconds is not None and 0 < e.cold_read_seconds <= e.seconds


def test_reading_the_same_files_twice_has_no_cold_start(tmp_path: Path) -> None:
    p = tmp_path / "small.bin"
    p.write_bytes(b"x" * 4096)
    loader = ioprobe.watch(DataLoader(FileBytes([str(p)] * 64), batch_size=8, num_workers=2))
    for _ in loader:
        pass
    st = epoch_starts(loader.run)
    assert st is not None and st.warm_saved_seconds is None

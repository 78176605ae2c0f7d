"""Epoch ends on a real DataLoader whose workers take a known time to shut down.

``SlowStop`` holds each worker 0.3 s as it exits (asleep, so the two-core host does not blur
it), as spawned workers' shutdown costs 0.3-0.38 s per epoch. Without persistent workers
the loader joins them in the next() that ends each epoch: the end-to-end rate must count
it (checked against the loop's own wall clock), and the ``persistent_workers=True``
prediction, which saves it, is checked against paired reruns with the setting.
"""

from __future__ import annotations

import statistics
import time

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.epochs import epoch_starts
from ioprobe.record import RunRecord
from tests.fixtures.datasets import SleepDataset, SlowStop

STOP_S = 0.3
EPOCHS = 3


def run(persistent: bool) -> tuple[RunRecord, float]:
    """The record of ``EPOCHS`` passes, and their wall time by the loop's own clock, each
    from its ``for`` to its end."""
    loader = ioprobe.watch(
        DataLoader(
            SleepDataset(240, 0.002),
            batch_size=4,
            num_workers=2,
            worker_init_fn=SlowStop(STOP_S),
            persistent_workers=persistent,
        )
    )
    wall = 0.0
    for _ in range(EPOCHS):
        t0 = time.perf_counter()
        for _ in loader:
            time.sleep(0.001)
        wall += time.perf_counter() - t0
    return loader.run, wall


@pytest.fixture(scope="module")
def restarting() -> tuple[RunRecord, float]:
    return run(persistent=False)


def test_every_epoch_end_waits_for_its_workers_to_stop(
    restarting: tuple[RunRecord, float],
) -> None:
    rec, wall = restarting
    w = rec.watch
    assert w is not None and len(w.epochs) == EPOCHS
    for e in w.epochs:
        # the workers stop side by side: one sleep, plus the join, at most 0.15 s over
        assert e.shutdown_seconds is not None and e.end_seconds is not None
        assert STOP_S * 0.98 <= e.shutdown_seconds <= STOP_S + 0.15
        assert e.shutdown_seconds <= e.end_seconds <= e.shutdown_seconds + 0.05
    st = epoch_starts(rec)
    assert st is not None and st.shutdown_seconds is not None
    # the end-to-end rate is the one the loop saw, shutdowns included
    samples = sum(e.samples for e in w.epochs)
    assert st.end_to_end_samples_per_s == pytest.approx(samples / wall, rel=0.05)


def test_persistent_workers_end_their_epochs_at_once() -> None:
    rec, _ = run(persistent=True)
    w = rec.watch
    assert w is not None
    assert all(e.shutdown_seconds is not None and e.shutdown_seconds < 0.05 for e in w.epochs)


# three paired reruns, 15 s on 2 cores: in `make validate`; the shutdowns it counts are
# measured against their truth in the default run above
@pytest.mark.long
def test_the_persistent_workers_prediction_counts_the_shutdowns(
    restarting: tuple[RunRecord, float],
) -> None:
    rec, _ = restarting
    (advice,) = [r for r in rec.recommendations if r.kind == "persistent_workers"]
    assert "0.3" in advice.text and "to shut them down" in advice.text
    errors = []
    for _ in range(3):  # each prediction against its paired rerun: this host's speed drifts
        before, wall_before = run(persistent=False)
        _, wall_after = run(persistent=True)
        (advice,) = [r for r in before.recommendations if r.kind == "persistent_workers"]
        assert advice.predicted_samples_per_s and advice.baseline_samples_per_s
        predicted = advice.predicted_samples_per_s / advice.baseline_samples_per_s
        # the gain the loop saw by its own clock: the same samples in less time
        errors.append(predicted / (wall_before / wall_after) - 1)
    assert abs(statistics.median(errors)) <= 0.15, errors

"""``whatif``'s loader settings for an IterableDataset whose streams carry unequal work, on a
record built by hand against the truth of its construction: worker 0's stream holds every
slow batch (SLOW_S blocked each, worker 1's FAST_S), so the loader runs at worker 0's pace,
2 batches per SLOW_S, whatever the queue does. Each worker makes its own stream's batches,
so in_order=False and a deeper prefetch move none of them, and one worker makes all of
them one after another; another worker count depends on how the dataset splits its items,
which the run cannot see, so both ends are stated."""

from __future__ import annotations

import dataclasses

import pytest

from ioprobe.analysis import loader_sim
from ioprobe.analysis.whatif import whatif
from ioprobe.record import BatchLog, Change, RunRecord
from tests.unit.analysis.test_loader_sim import _costs, record

N, SLOW_S, FAST_S, STEP_S, PER_BATCH = 400, 0.020, 0.002, 0.001, 2
TRUE_RATE = 2 * PER_BATCH / SLOW_S  # worker 0's pace: one of its batches, one of worker 1's


def unequal_streams(step_s: float = STEP_S) -> RunRecord:
    streams = [i % 2 for i in range(N)]
    blocked = [SLOW_S if k == 0 else FAST_S for k in streams]
    # in order, the loader hands batch i to worker i % 2, which is how the streams alternate
    costs = dataclasses.replace(_costs(blocked, step_s), samples_per_batch=PER_BATCH)
    arrivals = loader_sim.simulate(costs, loader_sim.Setting(2, 2, True), N)
    log = BatchLog(
        request=[0.0] + [a + step_s for a in arrivals[:-1]],
        arrival=arrivals,
        ready=list(arrivals),
        worker=streams,
        work_ms=[b * 1e3 for b in blocked],
        slowest_ms=[b * 1e3 / PER_BATCH for b in blocked],
        samples=[PER_BATCH] * N,
        epoch=[0] * N,
        cpu_ms=[0.0] * N,
        runqueue_ms=[0.0] * N,
    )
    rec = record(log)
    assert rec.watch is not None
    rec.watch.settings = dataclasses.replace(rec.watch.settings, iterable=True)
    rec.measured_samples_per_s = len(arrivals) * PER_BATCH / arrivals[-1]  # the whole epoch's
    return rec


def test_the_record_runs_at_the_slow_streams_pace() -> None:
    rec = unequal_streams()
    assert rec.measured_samples_per_s == pytest.approx(TRUE_RATE, rel=0.03)


@pytest.mark.parametrize(
    "change",
    [Change(in_order=False), Change(prefetch_factor=4), Change(in_order=False, prefetch_factor=8)],
    ids=["out-of-order", "deeper", "both"],
)
def test_queue_settings_move_no_batch_out_of_the_slow_stream(change: Change) -> None:
    # the batch-by-batch replay handed the slow batches to the fast worker: +60% and more
    out = whatif(unequal_streams(), change)
    assert out.predicted_samples_per_s == pytest.approx(TRUE_RATE, rel=0.03)
    assert out.whatif is not None and out.whatif.unchecked == []


def test_one_worker_makes_every_batch_in_turn_whatever_the_split() -> None:
    out = whatif(unequal_streams(), Change(workers=1))
    assert out.predicted_samples_per_s == pytest.approx(
        PER_BATCH / ((SLOW_S + FAST_S) / 2), rel=0.03
    )
    assert out.whatif is not None and out.whatif.unchecked == []


def test_another_worker_count_states_both_ends_of_what_the_split_decides() -> None:
    rec = unequal_streams()
    out = whatif(rec, Change(workers=4))
    assert out.whatif is not None
    (said,) = out.whatif.unchecked
    assert said.startswith("the dataset's split decides: 4 workers dealt this run's batches")
    # the slow items dealt at random over 4 workers: about 4 batches per (SLOW_S + FAST_S) / 2
    assert out.predicted_samples_per_s > 1.5 * TRUE_RATE
    # kept in one stream, worker 0's pace holds however many others share the fast items
    kept = float(said.split("kept on one worker, ")[1].split(" samples/s")[0].replace(",", ""))
    assert kept == pytest.approx(TRUE_RATE, rel=0.03)
    assert "`ioprobe tune` measures it" in said

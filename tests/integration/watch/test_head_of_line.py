"""Head-of-line blocking on a real DataLoader, against truth built into the dataset.

One sample in 50 waits 20 times as long as the rest (``SkewedDataset``: blocked, no CPU, so
the two-core CI host does not blur the truth). The heaviest samples must be exactly those;
the stragglers' extra time is known by construction; and each loader setting the simulated
queue predicts a gain for is rerun, interleaved with reruns as it was, and the predicted gain
is checked against the measured one: a ratio taken side by side, as the benchmarks do.
"""

from __future__ import annotations

import statistics
import time
import warnings

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.loader_sim import advice, queue_predictions
from ioprobe.analysis.queueing import head_of_line
from ioprobe.record import RunRecord
from tests.fixtures.datasets import SkewedDataset, SkewedIterable

N = 1500
BASE_S = 0.001
EVERY, FACTOR = 50, 20.0
BATCH = 2
STEP_S = 0.0015  # the consumer's own work per batch


def run(**settings: object) -> RunRecord:
    kw: dict[str, object] = {"num_workers": 2, "prefetch_factor": 2, "in_order": True}
    kw.update(settings)
    with warnings.catch_warnings():  # more workers than this host's cores: meant
        warnings.simplefilter("ignore", UserWarning)
        loader = ioprobe.watch(
            DataLoader(SkewedDataset(N, BASE_S, EVERY, FACTOR), batch_size=BATCH, **kw)  # type: ignore[arg-type]
        )
        for _ in loader:
            time.sleep(STEP_S)
    return loader.run


@pytest.fixture(scope="module")
def base() -> RunRecord:
    return run()


def test_the_heaviest_samples_are_the_ones_made_heavy_with_their_paths(base: RunRecord) -> None:
    assert base.watch is not None and base.watch.sample_costs is not None
    heavy = base.watch.sample_costs.heaviest
    assert len(heavy) == 20
    assert all(h.index % EVERY == 0 for h in heavy), [h.index for h in heavy]
    assert all(h.wall_ms > 0.8 * FACTOR * BASE_S * 1e3 for h in heavy)
    assert all(
        h.path == f"/data/shard-{h.index // 1000:03d}/sample-{h.index:06d}.bin" for h in heavy
    )
    # blocked, not computing: the CPU time is a small part of the wall time
    assert all(h.cpu_ms < 0.5 * h.wall_ms for h in heavy)


def test_time_batches_waited_on_their_straggler_matches_the_construction(base: RunRecord) -> None:
    hol = head_of_line(base)
    assert hol is not None
    # the first round of batches is left out: one heavy sample per EVERY samples after it
    first = 2 * BATCH  # two workers' first batches
    heavy = sum(1 for i in range(first, N) if i % EVERY == 0)
    truth = heavy * (FACTOR - 1) * BASE_S
    assert hol.slow_sample_seconds == pytest.approx(truth, rel=0.15)
    # the in-order queue held the consumer back while the other worker's batches were ready
    assert hol.queue_seconds > 0.1 * hol.seconds


# twelve reruns, under a minute on a quiet host: `make validate` runs it beside the advice
# matrix's share; the default run reruns the replay's best setting below
@pytest.mark.long
def test_each_predicted_cure_is_within_15_percent_of_a_rerun(base: RunRecord) -> None:
    predictions = {p.setting: p for p in queue_predictions(base)}
    assert set(predictions) == {"in_order", "prefetch_factor", "num_workers"}
    assert predictions["in_order"].gain > 1.1  # the construction makes the queue matter
    changes = {
        "in_order": {"in_order": False},
        "prefetch_factor": {"prefetch_factor": 4},
        "num_workers": {"num_workers": 4},
    }
    gains: dict[str, list[float]] = {setting: [] for setting in changes}
    for _ in range(3):  # paired reruns: this host's speed drifts between runs
        before = run().measured_samples_per_s
        assert before
        for setting, change in changes.items():  # each change beside the same rerun as it was
            after = run(**change).measured_samples_per_s
            assert after
            gains[setting].append(after / before)
    for setting, measured in gains.items():
        assert predictions[setting].gain == pytest.approx(statistics.median(measured), rel=0.15), (
            setting,
            measured,
        )


# five paired reruns at most, 18-22 s on 2 cores: in `make validate`; the default run holds
# the replay of each setting to its measured rate (test_loader_sim.py) and
# the workers prediction to its rerun on a CPU-bound loader (test_prediction_accuracy.py)
@pytest.mark.long
def test_the_first_advice_is_the_replays_best_setting_and_a_rerun_confirms_it(
    base: RunRecord,
) -> None:
    first = base.recommendations[0]
    top = advice(base)
    assert top is not None and first.change is not None
    # the queue is what the construction makes costly: the advice hands batches over out
    # of order, alone or with more workers
    assert first.change.in_order is False and "in_order=False" in first.text
    assert first.predicted_samples_per_s == pytest.approx(top.samples_per_s)
    change = {"num_workers": top.setting.workers, "prefetch_factor": top.setting.prefetch_factor}
    gains: list[float] = []
    # three pairs, and two more where their median falls outside the bound: a busy shared
    # host once slowed one pair's change alone (gains 1.19, 1.07, 1.10 where quiet runs of
    # this test pass), and the median of five is judged by the same bound
    for pairs in (3, 2):
        for _ in range(pairs):
            before = run().measured_samples_per_s
            after = run(**change, in_order=top.setting.in_order).measured_samples_per_s
            assert before and after
            gains.append(after / before)
        if top.gain == pytest.approx(statistics.median(gains), rel=0.15):
            break
    assert top.gain == pytest.approx(statistics.median(gains), rel=0.15), (top, gains)


def test_a_streams_heaviest_samples_are_named_by_their_position_in_the_workers_stream() -> None:
    # heavier than the map-style case: a light item the two-core CI host descheduled for 10 ms
    # once passed for heavy; 50 ms against 1 ms leaves 25 ms either side of the cut
    workers, factor = 2, 50.0
    loader = ioprobe.watch(
        DataLoader(SkewedIterable(600, BASE_S, EVERY, factor), batch_size=4, num_workers=workers)
    )
    for _ in loader:
        pass
    costs = loader.run.watch.sample_costs if loader.run.watch is not None else None
    assert costs is not None and costs.index_kind == "position in its worker's stream"
    assert costs.heaviest and all(h.path is None for h in costs.heaviest)
    # worker k's item at position p is k + p * workers: the heavy items are the multiples of
    # EVERY, all worker 0's, but item 0 (its first batch, left out as start-up)
    slow = {(h.worker, h.index) for h in costs.heaviest if h.wall_ms > factor * BASE_S * 1e3 / 2}
    assert slow == {(0, i // workers) for i in range(EVERY, 600, EVERY)}

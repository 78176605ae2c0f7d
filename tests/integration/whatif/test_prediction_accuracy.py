"""The model's predictions against reruns with the change applied: at most 10% off.

Each test records a run, predicts a change from the record alone, makes the change, and
measures. The truth is built by the test: samples that burn exactly 8 ms of CPU, a server
throttled to exactly R and then 2R bytes/s. Three pairs each, median error, because the
machines these run on are shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.accuracy import RATE, SIZE, cpu_workers_pair, median_error, storage_rate_pair

pytestmark = pytest.mark.slow


def test_two_workers_predicted_from_a_one_worker_cpu_bound_run_within_10_percent() -> None:
    one_worker: list[float] = []
    err, pairs = median_error(lambda: cpu_workers_pair(one_worker=one_worker), 3)
    assert err <= 0.10, f"predicted vs measured: {pairs}"
    # and the prediction is not trivially the old rate. Two workers on two cores double it on
    # a quiet machine; other load shrinks the gain, but under a steady fair share a second
    # runnable worker on 2 cores still adds at least a third
    gains = sorted(p / one for (p, _), one in zip(pairs, one_worker, strict=True))
    assert gains[1] > 1.25, f"predicted / one-worker rate: {gains}"


# a rerun at twice the rate; the CPU-bound prediction beside it stays in the default run
@pytest.mark.long
def test_twice_the_storage_rate_predicted_from_a_throttled_run_within_10_percent(
    tmp_path: Path,
) -> None:
    err, pairs = median_error(lambda: storage_rate_pair(tmp_path), 3)
    assert err <= 0.10, f"predicted vs measured: {pairs}"
    # bandwidth alone would give 2R / size; the requests' measured latency takes a little off
    bound = 2 * RATE / SIZE
    assert 0.8 * bound < sorted(p for p, _ in pairs)[1] < bound

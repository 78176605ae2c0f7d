"""`whatif --workers` on remote storage against a rerun: a server that answers each request
late is read faster by more workers, as the prediction says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.accuracy import median_error, remote_workers_pair

pytestmark = pytest.mark.slow


# six runs against a slow server: `make validate` runs it beside the advice matrix's
# latency-bound case; the default run holds the workers rule to reruns in
# test_prediction_accuracy.py and test_head_of_line.py
@pytest.mark.long
def test_more_workers_on_per_request_latency_predicted_within_20_percent(tmp_path: Path) -> None:
    err, pairs = median_error(
        lambda: remote_workers_pair(tmp_path, latency_s=0.03, decode_s=0.005), 3
    )
    assert err <= 0.20, f"predicted vs measured: {pairs}"

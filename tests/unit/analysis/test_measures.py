"""The numbers behind the key measurements, against values worked out by hand."""

from __future__ import annotations

import pytest

from ioprobe.analysis.measures import (
    copy_totals,
    delivery,
    percentile,
    series_summary,
    whatif_gain,
)
from ioprobe.record import Distribution, GpuSeries, WatchData, WatchEpoch


def test_percentiles_are_values_that_were_seen() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.95) == 96.0
    assert percentile([7.0], 0.95) == 7.0


def test_delivery_counts_batches_and_takes_the_host_stall_over_device_timed_epochs_only() -> None:
    w = WatchData(
        epochs=[
            WatchEpoch(index=0, batches=10, seconds=4.0, stall_seconds=1.0, gpu_wait_seconds=0.5),
            WatchEpoch(index=1, batches=5, seconds=6.0, stall_seconds=3.0),  # host clock only
        ],
        stall_ms=Distribution(count=4, values=[4.0, 1.0, 3.0, 2.0]),
    )
    d = delivery(w)
    assert (d.batches, d.epochs) == (15, 2)
    assert (d.stall_p50_ms, d.stall_p95_ms) == (3.0, 4.0)
    assert d.host_stall_share == pytest.approx(1.0 / 4.0)


def test_copy_totals_sum_the_epochs_and_give_the_pinned_share_of_bytes() -> None:
    eps = [
        WatchEpoch(index=0, h2d_copies=2, h2d_bytes=300, h2d_seconds=1.0, h2d_pinned_bytes=300),
        WatchEpoch(index=1, h2d_copies=1, h2d_bytes=100, h2d_seconds=1.0),
    ]
    c = copy_totals(eps)
    assert c is not None
    assert (c.copies, c.bytes, c.seconds) == (3, 400, 2.0)
    assert c.bytes_per_s == 200.0 and c.pinned_share == 0.75
    assert copy_totals([WatchEpoch(index=0)]) is None


def test_a_series_summary_skips_readings_the_device_never_gave() -> None:
    s = GpuSeries(
        interval_s=0.1,
        columns={
            "t": [0.0, 0.1, 0.2],
            "sm_util": [10.0, None, 30.0],
            "pcie_rx_bytes_per_s": [None, 5e9, 2e9],
            "power_w": [None, None, None],
        },
    )
    got = series_summary(s)
    assert got is not None
    assert (got.rows, got.hz, got.sm_mean, got.pcie_rx_peak) == (3, 10.0, 20.0, 5e9)
    assert got.power_mean is None
    assert series_summary(GpuSeries(columns={"t": []})) is None


def test_a_record_without_a_whatif_has_no_gain() -> None:
    from tests.unit.analysis.test_whatif import watch_record

    assert whatif_gain(watch_record()) is None

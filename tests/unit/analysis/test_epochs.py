"""Epoch starts and per-worker batch times, on records built by hand."""

from __future__ import annotations

import pytest

from ioprobe.analysis.epochs import epoch_starts, per_epoch_saving, worker_latency
from ioprobe.analysis.verdict import finalize
from ioprobe.record import (
    BatchLog,
    DatasetProfile,
    HostInfo,
    LoaderSettings,
    RunRecord,
    WatchData,
    WatchEpoch,
)


def _epoch(i: int, startup: float | None, started: int = 2) -> WatchEpoch:
    # 101 batches of 40 samples, 10 ms apart: 1 s of steady batches after the first
    return WatchEpoch(
        index=i,
        batches=101,
        samples=4040,
        seconds=1.0,
        first_batch_seconds=(startup or 0.0) + 0.01,
        iter_seconds=0.002,
        workers_started=started if startup else 0,
        worker_startup_seconds=startup,
    )


def _record(epochs: list[WatchEpoch], persistent: bool = False) -> RunRecord:
    rec = RunRecord(kind="watch", host=HostInfo(usable_cores=4), dataset=DatasetProfile("d"))
    rec.watch = WatchData(
        settings=LoaderSettings(workers=2, batch_size=40, persistent_workers=persistent),
        epochs=epochs,
    )
    rec.stages.gpu.capacity_samples_per_s = 5000.0
    return rec


def test_restarting_workers_cost_their_start_up_in_every_later_epoch() -> None:
    st = epoch_starts(_record([_epoch(0, 0.5), _epoch(1, 0.5), _epoch(2, 0.5)]))
    assert st is not None
    assert st.batch_seconds == pytest.approx(0.01)
    assert [e.lost_seconds for e in st.epochs] == pytest.approx([0.502] * 3)
    assert st.run_seconds == pytest.approx(3 * (0.002 + 0.51 + 1.0))
    assert st.end_to_end_samples_per_s == pytest.approx(3 * 4040 / st.run_seconds)
    assert st.saved_seconds == pytest.approx(1.0)  # epochs 2 and 3, not the first
    assert st.predicted_samples_per_s == pytest.approx(3 * 4040 / (st.run_seconds - 1.0))
    assert per_epoch_saving(st) == pytest.approx(0.5)


def test_with_one_epoch_watched_its_start_up_stands_for_the_next_ones() -> None:
    rec = _record([_epoch(0, 0.5)])
    st = epoch_starts(rec)
    assert st is not None and st.saved_seconds is None and per_epoch_saving(st) == 0.5
    (advice,) = [r for r in finalize(rec).recommendations if r.kind == "persistent_workers"]
    assert advice.predicted_samples_per_s == pytest.approx(4040 / (0.002 + 0.51 + 1.0 - 0.5))
    assert "for each epoch after the first" in advice.text


def test_persistent_workers_or_a_quick_start_give_no_advice() -> None:
    persistent = _record([_epoch(0, 0.5), _epoch(1, None)], persistent=True)
    st = epoch_starts(persistent)
    assert st is not None and st.persistent and per_epoch_saving(st) is None
    quick = _record([_epoch(0, 0.001), _epoch(1, 0.001)])
    for rec in (persistent, quick):
        assert not [r for r in finalize(rec).recommendations if r.kind == "persistent_workers"]


def test_records_without_iter_times_have_no_epoch_starts() -> None:
    e = _epoch(0, 0.5)
    e.iter_seconds = None
    assert epoch_starts(_record([e])) is None


def test_worker_percentiles_leave_each_workers_first_batch_of_an_epoch_out() -> None:
    n = 40
    log = BatchLog(
        request=[0.0] * n,
        arrival=[0.0] * n,
        ready=[0.0] * n,
        worker=[i % 2 for i in range(n)],
        work_ms=[500.0 if i < 2 else (10.0 if i % 2 == 0 else 30.0) for i in range(n)],
        slowest_ms=[1.0] * n,
        samples=[4] * n,
        epoch=[0] * n,
    )
    rec = _record([_epoch(0, 0.5)])
    assert rec.watch is not None
    rec.watch.batch_log = log
    lat = worker_latency(rec)
    assert [(w.worker, w.batches, w.p50_ms, w.p99_ms) for w in lat] == [
        (0, 19, 10.0, 10.0),
        (1, 19, 30.0, 30.0),
    ]


@pytest.mark.parametrize(
    ("device_bytes", "read_chars", "cold"),
    [
        (256 << 20, 256 << 20, True),  # the round's data came from the device
        (2 << 20, 256 << 20, False),  # a sliver the kernel had dropped: the data was cached
        (512 << 10, 0, False),  # under a megabyte: modules' pages, not data
        (2 << 20, 0, True),  # read() bytes unknown (memory-mapped data): the megabyte decides
    ],
)
def test_a_round_is_cold_where_the_device_served_a_share_of_what_it_read(
    device_bytes: int, read_chars: int, cold: bool
) -> None:
    e = _epoch(0, 0.5)
    e.startup_samples, e.startup_sample_wall_seconds = 80, 1.6
    e.startup_read_bytes, e.startup_read_chars = device_bytes, read_chars
    st = epoch_starts(_record([e]))
    assert st is not None
    assert (st.epochs[0].cold_read_seconds is not None) is cold

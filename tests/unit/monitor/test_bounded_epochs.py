"""Epochs stay bounded however a loader is driven, and the analysis reads merged ones sanely.

A loop that takes one batch per ``iter()`` (RL, evaluation) makes an epoch per batch. Past
``EPOCHS_KEPT`` entries the collector merges epochs (``bound_epochs``); these tests build the
epochs by hand with known figures, merge them as the collector does, and check that every
total the analysis reads is the one the unmerged epochs give.
"""

from __future__ import annotations

import json

import pytest

from ioprobe import capacity
from ioprobe.analysis.dlio import dlio_workload
from ioprobe.analysis.epochs import epoch_count, epoch_starts, mean_epoch, per_epoch_saving
from ioprobe.analysis.measures import delivery
from ioprobe.analysis.report import findings
from ioprobe.analysis.verdict import finalize
from ioprobe.errors import RecordError
from ioprobe.monitor.collector import (
    EPOCHS_HEAD,
    EPOCHS_KEPT,
    WatchCollector,
    bound_epochs,
    merge_epochs,
)
from ioprobe.record import (
    DatasetProfile,
    Distribution,
    HostInfo,
    LoaderSettings,
    RunRecord,
    WatchData,
    WatchEpoch,
)
from ioprobe.render import markdown
from ioprobe.render.facts import epoch_facts


def _epoch(i: int) -> WatchEpoch:
    """Epoch ``i`` of a loader without persistent workers: 11 batches of 8 samples 10 ms
    apart, a start-up that varies with ``i`` (0.2 to 0.29 s), a 0.05 s shutdown."""
    startup = 0.2 + (i % 10) * 0.01
    return WatchEpoch(
        index=i,
        batches=11,
        samples=88,
        seconds=0.1,
        stall_seconds=0.04,
        step_seconds=0.06,
        first_batch_seconds=startup + 0.01,
        iter_seconds=0.003,
        end_seconds=0.06,
        shutdown_seconds=0.05,
        workers_started=2,
        worker_startup_seconds=startup,
        startup_samples=16,
        startup_seconds=0.01,
        sample_wall_seconds=0.5,
        sample_cpu_seconds=0.3,
        collate_seconds=0.01,
        collate_cpu_seconds=0.008,
        read_chars=88 * 4096,
        startup_read_chars=16 * 4096,
        main_cpu_seconds=0.02,
    )


def _kept(n: int) -> list[WatchEpoch]:
    """``n`` epochs, kept as the collector keeps them: each appended as it ends, then
    bounded."""
    eps: list[WatchEpoch] = []
    stride = 1
    for i in range(n):
        eps.append(_epoch(i))
        stride = bound_epochs(eps, stride)
    return eps


def _record(epochs: list[WatchEpoch]) -> RunRecord:
    rec = RunRecord(kind="watch", host=HostInfo(usable_cores=4), dataset=DatasetProfile("d"))
    rec.watch = WatchData(
        settings=LoaderSettings(workers=2, batch_size=8, persistent_workers=False),
        epochs=epochs,
        epochs_merged=sum(e.merged for e in epochs if e.merged > 1),
    )
    rec.stages.gpu.capacity_samples_per_s = 5000.0
    return rec


def test_a_run_under_the_cap_keeps_every_epoch_whole() -> None:
    eps = _kept(EPOCHS_KEPT)
    assert [e.index for e in eps] == list(range(EPOCHS_KEPT))
    assert all(e.merged == 1 for e in eps)
    assert eps == [_epoch(i) for i in range(EPOCHS_KEPT)]


@pytest.mark.parametrize("n", [EPOCHS_KEPT + 1, 1_000, 20_000])
def test_past_the_cap_epochs_merge_in_order_and_every_one_counts(n: int) -> None:
    eps = _kept(n)
    assert len(eps) <= EPOCHS_KEPT
    # the first epochs and the last are whole; the entries cover 0..n-1 in order, no gap
    assert [e.index for e in eps[:EPOCHS_HEAD]] == list(range(EPOCHS_HEAD))
    assert all(e.merged == 1 for e in eps[:EPOCHS_HEAD])
    assert eps[-1] == _epoch(n - 1)
    assert [e.index for e in eps[1:]] == [e.index + e.merged for e in eps[:-1]]
    assert sum(e.merged for e in eps) == n
    # figures add up: each entry is the sum of its epochs
    assert sum(e.batches for e in eps) == 11 * n
    assert sum(e.worker_startup_seconds or 0.0 for e in eps) == pytest.approx(
        sum(0.2 + (i % 10) * 0.01 for i in range(n))
    )
    assert max(e.merged for e in eps) > 1


def test_a_merged_entry_sums_and_keeps_the_last_error() -> None:
    a, b = _epoch(20), _epoch(21)
    b.error = "RuntimeError: boom"
    b.gpu_wait_seconds = 0.5  # timed on the device in one of the two epochs only
    m = merge_epochs(a, b)
    assert (m.index, m.merged, m.batches, m.error) == (20, 2, 22, "RuntimeError: boom")
    assert m.gpu_wait_seconds == 0.5 and m.gpu_step_seconds is None
    assert m.seconds == pytest.approx(0.2)
    mean = mean_epoch(m)
    assert mean.samples == 88 and mean.read_chars == 88 * 4096
    assert mean.worker_startup_seconds == pytest.approx((0.2 + 0.21) / 2)
    assert (a.merged, b.merged) == (1, 1)  # new objects: the live panel may be reading these


def test_a_merged_entry_keeps_the_scanned_wall_beside_the_other_groups_cpu() -> None:
    # one epoch scanned the host's processes (a core of another session's over 2 s), the
    # next not (the scans grew too dear): the share stays a core, not one over 3 s of wall
    a, b = _epoch(20), _epoch(21)
    a.apart_cpu_seconds, a.apart_wall_seconds, a.apart_groups = 2.0, 2.0, 2
    b.apart_groups = 1
    m = merge_epochs(a, b)
    assert (m.apart_cpu_seconds, m.apart_wall_seconds) == (2.0, 2.0)
    assert m.apart_groups == 2  # the most busy at once, not a sum
    b.apart_cpu_seconds, b.apart_wall_seconds = 1.0, 1.0
    assert capacity.apart_cores([merge_epochs(a, b)]) == pytest.approx(1.0)


def test_epoch_starts_of_a_merged_run_give_the_whole_runs_figures() -> None:
    n = 3_000
    whole, kept = _record([_epoch(i) for i in range(n)]), _record(_kept(n))
    a, b = epoch_starts(whole), epoch_starts(kept)
    assert a is not None and b is not None
    assert len(b.epochs) <= EPOCHS_KEPT < len(a.epochs)
    for name in (
        "batch_seconds",
        "run_seconds",
        "samples",
        "end_to_end_samples_per_s",
        "saved_seconds",
        "predicted_samples_per_s",
        "shutdown_seconds",
    ):
        assert getattr(b, name) == pytest.approx(getattr(a, name), rel=1e-9), name
    assert per_epoch_saving(b) == pytest.approx(per_epoch_saving(a), rel=1e-9)
    # a merged entry stands for its mean epoch
    big = max(b.epochs, key=lambda e: e.merged)
    assert big.merged > 1
    assert big.seconds == pytest.approx(
        sum(0.003 + 0.2 + (i % 10) * 0.01 + 0.01 for i in range(big.index, big.index + big.merged))
        / big.merged
    )
    # the advice on persistent workers predicts the same rate
    (pa,) = [r for r in finalize(whole).recommendations if r.kind == "persistent_workers"]
    (pb,) = [r for r in finalize(kept).recommendations if r.kind == "persistent_workers"]
    assert pb.predicted_samples_per_s == pytest.approx(pa.predicted_samples_per_s, rel=1e-9)


def test_counts_of_epochs_and_an_epochs_size_read_through_merges() -> None:
    n = 1_000
    whole, kept = _record([_epoch(i) for i in range(n)]), _record(_kept(n))
    for rec in (whole, kept):  # what a DLIO workload needs besides the epochs
        assert rec.watch is not None
        rec.dataset.sample_bytes_mean = 4096.0
        rec.watch.step_ms = Distribution(count=2, total=12.0, values=[5.0, 7.0])
    assert epoch_count(kept) == epoch_count(whole) == n
    assert kept.watch is not None and whole.watch is not None
    assert delivery(kept.watch).epochs == delivery(whole.watch).epochs == n
    dw, dk = dlio_workload(whole), dlio_workload(kept)
    assert dk.value("train", "epochs") == dw.value("train", "epochs") == n
    assert dk.fields == dw.fields


def test_a_record_from_before_merging_loads_with_every_epoch_whole() -> None:
    rec = _record([_epoch(i) for i in range(3)])
    data = rec.to_json()
    for e in data["watch"]["epochs"]:
        del e["merged"]
    del data["watch"]["epochs_merged"]
    back = RunRecord.from_json(json.loads(json.dumps(data)))
    assert back.watch is not None and back.watch.epochs_merged == 0
    assert [e.merged for e in back.watch.epochs] == [1, 1, 1]


class _Adapter:
    def __init__(self) -> None:
        self.settings = LoaderSettings(workers=0, batch_size=1)
        self.description = {"num_workers": "0"}

    def begin_epoch(self) -> None:
        pass

    def end_epoch(self, epoch: WatchEpoch) -> None:
        pass

    def stages(self, m: object) -> tuple[object, list[str]]:
        from ioprobe.record import Stages

        return Stages(), []

    def complete(self, record: RunRecord) -> None:
        pass


def test_the_collector_bounds_one_batch_epochs_and_its_record_says_so() -> None:
    c = WatchCollector(_Adapter(), 1, None)  # type: ignore[arg-type]
    n, t = 2_000, 0
    for _ in range(n):
        c.begin_epoch()
        c.iter_began(t, t + 100)
        c.on_delivery(t + 100, t + 1_000, 1)  # one batch: 900 ns waiting for it
        c.iter_ended(t + 2_000, t + 2_100)
        c.end_epoch(None)
        t += 10_000
    assert len(c.epochs) <= EPOCHS_KEPT
    assert sum(e.merged for e in c.epochs) == n == c.epochs_begun
    rec = c.stop()
    assert rec.watch is not None
    assert rec.watch.epochs_merged == sum(e.merged for e in c.epochs if e.merged > 1) > 0
    assert sum(e.first_batch_seconds or 0.0 for e in rec.watch.epochs) == pytest.approx(n * 9e-7)
    (note,) = [x for x in rec.notes if "merged" in x]
    assert f"{n:,} epochs" in note and f"first {EPOCHS_HEAD}" in note
    # the last epoch, whole, is where an interrupted run says it stopped
    assert rec.watch.epochs[-1].index == n - 1 and rec.watch.epochs[-1].merged == 1
    # the views show the note
    assert note in markdown.render(rec, findings(rec)).replace("\\", "")


def test_a_short_run_says_nothing_of_merging() -> None:
    c = WatchCollector(_Adapter(), 1, None)  # type: ignore[arg-type]
    for k in range(3):
        c.begin_epoch()
        c.on_delivery(k * 10_000, k * 10_000 + 500, 1)
        c.end_epoch(None)
    rec = c.stop()
    assert rec.watch is not None and rec.watch.epochs_merged == 0
    assert [e.index for e in rec.watch.epochs] == [0, 1, 2]
    assert not [x for x in rec.notes if "merged" in x]


def test_the_epoch_starts_line_counts_every_epoch() -> None:
    rec = finalize(_record(_kept(1_000)))
    ((_, line),) = epoch_facts(findings(rec))
    assert "(+994 more)" in line  # the first six listed, of 1,000
    assert "persistent_workers=True saves 0.30 s each epoch after the first" in line


def test_a_record_whose_entry_stands_for_no_epoch_is_refused_in_one_line() -> None:
    data = _record([_epoch(0)]).to_json()
    data["watch"]["epochs"][0]["merged"] = 0
    with pytest.raises(RecordError, match=r"watch\.epochs\[0\]\.merged: .* got 0"):
        RunRecord.from_json(data)

"""The DALI queue replay on consumer timelines built by hand: the making times it reads from
them are the ones they were made with, the run as it was replays to its own rate, and a
deeper queue is advised only where the consumer's bursts leave the pipeline idle."""

from __future__ import annotations

import pytest

from ioprobe.analysis import dali_queue
from ioprobe.analysis.compare import applied_check
from ioprobe.analysis.loader_sim import Setting
from ioprobe.analysis.model import PipelineFindings
from ioprobe.analysis.verdict import finalize
from ioprobe.analysis.whatif import whatif
from ioprobe.record import (
    Change,
    CpuStage,
    DaliData,
    DatasetProfile,
    GpuStage,
    HostInfo,
    LoaderSettings,
    RunRecord,
    Stages,
    Track,
    WatchData,
)

TAKE = 0.0005  # the iterator's copy out of a ready batch


def timeline(
    produce: list[float], steps: list[float], depth: int, n: int = 240
) -> tuple[dict[str, list[float]], float]:
    """The consumer's rows as a DALI pipeline of queue ``depth`` gives them (iteration i
    starts once i - 1 is made and batch i - depth was taken; the first ``depth`` were made
    before the first request), and the steady rate over the second half."""
    ready, asked = 0.0, 0.0
    taken: list[float] = []
    rows: dict[str, list[float]] = {"start": [], "end": [], "stall": []}
    for i in range(n):
        if i < depth:
            ready = -1.0  # prefetched as the iterator was built
        else:
            free = taken[i - depth]
            ready = max(ready, free) + produce[i % len(produce)]
        got = max(asked, ready) + TAKE
        rows["start"].append(asked)
        rows["end"].append(got)
        rows["stall"].append(got - asked)
        taken.append(got)
        asked = got + steps[i % len(steps)]
    half = n // 2
    rate = 8 * (n - 1 - half) / (taken[-1] - taken[half])
    return rows, rate


def record(produce: list[float], steps: list[float], depth: int = 2) -> RunRecord:
    rows, rate = timeline(produce, steps, depth)
    n = len(rows["start"])
    track = Track(
        name="main process",
        columns={**rows, "samples": [8.0] * n, "batches": [1.0] * n, "epoch": [0.0] * n},
    )
    return RunRecord(
        kind="watch",
        host=HostInfo(usable_cores=2, memory_bytes=16 << 30),
        dataset=DatasetProfile(target="d", files=1000),
        stages=Stages(
            cpu=CpuStage(capacity_samples_per_s=800.0, cpu_seconds_per_sample=0.0025),
            gpu=GpuStage(capacity_samples_per_s=1000.0),
        ),
        measured_samples_per_s=rate,
        watch=WatchData(
            settings=LoaderSettings(framework="dali", workers=2, batch_size=8), tracks=[track]
        ),
        dali=DaliData(pipeline={"num_threads": "2", "prefetch_queue_depth": str(depth)}),
    )


# a pipeline that makes a batch in 10 ms, one in seven in 30 ms; a consumer whose steps are
# 2 ms, one in five 40 ms: as fast as the pipeline on average, in bursts
SKEWED = [0.010] * 6 + [0.030]
BURSTS = [0.002] * 4 + [0.040]


def test_the_making_times_read_from_the_consumers_waits_are_the_ones_it_was_made_with() -> None:
    rec = record(SKEWED, BURSTS)
    c = dali_queue.costs(rec)
    assert c is not None and c.waited > 20
    # the rows past the iterator's prefetch (depth + 1): iteration i made in SKEWED[i % 7]
    truth = [SKEWED[i % len(SKEWED)] for i in range(3, 240)]
    exact = sum(1 for p, t in zip(c.produce, truth, strict=True) if p == pytest.approx(t))
    assert exact >= c.waited, (exact, c.waited)
    assert c.take == pytest.approx(TAKE)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_the_run_as_it_was_replays_to_its_own_rate(depth: int) -> None:
    rec = record(SKEWED, BURSTS, depth)
    seen = dali_queue.replay_rate(rec)
    assert seen is not None
    assert seen[1] == pytest.approx(rec.measured_samples_per_s, rel=0.03)


def test_a_deeper_queue_is_predicted_as_a_rerun_with_it_delivers() -> None:
    rec = record(SKEWED, BURSTS, depth=2)
    for depth in (1, 4, 8):
        truth = record(SKEWED, BURSTS, depth).measured_samples_per_s
        pred = dali_queue.predict(rec, Setting(2, depth, True))
        assert pred is not None
        assert pred.samples_per_s == pytest.approx(truth, rel=0.05), depth


def test_a_bursty_consumer_is_advised_a_deeper_queue_and_a_steady_one_nothing() -> None:
    bursty = dali_queue.rule(record(SKEWED, BURSTS), _findings())
    assert len(bursty) == 1 and bursty[0].change is not None
    assert bursty[0].change.prefetch_factor is not None and bursty[0].change.prefetch_factor > 2
    assert bursty[0].text.startswith("Set prefetch_queue_depth=")
    assert "in the DALI pipeline (now 2)" in bursty[0].text
    steady = record([0.010], [0.012])  # the consumer is the slower, every step
    assert dali_queue.rule(steady, _findings()) == []


def test_whatif_of_a_queue_depth_on_a_dali_record_is_the_replays() -> None:
    rec = record(SKEWED, BURSTS, depth=2)
    truth = record(SKEWED, BURSTS, depth=6).measured_samples_per_s
    out = whatif(rec, Change(prefetch_factor=6))
    assert out.predicted_samples_per_s == pytest.approx(truth, rel=0.05)
    assert out.whatif is not None
    assert out.whatif.assumptions[0].startswith("the loader's settings are predicted by replaying")


@pytest.mark.parametrize("edit", ["no end", "no start", "no samples", "no stall", "zero samples"])
def test_a_hand_edited_main_track_is_no_replay_and_whatif_still_answers(edit: str) -> None:
    # a record edited by hand loads and renders; the replay read its columns unchecked and
    # whatif ended in a KeyError or ZeroDivisionError traceback
    rec = record(SKEWED, BURSTS)
    assert rec.watch is not None
    cols = rec.watch.tracks[0].columns
    if edit == "zero samples":
        cols["samples"] = [0.0] * len(cols["samples"])
    else:
        del cols[edit.removeprefix("no ")]
    assert dali_queue.costs(rec) is None
    assert dali_queue.predict(rec, Setting(2, 6, True)) is None
    out = whatif(rec, Change(prefetch_factor=6))  # the stage model's answer alone
    assert out.whatif is not None
    assert not out.whatif.assumptions[0].startswith("the loader's settings are predicted")


def _findings() -> PipelineFindings:
    return PipelineFindings(bottleneck="cpu", predicted_samples_per_s=100.0, capacities={})


def test_compare_finds_the_advised_depth_applied_in_a_dali_rerun_and_holds_it_to_its_rate() -> None:
    # a DALI record's depth lives in its pipeline's settings, not the DataLoader's: the
    # rerun with the depth applied was read as prefetch_factor 2, not the advice carried out
    a = finalize(record(SKEWED, BURSTS, depth=2), None)
    first = a.recommendations[0]
    assert first.change is not None and first.change.prefetch_factor
    depth = first.change.prefetch_factor
    b = record(SKEWED, BURSTS, depth=depth)
    check = applied_check(a, b, a.measured_samples_per_s, b.measured_samples_per_s, None)
    assert check is not None and check.how == f"the second run has prefetch_queue_depth {depth}"
    assert abs(check.error) < 0.05

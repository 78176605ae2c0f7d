"""The simulated batch queue and the head-of-line figures, on batch logs built by hand."""

from __future__ import annotations

import dataclasses

import pytest

from ioprobe.analysis.loader_sim import (
    CROWDED_GROWTH,
    CROWDED_SHARE,
    Costs,
    Setting,
    advice,
    queue_predictions,
    steady_rate,
)
from ioprobe.analysis.loader_sim import simulate as replay
from ioprobe.analysis.queueing import head_of_line
from ioprobe.analysis.report import findings
from ioprobe.analysis.samples import histogram, tail_share
from ioprobe.record import (
    BatchLog,
    DatasetProfile,
    Distribution,
    HeavySample,
    HostInfo,
    LoaderSettings,
    RunRecord,
    SampleCosts,
    WatchData,
)
from ioprobe.render import html
from ioprobe.render.facts import queue_facts, sample_facts


def blocked(work: list[float], steps: list[float]) -> Costs:
    """Batches that only wait (no CPU): the queue's rules alone decide the arrivals."""
    return Costs(
        blocked=tuple(work),
        cpu=(0.0,) * len(work),
        steps=tuple(steps),
        samples_per_batch=1.0,
        usable_cores=8.0,
        loop_cores=0.0,
        other_threads=0.0,
        exponent=None,
        reads_in_flight=1.0,
        reads_in_flight_max=1.0,
        cpu_split="per batch",
    )


def simulate(
    work: list[float], steps: list[float], workers: int, prefetch: int, in_order: bool
) -> list[float]:
    return replay(blocked(work, steps), Setting(workers, prefetch, in_order), len(work))


def test_in_order_a_slow_batch_holds_the_ready_ones_behind_it() -> None:
    # two workers, one batch each in flight; batch 0 takes 10 s, the rest 1 s, no consumer work
    arrivals = simulate([10.0, 1.0, 1.0, 1.0], [0.0], workers=2, prefetch=1, in_order=True)
    # batch 1 is ready at 1 s but waits for batch 0; batch 2 goes to worker 0 only when
    # batch 0 is taken (t=10), batch 3 to worker 1 at t=10 too
    assert arrivals == [10.0, 10.0, 11.0, 11.0]


def test_out_of_order_the_consumer_takes_whatever_is_finished() -> None:
    arrivals = simulate([10.0, 1.0, 1.0, 1.0], [0.0], workers=2, prefetch=1, in_order=False)
    # worker 1 makes batches 1, 2, 3 back to back while worker 0 is on batch 0
    assert arrivals == [1.0, 2.0, 3.0, 10.0]


def test_the_consumer_step_paces_delivery_when_workers_are_fast() -> None:
    arrivals = simulate([0.1] * 6, [1.0], workers=2, prefetch=2, in_order=True)
    assert arrivals == pytest.approx([0.1, 1.1, 2.1, 3.1, 4.1, 5.1])


def test_workers_past_the_cores_share_them_and_blocked_ones_leave_theirs() -> None:
    # 2 workers, 2 cores, every batch 1 s of CPU: two batches a second
    cpu = dataclasses.replace(blocked([0.0] * 40, [0.0]), cpu=(1.0,) * 40, usable_cores=2.0)
    assert steady_rate(replay(cpu, Setting(2, 2, True), 40), 1.0) == pytest.approx(2.0, rel=1e-6)
    # 4 workers outnumber the cores, which give them CROWDED_SHARE of their time: whatever
    # the count past the cores, that many batches a second
    arr = replay(cpu, Setting(4, 2, True), 40)
    assert steady_rate(arr, 1.0) == pytest.approx(2.0 * CROWDED_SHARE, rel=1e-6)
    # the same batches blocked 1 s before 0.1 s of CPU: the four workers wait side by side,
    # then share the cores for 0.2 s (at the crowded share): four batches every 1.2 s or
    # so, not two every 1.1 s
    mixed = dataclasses.replace(cpu, blocked=(1.0,) * 40, cpu=(0.1,) * 40)
    arr = replay(mixed, Setting(4, 2, True), 40)
    assert steady_rate(arr, 1.0) == pytest.approx(4 / (1.0 + 0.4 / (2 * CROWDED_SHARE)), rel=1e-6)


def test_each_worker_past_the_cores_lengthens_every_batch_s_cpu_from_the_run_s_count() -> None:
    # CPU-bound batches measured with 2 workers on 2 cores (1 s each): at 4 and 8 workers
    # each batch takes CROWDED_GROWTH longer per process past the cores
    cpu = dataclasses.replace(
        blocked([0.0] * 80, [0.0]), cpu=(1.0,) * 80, usable_cores=2.0, run_workers=2
    )
    for workers in (4, 8):
        rate = steady_rate(replay(cpu, Setting(workers, 2, True), 80), 1.0)
        grown = 1.0 + CROWDED_GROWTH * (workers - 2)
        assert rate == pytest.approx(2.0 * CROWDED_SHARE / grown, rel=1e-6)
    # measured with 8 workers, the costs hold the growth of 8 already: replayed at 8 they
    # stand as measured, and at 2 they shrink by it
    at8 = dataclasses.replace(cpu, run_workers=8)
    assert steady_rate(replay(at8, Setting(8, 2, True), 80), 1.0) == pytest.approx(
        2.0 * CROWDED_SHARE, rel=1e-6
    )
    shrunk = steady_rate(replay(at8, Setting(2, 2, True), 80), 1.0)
    assert shrunk == pytest.approx(2.0 * (1.0 + 6 * CROWDED_GROWTH), rel=1e-6)


def test_a_bandwidth_cap_keeps_the_rate_whatever_the_readers() -> None:
    # reads measured at 2 in flight, throughput flat in readers (exponent 0): 4 readers
    # take twice as long per read, so the rate stays that of 2
    capped = dataclasses.replace(
        blocked([1.0] * 80, [0.0]), exponent=0.0, reads_in_flight=2.0, reads_in_flight_max=2.0
    )
    rates = []
    for w in (2, 4):
        arr = replay(capped, Setting(w, 2, True), 80)
        rates.append(steady_rate(arr, 1.0))
    assert rates[0] == pytest.approx(2.0, rel=1e-6)
    assert rates[1] == pytest.approx(2.0, rel=1e-6)


def _log(work_ms: list[float], slow_ms: list[float], step_s: float, workers: int) -> BatchLog:
    """A run's log as simulate would make it: arrivals from the in-order queue."""
    arr = simulate([w / 1e3 for w in work_ms], [step_s], workers, 2, True)
    n = len(work_ms)
    req = [0.0] + [a + step_s for a in arr[:-1]]
    free = [0.0] * workers
    ready = []
    # each worker makes its batches in turn: ready when its previous one and this are done
    for i, w in enumerate(work_ms):
        k = i % workers
        free[k] = max(free[k], req[max(i - 2 * workers, 0)]) + w / 1e3
        ready.append(free[k])
    return BatchLog(
        request=req,
        arrival=arr,
        ready=ready,
        worker=[i % workers for i in range(n)],
        work_ms=work_ms,
        slowest_ms=slow_ms,
        samples=[2] * n,
        epoch=[0] * n,
    )


def _record(log: BatchLog, workers: int = 2, cores: int = 8) -> RunRecord:
    rec = RunRecord(
        kind="watch", host=HostInfo(usable_cores=cores), dataset=DatasetProfile(target="d")
    )
    n = len(log.arrival)
    rec.measured_samples_per_s = 2 * (n - 1 - workers) / (log.arrival[-1] - log.arrival[workers])
    rec.watch = WatchData(
        settings=LoaderSettings(workers=workers, batch_size=2, prefetch_factor=2),
        sample_ms=Distribution(count=2 * n, total=float(2 * n), values=[1.0] * (2 * n)),
        batch_log=log,
    )
    return rec


def test_a_skewed_run_predicts_a_gain_from_out_of_order_and_uniform_one_none() -> None:
    n = 400
    work = [21.0 if i % 25 == 0 else 2.0 for i in range(n)]
    slow = [20.0 if i % 25 == 0 else 1.0 for i in range(n)]
    skewed = _record(_log(work, slow, 0.0015, 2))
    preds = {p.setting: p for p in queue_predictions(skewed)}
    assert preds["in_order"].gain > 1.1
    assert preds["in_order"].predicted_samples_per_s == pytest.approx(
        skewed.measured_samples_per_s * preds["in_order"].gain
    )
    top = advice(skewed)
    assert top is not None and not top.setting.in_order
    hol = head_of_line(skewed)
    assert hol is not None
    # 16 stragglers after the first round, each 19 ms over the 1 ms median
    assert hol.slow_sample_seconds == pytest.approx(15 * 0.019, rel=1e-6)
    assert hol.queue_seconds > 0

    uniform = _record(_log([2.0] * n, [1.0] * n, 0.0015, 2))
    assert advice(uniform) is None
    hol = head_of_line(uniform)
    assert hol is not None and hol.slow_sample_seconds == 0.0


def test_no_batch_log_or_no_workers_gives_no_queue_figures() -> None:
    rec = _record(_log([2.0] * 100, [1.0] * 100, 0.001, 2))
    assert rec.watch is not None
    rec.watch.settings.workers = 0
    assert head_of_line(rec) is None and queue_predictions(rec) == []
    rec.watch.settings.workers = 2
    rec.watch.batch_log = None
    assert head_of_line(rec) is None and queue_predictions(rec) == []


def test_too_few_batches_to_settle_give_no_prediction() -> None:
    rec = _record(_log([2.0] * 30, [1.0] * 30, 0.001, 2))
    assert queue_predictions(rec) == [] and head_of_line(rec) is None


def test_histogram_is_log_spaced_and_keeps_every_value() -> None:
    values = [1.0] * 90 + [100.0] * 10
    bins = histogram(values, bins=4)
    assert [c for _, _, c in bins] == [90, 0, 0, 10]
    assert bins[0][0] == pytest.approx(1.0) and bins[-1][1] == pytest.approx(100.0)
    assert bins[1][0] == pytest.approx(10**0.5)
    assert histogram([]) == [] and histogram([5.0, 5.0]) == [(5.0, 5.0, 2)]


def test_tail_share_tells_a_heavy_tail_from_uniform_costs() -> None:
    assert tail_share([1.0] * 200) == pytest.approx(0.01)
    assert tail_share([1.0] * 198 + [100.0] * 2) == pytest.approx(200 / 398)
    assert tail_share([1.0] * 50) is None


def test_report_lines_name_the_heaviest_samples_and_the_queue_cost() -> None:
    n = 400
    work = [21.0 if i % 25 == 0 else 2.0 for i in range(n)]
    slow = [20.0 if i % 25 == 0 else 1.0 for i in range(n)]
    rec = _record(_log(work, slow, 0.0015, 2))
    assert rec.watch is not None
    rec.watch.sample_costs = SampleCosts(
        cpu_ms=Distribution(count=3, total=0.3, values=[0.1, 0.1, 0.1]),
        heaviest=[
            HeavySample(index=50, worker=0, epoch=0, wall_ms=20.4, cpu_ms=0.1, path="/d/50.jpg"),
            HeavySample(index=100, worker=1, epoch=0, wall_ms=20.2, cpu_ms=0.1),
        ],
    )
    f = findings(rec)
    lines = dict(sample_facts(f) + queue_facts(f))
    assert lines["heaviest"] == "#50 20.4 ms (/d/50.jpg), #100 20.2 ms (by dataset index)"
    assert (
        lines["per sample"] == "wall median 1 ms, p99 1, max 1; CPU median 0.1 ms, p99 0.1, max 0.1"
    )
    assert "in_order=False +" in lines["head-of-line"]
    assert lines["head-of-line"].startswith("waited ")
    page = html.render(rec, f)
    assert '<div id="sample-costs">' in page and '<div id="batch-queue">' in page
    # one sample has a source, none has metered bytes: a source column, no kB column
    assert "<td>/d/50.jpg</td>" in page and "<th>kB</th>" not in page

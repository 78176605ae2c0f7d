"""The loader replay on records built by hand: the advice it picks, the memory it keeps
within, the what-if that reproduces it, and what the watch measures for it."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from ioprobe.analysis import loader_sim, tune
from ioprobe.analysis.compare import applied_check
from ioprobe.analysis.epochs import epoch_starts
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.recommend import loader_rule
from ioprobe.analysis.scenario import FOREIGN_SHARE, LINEAR_STORAGE
from ioprobe.analysis.verdict import finalize
from ioprobe.analysis.whatif import whatif
from ioprobe.collect.procfs import parse_host_busy, parse_private_bytes
from ioprobe.loaders.torch import tensor_bytes
from ioprobe.record import (
    BatchLog,
    Change,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    LoaderSettings,
    RunRecord,
    Stages,
    TuneTrial,
    WatchData,
    WatchEpoch,
)
from ioprobe.render.tune_text import tune_lines

MB = 1 << 20


def skewed_log(
    n: int = 400, workers: int = 2, step_s: float = 0.0015, straggler_s: float = 0.021
) -> BatchLog:
    """A log as an in-order loader of ``workers`` makes it: batches of 2 ms blocked, one
    in 25 of ``straggler_s``, a consumer step of ``step_s``; arrivals from the replay."""
    blocked = [straggler_s if i % 25 == 0 else 0.002 for i in range(n)]
    costs = dataclasses.replace(
        _costs(blocked, step_s), usable_cores=8.0, reads_in_flight=float(workers)
    )
    arr = loader_sim.simulate(costs, loader_sim.Setting(workers, 2, True), n)
    req = [0.0] + [a + step_s for a in arr[:-1]]
    return BatchLog(
        request=req,
        arrival=arr,
        ready=[a for a in arr],  # the consumer always waited: ready when it arrived
        worker=[i % workers for i in range(n)],
        work_ms=[b * 1e3 for b in blocked],
        slowest_ms=[b * 1e3 / 2 for b in blocked],
        samples=[2] * n,
        epoch=[0] * n,
        cpu_ms=[0.0] * n,
        runqueue_ms=[0.0] * n,
    )


def _costs(blocked: list[float], step_s: float) -> loader_sim.Costs:
    return loader_sim.Costs(
        blocked=tuple(blocked),
        cpu=(0.0,) * len(blocked),
        steps=(step_s,),
        samples_per_batch=2.0,
        usable_cores=8.0,
        loop_cores=0.0,
        other_threads=0.0,
        exponent=1.0,
        reads_in_flight=2.0,
        reads_in_flight_max=2.0,
        cpu_split="per batch",
    )


def record(log: BatchLog, workers: int = 2, **watch: object) -> RunRecord:
    rec = RunRecord(
        kind="watch",
        host=HostInfo(usable_cores=8, memory_bytes=64 * 1024 * MB),
        dataset=DatasetProfile(target="d", files=1000),
        stages=Stages(
            cpu=CpuStage(capacity_samples_per_s=5000.0, cpu_seconds_per_sample=0.0001),
            gpu=GpuStage(capacity_samples_per_s=2000.0),
        ),
    )
    rec.measured_samples_per_s = loader_sim.steady_rate(log.arrival, 2.0)
    rec.watch = WatchData(
        settings=LoaderSettings(workers=workers, batch_size=2, prefetch_factor=2),
        batch_log=log,
        **watch,  # type: ignore[arg-type]
    )
    f = pipeline_model(rec.stages)
    rec.bottleneck, rec.predicted_samples_per_s = f.bottleneck, f.predicted_samples_per_s
    return rec


def test_the_replay_of_a_run_as_it_was_gives_its_measured_rate() -> None:
    rec = record(skewed_log())
    replay = loader_sim.replay(rec)
    assert replay is not None and abs(replay.error) < 0.02


def test_the_advice_is_the_fastest_setting_and_the_cheapest_within_two_percent() -> None:
    rec = record(skewed_log())
    tried = loader_sim.search(rec)
    top = loader_sim.advice(rec)
    assert top is not None and top.gain > 1.3
    fastest = max(p.samples_per_s for p in tried)
    assert top.samples_per_s >= loader_sim.NEAR * fastest
    # nothing as fast asks less of the host
    cheaper = [
        p
        for p in tried
        if p.samples_per_s >= loader_sim.NEAR * fastest and p.setting.cost() < top.setting.cost()
    ]
    assert cheaper == []


def test_advice_never_exceeds_the_memory_the_host_can_spare_and_says_so() -> None:
    free = dataclasses.replace(
        record(skewed_log(), worker_private_bytes=200 * MB, batch_bytes=100 * MB),
    )
    unlimited = loader_sim.advice(free)
    assert unlimited is not None and unlimited.memory_bytes is not None
    # the host can spare less than the unlimited advice holds, more than the run held
    tight = dataclasses.replace(free, host=dataclasses.replace(free.host))
    limit = (unlimited.memory_bytes + 2 * 200 * MB + 5 * 100 * MB) / 2
    tight.host.memory_available_bytes = int(limit + 0.1 * (tight.host.memory_bytes or 0))
    chosen = loader_sim.advice(tight)
    assert chosen is not None and chosen.memory_bytes is not None
    assert chosen.memory_bytes <= limit < unlimited.memory_bytes
    (rec,) = loader_rule(tight, pipeline_model(tight.stages))
    assert "Memory stops short of more" in rec.text
    assert "a worker holds 200 MiB, a batch 100 MiB" in rec.text


def test_whatif_of_the_advised_setting_reproduces_the_advice() -> None:
    rec = record(skewed_log())
    top = loader_sim.advice(rec)
    assert top is not None
    s = top.setting
    out = whatif(
        rec, Change(workers=s.workers, prefetch_factor=s.prefetch_factor, in_order=s.in_order)
    )
    assert out.predicted_samples_per_s == pytest.approx(top.samples_per_s)
    assert out.whatif is not None
    assert "replaying the run's logged batches" in out.whatif.assumptions[0]
    # a change of hardware beside it is the stage model's, not the replay's
    mixed = whatif(rec, Change(workers=s.workers, cores=16))
    assert mixed.whatif is not None
    assert not any("replaying" in a for a in mixed.whatif.assumptions)


def test_an_unknown_storage_scaling_is_stated_with_the_capped_range() -> None:
    # a consumer fast enough that more workers pay: more reads in flight
    rec = record(skewed_log(step_s=0.0001))
    assert rec.watch is not None
    rec.watch.read_scaling = None  # the run could not tell a cap from a latency limit
    (advice,) = loader_rule(rec, pipeline_model(rec.stages))
    assert advice.change is not None and advice.change.workers
    # past the 2 cores, the crowded share is an assumption of its own
    assert advice.unchecked == [loader_sim.CROWDED, LINEAR_STORAGE]
    assert "Were the storage one shared bandwidth" in advice.text


def test_more_workers_beside_other_load_state_that_it_gives_up_cores_thread_by_thread() -> None:
    # a busy loop in another session kept its core whatever the workers (306 samples/s with
    # 1 worker, 311 with 8): a prediction that takes cores from the other load says so
    base = loader_sim.Setting(1, 2, True)
    loaded = dataclasses.replace(_costs([0.001] * 8, 0.001), other_threads=1.0)
    more = loader_sim.assumptions(loaded, base, loader_sim.Setting(4, 2, True))
    assert FOREIGN_SHARE in more
    # fewer workers, or no other load, take nothing from it
    assert FOREIGN_SHARE not in loader_sim.assumptions(loaded, base, base)
    alone = dataclasses.replace(loaded, other_threads=0.0)
    assert FOREIGN_SHARE not in loader_sim.assumptions(alone, base, loader_sim.Setting(4, 2, True))


def test_other_groups_keep_their_cores_and_this_sessions_load_gives_them_up() -> None:
    # 2 cores, batches of 3 ms of CPU, one busy core of other load: in another session it
    # keeps its core however many workers run (306 samples/s with 1 worker, 311 with 8 on
    # the 2-core VM); in this session 8 workers take most of it (307 and 517)
    cpu = dataclasses.replace(_costs([0.0] * 200, 0.0), cpu=(0.003,) * 200, usable_cores=2.0)
    apart = dataclasses.replace(cpu, held_cores=1.0, apart_known=True)
    same = dataclasses.replace(cpu, other_threads=1.0, apart_known=True)

    def gain(c: loader_sim.Costs) -> float:
        one = loader_sim.simulated_rate(c, loader_sim.Setting(1, 2, True))
        return loader_sim.simulated_rate(c, loader_sim.Setting(8, 2, True)) / one

    assert gain(apart) < 1.05
    assert 1.5 < gain(same) < 1.9
    # the run told them apart: neither rests on the assumption
    base, more = loader_sim.Setting(1, 2, True), loader_sim.Setting(8, 2, True)
    assert FOREIGN_SHARE not in loader_sim.assumptions(same, base, more)


def test_workers_past_a_cpu_quota_are_throttled_by_time_not_left_on_an_idle_core() -> None:
    # inside a cgroup of 1 core's quota on the 2-core VM, 3 ms of CPU per sample: 290
    # samples/s with 1 worker, 291 and 296 with 2 and 4 (the replay: 291, 289); a CPU set of
    # 1 core crowded by 4 workers loses the share of a core left idle
    cpu = dataclasses.replace(_costs([0.0] * 200, 0.0), cpu=(0.003,) * 200, usable_cores=1.0)
    quota = dataclasses.replace(cpu, quota=True)

    def rate(c: loader_sim.Costs, n: int) -> float:
        return loader_sim.simulated_rate(c, loader_sim.Setting(n, 2, True))

    assert rate(quota, 4) / rate(quota, 1) > 0.97
    assert rate(cpu, 4) / rate(cpu, 1) < loader_sim.CROWDED_SHARE + 0.01


def _busy_host(**scan: object) -> RunRecord:
    """The skewed run with one epoch of 10 s: the host busy 18 s, the workers 4 s and the
    main process 2 s of it; ``scan``: what the scan of the host's processes found."""
    rec = record(skewed_log())
    assert rec.watch is not None
    rec.watch.epochs = [
        WatchEpoch(
            index=0, batches=10, host_busy_seconds=18.0, host_wall_seconds=10.0,
            worker_process_cpu_seconds=4.0, main_cpu_seconds=2.0, **scan,
        )
    ]  # fmt: skip
    return rec


def test_the_foreign_load_is_split_by_the_scan_of_the_hosts_processes() -> None:
    # of the other 12 s, 10 in another group
    rec = _busy_host(apart_cpu_seconds=10.0, apart_wall_seconds=10.0, apart_groups=1)
    assert rec.watch is not None
    costs = loader_sim.costs(rec)
    assert costs is not None and costs.apart_known
    assert costs.held_cores == pytest.approx(1.0) and costs.other_threads == 0.0
    assert loader_sim.apart_cores(rec, 8.0) == (pytest.approx(1.0), 0.0)
    # two groups busy on 3 cores of a 2-core budget keep no more than their fair shares
    # beside this job's (2 of 3 groups: 4/3 cores); the other 0.4 shares thread by thread
    rec.watch.epochs[0].apart_cpu_seconds, rec.watch.epochs[0].apart_groups = 30.0, 2
    rec.watch.epochs[0].host_busy_seconds = 40.0
    assert loader_sim.apart_cores(rec, 2.0) == (pytest.approx(4 / 3), pytest.approx(0.4))
    # an epoch not scanned tells nothing: the load is taken as shared thread by thread
    rec.watch.epochs[0].apart_cpu_seconds = None
    assert loader_sim.apart_cores(rec, 8.0) is None


def test_a_dataloader_without_workers_or_a_log_has_nothing_to_replay() -> None:
    rec = record(skewed_log())
    assert rec.watch is not None
    rec.watch.batch_log = None
    assert loader_sim.costs(rec) is None and loader_sim.search(rec) == []
    rec = record(skewed_log())
    assert rec.watch is not None
    rec.watch.settings.framework = "dali"
    assert loader_sim.advice(rec) is None


def test_private_memory_is_the_clean_and_dirty_private_pages() -> None:
    text = b"Rss: 900 kB\nPss: 500 kB\nPrivate_Clean: 100 kB\nPrivate_Dirty: 28 kB\n"
    assert parse_private_bytes(text) == 128 * 1024
    assert parse_private_bytes(b"Rss: 1 kB\n") is None


def test_a_batchs_bytes_are_its_tensors_however_nested() -> None:
    batch = {"x": torch.zeros(8, 3, dtype=torch.float32), "y": [torch.zeros(8, dtype=torch.int64)]}
    assert tensor_bytes(batch) == 8 * 3 * 4 + 8 * 8
    assert tensor_bytes(["no tensors"]) is None


def test_tune_plans_the_advised_setting_first_and_never_the_scripts_own() -> None:
    rec = record(skewed_log())
    chosen = tune.plan(rec, 4)
    base = loader_sim.recorded_setting(rec)
    top = loader_sim.advice(rec)
    assert top is not None and chosen and chosen[0].setting == top.setting
    assert len(chosen) == 4 and len({p.setting for p in chosen}) == 4
    assert all(p.setting != base and p.fits for p in chosen)


def test_tune_names_the_cheapest_setting_within_two_percent_of_the_fastest() -> None:
    rows = [
        TuneTrial(4, 2, True, None, 100.0),
        TuneTrial(8, 2, True, 200.0, 199.0),
        TuneTrial(16, 2, True, 210.0, 200.0),  # fastest, but asks twice the workers
        TuneTrial(8, 2, False, 190.0, 150.0),
    ]
    data = tune.outcome(rows, 60)
    assert data.best == 1
    assert tune.change_text(data) == "DataLoader(..., num_workers=8)"
    assert tune.median_error(data) == pytest.approx(sorted([1 / 199, 0.05, 40 / 150])[1])
    lines = tune_lines(data)
    assert lines[0].split() == [
        "trial", "num_workers", "prefetch_factor", "in_order", "predicted", "samples/s",
        "measured", "samples/s", "error", "memory", "note",
    ]  # fmt: skip
    assert "measured best" in lines[2] and "the setting as given" in lines[1]
    assert "Measured best: trial 2, 199 samples/s (1.99x the script's own)." in lines[-3]
    # nothing measured: no best, and the summary says so
    empty = tune.outcome([TuneTrial(4, 2, True, None, None)], 60)
    assert empty.best is None and tune.change_text(empty) is None


def test_compare_finds_the_applied_loader_advice_from_the_second_runs_settings() -> None:
    a = record(skewed_log())
    a.recommendations = loader_rule(a, pipeline_model(a.stages))
    (advice,) = a.recommendations
    assert advice.change is not None and advice.change.in_order is False
    top = loader_sim.advice(a)
    assert top is not None
    b = dataclasses.replace(a, watch=dataclasses.replace(a.watch))  # type: ignore[arg-type]
    assert b.watch is not None
    b.watch.settings = dataclasses.replace(
        b.watch.settings,
        workers=top.setting.workers,
        prefetch_factor=top.setting.prefetch_factor,
        in_order=top.setting.in_order,
    )
    check = applied_check(a, b, a.measured_samples_per_s, 123.0, None)
    assert check is not None and check.kind == advice.kind
    assert "in_order=False" in check.how
    # the run as it was applied nothing
    assert applied_check(a, a, a.measured_samples_per_s, 123.0, None) is None


def test_the_hosts_busy_time_less_the_loaders_is_the_foreign_load() -> None:
    stat = b"cpu  100 20 30 900 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    assert parse_host_busy(stat, 100) == pytest.approx((100 + 20 + 30 + 6 + 7 + 8) / 100)
    assert parse_host_busy(b"intr 1 2 3\n", 100) is None
    rec = _busy_host()
    assert rec.watch is not None
    assert loader_sim.foreign_cores(rec) == pytest.approx(1.2)
    costs = loader_sim.costs(rec)
    assert costs is not None and costs.other_threads == pytest.approx(1.2)
    rec.watch.epochs[0].host_busy_seconds = 6.5  # what the loader used and noise
    assert loader_sim.foreign_cores(rec) == 0.0


@pytest.mark.parametrize("in_order", [True, False])
def test_a_setting_past_any_host_is_replayed_in_a_moment(in_order: bool) -> None:
    # whatif takes up to 2^20 workers and prefetch: the replay handed out workers x prefetch
    # batches and kept state for every worker, a hang at --workers 1048576 and a
    # MemoryError with both at that
    c = _costs([0.002] * 64, 0.001)
    start = time.monotonic()
    for workers, prefetch in [(1 << 20, 2), (1 << 20, 1 << 20), (65536, 1)]:
        s = loader_sim.Setting(workers, prefetch, in_order)
        arrivals = loader_sim.simulate(c, s)
        assert len(arrivals) == loader_sim.MAX_REPLAY
        assert loader_sim.simulated_rate(c, s) > 0
    assert time.monotonic() - start < 10.0
    # a worker past the replay's batches changes nothing: the same replay as at n workers
    n = loader_sim.MAX_REPLAY
    wide = loader_sim.simulate(c, loader_sim.Setting(4 * n, 1, in_order))
    assert wide == loader_sim.simulate(c, loader_sim.Setting(n, 1, in_order), n)


def _with_epochs(rec: RunRecord, epochs: int, startup_s: float) -> RunRecord:
    """``rec`` as ``epochs`` epochs of its batches, each starting its workers again in
    ``startup_s`` and shutting them down in a tenth of it."""
    assert rec.watch is not None and rec.watch.batch_log is not None
    log = rec.watch.batch_log
    batches, samples = len(log.arrival) // epochs, sum(log.samples) // epochs
    steady = (log.arrival[-1] - log.arrival[0]) / epochs
    rec.watch.epochs = [
        WatchEpoch(
            index=i,
            batches=batches,
            samples=samples,
            seconds=steady,
            iter_seconds=0.001,
            first_batch_seconds=startup_s,
            workers_started=rec.watch.settings.workers,
            worker_startup_seconds=startup_s,
            shutdown_seconds=startup_s / 10,
            end_seconds=startup_s / 10,  # the last next() joins the workers
        )
        for i in range(epochs)
    ]
    return rec


def test_long_epochs_leave_the_advice_to_the_steady_replay() -> None:
    steady = loader_sim.advice(record(skewed_log()))
    rec = _with_epochs(record(skewed_log()), 1, 0.005)  # start-up under 1% of the run
    assert loader_sim.epoch_restarts(rec) is None
    assert loader_sim.advice(rec) == steady


def test_short_epochs_weigh_each_settings_worker_restarts_end_to_end() -> None:
    # the replay's steady best adds workers; each of 4 short epochs starts them again, and
    # a start-up that grows with them outweighs what they add
    blocked = skewed_log(step_s=0.0002, straggler_s=0.002)  # more workers overlap its reads
    steady = loader_sim.advice(record(blocked))
    assert steady is not None and steady.setting.workers > 2 and steady.gain > 1.3
    rec = _with_epochs(record(skewed_log(step_s=0.0002, straggler_s=0.002)), 4, 0.2)
    restarts = loader_sim.epoch_restarts(rec)
    assert restarts is not None and restarts.per_epoch == pytest.approx(0.22)
    assert restarts.seconds == pytest.approx(4 * 0.22)
    e2e = loader_sim.end_to_end(steady, restarts)
    n, scaled = restarts.samples, 4 * 0.22 * steady.setting.workers / 2
    assert e2e.samples_per_s == pytest.approx(n / (n / steady.samples_per_s + scaled))
    assert e2e.gain == pytest.approx(e2e.samples_per_s / restarts.baseline_samples_per_s)
    assert e2e.gain < 1.0 and "in proportion to the workers" in e2e.assumptions[-1]
    # no setting gains end to end: no loader advice, and persistent workers come first
    assert loader_sim.advice(rec) is None
    assert loader_rule(rec, pipeline_model(rec.stages)) == []


def test_an_advised_setting_weighed_end_to_end_says_so_and_states_its_gain_against_it() -> None:
    rec = _with_epochs(record(skewed_log()), 4, 0.02)  # about 5% of the run
    restarts = loader_sim.epoch_restarts(rec)
    assert restarts is not None
    (advice,) = loader_rule(rec, pipeline_model(rec.stages))
    assert "end to end with each of its epochs starting its workers again" in advice.text
    assert advice.baseline_samples_per_s == pytest.approx(restarts.baseline_samples_per_s)
    assert advice.predicted_samples_per_s is not None
    gain = advice.predicted_samples_per_s / restarts.baseline_samples_per_s
    assert f"{gain - 1:+.0%}" in advice.text


def test_an_applied_end_to_end_prediction_is_held_to_the_reruns_end_to_end_rate() -> None:
    # persistent_workers predicts the run with its start-ups gone, end to end: the rerun's
    # steady rate would credit it nothing, its end-to-end rate what it saved
    a = finalize(_with_epochs(record(skewed_log()), 4, 0.2))
    (advice,) = [r for r in a.recommendations if r.kind == "persistent_workers"]
    assert advice.baseline_samples_per_s is not None
    b = _with_epochs(record(skewed_log()), 4, 0.2)
    assert b.watch is not None
    b.watch.settings = dataclasses.replace(b.watch.settings, persistent_workers=True)
    for e in b.watch.epochs:  # kept workers start once and stop with the loader
        e.shutdown_seconds = e.end_seconds = None
        if e.index:
            e.first_batch_seconds, e.worker_startup_seconds, e.workers_started = 0.01, None, 0
    # named by the user (compare --applied persistent_workers): no count shows it
    rates = (a.measured_samples_per_s, b.measured_samples_per_s)
    check = applied_check(a, b, *rates, "persistent_workers")
    assert check is not None and check.kind == "persistent_workers" and check.end_to_end
    ea, eb = epoch_starts(a), epoch_starts(b)
    assert ea is not None and eb is not None
    assert check.measured_samples_per_s == pytest.approx(eb.end_to_end_samples_per_s)
    assert check.measured_gain == pytest.approx(
        eb.end_to_end_samples_per_s / ea.end_to_end_samples_per_s
    )
    assert check.measured_gain > 1.2 and abs(check.error) < 0.1


def test_many_workers_on_a_capped_store_are_replayed_until_their_waves_settle() -> None:
    # 48 workers start together and share a store that grows no faster past 4 readers: they
    # finish in waves, and 600 batches (the least a replay runs) read 10-20% fast
    c = dataclasses.replace(
        _costs([0.032] * 200, 0.001),
        cpu=(0.002,) * 200,
        exponent=0.02,
        reads_in_flight=1.9,
        reads_in_flight_max=4.0,
        usable_cores=2.0,
    )
    s = loader_sim.Setting(48, 2, True)
    settled = loader_sim.steady_rate(loader_sim.simulate(c, s, 8000), c.samples_per_batch)
    assert loader_sim.simulated_rate(c, s) == pytest.approx(settled, rel=0.03)


def test_a_bandwidths_throughput_holds_past_the_most_reads_in_flight_measured() -> None:
    # every batch 10 ms blocked, measured at 2 reads in flight and up to 4
    def rate(exponent: float, workers: int) -> float:
        c = dataclasses.replace(
            _costs([0.010] * 200, 0.0001), exponent=exponent, reads_in_flight_max=4.0
        )
        return loader_sim.rate_of(c, loader_sim.Setting(workers, 2, True))

    # a bandwidth that barely grew up to 4 readers does not grow past them
    assert rate(0.1, 16) == pytest.approx(rate(0.1, 4), rel=0.04)  # not (16 / 4) ** 0.1: +15%
    # a latency limit's curve goes on: more readers read faster
    assert rate(1.0, 16) > 3 * rate(1.0, 4)

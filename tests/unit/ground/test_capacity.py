"""One set of capacity rules: what a collector measured and what the what-if predicts come
from the same functions in ``ioprobe.capacity``.

Records here are built by the collectors' own stage rules (``ioprobe.monitor.stages``, the
probe's) from generated measurements, so the what-if is checked against the rule that made
the record, for DataLoader, DALI and probe records alike.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ioprobe import capacity
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.scenario import evaluate
from ioprobe.monitor.stages import Measured, dali_stages, loader_stages, worker_cpu
from ioprobe.record import (
    Change,
    CpuLevel,
    CpuStage,
    DaliData,
    DaliOperator,
    DatasetProfile,
    GpuStage,
    HostInfo,
    LoaderSettings,
    RunRecord,
    Stages,
    StoragePass,
    StorageStage,
    SweepPoint,
    WatchData,
    WatchEpoch,
)

SIZE = 100_000.0


@st.composite
def epochs(draw: st.DrawFn) -> list[WatchEpoch]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        samples = draw(st.integers(64, 100_000))
        cpu = draw(st.floats(1e-5, 0.05)) * samples
        blocked = draw(st.floats(0.0, 0.05)) * samples
        runq = draw(st.floats(0.0, 0.02)) * samples
        seconds = draw(st.floats(0.5, 600.0))
        out.append(
            WatchEpoch(
                index=i,
                batches=max(samples // 32, 2),
                samples=samples,
                seconds=seconds,
                sample_cpu_seconds=cpu,
                sample_wall_seconds=cpu + blocked + runq,
                runqueue_seconds=runq,
                collate_seconds=(collate := draw(st.floats(0.0, 0.001)) * samples),
                # None: a record from before the collate's CPU time was kept
                collate_cpu_seconds=draw(st.none() | st.floats(0.0, 1.0).map(collate.__mul__)),
                main_cpu_seconds=draw(st.floats(0.0, 1.5)) * seconds,
            )
        )
    return out


def measured(s: LoaderSettings, eps: list[WatchEpoch], usable: int, step_ms: float) -> Measured:
    return Measured(
        settings=s,
        epochs=eps,
        usable_cores=usable,
        sample_bytes=SIZE,
        batch_size=32,
        step_ns=[int(step_ms * 1e6)] * 9,
    )


def watched(stages: Stages, s: LoaderSettings, eps: list[WatchEpoch], usable: int) -> RunRecord:
    return RunRecord(
        kind="watch",
        host=HostInfo(usable_cores=usable),
        dataset=DatasetProfile(target="t", files=10_000, sample_bytes_mean=SIZE),
        stages=stages,
        watch=WatchData(settings=s, epochs=eps),
    )


def torch_record(draw: st.DrawFn) -> tuple[RunRecord, Measured]:
    s = LoaderSettings(framework="torch", workers=draw(st.integers(0, 16)), batch_size=32)
    eps, usable = draw(epochs()), draw(st.integers(1, 64))
    m = measured(s, eps, usable, draw(st.floats(0.1, 500.0)))
    stages, _ = loader_stages(m)
    return watched(stages, s, eps, usable), m


def dali_record(draw: st.DrawFn) -> tuple[RunRecord, Measured]:
    threads = draw(st.integers(1, 32))
    s = LoaderSettings(framework="dali", workers=threads, batch_size=32)
    eps, usable = draw(epochs()), draw(st.integers(1, 64))
    m = measured(s, eps, usable, draw(st.floats(0.1, 500.0)))
    calls = draw(st.integers(1, 1000))
    ops = [
        DaliOperator(
            name=name,
            device="cpu",
            stage=stage,  # type: ignore[arg-type]
            calls=calls,
            wall_seconds=draw(st.floats(1e-4, 1.0)) * calls,
            cpu_seconds=draw(st.floats(1e-4, 4.0)) * calls,
        )
        for name, stage in (("readers.file", "storage"), ("decoders.image", "cpu"))
    ]
    d = DaliData(operators=ops, reads=calls * 32, read_seconds=draw(st.floats(1e-4, 10.0)))
    stages, _ = dali_stages(m, d, 32, SIZE)
    rec = watched(stages, s, eps, usable)
    rec.dali = d
    return rec, m


def probe_record(draw: st.DrawFn) -> RunRecord:
    rates = sorted(draw(st.lists(st.floats(1e6, 5e9), min_size=1, max_size=6)))
    sweep = [
        SweepPoint(
            concurrency=2**i, bytes=0, items=0, seconds=1.0, read_bytes_per_s=r, files_per_s=0.0
        )
        for i, r in enumerate(rates)
    ]
    best = sweep[-1]
    per_worker = sorted(draw(st.lists(st.floats(10.0, 5000.0), min_size=1, max_size=5)))
    levels = [
        CpuLevel(
            workers=2**i,
            samples=0,
            seconds=1.0,
            samples_per_s=r,
            cpu_seconds_per_sample=0.01,
            efficiency=1.0,
        )
        for i, r in enumerate(per_worker)
    ]
    usable = draw(st.integers(1, 64))
    gpus = draw(st.integers(1, 8))
    return RunRecord(
        kind="probe",
        host=HostInfo(usable_cores=usable),
        dataset=DatasetProfile(target="t", files=10_000, sample_bytes_mean=SIZE),
        stages=Stages(
            storage=StorageStage(
                capacity_samples_per_s=capacity.storage_from_rate(best.read_bytes_per_s, SIZE),
                read_bytes_per_s=best.read_bytes_per_s,
                cold=StoragePass(
                    cache="cold",
                    sweep=sweep,
                    best_concurrency=best.concurrency,
                    read_bytes_per_s=best.read_bytes_per_s,
                ),
            ),
            cpu=CpuStage(
                capacity_samples_per_s=max(lv.samples_per_s for lv in levels),
                cpu_seconds_per_sample=0.01,
                usable_cores=usable,
                sweep=levels,
            ),
            gpu=GpuStage(
                capacity_samples_per_s=capacity.gpu_emulated(32, draw(st.floats(1e-3, 1.0)), gpus),
                method="emulated",
            ),
        ),
    )


@st.composite
def any_record(draw: st.DrawFn) -> RunRecord:
    kind = draw(st.sampled_from(["torch", "dali", "probe"]))
    if kind == "torch":
        return torch_record(draw)[0]
    if kind == "dali":
        return dali_record(draw)[0]
    return probe_record(draw)


@given(any_record())
@settings(max_examples=300, deadline=None)
def test_a_whatif_with_no_change_reproduces_every_recorded_capacity_exactly(rec: RunRecord) -> None:
    sc = evaluate(rec, Change())
    assert sc.stages.capacities() == rec.stages.capacities()
    assert sc.deltas == ()


@st.composite
def torch_with_change(draw: st.DrawFn) -> tuple[RunRecord, Measured, int, int]:
    rec, m = torch_record(draw)
    return rec, m, draw(st.integers(0, 32)), draw(st.integers(1, 128))


@given(torch_with_change())
@settings(max_examples=300, deadline=None)
def test_a_dataloader_whatif_applies_the_collectors_cpu_rule_to_the_new_resources(
    case: tuple[RunRecord, Measured, int, int],
) -> None:
    rec, m, workers, cores = case
    cap = rec.stages.cpu.capacity_samples_per_s
    assert cap is not None and m.settings.framework == "torch"
    got = evaluate(rec, Change(workers=workers, cores=cores)).stages.cpu.capacity_samples_per_s
    # the collector's own rule, run as if the job had had these workers and cores
    cpu_per_sample = rec.stages.cpu.cpu_seconds_per_sample
    assert cpu_per_sample is not None
    cores_then = capacity.watch_cores(
        m.settings, m.epochs, m.usable_cores, workers=workers, usable=cores
    )
    assert got == pytest.approx(capacity.cpu_capacity(cores_then, cpu_per_sample), rel=1e-9)


@st.composite
def torch_with_an_unmeasured_pass(draw: st.DrawFn) -> tuple[RunRecord, RunRecord, Change]:
    """One loader's record, and the same record with a pass in front whose workers timed
    nothing (begun before the watch): its samples, waits and wall time, and no worker side."""
    rec, m = torch_record(draw)
    samples = draw(st.integers(64, 100_000))
    blind = WatchEpoch(
        index=-1,
        batches=max(samples // 32, 2),
        samples=samples,
        seconds=draw(st.floats(0.5, 600.0)),
        stall_seconds=draw(st.floats(0.0, 0.5)),
        main_cpu_seconds=draw(st.floats(0.0, 3.0)),
        workers_measured=False,
    )
    eps = [blind, *m.epochs]
    stages, notes = loader_stages(measured(m.settings, eps, m.usable_cores, 10.0))
    assert notes[0].startswith("epoch -1: the loader's workers were started before")
    both = watched(stages, m.settings, eps, m.usable_cores)
    return rec, both, Change(workers=draw(st.integers(0, 32)), cores=draw(st.integers(1, 128)))


@given(torch_with_an_unmeasured_pass())
@settings(max_examples=200, deadline=None)
def test_a_pass_whose_workers_timed_nothing_changes_no_worker_stage_nor_what_if(
    case: tuple[RunRecord, RunRecord, Change],
) -> None:
    """Its samples would read as free: CPU per sample, the cores the workers got and the
    storage stage come from the measured epochs alone, in the record and in the what-if."""
    rec, both, change = case
    for name in ("cpu", "storage"):
        assert both.stages.capacities()[name] == pytest.approx(rec.stages.capacities()[name])
    assert both.stages.cpu.cpu_seconds_per_sample == pytest.approx(
        rec.stages.cpu.cpu_seconds_per_sample
    )
    assert evaluate(both, change).stages.cpu.capacity_samples_per_s == pytest.approx(
        evaluate(rec, change).stages.cpu.capacity_samples_per_s
    )


@st.composite
def dali_with_change(draw: st.DrawFn) -> tuple[RunRecord, Measured, int, int]:
    rec, m = dali_record(draw)
    return rec, m, draw(st.integers(1, 64)), draw(st.integers(1, 128))


@given(dali_with_change())
@settings(max_examples=300, deadline=None)
def test_a_dali_whatif_scales_by_the_thread_pool_rule_the_record_was_made_with(
    case: tuple[RunRecord, Measured, int, int],
) -> None:
    rec, m, threads, cores = case
    cap = rec.stages.cpu.capacity_samples_per_s
    assert cap is not None
    got = evaluate(rec, Change(workers=threads, cores=cores)).stages.cpu.capacity_samples_per_s
    was = min(m.settings.workers, m.usable_cores)
    now = min(threads, cores)
    assert got == pytest.approx(cap * now / was, rel=1e-9)


def test_dali_threads_beyond_the_cores_buy_nothing_whatever_the_process_cpu() -> None:
    # A DALI pipeline's process CPU is mostly its own thread pool; read as a training loop's
    # (the DataLoader rule), it would leave the loader no cores and distort every ratio.
    s = LoaderSettings(framework="dali", workers=4, batch_size=32)
    eps = [WatchEpoch(index=0, batches=100, samples=3200, seconds=10.0, main_cpu_seconds=35.0)]
    d = DaliData(
        operators=[
            DaliOperator(
                "decoders.image", "cpu", "cpu", calls=100, wall_seconds=5.0, cpu_seconds=8.0
            )
        ]
    )
    stages, _ = dali_stages(measured(s, eps, 4, 10.0), d, 32, SIZE)
    rec = watched(stages, s, eps, 4)
    cap = rec.stages.cpu.capacity_samples_per_s
    assert cap is not None
    more_threads = evaluate(rec, Change(workers=16)).stages.cpu.capacity_samples_per_s
    assert more_threads == pytest.approx(cap)  # 4 threads already use the 4 cores
    more_cores = evaluate(rec, Change(workers=8, cores=8)).stages.cpu.capacity_samples_per_s
    assert more_cores == pytest.approx(2 * cap)


def test_density_thresholds_split_small_medium_and_large_samples() -> None:
    assert capacity.density_class(110_000) == "low"
    assert capacity.density_class(capacity.DENSITY_LOW_MAX) == "medium"
    assert capacity.density_class(capacity.DENSITY_HIGH_MIN - 1) == "medium"
    assert capacity.density_class(50 << 20) == "high"


def test_a_curve_is_linear_through_its_points_and_flat_or_extended_past_them() -> None:
    pts = [(1.0, 100.0), (2.0, 180.0), (4.0, 300.0)]
    assert capacity.sweep_rate(pts, 3.0, False) == pytest.approx(240.0)
    assert capacity.sweep_rate(pts, 8.0, False) == 300.0
    assert capacity.sweep_rate(pts, 8.0, True) == pytest.approx(600.0)
    assert capacity.sweep_rate(pts, 0.5, True) == pytest.approx(50.0)


def test_a_shared_gpu_adds_the_times_per_sample() -> None:
    assert capacity.shared_gpu(1000.0, 1000.0) == pytest.approx(500.0)
    assert math.isclose(capacity.shared_gpu(400.0, 1200.0), 300.0)


def _epoch(first: int, steady: int, workers: int = 2, samples: int = 1024) -> WatchEpoch:
    """An epoch of ``samples``: a first round of one batch of 32 per worker that read
    ``first`` bytes, and steady batches that read ``steady``."""
    return WatchEpoch(
        index=0,
        batches=samples // 32,
        samples=samples,
        seconds=10.0,
        workers_started=workers,
        startup_samples=32 * workers,
        startup_seconds=1.0,
        startup_read_chars=first,
        read_chars=first + steady,
    )


MiB = 1 << 20


@pytest.mark.parametrize(
    ("first", "steady", "expected"),
    [
        # a JPEG folder: 100 kB a sample, the first round with 450 kB of a CA bundle and
        # locale tables per worker on top: the steady batches alone
        (64 * 100_000 + 2 * 450_000, 960 * 100_000, 100_000),
        # an HTTP dataset: sockets read, the first round only the library's set-up
        (2 * 450_000, 960 * 40, 0),
        # a shard per worker read whole at its first sample, nothing after: every byte
        (2 * 8 * MiB, 960 * 40, (2 * 8 * MiB + 960 * 40) / 1024),
        # two files per worker read ahead in lumps: the first half in the first round
        (2 * 4 * MiB, 2 * 4 * MiB, 4 * 4 * MiB / 1024),
    ],
    ids=["jpeg-folder", "sockets", "shard-up-front", "lumps"],
)
def test_bytes_per_sample_count_the_first_round_where_a_reader_read_ahead_in_it(
    first: int, steady: int, expected: float
) -> None:
    assert capacity.file_bytes_per_sample([_epoch(first, steady)]) == pytest.approx(expected)


def _worker_epoch(
    n: int, blocked_ms: float, cpu_ms: float, collate_cpu: float | None
) -> WatchEpoch:
    """``n`` samples, each ``blocked_ms`` asleep then ``cpu_ms`` of CPU, in batches of 4
    whose collate took 2 ms of wall time, ``collate_cpu`` seconds of it CPU."""
    batches = n // 4
    return WatchEpoch(
        index=0,
        batches=batches,
        samples=n,
        seconds=60.0,
        sample_cpu_seconds=n * cpu_ms / 1e3,
        sample_wall_seconds=n * (blocked_ms + cpu_ms) / 1e3,
        collate_seconds=batches * 0.002,
        collate_cpu_seconds=None if collate_cpu is None else batches * collate_cpu,
    )


def test_collate_is_charged_its_cpu_time_and_its_wait_counts_as_blocked() -> None:
    s = LoaderSettings(workers=2, batch_size=4)
    new = _worker_epoch(400, 40.0, 10.0, 0.0004)
    assert capacity.worker_cpu_seconds(new) == pytest.approx(400 * 0.010 + 100 * 0.0004)
    stages, _ = loader_stages(measured(s, [new], 8, 1.0))
    assert stages.cpu.cpu_seconds_per_sample == pytest.approx(0.0101)
    # a worker's time per sample: 40 ms blocked + 1.6 / 4 ms of collate wait, then 10.1 ms
    # of CPU, one after the other: 2 workers deliver 2 / 50.5 ms, not 2 / 40.4 ms
    assert stages.storage.capacity_samples_per_s == pytest.approx(2 / 0.0505)
    # a record from before: the collate's wall time counted as CPU, as it was made
    old = _worker_epoch(400, 40.0, 10.0, None)
    assert capacity.worker_cpu_seconds(old) == pytest.approx(400 * 0.010 + 100 * 0.002)
    stages, _ = loader_stages(measured(s, [old], 8, 1.0))
    assert stages.cpu.cpu_seconds_per_sample == pytest.approx(0.0105)
    assert stages.storage.capacity_samples_per_s == pytest.approx(2 / 0.0505)


@pytest.mark.parametrize(("blocked_ms", "bottleneck"), [(0.6, "cpu"), (1.2, "storage")])
def test_a_wait_too_short_to_gain_the_least_advised_gain_is_not_named_storage(
    blocked_ms: float, bottleneck: str
) -> None:
    # one worker burning 20 ms of CPU a sample: 0.6 ms a sample blocked (3%, as a busy host's
    # scheduling and queue hand-over leave) is within the model's error and CPU is named;
    # 1.2 ms (5.7%) is a wait whose removal gains over 5%, and storage is named
    s = LoaderSettings(workers=1, batch_size=4)
    ep = _worker_epoch(400, blocked_ms, 20.0, 0.002)
    stages, _ = loader_stages(measured(s, [ep], 8, 1.0))
    assert pipeline_model(stages).bottleneck == bottleneck


def test_workers_that_wait_then_compute_deliver_lanes_over_the_sum() -> None:
    assert capacity.worker_lanes(2, 0.040, 0.010) == pytest.approx(40.0)
    assert capacity.worker_lanes(8, 0.040, 0.010) == pytest.approx(160.0)


def test_a_closed_loop_of_more_readers_than_any_host_runs_is_read_at_the_cap() -> None:
    # a hand-edited record of a billion workers held a report for minutes: each closed-loop
    # step is one reader, and the bisections above repeat it
    import time

    from ioprobe.capacity import MAX_LANES, closed_loop, closed_loop_scale

    pts = [(1.0, 1e8), (4.0, 2e8), (16.0, 2.1e8)]
    t0 = time.perf_counter()
    huge = closed_loop_scale(pts, 1e5, 0.001, 10**9, 0.01)
    assert time.perf_counter() - t0 < 5
    assert huge == closed_loop_scale(pts, 1e5, 0.001, MAX_LANES, 0.01)
    assert closed_loop(pts, 1e5, 1.0, 0.001, 10**9) == closed_loop(pts, 1e5, 1.0, 0.001, MAX_LANES)


def test_other_load_in_another_scheduling_group_is_named_in_the_cpu_note() -> None:
    # the workers ready half the time they ran: other threads held cores; the scan put a
    # core of it in another session, which keeps it however many workers run
    ep = WatchEpoch(
        index=0, batches=100, samples=3200, seconds=10.0, sample_cpu_seconds=8.0,
        sample_wall_seconds=16.0, runqueue_seconds=8.0, host_wall_seconds=10.0,
        apart_cpu_seconds=10.0, apart_wall_seconds=10.0, apart_groups=1,
    )  # fmt: skip
    notes: list[str] = []
    worker_cpu(measured(LoaderSettings(workers=2, batch_size=32), [ep], 2, 1.0), notes)
    # the other group's core is the whole of the wait: no other threads beside it
    assert notes == [
        "another session or cgroup kept 1.0 cores busy, which it keeps however many workers "
        "run: the workers ran 50% of the time they were ready to"
    ]
    ep.apart_cpu_seconds = 0.5  # this session's own load: shared thread by thread
    notes.clear()
    worker_cpu(measured(LoaderSettings(workers=2, batch_size=32), [ep], 2, 1.0), notes)
    assert notes == [
        "other processes kept about 2.0 threads runnable: the workers ran 50% of the time "
        "they were ready to"
    ]


def test_the_stage_model_gives_more_workers_none_of_another_groups_cores() -> None:
    # one worker ran 90% of the time it was ready beside another session's busy core and a
    # training loop of 0.1 core: 8 workers get what it had, the one core left less the
    # loop's, not a thread's share of both
    ep = WatchEpoch(
        index=0, batches=100, samples=3200, seconds=10.0, sample_cpu_seconds=9.0,
        sample_wall_seconds=10.0, runqueue_seconds=1.0, main_cpu_seconds=1.0,
        host_wall_seconds=10.0, apart_cpu_seconds=10.0, apart_wall_seconds=10.0,
        apart_groups=1,
    )  # fmt: skip
    s = LoaderSettings(workers=1, batch_size=32)
    assert capacity.cpu_context([ep], 1, 2).held == pytest.approx(1.0)
    assert capacity.watch_cores(s, [ep], 2) == pytest.approx(0.9)
    assert capacity.watch_cores(s, [ep], 2, workers=8) == pytest.approx(0.9)
    ep.apart_cpu_seconds = None  # not scanned: the loop's core is shared thread by thread
    assert capacity.watch_cores(s, [ep], 2, workers=8) > 1.6

"""A job's ranks merged into one record: each rank's figures, the stragglers and their cause,
and the wait the slowest rank exposes to all, on records built by hand."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.ranks import (
    merge_ranks,
    rank_figures,
    rank_spread,
    rank_verdict,
    slowest_rank,
)
from ioprobe.record import (
    BatchLog,
    DatasetProfile,
    Distributed,
    HostInfo,
    LoaderSettings,
    RankFigures,
    RankInfo,
    RunRecord,
    WatchData,
    WatchEpoch,
)

COMPUTE = 0.1  # seconds each step computes after its batch arrives


def _record(
    rank: int,
    waits: Sequence[float],
    *,
    world: int = 2,
    host: str = "node-a",
    work_ms: float = 20.0,
    cpu_s: float = 0.002,
    bottleneck: str | None = "gpu",
    storage: float | None = None,
) -> RunRecord:
    """Rank ``rank``'s record of one epoch: the consumer waits ``waits[k]`` for batch k, then
    computes COMPUTE; one worker (prefetch 2, so the first two batches are its first round)
    takes ``work_ms`` per batch of 4 samples."""
    request, arrival = [], []
    t = 0.0
    for wait in waits:
        request.append(t)
        arrival.append(t + wait)
        t = arrival[-1] + COMPUTE
    n = len(waits)
    log = BatchLog(
        request=request,
        arrival=arrival,
        ready=list(arrival),
        worker=[0] * n,
        work_ms=[work_ms] * n,
        slowest_ms=[work_ms / 4] * n,
        samples=[4] * n,
        epoch=[0] * n,
    )
    epoch = WatchEpoch(
        index=0,
        batches=n,
        samples=4 * n,
        seconds=arrival[-1] - arrival[0] if n else 0.0,
        stall_seconds=sum(waits[1:]),
        first_batch_seconds=waits[0] if n else None,
    )
    rec = RunRecord(
        kind="watch",
        host=HostInfo(hostname=host, usable_cores=8),
        dataset=DatasetProfile("d", files=4 * n, bytes=1000 * rank),
    )
    rec.watch = WatchData(
        settings=LoaderSettings(workers=1, batch_size=4, prefetch_factor=2),
        epochs=[epoch] if n else [],
        batch_log=log if n else None,
        rank=RankInfo(launcher="torchrun", rank=rank, world_size=world, local_rank=rank % 2),
    )
    rec.stages.cpu.cpu_seconds_per_sample = cpu_s
    rec.stages.storage.capacity_samples_per_s = storage
    if bottleneck is not None:  # judged: finalize sets both
        rec.bottleneck = bottleneck  # type: ignore[assignment]
        rec.predicted_samples_per_s = 40.0
    return rec


def test_a_ranks_figures_leave_the_first_round_out_of_its_latencies() -> None:
    # the first round (2 batches) waits 0.5 s and 0.3 s for start-up; then 10 ms, 30 ms, ...
    steady = [0.01, 0.03] * 10
    rec = _record(1, [0.5, 0.3, *steady], host="node-b", work_ms=25.0)
    f = rank_figures(rec)
    assert (f.rank, f.host, f.local_rank, f.samples) == (1, "node-b", 1, 88)
    # stall over the epoch's time: every wait but the first over first-to-last arrival
    wall = 21 * COMPUTE + 0.3 + sum(steady)
    assert f.wall_seconds == pytest.approx(wall)
    assert f.stall_fraction == pytest.approx((0.3 + sum(steady)) / wall)
    assert (f.ready_ms_p50, f.ready_ms_p95, f.ready_ms_p99) == pytest.approx((30.0, 30.0, 30.0))
    # arrival to arrival: the previous step's compute, then this wait
    assert f.step_ms == pytest.approx((COMPUTE + 0.02) * 1e3)
    assert f.worker_batch_ms_p50 == {"0": 25.0}
    assert f.bottleneck == "gpu"
    assert f.cpu_seconds_per_sample == 0.002


def test_an_unjudged_record_has_no_verdict_in_its_figures() -> None:
    assert rank_figures(_record(0, [0.1] * 5, bottleneck=None)).bottleneck is None


def test_the_exposed_wait_is_the_slowest_ranks_wait_step_by_step() -> None:
    # after the first round the ranks take turns waiting: 30 ms for rank 0, 50 ms for rank 1
    r0 = _record(0, [0.5, 0.2, 0.03, 0.0, 0.03, 0.0])
    r1 = _record(1, [0.5, 0.2, 0.0, 0.05, 0.0, 0.05])
    d = merge_ranks([r1, r0]).distributed
    assert d is not None
    assert d.steps_aligned == 4
    assert d.exposed_wait_seconds == pytest.approx(0.03 + 0.05 + 0.03 + 0.05)
    # the job's time over those steps: the longer rank's, compute before each wait
    assert d.exposed_fraction == pytest.approx(0.16 / (4 * COMPUTE + 0.10))


def test_only_the_steps_every_rank_logged_are_aligned() -> None:
    r0 = _record(0, [0.5, 0.2, 0.03, 0.0, 0.03, 0.0])
    r1 = _record(1, [0.5, 0.2, 0.0, 0.05, 0.0])  # its log stops a batch earlier
    d = merge_ranks([r0, r1]).distributed
    assert d is not None
    assert d.steps_aligned == 3
    assert d.exposed_wait_seconds == pytest.approx(0.03 + 0.05 + 0.03)


def test_merging_ranks_alike_keeps_the_lowest_ranks_record_and_every_ranks_figures() -> None:
    recs = [_record(r, [0.1] * 6, world=4, host=h) for r, h in ((2, "b"), (0, "a"), (1, "a"))]
    merged = merge_ranks(recs)
    assert merged is not recs[1] and merged.watch is recs[1].watch  # rank 0's, not copied
    d = merged.distributed
    assert d is not None
    assert (d.launcher, d.world_size, d.nodes, d.hosts) == ("torchrun", 4, 2, ["a", "b"])
    assert [(f.rank, f.node, f.read_bytes) for f in d.ranks] == [
        (0, 0, 0),
        (1, 0, 1000),
        (2, 1, 2000),
    ]
    assert d.missing_ranks == [3]


def test_a_rank_that_delivered_nothing_is_missing_not_an_error() -> None:
    recs = [_record(0, [0.1] * 6, world=3), _record(1, [], world=3), _record(2, [0.1] * 6, world=3)]
    d = merge_ranks(recs).distributed
    assert d is not None
    assert [f.rank for f in d.ranks] == [0, 2]
    assert d.missing_ranks == [1]


def test_the_base_is_the_lowest_rank_that_delivered() -> None:
    recs = [_record(0, [], world=3), _record(2, [0.1] * 6, world=3), _record(1, [0.1] * 6, world=3)]
    merged = merge_ranks(recs)
    assert merged.watch is recs[2].watch
    assert merged.distributed is not None and merged.distributed.missing_ranks == [0]


def test_a_restarted_rank_counts_by_its_record_that_delivered_most() -> None:
    short, full = _record(1, [0.1] * 4), _record(1, [0.2] * 8)
    d = merge_ranks([_record(0, [0.1] * 8), short, full]).distributed
    assert d is not None
    assert [(f.rank, f.samples) for f in d.ranks] == [(0, 32), (1, 32)]


def test_a_single_record_comes_back_unchanged() -> None:
    rec = _record(0, [0.1] * 6)
    assert merge_ranks([rec]) is rec
    assert rank_spread(rec) is None
    alone = _record(0, [0.1] * 6)
    assert alone.watch is not None
    alone.watch.rank = None
    assert merge_ranks([alone]) is alone


def test_records_without_a_rank_are_not_merged_with_others() -> None:
    alone = _record(0, [0.1] * 6)
    assert alone.watch is not None
    alone.watch.rank = None
    with pytest.raises(ValueError, match="without a rank"):
        merge_ranks([alone, _record(1, [0.1] * 6)])
    with pytest.raises(ValueError):
        merge_ranks([])


def _merged(figures: list[RankFigures], hosts: list[str], exposed: float = 0.3) -> RunRecord:
    rec = RunRecord(kind="watch", host=HostInfo(), dataset=DatasetProfile("d"))
    rec.distributed = Distributed(
        launcher="torchrun",
        world_size=len(figures),
        nodes=len(hosts),
        hosts=hosts,
        ranks=figures,
        exposed_wait_seconds=3.0,
        exposed_fraction=exposed,
    )
    return rec


def _fig(rank: int, stall: float, host: str = "a", **kw: object) -> RankFigures:
    base: dict[str, object] = {
        "cpu_seconds_per_sample": 0.01,
        "bottleneck": "gpu",
        "usable_cores": 8,
        "ready_ms_p99": 10.0 + rank,
    }
    base.update(kw)
    return RankFigures(rank=rank, host=host, stall_fraction=stall, **base)  # type: ignore[arg-type]


def test_a_cpu_bound_rank_far_above_the_others_is_the_straggler() -> None:
    ranks = [
        _fig(0, 0.02),
        _fig(1, 0.03),
        _fig(2, 0.43, "b", cpu_seconds_per_sample=0.031, bottleneck="cpu"),
        _fig(3, 0.02, "b"),
    ]
    s = rank_spread(_merged(ranks, ["a", "b"], exposed=0.38))
    assert s is not None
    assert (s.ranks, s.stall_min, s.stall_max) == (4, 0.02, 0.43)
    assert s.stall_median == pytest.approx(0.025)
    assert (s.ready_p99_median_ms, s.ready_p99_max_ms) == (11.5, 13.0)
    (st,) = s.stragglers
    assert (st.rank, st.host, st.stall_fraction, st.median_stall, st.cause) == (
        2,
        "b",
        0.43,
        0.02,
        "cpu",
    )
    assert "3.1x the median rank's CPU time" in st.evidence
    assert s.text.startswith("rank 2 (b) stalls 43% against a median of 2%: its CPU (")
    assert s.text.endswith("the job loses 38% of its time to the slowest rank's data")
    assert s.exposed_fraction == 0.38 and s.exposed_wait_seconds == 3.0


def test_a_storage_bound_straggler_is_set_against_the_median_ranks_storage() -> None:
    ranks = [
        _fig(0, 0.02, storage_samples_per_s=400.0),
        _fig(1, 0.30, bottleneck="storage", storage_samples_per_s=100.0),
        _fig(2, 0.01, storage_samples_per_s=400.0),
    ]
    s = rank_spread(_merged(ranks, ["a"]))
    assert s is not None
    (st,) = s.stragglers
    assert (st.rank, st.cause) == (1, "storage")
    assert "100 samples/s against the median rank's 400" in st.evidence


def test_every_rank_of_one_host_straggling_is_that_nodes_fault() -> None:
    ranks = [_fig(0, 0.02), _fig(1, 0.02), _fig(2, 0.40, "b"), _fig(3, 0.42, "b")]
    s = rank_spread(_merged(ranks, ["a", "b"]))
    assert s is not None
    assert [(st.rank, st.cause) for st in s.stragglers] == [(3, "node"), (2, "node")]
    assert "every rank on b (2, 3) stalls" in s.stragglers[0].evidence


def test_a_slow_nodes_mate_waiting_in_the_collective_still_makes_it_the_nodes_fault() -> None:
    # two ranks share node b's capped link: in a synchronous job only the slower waits on its
    # loader; its mate reads as slowly and waits in the all-reduce for it
    fast = {"storage_samples_per_s": 550.0, "read_bytes_per_s": 70.9e6}
    slow = {"storage_samples_per_s": 7.7, "read_bytes_per_s": 0.99e6, "bottleneck": "storage"}
    ranks = [_fig(0, 0.01, **fast), _fig(1, 0.01, **fast), _fig(2, 0.03, "b", **slow)]
    ranks.append(_fig(3, 0.83, "b", **slow))
    s = rank_spread(_merged(ranks, ["a", "b"]))
    assert s is not None
    assert [(st.rank, st.cause) for st in s.stragglers] == [(3, "node")]
    assert s.stragglers[0].evidence == (
        "every rank on b is slow against the other hosts': rank 2 reads 990 kB/s against "
        "the median rank's 70.9 MB/s; rank 3 stalls"
    )
    # a mate that reads as fast as the other hosts leaves the straggler its own cause
    ranks[2] = _fig(2, 0.03, "b", **fast)
    s = rank_spread(_merged(ranks, ["a", "b"]))
    assert s is not None and [(st.rank, st.cause) for st in s.stragglers] == [(3, "storage")]


def test_a_mate_that_reads_gpu_bound_beside_a_straggler_is_shown_waiting_on_it() -> None:
    # its step holds the all-reduce's wait for rank 3: its GPU stage is rank 3's pace
    ranks = [_fig(0, 0.01), _fig(1, 0.01, bottleneck="cpu"), _fig(2, 0.03, "b")]
    ranks.append(_fig(3, 0.83, "b", bottleneck="storage", storage_samples_per_s=7.7))
    s = rank_spread(_merged(ranks, ["a", "b"]))
    assert s is not None
    assert [rank_verdict(f, s) for f in ranks] == [
        "waits on rank 3",
        "cpu",  # its own loader's limit: not the collective's
        "waits on rank 3",
        "storage",
    ]
    # with no straggler, a rank's own verdict stands
    even = [_fig(0, 0.01), _fig(1, 0.012)]
    s = rank_spread(_merged(even, ["a"]))
    assert s is not None and not s.stragglers
    assert [rank_verdict(f, s) for f in even] == ["gpu", "gpu"]
    assert rank_verdict(_fig(0, 0.01, bottleneck=None), s) == "-"


def test_one_rank_per_host_is_not_enough_to_blame_the_node() -> None:
    ranks = [_fig(0, 0.02, "a"), _fig(1, 0.40, "b"), _fig(2, 0.02, "c")]
    s = rank_spread(_merged(ranks, ["a", "b", "c"]))
    assert s is not None
    assert [(st.rank, st.cause) for st in s.stragglers] == [(1, "unknown")]
    assert "its loader's own verdict is gpu" in s.stragglers[0].evidence


def test_without_a_verdict_the_evidence_names_the_cause() -> None:
    ranks = [_fig(0, 0.02), _fig(1, 0.5, bottleneck=None, cpu_seconds_per_sample=0.02)]
    s = rank_spread(_merged(ranks, ["a"]))
    assert s is not None
    assert [(st.rank, st.cause) for st in s.stragglers] == [(1, "cpu")]


@pytest.mark.parametrize(
    ("stalls", "flagged"),
    [
        ([0.02, 0.06], []),  # 4 points above: within the 5-point margin
        ([0.02, 0.08], [1]),  # 6 points above, and 4x
        ([0.30, 0.40], []),  # 10 points above, but not twice as much
        ([0.30, 0.33, 0.31, 0.35], []),  # all waiting alike: no straggler
        ([0.0, 0.0, 0.0, 0.06], [3]),
    ],
)
def test_the_straggler_threshold(stalls: list[float], flagged: list[int]) -> None:
    s = rank_spread(_merged([_fig(r, v) for r, v in enumerate(stalls)], ["a"]))
    assert s is not None
    assert [st.rank for st in s.stragglers] == flagged


def test_no_straggler_says_how_the_ranks_spread() -> None:
    s = rank_spread(_merged([_fig(0, 0.30), _fig(1, 0.35)], ["a"], exposed=0.36))
    assert s is not None
    assert s.text == (
        "no straggler: 2 ranks stall 30% to 35% (median 32%); "
        "the job loses 36% of its time to the slowest rank's data"
    )


def test_fewer_than_two_ranks_with_loader_figures_have_no_spread() -> None:
    assert rank_spread(_merged([_fig(0, 0.3), RankFigures(rank=1)], ["a"])) is None
    assert (
        rank_spread(RunRecord(kind="watch", host=HostInfo(), dataset=DatasetProfile("d"))) is None
    )


def test_the_merged_record_survives_a_save_and_load(tmp_path: Path) -> None:
    recs = [
        _record(0, [0.5, 0.2] + [0.0] * 20, world=3),
        _record(1, [0.5, 0.2] + [0.08] * 20, world=3, cpu_s=0.02, bottleneck="cpu"),
    ]
    merged = merge_ranks(recs)
    merged.save(tmp_path / "run.json")
    back = RunRecord.load(tmp_path / "run.json")
    assert back.distributed == merged.distributed
    assert back.distributed is not None and back.distributed.missing_ranks == [2]
    assert rank_spread(back) == rank_spread(merged)
    s = rank_spread(back)
    assert s is not None and [(st.rank, st.cause) for st in s.stragglers] == [(1, "cpu")]
    # every step costs rank 1's 80 ms wait
    assert back.distributed.exposed_fraction == pytest.approx(0.08 / (COMPUTE + 0.08))


def _job(slow_wait: float = 0.2) -> list[RunRecord]:
    """A job of two ranks on one host: rank 0's loader (400 samples/s of CPU) outruns its
    step (the GPU's 40), rank 1's one worker spends 40 ms of CPU per sample (25/s) and waits
    ``slow_wait`` for each batch. Each record judged by itself, as each rank's would be."""
    fast = _record(0, [0.5, 0.2] + [0.001] * 20, cpu_s=0.0025, bottleneck="gpu")
    slow = _record(1, [0.5, 0.2] + [slow_wait] * 20, cpu_s=0.04, bottleneck="cpu")
    fast.stages.cpu.capacity_samples_per_s, slow.stages.cpu.capacity_samples_per_s = 400.0, 25.0
    for rec in (fast, slow):
        rec.stages.cpu.usable_cores = 8
        rec.stages.gpu.capacity_samples_per_s = 40.0
    return [fast, slow]


def test_the_job_is_judged_by_its_straggler_with_each_ranks_verdict_kept() -> None:
    fast, slow = _job()
    merged = merge_ranks([fast, slow])
    d = merged.distributed
    assert d is not None and d.verdict_rank == 1
    assert merged.watch is slow.watch and merged.stages is slow.stages  # rank 1's record
    assert [(f.rank, f.bottleneck) for f in d.ranks] == [(0, "gpu"), (1, "cpu")]
    job = finalize(merged)
    # the job's verdict: rank 1's CPU at 25/s, not rank 0's GPU at 40/s
    assert (job.bottleneck, job.predicted_samples_per_s) == ("cpu", 25.0)
    # and its advice speeds rank 1: a second worker (50/s of CPU, capped by the GPU's 40)
    top = job.recommendations[0]
    assert top.kind == "num_workers" and top.change is not None and top.change.workers == 2
    assert top.predicted_samples_per_s == pytest.approx(40.0)
    assert "prefetch_factor" not in [r.kind for r in job.recommendations]
    spread = rank_spread(job)
    assert spread is not None
    assert spread.text.endswith(
        "the job's verdict, stages and advice are rank 1's, the rank it waits for; each "
        "rank's own verdict is in its row"
    )
    # merged in any order: the same record stands for the job
    assert merge_ranks([slow, fast]).watch is slow.watch


def test_ranks_alike_are_judged_by_the_lowest() -> None:
    fast, slow = _job(slow_wait=0.001)  # rank 1 stalls no more than rank 0
    assert slowest_rank([rank_figures(fast), rank_figures(slow)]) is None
    merged = merge_ranks([slow, fast])
    assert merged.watch is fast.watch
    assert merged.distributed is not None and merged.distributed.verdict_rank == 0
    spread = rank_spread(merged)
    assert spread is not None and "the rank it waits for" not in spread.text


def test_a_merged_record_from_before_the_verdict_rank_loads(tmp_path: Path) -> None:
    merged = merge_ranks(_job())
    data = merged.to_json()
    del data["distributed"]["verdict_rank"]
    back = RunRecord.from_json(data)
    assert back.distributed is not None and back.distributed.verdict_rank is None
    # it names no rank as the job's: it was made when the lowest stood for the job
    spread = rank_spread(back)
    assert spread is not None and "the rank it waits for" not in spread.text


@pytest.mark.parametrize("env", [{}, {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}])
def test_gather_outside_a_job_or_in_a_world_of_one_returns_the_record(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    from ioprobe.loaders.gather import gather

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_STEP_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rec = _record(0, [0.1] * 6)
    assert gather(rec, merge=merge_ranks) is rec

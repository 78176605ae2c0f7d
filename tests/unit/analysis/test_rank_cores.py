"""The cores one rank of a distributed job can have: its host's cores over the job's ranks on
that host, the other ranks' workers counted as the job's own load, not a foreign one; and the
worker advice's reason, which must be one the record shows. Records built by hand."""

from __future__ import annotations

from ioprobe import capacity
from ioprobe.analysis import finalize
from ioprobe.analysis.scenario import evaluate, ranks_on_host, recorded_cores
from ioprobe.record import Change, Distributed, RankFigures, RankInfo, RunRecord
from tests.unit.analysis.test_whatif import probe_record, watch_record


def _rank(rec: RunRecord, local_world: int | None = 2, host: str = "h") -> RunRecord:
    """``rec`` as rank 0 of a torchrun job with ``local_world`` ranks on its host."""
    assert rec.watch is not None
    rec.host.hostname = host
    rec.watch.rank = RankInfo(
        launcher="torchrun", rank=0, world_size=4, local_world_size=local_world
    )
    return rec


def _kinds(rec: RunRecord) -> list[str]:
    return [r.kind for r in rec.recommendations]


def test_a_ranks_cores_are_its_share_of_the_host() -> None:
    rec = watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=8)
    assert (ranks_on_host(rec), recorded_cores(rec)) == (1, 8.0)
    assert recorded_cores(_rank(rec, local_world=2)) == 4.0
    assert recorded_cores(_rank(rec, local_world=3)) == 8.0 / 3


def test_ranks_pinned_to_cores_of_their_own_keep_them_and_a_quota_is_shared() -> None:
    # srun --cpu-bind=cores: 2 ranks, each pinned to 4 of the 8 cores, each may use its 4
    rec = _rank(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=4))
    assert rec.watch is not None and rec.watch.rank is not None
    rec.watch.rank.core_share = 4.0
    assert recorded_cores(rec) == 4.0  # not 4 / 2 again
    rec.watch.rank.core_share = 2.5  # three of its cores shared with the other rank
    assert recorded_cores(rec) == 2.5
    # a CPU quota is the ranks' together whatever their sets: shared by count
    rec.host.cpu_quota_cores = 4.0
    assert recorded_cores(rec) == 2.0


def test_without_the_launchers_count_the_merged_records_ranks_on_the_host_count() -> None:
    rec = _rank(watch_record(cores=8), local_world=None, host="a")
    assert ranks_on_host(rec) == 1  # a rank's own record, and no count from its launcher
    rec.distributed = Distributed(
        launcher="torchrun",
        world_size=4,
        nodes=2,
        hosts=["a", "b"],
        ranks=[RankFigures(rank=r, host=h) for r, h in enumerate("aaab")],
    )
    assert (ranks_on_host(rec), recorded_cores(rec)) == (3, 8.0 / 3)


def test_a_probe_keeps_every_core() -> None:
    # a distributed probe's CPU stage already sums its ranks' cores
    assert ranks_on_host(probe_record()) == 1


def test_ranks_alike_are_no_foreign_load_to_each_other() -> None:
    # 2 ranks x 2 busy workers on 2 cores: each worker ran half the time and waited the other
    # half for a core. On the rank's 1 core its own 2 workers explain that wait: no one else's
    rec = _rank(watch_record(cpu_s=0.01, workers=2, storage=None, gpu=1000.0, cores=2))
    assert rec.watch is not None
    ep = rec.watch.epochs[0]
    ep.sample_cpu_seconds, ep.runqueue_seconds = 10.0, 10.0
    mine = capacity.cpu_context(rec.watch.epochs, 2, recorded_cores(rec))
    assert mine.contention == 0.0
    # taking the whole host for the rank's own calls the other rank's 2 workers foreign
    assert capacity.cpu_context(rec.watch.epochs, 2, 2.0).contention == 2.0


def test_two_ranks_with_a_worker_each_on_two_cores_are_advised_no_more_workers() -> None:
    # 10 ms of CPU per sample, 1 worker per rank, 2 ranks on 2 cores: each worker has a core
    # and there is none to spare. Alone on the host, a second worker would double the rate.
    alone = finalize(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=2))
    assert "num_workers" in _kinds(alone)
    rec = finalize(_rank(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=2)))
    assert rec.bottleneck == "cpu"
    assert "num_workers" not in _kinds(rec)
    for w in (2, 4):
        assert evaluate(rec, Change(workers=w)).predicted_samples_per_s == 100.0
    # what does speed it is more cores for every rank, and the advice says how they share
    (more,) = [r for r in rec.recommendations if r.kind == "more_cpu"]
    assert "each of the host's 2 ranks gets 1 of its 2" in more.text


def test_worker_advice_on_a_contended_host_gives_the_contention_as_its_reason() -> None:
    # storage never blocked the workers (no storage stage), but they waited for a core as
    # long as they ran: with 1 worker on 2 cores, 3 other threads were runnable
    rec = watch_record(cpu_s=0.01, workers=1, storage=None, gpu=1000.0, cores=2)
    assert rec.watch is not None
    ep = rec.watch.epochs[0]
    ep.sample_cpu_seconds, ep.runqueue_seconds = 10.0, 10.0
    out = finalize(rec)
    (r,) = [r for r in out.recommendations if r.kind == "num_workers"]
    assert r.change is not None and r.change.workers is not None and r.change.workers > 2
    assert "blocked on reads" not in r.text
    assert "storage never blocked them, but about 3.0 other runnable threads share" in r.text


def test_worker_advice_for_workers_blocked_on_reads_says_so() -> None:
    rec = finalize(watch_record(cpu_s=0.001, workers=1, storage=40.0, gpu=400.0, cores=2))
    (r,) = [r for r in rec.recommendations if r.kind == "num_workers"]
    assert "blocked on reads" in r.text and "storage never blocked" not in r.text

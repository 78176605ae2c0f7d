"""`ioprobe run -- torchrun ...` on a data-parallel job: one record for the whole job, the
straggler named with its cause, and the wait it exposes to every rank against the truth the
job was built with (tests/fixtures/ddp_train.py, gloo on 127.0.0.1)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread
from ioprobe.analysis.scenario import evaluate, recorded_cores
from ioprobe.record import Change, RunRecord
from tests.support.cli import REPO, run_cli, watched_and_plain

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

# Rank 1's samples burn BURN_MS of CPU each in its one worker, so it delivers a batch every
# BATCH * BURN_MS / WORKERS ms; each step computes for COMPUTE_MS, then all ranks meet in an
# all_reduce. Rank 1 waits PERIOD - COMPUTE_MS for each batch, and every rank with it.
STEPS, BATCH, WORKERS, BURN_MS, COMPUTE_MS = 20, 4, 1, 50.0, 40.0
PERIOD_MS = BATCH * BURN_MS / WORKERS
EXPOSED_TRUTH = (PERIOD_MS - COMPUTE_MS) / PERIOD_MS


def _torchrun(nproc: int, *args: object) -> list[str]:
    launcher = Path(sys.executable).with_name("torchrun")
    head = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "torch.distributed.run"]
    return [
        *head,
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "tests/fixtures/ddp_train.py",
        *(str(a) for a in args),
    ]


# 15 s on 2 cores: in `make validate`, beside the two-node watch's stragglers in the default run
@pytest.mark.long
def test_the_rank_with_a_slow_loader_is_named_with_its_cause_and_exposed_wait(
    tmp_path: Path,
) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    out = tmp_path / "run.json"
    cmd = _torchrun(2, STEPS, BATCH, WORKERS, BURN_MS, COMPUTE_MS)
    watched, plain = watched_and_plain(out, *cmd)
    # the job trained the same: rank 0's checksum of its weights and losses
    assert watched.stdout == plain.stdout
    assert f"steps {STEPS} weights" in watched.stdout
    # one summary for the job, not one per rank
    assert watched.stderr.count("ioprobe watch") == 1, watched.stderr
    assert "loader 1 of" not in watched.stderr
    rec = RunRecord.load(out)
    # the job runs at its straggler's pace: the merged record is rank 1's, not rank 0's
    assert rec.watch is not None and rec.watch.rank is not None and rec.watch.rank.rank == 1
    d = rec.distributed
    assert d is not None
    assert (d.launcher, d.world_size, d.nodes, d.missing_ranks) == ("torchrun", 2, 1, [])
    assert d.verdict_rank == 1 and rec.bottleneck == "cpu"
    assert [f.rank for f in d.ranks] == [0, 1]
    for f in d.ranks:
        assert f.samples == STEPS * BATCH
        assert f.ready_ms_p99 is not None and f.stall_fraction is not None
        assert set(f.worker_batch_ms_p50) == {"0"}
        # synchronous steps: every rank steps at the slow rank's pace
        assert f.step_ms == pytest.approx(PERIOD_MS, rel=0.15)
    slow = d.ranks[1]
    assert slow.worker_batch_ms_p50["0"] == pytest.approx(PERIOD_MS, rel=0.15)
    assert slow.ready_ms_p50 == pytest.approx(PERIOD_MS - COMPUTE_MS, rel=0.15)
    assert slow.bottleneck == "cpu"
    spread = rank_spread(rec)
    assert spread is not None
    assert [(s.rank, s.cause) for s in spread.stragglers] == [(1, "cpu")]
    assert "rank 1" in spread.text and "its CPU" in spread.text
    assert d.exposed_fraction == pytest.approx(EXPOSED_TRUTH, rel=0.15)
    assert d.steps_aligned == STEPS - WORKERS * 2  # each epoch's first round left out


# Both ranks' loaders cost CPU, rank 1's four times rank 0's: rank 0 alone delivers a batch
# every BATCH * 5 ms = 20 ms, well inside its 40 ms step (its own verdict: not the CPU); rank
# 1 every 80 ms, so every synchronous step takes 80 ms and the job is CPU-bound on rank 1.
# Rank 1's own step is its 40 ms and the all_reduce, where it waits for rank 0 only when rank
# 0 runs late: at 60 ms a batch (1.5 times the step) one late rank 0 on a busy 2-core host
# once made rank 1's steps look as slow as its loader; at 80 ms there is twice the room.
SLOW_BURN_MS, FAST_BURN_MS = 20.0, 5.0
SLOW_PERIOD_MS = BATCH * SLOW_BURN_MS


def test_the_jobs_verdict_and_advice_are_the_stragglers(tmp_path: Path) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    out = tmp_path / "run.json"
    cmd = _torchrun(2, 24, BATCH, 1, SLOW_BURN_MS, COMPUTE_MS, 1, "cpu", FAST_BURN_MS)
    proc = run_cli("run", "--json", str(out), "--", *cmd, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rec = RunRecord.load(out)
    d = rec.distributed
    assert d is not None and [f.rank for f in d.ranks] == [0, 1]
    fast, slow = d.ranks
    # each rank's own verdict stays in its figures: rank 0's loader had time to spare
    assert slow.bottleneck == "cpu" and fast.bottleneck != "cpu"
    assert [s.rank for s in (rank_spread(rec) or pytest.fail("no spread")).stragglers] == [1]
    # the job's: rank 1's record, its CPU stage (BATCH samples of SLOW_BURN_MS per period)
    assert d.verdict_rank == 1 and rec.bottleneck == "cpu"
    assert rec.stages.cpu.cpu_seconds_per_sample == pytest.approx(SLOW_BURN_MS / 1e3, rel=0.15)
    # one worker on at most one core: never above its one-core rate, and near what it measured
    assert rec.predicted_samples_per_s <= 1e3 / SLOW_BURN_MS * 1.1
    assert rec.predicted_samples_per_s == pytest.approx(rec.measured_samples_per_s, rel=0.2)
    # the top advice speeds rank 1's loader (more workers or cores for its CPU work), not
    # rank 0's prefetch
    assert rec.recommendations, proc.stderr
    top = rec.recommendations[0]
    assert top.kind in ("num_workers", "more_cpu"), [r.kind for r in rec.recommendations]
    assert not any(r.kind == "prefetch_factor" for r in rec.recommendations)
    assert "rank 1's, the rank it waits for" in " ".join(proc.stderr.split())


# Two ranks alike on one host, each with one loader worker whose samples burn SHARED_BURN_MS:
# each worker keeps a core busy, so together they use the whole of a 2-core host. A rank's
# workers can have the host's cores over its 2 ranks; the other rank's worker is the job's.
SHARED_BURN_MS, SHARED_COMPUTE_MS = 20.0, 5.0
PAIRS = 3


def _shared_run(tmp_path: Path, workers: int) -> RunRecord:
    out = tmp_path / f"w{workers}.json"
    cmd = _torchrun(
        2, 24, BATCH, workers, SHARED_BURN_MS, SHARED_COMPUTE_MS, 1, "cpu", SHARED_BURN_MS
    )
    proc = run_cli("run", "--json", str(out), "--", *cmd, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return RunRecord.load(out)


# 15-35 s of reruns on 2 cores: in `make validate`, so the default run keeps to 15 minutes
@pytest.mark.long
def test_ranks_sharing_a_host_share_its_cores_and_the_advice_holds_on_a_rerun(
    tmp_path: Path,
) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    predicted: list[float] = []
    rerun: list[float] = []
    # paired runs, interleaved: the host's other load drifts, and medians of pairs run side
    # by side hold where a single pair may not
    for _ in range(PAIRS):
        rec = _shared_run(tmp_path, 1)
        assert rec.distributed is not None and rec.host.usable_cores is not None
        # every rank on this host: each has half its cores, not all of them
        assert recorded_cores(rec) == pytest.approx(rec.host.usable_cores / 2)
        for r in rec.recommendations:
            if r.kind == "num_workers":
                assert r.change is not None and r.change.workers is not None
                assert r.change.workers <= 2 * recorded_cores(rec), r.text
                assert "blocked on reads" not in r.text  # storage never blocked them
        predicted.append(evaluate(rec, Change(workers=2)).predicted_samples_per_s)
        again = _shared_run(tmp_path, 2).measured_samples_per_s
        assert again is not None
        rerun.append(again)
    # each pair's error, its two runs side by side; the median pair's within 15%
    errors = [p / r - 1 for p, r in zip(predicted, rerun, strict=True)]
    assert abs(statistics.median(errors)) <= 0.15, list(zip(predicted, rerun, strict=True))


def test_a_one_rank_world_records_as_a_run_without_a_launcher(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    watched, plain = watched_and_plain(out, *_torchrun(1, 6, BATCH, 1, 0, 0))
    assert watched.stdout == plain.stdout
    assert watched.stderr.count("ioprobe watch") == 1, watched.stderr
    rec = RunRecord.load(out)
    assert rec.watch is not None and rec.watch.rank is None
    assert rec.distributed is None
    assert sum(e.samples for e in rec.watch.epochs) == 6 * BATCH


GATHER_SCRIPT = """\
import os, sys, time
import torch.distributed as dist
from torch.utils.data import DataLoader
import ioprobe
from ioprobe.analysis.ranks import merge_ranks
from ioprobe.loaders.gather import gather
from tests.fixtures.ddp_train import RankData

rank = int(os.environ["RANK"])
user_group = sys.argv[2] == "user"
if user_group:
    dist.init_process_group("gloo")
loader = ioprobe.watch(
    DataLoader(RankData(48, rank, 0.02 if rank == 1 else 0.0), batch_size=4, num_workers=1)
)
for x, _ in loader:
    time.sleep(0.02)
    if user_group:
        dist.all_reduce(x)
rec = gather(loader.run, merge=merge_ranks, timeout_s=30)
print(f"rank {rank}: {'merged' if rec is not None else 'none'}", flush=True)
if rec is not None:
    rec.save(sys.argv[1])
if user_group:
    dist.barrier()  # the user's group still works
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("group", ["user", "own"])
def test_gather_brings_every_ranks_record_to_rank_zero(tmp_path: Path, group: str) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    script = tmp_path / "gather_script.py"
    script.write_text(GATHER_SCRIPT)
    out = tmp_path / "job.json"
    cmd = _torchrun(2)
    cmd[-1] = str(script)
    proc = subprocess.run(
        [*cmd, str(out), group],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    said = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert said == ["rank 0: merged", "rank 1: none"]
    rec = RunRecord.load(out)
    assert rec.distributed is not None
    assert [f.rank for f in rec.distributed.ranks] == [0, 1]
    spread = rank_spread(rec)
    assert spread is not None
    assert [(s.rank, s.cause) for s in spread.stragglers] == [(1, "cpu")]
    # torchrun leaves both ranks on every core: each rank's share is half the host's
    assert rec.watch is not None and rec.watch.rank is not None
    assert rec.watch.rank.core_share == pytest.approx(len(os.sched_getaffinity(0)) / 2)

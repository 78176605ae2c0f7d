"""`ioprobe run -- torchrun ...` on a data-parallel job: one record for the whole job, the
straggler named with its cause, and the wait it exposes to every rank against the truth the
job was built with (tests/fixtures/ddp_train.py, gloo on 127.0.0.1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread
from ioprobe.record import RunRecord
from tests.integration.cli import REPO, watched_and_plain

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
    assert rec.watch is not None and rec.watch.rank is not None and rec.watch.rank.rank == 0
    d = rec.distributed
    assert d is not None
    assert (d.launcher, d.world_size, d.nodes, d.missing_ranks) == ("torchrun", 2, 1, [])
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
from ioprobe.watch.gather import gather
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

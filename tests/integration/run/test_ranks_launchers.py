"""`ioprobe run` around data-parallel jobs whose launcher is not torchrun: Lightning's own DDP
launcher (which sets no RANK), `accelerate launch`, and ranks spawned by
`torch.multiprocessing` that only their process group knows. Each writes one record for the
whole job with both ranks, names the rank made slow by construction (its samples burn
BURN_MS of CPU each, the other's nothing) with its cause, and trains exactly as unwatched:
the same exit code, the same weights and losses (tests/fixtures/lightning_ddp.py,
accelerate_ddp.py, spawn_ddp.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread
from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli, watched_and_plain

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

# each step waits for rank 1's batch of BATCH samples burning BURN_MS each in its one worker
STEPS, BATCH, BURN_MS, COMPUTE_MS = 16, 4, 25.0, 20.0
PERIOD_MS = BATCH * BURN_MS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _printed(stdout: str) -> dict[str, object]:
    """What the job's main process printed: its one JSON line (libraries may print more)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, stdout
    result: dict[str, object] = json.loads(lines[0])
    return result


def _assert_one_merged_record(out: Path, stderr: str, launcher: str, samples: int) -> None:
    # one summary, one record: the ranks were not reported as unrelated loaders
    assert stderr.count("ioprobe watch") == 1, stderr
    assert not out.with_suffix(".loader2.json").exists()
    rec = RunRecord.load(out)
    d = rec.distributed
    assert d is not None, rec.notes
    assert (d.launcher, d.world_size, d.nodes, d.missing_ranks) == (launcher, 2, 1, [])
    assert [f.rank for f in d.ranks] == [0, 1]
    assert [f.samples for f in d.ranks] == [samples, samples]
    fast, slow = d.ranks
    # the job runs at its straggler's pace: its verdict is rank 1's, rank 1's CPU
    assert d.verdict_rank == 1 and rec.bottleneck == "cpu"
    assert rec.watch is not None and rec.watch.rank is not None and rec.watch.rank.rank == 1
    assert rec.stages.cpu.cpu_seconds_per_sample == pytest.approx(BURN_MS / 1e3, rel=0.15)
    assert slow.bottleneck == "cpu" and fast.bottleneck != "cpu"
    spread = rank_spread(rec)
    assert spread is not None
    assert [(s.rank, s.cause) for s in spread.stragglers] == [(1, "cpu")]
    # the slow rank waits for its batches, the fast one barely: each its own stall
    assert slow.stall_fraction is not None and fast.stall_fraction is not None
    assert slow.stall_fraction > 0.4 > fast.stall_fraction
    # synchronous steps: both ranks step together, no faster than rank 1's loader feeds it
    assert fast.step_ms is not None and slow.step_ms is not None
    assert fast.step_ms == pytest.approx(slow.step_ms, rel=0.2)
    assert slow.step_ms >= PERIOD_MS * 0.9


# 15 s on 2 cores: in `make validate`, beside the two-node watch's stragglers in the default run
@pytest.mark.long
def test_lightning_ddp_on_two_cpu_processes_is_one_job_with_its_slow_rank_named(
    tmp_path: Path,
) -> None:
    pytest.importorskip("lightning")
    out = tmp_path / "run.json"
    cmd = [sys.executable, "tests/fixtures/lightning_ddp.py", STEPS, BATCH, BURN_MS, COMPUTE_MS]
    watched, plain = watched_and_plain(out, *map(str, cmd))
    trained = _printed(watched.stdout)
    assert trained == _printed(plain.stdout)
    assert len(trained["losses"]) == STEPS  # type: ignore[arg-type]
    _assert_one_merged_record(out, watched.stderr, "lightning", STEPS * BATCH)


def _accelerate(*args: object) -> list[str]:
    launcher = Path(sys.executable).with_name("accelerate")
    if not launcher.exists():
        pytest.skip("no accelerate command beside this interpreter")
    quiet = ("--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no")
    return [str(launcher), "launch", *quiet, *map(str, args)]


def _accelerate_job(tmp_path: Path, *launch: object) -> tuple[dict[str, object], RunRecord, str]:
    """The Accelerate job run plain and under ioprobe run, each at a port of its own (a
    second store at the first's port may find it not yet free): what its main process
    printed, the record, ioprobe's stderr."""
    pytest.importorskip("accelerate")
    out = tmp_path / "run.json"
    job = ("tests/fixtures/accelerate_ddp.py", STEPS, BATCH, BURN_MS, COMPUTE_MS)
    plain_cmd = _accelerate(*launch, "--main_process_port", _free_port(), *job)
    watched_cmd = _accelerate(*launch, "--main_process_port", _free_port(), *job)
    watched, plain = _run_pair(out, plain_cmd, watched_cmd)
    assert _printed(watched.stdout) == _printed(plain.stdout)
    return _printed(watched.stdout), RunRecord.load(out), watched.stderr


def _run_pair(
    out: Path, plain_cmd: list[str], watched_cmd: list[str]
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``plain_cmd`` as the user runs it, then ``watched_cmd`` under ``ioprobe run --json
    out`` (``watched_and_plain`` with a command for each run); each must succeed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = subprocess.run(
        plain_cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )
    assert plain.returncode == 0, plain.stderr
    watched = run_cli("run", "--json", str(out), "--", *watched_cmd, timeout=180)
    assert watched.returncode == 0, watched.stderr
    return watched, plain


# 15 s on 2 cores: in `make validate`, beside its --cpu case; the default run keeps a real
# prepared loader training as unwatched (test_accelerate_real.py) and the other launchers
@pytest.mark.long
def test_accelerate_launch_of_two_processes_is_one_job_with_its_slow_rank_named(
    tmp_path: Path,
) -> None:
    # on a host without GPUs, --multi_gpu starts the processes (through torchrun's agent) and
    # Accelerator(cpu=True) runs them over gloo on the CPU
    printed, _, stderr = _accelerate_job(tmp_path, "--multi_gpu", "--num_processes", 2)
    assert printed["processes"] == 2
    _assert_one_merged_record(tmp_path / "run.json", stderr, "torchrun", STEPS * BATCH)


# accelerate's own behaviour (--cpu starts one process whatever --num_processes says),
# checked where the docs state it: `make validate` runs it
@pytest.mark.long
def test_accelerate_launch_cpu_starts_one_process_and_records_it_alone(tmp_path: Path) -> None:
    # --cpu with --num_processes 2 and no --mpirun_hostfile: Accelerate's simple launcher
    # runs the script once, a world of one process, which must read as no distributed job
    printed, rec, stderr = _accelerate_job(tmp_path, "--cpu", "--num_processes", 2)
    assert printed["processes"] == 1
    assert stderr.count("ioprobe watch") == 1, stderr
    assert rec.distributed is None and rec.watch is not None and rec.watch.rank is None
    assert sum(e.samples for e in rec.watch.epochs) == STEPS * BATCH


# 16 s on 2 cores: in `make validate`; the default run keeps torchrun's and Lightning's
# launchers, and the process group's own answer is unit-tested (test_distributed_env.py)
@pytest.mark.long
def test_spawned_ranks_only_their_process_group_knows_are_one_job(tmp_path: Path) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    out = tmp_path / "run.json"
    job = ("tests/fixtures/spawn_ddp.py", STEPS, BATCH, BURN_MS, COMPUTE_MS)
    plain_cmd = [sys.executable, job[0], str(_free_port()), *map(str, job[1:])]
    watched_cmd = [sys.executable, job[0], str(_free_port()), *map(str, job[1:])]
    watched, plain = _run_pair(out, plain_cmd, watched_cmd)
    assert _printed(watched.stdout) == _printed(plain.stdout)
    # no launcher variable named the ranks, and each destroyed its group before its record
    # was made: the rank is the one its group gave as its loader began
    _assert_one_merged_record(out, watched.stderr, "torch.distributed", STEPS * BATCH)

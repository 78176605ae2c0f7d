"""The command line on a real CUDA device: ``ioprobe run`` of an unchanged CUDA training
script, its live panel on a terminal, and data-parallel jobs whose ranks share the one GPU.

Each truth is built on the device: kernels that spin the GPU for a known time
(``torch.cuda._sleep``), loader workers that burn a known CPU time per sample, and the batch
period the script itself measures on the host's clock after draining the GPU. These run only
where torch sees a CUDA device (``make gpu-check``); tests/integration/watch/test_watch_device.py
and test_ddp_watch.py run the same paths on the CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread
from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli, run_cli_on_terminal

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SCRIPT = (sys.executable, "-m", "tests.fixtures.cuda_train")
# a 10 ms kernel per batch of 8; two workers burning 5 ms per sample deliver a batch every
# 20 ms: the GPU waits half the time, and the loader's CPU is the bottleneck
KERNEL_MS, BURN_MS = 10.0, 5.0


def _truth(path: Path) -> tuple[float, float]:
    """The idle share the script built and its batch period (s)."""
    t = json.loads(path.read_text())
    return 1 - t["kernel_s"] / t["period_s"], t["period_s"]


def test_run_judges_an_unchanged_cuda_script_by_the_devices_clock(tmp_path: Path) -> None:
    out, truth_file = tmp_path / "run.json", tmp_path / "truth.json"
    plain = subprocess.run(
        [*SCRIPT, str(KERNEL_MS), str(BURN_MS), "20", str(tmp_path / "plain.json"), "3"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    watched = run_cli(
        "run", "--json", str(out), "--",
        *SCRIPT, str(KERNEL_MS), str(BURN_MS), "120", str(truth_file), "3",
    )  # fmt: skip
    assert (plain.returncode, watched.returncode) == (3, 3), watched.stderr
    assert plain.stdout == "trained on 160 samples\n"
    assert watched.stdout == "trained on 960 samples\n"  # the script's own output, untouched
    idle, period = _truth(truth_file)
    assert 0.35 < idle < 0.65, f"the construction did not hold on this host: period {period}"
    rec = RunRecord.load(out)
    assert rec.watch is not None and rec.watch.gpu_timing is not None
    assert rec.watch.gpu_timing.startswith("cuda events on cuda:")  # the model was on the GPU
    assert rec.gpu_idle_fraction == pytest.approx(idle, abs=0.06)
    assert rec.gpu_idle_method is not None and rec.gpu_idle_method.startswith("cuda events")
    assert rec.stages.gpu.capacity_samples_per_s == pytest.approx(8 / (KERNEL_MS / 1e3), rel=0.1)
    assert rec.bottleneck == "cpu"
    assert rec.stages.cpu.cpu_seconds_per_sample == pytest.approx(BURN_MS / 1e3, rel=0.15)
    assert rec.measured_samples_per_s == pytest.approx(8 / period, rel=0.1)
    # the host clock alone would have blamed the data for nearly all of the time
    ep = rec.watch.epochs[0]
    assert ep.stall_seconds / ep.seconds > 0.8
    # the script's own .cuda() copies go past ioprobe (only watch(..., device=) and
    # ioprobe.to_device time copies): the record says the link was not measured, never a
    # figure it did not take
    pcie = rec.stages.pcie
    assert pcie.pinned_fraction is None and pcie.capacity_samples_per_s is None
    assert pcie.method is not None and pcie.method.startswith("not measured")
    assert "cpu-bound" in watched.stderr


def test_run_live_on_a_terminal_shows_the_gpu_waiting_by_the_devices_clock(
    tmp_path: Path,
) -> None:
    truth_file = tmp_path / "truth.json"
    proc, shown = run_cli_on_terminal(
        "run", "--live", "--",
        *SCRIPT, str(KERNEL_MS), str(BURN_MS), "250", str(truth_file),
    )  # fmt: skip
    assert proc.returncode == 0, shown
    assert proc.stdout == b"trained on 2000 samples\n"
    idle, _ = _truth(truth_file)
    waits = [
        int(m) / 100 for m in re.findall(r"GPU waiting (\d+)%, last \d+ s, device clock", shown)
    ]
    assert len(waits) >= 2, shown[-3000:]
    # the last frames: a window of several seconds of steady batches
    assert waits[-1] == pytest.approx(idle, abs=0.1), waits
    hosts = [int(m) / 100 for m in re.findall(r"blocked in next\(\) (\d+)%", shown)]
    assert hosts and hosts[-1] > 0.8  # what the panel said before it read the device clock
    assert re.search(r"step 10\.\d ms, device clock", shown), shown[-3000:]


NCCL_SCRIPT = """\
import json, sys
import torch, torch.distributed as dist
from torch.utils.data import DataLoader
import ioprobe
from ioprobe.analysis.ranks import merge_ranks
from ioprobe.collect.group import TorchGroup
from ioprobe.record import RankInfo, RunRecord
from ioprobe.loaders.gather import gather
from tests.fixtures.datasets import BurnDataset

torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
loader = ioprobe.watch(
    DataLoader(BurnDataset(64, 0.002), batch_size=8, num_workers=1), device="cuda"
)
total = torch.zeros(1, device="cuda")
for x in loader:
    s = x.float().sum().reshape(1)
    dist.all_reduce(s)  # the user's NCCL collective in every step
    total += s
rec = gather(loader.run, merge=merge_ranks, timeout_s=30)
# gather leaves a world of one alone; the group it would use is opened here directly: a gloo
# subgroup of the user's NCCL group, a barrier and a gather over it, closed
group = TorchGroup(RankInfo(launcher="torchrun", rank=0, world_size=1), 30.0)
got = group.gather("nccl-check", rec.dumps(), 30.0)
group.close()
dist.all_reduce(total)  # the user's NCCL group still works after it
torch.cuda.synchronize()
back = RunRecord.from_json(json.loads(got[0]), "rank 0")
print(json.dumps({
    "same": rec is loader.run,
    "total": total.item(),
    "samples": sum(e.samples for e in back.watch.epochs),
    "timing": back.watch.gpu_timing,
    "backend": dist.get_backend(),
}))
dist.destroy_process_group()
"""


def _torchrun(nproc: int, script: str, *args: object) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", str(nproc), script, *(str(a) for a in args),
    ]  # fmt: skip


def test_the_ranks_group_opens_over_a_users_nccl_group_without_a_collective_in_the_steps(
    tmp_path: Path,
) -> None:
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    script = tmp_path / "nccl_script.py"
    script.write_text(NCCL_SCRIPT)
    proc = subprocess.run(
        _torchrun(1, str(script)),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["backend"] == "nccl"
    assert got["same"] is True  # a world of one: the record as it was
    assert got["total"] == sum(range(64))  # every step's sum came through NCCL's all_reduce
    assert got["samples"] == 64
    assert got["timing"].startswith("cuda events on cuda:0")


# as tests/integration/watch/test_ddp_watch.py builds it, with the batches and the step on the GPU:
# rank 1 delivers a batch every BATCH * BURN_MS / WORKERS ms, each step spins the GPU for
# COMPUTE_MS, and every rank waits for rank 1 at the gradients' all_reduce
STEPS, BATCH, WORKERS, DDP_BURN_MS, COMPUTE_MS = 20, 4, 1, 50.0, 40.0
PERIOD_MS = BATCH * DDP_BURN_MS / WORKERS


def test_two_ranks_on_the_gpu_name_the_slow_rank_and_its_exposed_wait(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    cmd = _torchrun(
        2, "tests/fixtures/ddp_train.py", STEPS, BATCH, WORKERS, DDP_BURN_MS, COMPUTE_MS, 1, "cuda"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    watched = run_cli("run", "--json", str(out), "--", *cmd, timeout=180)
    assert (plain.returncode, watched.returncode) == (0, 0), watched.stderr[-3000:]
    assert watched.stdout == plain.stdout  # the same weights and losses, watched or not
    assert f"steps {STEPS} weights" in watched.stdout
    rec = RunRecord.load(out)
    assert rec.watch is not None and rec.watch.gpu_timing is not None
    assert rec.watch.gpu_timing.startswith("cuda events on cuda:0")
    d = rec.distributed
    assert d is not None and (d.world_size, d.missing_ranks) == (2, [])
    for f in d.ranks:
        assert f.step_ms == pytest.approx(PERIOD_MS, rel=0.15)
    assert d.ranks[1].bottleneck == "cpu"
    spread = rank_spread(rec)
    assert spread is not None
    assert [(s.rank, s.cause) for s in spread.stragglers] == [(1, "cpu")]
    assert d.exposed_fraction == pytest.approx((PERIOD_MS - COMPUTE_MS) / PERIOD_MS, rel=0.15)

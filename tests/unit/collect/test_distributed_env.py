"""Reading a process's rank from torchrun's, SLURM's, Lightning's and MPI's environments,
and from an initialised process group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.collect.distributed import (
    detect,
    expand_nodelist,
    expand_tasks_per_node,
    group_rank,
    rank_info,
    rank_now,
)
from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord
from ioprobe.render.facts import measurements
from tests.fixtures.datasets import SleepDataset
from tests.support.cli import REPO

TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}
# what srun sets in task 6 of a 2-node, 8-task job step (node 1, its third task)
SRUN = {
    "SLURM_JOB_ID": "200505",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "6",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}


def test_torchrun_gives_rank_world_node_and_rendezvous() -> None:
    info = detect(TORCHRUN)
    assert info is not None
    assert (info.launcher, info.rank, info.world_size) == ("torchrun", 5, 8)
    assert (info.local_rank, info.local_world_size, info.node_rank, info.nodes) == (1, 4, 1, 2)
    assert info.master == "10.0.0.1:29500"


def test_an_srun_task_gives_its_rank_node_and_the_expanded_node_list() -> None:
    info = detect(SRUN)
    assert info is not None
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("slurm", 6, 8, 2)
    assert (info.local_world_size, info.node_rank, info.nodes) == (4, 1, 2)
    assert info.node_names == ["gpu07", "gpu08"]
    assert info.master == "gpu07"


def test_torchrun_started_by_srun_is_read_as_torchrun() -> None:
    info = detect({**SRUN, **TORCHRUN})
    assert info is not None and info.launcher == "torchrun" and info.rank == 5


def test_a_batch_script_outside_a_job_step_is_not_a_rank() -> None:
    batch = {k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"}
    batch.update(SLURM_PROCID="0", SLURM_NTASKS="8")
    assert detect(batch) is None


def test_no_launcher_or_a_world_of_one_is_no_distributed_job() -> None:
    assert detect({}) is None
    assert detect({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}) is None
    assert detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "8", "WORLD_SIZE": "8"}, "rank 8 in a world of 8"),
        ({"RANK": "x", "WORLD_SIZE": "8"}, "RANK='x': expected a whole number"),
        ({"RANK": "1"}, "WORLD_SIZE is not set"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
        (
            {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
            "local rank 2",
        ),
        ({**SRUN, "SLURM_STEP_NODELIST": "gpu[07-08"}, "'[' without ']'"),
        # read as a world of one (no job) before
        ({**SRUN, "SLURM_STEP_NUM_TASKS": "0"}, "SLURM_STEP_NUM_TASKS=0"),
        (
            {k: v for k, v in {**SRUN, "SLURM_NTASKS": "0"}.items() if k != "SLURM_STEP_NUM_TASKS"},
            "SLURM_NTASKS=0",
        ),
    ],
)
def test_launcher_values_that_make_no_sense_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(BadInputError, match=message.replace("[", r"\[").replace("(", r"\(")):
        detect(env)
    assert rank_info(env) is None  # a record is still made, without a rank


def test_node_lists_expand_as_slurm_writes_them() -> None:
    assert expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_nodelist("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_nodelist("a,b") == ["a", "b"]
    assert expand_nodelist("rack1-n[1-2]-ib") == ["rack1-n1-ib", "rack1-n2-ib"]
    with pytest.raises(BadInputError, match="backwards"):
        expand_nodelist("n[3-1]")
    assert expand_tasks_per_node("4(x2),2") == [4, 4, 2]
    with pytest.raises(BadInputError, match="tasks per node"):
        expand_tasks_per_node("4(x)")


def test_a_watched_loader_records_its_rank_and_a_single_process_records_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def watched() -> RunRecord:
        loader = ioprobe.watch(DataLoader(SleepDataset(64, 0.0), batch_size=8))
        for batch in loader:
            assert isinstance(batch, torch.Tensor)
        return loader.run

    for k in list(TORCHRUN) + list(SRUN):
        monkeypatch.delenv(k, raising=False)
    first = watched().watch
    assert first is not None and first.rank is None
    for k, v in TORCHRUN.items():
        monkeypatch.setenv(k, v)
    second = watched().watch
    assert second is not None
    rank = second.rank
    assert rank is not None and (rank.launcher, rank.rank, rank.world_size) == ("torchrun", 5, 8)
    rec = watched()
    assert ("rank", "5 of 8 (torchrun, node 1 of 2)") in measurements(rec, findings(rec))
    again = RunRecord.from_json(rec.to_json()).watch
    assert again is not None and again.rank == rec.watch.rank if rec.watch else False


# -- issue 29: launcher variables a hostile or broken environment sets ------------------------

SLURM_STEP = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
NONSENSE = [
    ({"WORLD_SIZE": "1" * 23, "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "9" * 100_000, "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "4", "RANK": "2" * 30}, "RANK"),
    ({"WORLD_SIZE": "²", "RANK": "0"}, "whole number"),  # int() reads it; a launcher never
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "99999"}, "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "0"}, "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "80x"}, "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": str(1 << 21)}, "LOCAL_WORLD_SIZE"),
    ({**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "4(x99999999999)"}, "tasks per node"),
    ({**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "9" * 40}, "tasks per node"),
    ({**SLURM_STEP, "SLURM_STEP_NODELIST": "n[0-99999999]"}, "node list"),
    ({**SLURM_STEP, "SLURM_STEP_NODELIST": "n[0-1" + "9" * 30 + "]"}, "node list"),
    ({**SLURM_STEP, "SLURM_STEP_NODELIST": ",".join(["a"] * (1 << 21))}, "node list"),
    ({**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "1" * 23}, "SLURM_STEP_NUM_TASKS"),
]


@pytest.mark.parametrize(("env", "names"), NONSENSE)
def test_a_launcher_variable_out_of_bounds_is_one_error_naming_it_quickly(
    env: dict[str, str], names: str
) -> None:
    t0 = time.perf_counter()
    with pytest.raises(BadInputError, match=re.escape(names)) as caught:
        detect(env)
    assert len(str(caught.value)) < 200  # a 100,000-digit value is not echoed whole
    # where a record is made (a training script reading loader.run) it reads as no rank
    assert rank_info(env) is None
    assert time.perf_counter() - t0 < 1.0  # nothing was expanded


def test_the_bounds_leave_real_worlds_alone() -> None:
    big = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "4096", "SLURM_NODEID": "0"}
    big |= {"SLURM_STEP_TASKS_PER_NODE": "8(x512)", "SLURM_STEP_NODELIST": "gpu[0001-0512]"}
    info = detect(big)
    assert info is not None and info.local_world_size == 8 and len(info.node_names) == 512
    assert detect({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "29500"}) is not None


# -- issue 28: launchers that set no RANK, and the process group ------------------------------

# what Lightning's subprocess launcher leaves in rank 1 of `Trainer(devices=2,
# strategy="ddp")` on one node (its parent, rank 0, sets the same with LOCAL_RANK=0)
LIGHTNING = {
    "LOCAL_RANK": "1",
    "NODE_RANK": "0",
    "WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "41234",
}


def test_lightnings_launcher_gives_the_local_rank_on_the_first_node() -> None:
    info = detect(LIGHTNING)
    assert info is not None
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("lightning", 1, 2, 1)
    assert info.master == "127.0.0.1:41234"
    parent = detect({**LIGHTNING, "LOCAL_RANK": "0"})
    assert parent is not None and (parent.rank, parent.master) == (0, info.master)


def test_lightning_past_the_first_node_needs_the_processes_per_node() -> None:
    later = {**LIGHTNING, "NODE_RANK": "1", "WORLD_SIZE": "4"}
    # Lightning exports no count per node: only the process group can tell the rank
    assert detect(later) is None
    info = detect({**later, "LOCAL_WORLD_SIZE": "2"})
    assert info is not None and (info.rank, info.node_rank, info.nodes) == (3, 1, 2)
    with pytest.raises(BadInputError, match="rank 5 in a world of 4"):
        detect({**later, "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"})


@pytest.mark.parametrize(
    ("env", "local"),
    [
        (  # Open MPI's mpirun, rank 3 of 4, the second on its node
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            (1, 2),
        ),
        (  # MPICH's and Intel MPI's process manager
            {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
            (1, 2),
        ),
        ({"MV2_COMM_WORLD_RANK": "3", "MV2_COMM_WORLD_SIZE": "4"}, (0, None)),
    ],
)
def test_mpi_launchers_give_their_rank(env: dict[str, str], local: tuple[int, int | None]) -> None:
    info = detect({**env, "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29500"})
    assert info is not None
    assert (info.launcher, info.rank, info.world_size) == ("mpirun", 3, 4)
    assert (info.local_rank, info.local_world_size) == local
    assert info.master == "10.0.0.2:29500"
    # a world of one rank: each variable's count 1, each rank 0
    one = {k: "0" if k.endswith(("RANK", "RANKID")) else "1" for k in env}
    assert detect(one) is None


def test_torchruns_variables_win_over_mpis() -> None:
    info = detect({**TORCHRUN, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    assert info is not None and (info.launcher, info.rank) == ("torchrun", 5)


def test_asking_the_process_group_never_imports_torch() -> None:
    code = (
        "import sys; from ioprobe.collect.distributed import group_rank, rank_now\n"
        "assert group_rank() is None and rank_now({}) is None\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "import torch.distributed\n"
        "assert group_rank() is None  # imported, no group initialised\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_process_group_of_one_rank_is_no_distributed_job(tmp_path: Path) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        assert dist.is_initialized()
        assert group_rank({}) is None and rank_now({}) is None
        # the launcher's variables say two ranks, the group one: a world of one it is
        assert group_rank({**LIGHTNING, "LOCAL_RANK": "0"}) is None
    finally:
        dist.destroy_process_group()

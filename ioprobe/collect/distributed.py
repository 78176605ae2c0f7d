"""Which rank of a distributed job this process is: from torch.distributed's process group
where one is initialised, else from its launcher's environment.

``torchrun`` (and ``torch.distributed.run``, TorchElastic) sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node's rank) and
``MASTER_ADDR``/``MASTER_PORT`` in each process it starts. SLURM's ``srun`` sets
``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``, ``SLURM_LOCALID``, ``SLURM_NODEID``,
``SLURM_STEP_NODELIST`` and ``SLURM_STEP_TASKS_PER_NODE`` in each task of a job step. A batch
script itself also sees ``SLURM_PROCID=0`` and the job's ``SLURM_NTASKS`` but is one process,
not a rank of many: only a job step (``SLURM_STEP_ID`` set) counts. torchrun's variables win
where both are set (torchrun started by srun: torchrun's ranks are the processes).

Lightning's own launcher (``Trainer(strategy="ddp")``, which starts the other ranks of a node
as copies of the script with ``subprocess``) sets ``LOCAL_RANK``, ``NODE_RANK``,
``WORLD_SIZE`` and ``MASTER_ADDR``/``MASTER_PORT`` but no ``RANK``: on node 0 the rank is the
local rank; past node 0 only the process group tells it. MPI's launchers set their own:
Open MPI ``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``, MPICH and Intel
MPI ``PMI_RANK``/``PMI_SIZE`` (``MPI_LOCALRANKID``/``MPI_LOCALNRANKS``), MVAPICH
``MV2_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``.

Any launcher at all (Accelerate, DeepSpeed, a script's own ``init_process_group``) leaves
an initialised process group once training starts: ``group_rank`` reads the rank and the
world from it (``torch.distributed.get_rank()``/``get_world_size()``), and only where the
script has already imported ``torch.distributed``; nothing here imports torch. The group
may exist only once the loader is already wrapped (Lightning initialises it in each rank
before its fit loop) and be gone again by the time a record is made (Lightning destroys it
in an exit handler), so a watched loader asks at each epoch's start and keeps what it saw.

A world of one rank is no distributed job at all, so it reads as None and everything
behaves as without a launcher.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ioprobe.errors import BadInputError
from ioprobe.record import RankInfo

__all__ = [
    "MAX_RANKS",
    "detect",
    "expand_nodelist",
    "expand_tasks_per_node",
    "group_rank",
    "rank_info",
    "rank_now",
]


# the most ranks, nodes or tasks a launcher variable may name: past it a value is damage, and
# expanding it ("4(x99999999999)", a node list of 10^8 names) would exhaust the memory
MAX_RANKS = 1 << 20


@dataclass(frozen=True)
class _Read:
    env: Mapping[str, str]

    def int(self, name: str, default: int | None = None) -> int | None:
        text = self.env.get(name, "").strip()
        if not text:
            return default
        shown = text if len(text) <= 40 else text[:37] + "..."
        # a digit count first: int() of 23 digits is fine, of 10^6 digits slow or refused
        if re.fullmatch(r"[+-]?[0-9]+", text) is None:  # ASCII digits: int() takes others
            raise BadInputError(f"{name}={shown!r}: expected a whole number")
        if len(text) > 12:
            raise BadInputError(f"{name}={shown!r}: more than {MAX_RANKS:,}")
        value = int(text)
        if value < 0:
            raise BadInputError(f"{name}={shown!r}: must not be negative")
        if value > MAX_RANKS:
            raise BadInputError(f"{name}={shown!r}: more than {MAX_RANKS:,}")
        return value


def detect(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's place in a distributed job, or None outside one (no launcher, a
    single-rank world, a SLURM batch script outside any job step). Raises BadInputError
    naming the variable when the launcher's values do not make sense (a rank past the
    world's size, a count that is not a number)."""
    e = os.environ if env is None else env
    has = {name for name in _SIGNS if e.get(name, "").strip()}
    if "WORLD_SIZE" in has and "RANK" not in has and "LOCAL_RANK" in has:
        return _lightning(e)
    if "WORLD_SIZE" in has or "RANK" in has:
        return _torchrun(e)
    if (e.get("SLURM_STEP_ID") or e.get("SLURM_STEPID")) and e.get("SLURM_PROCID"):
        return _slurm(e)
    for rank, size, local, local_size in _MPI:
        if rank in has and size in has:
            return _mpi(e, rank, size, local, local_size)
    return None


# the variables whose presence picks a launcher
_SIGNS = (
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_SIZE",
)
# each MPI's (rank, size, local rank, local size): Open MPI, MVAPICH, then MPICH/Intel MPI's
# process manager (which MVAPICH and Open MPI's own may also set beside theirs)
_MPI = (
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    (
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


def _checked(info: RankInfo) -> RankInfo | None:
    if info.rank >= info.world_size:
        raise BadInputError(
            f"{info.launcher}: rank {info.rank} in a world of {info.world_size} (ranks run "
            f"from 0 to {info.world_size - 1})"
        )
    lws = info.local_world_size
    if lws is not None and info.local_rank >= lws:
        raise BadInputError(
            f"{info.launcher}: local rank {info.local_rank} on a node of {lws} processes"
        )
    return info if info.world_size > 1 else None


def _torchrun(e: Mapping[str, str]) -> RankInfo | None:
    r = _Read(e)
    world = r.int("WORLD_SIZE")
    rank = r.int("RANK")
    if world is None or rank is None:
        missing = "WORLD_SIZE" if world is None else "RANK"
        raise BadInputError(
            f"{missing} is not set beside {'RANK' if world is None else 'WORLD_SIZE'}: a launcher sets both"
        )
    if world == 0:
        raise BadInputError("WORLD_SIZE=0: a world has at least one rank")
    master = _master(e)
    local_world = r.int("LOCAL_WORLD_SIZE")
    node_rank = r.int("GROUP_RANK")
    nodes = world // local_world if local_world and world % local_world == 0 else None
    return _checked(
        RankInfo(
            launcher="torchrun",
            rank=rank,
            world_size=world,
            local_rank=r.int("LOCAL_RANK", 0) or 0,
            local_world_size=local_world,
            node_rank=node_rank,
            nodes=nodes,
            master=master,
        )
    )


def _master(e: Mapping[str, str]) -> str | None:
    addr, port = e.get("MASTER_ADDR", "").strip(), e.get("MASTER_PORT", "").strip()
    if port and not (re.fullmatch(r"[0-9]{1,5}", port) and 0 < int(port) < 65536):
        raise BadInputError(f"MASTER_PORT={port[:40]!r}: expected a port from 1 to 65535")
    return f"{addr}:{port}" if addr and port else (addr or None)


def _lightning(e: Mapping[str, str]) -> RankInfo | None:
    """Lightning's subprocess launcher: ``WORLD_SIZE``, ``LOCAL_RANK`` and ``NODE_RANK``
    without ``RANK``. Its ranks are numbered node by node, so on node 0 the rank is the
    local rank; on a later node it needs the processes per node, which Lightning does not
    export (``LOCAL_WORLD_SIZE`` where the user sets it), else None until the process group
    says."""
    r = _Read(e)
    world = r.int("WORLD_SIZE") or 0
    if world == 0:
        raise BadInputError("WORLD_SIZE=0: a world has at least one rank")
    local = r.int("LOCAL_RANK", 0) or 0
    node = r.int("NODE_RANK", 0) or 0
    local_world = r.int("LOCAL_WORLD_SIZE")
    if node and not local_world:
        return None
    return _checked(
        RankInfo(
            launcher="lightning",
            rank=node * (local_world or 0) + local,
            world_size=world,
            local_rank=local,
            local_world_size=local_world,
            node_rank=node,
            nodes=world // local_world if local_world and world % local_world == 0 else None,
            master=_master(e),
        )
    )


def _mpi(
    e: Mapping[str, str], rank: str, size: str, local: str, local_size: str
) -> RankInfo | None:
    """An MPI launcher's rank (``mpirun``/``mpiexec``, as Accelerate's multi-CPU launch and
    DeepSpeed's MPI runners start the ranks)."""
    r = _Read(e)
    world = r.int(size) or 0
    if world == 0:
        raise BadInputError(f"{size}=0: a world has at least one rank")
    local_world = r.int(local_size)
    return _checked(
        RankInfo(
            launcher="mpirun",
            rank=r.int(rank, 0) or 0,
            world_size=world,
            local_rank=r.int(local, 0) or 0,
            local_world_size=local_world,
            nodes=world // local_world if local_world and world % local_world == 0 else None,
            master=_master(e),
        )
    )


def _slurm(e: Mapping[str, str]) -> RankInfo | None:
    r = _Read(e)
    rank = r.int("SLURM_PROCID", 0) or 0
    world = _first_set(r, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if world == 0:
        named = "SLURM_STEP_NUM_TASKS" if r.int("SLURM_STEP_NUM_TASKS") == 0 else "SLURM_NTASKS"
        raise BadInputError(f"{named}=0: a world has at least one rank")
    node = r.int("SLURM_NODEID")
    nodelist = e.get("SLURM_STEP_NODELIST") or e.get("SLURM_JOB_NODELIST") or ""
    names = expand_nodelist(nodelist) if nodelist else []
    per_node_text = e.get("SLURM_STEP_TASKS_PER_NODE") or e.get("SLURM_TASKS_PER_NODE") or ""
    per_node = expand_tasks_per_node(per_node_text) if per_node_text else []
    local_world = per_node[node] if node is not None and node < len(per_node) else None
    nodes = r.int("SLURM_STEP_NUM_NODES") or r.int("SLURM_NNODES") or (len(names) or None)
    return _checked(
        RankInfo(
            launcher="slurm",
            rank=rank,
            world_size=world,
            local_rank=r.int("SLURM_LOCALID", 0) or 0,
            local_world_size=local_world,
            node_rank=node,
            nodes=nodes,
            master=names[0] if names else None,
            node_names=names,
        )
    )


def _first_set(r: _Read, *names: str) -> int:
    """The first of ``names`` that is set (0 included, which the caller refuses), else 1."""
    for name in names:
        value = r.int(name)
        if value is not None:
            return value
    return 1


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(text: str) -> list[str]:
    """SLURM's compact host list to names: ``gpu[01-03,07],login1`` is gpu01, gpu02,
    gpu03, gpu07, login1 (leading zeros kept, as SLURM pads). Raises BadInputError on a
    list SLURM would not write (an unclosed bracket, a range that runs backwards)."""
    commas = text.count(",")  # each one separates one more name: counted before the walk
    if commas >= MAX_RANKS:
        raise BadInputError(f"node list of {commas + 1:,} entries: more than {MAX_RANKS:,}")
    out: list[str] = []
    depth = 0
    start = 0
    parts: list[str] = []
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise BadInputError(f"node list {text!r}: ']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise BadInputError(f"node list {text!r}: '[' without ']'")
    parts.append(text[start:])
    if len(parts) > MAX_RANKS:
        raise BadInputError(f"node list of {len(parts):,} entries: more than {MAX_RANKS:,}")
    for part in (p.strip() for p in parts):
        if not part:
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part:
                raise BadInputError(f"node list {text!r}: cannot read {part!r}")
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            rm = _RANGE.match(item.strip())
            if rm is None:
                raise BadInputError(f"node list {text!r}: cannot read the range {item!r}")
            lo, hi = rm.group(1), rm.group(2) or rm.group(1)
            if int(hi) < int(lo):
                raise BadInputError(f"node list {text!r}: the range {item!r} runs backwards")
            width = len(lo)
            if len(hi) > 12 or len(out) + int(hi) - int(lo) + 1 > MAX_RANKS:
                raise BadInputError(f"node list {text[:60]!r}: more than {MAX_RANKS:,} nodes")
            out.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM's tasks per node, one count per node: ``4(x2),2`` is 4, 4, 2."""
    out: list[int] = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if m is None:
            raise BadInputError(f"tasks per node {text!r}: cannot read {item!r}")
        count, times = m.group(1), m.group(2) or "1"
        if len(count) > 12 or len(times) > 12 or len(out) + int(times) > MAX_RANKS:
            raise BadInputError(f"tasks per node {text[:60]!r}: more than {MAX_RANKS:,} nodes")
        if int(count) > MAX_RANKS:
            raise BadInputError(f"tasks per node {text[:60]!r}: more than {MAX_RANKS:,} tasks")
        out.extend([int(count)] * int(times))
    return out


def rank_info(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """``detect``, for where a record is made: a launcher's environment that does not make
    sense is not this run's failure, so it reads as no rank rather than an error (``ioprobe``
    commands that act on the rank call ``detect`` and report it)."""
    try:
        return detect(env)
    except BadInputError:
        return None


def group_rank(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's rank in torch.distributed's default process group, where the script
    has imported ``torch.distributed`` and initialised one of more than one rank; else None.
    Whoever started the ranks, the group knows the rank and the world: they win over the
    environment's, which still gives the launcher's name, the rendezvous, and the node
    (``rank_info``). With no launcher variables at all, the launcher is named from what
    the script runs under (``accelerate`` where Accelerate's launcher set its variables,
    ``lightning`` where Lightning is imported), else ``torch.distributed``. Costs a
    dictionary lookup where torch.distributed is not imported, a few calls where it is."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        rank, world = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a group torn down half-way, a backend that refuses: no rank known
        return None
    if world <= 1 or not 0 <= rank < world:
        return None
    e = os.environ if env is None else env
    known = rank_info(e)
    if known is not None:
        if (known.rank, known.world_size) == (rank, world):
            return known
        # the launcher's figures describe another world than the group's: keep its name
        # and rendezvous, not its topology
        return RankInfo(launcher=known.launcher, rank=rank, world_size=world, master=known.master)
    try:
        master = _master(e)
        local = _Read(e).int("LOCAL_RANK", 0) or 0
    except BadInputError:
        master, local = None, 0
    return RankInfo(
        launcher=_launcher_named(e), rank=rank, world_size=world, local_rank=local, master=master
    )


def _launcher_named(e: Mapping[str, str]) -> str:
    if any(k.startswith("ACCELERATE_") for k in e):
        return "accelerate"
    if "lightning" in sys.modules or "pytorch_lightning" in sys.modules:
        return "lightning"
    return "torch.distributed"


def rank_now(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """The rank as well as it is known now: the process group's (``group_rank``), else the
    launcher's environment's (``rank_info``)."""
    return group_rank(env) or rank_info(env)

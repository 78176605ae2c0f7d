"""The ranks of a distributed job talking to each other: barriers and gathers over a gloo
process group of torch.distributed, each with a timeout, naming the ranks that never came.

A distributed probe makes its own group from the launcher's rendezvous (torchrun's
``MASTER_ADDR``/``MASTER_PORT``; under ``srun`` the step's first node and a port derived from
the job id, as SLURM jobs commonly do). gloo works on the CPU, so the probe needs no GPU to
coordinate. Where the process already has a group (a training script), a gloo subgroup is made
from it and the user's group is never re-initialised or destroyed.

Every collective is preceded by a ``monitored_barrier`` with the phase's own timeout. When one
fails, gloo says only "connection closed by peer" (a rank died) or that the wait timed out, so
the group's key-value store tells who: each rank marks its arrival at a phase there, and a
thread of each rank beats there every ``BEAT_S``. The ranks lost are those that never marked
the phase (stuck before it) and those whose beat stopped (dead, even after arriving).
torch is imported here and only here, when a group is opened.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ioprobe.collect.quiet import start_quiet
from ioprobe.errors import BadInputError, RankLostError
from ioprobe.record import RankInfo

__all__ = ["Group", "TorchGroup", "open_group", "rendezvous"]

T = TypeVar("T")
SLURM_PORT_BASE = 29_500  # srun sets no port: one from the job id keeps jobs on a node apart
SLURM_PORTS = 10_000
BEAT_S = 0.5
# how long closing the group waits for its beat to end (a store set takes milliseconds; one
# whose rank 0 is gone fails at its own timeout, which no close should wait for)
CLOSE_JOIN_S = 5.0
# torch's own rendezvous ends within its timeout wherever a store answers (connecting is
# retried until then, the ranks' barrier waits as long); this much more is the watchdog's
INIT_GRACE_S = 5.0
_MONITORED = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


class Group(Protocol):
    """What a distributed probe needs of its ranks' group."""

    rank: int
    world: int

    def barrier(self, phase: str, timeout_s: float) -> None: ...

    def gather(self, phase: str, obj: T, timeout_s: float) -> list[T]: ...

    def close(self) -> None: ...


def rendezvous(info: RankInfo, env: dict[str, str] | None = None) -> str:
    """The ``tcp://host:port`` every rank meets at. torchrun's is in its environment;
    ``srun`` gives none, so the step's first node and a port from the job id stand in
    (``MASTER_ADDR``/``MASTER_PORT`` set by the user win)."""
    e = dict(os.environ) if env is None else env
    addr = e.get("MASTER_ADDR", "").strip()
    port = e.get("MASTER_PORT", "").strip()
    if info.launcher == "slurm":
        addr = addr or (info.node_names[0] if info.node_names else "")
        job = e.get("SLURM_JOB_ID", "").strip()
        if not port and job.isdigit():
            port = str(SLURM_PORT_BASE + int(job) % SLURM_PORTS)
    if not addr or not port:
        missing = " and ".join(
            n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if not v
        )
        raise BadInputError(
            f"{info.launcher}: {missing} not set: the ranks cannot find each other (torchrun "
            "sets both; under srun set them, or run inside a job step with SLURM_JOB_ID; "
            "under mpirun set them)"
        )
    if not port.isdigit() or not 0 < int(port) < 65_536:
        raise BadInputError(f"MASTER_PORT={port!r}: expected a port number, 1 to 65535")
    return f"tcp://{addr}:{port}"


class TorchGroup:
    """A gloo group over torch.distributed for one distributed run; ``close`` ends it (a
    group of its own is destroyed, a subgroup of the user's left to them)."""

    def __init__(self, info: RankInfo, timeout_s: float, env: dict[str, str] | None = None):
        import torch.distributed as dist

        self._dist = dist
        self.rank, self.world = info.rank, info.world_size
        self._timeout = dt.timedelta(seconds=timeout_s)
        self._own = not dist.is_initialized()
        if self._own:
            where = rendezvous(info, env)
            try:
                _within(
                    timeout_s + INIT_GRACE_S,
                    lambda: dist.init_process_group(
                        "gloo",
                        init_method=where,
                        rank=info.rank,
                        world_size=info.world_size,
                        timeout=self._timeout,
                    ),
                )
            except _NoAnswer:
                raise RankLostError(
                    f"rank {info.rank}: nothing at {where.removeprefix('tcp://')} answered as "
                    f"the ranks' store within {timeout_s + INIT_GRACE_S:g} s (another program "
                    "may hold MASTER_PORT: it accepted the connection and never spoke)",
                    missing=[],
                ) from None
            except (RuntimeError, ValueError) as exc:  # DistNetworkError too
                why = (
                    f"MASTER_PORT {where.rsplit(':', 1)[-1]} is taken on this host by another "
                    "program: the ranks' store cannot listen there"
                    if _in_use(exc)
                    else f"the ranks did not meet within {timeout_s:g} s ({_first_line(exc)})"
                )
                raise RankLostError(f"rank {info.rank}: {why}", missing=[]) from None
            self._pg: Any = None  # the default group
        else:
            if dist.get_world_size() != info.world_size or dist.get_rank() != info.rank:
                raise BadInputError(
                    f"the process group has rank {dist.get_rank()} of {dist.get_world_size()}, "
                    f"the launcher says {info.rank} of {info.world_size}"
                )
            self._pg = dist.new_group(backend="gloo", timeout=self._timeout)
        self._store = _default_store(dist)
        self._phases: set[str] = set()
        self._closed = threading.Event()
        self._beating: threading.Thread | None = None
        if self._store is not None:
            self._beating = start_quiet(
                threading.Thread(target=self._beat, daemon=True, name="ioprobe-beat")
            )

    def _beat(self) -> None:
        n = 0
        while not self._closed.wait(BEAT_S):
            n += 1
            try:
                self._store.set(f"ioprobe/beat/{self.rank}", str(n))
            except RuntimeError:
                return  # the store went with rank 0

    def barrier(self, phase: str, timeout_s: float) -> None:
        """Wait for every rank at ``phase`` for at most ``timeout_s``; RankLostError naming
        the ranks that did not come."""
        if phase in self._phases:
            raise ValueError(f"phase {phase!r} used twice: its arrival marks would be stale")
        self._phases.add(phase)
        self._mark(phase)
        try:
            self._dist.monitored_barrier(
                group=self._pg, timeout=dt.timedelta(seconds=timeout_s), wait_all_ranks=True
            )
        except RuntimeError as exc:
            raise self._lost(phase, timeout_s, exc) from None

    def gather(self, phase: str, obj: T, timeout_s: float) -> list[T]:
        """Every rank's ``obj``, in rank order, once all have reached ``phase`` (waiting at
        most ``timeout_s`` for them)."""
        self.barrier(phase, timeout_s)
        out: list[Any] = [None] * self.world
        try:
            self._dist.all_gather_object(out, obj, group=self._pg)
        except RuntimeError as exc:
            raise self._lost(f"{phase} (gathering)", timeout_s, exc) from None
        return out

    def close(self) -> None:
        self._closed.set()
        # the beat must be over before the caller goes on: a daemon thread still inside the
        # store's C++ call when the interpreter exits is ended there by a forced unwind,
        # which aborts the whole process ("terminate called without an active exception":
        # 2 to 3 in 8 runs of a job of four ranks)
        if self._beating is not None:
            self._beating.join(CLOSE_JOIN_S)
        # a group broken by a lost rank has nothing left to end cleanly
        with contextlib.suppress(RuntimeError):
            if self._own and self._dist.is_initialized():
                self._dist.destroy_process_group()

    def _mark(self, phase: str) -> None:
        if self._store is not None:
            # the store's host (rank 0) may be gone: the barrier says so
            with contextlib.suppress(RuntimeError):
                self._store.set(f"ioprobe/{phase}/{self.rank}", "1")

    def _lost(self, phase: str, timeout_s: float, exc: BaseException) -> RankLostError:
        missing = self._missing(phase, exc)
        who = (
            f"rank {missing[0]}"
            if len(missing) == 1
            else f"ranks {', '.join(map(str, missing))}"
            if missing
            else "a rank"
        )
        return RankLostError(
            f"rank {self.rank}: {who} of {self.world} lost before {phase} "
            f"({_first_line(exc)}; a phase waits at most {timeout_s:.0f} s for every rank)",
            missing=missing,
        )

    def _missing(self, phase: str, exc: BaseException) -> list[int]:
        """The ranks that never marked ``phase``: from the store where it answers, else
        from the barrier's own message, else none known."""
        if self._store is not None:
            try:
                absent = {
                    r for r in range(self.world) if not self._store.check([f"ioprobe/{phase}/{r}"])
                }
                return sorted(absent | self._silent())
            except RuntimeError:
                if self.rank != 0:
                    return [0]  # the store lives with rank 0: it is the one gone
        m = _MONITORED.search(str(exc))
        return [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []

    def _silent(self) -> set[int]:
        """The ranks whose beat stops over a few beats' time (the other ranks', not ours)."""

        def beats() -> dict[int, bytes]:
            keys = {r: f"ioprobe/beat/{r}" for r in range(self.world) if r != self.rank}
            return {r: self._store.get(k) for r, k in keys.items() if self._store.check([k])}

        before = beats()
        time.sleep(3 * BEAT_S)
        after = beats()
        return {r for r in range(self.world) if r != self.rank and before.get(r) == after.get(r)}


class _NoAnswer(Exception):
    """The watchdog's own: what the call raised (a TimeoutError of torch's too) stays apart."""


def _within(seconds: float, call: Callable[[], object]) -> None:
    """``call()`` in a thread of its own, waited for at most ``seconds``: _NoAnswer
    past that, its exception where it raised one. torch's TCPStore client waits without end
    for the first answer of a listener that accepts and never speaks (another program on
    MASTER_PORT), whatever timeout it was given; it releases the GIL while it waits, so the
    thread is left behind, a daemon that does not keep the process from exiting."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    start_quiet(threading.Thread(target=run, daemon=True, name="ioprobe-rendezvous"))
    # short waits: a signal handler (Ctrl-C, SIGTERM) runs between them
    end = time.monotonic() + seconds
    while not done.wait(min(0.2, max(0.0, end - time.monotonic()))):
        if time.monotonic() >= end:
            raise _NoAnswer(f"no answer within {seconds:g} s")
    if failed:
        raise failed[0]


def _in_use(exc: BaseException) -> bool:
    """Whether the store could not listen: rank 0 makes it on MASTER_PORT, and another
    program listens there already."""
    text = str(exc).lower()
    return "failed to listen" in text or "address already in use" in text


def quiet_torch_logs() -> None:
    """Keep torch's C++ log (a warning with a C++ stack per retried connection) off the
    probe's stderr, where every failure is already one line of ioprobe's. Read when torch
    is first imported, so set only where it is not yet, and never over the user's own."""
    if "torch" not in sys.modules:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")


def _default_store(dist: Any) -> Any:
    """The default group's key-value store (torch keeps it private); None where this torch
    has none to give: missing ranks then go unnamed."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # gloo prefixes its source file and appends advice: the reader needs the first sentence
    text = re.sub(r"^\[[^\]]*\.cc:\d+\]\s*", "", text)
    return text.split(". ")[0].rstrip(".")[:200]


def open_group(info: RankInfo, timeout_s: float) -> Group:
    """The group of this job's ranks, for a distributed probe (the command line's: torch's
    C++ log is kept off its stderr)."""
    quiet_torch_logs()
    return TorchGroup(info, timeout_s)

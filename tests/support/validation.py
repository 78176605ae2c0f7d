"""The advice validation matrix: loaders with truths built by construction, advice applied
and rerun, settings swept.

Each ``Case`` is a DataLoader over a dataset whose per-sample cost is built in (sleeps for
blocked reads, busy loops for CPU, a lock held per read for a bandwidth cap) and a consumer
that takes a fixed step per batch. ``validate(case)`` watches one run, takes the top
recommendation that changes a loader setting, reruns with it applied (paired with reruns as
it was: this host's speed drifts), and sweeps the settings around it to find the measured
best. ``tests/benchmarks/bench_advice.py`` runs the whole matrix; the integration test runs a
fast subset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.analysis.loader_sim import Setting, recorded_setting
from ioprobe.collect import cgroup
from ioprobe.record import Recommendation, RunRecord
from tests.fixtures.datasets import SkewedDataset, SkewedIterable, SleepDataset

LOADER_KINDS = ("num_workers", "prefetch_factor", "in_order", "loader_settings")
# advice that changes the data, not only the loader: a case applies it with its ``cured``
CURE_KINDS = ("balance_streams",)
# Batches a run measures: these, and these per worker (each worker's start is staggered, so a
# run of many workers needs more batches before its rate is steady)
STEADY_BATCHES = 200
BATCHES_PER_WORKER = 10


def burn(seconds: float) -> None:
    """Hold the CPU (and the GIL) for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class SkewedCpu(Dataset[torch.Tensor]):
    """Every sample burns ``base_s`` of CPU but one in ``every``, which sleeps ``slow_s``
    (a slow remote object) or, with ``slow_cpu``, burns it."""

    def __init__(self, n: int, base_s: float, every: int, slow_s: float, slow_cpu: bool) -> None:
        self.n, self.base_s, self.every, self.slow_s, self.slow_cpu = (
            n,
            base_s,
            every,
            slow_s,
            slow_cpu,
        )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i % self.every == 0:
            (burn if self.slow_cpu else time.sleep)(self.slow_s)
        else:
            burn(self.base_s)
        return torch.tensor([float(i)])


class CappedStore(Dataset[torch.Tensor]):
    """Reads from a store that serves one read at a time, ``read_s`` each (a bandwidth cap
    shared by every worker: more readers queue, none reads faster), plus ``latency_s`` of
    per-request latency that does overlap."""

    def __init__(self, n: int, read_s: float, latency_s: float) -> None:
        self.n, self.read_s, self.latency_s = n, read_s, latency_s
        self.lock = multiprocessing.get_context("fork").Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.latency_s)
        with self.lock:
            time.sleep(self.read_s)
        return torch.tensor([float(i)])


def burning_collate(samples: list[torch.Tensor]) -> torch.Tensor:
    """The default collate, after burning 4 ms of CPU (a heavy augmentation per batch)."""
    burn(0.004)
    return torch.stack(samples)


class Mixed(Dataset[torch.Tensor]):
    """Every sample blocks ``blocked_s`` (a read) and then burns ``cpu_s`` (its decode)."""

    def __init__(self, n: int, blocked_s: float, cpu_s: float) -> None:
        self.n, self.blocked_s, self.cpu_s = n, blocked_s, cpu_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.blocked_s)
        burn(self.cpu_s)
        return torch.tensor([float(i)])


@dataclasses.dataclass(frozen=True)
class Case:
    """One loader of the matrix: how to make its dataset, its settings, the consumer's step."""

    name: str
    make: Callable[[int], Dataset[Any]]  # a dataset of n samples
    batch_size: int
    setting: Setting
    step_s: float
    truth: str  # what the construction makes true, for the report
    load: int = 0  # busy loops on the host during every run: someone else's CPU load
    # the busy loops in a session of their own (another autogroup, as another user's job
    # is): the scheduler keeps their share of the cores whatever the workers
    load_apart: bool = False
    collate: Callable[[list[Any]], Any] | None = None
    steady_batches: int = STEADY_BATCHES
    # the dataset with a data advice's cure applied (a stream's items dealt at random)
    cured: Callable[[int], Dataset[Any]] | None = None
    # the run inside a memory cgroup of this many MiB of new charges (v1, as root): the
    # memory-limited case; a worker past it is killed, and that setting delivers nothing
    memory_cap_mib: int = 0

    def samples(self, s: Setting) -> int:
        """Samples a run of ``s`` reads: enough batches past the workers' first round that
        the steady rate, not the workers' staggered start, is what is measured."""
        return (self.steady_batches + BATCHES_PER_WORKER * s.workers) * self.batch_size

    def loader(self, s: Setting, cured: bool = False) -> DataLoader[Any]:
        make = self.cured if cured and self.cured is not None else self.make
        return DataLoader(
            make(self.samples(s)),
            batch_size=self.batch_size,
            num_workers=s.workers,
            prefetch_factor=s.prefetch_factor,
            in_order=s.in_order,
            collate_fn=self.collate,
        )


class HeldMemory(Dataset[torch.Tensor]):
    """Each sample waits ``wait_s`` (a latency-bound read); each worker holds ``held_mib``
    MiB of its own, written at its first sample (a decoder's buffers, a shard's index), and
    is the one the kernel kills first where its cgroup runs out of memory."""

    def __init__(self, n: int, wait_s: float, held_mib: int) -> None:
        self.n, self.wait_s, self.held_mib = n, wait_s, held_mib
        self.held: bytearray | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.held is None:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
            held = bytearray(self.held_mib << 20)
            held[::4096] = b"\1" * len(range(0, len(held), 4096))  # every page resident
            self.held = held
        time.sleep(self.wait_s)
        return torch.full((1,), float(i))


MEMORY = Path("/sys/fs/cgroup/memory")


def unmeasurable(case: Case) -> str | None:
    """Why ``case`` cannot be measured on this host (the memory-limited case needs root and
    v1's memory controller), or None."""
    if case.memory_cap_mib and not os.access(MEMORY / "cgroup.procs", os.W_OK):
        return f"needs root and v1's memory controller at {MEMORY}"
    return None


@contextlib.contextmanager
def memory_cap(mib: int) -> Iterator[None]:
    """This process in a v1 memory cgroup of its own that lets it charge ``mib`` MiB more
    (what it holds stays charged where it was): past the cap the kernel kills a worker
    (``HeldMemory`` puts each first in line), not it. Nothing where ``mib`` is 0."""
    if not mib:
        yield
        return
    here = cgroup.own_paths(Path("/proc/self/cgroup").read_text())
    parent = MEMORY / here["memory"].lstrip("/")
    group = parent / f"bench-memory-{os.getpid()}"
    group.mkdir(exist_ok=True)  # one a run before could not remove: its workers lingered
    try:
        (group / "memory.limit_in_bytes").write_text(str(mib << 20))
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield
    finally:
        (parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # the killed workers' charges leave with them
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def run(case: Case, s: Setting | None = None, cured: bool = False) -> RunRecord:
    """One watched epoch of ``case`` under ``s`` (its own setting by default), of its cured
    dataset with ``cured``."""
    with memory_cap(case.memory_cap_mib):
        return _run(case, s, cured)


def _run(case: Case, s: Setting | None, cured: bool) -> RunRecord:
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], start_new_session=case.load_apart
        )
        for _ in range(case.load)
    ]
    try:
        with warnings.catch_warnings():  # more workers than this host's cores: meant
            warnings.simplefilter("ignore", UserWarning)
            loader = ioprobe.watch(case.loader(s or case.setting, cured))
            it = iter(loader)
            try:
                for _ in it:
                    time.sleep(case.step_s)
            except RuntimeError:
                # a worker killed: the others end now, not when the iterator is collected
                # (the memory cgroup they are in is removed once they are gone)
                it._shutdown_workers()
                raise
        rec: RunRecord = loader.run
        return rec
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def rate(case: Case, s: Setting, cured: bool = False) -> float:
    """``case``'s measured rate under ``s``: 0 where a worker was killed (a setting past
    the memory-limited case's cap delivers nothing)."""
    try:
        rec = run(case, s, cured)
    except RuntimeError as e:
        killed = f"{e} {e.__cause__}"
        if case.memory_cap_mib and (
            "killed by signal" in killed or "exited unexpectedly" in killed
        ):
            return 0.0
        raise
    r = rec.measured_samples_per_s
    assert r is not None
    return r


def top_loader_advice(rec: RunRecord, cures: bool = False) -> Recommendation | None:
    """The first recommendation that changes a loader setting (or, with ``cures``, the data
    as a case's cure does), if it is the first of all that the user can act on today (no
    new hardware)."""
    for r in rec.recommendations:
        if r.kind in LOADER_KINDS or (cures and r.kind in CURE_KINDS):
            return r
        if r.kind not in ("more_cpu", "faster_storage"):
            return None
    return None


def advised_setting(rec: RunRecord, r: Recommendation) -> Setting:
    """The setting ``r`` asks for, from its change (the one as run where it has none)."""
    base = recorded_setting(rec)
    assert base is not None
    if r.change is None:
        return base
    ch = r.change
    return Setting(
        ch.workers if ch.workers is not None else base.workers,
        ch.prefetch_factor if ch.prefetch_factor is not None else base.prefetch_factor,
        ch.in_order if ch.in_order is not None else base.in_order,
    )


@dataclasses.dataclass
class Outcome:
    case: str
    advice: str  # the setting advised, or "none"
    predicted_gain: float  # 1.0 where nothing was advised
    measured_gain: float  # median of paired reruns
    best: str  # the measured best setting of the sweep
    best_gain: float
    advised_vs_best: float  # the advised setting's rate over the best's (1.0: it is the best)

    @property
    def error(self) -> float:
        return abs(self.predicted_gain / self.measured_gain - 1.0)


def label(base: Setting, s: Setting, cured: bool = False) -> str:
    ch = s.changes(base)
    said = ", ".join(f"{n}={b}" for n, _, b in ch) if ch else "as run"
    return f"items dealt at random, {said}" if cured else said


def validate(case: Case, pairs: int = 3, sweep: list[Setting] | None = None) -> Outcome:
    """Watch ``case``, apply its top loader advice and rerun it ``pairs`` times beside the
    setting as run; sweep ``sweep`` (the advised setting is always in it) for the best.
    Where the advice changes the data (``CURE_KINDS``) the reruns read the case's cured
    dataset, and the sweep covers it too."""
    rec = run(case)
    advice = top_loader_advice(rec, case.cured is not None)
    base = case.setting
    advised = advised_setting(rec, advice) if advice is not None else base
    cured = advice is not None and advice.kind in CURE_KINDS
    measured = rec.measured_samples_per_s or 0.0
    predicted = (
        advice.predicted_samples_per_s / measured
        if advice is not None and advice.predicted_samples_per_s and measured
        else 1.0
    )
    gains = []
    runs: dict[tuple[Setting, bool], list[float]] = {(base, False): [], (advised, cured): []}
    for _ in range(pairs):
        before = rate(case, base)
        after = rate(case, advised, cured) if (advised, cured) != (base, False) else before
        runs[base, False].append(before)
        runs[advised, cured].append(after)
        gains.append(after / before)
    for s in sweep or []:
        runs.setdefault((s, False), []).extend(rate(case, s) for _ in range(2))
    for s in [base, *(sweep or [])] if case.cured is not None else []:
        runs.setdefault((s, True), []).extend(rate(case, s, True) for _ in range(2))
    rates = {k: statistics.median(r) for k, r in runs.items()}
    top = max(rates, key=lambda k: rates[k])
    return Outcome(
        case=case.name,
        advice=label(base, advised, cured) if advice is not None else "none",
        predicted_gain=predicted,
        measured_gain=statistics.median(gains),
        best=label(base, *top),
        best_gain=rates[top] / rates[base, False],
        advised_vs_best=rates[advised, cured] / rates[top],
    )


def neighbours(base: Setting, workers: tuple[int, ...] = ()) -> list[Setting]:
    """A sweep around ``base``: the worker counts given, a doubled prefetch, out of order,
    and the pairs of those."""
    out = [Setting(w, base.prefetch_factor, base.in_order) for w in workers]
    out.append(Setting(base.workers, 2 * base.prefetch_factor, base.in_order))
    out.append(Setting(base.workers, base.prefetch_factor, False))
    out += [Setting(w, base.prefetch_factor, False) for w in workers]
    return out


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            "skewed-remote",
            lambda n: SkewedDataset(n, 0.002, 50, 150.0),
            16,
            Setting(4, 2, True),
            0.005,
            "2 ms blocked per sample, 1 in 50 blocked 300 ms (a slow remote object)",
        ),
        Case(
            "latency-bound",
            lambda n: SleepDataset(n, 0.004),
            8,
            Setting(2, 2, True),
            0.002,
            "4 ms blocked per sample, reads overlap freely",
        ),
        Case(
            "skewed-cpu",
            lambda n: SkewedCpu(n, 0.0005, 40, 0.06, slow_cpu=True),
            4,
            Setting(2, 2, True),
            0.001,
            "0.5 ms CPU per sample, 1 in 40 burns 60 ms holding the GIL",
        ),
        Case(
            "capped-store",
            lambda n: CappedStore(n, 0.004, 0.004),
            4,
            Setting(2, 2, True),
            0.001,
            "4 ms latency that overlaps, then 4 ms one read at a time (a bandwidth cap)",
        ),
        Case(
            "uniform-cpu",
            lambda n: SkewedCpu(n, 0.003, 10**9, 0.0, slow_cpu=True),
            4,
            Setting(1, 2, True),
            0.001,
            "3 ms CPU per sample, one worker on a host of more cores",
        ),
        Case(
            "mixed",
            lambda n: Mixed(n, 0.003, 0.001),
            4,
            Setting(2, 2, True),
            0.001,
            "3 ms blocked then 1 ms CPU per sample",
        ),
        Case(
            "foreign-load",
            lambda n: SkewedCpu(n, 0.003, 10**9, 0.0, slow_cpu=True),
            4,
            Setting(1, 2, True),
            0.001,
            "3 ms CPU per sample while a busy loop holds one core",
            load=1,
        ),
        Case(
            "out-of-order-skewed",
            lambda n: SkewedDataset(n, 0.002, 50, 150.0),
            16,
            Setting(4, 2, False),
            0.005,
            "the skewed remote case already handing batches over out of order",
        ),
        Case(
            "iterable-skewed",
            lambda n: SkewedIterable(n, 0.002, 40, 50.0),
            8,
            Setting(2, 2, True),
            0.002,
            "a stream split between workers, 2 ms blocked per item, 1 in 40 blocked 100 ms",
            cured=lambda n: SkewedIterable(n, 0.002, 40, 50.0, dealt=1),
        ),
        Case(
            "collate-cpu",
            lambda n: SleepDataset(n, 0.001),
            8,
            Setting(1, 2, True),
            0.001,
            "1 ms blocked per sample, collate burns 4 ms of CPU per batch of 8",
            collate=burning_collate,
        ),
        Case(
            "oversubscribed-cpu",
            lambda n: SkewedCpu(n, 0.002, 10**9, 0.0, slow_cpu=True),
            4,
            Setting(4, 2, True),
            0.0005,
            "2 ms CPU per sample, 4 workers already on the cores",
        ),
        Case(
            "gpu-bound",
            lambda n: SleepDataset(n, 0.001),
            8,
            Setting(2, 2, True),
            0.03,
            "1 ms blocked per sample, the consumer takes 30 ms per batch of 8",
        ),
    )
}
# the same busy loop in a session of its own: another user's job, which keeps its core
CASES["foreign-session"] = dataclasses.replace(
    CASES["foreign-load"],
    name="foreign-session",
    truth="3 ms CPU per sample while a busy loop in another session holds one core",
    load_apart=True,
)

# latency-bound's loader whose workers each hold 200 MiB, in a cgroup that lets the run
# charge 1,240 MiB: more workers pay until the memory runs out, and past it a worker is
# killed (the run fails). Measured only by the benchmark, as root on a v1 memory hierarchy.
CASES["memory-limited"] = Case(
    "memory-limited",
    lambda n: HeldMemory(n, 0.004, 200),
    8,
    Setting(2, 2, True),
    0.002,
    "4 ms blocked per sample, each worker holds 200 MiB, 1,240 MiB may be charged",
    memory_cap_mib=1240,
)

# The settings each case's sweep measures beside the one as run and the advised one.
SWEEPS: dict[str, list[Setting]] = {
    name: neighbours(case.setting, workers)
    for name, workers in (
        ("skewed-remote", (6, 8, 12, 16)),
        ("latency-bound", (4, 8, 16)),
        ("memory-limited", (4, 5, 6, 8)),
        ("skewed-cpu", (3, 4, 8)),
        ("capped-store", (4, 8)),
        ("gpu-bound", (4,)),
        ("uniform-cpu", (2, 3, 4)),
        ("mixed", (3, 4, 6, 8)),
        ("foreign-load", (2, 3, 4)),
        ("foreign-session", (2, 4, 8)),
        ("out-of-order-skewed", (8, 16, 32)),
        ("iterable-skewed", (4, 8, 16, 24)),
        ("collate-cpu", (2, 3, 4)),
        ("oversubscribed-cpu", (2, 3, 8)),
    )
    for case in (CASES[name],)
}

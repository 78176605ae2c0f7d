"""The probe across the ranks of a distributed job: ``torchrun -m ioprobe probe TARGET``.

Every rank lists and profiles the same target (and checks with the others that they see the
same dataset: a distributed probe measures shared storage). Then:

1. **One client**: rank 0 alone sweeps its read threads (1, 2, 4, ...) over the target, as the
   single-node probe does; the best level's thread count is what every rank reads with after.
2. **The saturation curve**: 1, 2, 4, ... up to every rank read at once, each level starting
   at a barrier so the clients contend for the storage the way training's ranks do. Clients
   are spread over the nodes first (two clients on two nodes, not two on one), and each reads
   its own share of the files, evicted from its node's page cache first for a cold probe. A
   level's aggregate is all bytes read over the span from the first client's start to the
   last one's end; each rank's own rate is kept beside it.
3. **CPU**: every rank decodes at once with its share of its node's cores, so a node's
   ranks contend for the cores as training's loaders do; the job's CPU stage is their sum.

Rank 0 gathers every rank's figures (``all_gather_object`` over gloo) and makes one record:
``distributed`` holds the hosts, each rank's figures and the curve; ``stages.storage`` is the
aggregate with every rank reading. Only rank 0 reports; the others return None. A rank that
dies or hangs does not hang the rest: each collective waits at most the phase's planned time
and ``rank_timeout_s`` more, then RankLostError names the missing ranks, and rank 0 keeps
the record of what was measured before (``partial``). PCIe, disk-to-GPU and the end-to-end
run are one node's: the single-node probe measures them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from ioprobe import capacity, units
from ioprobe.collect import cpu as cpu_mod
from ioprobe.collect import storage as st_mod
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.decode import choose
from ioprobe.collect.group import Group
from ioprobe.collect.phase_shares import COLD_MAX_BYTES
from ioprobe.collect.probe import LISTING_SHARE, Probe, ProbeOptions, _Plan
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.errors import BadInputError, IoprobeError, RankLostError, TargetError
from ioprobe.record import (
    ClientsPoint,
    CpuStage,
    Distributed,
    RankFigures,
    RankInfo,
    RunRecord,
    Stages,
    StoragePass,
    StorageStage,
    SweepPoint,
)
from ioprobe.redact import redact_url

T = TypeVar("T")
SHARES = {"one": 0.25, "curve": 0.45, "cpu": 0.30}  # of the budget left after listing
RANK_TIMEOUT_S = 30.0  # waited past a phase's planned end for a rank before it counts as lost
MIN_LEVEL_S = 0.5


def client_counts(world: int) -> list[int]:
    """1, 2, 4, ... and the whole world: the levels of the saturation curve."""
    out, k = [], 1
    while k < world:
        out.append(k)
        k *= 2
    return [*out, world]


def client_order(nodes: Sequence[int], local_ranks: Sequence[int]) -> list[int]:
    """The ranks in the order they join the curve: the first rank of every node, then the
    second of every node, ...; so k clients sit on as many nodes as k allows."""
    return sorted(range(len(nodes)), key=lambda r: (local_ranks[r], nodes[r], r))


@dataclass(frozen=True)
class _Level:
    """One rank's reads in one level of the curve, as gathered."""

    rank: int
    bytes: int
    items: int
    seconds: float
    started: float  # time.time(): the ranks' spans are compared on one clock
    ended: float
    p50_ms: float | None
    p99_ms: float | None
    errors: int


@dataclass(frozen=True)
class _Cpu:
    samples_per_s: float | None
    seconds_per_sample: float | None
    cores: int
    stage: CpuStage | None


def aggregate(clients: int, nodes: int, levels: Sequence[_Level]) -> ClientsPoint:
    """The curve's point from each client's reads: every byte over the whole span, and each
    client's own rate summed (the two agree when the clients read together)."""
    span = max(lv.ended for lv in levels) - min(lv.started for lv in levels)
    longest = max(lv.seconds for lv in levels)
    # clocks of different hosts may disagree: a span shorter than one client's reads is skew
    span = max(span, longest, 1e-9)
    total = sum(lv.bytes for lv in levels)
    p99 = [lv.p99_ms for lv in levels if lv.p99_ms is not None]
    return ClientsPoint(
        clients=clients,
        nodes=nodes,
        read_bytes_per_s=total / span,
        per_client_bytes_per_s=total / span / clients,
        rank_sum_bytes_per_s=sum(lv.bytes / max(lv.seconds, 1e-9) for lv in levels),
        seconds=span,
        latency_p99_ms=max(p99) if p99 else None,
        ranks=sorted(lv.rank for lv in levels),
    )


class DistributedProbe(Probe):
    """``DistributedProbe(options, info, group).run()``: the record on rank 0, None on the
    others. ``partial`` is rank 0's record of what was measured when a rank was lost or the
    probe interrupted (None elsewhere, or before anything was measured)."""

    _plans_phases = False  # its own shares (SHARES), and no DALI decode paths

    def __init__(
        self,
        options: ProbeOptions,
        info: RankInfo,
        group: Group,
        reporter: Reporter | None = None,
        rank_timeout_s: float = RANK_TIMEOUT_S,
    ) -> None:
        if options.pcie_only:
            raise BadInputError(
                "--pcie-only measures one host's link: run it without torchrun or srun"
            )
        if options.emulated:
            raise BadInputError(
                "--compute-ms-per-batch and --gpu-samples-per-s emulate one node's accelerator: "
                "the distributed probe measures storage and CPU across the ranks; run the "
                "emulated end-to-end probe on one node"
            )
        super().__init__(options, reporter if info.rank == 0 else SilentReporter())
        self.info = info
        self.group = group
        self.slack = rank_timeout_s
        self._dist = Distributed(
            launcher=info.launcher, world_size=info.world_size, nodes=1, missing_ranks=[]
        )
        self._hosts: list[str] = []
        self._nodes: list[int] = []
        self._local: list[int] = []
        self._usable: list[int] = []

    # ------------------------------------------------------------------ the phases

    def _run(self, started: float) -> RunRecord:
        o = self.options
        self._deadline = started + o.time_budget_s
        plan = self._agree(started)
        stages = Stages(storage=StorageStage(), pcie=self._pcie_unmeasured())
        loader = choose(o.loader, plan.profile.formats)
        self._so_far = (plan, stages, loader)
        left = max(self._deadline - time.perf_counter(), 3 * MIN_LEVEL_S)
        budget = {k: v * left for k, v in SHARES.items()}
        self._one_client(plan, stages.storage, budget["one"])
        self._curve(plan, stages.storage, budget["curve"])
        stages.cpu = self._cluster_cpu(plan, loader, stages.storage, budget["cpu"])
        stages.gpu = self._gpu_stage()
        record = self._record(plan, stages, loader)
        self._finish(record)
        record.duration_s = time.perf_counter() - started
        self.reporter.close()
        return record

    def _agree(self, started: float) -> _Plan:
        """List and profile the target on every rank, then check with the others: a rank
        that could not list it, or sees another dataset, fails every rank with its reason."""
        listing_s = LISTING_SHARE * self.options.time_budget_s + self.slack
        self.group.barrier("start", self.slack)
        plan: _Plan | None = None
        failure: str | None = None
        try:
            plan = self._plan(started)
        except IoprobeError as exc:
            failure = str(exc)
        host = socket.gethostname()
        mine = (
            host,
            self.info.local_rank,
            failure,
            None if plan is None else plan.profile.files,
            None if plan is None else plan.profile.bytes,
            None if plan is None else plan.usable,
        )
        seen = self.group.gather("listed", mine, listing_s)
        for r, (_, _, why, *_rest) in enumerate(seen):
            if why is not None:
                raise TargetError(f"rank {r} could not probe the target: {why}")
        files = {(s[3], s[4]) for s in seen}
        if len(files) > 1:
            shown = "; ".join(
                f"rank {r}: {s[3]:,} files, {s[4]:,} bytes" for r, s in enumerate(seen)
            )
            raise TargetError(
                f"{redact_url(self.options.target)}: the ranks see different datasets ({shown}); "
                "a distributed probe reads storage every rank shares"
            )
        self._hosts = sorted({s[0] for s in seen})
        self._nodes = [self._hosts.index(s[0]) for s in seen]
        self._local = [s[1] for s in seen]
        self._usable = [s[5] or 1 for s in seen]
        self._dist.hosts = self._hosts
        self._dist.nodes = len(self._hosts)
        self._dist.ranks = [
            RankFigures(rank=r, host=s[0], local_rank=s[1], node=self._nodes[r])
            for r, s in enumerate(seen)
        ]
        assert plan is not None
        self.reporter.result(
            f"{self.info.world_size} ranks on {len(self._hosts)} "
            f"node{'s' if len(self._hosts) != 1 else ''} ({self.info.launcher})"
        )
        return plan

    def _chosen(self, plan: _Plan) -> list[FileEntry]:
        """The files every storage phase reads: the same for every rank (the same seed)."""
        return st_mod.select_entries(plan.ds.entries, COLD_MAX_BYTES, self.options.seed)

    @property
    def _cache(self) -> str:
        return "cold" if "cold" in self.options.passes else "warm"

    def _one_client(self, plan: _Plan, st: StorageStage, seconds: float) -> None:
        """Rank 0 alone sweeps its read threads; every rank then reads with the best count."""
        o = self.options
        threads: int | None = None
        if self.info.rank == 0:
            self.reporter.phase("storage (one client)")
            cache = "cold" if plan.ds.remote else self._cache
            chosen = self._chosen(plan)
            try:
                one = st_mod.measure_pass(
                    plan.ds,
                    chosen,
                    cache,
                    seconds,
                    reporter=self.reporter,
                    seed=o.seed,
                    failures=self.failures,
                )
            except OSError as exc:
                raise TargetError(redact_url(f"{plan.ds.target}: {exc}")) from None
            self._dist.one_client = one
            threads = one.best_concurrency or 1
        grace = max(st_mod.LEVEL_GRACE_S, 0.1 * seconds)
        threads = self.group.gather("one client", threads, seconds + grace + self.slack)[0]
        self._dist.threads_per_rank = threads

    def _curve(self, plan: _Plan, st: StorageStage, seconds: float) -> None:
        """The levels of clients, each started together at a barrier; the storage stage is
        the last, every rank reading."""
        counts = client_counts(self.info.world_size)
        per_level = max(seconds / len(counts), MIN_LEVEL_S)
        grace = max(st_mod.LEVEL_GRACE_S, 0.1 * per_level)
        order = client_order(self._nodes, self._local)
        chosen = self._chosen(plan)
        ranges = st_mod.serves_ranges(plan.ds, st_mod.split_streamed(chosen)[1])
        reader = st_mod.reader_for(plan.ds, ranges)
        threads = self._dist.threads_per_rank or 1
        cold = self._cache == "cold" and not plan.ds.remote
        self.reporter.phase(f"storage ({len(counts)} client levels, {threads} threads each)")
        for i, k in enumerate(counts):
            active = order[:k]
            slot = active.index(self.info.rank) if self.info.rank in active else None
            mine, first_stream = (
                st_mod.plan_share(chosen, k, slot, threads, ranges) if slot is not None else ([], 0)
            )
            if cold and mine:
                st_mod.evict(sorted({p for p, _, _ in mine}))
            # eviction opens every file of a rank's share: a slow one is waited for
            self.group.barrier(f"level {k}", per_level + self.slack)
            got = (
                self._read(reader, mine, first_stream, threads, per_level, grace, i, not cold)
                if mine
                else None
            )
            seen = self.group.gather(f"level {k} read", got, per_level + grace + self.slack)
            levels = [lv for lv in seen if lv is not None]
            if not levels or not any(lv.items for lv in levels):
                raise TargetError(
                    f"{redact_url(plan.ds.target)}: nothing was read with {k} clients reading"
                )
            nodes = len({self._nodes[lv.rank] for lv in levels})
            point = aggregate(k, nodes, levels)
            self._dist.curve.append(point)
            self.reporter.result(
                f"{k:>3} client{'s' if k != 1 else ' '} on {nodes} node{'s' if nodes != 1 else ' '}: "
                f"{units.bandwidth(point.read_bytes_per_s):>11}  "
                f"({units.bandwidth(point.per_client_bytes_per_s)} each)"
            )
            self.reporter.update((i + 1) / len(counts), f"{k} clients")
            if k == self.info.world_size:
                self._keep_world_level(levels, plan, st)

    def _read(
        self,
        reader: Callable[..., None],
        items: list[st_mod.Item],
        first_stream: int,
        threads: int,
        seconds: float,
        grace: float,
        seed: int,
        cycle: bool = False,
    ) -> _Level:
        """One rank's reads in one level; with ``cycle`` (warm or remote data) it reads its
        share again until the level's time is up, so that every level of the curve lasts as
        long however fast the storage: two ranks that read 52 MB warm in a few milliseconds
        each measured the barrier's skew (aggregate 0.71 of their summed rates)."""
        started = time.time()
        res = st_mod.run_level(
            reader,
            items,
            threads,
            seconds,
            seed=self.options.seed + seed,
            hard_s=seconds + grace,
            first_stream=first_stream,
            cycle=cycle,
        )
        for path, key, text in res.failures:
            self.failures.add(path, key, text)
        lat = sorted(res.latencies_ns)
        return _Level(
            rank=self.info.rank,
            bytes=res.bytes,
            items=res.items,
            seconds=res.seconds,
            started=started,
            ended=started + res.seconds,
            p50_ms=st_mod.latency_ms(lat, 0.5),
            p99_ms=st_mod.latency_ms(lat, 0.99),
            errors=res.errors,
        )

    def _keep_world_level(self, levels: list[_Level], plan: _Plan, st: StorageStage) -> None:
        """Every rank reading: each rank's figures, and the storage stage's aggregate."""
        for lv in levels:
            fig = self._dist.ranks[lv.rank]
            fig.read_bytes = lv.bytes
            fig.read_seconds = lv.seconds
            fig.read_bytes_per_s = lv.bytes / max(lv.seconds, 1e-9)
            fig.files_per_s = lv.items / max(lv.seconds, 1e-9)
            fig.latency_p50_ms = lv.p50_ms
            fig.latency_p99_ms = lv.p99_ms
            fig.read_errors = lv.errors
        world = self._dist.curve[-1]
        # the stage's pass is the whole world's level, as if one client read with every
        # rank's threads: what training's ranks together get from the storage
        lat = [lv.p50_ms for lv in levels if lv.p50_ms is not None]
        point = SweepPoint(
            concurrency=(self._dist.threads_per_rank or 1) * len(levels),
            bytes=sum(lv.bytes for lv in levels),
            items=sum(lv.items for lv in levels),
            seconds=world.seconds,
            read_bytes_per_s=world.read_bytes_per_s,
            files_per_s=sum(lv.items for lv in levels) / world.seconds,
            latency_p50_ms=sorted(lat)[len(lat) // 2] if lat else None,
            latency_p99_ms=world.latency_p99_ms,
            errors=sum(lv.errors for lv in levels),
        )
        cache: Literal["cold", "warm"] = (
            "cold" if plan.ds.remote or self._cache == "cold" else "warm"
        )
        one = self._dist.one_client
        setattr(
            st,
            cache,
            StoragePass(
                cache=cache,
                sweep=[point],
                best_concurrency=point.concurrency,
                read_bytes_per_s=point.read_bytes_per_s,
                files_per_s=point.files_per_s,
                latency_p50_ms=point.latency_p50_ms,
                latency_p99_ms=point.latency_p99_ms,
                eviction=one.eviction if one is not None else None,
            ),
        )
        st.read_bytes_per_s = world.read_bytes_per_s
        st.capacity_samples_per_s = capacity.storage_from_rate(
            world.read_bytes_per_s, plan.profile.sample_bytes_mean
        )
        st.basis = (
            f"{'remote' if plan.ds.remote else self._cache}: all {self.info.world_size} ranks "
            f"on {self._dist.nodes} node{'s' if self._dist.nodes != 1 else ''} reading at once"
        )

    def _cluster_cpu(self, plan: _Plan, loader: str, st: StorageStage, seconds: float) -> CpuStage:
        """Every rank decodes at once with its share of its node's cores; the job's CPU
        stage is the sum of what they sustained."""
        self.reporter.phase(f"cpu ({loader}, every rank)")
        payloads, _ = self._payloads(plan, loader, st, seconds / 3)
        on_node = sum(1 for n in self._nodes if n == self._nodes[self.info.rank])
        cores = max(1, self._usable[self.info.rank] // on_node)
        # reading the decode inputs took each rank its own time: the decoding starts together
        self.group.barrier("cpu", seconds / 3 + self.slack)
        cpu_s = max(seconds - seconds / 3, MIN_LEVEL_S)
        mine = _Cpu(None, None, cores, None)
        if payloads:
            stage = cpu_mod.measure_cpu(loader, payloads, cores, cpu_s, reporter=self.reporter)
            mine = _Cpu(stage.capacity_samples_per_s, stage.cpu_seconds_per_sample, cores, stage)
        seen = self.group.gather("cpu done", mine, cpu_s * 2 + self.slack)
        for r, c in enumerate(seen):
            fig = self._dist.ranks[r]
            fig.cpu_samples_per_s = c.samples_per_s
            fig.cpu_seconds_per_sample = c.seconds_per_sample
            fig.usable_cores = c.cores
        return _cpu_sum(seen, loader, rank0=seen[0].stage)

    # ------------------------------------------------------------------ the record

    def _finish(self, record: RunRecord) -> None:
        record.distributed = self._dist
        record.settings.gpus = self.options.gpus * self.info.world_size
        record.notes.append(
            f"a distributed probe across {self.info.world_size} ranks: storage is the "
            "aggregate of every rank reading at once, CPU the sum of each rank's share of its "
            "node's cores; PCIe, disk-to-GPU and the end-to-end run are one node's (run "
            "ioprobe probe on one node for them)"
        )
        if self._dist.threads_per_rank is not None:
            record.notes.append(
                f"each rank read with {self._dist.threads_per_rank} threads, the best of rank "
                "0's sweep reading alone (distributed.one_client)"
            )

    def _interrupted(self, started: float) -> RunRecord | None:
        """Rank 0's record of what was gathered before a rank was lost or the probe was
        stopped: the curve's levels that ended, each rank's figures known by then."""
        if self.info.rank != 0 or self._so_far is None:
            return None
        plan, stages, loader = self._so_far
        st = stages.storage
        if not self._dist.curve and self._dist.one_client is None:
            return None
        one = self._dist.one_client
        if st.cold is None and st.warm is None and one is not None:
            setattr(st, one.cache, one)  # stopped before the ranks read together
        if st.read_bytes_per_s is None:
            top = max(self._dist.curve, key=lambda p: p.read_bytes_per_s, default=None)
            rate = (
                top.read_bytes_per_s if top is not None else (one.read_bytes_per_s if one else None)
            )
            if rate:
                st.read_bytes_per_s = rate
                st.capacity_samples_per_s = capacity.storage_from_rate(
                    rate, plan.profile.sample_bytes_mean
                )
                st.basis = "the most any level of clients read before the probe stopped"
        record = self._record(plan, stages, loader)
        self._finish(record)
        record.dataset.read_errors = self.failures.counts()
        record.duration_s = time.perf_counter() - started
        record.complete = False
        record.interrupted = self.reporter.current
        return record

    def run(self) -> RunRecord | None:  # type: ignore[override]
        """The job's record on rank 0, None on the others. A lost rank raises RankLostError
        on every rank that remains, after ``partial`` is set on rank 0 (naming the lost)."""
        started = time.perf_counter()
        try:
            record = super().run()
        except RankLostError as exc:
            self._dist.missing_ranks = sorted(exc.missing)
            self.partial = self._interrupted(started)
            raise
        return record if self.info.rank == 0 else None


def _cpu_sum(seen: Sequence[_Cpu], loader: str, rank0: CpuStage | None) -> CpuStage:
    rates = [c.samples_per_s for c in seen if c.samples_per_s]
    costs = sorted(c.seconds_per_sample for c in seen if c.seconds_per_sample)
    stage = CpuStage(loader=loader, usable_cores=sum(c.cores for c in seen))
    if rates:
        stage.capacity_samples_per_s = sum(rates)
        stage.cpu_seconds_per_sample = costs[len(costs) // 2] if costs else None
    if rank0 is not None:
        stage.sweep = rank0.sweep
        stage.output_bytes_per_sample = rank0.output_bytes_per_sample
        stage.errors = rank0.errors
    return stage

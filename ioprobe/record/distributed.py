"""A distributed job's part of a record: where this process sat among the ranks, and what
each rank measured as rank 0 gathered it (the probe's clients curve, a watched job's loaders).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ioprobe.record.stages import StoragePass


@dataclass
class RankInfo:
    """Where the process that made a record sat in a distributed job, as its launcher or its
    initialised process group told it (``collect.distributed``); absent outside one, and in
    a world of one rank."""

    # "torchrun", "slurm", "lightning", "mpirun", "accelerate", or "torch.distributed" (a
    # process group whose launcher set nothing ioprobe reads)
    launcher: str
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int | None = None  # processes on this node, where the launcher says
    node_rank: int | None = None
    nodes: int | None = None
    master: str | None = None  # the rendezvous host (and port), or SLURM's first node
    node_names: list[str] = field(default_factory=list)  # SLURM's node list, expanded
    # this rank's share of its host's cores by the affinity sets of the ranks beside it
    # (procfs.core_share), where all of them were found; None where not
    core_share: float | None = None


@dataclass
class RankFigures:
    """One rank's part of a distributed run: where it ran and what it measured. A probe's
    ranks fill the read and CPU figures; a watched job's ranks the loader figures."""

    rank: int
    host: str = ""
    local_rank: int = 0
    node: int = 0  # index into Distributed.hosts
    # the probe: this rank's reads while every rank read (the whole world's level)
    read_bytes: int = 0
    read_seconds: float | None = None
    read_bytes_per_s: float | None = None
    files_per_s: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    read_errors: int = 0
    cpu_seconds_per_sample: float | None = None
    cpu_samples_per_s: float | None = None  # its share of the node's cores, all ranks decoding
    usable_cores: int | None = None
    # a watched job: this rank's loader
    samples: int = 0
    wall_seconds: float | None = None
    samples_per_s: float | None = None
    stall_fraction: float | None = None  # of its wall time, waiting for a batch
    step_ms: float | None = None  # median time between batches, its training step included
    ready_ms_p50: float | None = None  # data-ready latency: how long next() blocked,
    ready_ms_p95: float | None = None  # after the first round of batches
    ready_ms_p99: float | None = None
    worker_batch_ms_p50: dict[str, float] = field(default_factory=dict)  # by worker id
    bottleneck: str | None = None  # this rank's own verdict: storage, cpu, ...
    # its loader's storage stage: the evidence a storage-bound straggler is set against
    storage_samples_per_s: float | None = None


@dataclass
class ClientsPoint:
    """Aggregate read bandwidth with ``clients`` ranks reading at once (each with the same
    threads): the curve that shows where shared storage saturates."""

    clients: int
    nodes: int  # distinct hosts among them
    read_bytes_per_s: float  # all bytes over the span from the first start to the last end
    per_client_bytes_per_s: float
    rank_sum_bytes_per_s: float  # each rank's own rate, summed
    seconds: float
    latency_p99_ms: float | None = None
    ranks: list[int] = field(default_factory=list)


@dataclass
class Distributed:
    """A run across the ranks of a distributed job, as rank 0 gathered it."""

    launcher: str  # as RankInfo.launcher
    world_size: int
    nodes: int
    hosts: list[str] = field(default_factory=list)
    ranks: list[RankFigures] = field(default_factory=list)
    curve: list[ClientsPoint] = field(default_factory=list)  # the probe's saturation curve
    threads_per_rank: int | None = None  # the probe's concurrent reads in each rank
    one_client: StoragePass | None = None  # rank 0 alone, sweeping its threads
    missing_ranks: list[int] = field(default_factory=list)  # gone before the end
    # a watched job: waiting that the slowest rank exposed to every rank (synchronous steps)
    exposed_wait_seconds: float | None = None
    exposed_fraction: float | None = None  # of the job's wall time
    steps_aligned: int = 0  # steps whose waits were compared across ranks
    # a watched job: the rank whose record the merged one is (its stages, host, verdict and
    # advice): the slowest, since every synchronous step waits for it; None in records made
    # before it was chosen, which took the lowest rank's
    verdict_rank: int | None = None

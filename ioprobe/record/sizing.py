"""The records the analysis writes: a what-if's change and its deltas, a sizing (its inputs,
rows, MLPerf Storage units, density guide, references, prices and cluster fit) and
``ioprobe tune``'s trials, with the storage classes they are stated in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ioprobe.record.stages import Kind, StageName, Stages, SweepPoint

StorageScope = Literal["local", "network", "object", "given"]


@dataclass
class StorageClassInfo:
    """A kind of storage by its datasheet figures (see ioprobe.analysis.catalog).

    ``local`` figures are per device in each node, ``network`` ones are a filer reached over
    one link and shared by all nodes, ``object`` ones are per connection. ``given`` is a rate
    typed on the command line: bandwidth only.
    """

    name: str
    label: str
    scope: StorageScope
    seq_read_bytes_per_s: float
    iops_4k: float | None = None  # None: no per-request limit
    iops_128k: float | None = None
    latency_s: float = 0.0
    source: str = ""
    # a shared storage a distributed probe measured: what one node read from it, where
    # seq_read_bytes_per_s is what every node together read; None: no per-node limit
    node_bytes_per_s: float | None = None


CacheOrder = Literal["shuffled", "sequential", "static"]


@dataclass
class Change:
    """A what-if: the resources to change, everything else as recorded. None: unchanged."""

    workers: int | None = None  # loader workers per GPU process
    # a DataLoader's queue: batches each worker may hold, and whether they are handed over
    # in the sampler's order (predicted by replaying the run's batches, loader_sim)
    prefetch_factor: int | None = None
    in_order: bool | None = None
    cores: int | None = None  # CPU cores per node the loader may use
    storage: StorageClassInfo | None = None
    gpus: int | None = None  # GPUs per node, one training process each
    cache_bytes: float | None = None  # RAM (or local NVMe) cache in front of storage
    cache_order: CacheOrder | None = None  # None: the recorded sampler's order
    pcie: str | None = None  # e.g. gen4x16
    gpu_decode: bool = False
    # a decode path the probe measured (pillow, dali-cpu; dali-gpu is gpu_decode, measured)
    decode: str | None = None
    # a probe of the same storage (whatif --probe): its concurrency sweep, the curve a
    # watched run's storage follows at a new number of readers in place of the run's own
    # evidence; empty: none given
    storage_sweep: list[SweepPoint] = field(default_factory=list)
    storage_sweep_source: str | None = None  # that probe: its file, target and pass


@dataclass
class StageDelta:
    stage: StageName
    before: float | None
    after: float | None
    why: str


@dataclass
class WhatIfData:
    """What a ``whatif`` record changed, and the record it started from."""

    change: Change
    base_kind: Kind
    base_stages: Stages
    base_bottleneck: StageName
    base_predicted_samples_per_s: float
    base_measured_samples_per_s: float | None = None
    base_gpu_idle_fraction: float | None = None
    deltas: list[StageDelta] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    # those of them the predicted rate rests on that the run could not check
    unchecked: list[str] = field(default_factory=list)


@dataclass
class EmulatedWorkload:
    """An MLPerf Storage training workload as its benchmark emulates it (``size --workload``):
    the sample size, step and utilisation threshold that set the sizing's inputs."""

    name: str  # unet3d, resnet50, cosmoflow, retinanet
    accelerator: str  # the simulated accelerator: A100, H100, B200
    batch_size: int
    compute_seconds: float  # train.computation_time: the emulated step per batch
    au_threshold: float
    source: str  # the workload configuration the figures come from


@dataclass
class SizeInputs:
    """The numbers a sizing is computed from, and where each came from."""

    sample_bytes: float
    gpu_samples_per_s: float  # one GPU's appetite with data always ready
    cpu_seconds_per_sample: float | None = None
    cores: float | None = None  # per node; None: CPU not limiting
    nodes: int = 1
    target_utilization: float = 0.9
    in_flight: int = 64  # reads in flight per node
    dataset_bytes: float | None = None
    nic_bytes_per_s: float | None = None  # per node
    # a node's ranks decoding at once, as a distributed probe measured them: the CPU stage
    # per node in place of cores / cpu_seconds_per_sample; None: from those two
    node_cpu_samples_per_s: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    # bytes per read request where it is not a sample: samples packed in shards are read a
    # shard at a time (None: a sample per request)
    request_bytes: float | None = None
    # the MLPerf Storage workload whose emulation is sized (None: the user's own workload)
    workload: EmulatedWorkload | None = None


@dataclass
class SizeRow:
    storage: str
    gpus: int  # per node
    nodes: int
    predicted_samples_per_s: float
    gpu_utilization: float
    bottleneck: StageName
    storage_samples_per_s: float
    cpu_samples_per_s: float | None
    gpu_samples_per_s: float
    cores_needed: float | None = None  # per node, to feed these GPUs fully
    cache_bytes_static: float | None = None  # a pinned cache that lifts storage to the GPUs
    cache_bytes_lru: float | None = None  # the same with a shuffled LRU page cache
    cost: float | None = None  # the configuration's price (--cost); None: not priced
    cost_per_sample_per_s: float | None = None  # the price of each delivered sample/s


@dataclass
class ClassUnits:
    """One storage class in MLPerf Storage's terms: the accelerators it keeps at or above
    the target accelerator utilisation (AU), and the throughput that takes. MLPerf Storage
    gives the storage all the client hosts it wants; ``storage_accelerators`` is that count,
    ``accelerators`` the count with this sizing's hosts (their cores and NICs)."""

    storage: str
    accelerators: int  # all nodes, with the hosts' limits
    accelerators_per_node: int
    au: float | None  # the AU at ``accelerators``; None where it keeps none
    samples_per_s: float  # delivered at ``accelerators``, all nodes
    mib_per_s: float  # the same in MiB/s (2**20 bytes per MiB), as MLPerf Storage states it
    storage_accelerators: int  # the storage alone: hosts never bind
    binds: str  # what stops one accelerator more per node: storage, cpu, nic, or none
    cores_per_node: float | None = None  # loader cores ``accelerators_per_node`` need
    node_bytes_per_s: float = 0.0  # what one node pulls at ``accelerators_per_node``
    cost: float | None = None  # with --cost: the price of ``accelerators`` on this class
    cost_per_sample_per_s: float | None = None


@dataclass
class DensityRow:
    """What one storage class delivers to one node at a sample size, and which of its
    limits sets that: its bandwidth, its random-read IOPS, or the latency of each read."""

    storage: str
    bytes_per_s: float
    share_of_bandwidth: float  # of the datasheet's sequential read
    limit: str  # bandwidth, iops or latency


@dataclass
class DensityGuide:
    """The dataset's density and the storage bandwidth and reads one GPU needs at it, with
    each class's delivery at this sample size and at one of the other density."""

    sample_bytes: float
    density: str  # low, medium or high
    gpu_samples_per_s: float  # one GPU's appetite: reads per second
    gpu_bytes_per_s: float  # one GPU fed fully
    target_bytes_per_s: float  # one GPU at the target utilisation
    node_gpus: int = 8  # the node shape the guidance states a node's need for
    rows: list[DensityRow] = field(default_factory=list)
    contrast_bytes: float = 0.0  # a sample size of the other regime
    contrast_rows: list[DensityRow] = field(default_factory=list)


@dataclass
class ReferencePoint:
    """A published MLPerf Storage result, and how many nodes like the sized one it would feed."""

    system: str
    version: str
    division: str
    workload: str
    accelerator: str
    accelerators: int
    bytes_per_s: float
    source: str
    hosts: int = 0  # client hosts; 0: not published
    sample_bytes: float = 0.0  # the workload's record size; 0: not known
    nodes_fed: float = 0.0  # bytes_per_s / one sized node's need at the target


@dataclass
class References:
    node_gpus: int  # the node shape the need is stated for
    node_bytes_per_s: float  # one such node's need at the target utilisation
    points: list[ReferencePoint] = field(default_factory=list)
    source: str = ""


@dataclass
class CostInputs:
    """Prices from --cost: per GPU, per CPU core, per storage class (a local class per node,
    a network or object class once for every node)."""

    currency: str
    source: str  # the file
    gpu: float | None = None
    core: float | None = None
    storage: dict[str, float] = field(default_factory=dict)


@dataclass
class Cheapest:
    storage: str
    gpus: int
    utilization: float
    cores_needed: float | None
    text: str
    cost: float | None = None  # with --cost: the configuration's price


@dataclass
class NodeFit:
    """How many nodes of ``gpus`` GPUs a measured shared storage feeds at the target."""

    gpus: int  # per node
    nodes: int  # the most nodes kept at or above the target utilisation
    next_bound: str  # what binds one node more: storage, cpu
    next_utilization: float  # with one node more
    asked_nodes: int | None = None  # --nodes, where above 1
    asked_utilization: float | None = None
    asked_bound: str | None = None
    text: str = ""


@dataclass
class ClusterSizing:
    """A sizing across nodes from a distributed probe: the figures it measured and the
    nodes they feed."""

    aggregate_bytes_per_s: float  # the clients curve's peak: all nodes together
    node_bytes_per_s: float  # what one node reads from the storage
    node_cpu_samples_per_s: float | None  # a node's ranks decoding at once
    clients: int  # the most clients the curve measured
    hosts: int
    saturated: bool  # whether the curve flattened: if not, the storage may give more
    fits: list[NodeFit] = field(default_factory=list)


@dataclass
class TuneTrial:
    """One trial of ``ioprobe tune``: the unchanged script run under one DataLoader setting,
    stopped once its batches were measured."""

    workers: int
    prefetch_factor: int
    in_order: bool
    predicted_samples_per_s: float | None  # the loader replay's, from the first trial
    measured_samples_per_s: float | None  # None: the trial delivered no record
    memory_bytes: float | None = None  # what the setting holds (loader_sim.memory)
    batches: int = 0  # batches it measured
    exit_code: int | None = None  # the script's, stopped by the trial (0) or on its own
    note: str = ""  # why it has no figure, or what it changes beyond speed


@dataclass
class TuneData:
    """What ``ioprobe tune`` tried: the setting as the script has it first, then the
    settings the loader replay ranked, each measured by a trial."""

    trials: list[TuneTrial] = field(default_factory=list)
    trial_batches: int = 0  # batches each trial measured after its workers' first round
    best: int | None = None  # index of the measured best trial
    in_run: bool = False  # the trials were windows of one run's first epoch (--in-run)
    notes: list[str] = field(default_factory=list)  # why settings planned were not tried
    interrupted_by: int | None = None  # the signal that stopped the trials (Ctrl-C: 2)


@dataclass
class SizeData:
    inputs: SizeInputs
    storage: list[StorageClassInfo] = field(default_factory=list)
    gpu_counts: list[int] = field(default_factory=list)
    rows: list[SizeRow] = field(default_factory=list)
    cheapest: Cheapest | None = None
    assumptions: list[str] = field(default_factory=list)
    cluster: ClusterSizing | None = None  # from a distributed probe's clients curve
    units: list[ClassUnits] = field(default_factory=list)  # per class, MLPerf Storage's terms
    density: DensityGuide | None = None
    references: References | None = None  # published MLPerf Storage results beside the need
    costs: CostInputs | None = None  # --cost: rows carry a price and the cheapest is by price

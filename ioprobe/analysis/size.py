"""Hardware sizing: how many GPUs each storage class keeps busy, from a record or from numbers.

A sizing is the pipeline model evaluated on a grid: each storage class x each GPU count, with
the CPU and GPU figures held per sample. Every row is a ``pipeline_model`` call, so a sizing
table can never disagree with what ``whatif`` would say for the same configuration.

From a distributed probe the measured shared storage joins the grid as a class of its own
(``measured``: every node together reads the clients curve's peak, one node what the curve
saw one node read), and the sizing says how many nodes of G GPUs it feeds (``fit_nodes``).
"""

from __future__ import annotations

import dataclasses
import math

from ioprobe import capacity, units
from ioprobe.analysis.cache import cache_for_hit_rate
from ioprobe.analysis.catalog import read_rate
from ioprobe.analysis.cluster import ClusterFigures, cluster_figures
from ioprobe.analysis.cost import row_cost
from ioprobe.analysis.density import density_guide
from ioprobe.analysis.mlperf import place
from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.capacity import density_class
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Cheapest,
    ClassUnits,
    ClusterSizing,
    CostInputs,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    NodeFit,
    Recommendation,
    ReferencePoint,
    RunRecord,
    SizeData,
    SizeInputs,
    SizeRow,
    Stages,
    StorageClassInfo,
    StorageStage,
)

DEFAULT_GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MAX_GPUS = 1 << 20
MAX_NODES = 1 << 20
MEASURED = "measured"  # the grid's name for the storage a distributed probe measured
REFERENCE_NODE_GPUS = 8  # the node shape a need is stated for when --gpus names none
MIB = 1 << 20  # MLPerf Storage states throughput in MiB/s
CHECK_STEPS = 8  # model runs that check the closed form of gpus_supported


def storage_samples_per_s(cls: StorageClassInfo, inp: SizeInputs) -> float:
    """All nodes' storage capacity in samples/s for this class.

    Local devices are one per node, so they add up. A network class is one filer shared by
    every node (its figure is the filer's link), so it does not. Object storage figures are
    per connection and object stores scale out, so each node's ``in_flight`` connections add
    up. A per-node NIC caps what each node can pull from a network or object store, as a
    measured storage's own per-node rate does.
    """
    size = inp.sample_bytes
    # a storage class's per-request latency is paid per read: per shard where samples are
    # packed, per sample otherwise
    request = inp.request_bytes or size
    per_node = read_rate(cls, request, inp.in_flight)
    if cls.node_bytes_per_s:
        per_node = min(per_node, cls.node_bytes_per_s)
    if cls.scope in ("object", "network", "given") and inp.nic_bytes_per_s:
        per_node = min(per_node, inp.nic_bytes_per_s)
    if cls.scope == "network":
        shared = read_rate(cls, request, inp.in_flight * inp.nodes)
        total = min(per_node * inp.nodes, shared)
    else:
        total = per_node * inp.nodes
    return total / size


def stages_for(cls: StorageClassInfo, gpus: int, inp: SizeInputs) -> Stages:
    """The stages of ``inp.nodes`` nodes with ``gpus`` GPUs each on storage ``cls``."""
    cpu = None
    if inp.node_cpu_samples_per_s:
        cpu = inp.node_cpu_samples_per_s * inp.nodes
    elif inp.cpu_seconds_per_sample and inp.cores:
        cpu = inp.cores * inp.nodes / inp.cpu_seconds_per_sample
    return Stages(
        storage=StorageStage(capacity_samples_per_s=storage_samples_per_s(cls, inp)),
        cpu=CpuStage(
            capacity_samples_per_s=cpu,
            cpu_seconds_per_sample=inp.cpu_seconds_per_sample,
            usable_cores=int(inp.cores) if inp.cores else None,
        ),
        gpu=GpuStage(
            capacity_samples_per_s=capacity.gpus_linear(inp.gpu_samples_per_s, gpus * inp.nodes),
            method="given",
        ),
    )


def _row(cls: StorageClassInfo, gpus: int, inp: SizeInputs) -> tuple[SizeRow, PipelineFindings]:
    stages = stages_for(cls, gpus, inp)
    pf = pipeline_model(stages)
    caps = pf.capacities
    demand = gpus * inp.nodes * inp.gpu_samples_per_s
    storage = caps["storage"] or math.inf
    cores_needed = (
        gpus * inp.gpu_samples_per_s * inp.cpu_seconds_per_sample
        if inp.cpu_seconds_per_sample
        else None
    )
    static = lru = None
    if inp.dataset_bytes and storage < demand:
        # only misses reach storage: it keeps up once the hit rate h has storage / (1 - h) >= demand
        need = 1.0 - storage / demand
        static = cache_for_hit_rate(need, inp.dataset_bytes, "static")
        lru = cache_for_hit_rate(need, inp.dataset_bytes, "shuffled")
    row = SizeRow(
        storage=cls.name,
        gpus=gpus,
        nodes=inp.nodes,
        predicted_samples_per_s=pf.predicted_samples_per_s,
        gpu_utilization=pf.gpu_utilization or 0.0,
        bottleneck=pf.bottleneck,
        storage_samples_per_s=storage,
        cpu_samples_per_s=caps["cpu"],
        gpu_samples_per_s=demand,
        cores_needed=cores_needed,
        cache_bytes_static=static,
        cache_bytes_lru=lru,
    )
    return row, pf


def gpus_supported(cls: StorageClassInfo, inp: SizeInputs) -> int:
    """The most GPUs per node the other stages keep at or above the target utilisation.

    Utilisation at ``n`` GPUs is ``min(supply, n * R) / (n * R)`` where supply is the smallest
    non-GPU capacity, so it never rises with ``n`` and the answer is ``floor(supply / (U*R))``
    per node. The closed form is then checked against the model at n and n + 1, so the two
    can't disagree at a rounding boundary.
    """
    probe = stages_for(cls, 1, inp).capacities()
    supply = min(v for k, v in probe.items() if k != "gpu" and v is not None)
    per_node = inp.gpu_samples_per_s * inp.nodes * inp.target_utilization
    # infinite where storage and CPU do not limit, or where R x U is too small for a float
    ratio = supply / per_node if per_node > 0 else math.inf
    n = min(int(ratio), MAX_GPUS) if math.isfinite(ratio) else MAX_GPUS

    def ok(k: int) -> bool:
        return k >= 1 and (pipeline_model(stages_for(cls, k, inp)).gpu_utilization or 0.0) >= (
            inp.target_utilization - 1e-12
        )

    # the closed form is off by a rounding step at most, so a few checks settle it; a walk
    # of up to MAX_GPUS model runs would hang on inputs where the two disagree further
    for _ in range(CHECK_STEPS):
        if n > 0 and not ok(n):
            n -= 1
        elif n < MAX_GPUS and ok(n + 1):
            n += 1
        else:
            break
    return n


def size(
    inp: SizeInputs,
    classes: list[StorageClassInfo],
    gpu_counts: list[int],
    base: RunRecord | None = None,
    fit_gpus: list[int] | None = None,
    *,
    costs: CostInputs | None = None,
    references: list[ReferencePoint] | None = None,
) -> RunRecord:
    """A ``size`` record: one row per storage class x GPU count, and per class the GPUs it
    supports at the target utilisation, also in MLPerf Storage's terms. The record's own
    verdict (stages, bottleneck, predicted rate) is that of the cheapest configuration that
    keeps the most GPUs asked for at the target (by price with ``costs``, else by the
    classes' order), or of the best one when none does. From a distributed probe (a
    ``base`` with a clients curve) the storage it measured is the first class, and
    ``sizing.cluster`` says how many nodes of each of ``fit_gpus`` GPUs (by default the
    most ranks the probe ran on one node) it feeds. ``references``: published results placed
    beside the need of a node (``_node_gpus``)."""
    _check(inp, classes, gpu_counts)
    figures = cluster_figures(base) if base is not None else None
    classes = _with_measured(figures, classes)
    rows, findings = _grid(inp, classes, gpu_counts)
    _price(rows, classes, inp, costs)
    supported = {cls.name: gpus_supported(cls, inp) for cls in classes}
    cheapest = _cheapest(classes, rows, max(gpu_counts), inp, supported, costs)
    head_cls = next(c for c in classes if c.name == cheapest.storage)
    head_gpus = cheapest.gpus or max(gpu_counts)
    head = findings.get((head_cls.name, head_gpus)) or pipeline_model(
        stages_for(head_cls, head_gpus, inp)
    )
    advice = _advice(inp, classes, supported, cheapest, head, len(rows))
    cluster = _cluster(figures, classes[0], inp, fit_gpus, advice)
    node_gpus = _node_gpus(fit_gpus)
    host, ds = _subject(inp, base)
    return RunRecord(
        kind="size",
        host=host,
        dataset=ds,
        stages=stages_for(head_cls, head_gpus, inp),
        bottleneck=head.bottleneck,
        predicted_samples_per_s=head.predicted_samples_per_s,
        gpu_idle_fraction=None if head.gpu_utilization is None else 1.0 - head.gpu_utilization,
        gpu_idle_method="predicted: 1 - delivered / GPU capacity",
        recommendations=advice,
        sizing=SizeData(
            inputs=inp,
            storage=list(classes),
            gpu_counts=list(gpu_counts),
            rows=rows,
            cheapest=cheapest,
            assumptions=_assumptions(inp, figures, base),
            cluster=cluster,
            units=[_units(c, inp, supported[c.name], costs) for c in classes],
            density=density_guide(inp, classes, node_gpus),
            references=place(inp, references, node_gpus) if references else None,
            costs=costs,
        ),
        gpus_supported=supported,
    )


def _with_measured(
    figures: ClusterFigures | None, classes: list[StorageClassInfo]
) -> list[StorageClassInfo]:
    """From a distributed probe, the storage it measured first, then the other classes."""
    if figures is None:
        return classes
    return [measured_storage(figures), *(c for c in classes if c.name != MEASURED)]


def _cluster(
    figures: ClusterFigures | None,
    measured: StorageClassInfo,
    inp: SizeInputs,
    fit_gpus: list[int] | None,
    advice: list[Recommendation],
) -> ClusterSizing | None:
    """How many nodes the measured storage feeds, its advice put first; None without a
    distributed probe."""
    if figures is None:
        return None
    cluster = cluster_sizing(figures, measured, inp, fit_gpus or [figures.ranks_per_node])
    advice[:0] = [_fit_advice(fit, measured, inp) for fit in cluster.fits]
    return cluster


def _node_gpus(fit_gpus: list[int] | None) -> int:
    """A node's shape: the one count asked for, else the common 8-GPU node (a list of counts
    is a sweep, and its largest, 64 by default, is no node anyone buys)."""
    return fit_gpus[0] if fit_gpus and len(fit_gpus) == 1 else REFERENCE_NODE_GPUS


def _price(
    rows: list[SizeRow], classes: list[StorageClassInfo], inp: SizeInputs, costs: CostInputs | None
) -> None:
    """Each row's price and price per sample/s, where a ``--cost`` file gives prices."""
    if costs is None:
        return
    by = {c.name: c for c in classes}
    for r in rows:
        r.cost = row_cost(r, by[r.storage], inp, costs)
        if r.cost is not None and r.predicted_samples_per_s > 0:
            r.cost_per_sample_per_s = r.cost / r.predicted_samples_per_s


def _units(
    cls: StorageClassInfo, inp: SizeInputs, per_node: int, costs: CostInputs | None
) -> ClassUnits:
    """``class_units``, priced at the accelerators it keeps where ``costs`` are given."""
    u = class_units(cls, inp, per_node)
    if costs is not None and 0 < per_node < MAX_GPUS:
        row = _priced_row(cls, per_node, inp, costs)
        u.cost, u.cost_per_sample_per_s = row.cost, row.cost_per_sample_per_s
    return u


def _hosts_unlimited(inp: SizeInputs, nic: bool) -> SizeInputs:
    """``inp`` with the hosts' cores (and, unless ``nic``, their NICs) out of the way: the
    storage alone, as MLPerf Storage measures it."""
    return dataclasses.replace(
        inp,
        cores=None,
        node_cpu_samples_per_s=None,
        nic_bytes_per_s=inp.nic_bytes_per_s if nic else None,
    )


def class_units(cls: StorageClassInfo, inp: SizeInputs, per_node: int | None = None) -> ClassUnits:
    """``cls`` in MLPerf Storage's terms: the accelerators it keeps at or above the target
    AU over every node with these hosts, the samples/s and MiB/s that delivers, and the
    accelerators the storage alone would keep (hosts never binding, as in an MLPerf
    submission with enough clients). Where hosts keep fewer, ``binds`` names the host limit
    met first: the NIC when the NICs alone already keep fewer, else the CPU.
    ``per_node``: ``gpus_supported(cls, inp)`` where the caller has it."""
    n = gpus_supported(cls, inp) if per_node is None else per_node
    alone = gpus_supported(cls, _hosts_unlimited(inp, nic=False))
    nic = gpus_supported(cls, _hosts_unlimited(inp, nic=True))
    if n >= MAX_GPUS:
        binds = "none"
    elif n < nic:
        binds = "cpu"
    elif nic < alone:
        binds = "nic"
    else:
        binds = "storage"
    pf = pipeline_model(stages_for(cls, n, inp)) if n else None
    delivered = pf.predicted_samples_per_s if pf is not None else 0.0
    return ClassUnits(
        storage=cls.name,
        accelerators=n * inp.nodes,
        accelerators_per_node=n,
        au=pf.gpu_utilization if pf is not None else None,
        samples_per_s=delivered,
        mib_per_s=delivered * inp.sample_bytes / MIB,
        storage_accelerators=alone * inp.nodes,
        binds=binds,
        cores_per_node=(
            n * inp.gpu_samples_per_s * inp.cpu_seconds_per_sample
            if inp.cpu_seconds_per_sample and n
            else None
        ),
        node_bytes_per_s=delivered * inp.sample_bytes / inp.nodes,
    )


def _grid(
    inp: SizeInputs, classes: list[StorageClassInfo], gpu_counts: list[int]
) -> tuple[list[SizeRow], dict[tuple[str, int], PipelineFindings]]:
    """A row per storage class x GPU count, and the model's findings for each, by (class
    name, GPUs)."""
    rows: list[SizeRow] = []
    findings: dict[tuple[str, int], PipelineFindings] = {}
    for cls in classes:
        for n in gpu_counts:
            row, f = _row(cls, n, inp)
            rows.append(row)
            findings[(cls.name, n)] = f
    return rows, findings


def _advice(
    inp: SizeInputs,
    classes: list[StorageClassInfo],
    supported: dict[str, int],
    cheapest: Cheapest,
    head: PipelineFindings,
    configurations: int,
) -> list[Recommendation]:
    """The cheapest balanced configuration first, then the GPUs each class keeps busy."""
    recs = [
        Recommendation(
            kind="size",
            text=cheapest.text,
            predicted_samples_per_s=head.predicted_samples_per_s,
            evidence=f"{configurations} configurations through the pipeline model",
        )
    ]
    for cls in classes:
        n = supported[cls.name]
        recs.append(
            Recommendation(
                kind="gpus_supported",
                text=f"{cls.name} keeps {n} GPU{'s' if n != 1 else ''} per node at >= {inp.target_utilization:.0%}.",
                predicted_samples_per_s=(
                    pipeline_model(stages_for(cls, n, inp)).predicted_samples_per_s if n else None
                ),
            )
        )
    return recs


def _subject(inp: SizeInputs, base: RunRecord | None) -> tuple[HostInfo, DatasetProfile]:
    """The host and dataset the sizing is about: the run's, or ones described by the numbers."""
    if base is not None:
        return base.host, base.dataset
    host = HostInfo(gpu_probe="not checked: sized from numbers")
    wl = inp.workload
    ds = DatasetProfile(
        target=f"(MLPerf Storage {wl.name}, simulated {wl.accelerator})"
        if wl
        else "(given numbers)",
        files=int(inp.dataset_bytes / inp.sample_bytes) if inp.dataset_bytes else 0,
        bytes=int(inp.dataset_bytes or 0),
        sample_bytes_mean=inp.sample_bytes,
        density=density_class(inp.sample_bytes),
    )
    return host, ds


def _assumptions(
    inp: SizeInputs, figures: ClusterFigures | None = None, base: RunRecord | None = None
) -> list[str]:
    if inp.node_cpu_samples_per_s:
        cpu = (
            f"CPU capacity = {inp.node_cpu_samples_per_s:,.0f} samples/s per node (its ranks "
            "decoding at once, as measured) x nodes"
        )
    elif inp.cpu_seconds_per_sample and inp.cores:
        cpu = "CPU capacity = cores x nodes / CPU seconds per sample (linear in cores)"
    else:
        cpu = "CPU not limiting"
    out = [
        "throughput = min(stage capacities): stages overlap, prefetch absorbs jitter",
        "GPUs scale linearly: each trains at its given rate when fed, no sync cost",
        f"{inp.in_flight} reads in flight per node; local storage is per node, a "
        "network filer is shared by all nodes, object storage is per connection",
        cpu,
    ]
    if figures is not None:
        out.append(
            f"{MEASURED} storage: all nodes together read at most the clients curve's peak, "
            f"{units.bandwidth(figures.aggregate_bytes_per_s)} ({figures.clients} clients on "
            f"{figures.hosts} node{'s' * (figures.hosts != 1)}); one node reads "
            f"{units.bandwidth(figures.node_bytes_per_s)}, the most one node's share of any level "
            "reached; more nodes are like the measured ones"
        )
    elif base is not None and inp.nodes > 1:
        out.append(
            f"{inp.nodes} nodes: how the storage holds up across nodes is assumed, not "
            "measured (the run has no clients curve; a distributed probe, torchrun "
            "--nproc-per-node N -m ioprobe probe, measures one)"
        )
    return out


# -- across nodes: the storage a distributed probe measured --------------------------------


def measured_storage(f: ClusterFigures) -> StorageClassInfo:
    """The shared storage a distributed probe measured, as a class of the grid: shared by
    every node (a network scope) up to the clients curve's peak, each node reading at most
    the rate one node reached on the curve."""
    return StorageClassInfo(
        name=MEASURED,
        label=(
            f"the shared storage as a distributed probe measured it ({f.clients} clients on "
            f"{f.hosts} node{'s' * (f.hosts != 1)})"
        ),
        scope="network",
        seq_read_bytes_per_s=f.aggregate_bytes_per_s,
        node_bytes_per_s=f.node_bytes_per_s,
        source="distributed.curve: the peak aggregate; one node: its best share of a level",
    )


def nodes_fed(cls: StorageClassInfo, gpus: int, inp: SizeInputs) -> int:
    """The most nodes of ``gpus`` GPUs each that storage ``cls`` and each node's CPU keep at
    or above the target utilisation.

    Each node brings its own cores and its own read rate, so those feed any number of nodes
    or none; what the nodes share is the storage's aggregate (a network scope's), so once one
    node is fed the answer is ``floor(aggregate / (U x gpus x R))``, checked against the
    model at n and n + 1 as ``gpus_supported`` is. Storage that is not shared (local, object,
    a plain rate) caps no node count: MAX_NODES.
    """

    def ok(n: int) -> bool:
        return n >= 1 and _utilization(cls, gpus, inp, n) >= inp.target_utilization - 1e-12

    if not ok(1):
        return 0
    if cls.scope != "network":
        return MAX_NODES
    need = inp.target_utilization * gpus * inp.gpu_samples_per_s
    request = inp.request_bytes or inp.sample_bytes
    shared = read_rate(cls, request, inp.in_flight * MAX_NODES) / inp.sample_bytes
    ratio = shared / need if need > 0 else math.inf
    n = max(min(int(ratio), MAX_NODES), 1) if math.isfinite(ratio) else MAX_NODES
    for _ in range(CHECK_STEPS):
        if n > 1 and not ok(n):
            n -= 1
        elif n < MAX_NODES and ok(n + 1):
            n += 1
        else:
            break
    return n


def _utilization(cls: StorageClassInfo, gpus: int, inp: SizeInputs, nodes: int) -> float:
    return _at(cls, gpus, inp, nodes).gpu_utilization or 0.0


def _at(cls: StorageClassInfo, gpus: int, inp: SizeInputs, nodes: int) -> PipelineFindings:
    return pipeline_model(stages_for(cls, gpus, dataclasses.replace(inp, nodes=nodes)))


def fit_nodes(cls: StorageClassInfo, gpus: int, inp: SizeInputs, f: ClusterFigures) -> NodeFit:
    """How many nodes of ``gpus`` GPUs ``cls`` feeds at the target, what binds one node
    more, and (where ``inp.nodes`` is above 1) how the nodes asked for fare, with the
    sentence that says so."""
    n = nodes_fed(cls, gpus, inp)
    nxt = _at(cls, gpus, inp, min(n + 1, MAX_NODES))
    fit = NodeFit(
        gpus=gpus,
        nodes=n,
        next_bound=nxt.bottleneck,
        next_utilization=nxt.gpu_utilization or 0.0,
    )
    if inp.nodes > 1:
        asked = _at(cls, gpus, inp, inp.nodes)
        fit.asked_nodes = inp.nodes
        fit.asked_utilization = asked.gpu_utilization or 0.0
        fit.asked_bound = asked.bottleneck
    fit.text = _fit_text(fit, cls, inp, f)
    return fit


def cluster_sizing(
    f: ClusterFigures, cls: StorageClassInfo, inp: SizeInputs, gpus: list[int]
) -> ClusterSizing:
    """The measured figures and, per GPU count, the nodes the measured storage ``cls`` feeds."""
    return ClusterSizing(
        aggregate_bytes_per_s=f.aggregate_bytes_per_s,
        node_bytes_per_s=f.node_bytes_per_s,
        node_cpu_samples_per_s=inp.node_cpu_samples_per_s,
        clients=f.clients,
        hosts=f.hosts,
        saturated=f.saturated,
        fits=[fit_nodes(cls, g, inp, f) for g in gpus],
    )


def _fit_advice(fit: NodeFit, cls: StorageClassInfo, inp: SizeInputs) -> Recommendation:
    fed = (
        _at(cls, fit.gpus, inp, fit.nodes).predicted_samples_per_s
        if 0 < fit.nodes < MAX_NODES
        else None
    )
    return Recommendation(
        kind="nodes",
        text=fit.text,
        predicted_samples_per_s=fed,
        evidence="the distributed probe's clients curve and each node's measured figures",
    )


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    tail = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{tail}"


def _fit_text(fit: NodeFit, cls: StorageClassInfo, inp: SizeInputs, f: ClusterFigures) -> str:
    target = f"{inp.target_utilization:.0%}"
    g = f"{fit.gpus} GPU{'s' * (fit.gpus != 1)}"
    if fit.nodes == 0:
        text = (
            f"This storage feeds no node of {g} at {target}: one node is "
            f"{fit.next_bound}-bound at {fit.next_utilization:.0%} "
            f"({_within_node(fit, cls, inp)})."
        )
    elif fit.nodes >= MAX_NODES:
        text = f"This storage and each node's CPU keep any number of nodes of {g} at {target}."
    else:
        text = (
            f"This storage feeds {fit.nodes:,} node{'s' * (fit.nodes != 1)} of {g} at "
            f"{target}; the {ordinal(fit.nodes + 1)} is {fit.next_bound}-bound."
        )
    if fit.asked_nodes is not None and fit.asked_utilization is not None:
        if fit.asked_nodes > fit.nodes:
            text += (
                f" {fit.asked_nodes:,} nodes would run at {fit.asked_utilization:.0%}, "
                f"{fit.asked_bound}-bound."
            )
        else:
            text += f" {fit.asked_nodes:,} nodes run at {fit.asked_utilization:.0%}."
    if f.hosts == 1:
        text += (
            " Every client ran on one node, so what more nodes would read is not measured: "
            "the count is a lower bound."
        )
    elif not f.saturated:
        text += (
            f" The storage was still scaling at {f.clients} clients, so it may feed more: "
            "the count is a lower bound."
        )
    return text


def _within_node(fit: NodeFit, cls: StorageClassInfo, inp: SizeInputs) -> str:
    """What one node lacks for ``fit.gpus`` GPUs at the target: its cores, its NIC, its own
    read rate or the storage's whole aggregate."""
    need = inp.target_utilization * fit.gpus * inp.gpu_samples_per_s
    if fit.next_bound == "cpu" and inp.node_cpu_samples_per_s:
        return (
            f"its ranks decode {inp.node_cpu_samples_per_s:,.0f} samples/s; {fit.gpus} GPUs at "
            f"{inp.target_utilization:.0%} need {need:,.0f}"
        )
    if fit.next_bound == "cpu":
        return f"{fit.gpus} GPUs at {inp.target_utilization:.0%} need {need:,.0f} samples/s"
    wanted = units.bandwidth(need * inp.sample_bytes)
    node = cls.node_bytes_per_s or cls.seq_read_bytes_per_s
    if inp.nic_bytes_per_s and inp.nic_bytes_per_s < node:
        return f"its NIC carries {units.bandwidth(inp.nic_bytes_per_s)}; the GPUs need {wanted}"
    if node < cls.seq_read_bytes_per_s:
        return f"one node reads {units.bandwidth(node)}; the GPUs need {wanted}"
    return f"the storage gives all clients {units.bandwidth(cls.seq_read_bytes_per_s)}; the GPUs need {wanted}"


def _cheapest(
    classes: list[StorageClassInfo],
    rows: list[SizeRow],
    top: int,
    inp: SizeInputs,
    supported: dict[str, int],
    costs: CostInputs | None,
) -> Cheapest:
    """The cheapest class that keeps ``top`` GPUs per node at the target: by price where
    the configurations are priced (--cost), else the first in catalog order (cheapest tier
    first). When none does: the cheapest class among those that keep the most, and what
    binds one GPU beyond that."""
    at_top = {r.storage: r for r in rows if r.gpus == top}
    fed = [c for c in classes if at_top[c.name].gpu_utilization >= inp.target_utilization - 1e-12]
    if fed:
        cls = _by_price(fed, at_top)
        return _balanced(cls, top, at_top[cls.name], inp, supported[cls.name], costs)
    return _most_kept(classes, at_top, top, inp, supported, costs)


def _by_price(classes: list[StorageClassInfo], rows: dict[str, SizeRow]) -> StorageClassInfo:
    """The priced class whose row costs least (ties: the earlier class), else the first."""
    priced = [c for c in classes if rows[c.name].cost is not None]
    if not priced:
        return classes[0]
    return min(priced, key=lambda c: rows[c.name].cost or 0.0)


def _most_kept(
    classes: list[StorageClassInfo],
    at_top: dict[str, SizeRow],
    top: int,
    inp: SizeInputs,
    supported: dict[str, int],
    costs: CostInputs | None,
) -> Cheapest:
    """No class keeps ``top`` GPUs: the cheapest of those that keep the most, and what binds
    one GPU beyond that (``at_top``: each class's row at ``top`` GPUs)."""
    most = max(supported[c.name] for c in classes)
    kept = [c for c in classes if supported[c.name] == most]
    if most == 0:
        best = kept[0]
        return Cheapest(
            storage=best.name,
            gpus=0,
            utilization=0.0,
            cores_needed=None,
            text=(
                f"No class here keeps even one GPU per node at {inp.target_utilization:.0%}: "
                f"{at_top[best.name].bottleneck} binds first."
            ),
        )
    at = {c.name: _priced_row(c, most, inp, costs) for c in kept}
    best = _by_price(kept, at)
    row = at[best.name]
    return Cheapest(
        storage=best.name,
        gpus=most,
        utilization=row.gpu_utilization,
        cores_needed=row.cores_needed,
        text=(
            f"No class keeps {top} GPUs per node at {inp.target_utilization:.0%}. Cheapest "
            f"balanced: {best.name} with {most} GPU{'s' if most != 1 else ''} per node, the "
            f"most any class here keeps{_cost_text(row, costs)}; {_binds_beyond(best, most, inp)}."
        ),
        cost=row.cost,
    )


def _priced_row(
    cls: StorageClassInfo, gpus: int, inp: SizeInputs, costs: CostInputs | None
) -> SizeRow:
    """``cls`` at ``gpus`` GPUs per node, priced with ``costs`` where given."""
    row, _ = _row(cls, gpus, inp)
    if costs is not None:
        _price([row], [cls], inp, costs)
    return row


def _cost_text(row: SizeRow, costs: CostInputs | None) -> str:
    if row.cost is None:
        return ""
    return f", at {row.cost:,.0f}" + (f" {costs.currency}" if costs and costs.currency else "")


def _balanced(
    cls: StorageClassInfo,
    top: int,
    r: SizeRow,
    inp: SizeInputs,
    most: int,
    costs: CostInputs | None,
) -> Cheapest:
    """``cls`` keeps all ``top`` GPUs at the target (row ``r``), the cores that takes, and
    where it stops: the ``most`` GPUs it keeps and what binds beyond them."""
    cores = (
        f"; {math.ceil(r.cores_needed)} cores of loader workers per node feed them fully"
        if r.cores_needed
        else ""
    )
    beyond = (
        f" It keeps up to {most:,} GPUs per node; {_binds_beyond(cls, most, inp)}."
        if most < MAX_GPUS
        else ""
    )
    return Cheapest(
        storage=cls.name,
        gpus=top,
        utilization=r.gpu_utilization,
        cores_needed=r.cores_needed,
        text=(
            f"Cheapest balanced: {cls.name} keeps {top} GPUs per node at "
            f"{r.gpu_utilization:.0%}{_cost_text(r, costs)}{cores}.{beyond}"
        ),
        cost=r.cost,
    )


def _binds_beyond(cls: StorageClassInfo, most: int, inp: SizeInputs) -> str:
    """What binds one GPU beyond the ``most`` that ``cls`` keeps, and what would lift it: the
    cores that GPU needs, or the pinned cache that would let storage keep up."""
    beyond, _ = _row(cls, most + 1, inp)
    why = f"{beyond.bottleneck} binds beyond that"
    if beyond.bottleneck == "cpu" and beyond.cores_needed:
        why += f" ({most + 1} GPUs need {math.ceil(beyond.cores_needed)} cores per node)"
    elif beyond.bottleneck == "storage" and beyond.cache_bytes_static:
        n = beyond.cache_bytes_static
        why += f" (or add a {units.size(n)} pinned cache per node)"
    return why


def _check(inp: SizeInputs, classes: list[StorageClassInfo], gpu_counts: list[int]) -> None:
    if not classes:
        raise BadInputError("no storage class to size")
    if not gpu_counts or min(gpu_counts) < 1:
        raise BadInputError("--gpus needs GPU counts of at least 1")
    if not inp.sample_bytes > 0:
        raise BadInputError("bytes per sample must be positive")
    if not inp.gpu_samples_per_s > 0:
        raise BadInputError("GPU samples/s must be positive")
    if not 0 < inp.target_utilization <= 1:
        raise BadInputError("--target-utilization must be in (0, 1]")
    if inp.nodes < 1:
        raise BadInputError("--nodes must be at least 1")


__all__ = [
    "DEFAULT_GPU_COUNTS",
    "MEASURED",
    "cluster_sizing",
    "fit_nodes",
    "gpus_supported",
    "measured_storage",
    "nodes_fed",
    "ordinal",
    "size",
    "stages_for",
    "storage_samples_per_s",
]

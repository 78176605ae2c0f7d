"""Hardware sizing: how many GPUs each storage class keeps busy, from a record or from numbers.

A sizing is the pipeline model evaluated on a grid: each storage class x each GPU count, with
the CPU and GPU figures held per sample. Every row is a ``pipeline_model`` call, so a sizing
table can never disagree with what ``whatif`` would say for the same configuration.
"""

from __future__ import annotations

import math

from ioprobe import capacity
from ioprobe.analysis.cache import cache_for_hit_rate
from ioprobe.analysis.catalog import read_rate
from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.capacity import density_class
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Cheapest,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    Recommendation,
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
CHECK_STEPS = 8  # model runs that check the closed form of gpus_supported


def storage_samples_per_s(cls: StorageClassInfo, inp: SizeInputs) -> float:
    """All nodes' storage capacity in samples/s for this class.

    Local devices are one per node, so they add up. A network class is one filer shared by
    every node (its figure is the filer's link), so it does not. Object storage figures are
    per connection and object stores scale out, so each node's ``in_flight`` connections add
    up. A per-node NIC caps what each node can pull from a network or object store.
    """
    size = inp.sample_bytes
    per_node = read_rate(cls, size, inp.in_flight)
    if cls.scope in ("object", "network", "given") and inp.nic_bytes_per_s:
        per_node = min(per_node, inp.nic_bytes_per_s)
    if cls.scope == "network":
        total = min(per_node * inp.nodes, read_rate(cls, size, inp.in_flight * inp.nodes))
    else:
        total = per_node * inp.nodes
    return total / size


def stages_for(cls: StorageClassInfo, gpus: int, inp: SizeInputs) -> Stages:
    """The stages of ``inp.nodes`` nodes with ``gpus`` GPUs each on storage ``cls``."""
    cpu = None
    if inp.cpu_seconds_per_sample and inp.cores:
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
    f = pipeline_model(stages)
    caps = f.capacities
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
        predicted_samples_per_s=f.predicted_samples_per_s,
        gpu_utilization=f.gpu_utilization or 0.0,
        bottleneck=f.bottleneck,
        storage_samples_per_s=storage,
        cpu_samples_per_s=caps["cpu"],
        gpu_samples_per_s=demand,
        cores_needed=cores_needed,
        cache_bytes_static=static,
        cache_bytes_lru=lru,
    )
    return row, f


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
) -> RunRecord:
    """A ``size`` record: one row per storage class x GPU count, and per class the GPUs it
    supports at the target utilisation. The record's own verdict (stages, bottleneck,
    predicted rate) is that of the cheapest configuration that keeps the most GPUs asked
    for at the target, or of the best one when none does."""
    _check(inp, classes, gpu_counts)
    rows, findings = _grid(inp, classes, gpu_counts)
    supported = {cls.name: gpus_supported(cls, inp) for cls in classes}
    top = max(gpu_counts)
    cheapest = _cheapest(classes, rows, top, inp, supported)
    head_cls = next(c for c in classes if c.name == cheapest.storage)
    head_gpus = cheapest.gpus or top
    head = findings.get((head_cls.name, head_gpus)) or pipeline_model(
        stages_for(head_cls, head_gpus, inp)
    )
    host, ds = _subject(inp, base)
    util = head.gpu_utilization
    return RunRecord(
        kind="size",
        host=host,
        dataset=ds,
        stages=stages_for(head_cls, head_gpus, inp),
        bottleneck=head.bottleneck,
        predicted_samples_per_s=head.predicted_samples_per_s,
        gpu_idle_fraction=1.0 - util if util is not None else None,
        gpu_idle_method="predicted: 1 - delivered / GPU capacity",
        recommendations=_advice(inp, classes, supported, cheapest, head, len(rows)),
        sizing=SizeData(
            inputs=inp,
            storage=list(classes),
            gpu_counts=list(gpu_counts),
            rows=rows,
            cheapest=cheapest,
            assumptions=_assumptions(inp),
        ),
        gpus_supported=supported,
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
    ds = DatasetProfile(
        target="(given numbers)",
        files=int(inp.dataset_bytes / inp.sample_bytes) if inp.dataset_bytes else 0,
        bytes=int(inp.dataset_bytes or 0),
        sample_bytes_mean=inp.sample_bytes,
        density=density_class(inp.sample_bytes),
    )
    return host, ds


def _assumptions(inp: SizeInputs) -> list[str]:
    return [
        "throughput = min(stage capacities): stages overlap, prefetch absorbs jitter",
        "GPUs scale linearly: each trains at its given rate when fed, no sync cost",
        f"{inp.in_flight} reads in flight per node; local storage is per node, a "
        "network filer is shared by all nodes, object storage is per connection",
        "CPU not limiting"
        if not (inp.cpu_seconds_per_sample and inp.cores)
        else "CPU capacity = cores x nodes / CPU seconds per sample (linear in cores)",
    ]


def _cheapest(
    classes: list[StorageClassInfo],
    rows: list[SizeRow],
    top: int,
    inp: SizeInputs,
    supported: dict[str, int],
) -> Cheapest:
    """The first class (catalog order: cheapest tier first) that keeps ``top`` GPUs per node at
    the target. When none does: the cheapest class among those that keep the most GPUs, and
    what binds one GPU beyond that."""
    at_top = {r.storage: r for r in rows if r.gpus == top}
    for cls in classes:
        r = at_top[cls.name]
        if r.gpu_utilization >= inp.target_utilization - 1e-12:
            return _balanced(cls, top, r)
    return _most_kept(classes, at_top, top, inp, supported)


def _most_kept(
    classes: list[StorageClassInfo],
    at_top: dict[str, SizeRow],
    top: int,
    inp: SizeInputs,
    supported: dict[str, int],
) -> Cheapest:
    """No class keeps ``top`` GPUs: the cheapest of those that keep the most, and what binds
    one GPU beyond that (``at_top``: each class's row at ``top`` GPUs)."""
    most = max(supported[c.name] for c in classes)
    best = next(c for c in classes if supported[c.name] == most)
    if most == 0:
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
    at, _ = _row(best, most, inp)
    return Cheapest(
        storage=best.name,
        gpus=most,
        utilization=at.gpu_utilization,
        cores_needed=at.cores_needed,
        text=(
            f"No class keeps {top} GPUs per node at {inp.target_utilization:.0%}. Cheapest "
            f"balanced: {best.name} with {most} GPU{'s' if most != 1 else ''} per node, the "
            f"most any class here keeps; {_binds_beyond(best, most, inp)}."
        ),
    )


def _balanced(cls: StorageClassInfo, top: int, r: SizeRow) -> Cheapest:
    """``cls`` keeps all ``top`` GPUs at the target (row ``r``), and the cores that takes."""
    cores = (
        f"; {math.ceil(r.cores_needed)} cores of loader workers per node feed them fully"
        if r.cores_needed
        else ""
    )
    return Cheapest(
        storage=cls.name,
        gpus=top,
        utilization=r.gpu_utilization,
        cores_needed=r.cores_needed,
        text=(
            f"Cheapest balanced: {cls.name} keeps {top} GPUs per node at "
            f"{r.gpu_utilization:.0%}{cores}."
        ),
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
        cache = f"{n / 1e9:,.0f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"
        why += f" (or add a {cache} pinned cache per node)"
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
    "gpus_supported",
    "size",
    "stages_for",
    "storage_samples_per_s",
]

"""A sizing's sentences and table cells, shared by the terminal view, the HTML page and the
Markdown report, so the three say the same thing in the same words."""

from __future__ import annotations

import math
from collections.abc import Callable

from ioprobe import units
from ioprobe.analysis.size import MAX_GPUS
from ioprobe.record import (
    ClassUnits,
    DensityGuide,
    DensityRow,
    ReferencePoint,
    SizeData,
    SizeInputs,
    SizeRow,
)

_BINDS = {
    "storage": "storage",
    "cpu": "host CPU",
    "nic": "host NIC",
    "none": "nothing",
}
_LIMIT = {
    "iops": "IOPS-bound",
    "latency": "latency-bound",
    "bandwidth": "bandwidth-bound",
}
_DENSITY = {
    "low": (
        "Low-density data is latency- and IOPS-bound: every sample is a read of few bytes, "
        "each read pays a request's latency and counts against the device's IOPS, so a "
        "class delivers its bandwidth only where it serves enough requests, and the class "
        "to buy is the one with the IOPS and the latency for it."
    ),
    "medium": (
        "Medium-density data sits between: large enough that fast flash and a filer reach "
        "their bandwidth, small enough that a disk's seeks or an object store's per-request "
        "latency still cost most of theirs."
    ),
    "high": (
        "High-density data is bandwidth-bound: each read is long enough that its request "
        "cost vanishes, so storage reaches its sequential bandwidth, and a network filer or "
        "object storage with enough parallel connections fits as well as local flash: the "
        "figure to buy is bandwidth per GPU."
    ),
}


def count(n: int) -> str:
    return "any" if n >= MAX_GPUS else f"{n:,}"


def money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def cores_sentence(sz: SizeData) -> str | None:
    """The loader cores per node the largest GPU count asked for needs."""
    if not sz.gpu_counts:
        return None
    top = max(sz.gpu_counts)
    row = next((r for r in sz.rows if r.gpus == top), None)
    if row is None or not row.cores_needed:
        return None
    return (
        f"{top} GPUs per node need about {math.ceil(row.cores_needed)} cores of loader "
        "workers per node."
    )


def cache_sentence(gap: SizeRow) -> str:
    """The cache that lets a storage-bound class keep more GPUs busy."""
    assert gap.cache_bytes_static is not None and gap.cache_bytes_lru is not None
    return (
        f"A cache makes {gap.storage} keep {gap.gpus} GPUs per node busy: "
        f"{units.size(gap.cache_bytes_static)} as a pinned subset per node (an LRU page cache "
        f"under shuffling needs {units.size(gap.cache_bytes_lru)})."
    )


def answer_lines(sz: SizeData, gap: SizeRow | None) -> list[str]:
    """What the answer on top implies, one sentence each: the other node fits, the grid's
    cheapest where the verdict is a cluster's, the cores per node, the cache that helps."""
    lines = [fit.text for fit in (sz.cluster.fits[1:] if sz.cluster else [])]
    if sz.cluster is not None and sz.cluster.fits and sz.cheapest is not None:
        lines.append(sz.cheapest.text)  # the verdict is the cluster's: the grid's answer here
    lines += [x for x in (cores_sentence(sz),) if x]
    if gap is not None:
        lines.append(cache_sentence(gap))
    return lines


# -- MLPerf Storage units ---------------------------------------------------------------------


def units_title(sz: SizeData) -> str:
    wl = sz.inputs.workload
    if wl is not None:
        return (
            f"Simulated {wl.accelerator}s each storage class keeps at >= "
            f"{sz.inputs.target_utilization:.0%} AU on {wl.name} (MLPerf Storage units)"
        )
    return (
        f"Accelerators each storage class keeps at >= {sz.inputs.target_utilization:.0%} "
        "utilisation (MLPerf Storage units)"
    )


def per_accelerator(inp: SizeInputs) -> str:
    """What one GPU is called: a simulated accelerator where a workload's emulation is sized."""
    return "per accelerator" if inp.workload is not None else "per GPU"


def provenance_line(inp: SizeInputs) -> str | None:
    """Where the inputs that were not given came from: the run's fields, or the workload
    configuration an emulation's figures are MLPerf Storage's own."""
    wl = inp.workload
    if wl is not None:
        return (
            f"from MLPerf Storage's {wl.name} configuration for {wl.accelerator}: "
            f"{units.size(inp.sample_bytes)} samples, batch {wl.batch_size}, "
            f"computation_time {wl.compute_seconds:g} s, AU >= {wl.au_threshold:.0%} ({wl.source})"
        )
    srcs = ", ".join(f"{k} from {v}" for k, v in sorted(inp.sources.items()) if v != "given")
    return f"from the run: {srcs}" if srcs else None


def units_columns(sz: SizeData) -> list[tuple[str, bool]]:
    """(header, numeric) per column of the units table."""
    top = max(sz.gpu_counts) if sz.gpu_counts else 0
    cols = [
        ("storage", False),
        ("accelerators", True),
        ("AU", True),
        ("samples/s", True),
        ("MiB/s", True),
        ("storage alone", True),
        ("binds first", False),
        ("cores/node", True),
        (f"cache for {top} GPUs", True),
    ]
    if sz.costs is not None:
        unit = f" {sz.costs.currency}" if sz.costs.currency else ""
        cols += [(f"cost{unit}", True), (f"{unit.strip() or 'cost'} per sample/s", True)]
    return cols


def units_cells(sz: SizeData, u: ClassUnits) -> list[str]:
    """One class's row: what it keeps with these hosts, the throughput that takes, what the
    storage alone keeps (MLPerf's figure), what binds first, and what a node needs."""
    top = max(sz.gpu_counts) if sz.gpu_counts else 0
    row = next((r for r in sz.rows if r.storage == u.storage and r.gpus == top), None)
    cache = "-"
    if row is not None and row.cache_bytes_static and row.bottleneck == "storage":
        cache = units.size(row.cache_bytes_static)
    cells = [
        u.storage,
        count(u.accelerators),
        "-" if u.au is None else f"{math.floor(u.au * 1000 + 1e-9) / 10:.1f}%",
        units.samples_per_s(u.samples_per_s) if u.accelerators else "-",
        f"{u.mib_per_s:,.0f}" if u.accelerators else "-",
        count(u.storage_accelerators),
        _BINDS.get(u.binds, u.binds),
        "-" if u.cores_per_node is None else f"{math.ceil(u.cores_per_node - 1e-9):,}",
        cache,
    ]
    if sz.costs is not None:
        # the currency is in the header: cells stay narrow enough for a terminal
        cells += [money(u.cost), money(u.cost_per_sample_per_s)]
    return cells


def units_note(sz: SizeData) -> str:
    inp = sz.inputs
    nodes = f" over {inp.nodes} nodes" if inp.nodes > 1 else ""
    return (
        f"Accelerators: the GPUs kept at or above {inp.target_utilization:.0%} accelerator "
        f"utilisation (AU){nodes}; cores/node: the loader cores they need; cache: the pinned "
        "cache per node that lets a storage-bound class keep the most GPUs asked for. The "
        "samples/s and MiB/s (2^20 bytes) they read, as MLPerf Storage "
        "states a result. 'storage alone' gives the storage every client host it wants, as an "
        "MLPerf submission does; where this sizing's hosts keep fewer, 'binds first' names the "
        "host limit met before the storage's."
    )


# -- density ---------------------------------------------------------------------------------


def _names(rows: list[DensityRow]) -> str:
    return ", ".join(
        f"{r.storage} {r.share_of_bandwidth:.0%} ({_LIMIT.get(r.limit, r.limit)})" for r in rows
    )


def density_paragraph(g: DensityGuide, inp: SizeInputs) -> str:
    """What this density asks of storage, per GPU and per node, why, and which classes
    deliver it at this sample size and at the contrasting one."""
    per_gpu = g.target_bytes_per_s
    node_gpus = g.node_gpus
    reads = g.gpu_samples_per_s * inp.target_utilization
    text = (
        f"Samples average {units.size(g.sample_bytes)}: {g.density} density. One GPU trains "
        f"on {units.samples_per_s(g.gpu_samples_per_s)} samples/s ({units.bandwidth(g.gpu_bytes_per_s)} fully fed); at "
        f"{inp.target_utilization:.0%} it reads {units.bandwidth(per_gpu)} in {units.samples_per_s(reads)} reads/s, so a "
        f"node of {node_gpus} GPUs needs {units.bandwidth(per_gpu * node_gpus)} and "
        f"{units.samples_per_s(reads * node_gpus)} reads/s. {_DENSITY.get(g.density, '')}"
    )
    short = [r for r in g.rows if r.limit != "bandwidth"]
    full = [r.storage for r in g.rows if r.limit == "bandwidth"]
    size = units.size(g.sample_bytes)
    if short:
        text += f" At {size} per sample, of their bandwidth: {_names(short)}."
    if full:
        text += (
            f" Fit for this density, delivering at least 90% of their bandwidth: {', '.join(full)}."
        )
    # paired by name: a damaged record may have lost a row on either side
    contrast = {c.storage: c for c in g.contrast_rows}
    changed = [
        c
        for r in g.rows
        if (c := contrast.get(r.storage)) is not None
        and (r.limit == "bandwidth") != (c.limit == "bandwidth")
    ]

    if changed:
        other = units.size(g.contrast_bytes)
        text += f" At {other} per sample this changes: {_names(changed)}."
    return text


# -- reference points -----------------------------------------------------------------------


def reference_sentence(sz: SizeData) -> str | None:
    """The need of one node beside the published result nearest in density."""
    refs = sz.references
    if refs is None or not refs.points:
        return None
    p = refs.points[0]
    wl = sz.inputs.workload
    own = wl is not None and (p.workload, p.accelerator) == (wl.name, wl.accelerator)
    which = (
        f"The largest published {p.workload} result on {p.accelerator}s"
        if own
        else f"The nearest published workload in sample size, {p.workload}"
    )
    return (
        f"A node of {refs.node_gpus} GPUs at {sz.inputs.target_utilization:.0%} needs "
        f"{units.bandwidth(refs.node_bytes_per_s)}. {which} "
        f"({p.version}, {p.division}): {p.system} kept {p.accelerators:,} "
        f"simulated {p.accelerator}s busy at {units.bandwidth(p.bytes_per_s)}, enough for about "
        f"{_nodes(p.nodes_fed)} such nodes."
    )


def _nodes(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


REFERENCE_COLUMNS = [
    ("system", False),
    ("version", False),
    ("workload", False),
    ("accelerators", True),
    ("GB/s", True),
    ("GB/s per accelerator", True),
    ("nodes like yours", True),
    ("source", False),
]


def reference_cells(p: ReferencePoint) -> list[str]:
    return [
        p.system,
        f"{p.version} {p.division}",
        p.workload,
        f"{p.accelerators:,} {p.accelerator}",
        units.in_unit(p.bytes_per_s, "GB"),
        units.in_unit(p.bytes_per_s / p.accelerators, "GB") if p.accelerators > 0 else "-",
        _nodes(p.nodes_fed),
        p.source,
    ]


# -- inputs and costs -------------------------------------------------------------------------


def input_rows(sz: SizeData) -> list[tuple[str, str, str]]:
    """(figure, value, where it came from) for each input of the sizing."""
    inp = sz.inputs
    src = inp.sources

    def where(key: str, default: str = "given") -> str:
        s = src.get(key)
        if inp.workload is not None and s and s != "given":
            return s  # MLPerf Storage's configuration, not a measurement
        return "measured: " + s if s and s != "given" else default

    wl = inp.workload
    rows = (
        []
        if wl is None
        else [("MLPerf Storage workload", f"{wl.name}, simulated {wl.accelerator}", wl.source)]
    )
    rows += [
        ("bytes per sample", units.size(inp.sample_bytes), where("sample_bytes")),
        (
            f"samples/s {per_accelerator(inp)}",
            units.samples_per_s(inp.gpu_samples_per_s),
            where("gpu_samples_per_s"),
        ),
    ]
    rows += _host_rows(inp, where)
    if inp.dataset_bytes:
        rows.append(("dataset", units.size(inp.dataset_bytes), where("dataset_bytes")))
    if inp.nic_bytes_per_s:
        rows.append(("NIC per node", units.bandwidth(inp.nic_bytes_per_s), "given"))
    if sz.costs is not None:
        rows.append(("prices", sz.costs.source, "given (--cost)"))
    return rows


def _host_rows(inp: SizeInputs, where: Callable[..., str]) -> list[tuple[str, str, str]]:
    """The input rows of the hosts: their CPU, nodes, reads in flight and the target."""
    rows: list[tuple[str, str, str]] = []
    if inp.cpu_seconds_per_sample:
        rows.append(
            (
                "CPU per sample",
                f"{inp.cpu_seconds_per_sample * 1e3:.3g} ms",
                where("cpu_seconds_per_sample"),
            )
        )
    if inp.node_cpu_samples_per_s:
        rows.append(
            (
                "CPU per node",
                f"{units.samples_per_s(inp.node_cpu_samples_per_s)} samples/s",
                where("node_cpu_samples_per_s"),
            )
        )
    rows.append(
        (
            "cores per node",
            f"{inp.cores:g}" if inp.cores else "not limiting",
            where("cores", "given" if inp.cores else "default"),
        )
    )
    rows += [
        ("nodes", f"{inp.nodes:,}", "given" if inp.nodes > 1 else "default"),
        ("reads in flight per node", f"{inp.in_flight:,}", "given or default"),
        (
            "target utilisation",
            f"{inp.target_utilization:.0%}",
            "the workload's AU threshold" if inp.workload else "given or default",
        ),
    ]
    return rows


def cost_note(sz: SizeData) -> str | None:
    """How configurations were priced, and which classes had no price."""
    c = sz.costs
    if c is None:
        return None
    unpriced = [s.name for s in sz.storage if s.name not in c.storage]
    parts = [
        f"Priced from {c.source}: GPUs, the loader cores each configuration needs (at most "
        "a node's), and storage (a local class per node, a shared one once)."
    ]
    missing = [k for k, v in (("GPU", c.gpu), ("core", c.core)) if v is None]
    if missing:
        parts.append(f"No price for {' or '.join(missing)}: counted as free.")
    if unpriced:
        parts.append(f"No price for {', '.join(unpriced)}: left out of the cheapest.")
    return " ".join(parts)


__all__ = [
    "REFERENCE_COLUMNS",
    "answer_lines",
    "cache_sentence",
    "cores_sentence",
    "cost_note",
    "count",
    "density_paragraph",
    "input_rows",
    "money",
    "reference_cells",
    "reference_sentence",
    "units_cells",
    "units_columns",
    "units_note",
    "units_title",
]

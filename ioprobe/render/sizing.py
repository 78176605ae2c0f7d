"""The terminal view of a sizing: storage class x GPU count, coloured by GPU utilisation."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe.analysis.report import Findings
from ioprobe.record import RunRecord
from ioprobe.render.format import cache_size, rate, sample_size

_INITIAL = {"storage": "S", "cpu": "C", "pcie": "P", "gpu": "G"}


def _cell(util: float, binding: str, target: float) -> Text:
    style = "green" if util >= target - 1e-12 else ("yellow" if util >= 0.5 else "red")
    # the binding stage's initial only where the GPUs are not fully fed (a tie feeds them)
    tag = "" if binding == "gpu" or util >= 1 - 1e-9 else " " + _INITIAL[binding]
    # floored, so a GPU fed 99.6% of the time never reads as fully fed
    return Text(f"{math.floor(util * 100 + 1e-9)}%{tag}", style=style)


def view(rec: RunRecord, f: Findings) -> RenderableType:
    sz = rec.sizing
    if sz is None:
        raise ValueError("not a size record")
    inp = sz.inputs
    nodes = f" x {inp.nodes} nodes" if inp.nodes > 1 else ""
    head = Text.assemble(
        ("ioprobe size", "bold"),
        "  ",
        (rec.dataset.target, "cyan"),
        f"  {sample_size(inp.sample_bytes)}/sample, "
        f"{rate(inp.gpu_samples_per_s)} samples/s per GPU"
        + (
            f", {inp.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample"
            if inp.cpu_seconds_per_sample
            else ""
        )
        + (f", {inp.cores:g} cores per node" if inp.cores else "")
        + nodes,
    )
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("storage")
    table.add_column("MB/s" + (" all nodes" if inp.nodes > 1 else ""), justify="right")
    for n in sz.gpu_counts:
        table.add_column(f"{n} GPU" + ("s" if n != 1 else ""), justify="right")
    table.add_column(f"GPUs >= {inp.target_utilization:.0%}", justify="right")
    by = {(r.storage, r.gpus): r for r in sz.rows}
    supported = rec.gpus_supported or {}
    for cls in sz.storage:
        first = by[(cls.name, sz.gpu_counts[0])]
        mbps = first.storage_samples_per_s * inp.sample_bytes / 1e6
        cells = [
            _cell(
                by[(cls.name, n)].gpu_utilization,
                by[(cls.name, n)].bottleneck,
                inp.target_utilization,
            )
            for n in sz.gpu_counts
        ]
        table.add_row(
            cls.name, f"{mbps:,.0f}", *cells, Text(str(supported.get(cls.name, 0)), style="bold")
        )
    parts: list[RenderableType] = [
        head,
        Text(""),
        Text("GPU utilisation by storage class and GPUs per node (S: storage-bound, C: CPU-bound)"),
        table,
        Text(""),
    ]
    if sz.cheapest:
        parts.append(Text(sz.cheapest.text, style="bold"))
    top = max(sz.gpu_counts)
    row = next((r for r in sz.rows if r.gpus == top), None)
    if row is not None and row.cores_needed:
        parts.append(
            Text(
                f"{top} GPUs per node need about {math.ceil(row.cores_needed)} cores of loader workers per node."
            )
        )
    gap = f.cache_gap
    if gap is not None:
        assert gap.cache_bytes_static is not None and gap.cache_bytes_lru is not None
        parts.append(
            Text(
                f"A cache makes {gap.storage} keep {gap.gpus} GPUs per node busy: "
                f"{cache_size(gap.cache_bytes_static)} as a pinned subset per node (an LRU page cache "
                f"under shuffling needs {cache_size(gap.cache_bytes_lru)})."
            )
        )
    parts.append(Text(""))
    parts += [Text(f"assumes: {a}", style="dim") for a in sz.assumptions]
    srcs = ", ".join(f"{k} from {v}" for k, v in sorted(inp.sources.items()) if v != "given")
    if srcs:
        parts.append(Text(f"from the run: {srcs}", style="dim"))
    return Group(*parts)


__all__ = ["view"]

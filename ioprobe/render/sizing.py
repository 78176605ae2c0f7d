"""The terminal view of a sizing: storage class x GPU count, coloured by GPU utilisation."""

from __future__ import annotations

import bisect
import heapq
import math

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.analysis.report import Findings
from ioprobe.record import RunRecord, SizeData, SizeInputs, SizeRow
from ioprobe.render.sizing_text import (
    cache_sentence,
    cores_sentence,
    cost_note,
    density_paragraph,
    per_accelerator,
    provenance_line,
    reference_sentence,
    units_cells,
    units_columns,
    units_title,
)

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
    parts: list[RenderableType] = [
        Text.assemble(
            ("ioprobe size", "bold"), "  ", (rec.dataset.target, "cyan"), _inputs(sz.inputs)
        ),
        Text(""),
        Text("GPU utilisation by storage class and GPUs per node (S: storage-bound, C: CPU-bound)"),
        _FittedTable(sz, rec.gpus_supported or {}),
        Text(""),
    ]
    parts += _conclusions(sz, f.cache_gap)
    parts.append(Text(""))
    parts += _units(sz)
    parts += _guidance(sz)
    parts += _provenance(sz)
    return Group(*parts)


# the terminal's units table: the columns, and headers short enough, to fit 80 characters
_TERMINAL_UNITS = (0, 1, 2, 3, 4, 5, 6)
_SHORT = {1: "accel.", 5: "alone", 6: "binds"}


def _units(sz: SizeData) -> list[RenderableType]:
    """Each class in MLPerf Storage's terms."""
    if not sz.units:
        return []
    cols = units_columns(sz)
    # with prices: the price, not the price per sample/s (the page and Markdown have both)
    keep = [*_TERMINAL_UNITS, *([len(cols) - 2] if sz.costs is not None else [])]
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    for k in keep:
        name, numeric = cols[k]
        table.add_column(_SHORT.get(k, name), justify="right" if numeric else "left")
    for u in sz.units:
        cells = units_cells(sz, u)
        table.add_row(*(cells[k] for k in keep))
    legend = "accel.: accelerators kept; alone: by the storage alone; binds: what stops one more"
    return [Text(units_title(sz)), table, Text(legend, style="dim"), Text("")]


def _guidance(sz: SizeData) -> list[RenderableType]:
    """The density paragraph, the nearest published result, and how it was priced."""
    parts: list[RenderableType] = []
    if sz.density is not None:
        parts.append(Text(density_paragraph(sz.density, sz.inputs)))
    ref = reference_sentence(sz)
    if ref:
        parts.append(Text(ref))
    cost = cost_note(sz)
    if cost:
        parts.append(Text(cost, style="dim"))
    if parts:
        parts.append(Text(""))
    return parts


def _inputs(inp: SizeInputs) -> str:
    """The numbers the table was computed from, in the order a reader checks them."""
    line = f"  {units.size(inp.sample_bytes)}/sample, {units.samples_per_s(inp.gpu_samples_per_s)} samples/s {per_accelerator(inp)}"
    if inp.cpu_seconds_per_sample:
        line += f", {inp.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample"
    if inp.cores:
        line += f", {inp.cores:g} cores per node"
    if inp.nodes > 1:
        line += f" x {inp.nodes} nodes"
    return line


class _FittedTable:
    """The utilisation table with as many GPU-count columns as the width holds: all of them
    when they fit, else the first, the last, each class's last count kept at the target and
    the one after it, then counts spread between; a line says how many are left out."""

    def __init__(self, sz: SizeData, supported: dict[str, int]) -> None:
        self.sz, self.supported = sz, supported

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        sz = self.sz
        shown = _fitting_counts(sz, self.supported, options.max_width)
        yield _table(sz, self.supported, shown)
        if len(shown) < len(sz.gpu_counts):
            yield Text(
                f"{len(shown)} of {len(sz.gpu_counts):,} GPU counts shown in "
                f"{options.max_width} columns: the ends, where each class falls below "
                f"{sz.inputs.target_utilization:.0%}, some between; --md, --html and --json "
                "have all",
                style="dim",
            )


# a storage name wider than this is cut with an ellipsis (the other outputs have it whole)
_NAME_WIDTH = 24


def _fitting_counts(sz: SizeData, supported: dict[str, int], width: int) -> list[int]:
    """The GPU counts whose columns fit ``width`` beside the storage, rate and summary ones."""
    counts = sz.gpu_counts
    names = max((len(c.name) for c in sz.storage), default=0)
    rates = max((len(r) for r in _rates(sz).values()), default=1)
    fixed = min(max(names, len("storage")), _NAME_WIDTH) + max(rates, len(_rate_header(sz)))
    room = width - fixed - len(_summary_header(sz.inputs.target_utilization)) - 2 * 2
    cost = {n: len(_count_header(n)) + 2 for n in counts}
    if sum(cost.values()) <= room:
        return list(counts)
    chosen: set[int] = set()
    for n in _by_priority(counts, supported):
        if cost[n] <= room and n not in chosen:
            chosen.add(n)
            room -= cost[n]
    return sorted(chosen)


def _by_priority(counts: list[int], supported: dict[str, int]) -> list[int]:
    """``counts`` in the order they earn a column: the ends; the most GPUs each class keeps
    at the target, then the count after each; then the midpoints of the widest gaps."""
    kept: list[int] = []
    after: list[int] = []
    for most in sorted(set(supported.values())):
        at = bisect.bisect_right(counts, most)  # counts[at]: the first count not kept
        kept += [counts[at - 1]] if at > 0 else []
        after += [counts[at]] if at < len(counts) else []
    first = [counts[0], counts[-1], *kept, *after]
    index = {n: i for i, n in enumerate(counts)}
    taken = sorted({index[n] for n in first})
    order = list(dict.fromkeys(first))
    # the widest gap first: a heap of (-width, lo, hi), split at its middle
    gaps = [(taken[i] - taken[i + 1], taken[i], taken[i + 1]) for i in range(len(taken) - 1)]
    heapq.heapify(gaps)
    while gaps and -gaps[0][0] >= 2:
        _, lo, hi = heapq.heappop(gaps)
        mid = (lo + hi) // 2
        order.append(counts[mid])
        heapq.heappush(gaps, (lo - mid, lo, mid))
        heapq.heappush(gaps, (mid - hi, mid, hi))
    return order


def _rate_header(sz: SizeData) -> str:
    return "MB/s" + (" all nodes" if sz.inputs.nodes > 1 else "")


def _rates(sz: SizeData) -> dict[str, str]:
    """Each class's read rate in MB/s, as its column shows it: storage reads at one rate
    whatever the GPU count, so any of its rows stands for all."""
    first: dict[str, SizeRow] = {}
    for r in sz.rows:
        first.setdefault(r.storage, r)
    return {
        cls.name: units.in_unit(
            first[cls.name].storage_samples_per_s * sz.inputs.sample_bytes
            if cls.name in first
            else None,
            "MB",
        )
        for cls in sz.storage
    }


def _count_header(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def _summary_header(target: float) -> str:
    return f"GPUs >= {target:.0%}"


def _table(sz: SizeData, supported: dict[str, int], counts: list[int]) -> Table:
    """A row per storage class: its read rate, a cell per GPU count, the GPUs it keeps fed."""
    inp = sz.inputs
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("storage", max_width=_NAME_WIDTH, overflow="ellipsis", no_wrap=True)
    table.add_column(_rate_header(sz), justify="right")
    for n in counts:
        table.add_column(_count_header(n), justify="right", no_wrap=True)
    table.add_column(_summary_header(inp.target_utilization), justify="right")
    by = {(r.storage, r.gpus): r for r in sz.rows}
    rates = _rates(sz)
    for cls in sz.storage:
        rows = [by.get((cls.name, n)) for n in counts]
        # a record that lost a row (damaged, or cut by hand) shows the gap
        cells = [
            _cell(r.gpu_utilization, r.bottleneck, inp.target_utilization) if r else Text("-")
            for r in rows
        ]
        gpus = Text(str(supported.get(cls.name, 0)), style="bold")
        table.add_row(cls.name, rates[cls.name], *cells, gpus)
    return table


def _conclusions(sz: SizeData, gap: SizeRow | None) -> list[RenderableType]:
    """What the table means: the nodes a measured shared storage feeds, the cheapest fit,
    the cores it takes, and where a cache helps."""
    parts: list[RenderableType] = []
    if sz.cluster is not None:
        parts += [Text(fit.text, style="bold") for fit in sz.cluster.fits]
    if sz.cheapest:
        parts.append(Text(sz.cheapest.text, style="bold"))
    cores = cores_sentence(sz)
    if cores is not None:
        parts.append(Text(cores))
    if gap is not None:
        parts.append(Text(cache_sentence(gap)))
    return parts


def _provenance(sz: SizeData) -> list[RenderableType]:
    """The model's assumptions and which inputs came from a run rather than the command line."""
    parts: list[RenderableType] = [Text(f"assumes: {a}", style="dim") for a in sz.assumptions]
    line = provenance_line(sz.inputs)
    if line:
        parts.append(Text(line, style="dim"))
    return parts


__all__ = ["view"]

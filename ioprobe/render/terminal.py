"""The terminal summary of a record: verdict, stage capacities, recommendations."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe.analysis.pcie import CopyRow, copy_rows
from ioprobe.analysis.report import (
    advice,
    dali_operators,
    measurements,
    rate,
    stage_detail,
    verdict,
)
from ioprobe.record import STAGE_NAMES, RunRecord
from ioprobe.render.units import gbps, size_label

__all__ = ["rate", "recommendations", "summary", "verdict"]

BAR = 24


def _bar(value: float | None, top: float) -> Text:
    if not value or top <= 0:
        return Text("")
    # log scale: capacities often differ by orders of magnitude
    lo = top / 1e4
    frac = (math.log10(max(value, lo)) - math.log10(lo)) / (math.log10(top) - math.log10(lo))
    n = max(1, round(frac * BAR))
    return Text("█" * n)


def summary(rec: RunRecord) -> RenderableType:
    ds = rec.dataset
    fmt = ", ".join(f"{k}" for k, _ in sorted(ds.formats.items(), key=lambda kv: -kv[1])[:3])
    head = Text.assemble(
        ("ioprobe ", "bold"),
        (rec.kind, "bold"),
        "  ",
        (ds.target, "cyan"),
        f"  {ds.files:,} files, {ds.bytes / 1e6:,.1f} MB, mean {ds.sample_bytes_mean / 1e3:,.1f} KB"
        f" ({ds.density} density{', ' + fmt if fmt else ''})",
    )
    caps = rec.stages.capacities()
    if not any(caps.values()):
        return _link_only(rec)
    top = max((v for v in caps.values() if v), default=1.0)
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("stage")
    table.add_column("samples/s", justify="right")
    table.add_column("", width=BAR, no_wrap=True)
    table.add_column("measured", overflow="fold")
    for name in STAGE_NAMES:
        style = "bold red" if name == rec.bottleneck else ""
        bar = _bar(caps[name], top)
        bar.stylize("red" if name == rec.bottleneck else "green")
        table.add_row(
            Text(name + (" ◀" if name == rec.bottleneck else ""), style=style),
            rate(caps[name]),
            bar,
            stage_detail(rec, name),
        )
    parts: list[RenderableType] = [
        head,
        Text(""),
        Text(verdict(rec), style="bold"),
        Text(""),
        table,
    ]
    ops = dali_operators(rec)
    if ops:
        t = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
        for col, just in (
            ("DALI operator", "left"),
            ("device", "left"),
            ("stage", "left"),
            ("CPU ms/batch", "right"),
            ("wall ms/batch", "right"),
            ("CPU share", "right"),
        ):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in ops:
            t.add_row(
                r.name,
                r.device,
                r.stage,
                f"{r.cpu_ms:,.2f}",
                f"{r.wall_ms:,.2f}",
                f"{r.cpu_share:.0%}",
            )
        parts += [Text(""), t]
    copies = copy_table(copy_rows(rec))
    if copies is not None:
        parts += [Text(""), copies]
    parts += recommendations(rec, "What to change")
    # the header already names the dataset and its size
    parts += _facts([(k, v) for k, v in measurements(rec) if k not in ("dataset", "size")])
    skipped = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(ds.skipped.items()))
    notes = list(rec.notes)
    if skipped:
        notes.append(f"skipped: {skipped}")
    if ds.sizes_estimated:
        notes.append("sizes estimated from a random sample of the listing")
    for n in notes:
        parts.append(Text(f"note: {n}", style="dim"))
    return Group(*parts)


def _facts(facts: list[tuple[str, str]]) -> list[RenderableType]:
    if not facts:
        return []
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for k, v in facts:
        grid.add_row(k, Text(v))
    return [Text(""), Text("Key measurements", style="bold"), grid]


def copy_table(rows: list[CopyRow]) -> Table | None:
    """The host-to-device probe's rates by copy size, GB/s."""
    if not rows:
        return None
    t = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    for col in ("copy size", "H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            size_label(r.size_bytes),
            gbps(r.h2d_pinned),
            gbps(r.h2d_pageable),
            gbps(r.d2h_pinned),
            gbps(r.d2h_pageable),
        )
    t.caption = "GB/s, median of 3 trials, CUDA events on a dedicated stream"
    return t


def _link_only(rec: RunRecord) -> RenderableType:
    """``probe --pcie-only``: the GPU, its link and the copy rates; there is no pipeline."""
    gpu = rec.host.gpus[0].name if rec.host.gpus else "GPU"
    parts: list[RenderableType] = [
        Text.assemble(("ioprobe probe --pcie-only", "bold"), "  ", (gpu, "cyan")),
        Text(""),
        Text(verdict(rec), style="bold"),
    ]
    table = copy_table(copy_rows(rec))
    if table is not None:
        parts += [Text(""), table]
    parts += recommendations(rec, "What to check")
    parts += _facts([(k, v) for k, v in measurements(rec) if k != "dataset"])
    parts += [Text(f"note: {n}", style="dim") for n in rec.notes]
    return Group(*parts)


def recommendations(rec: RunRecord, title: str) -> list[RenderableType]:
    """The ranked advice, each with its predicted rate and the gain over today's rate (the
    measured one where the run measured it)."""
    items = advice(rec)
    if not items:
        return []
    out: list[RenderableType] = [Text(""), Text(title, style="bold")]
    for i, a in enumerate(items, 1):
        gain = ""
        if a.predicted is not None and a.gain is not None:
            gain = f"  → {rate(a.predicted)} samples/s ({a.gain:.1f}x)"
        out.append(Text(f" {i}. {a.text}{gain}"))
    return out

"""Pieces every terminal view shares: the advice list, the key-facts grid, the copy and
DALI operator tables, and a distributed run's per-rank table."""

from __future__ import annotations

from rich.console import JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.analysis.cluster import RankTable
from ioprobe.analysis.pcie import CopyRow
from ioprobe.analysis.ranks import RankSpread
from ioprobe.analysis.report import Findings, OperatorRow
from ioprobe.record import TuneData
from ioprobe.render.facts import Facts, rank_cells, rank_columns, unchecked_text
from ioprobe.render.tune_text import TUNE_COLUMNS, tune_cells


def recommendations(f: Findings, title: str) -> list[RenderableType]:
    """The ranked advice, each with its predicted rate and the gain over today's rate (the
    measured one where the run measured it)."""
    if not f.recommendations:
        return []
    out: list[RenderableType] = [Text(""), Text(title, style="bold")]
    for i, a in enumerate(f.recommendations, 1):
        gain = ""
        if a.predicted is not None and a.gain is not None:
            gain = f"  → {units.samples_per_s(a.predicted)} samples/s ({a.gain:.1f}x)"
            if a.unchecked:
                gain += f" ({unchecked_text(a.unchecked)})"
        out.append(Text(f" {i}. {a.text}{gain}"))
    return out


def operator_table(rows: list[OperatorRow]) -> Table:
    """A watched DALI pipeline's operators, costliest first."""
    t = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("DALI operator", "left"),
        ("device", "left"),
        ("stage", "left"),
        ("CPU ms/batch", "right"),
        ("wall ms/batch", "right"),
        ("CPU share", "right"),
    )
    for col, just in columns:
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(
            r.name,
            r.device,
            r.stage,
            f"{r.cpu_ms:,.2f}",
            f"{r.wall_ms:,.2f}",
            f"{r.cpu_share:.0%}",
        )
    return t


def facts(rows: Facts) -> list[RenderableType]:
    if not rows:
        return []
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for k, v in rows:
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
            units.memory(r.size_bytes),
            units.in_unit(r.h2d_pinned, "GB"),
            units.in_unit(r.h2d_pageable, "GB"),
            units.in_unit(r.d2h_pinned, "GB"),
            units.in_unit(r.d2h_pageable, "GB"),
        )
    t.caption = "GB/s, median of 3 trials, CUDA events on a dedicated stream"
    return t


def rank_table(t: RankTable, spread: RankSpread | None) -> Table:
    """The ranks a short table lists (``t.shown``), a row each; stragglers in bold."""
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    for name, numeric in rank_columns(t):
        table.add_column(name, justify="right" if numeric else "left")
    named = set(t.stragglers)
    for r in t.shown:
        table.add_row(*rank_cells(t, r, spread), style="bold" if r.rank in named else None)
    return table


def tune_table(t: TuneData) -> Table:
    """``ioprobe tune``'s trials, a row each; the measured best in bold."""
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    for name, numeric in TUNE_COLUMNS:
        table.add_column(name, justify="right" if numeric else "left")
    for i in range(len(t.trials)):
        table.add_row(*tune_cells(t, i), style="bold" if i == t.best else None)
    return table


__all__ = [
    "copy_table",
    "facts",
    "operator_table",
    "rank_table",
    "recommendations",
    "tune_table",
]

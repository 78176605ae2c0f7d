"""A compact Markdown summary to paste into an issue or a pull request.

GitHub renders inline HTML in Markdown, so data strings are HTML-escaped first and then have
Markdown's own markup characters backslash-escaped: a dataset path can neither inject a tag
nor break a table.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from ioprobe import units
from ioprobe.analysis.pcie import CopyRow
from ioprobe.analysis.report import Advice, Findings, HeatCell, Heatmap, OperatorRow, StageBar
from ioprobe.record import RunRecord, SizeData
from ioprobe.redact import printable, shown_all
from ioprobe.render import sizing_text
from ioprobe.render.facts import (
    cluster_sentence,
    cluster_title,
    curve_line,
    facts_title,
    incomplete,
    judged,
    key_facts,
    missing_line,
    rank_cells,
    rank_columns,
    rank_rest,
    stage_detail,
    title,
    unchecked_text,
    verdict,
)
from ioprobe.render.tune_text import TUNE_COLUMNS, tune_cells, tune_summary

# data never starts a line here, so only the characters that act mid-line need escaping
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(value: object) -> str:
    """Data to Markdown text that renders literally."""
    text = html.escape(printable(str(value)), quote=False)  # control characters as \xNN
    # '>' became &gt; above; the rest of Markdown's markup gets a backslash
    return _MD_SPECIAL.sub(r"\\\1", text)


def render(rec: RunRecord, f: Findings) -> str:
    rec, f = shown_all(rec), shown_all(f)  # outside text masked and escaped before any use
    lines = [f"### {md(title(rec))}", "", f"**{md(verdict(rec, f))}**", ""]
    lines[1:1] = ["", f"**{md(incomplete(rec))}**"] if not rec.complete else []
    lines += _stall_bursts(f)
    lines += _stage_table(rec, f.stages)
    lines += _ranks(rec, f)
    lines += _tune(rec)
    if f.kind != "size":  # a sizing's advice is its verdict and its table
        lines += _recommendations(f.recommendations) if judged(rec) else []
    lines += _sizing(rec.sizing, f) if f.kind == "size" and rec.sizing is not None else []
    lines += _heatmap(f.heatmap)
    lines += _operators(f.operators)
    lines += _copies(f.copies)
    lines += _measurements(rec, f)
    lines += _notes(f.notes)
    lines.append("<sub>made with ioprobe</sub>")
    return "\n".join(lines) + "\n"


# Each section below is its lines followed by a blank one, or nothing where the record has none.


def _stall_bursts(f: Findings) -> list[str]:
    st = f.stall_over_time
    return [md(st.verdict), ""] if st is not None and st.verdict else []


def _stage_table(rec: RunRecord, stages: Sequence[StageBar]) -> list[str]:
    if not stages:
        return []
    lines = ["| stage | samples/s | measured from |", "|---|--:|---|"]
    for b in stages:
        name = f"**{b.stage}** ◀" if b.limiting else b.stage
        lines.append(
            f"| {name} | {units.samples_per_s(b.capacity)} | {md(stage_detail(rec, b.stage))} |"
        )
    return [*lines, ""]


def _ranks(rec: RunRecord, f: Findings) -> list[str]:
    """A distributed run's ranks: what they say together, a probe's clients curve, and the
    ranks a short table lists, the rest summarised."""
    heading = cluster_title(rec)
    t = f.ranks
    if heading is None or t is None:
        return []
    lines = [f"**{md(heading)}**", ""]
    for x in (cluster_sentence(f), curve_line(rec)):
        lines += [md(x), ""] if x else []
    cols = rank_columns(t)
    lines.append("| " + " | ".join(name for name, _ in cols) + " |")
    lines.append("|" + "".join("--:|" if num else "---|" for _, num in cols))
    named = set(t.stragglers)
    for r in t.shown:
        cells = [md(c) for c in rank_cells(t, r, f.rank_spread)]
        if r.rank in named:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for x in (rank_rest(t), missing_line(t)):
        lines += [md(x), ""] if x else []
    return lines


def _tune(rec: RunRecord) -> list[str]:
    """``ioprobe tune``'s trials: the table, then what they say."""
    t = rec.tune
    if t is None or not t.trials:
        return []
    lines = ["**Trials (ioprobe tune)**", ""]
    lines += _table(TUNE_COLUMNS, [tune_cells(t, i) for i in range(len(t.trials))])
    for x in tune_summary(t):
        lines += [md(x), ""]
    return lines


def _recommendations(advice: Sequence[Advice]) -> list[str]:
    if not advice:
        return ["Nothing to change: no change the model knows predicts a 5% gain.", ""]
    lines = ["**What to change**", ""]
    lines += [f"{i}. {md(a.text)}{_gain(a)}" for i, a in enumerate(advice, 1)]
    return [*lines, ""]


def _gain(a: Advice) -> str:
    if a.predicted is None:
        return ""
    times = f" ({a.gain:.1f}x)" if a.gain is not None else ""
    note = f" *({md(unchecked_text(a.unchecked))})*" if a.unchecked else ""
    return f" → **{units.samples_per_s(a.predicted)} samples/s{times}**{note}"


def _table(columns: Sequence[tuple[str, bool]], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(md(name) for name, _ in columns) + " |"]
    lines.append("|" + "".join("--:|" if num else "---|" for _, num in columns))
    lines += ["| " + " | ".join(md(c) for c in cells) + " |" for cells in rows]
    return [*lines, ""]


def _sizing(sz: SizeData, f: Findings) -> list[str]:
    """The sizing report, as the HTML page has it: what the answer implies, each class in
    MLPerf Storage's units, the density guidance, published reference points, the inputs
    with their sources and the assumptions (the utilisation grid follows)."""
    said = sizing_text.answer_lines(sz, f.cache_gap)
    lines = [f"- {md(x)}" for x in said] + ([""] if said else [])
    lines += [f"**{md(sizing_text.units_title(sz))}**", ""]
    lines += _table(
        sizing_text.units_columns(sz), [sizing_text.units_cells(sz, u) for u in sz.units]
    )
    lines += [md(sizing_text.units_note(sz)), ""]
    if sz.density is not None:
        lines += ["**Density**", "", md(sizing_text.density_paragraph(sz.density, sz.inputs)), ""]
    ref = sizing_text.reference_sentence(sz)
    if ref is not None and sz.references is not None:
        lines += ["**Reference points: published MLPerf Storage results**", "", md(ref), ""]
        lines += _table(
            sizing_text.REFERENCE_COLUMNS,
            [sizing_text.reference_cells(p) for p in sz.references.points],
        )
    lines += ["**Inputs**", ""]
    lines += _table(
        [("figure", False), ("value", True), ("source", False)],
        [list(r) for r in sizing_text.input_rows(sz)],
    )
    cost = sizing_text.cost_note(sz)
    lines += [md(cost), ""] if cost else []
    lines += ["<details><summary>Assumptions</summary>", ""]
    lines += [f"- {md(a)}" for a in sz.assumptions]
    lines += ["", "</details>", "", "**GPU utilisation by storage and GPU count**", ""]
    return lines


def _heatmap(hm: Heatmap | None) -> list[str]:
    if hm is None:
        return []
    heads = [f"{g} GPU{'s' if g > 1 else ''}" for g in hm.gpus]
    lines = ["| storage | " + " | ".join(heads) + " |", "|---|" + "--:|" * len(hm.gpus)]
    for name, cells in zip(hm.storage, hm.cells, strict=True):
        lines.append(f"| {md(name)} | " + " | ".join(_heat_cell(c) for c in cells) + " |")
    return [*lines, ""]


def _heat_cell(c: HeatCell | None) -> str:
    return "-" if c is None else f"{int(c.utilization * 100 + 1e-9)}% {c.bottleneck}"


def _operators(rows: Sequence[OperatorRow]) -> list[str]:
    if not rows:
        return []
    lines = [
        "| DALI operator | device | stage | CPU ms/batch | wall ms/batch | CPU share |",
        "|---|---|---|--:|--:|--:|",
    ]
    lines += [
        f"| {md(r.name)} | {md(r.device)} | {md(r.stage)} | {r.cpu_ms:,.2f} | {r.wall_ms:,.2f} | "
        f"{r.cpu_share:.0%} |"
        for r in rows
    ]
    return [*lines, ""]


def _copies(rows: Sequence[CopyRow]) -> list[str]:
    if not rows:
        return []
    lines = [
        "| copy size | H2D pinned GB/s | H2D pageable | D2H pinned | D2H pageable |",
        "|--:|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {units.memory(r.size_bytes)} | {units.in_unit(r.h2d_pinned, 'GB')} | {units.in_unit(r.h2d_pageable, 'GB')} | "
        f"{units.in_unit(r.d2h_pinned, 'GB')} | {units.in_unit(r.d2h_pageable, 'GB')} |"
        for r in rows
    ]
    return [*lines, ""]


def _measurements(rec: RunRecord, f: Findings) -> list[str]:
    """The key facts, folded: they are evidence, not the answer."""
    measured = key_facts(rec, f)
    if not measured:
        return []
    lines = [f"<details><summary>{md(facts_title(rec))}</summary>", ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {md(k)} | {md(v)} |" for k, v in measured]
    return [*lines, "", "</details>", ""]


def _notes(notes: Sequence[str]) -> list[str]:
    if not notes:
        return []
    return [*(f"> note: {md(n)}" for n in notes), ""]

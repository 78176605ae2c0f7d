"""A compact Markdown summary to paste into an issue or a pull request.

GitHub renders inline HTML in Markdown, so data strings are HTML-escaped first and then have
Markdown's own markup characters backslash-escaped: a dataset path can neither inject a tag
nor break a table.
"""

from __future__ import annotations

import html
import re

from ioprobe.analysis.report import Findings
from ioprobe.record import RunRecord
from ioprobe.render.facts import facts_title, key_facts, stage_detail, title, verdict
from ioprobe.render.format import gbps, rate, size_label

# data never starts a line here, so only the characters that act mid-line need escaping
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(value: object) -> str:
    """Data to Markdown text that renders literally."""
    text = html.escape(str(value), quote=False).replace("\n", " ")
    # '>' became &gt; above; the rest of Markdown's markup gets a backslash
    return _MD_SPECIAL.sub(r"\\\1", text)


def render(rec: RunRecord, f: Findings) -> str:
    lines = [f"### {md(title(rec))}", "", f"**{md(verdict(rec))}**", ""]
    if f.stages:
        lines += ["| stage | samples/s | measured from |", "|---|--:|---|"]
        for b in f.stages:
            name = f"**{b.stage}** ◀" if b.limiting else b.stage
            lines.append(f"| {name} | {rate(b.capacity)} | {md(stage_detail(rec, b.stage))} |")
        lines.append("")
    if f.kind != "size":
        if f.recommendations:
            lines.append("**What to change**")
            lines.append("")
            for i, a in enumerate(f.recommendations, 1):
                gain = ""
                if a.predicted is not None:
                    times = f" ({a.gain:.1f}x)" if a.gain is not None else ""
                    gain = f" → **{rate(a.predicted)} samples/s{times}**"
                lines.append(f"{i}. {md(a.text)}{gain}")
            lines.append("")
        else:
            lines += ["Nothing to change: no change the model knows predicts a 5% gain.", ""]
    hm = f.heatmap
    if hm is not None:
        heads = [f"{g} GPU{'s' if g > 1 else ''}" for g in hm.gpus]
        lines.append("| storage | " + " | ".join(heads) + " |")
        lines.append("|---|" + "--:|" * len(hm.gpus))
        for name, cells in zip(hm.storage, hm.cells, strict=True):
            vals = [
                "-" if c is None else f"{int(c.utilization * 100 + 1e-9)}% {c.bottleneck}"
                for c in cells
            ]
            lines.append(f"| {md(name)} | " + " | ".join(vals) + " |")
        lines.append("")
    if f.operators:
        lines += [
            "| DALI operator | device | stage | CPU ms/batch | wall ms/batch | CPU share |",
            "|---|---|---|--:|--:|--:|",
        ]
        lines += [
            f"| {md(r.name)} | {r.device} | {r.stage} | {r.cpu_ms:,.2f} | {r.wall_ms:,.2f} | "
            f"{r.cpu_share:.0%} |"
            for r in f.operators
        ]
        lines.append("")
    if f.copies:
        lines += ["| copy size | H2D pinned GB/s | H2D pageable | D2H pinned | D2H pageable |"]
        lines += ["|--:|--:|--:|--:|--:|"]
        lines += [
            f"| {size_label(r.size_bytes)} | {gbps(r.h2d_pinned)} | {gbps(r.h2d_pageable)} | "
            f"{gbps(r.d2h_pinned)} | {gbps(r.d2h_pageable)} |"
            for r in f.copies
        ]
        lines.append("")
    measured = key_facts(rec)
    if measured:
        lines += [f"<details><summary>{md(facts_title(rec))}</summary>", ""]
        lines += ["| | |", "|---|---|"]
        lines += [f"| {md(k)} | {md(v)} |" for k, v in measured]
        lines += ["", "</details>", ""]
    for n in f.notes:
        lines.append(f"> note: {md(n)}")
    if f.notes:
        lines.append("")
    lines.append("<sub>made with ioprobe</sub>")
    return "\n".join(lines) + "\n"

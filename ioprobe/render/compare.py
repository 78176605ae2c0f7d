"""Before/after views of a Comparison: a terminal table and a Markdown summary."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.analysis.compare import Comparison
from ioprobe.redact import shown_all
from ioprobe.render.markdown import md


def headline(c: Comparison) -> str:
    line = (
        f"{c.basis} rate {units.samples_per_s(c.rate_before)} -> {units.samples_per_s(c.rate_after)} samples/s "
        f"({units.ratio(c.rate_ratio)}); bottleneck {c.bottleneck_before} -> {c.bottleneck_after}"
    )
    if c.idle_before is not None and c.idle_after is not None:
        line += f"; GPU waiting {units.percent(c.idle_before)} -> {units.percent(c.idle_after)}"
    return line


def prediction_line(c: Comparison) -> str | None:
    a = c.applied
    if a is None:
        return None
    return (
        f"Applied '{a.kind}' ({a.how}): predicted {units.samples_per_s(a.predicted_samples_per_s)} samples/s "
        f"({units.ratio(a.predicted_gain)}), measured {units.samples_per_s(a.measured_samples_per_s)} "
        f"({units.ratio(a.measured_gain)}){' end to end' if a.end_to_end else ''}: "
        f"prediction error {a.error:+.1%}"
    )


def render_compare(c: Comparison) -> RenderableType:
    c = shown_all(c)  # file names and settings are the user's: no escape reaches a terminal
    parts: list[RenderableType] = [
        Text.assemble(
            ("ioprobe compare", "bold"), "  ", (c.before, "cyan"), " -> ", (c.after, "cyan")
        ),
        Text(""),
        Text(headline(c), style="bold"),
    ]
    pred = prediction_line(c)
    if pred and c.applied is not None:
        # within 10% the model's prediction held; further off, the reader should look closer
        close = abs(c.applied.error) <= 0.1
        parts.append(Text(pred, style="bold green" if close else "bold yellow"))
    parts += [Text(""), _stage_table(c)]
    if c.config:
        parts += [Text(""), _config_table(c)]
    for w in c.warnings:
        parts.append(Text(f"note: {w}", style="dim"))
    return Group(*parts)


def _stage_table(c: Comparison) -> Table:
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("stage")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    for s in c.stages:
        table.add_row(
            s.stage,
            units.samples_per_s(s.before),
            units.samples_per_s(s.after),
            units.ratio(s.ratio),
        )
    return table


def _config_table(c: Comparison) -> Table:
    """The recorded settings that differ; Text, not markup: paths and hostnames are the user's."""
    cfg = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    cfg.add_column("setting")
    cfg.add_column("before", overflow="fold")
    cfg.add_column("after", overflow="fold")
    for ch in c.config:
        cfg.add_row(Text(ch.what), Text(ch.before), Text(ch.after))
    return cfg


def compare_markdown(c: Comparison) -> str:
    c = shown_all(c)
    lines = [
        f"### ioprobe compare: {md(c.before)} → {md(c.after)}",
        "",
        f"**{md(headline(c))}**",
        "",
    ]
    pred = prediction_line(c)
    if pred:
        lines += [md(pred), ""]
    lines += ["| stage | before | after | change |", "|---|--:|--:|--:|"]
    lines += [
        f"| {s.stage} | {units.samples_per_s(s.before)} | {units.samples_per_s(s.after)} | {units.ratio(s.ratio)} |"
        for s in c.stages
    ]
    lines.append("")
    if c.config:
        lines += ["| setting | before | after |", "|---|---|---|"]
        lines += [f"| {md(ch.what)} | {md(ch.before)} | {md(ch.after)} |" for ch in c.config]
        lines.append("")
    lines += [f"> note: {md(w)}" for w in c.warnings]
    return "\n".join(lines) + "\n"

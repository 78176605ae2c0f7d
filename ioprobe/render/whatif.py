"""The terminal view of a what-if record: each stage before and after, and the new verdict."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.analysis.report import Findings
from ioprobe.record import STAGE_NAMES, RunRecord
from ioprobe.render.facts import verdict, was_line
from ioprobe.render.format import change_flags
from ioprobe.render.widgets import recommendations


def view(rec: RunRecord, f: Findings) -> RenderableType:
    w = rec.whatif
    if w is None:
        raise ValueError("not a what-if record")
    gain = f.numbers.whatif_gain
    parts: list[RenderableType] = [
        Text.assemble(("ioprobe whatif", "bold"), "  ", (rec.dataset.target, "cyan")),
        Text(f"change: {change_flags(w.change)}"),
        Text(""),
        Text(f"was {was_line(rec)}"),
        Text(verdict(rec, f) + (f"  ({gain:.2f}x)" if gain else ""), style="bold"),
        Text(""),
        _stages(rec),
    ]
    parts += recommendations(f, "Then")
    if w.assumptions:
        parts.append(Text(""))
        parts += [Text(f"assumes: {a}", style="dim") for a in w.assumptions]
    return Group(*parts)


def _stages(rec: RunRecord) -> Table:
    """Each stage's capacity before and after, and why it moved."""
    w = rec.whatif
    assert w is not None
    before = w.base_stages.capacities()
    after = rec.stages.capacities()
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("stage")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    table.add_column("why", overflow="fold")
    why = {d.stage: d.why for d in w.deltas}
    for name in STAGE_NAMES:
        b, a = before[name], after[name]
        limiting = name == rec.bottleneck
        table.add_row(
            Text(name + (" ◀" if limiting else ""), style="bold red" if limiting else ""),
            units.samples_per_s(b),
            units.samples_per_s(a),
            units.ratio(a / b) if a and b else "",
            why.get(name, ""),
        )
    return table


__all__ = ["view"]

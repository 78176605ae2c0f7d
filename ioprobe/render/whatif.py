"""The terminal view of a what-if record: each stage before and after, and the new verdict."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe.analysis.whatif import describe
from ioprobe.record import STAGE_NAMES, RunRecord
from ioprobe.render.terminal import rate, recommendations, verdict


def render_whatif(rec: RunRecord) -> RenderableType:
    w = rec.whatif
    if w is None:
        raise ValueError("not a what-if record")
    changes = "  ".join(f"--{k.replace('_', '-')} {v}" for k, v in describe(w.change).items())
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
        ratio = f"{a / b:.2f}x" if a and b else ""
        style = "bold red" if name == rec.bottleneck else ""
        table.add_row(
            Text(name + (" ◀" if name == rec.bottleneck else ""), style=style),
            rate(b),
            rate(a),
            ratio,
            why.get(name, ""),
        )
    was = w.base_measured_samples_per_s or w.base_predicted_samples_per_s
    gain = rec.predicted_samples_per_s / was if was else None
    head = Text.assemble(("ioprobe whatif", "bold"), "  ", (rec.dataset.target, "cyan"))
    parts: list[RenderableType] = [
        head,
        Text(f"change: {changes}"),
        Text(""),
        Text(
            f"was {w.base_bottleneck}-bound at {rate(was)} samples/s"
            + (" (measured)" if w.base_measured_samples_per_s else " (predicted)")
        ),
        Text(
            verdict(rec) + (f"  ({gain:.2f}x)" if gain else ""),
            style="bold",
        ),
        Text(""),
        table,
    ]
    parts += recommendations(rec, "Then")
    if w.assumptions:
        parts.append(Text(""))
        parts += [Text(f"assumes: {a}", style="dim") for a in w.assumptions]
    return Group(*parts)

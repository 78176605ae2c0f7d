"""The terminal renderer: ``render(rec, findings)`` is the text of the view that fits the
record's kind: a probe or watch summary (``summary``), a what-if's before and after
(``whatif``), a sizing table (``sizing``)."""

from __future__ import annotations

import io

from rich.console import RenderableType

from ioprobe.analysis.report import Findings
from ioprobe.record import RunRecord
from ioprobe.redact import console, shown_all
from ioprobe.render import sizing, summary, whatif


def render(rec: RunRecord, f: Findings, *, width: int = 100, color: bool = False) -> str:
    """The view as text ``width`` columns wide, with ANSI colours when ``color``."""
    return to_text(view(rec, f), width=width, color=color)


def view(rec: RunRecord, f: Findings) -> RenderableType:
    """The view as rich renderables, for a console of the caller's.

    Every string of the record and its findings (a path, a URL, a loader's name, a library's
    error) crosses ``redact.shown_all`` first: secrets masked, control characters and
    undecodable bytes escaped, so data can't drive the terminal or fail its encoder; the
    view's own colours are rich's, added after. Print it through ``redact.console``, which
    reads no markup: a class named ``[/]`` is text.
    """
    rec, f = shown_all(rec), shown_all(f)
    if rec.kind == "size" and rec.sizing is not None:
        return sizing.view(rec, f)
    if rec.kind == "whatif" and rec.whatif is not None:
        return whatif.view(rec, f)
    return summary.view(rec, f)


def to_text(renderable: RenderableType, *, width: int = 100, color: bool = False) -> str:
    out = io.StringIO()
    console(
        file=out,
        width=width,
        color_system="auto" if color else None,
        force_terminal=color,
    ).print(renderable)
    return out.getvalue()


__all__ = ["render", "to_text", "view"]

"""Re-render a saved record (a probe, watch, what-if or size record): the terminal summary,
and optionally its JSON again."""

from __future__ import annotations

import click
from rich.console import RenderableType

from ioprobe.cli._common import console, json_option, write_record
from ioprobe.record import RunRecord
from ioprobe.render.sizing import render_size
from ioprobe.render.terminal import summary
from ioprobe.render.whatif import render_whatif


def render(record: RunRecord) -> RenderableType:
    """The terminal view that fits the record's kind."""
    if record.kind == "size" and record.sizing is not None:
        return render_size(record)
    if record.kind == "whatif" and record.whatif is not None:
        return render_whatif(record)
    return summary(record)


@click.command(help=__doc__)
@click.argument("run_file", metavar="RUN.json")
@json_option
def command(run_file: str, json_path: str | None) -> None:
    record = RunRecord.load(run_file)
    if json_path:
        write_record(record, json_path)
    if json_path != "-":
        console().print(render(record))

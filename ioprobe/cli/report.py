"""Re-render a saved record (a probe, watch, what-if or size record): the terminal summary,
and with --html, --md, --trace or -o the same record as a page, a Markdown summary or a
Chrome trace."""

from __future__ import annotations

import click

from ioprobe.cli._common import deliver, output_options, plan_outputs
from ioprobe.record import RunRecord


@click.command(help=__doc__)
@click.argument("run_file", metavar="RUN.json")
@output_options
def command(
    run_file: str,
    json_path: str | None,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
) -> None:
    plan = plan_outputs(json_path, html_path, md_path, trace_path, outputs, [run_file])
    record = RunRecord.load(run_file)
    deliver(record, plan)

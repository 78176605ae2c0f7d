"""Re-render a saved run record: the terminal summary, and optionally its JSON again."""

from __future__ import annotations

import click

from ioprobe.cli._common import console, json_option, write_record
from ioprobe.record import RunRecord
from ioprobe.render.terminal import summary


@click.command(help=__doc__)
@click.argument("run_file", metavar="RUN.json")
@json_option
def command(run_file: str, json_path: str | None) -> None:
    record = RunRecord.load(run_file)
    if json_path:
        write_record(record, json_path)
    if json_path != "-":
        console().print(summary(record))

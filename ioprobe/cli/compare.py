"""Compare two records, before (A) and after (B): each stage's capacity, the delivered rate
and the settings that changed. When B carried out one of A's recommendations (found from B's
worker, core and GPU counts, or named with --applied KIND), it also shows that
recommendation's predicted rate against B's measured rate: the prediction error."""

from __future__ import annotations

import json

import click

from ioprobe.analysis.compare import compare
from ioprobe.cli._common import check_outputs, console, write_text
from ioprobe.errors import BadInputError
from ioprobe.outputs import writes_stdout
from ioprobe.record import RunRecord, to_plain
from ioprobe.render.compare import compare_markdown, render_compare


@click.command(help=__doc__)
@click.argument("before", metavar="A.json")
@click.argument("after", metavar="B.json")
@click.option(
    "--applied",
    metavar="KIND",
    help="The recommendation of A that B applied (e.g. cache_in_ram), when B's record cannot "
    "show it.",
)
@click.option(
    "--json", "json_path", metavar="FILE", help="Write the comparison as JSON ('-' for stdout)."
)
@click.option("--md", "md_path", metavar="FILE", help="Write a Markdown summary ('-' for stdout).")
def command(
    before: str, after: str, applied: str | None, json_path: str | None, md_path: str | None
) -> None:
    if writes_stdout(json_path) and writes_stdout(md_path):
        raise BadInputError("only one output can go to stdout")
    check_outputs([("--json", json_path), ("--md", md_path)], [before, after])
    a, b = RunRecord.load(before), RunRecord.load(after)
    c = compare(a, b, names=(before, after), applied=applied)
    if json_path:
        text = json.dumps(to_plain(c), indent=2, sort_keys=True, allow_nan=False) + "\n"
        write_text(json_path, text, "--json")
    if md_path:
        write_text(md_path, compare_markdown(c), "--md")
    if not (writes_stdout(json_path) or writes_stdout(md_path)):
        console().print(render_compare(c))

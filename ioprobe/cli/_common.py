"""Pieces the subcommands share: output options and writing records."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord


def write_record(rec: RunRecord, path: str) -> None:
    if path == "-":
        sys.stdout.write(rec.dumps())
        return
    try:
        rec.save(path)
    except OSError as exc:
        raise BadInputError(f"--json {path}: cannot write: {exc.strerror or exc}") from None


def console() -> Console:
    return Console(highlight=False)


json_option = click.option(
    "--json", "json_path", metavar="FILE", help="Write the record as JSON ('-' for stdout)."
)

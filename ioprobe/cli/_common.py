"""Pieces the subcommands share: output options and writing records."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from ioprobe.errors import BadInputError, RecordError
from ioprobe.record import STAGE_NAMES, RunRecord


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


catalog_option = click.option(
    "--catalog",
    "catalog_path",
    metavar="FILE",
    help="A TOML file of your own storage classes, added to the shipped ones "
    "(default: $IOPROBE_CATALOG).",
)


def load_analysable(path: str) -> RunRecord:
    """A measured record the model can re-run: it has at least one stage capacity."""
    rec = RunRecord.load(path)
    if rec.kind == "size":
        raise RecordError(
            f"{path}: a size record holds a table, not a run; give a probe or watch run"
        )
    caps = rec.stages.capacities()
    if not any(caps[s] for s in STAGE_NAMES):
        raise RecordError(f"{path}: no stage has a measured capacity, so there is nothing to model")
    return rec

"""Show this machine: CPU, memory, the storage holding PATH (default: the current
directory) and GPUs, without measuring anything.

It answers the first questions about a slow input pipeline in under a second: how many cores
this process may use, how much memory is free, what kind of device holds the data, and which
GPUs are present with what PCIe link. --json keeps the same facts for a bug report or for
comparing two machines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ioprobe.collect.hostinfo import host_info
from ioprobe.errors import BadInputError
from ioprobe.record import to_plain
from ioprobe.render.host import render_host

ENV_SCHEMA = "ioprobe.env/1"


@click.command(name="env", help=__doc__)
@click.argument("path", required=False, default=".", metavar="[PATH]")
@click.option(
    "--json",
    "json_file",
    metavar="FILE",
    default=None,
    help="Also write the facts as JSON to FILE ('-' for stdout, which replaces the table).",
)
def command(path: str, json_file: str | None) -> None:
    host = host_info(path)
    document: dict[str, Any] = {"schema": ENV_SCHEMA, "host": to_plain(host)}
    text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"
    if json_file == "-":
        # The table would make stdout invalid JSON; a pipe asked for data only.
        sys.stdout.write(text)
        return
    if json_file is not None:
        try:
            Path(json_file).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BadInputError(f"{json_file}: cannot write: {exc.strerror or exc}") from None
    Console().print(render_host(host))

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
from typing import Any

import click

from ioprobe.collect.hostinfo import host_info
from ioprobe.errors import BadInputError
from ioprobe.outputs import check_output, check_stdout_open, write_output, writes_stdout
from ioprobe.record import to_plain
from ioprobe.redact import console as text_console
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
    to_stdout = writes_stdout(json_file)
    if json_file is not None:
        # before anything else: one line, nothing of theirs touched
        if json_file == "-":
            check_stdout_open("--json -")
        else:
            check_output(json_file)
    host = host_info(path)
    document: dict[str, Any] = {"schema": ENV_SCHEMA, "host": to_plain(host)}
    text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"
    if json_file == "-":
        sys.stdout.write(text)
    elif json_file is not None:
        # the writer every output uses: a file atomically, a device or FIFO in place
        try:
            write_output(json_file, text)
        except OSError as exc:
            raise BadInputError(
                f"--json {json_file}: cannot write: {exc.strerror or exc}"
            ) from None
    if not to_stdout:  # the table would make stdout invalid JSON: a pipe asked for data only
        text_console().print(render_host(host))

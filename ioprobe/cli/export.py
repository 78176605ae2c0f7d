"""Export a measured run for another tool: ``ioprobe export dlio RUN.json`` writes a DLIO
(MLPerf Storage) workload YAML of the run's dataset, loader and training step.

A storage vendor runs it with ``dlio_benchmark --config-dir DIR workload=NAME`` to put the
user's own job on their system. Each value is commented with where it came from; what DLIO
cannot reproduce is listed at the end. Written to stdout, or to -o FILE ('-': stdout).
"""

from __future__ import annotations

import click

from ioprobe.analysis.dlio import dlio_workload
from ioprobe.cli._common import check_outputs, count
from ioprobe.errors import BadInputError
from ioprobe.outputs import check_stdout_open, write_output
from ioprobe.record import RunRecord
from ioprobe.render.dlio import to_yaml


@click.command(help=__doc__)
@click.argument("format", type=click.Choice(["dlio"]))
@click.argument("run", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", "output", metavar="FILE", help="Write here, not to stdout ('-': stdout)."
)
@click.option("--epochs", type=count(), help="Epochs to emulate (default: the epochs watched).")
@click.option(
    "--data-folder", metavar="PATH", help="Where DLIO generates and reads the dataset's files."
)
def command(
    format: str, run: str, output: str | None, epochs: int | None, data_folder: str | None
) -> None:
    output = None if output == "-" else output  # '-': stdout, as every other output takes it
    check_outputs([("-o", output)], [run])  # before anything: one line, nothing replaced
    if output is None:
        check_stdout_open("the export (on stdout)")
    if data_folder is not None and not data_folder.isprintable():
        # YAML would keep it, escaped ("x\\npwned"), and DLIO would read a folder of that
        # name, not the one given
        raise BadInputError(
            f"--data-folder: {data_folder!r} holds a control character; give a folder name"
        )
    if data_folder is not None and "${" in data_folder:
        # DLIO reads its configuration through Hydra, which would resolve ${...} (an
        # environment variable, a resolver) where a folder name was meant
        raise BadInputError(
            f"--data-folder: {data_folder!r} holds '${{', which DLIO's Hydra would resolve; "
            "give a folder name"
        )
    rec = RunRecord.load(run)
    try:
        workload = dlio_workload(rec, epochs=epochs, data_folder=data_folder)
    except ValueError as exc:
        raise BadInputError(f"{run}: cannot export to DLIO: {exc}") from None
    header = [
        f"DLIO workload from ioprobe {rec.ioprobe_version or ''} {rec.kind} record {run}".replace(
            "  ", " "
        ),
        f"created {rec.created}" if rec.created else "",
    ]
    text = to_yaml(workload, [h for h in header if h])
    if output is None:
        click.echo(text, nl=False)
    else:
        write_output(output, text)

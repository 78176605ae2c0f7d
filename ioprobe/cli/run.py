"""Run a training script unchanged, watching every PyTorch DataLoader it iterates.

  ioprobe run [--json F] [--html F] [--md F] [--trace F] [-o F] -- python train.py ARGS...

The script's stdout, stderr and exit code pass through. At exit the summary of each loader
is printed on stderr; each output flag writes the loader that delivered the most samples to
its file, and any other loaders beside it with .loader2, .loader3, ... before the ending.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console

from ioprobe.analysis import finalize_watch
from ioprobe.analysis.catalog import try_load_catalog
from ioprobe.analysis.report import findings
from ioprobe.cli._common import (
    EXTENSIONS,
    output_options,
    plan_outputs,
    show,
    write_record,
    write_rendered,
    writes_stdout,
)
from ioprobe.collect import nvtx
from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord

SITECUSTOMIZE = """\
# Written by `ioprobe run`; removed when the run ends.
import os as _os
import sys as _sys

try:
    from ioprobe.watch import run_hook as _run_hook

    _run_hook.install()
except Exception as _exc:  # ioprobe missing from this interpreter: run unwatched
    print(f"ioprobe: not watching this process: {_exc}", file=_sys.stderr)

# chain to the sitecustomize this one shadows, if there is one; it runs under another name
# because the import of this module is still in progress
_here = _os.path.dirname(_os.path.abspath(__file__))
import importlib.machinery as _m
import importlib.util as _u
_spec = _m.PathFinder.find_spec(
    "sitecustomize", [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(_u.module_from_spec(_spec))
"""


@click.command(help=__doc__, context_settings={"ignore_unknown_options": True})
@output_options
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    json_path: str | None,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
    cmd: tuple[str, ...],
) -> None:
    plan = plan_outputs(json_path, html_path, md_path, trace_path, outputs)
    _check(plan, cmd)
    code, runs = _run_watched(cmd)
    _report_all(runs, plan)
    sys.exit(code)


def _check(plan: dict[str, list[str]], cmd: tuple[str, ...]) -> None:
    """Refuse, before the script starts, outputs to stdout and a command that cannot run."""
    if any(writes_stdout(p) for paths in plan.values() for p in paths):
        raise BadInputError("ioprobe run: stdout is the script's; give the outputs file names")
    _check_command(cmd[0])


def _check_command(program: str) -> None:
    """``program`` is one the OS will run: a name found on PATH, or (with a slash, which is
    how exec reads it) an executable file."""
    if os.sep not in program:
        if shutil.which(program) is not None:
            return
        if Path(program).exists():  # exec looks a bare name up on PATH only
            raise BadInputError(f"{program}: not on PATH; give it as ./{program}")
        raise BadInputError(f"{program}: command not found")
    path = Path(program)
    if not path.exists():
        raise BadInputError(f"{program}: no such file")
    if path.is_dir():
        raise BadInputError(f"{program}: is a directory, not a command")
    if not os.access(path, os.X_OK):
        raise BadInputError(
            f"{program}: not executable; chmod +x it, or give its interpreter first "
            f"(ioprobe run -- python {program})"
        )


def _run_watched(cmd: tuple[str, ...]) -> tuple[int, list[RunRecord]]:
    """Run ``cmd`` with the hook on its path: its exit code, and the judged record of each
    loader it iterated, the one that delivered the most samples first."""
    tmp = Path(tempfile.mkdtemp(prefix="ioprobe-run-"))
    try:
        hook = tmp / "hook"
        records = tmp / "records"
        hook.mkdir()
        records.mkdir()
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        code = _call_script(cmd, _child_env(hook, records))
        catalog = try_load_catalog()
        runs = [finalize_watch(RunRecord.load(p), catalog) for p in sorted(records.glob("*.json"))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    runs.sort(key=lambda r: -sum(e.samples for e in (r.watch.epochs if r.watch else [])))
    return code, runs


def _child_env(hook: Path, records: Path) -> dict[str, str]:
    """The script's environment: the hook first on its path, and where to save records."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    env["IOPROBE_RUN_DIR"] = str(records)
    # DALI's per-operator timing, set before the script builds a pipeline
    env.update(nvtx.injection_env())
    return env


def _call_script(cmd: tuple[str, ...], env: dict[str, str]) -> int:
    # Ctrl-C reaches the script too (same process group): let it decide, then report
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.call(list(cmd), env=env)
    except OSError as exc:  # passed the checks but exec refused it: no #! line, a bad ELF
        raise BadInputError(f"{cmd[0]}: cannot run: {exc.strerror or exc}") from None
    finally:
        signal.signal(signal.SIGINT, previous)


def _report_all(runs: list[RunRecord], plan: dict[str, list[str]]) -> None:
    """Each loader's summary on stderr (the script's stdout is its own), then its planned
    outputs: the first loader's at the paths given, each other one's beside them (``_nth``)."""
    err = Console(stderr=True, highlight=False)
    if not runs:
        err.print("ioprobe: no DataLoader was iterated: nothing to report")
    judged = [(rec, findings(rec)) for rec in runs]
    for i, (rec, f) in enumerate(judged, 1):
        if len(runs) > 1:
            err.print(f"\n[bold]loader {i} of {len(runs)}[/bold]")
        show(rec, f, err=True)
    for i, (rec, f) in enumerate(judged, 1):
        mine = plan if i == 1 else {k: [_nth(p, i) for p in ps] for k, ps in plan.items()}
        for path in mine["json"]:
            write_record(rec, path)
        write_rendered(rec, f, mine)


def _nth(path: str, i: int) -> str:
    """``run.trace.json`` -> ``run.loader2.trace.json``: the ending that names the format stays."""
    low = path.lower()
    ext = next((x for x, _ in EXTENSIONS if low.endswith(x)), Path(path).suffix)
    stem = path[: len(path) - len(ext)] if ext else path
    return f"{stem}.loader{i}{path[len(stem) :]}"

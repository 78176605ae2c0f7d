"""Pieces the subcommands share: output options and writing records and reports."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from importlib import import_module
from typing import Any, TypeVar

import click
from rich.console import Console

from ioprobe.analysis.catalog import Catalog, resolve_storage
from ioprobe.analysis.report import Findings, findings
from ioprobe.errors import WRITE_ERRNOS, BadInputError, IoprobeError, RecordError
from ioprobe.outputs import check_output, check_stdout_open, write_output, writes_stdout
from ioprobe.record import STAGE_NAMES, RunRecord, StorageClassInfo
from ioprobe.redact import console as text_console


def write_record(rec: RunRecord, path: str) -> None:
    write_text(path, rec.dumps(), "--json")


def console() -> Console:
    """The stdout console: every string printed through it is text (``redact.console``)."""
    return text_console()


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
    return analysable(RunRecord.load(path), path)


def analysable(rec: RunRecord, path: str) -> RunRecord:
    """``rec`` if the model can re-run it, else a ``RecordError`` naming ``path``."""
    if rec.kind == "size":
        raise RecordError(
            f"{path}: a size record holds a table, not a run; give a probe or watch run"
        )
    # a what-if is re-run from the measured stages it started from
    caps = (rec.whatif.base_stages if rec.whatif else rec.stages).capacities()
    if not any(caps[s] for s in STAGE_NAMES):
        raise RecordError(f"{path}: no stage has a measured capacity, so there is nothing to model")
    return rec


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# -o FILE: the renderer is picked by the name's ending (longest first)
EXTENSIONS = (
    (".trace.json", "trace"),
    (".html", "html"),
    (".htm", "html"),
    (".md", "md"),
    (".markdown", "md"),
    (".json", "json"),
)


def output_options(fn: F) -> F:
    """--json, --html, --md, --trace and -o, shared by probe, run and report."""
    for opt in reversed(
        (
            json_option,
            click.option(
                "--html", "html_path", metavar="FILE", help="Write a self-contained HTML report."
            ),
            click.option(
                "--md", "md_path", metavar="FILE", help="Write a Markdown summary ('-' for stdout)."
            ),
            click.option(
                "--trace",
                "trace_path",
                metavar="FILE",
                help="Write a Chrome trace (open in ui.perfetto.dev or chrome://tracing).",
            ),
            click.option(
                "-o",
                "--output",
                "outputs",
                metavar="FILE",
                multiple=True,
                help="Write FILE, the format picked by its ending: .html, .md, .trace.json or "
                ".json (the record). Repeatable.",
            ),
        )
    ):
        fn = opt(fn)
    return fn


def plan_outputs(
    json_path: str | None,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
    inputs: Sequence[str | None] = (),
) -> dict[str, list[str]]:
    """format -> paths, from the explicit flags and each -o's ending; checked before any
    measuring starts, so a typo or an unwritable path costs nothing (``inputs``: the files
    the command reads, which no output may replace)."""
    named = [
        (f"--{fmt}", fmt, path)
        for fmt, path in (
            ("json", json_path),
            ("html", html_path),
            ("md", md_path),
            ("trace", trace_path),
        )
        if path is not None  # "" too: refused below, not taken for no output
    ]
    named += [("-o", _format_of(path), path) for path in outputs]
    plan: dict[str, list[str]] = {"json": [], "html": [], "md": [], "trace": []}
    for _, fmt, path in named:
        plan[fmt].append(path)
    _check_stdout(plan)
    check_outputs([(flag, path) for flag, _, path in named], inputs)
    return plan


def _format_of(path: str) -> str:
    """The format an -o path asks for by its ending."""
    low = path.lower()
    picked = next((f for ext, f in EXTENSIONS if low.endswith(ext)), None)
    if picked is None:
        raise BadInputError(
            f"-o {path}: cannot tell the format from the name; end it in .html, .md, "
            ".trace.json or .json"
        )
    return picked


def _check_stdout(plan: dict[str, list[str]]) -> None:
    """At most one output goes to stdout ('-'), and not a page or a trace: they need a file."""
    stdout = [f"--{f} {p}" for f, paths in plan.items() for p in paths if writes_stdout(p)]
    if len(stdout) > 1:
        raise BadInputError(f"only one output can go to stdout, got {', '.join(stdout)}")
    for fmt in ("html", "trace"):
        if "-" in plan[fmt]:
            raise BadInputError(f"--{fmt} needs a file name, not '-'")


def check_outputs(named: list[tuple[str, str | None]], inputs: Sequence[str | None] = ()) -> None:
    """Each (flag, path) output can be written (its directory exists and accepts a file, it
    is a kind ioprobe may write), no two replace the same file (the second would destroy the
    first), and none replaces one of ``inputs``, the files the command reads (``report
    run.json --html run.json`` would put a page where the record was). Called before any
    work, so a bad path costs nothing."""
    read = {_same_file_key(i): i for i in inputs if i and i != "-"}
    read.pop(None, None)
    seen: dict[str, str] = {}
    for flag, path in named:
        if path == "":
            raise BadInputError(f"{flag}: an empty file name")
        if path is not None and path != "-" and _same_file_key(path) in read:
            raise BadInputError(
                f"{flag} {path}: is the file this command reads ({read[_same_file_key(path)]}); "
                "writing it would replace it"
            )
        if path == "-":
            check_stdout_open(f"{flag} -")
        if path is None or path == "-":
            continue
        try:
            dest = check_output(path)
        except BadInputError as exc:
            raise BadInputError(f"{flag} {exc}") from None
        if dest.kind == "file":
            if dest.path in seen:
                raise BadInputError(f"{flag} {path}: names the same file as {seen[dest.path]}")
            seen[dest.path] = f"{flag} {path}"


def command_files(cmd: Sequence[str]) -> list[str]:
    """The files a wrapped command names (its program as found on PATH, its script, a config
    file among its arguments): inputs no output of ioprobe's may replace."""
    found = shutil.which(cmd[0]) if cmd else None
    named = [a for a in cmd if a and os.path.isfile(a)]
    return [*named, *([found] if found else [])]


def _same_file_key(path: str) -> tuple[int, int] | str | None:
    """What tells two names of one file apart from two files: its device and inode where it
    exists, else its resolved path; None where neither can be had."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        try:
            return os.path.realpath(path)
        except (OSError, ValueError):
            return None


def write_text(path: str, text: str, flag: str) -> None:
    """Write an output: '-' on stdout, any other path as ``outputs.write_output`` does; a
    failure is one line naming the flag."""
    try:
        if path == "-":
            sys.stdout.write(text)
            sys.stdout.flush()  # a full or closed stdout fails here, not at exit
        else:
            write_output(path, text)
    except BadInputError as exc:
        raise BadInputError(f"{flag} {exc}") from None
    except OSError as exc:
        raise BadInputError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


# format -> (the renderer module, the flag that asks for it); every renderer has the shape
# render(record, findings) -> str
RENDERERS = {
    "html": ("ioprobe.render.html", "--html"),
    "md": ("ioprobe.render.markdown", "--md"),
    "trace": ("ioprobe.render.trace", "--trace"),
}


HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held while a finished measurement's outputs are written:
    the first waits until every output has been tried, then ends the command as it would
    have (130, 143); a second ends it at once (an output that never finishes: a FIFO that
    no one reads). Where they came in between, the outputs after the record were lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    saved: dict[int, Any] = {}

    def hold(signum: int, frame: object) -> None:
        if not came:
            came.append(signum)
            return
        came.clear()  # asked twice: the outputs wait no more
        _restore(saved)
        _now(signum, saved[signum], frame)

    for signum in HELD:
        handler = signal.getsignal(signum)
        if handler not in (signal.SIG_IGN, None):  # an ignored one stays so
            saved[signum] = signal.signal(signum, hold)
    try:
        yield
    finally:
        _restore(saved)
        if came:
            _now(came[0], saved[came[0]], None)


def _restore(saved: dict[int, Any]) -> None:
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _now(signum: int, handler: Any, frame: Any) -> None:
    """What ``signum`` would have done on arrival: its handler called here (it raises:
    KeyboardInterrupt, the command line's SIGTERM), or, at its default, the process ended by
    it. Called directly, not raised again: a signal raised inside a handler waits for the
    next check, which an output blocked in a system call never reaches."""
    if callable(handler):
        handler(signum, frame)
    else:
        signal.raise_signal(signum)


def deliver(rec: RunRecord, plan: dict[str, list[str]]) -> None:
    """Write each planned output, and show the terminal view unless an output went to stdout;
    every view is rendered from one set of findings. The record is written first, and every
    output is tried whatever became of the others: one that fails (a full disk, a renderer's
    bug) costs that output alone, and is reported in one line once the rest are written."""
    with signals_held():
        _deliver(rec, plan)


def _deliver(rec: RunRecord, plan: dict[str, list[str]]) -> None:
    failed: list[str] = []
    for path in plan["json"]:
        attempt(failed, "--json", write_record, rec, path)
    to_stdout = any(writes_stdout(p) for paths in plan.values() for p in paths)
    if not (to_stdout and not any(plan[fmt] for fmt in RENDERERS)):  # else: the record alone
        f = attempt(failed, "the analysis", findings, rec)
        if f is not None:
            failed += write_rendered(rec, f, plan)
            if not to_stdout:
                attempt(failed, "the summary", show, rec, f)
    if failed:
        raise BadInputError("; ".join(failed))


def attempt(failed: list[str], what: str, action: Callable[..., T], *args: Any) -> T | None:
    """``action(*args)``, or None with a line for ``failed`` when it raises: a user's error
    (``IoprobeError``) as it is, anything else (a bug in ioprobe) named with its type, so the
    outputs after it are still written."""
    try:
        return action(*args)
    except IoprobeError as exc:
        failed.append(str(exc))
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            failed.append(f"{what} failed: {type(exc).__name__}: {exc} (a bug in ioprobe)")
        else:  # the terminal view on a full or closed stdout
            failed.append(f"{what}: cannot write: {exc.strerror or exc}")
    except Exception as exc:  # a renderer's bug must not cost the record or the other outputs
        failed.append(f"{what} failed: {type(exc).__name__}: {exc} (a bug in ioprobe)")
    return None


def write_rendered(rec: RunRecord, f: Findings, plan: dict[str, list[str]]) -> list[str]:
    """Each planned page, summary and trace, rendered once and written to its paths; every
    one tried. The lines of those that failed."""
    failed: list[str] = []
    for fmt, (module, flag) in RENDERERS.items():
        if plan[fmt]:
            text = attempt(failed, flag, _render, module, rec, f)
            for path in plan[fmt] if text is not None else []:
                attempt(failed, flag, write_text, path, text, flag)
    return failed


def _render(module: str, rec: RunRecord, f: Findings) -> str:
    text: str = import_module(module).render(rec, f)
    return text


def show(rec: RunRecord, f: Findings, err: bool = False) -> None:
    """The record's terminal view on stdout (stderr with ``err``): as wide as the terminal,
    in colour where it is one."""
    from ioprobe.render import terminal

    out = text_console(stderr=err)
    out.file.write(terminal.render(rec, f, width=out.width, color=out.is_terminal))
    out.file.flush()


# Bounds of the numeric flags: beyond them a value is a typo, not a machine, and everything
# the model derives from them stays within what a record may hold (codec.MAX_FIGURE)
MAX_COUNT = 1 << 20  # workers, cores, GPUs, nodes, batch sizes, reads in flight
MAX_SECONDS = 7 * 86400.0  # a time budget, a step or a sample's CPU time
MAX_RATE = 1e12  # samples/s


class FiniteFloat(click.FloatRange):
    """A number in a range that is also finite: Python's float() reads 'nan', 'inf' and
    '1e400' (infinity), which no range check catches (NaN compares false with everything)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def finite_float(
    min: float | None = None, max: float | None = None, *, min_open: bool = False
) -> FiniteFloat:
    """The click type of a float flag: finite, at least ``min`` (above it with ``min_open``),
    at most ``max``."""
    return FiniteFloat(min=min, max=max, min_open=min_open)


def count(min: int = 1) -> click.IntRange:
    """The click type of a count flag: an integer from ``min`` to ``MAX_COUNT``."""
    return click.IntRange(min=min, max=MAX_COUNT)


def storage_flag(spec: str, catalog: Catalog) -> StorageClassInfo:
    """``--storage``'s class or rate, an error naming the flag when it is neither."""
    try:
        return resolve_storage(spec, catalog)
    except BadInputError as exc:
        raise BadInputError(f"--storage: {exc}") from None

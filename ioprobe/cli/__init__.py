"""Command-line entry point: a click group with one module per subcommand.

Errors a user can cause (``IoprobeError``) and click's own usage errors are caught here, once,
and printed as one line on stderr with exit code 2; nothing the user did produces a traceback.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import errno
import io
import os
import signal
import stat
import sys
import threading
import time
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import click

from ioprobe._version import __version__
from ioprobe.collect.procfs import process_age_s
from ioprobe.errors import (
    LIMIT_ERRNOS,
    WRITE_ERRNOS,
    BadInputError,
    Interrupted,
    IoprobeError,
    Terminated,
    TermSignal,
    limits,
)
from ioprobe.outputs import stdout_was_closed
from ioprobe.redact import hung_up_tolerant, printable, redact_message

# a process older than this when its command starts is not one started for the command (an
# embedding program calling main()): its age is not the command's start-up
MAX_STARTUP_S = 60.0

# name -> module under ioprobe.cli; each module exposes a click command named `command`.
SUBCOMMANDS = {
    "probe": "probe",
    "env": "env",
    "report": "report",
    "run": "run",
    "whatif": "whatif",
    "tune": "tune",
    "size": "size",
    "compare": "compare",
    "export": "export",
}


def module_help(name: str) -> str:
    """A subcommand's help text, its module's docstring, read from the source without
    running the module: ``ioprobe --help`` lists every subcommand and imports none."""
    module = f"ioprobe.cli.{SUBCOMMANDS[name]}"
    spec = find_spec(module)
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        try:
            tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            pass
        else:
            return ast.get_docstring(tree) or ""
    return import_module(module).command.help or ""  # an install without sources


class _LazyGroup(click.Group):
    """Imports a subcommand's module only when it runs, so `ioprobe env` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        # a bare command built from the docstring gives click's own short help for it
        rows = [(n, click.Command(n, help=module_help(n)).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # click answers a closed stdout (`ioprobe whatif RUN | head -0`) with a silent
            # exit 1; ioprobe's answer to any failed write is one line and exit 2
            _drop_stdout()
            raise BadInputError(f"cannot write to stdout: {os.strerror(errno.EPIPE)}") from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = SUBCOMMANDS.get(cmd_name)
        if module is None:
            return None
        cmd = import_module(f"ioprobe.cli.{module}").command
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ioprobe")
def cli() -> None:
    """Why is my GPU waiting? Measure the storage, CPU, PCIe and GPU stages that feed a
    training job, name the bottleneck, and say what to change."""


def main(argv: list[str] | None = None) -> None:
    # when the command started: where this process was started for it (its own command line),
    # at the process's start, so a probe's budget counts the interpreter's start and the imports
    started = time.perf_counter()
    age = process_age_s() if argv is None else 0.0
    if age <= MAX_STARTUP_S:
        started -= age
    # SIGTERM's default action ends the process at once, skipping every ``finally`` (temporary
    # files stay, pool workers are orphaned): make it raise in the main thread, as SIGINT does.
    # SIGHUP (a closed terminal, a supervisor's reload) takes the same path, unless it is
    # ignored (nohup), which stays so
    if argv is None:
        _fill_closed_descriptors()
    _encodable_stdout()
    # a terminal that hangs up (an ssh session dropped) fails every later write to stderr
    # with EIO, and a log on a full disk with ENOSPC: progress, summaries and error lines are
    # dropped from then on, and the command goes on to its outputs and its exit code (under
    # run, the script's); what ends it after a hang-up is its SIGHUP, in order
    stderr, stdout = sys.stderr, sys.stdout
    if stderr is not None:
        sys.stderr = hung_up_tolerant(stderr, tuple(sorted(WRITE_ERRNOS)))
    if _on_terminal(stdout):
        # the summary on a terminal that hung up (EIO) is dropped as progress is: the
        # terminal's SIGHUP ends the command, not the write that raced it
        sys.stdout = hung_up_tolerant(stdout, (errno.EIO,))
    here = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if here:
        # a signal ignored where ioprobe was started (nohup, a job started with `&` from a
        # script, a supervisor) stays ignored, for ioprobe and for what `run` starts
        for caught in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(caught) is not signal.SIG_IGN:
                previous[caught] = signal.signal(caught, _on_sigterm)
    try:
        _main(argv, started)
    finally:
        sys.stderr, sys.stdout = stderr, stdout
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        if argv is None and here and signal.SIGHUP in previous:
            # the command is over and this process ends with its exit code: a terminal
            # closed now (its SIGHUP) cannot change what was done, nor kill the exit
            signal.signal(signal.SIGHUP, signal.SIG_IGN)


# what ioprobe's own marks become on a stdout that cannot encode them; anything else is '?'
_PLAIN_MARKS = {"◀": "<", "▶": ">", "→": "->", "←": "<-", "×": "x", "—": "-", "–": "-"}
_PLAIN_MARKS |= {"…": "...", "≥": ">=", "≤": "<=", "±": "+/-", "µ": "u", "·": "."}
_PLAIN_MARKS |= dict.fromkeys("█▉▊▋▌▍▎▏▇▆▅▄▃▂▁", "#")


def _plain_marks(exc: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    if all("\udc80" <= c <= "\udcff" for c in text):
        return bytes(ord(c) - 0xDC00 for c in text), exc.end  # surrogateescape's own bytes
    return "".join(_PLAIN_MARKS.get(c, "?") for c in text), exc.end


codecs.register_error("ioprobe-plain", _plain_marks)


def _on_terminal(stream: Any) -> bool:
    """Whether ``stream`` writes to a character device: a terminal (one that hung up already
    fails ``isatty``), or /dev/null and its kind, which fail no write with EIO."""
    try:
        return stream is not None and stat.S_ISCHR(os.fstat(stream.fileno()).st_mode)
    except (ValueError, OSError, AttributeError):  # closed, detached, or no descriptor
        return False


def _fill_closed_descriptors() -> None:
    """A command started with stdin, stdout or stderr closed (``>&-``): each is /dev/null for
    this process, so that no file ioprobe opens takes its number (and receives what a child
    process prints), and its Python stream writes nowhere where it was None."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        if fd == 1:  # an output asked for there would be lost: refused before any work
            stdout_was_closed()
        null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def _encodable_stdout() -> None:
    """Under an encoding that lacks ioprobe's marks (PYTHONIOENCODING=ascii, a C locale) the
    bars, arrows and signs print as ASCII and any other character as '?', where the summary
    would fail with UnicodeEncodeError; stderr already escapes them (Python's own default)."""
    stream = sys.stdout
    # "surrogateescape" is the C locale's (LC_ALL=C): it passes a file name's raw bytes on
    # but fails on any other character outside ASCII, and keeps doing the first here
    if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
        with contextlib.suppress(ValueError, OSError):  # closed, or detached by a host program
            stream.reconfigure(errors="ioprobe-plain")


# the command line being run: the secrets of its URLs are masked in every error line
_ARGV: list[str] = []


def _main(argv: list[str] | None, started: float) -> None:
    _ARGV[:] = sys.argv if argv is None else argv
    try:
        # the context's object is the command's start: the probe's budget counts from it
        rv = cli.main(args=argv, prog_name="ioprobe", standalone_mode=False, obj=started)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        _fail_stopped(exc.__cause__)  # click wraps the KeyboardInterrupt it caught
    except click.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ioprobe` alone (click >= 8.2)
            # the help as --help lays it out, on stderr, exit 2 as click's own: not one line
            click.echo(exc.format_message(), err=True)
            sys.exit(2)
        _fail(exc.format_message(), 2)
    except Interrupted as exc:
        _fail(str(exc) or _stopped_word(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        _fail_stopped(exc)
    except IoprobeError as exc:
        _fail(str(exc), exc.exit_code)
    except OSError as exc:
        if exc.errno in LIMIT_ERRNOS:  # the process's own limits, wherever they were met
            _fail(f"{exc.strerror or exc}: {limits()}", 2)
        if exc.errno not in WRITE_ERRNOS:
            raise  # a bug: its traceback is what fixes it
        # stdout on a full device or a closed pipe (`ioprobe env > /dev/full`): one line, and
        # nothing more sent to the stdout that failed, at exit either
        _drop_stdout()
        _fail(f"a write failed: {exc.strerror or exc}", 2)
    _flush_stdout()
    sys.exit(rv if isinstance(rv, int) else 0)


def _flush_stdout() -> None:
    """Flush stdout now, where its failure can be one line, rather than at exit, where
    Python prints "Exception ignored" and a traceback."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            raise
        _drop_stdout()
        _fail(f"cannot write to stdout: {exc.strerror or exc}", 2)


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what it still buffers is dropped at exit without a word."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):  # no descriptor behind sys.stdout (a test's StringIO)
        pass


def _on_sigterm(signum: int, frame: object) -> None:
    raise TermSignal()


def _stopped_word(exc: BaseException | None) -> str:
    return "terminated" if isinstance(exc, TermSignal | Terminated) else "interrupted"


def _fail_stopped(exc: BaseException | None) -> None:
    """Ctrl-C (130) or SIGTERM (143) that reached here unhandled: one line, no traceback."""
    code = Terminated.exit_code if isinstance(exc, TermSignal) else Interrupted.exit_code
    _fail(_stopped_word(exc), code)


def _fail(message: str, code: int) -> None:
    # one line, whatever the message held; a URL a library quoted in it loses its secrets, and
    # so does any repeat of a secret from the command line's URLs without its scheme (botocore
    # quotes "KEY:SECRET@bucket" as a bucket name); an escape sequence from a path or a URL
    # shows as text instead of acting
    line = printable(redact_message(" ".join(message.split()), _ARGV or sys.argv))
    try:
        click.echo(f"ioprobe: error: {line}", err=True)
    except OSError:
        # stderr is a terminal that hung up (EIO) or a closed pipe: the line has nowhere to
        # go, and the exit code is all that is left to say it
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        # what a full or closed stdout still holds has nowhere to go: dropped, not an
        # "Exception ignored" at exit with its status 120 (under a C locale, seen with a
        # full stdout: the failed summary's text stayed buffered)
        _drop_stdout()
    sys.exit(code)

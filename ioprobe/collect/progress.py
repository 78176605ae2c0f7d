"""Progress for slow phases: a live rich display when stderr is a terminal, plain lines
otherwise (a log, a pipe, a dumb terminal).

Collectors call ``phase``/``update``/``result``; they never print. Updates come from the
collector's control loop (a few per second), never from the per-item read path. What is
shown has its control characters escaped: a detail may quote a file name or a library's error.
"""

from __future__ import annotations

import sys
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ioprobe.redact import console as text_console
from ioprobe.redact import hung_up_tolerant, printable


class Reporter(Protocol):
    def phase(self, name: str) -> None: ...
    def update(self, fraction: float, detail: str = "") -> None: ...
    def result(self, line: str) -> None: ...
    def close(self) -> None: ...


class SilentReporter:
    def phase(self, name: str) -> None:
        pass

    def update(self, fraction: float, detail: str = "") -> None:
        pass

    def result(self, line: str) -> None:
        pass

    def close(self) -> None:
        pass


class LineReporter:
    """One line per finished step, for logs and pipes."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = hung_up_tolerant(stream or sys.stderr)
        self._phase = ""

    def phase(self, name: str) -> None:
        self._phase = printable(name)

    def update(self, fraction: float, detail: str = "") -> None:
        pass

    def result(self, line: str) -> None:
        print(f"ioprobe: {self._phase}: {printable(line)}", file=self._stream, flush=True)

    def close(self) -> None:
        pass


class RichReporter:
    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            # text, not markup: a detail quotes paths and library messages, "[/]" included
            TextColumn("{task.description:<22}", style="bold", markup=False),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[detail]}", markup=False),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            # a stdout that is not the terminal (a file, a pipe: the report goes there) is
            # left alone; on a terminal, anything printed appears above the display
            redirect_stdout=_isatty(sys.stdout),
        )
        self._task: TaskID | None = None
        self._progress.start()

    def phase(self, name: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=1.0)
        self._task = self._progress.add_task(printable(name), total=1.0, detail="")

    def update(self, fraction: float, detail: str = "") -> None:
        if self._task is not None:
            done = min(max(fraction, 0.0), 1.0)
            self._progress.update(self._task, completed=done, detail=printable(detail))

    def result(self, line: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, detail=printable(line))

    def close(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=1.0)
        self._progress.stop()

    def say(self, line: str) -> None:
        """A line that stays, printed above the display."""
        self._progress.console.print(printable(line), markup=False, emoji=False, highlight=False)


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def make_reporter(quiet: bool = False, console: Console | None = None) -> Reporter:
    """The probe's progress on stderr (or ``console``): a rich display with a bar per phase
    where it is a terminal, one plain line per result where it is not."""
    if quiet:
        return SilentReporter()
    err = console if console is not None else text_console(stderr=True)
    # where stderr really is a terminal: FORCE_COLOR (set in many CI jobs for colored logs)
    # makes rich call a pipe a terminal, and a progress display in a log is noise
    terminal = err.is_terminal if console is not None else _isatty(sys.stderr)
    if terminal and not err.is_dumb_terminal:
        err.file = hung_up_tolerant(err.file)
        return RichReporter(err)
    return LineReporter(err.file if console is not None else None)

"""The probe's progress: a rich display with a bar per phase where stderr is a terminal, one
plain line per result where it is not (a log, a pipe, a dumb terminal)."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from ioprobe.collect.progress import LineReporter, Reporter, RichReporter, make_reporter


def _phases(rep: Reporter) -> None:
    rep.phase("listing")
    rep.result("120 files, 4.1 MB")
    rep.phase("storage (cold)")
    rep.update(0.5, "60/120 files")
    rep.result("812 MB/s")
    rep.close()


def test_on_a_terminal_the_phases_get_a_progress_display() -> None:
    out = io.StringIO()
    rep = make_reporter(console=Console(file=out, force_terminal=True, width=100))
    assert isinstance(rep, RichReporter)
    _phases(rep)
    shown = out.getvalue()
    assert "listing" in shown and "storage (cold)" in shown and "812 MB/s" in shown
    assert "━" in shown  # the bars
    assert "ioprobe: " not in shown  # no plain lines as well
    assert shown.rindex("\x1b[?25h") > shown.rindex("\x1b[?25l")  # the cursor is back


def test_in_a_log_or_a_pipe_each_result_is_one_plain_line() -> None:
    out = io.StringIO()
    rep = make_reporter(console=Console(file=out))
    assert isinstance(rep, LineReporter)
    _phases(rep)
    assert out.getvalue() == (
        "ioprobe: listing: 120 files, 4.1 MB\nioprobe: storage (cold): 812 MB/s\n"
    )


def test_a_dumb_terminal_gets_plain_lines_too() -> None:
    out = io.StringIO()
    dumb = Console(file=out, force_terminal=True, _environ={"TERM": "dumb"})
    assert isinstance(make_reporter(console=dumb), LineReporter)


def test_force_color_in_a_log_keeps_the_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI jobs set FORCE_COLOR for colored logs, and rich then calls a pipe a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(make_reporter(), LineReporter)


def test_quiet_shows_nothing() -> None:
    out = io.StringIO()
    rep = make_reporter(True, console=Console(file=out, force_terminal=True))
    _phases(rep)
    assert out.getvalue() == ""

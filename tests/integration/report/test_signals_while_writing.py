"""A signal that comes while a finished measurement's outputs are written (Ctrl-C, a closed
terminal, a supervisor's SIGTERM) waits until every output has been tried, then ends the
command as it would have; a second one ends it at once. The outputs after the record were
lost, the exit said only "terminated". An output held open by construction makes the
moment exact: a FIFO as --md, which blocks until someone reads it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from tests.support.cli import REPO
from tests.unit.analysis.test_whatif import probe_record


def _report(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """``ioprobe report`` writing a record, a page, a FIFO (--md) and a trace, started and
    waited for until it is inside the FIFO's open: the record and the page are written."""
    run = tmp_path / "probe.json"
    finalize(probe_record()).save(run)
    fifo = tmp_path / "summary.md"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", "report", str(run), "--json", str(out / "r.json"),
         "--html", str(out / "r.html"), "--md", str(fifo), "--trace", str(out / "r.trace.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (out / "r.html").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # inside open() of the FIFO, which waits for a reader
    return proc, fifo, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_the_outputs_are_written_waits_for_all_of_them(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc, fifo, out = _report(tmp_path)
    proc.send_signal(sig)
    time.sleep(0.3)
    assert proc.poll() is None  # still writing: held
    with open(fifo) as f:  # the reader comes: the summary is written, then the trace
        summary = f.read()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
    assert summary.startswith("#") and sorted(p.name for p in out.iterdir()) == [
        "r.html", "r.json", "r.trace.json",
    ]  # fmt: skip
    assert err.strip().splitlines()[-1] in (
        "ioprobe: error: terminated",
        "ioprobe: error: interrupted",
    )
    assert "Traceback" not in err


def test_a_second_signal_ends_an_output_that_never_finishes(tmp_path: Path) -> None:
    proc, _, out = _report(tmp_path)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)  # no one reads the FIFO: the second one ends it
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.json"]
    assert "Traceback" not in err

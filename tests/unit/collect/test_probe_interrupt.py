"""An interrupted probe keeps what it measured: the record of the phases that ended, marked
incomplete with the phase it stopped in, and every report says so in its header.

Ctrl-C is raised where a phase begins (the reporter is told its name), the same
KeyboardInterrupt a signal raises in the main thread, at a point the test chooses."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.report import findings
from ioprobe.cli import main as cli_main
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.progress import SilentReporter
from ioprobe.record import RunRecord
from ioprobe.render import html, markdown, terminal
from tests.unit.ground.test_record import make_record


class CtrlCAt(SilentReporter):
    """Raises KeyboardInterrupt as the phase whose name starts with ``prefix`` begins."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def phase(self, name: str) -> None:
        if name.startswith(self.prefix):
            raise KeyboardInterrupt


def interrupted_probe(tmp_path: Path, prefix: str) -> Probe:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(60):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    opts = ProbeOptions(target=str(data), loader="raw", time_budget_s=2.0)
    probe = Probe(opts, CtrlCAt(prefix))
    with pytest.raises(KeyboardInterrupt):
        probe.run()
    return probe


def test_ctrl_c_in_the_cpu_phase_keeps_the_storage_passes_marked_incomplete(
    tmp_path: Path,
) -> None:
    rec = interrupted_probe(tmp_path, "cpu").partial
    assert rec is not None
    assert rec.complete is False
    assert rec.interrupted == "cpu (raw)"
    st = rec.stages.storage
    assert st.cold is not None and st.warm is not None
    assert st.capacity_samples_per_s and st.capacity_samples_per_s > 0
    assert rec.stages.cpu.capacity_samples_per_s is None  # the phase that was cut short
    assert rec.dataset.files == 60
    # the record as written by --json says so too
    data = json.loads(rec.dumps())
    assert data["complete"] is False and data["interrupted"] == "cpu (raw)"


def test_ctrl_c_between_the_storage_passes_keeps_the_cold_one_as_the_capacity(
    tmp_path: Path,
) -> None:
    rec = interrupted_probe(tmp_path, "storage (warm)").partial
    assert rec is not None
    assert rec.interrupted == "storage (warm)"
    st = rec.stages.storage
    assert st.cold is not None and st.warm is None
    assert st.read_bytes_per_s == st.cold.read_bytes_per_s
    assert st.capacity_samples_per_s and st.capacity_samples_per_s > 0


class CtrlCAfterLevels(SilentReporter):
    """Raises KeyboardInterrupt as the cold pass reports its second concurrency level."""

    def __init__(self) -> None:
        self.levels = 0
        self.cold = False

    def phase(self, name: str) -> None:
        self.cold = name.startswith("storage (cold)")

    def result(self, line: str) -> None:
        if self.cold and "threads" in line:
            self.levels += 1
            if self.levels == 2:
                raise KeyboardInterrupt


def test_ctrl_c_inside_the_cold_pass_keeps_the_levels_that_ended(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(60):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    probe = Probe(
        ProbeOptions(target=str(data), loader="raw", time_budget_s=4.0), CtrlCAfterLevels()
    )
    with pytest.raises(KeyboardInterrupt):
        probe.run()
    rec = probe.partial
    assert rec is not None  # it wrote nothing when the first pass was cut short
    st = rec.stages.storage
    assert st.cold is not None and [p.concurrency for p in st.cold.sweep] == [1, 2]
    assert st.capacity_samples_per_s and st.capacity_samples_per_s > 0
    assert rec.complete is False and rec.interrupted == "storage (cold)"


def test_ctrl_c_before_any_stage_was_measured_leaves_no_record(tmp_path: Path) -> None:
    assert interrupted_probe(tmp_path, "storage (cold)").partial is None


def incomplete_record() -> RunRecord:
    rec = make_record()
    rec.complete = False
    rec.interrupted = "cpu (raw)"
    return finalize(rec)


def test_every_report_of_an_incomplete_record_says_so_in_its_header_and_only_then() -> None:
    rec = incomplete_record()
    f = findings(rec)
    line = "incomplete: interrupted during cpu (raw)"
    text = terminal.render(rec, f).splitlines()
    assert text[1] == line  # under the title line
    md = markdown.render(rec, f)
    assert md.index(line) < md.index(rec.bottleneck + "-bound")  # above the verdict
    page = html.render(rec, f)
    assert page.index(line) < page.index('id="verdict"')
    done = finalize(make_record())
    f = findings(done)
    for report in (terminal.render(done, f), markdown.render(done, f), html.render(done, f)):
        assert "incomplete" not in report


def test_a_record_written_before_the_field_existed_loads_as_complete(tmp_path: Path) -> None:
    data = make_record().to_json()
    del data["complete"], data["interrupted"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    rec = RunRecord.load(path)
    assert rec.complete is True
    assert rec.interrupted is None


def _full_tmpdir(payloads: object) -> object:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_tmpdir_in_the_cpu_phase_keeps_the_storage_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ioprobe.collect import cpu as cpu_mod

    # the CPU pool's payloads go through a temporary file: a full TMPDIR fails its write
    monkeypatch.setattr(cpu_mod, "_payload_file", _full_tmpdir)
    data = tmp_path / "data"
    data.mkdir()
    for i in range(60):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    probe = Probe(ProbeOptions(target=str(data), loader="raw", time_budget_s=2.0), SilentReporter())
    with pytest.raises(OSError, match="No space left"):
        probe.run()
    rec = probe.partial
    assert rec is not None and rec.complete is False and rec.interrupted == "cpu (raw)"
    assert rec.stages.storage.capacity_samples_per_s
    # through the CLI: the record is written, and the failure is one line
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as exited:
        cli_main(["probe", str(data), "--loader", "raw", "--time-budget", "2", "-q",
                  "--json", str(out)])  # fmt: skip
    assert exited.value.code == 2
    saved = RunRecord.load(str(out))
    assert saved.complete is False and saved.stages.storage.capacity_samples_per_s


def test_a_thread_the_host_will_not_start_keeps_the_levels_that_ended_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # an address space limit (ulimit -v) stops a thread's start before memory runs out: the
    # storage pass's fourth reader raised "can't start new thread", a RuntimeError traceback
    # and no record
    import threading

    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == "ioprobe-read-3":  # the 4-reader level: levels 1 and 2 have ended
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    data = tmp_path / "data"
    data.mkdir()
    for i in range(60):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    probe = Probe(ProbeOptions(target=str(data), loader="raw", time_budget_s=4.0), SilentReporter())
    with pytest.raises(OSError) as refusal:
        probe.run()
    assert refusal.value.errno == errno.EAGAIN
    rec = probe.partial
    assert rec is not None and rec.complete is False and rec.interrupted == "storage (cold)"
    assert rec.stages.storage.cold is not None
    assert [p.concurrency for p in rec.stages.storage.cold.sweep] == [1, 2]
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as exited:
        cli_main(["probe", str(data), "--loader", "raw", "--time-budget", "4", "-q",
                  "--json", str(out)])  # fmt: skip
    assert exited.value.code == 2
    assert RunRecord.load(str(out)).stages.storage.capacity_samples_per_s
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("ioprobe: error: storage (cold): the host would not start another")
    assert "(ulimit -u)" in line and line.endswith("what was measured before is reported")

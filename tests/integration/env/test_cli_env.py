"""`ioprobe env` run as a user runs it: a separate process, real machine, real exit codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.cli import assert_one_line_error

REPO = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # A wide terminal keeps rich from wrapping a long CPU model across lines.
    env["COLUMNS"] = "200"
    env.pop("NO_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "ioprobe", "env", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
        check=False,
    )


def test_env_prints_the_host_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    proc = _run(str(tmp_path), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(out.read_text())
    assert doc["schema"] == "ioprobe.env/1"
    host = doc["host"]
    assert host["logical_cores"] == os.cpu_count()
    assert host["usable_cores"] == len(os.sched_getaffinity(0))
    assert host["filesystem"]["path"] == str(tmp_path)
    assert host["filesystem"]["device_class"] in {
        "nvme",
        "sata-ssd",
        "hdd",
        "virtual",
        "network",
        "tmpfs",
        "unknown",
    }
    assert host["gpu_probe"].startswith(("nvml: ", "none: "))
    # The table on stdout names the same facts.
    assert host["cpu_model"] and host["cpu_model"] in proc.stdout
    assert f"{host['logical_cores']} logical" in proc.stdout
    assert f"{host['physical_cores']} physical" in proc.stdout
    assert str(tmp_path) in proc.stdout


def test_env_defaults_to_the_current_directory() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    assert f"{os.cpu_count()} logical" in proc.stdout
    assert str(REPO) in proc.stdout


def test_env_json_to_stdout_is_json_only() -> None:
    proc = _run("--json", "-")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "ioprobe.env/1"
    assert doc["host"]["logical_cores"] == os.cpu_count()
    assert list(doc) == sorted(doc)


def test_env_missing_path_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    proc = _run(str(missing))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ioprobe: error:")
    assert str(missing) in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_env_unwritable_json_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _run(str(tmp_path), "--json", str(tmp_path / "missing-dir" / "env.json"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ioprobe: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_env_json_goes_through_the_writer_that_destroys_nothing(tmp_path: Path) -> None:
    # it wrote with a plain write_text, and a bad path was found only after reading the host
    target = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    ok = _run("--json", str(link))
    assert ok.returncode == 0, ok.stderr
    assert link.is_symlink() and json.loads(target.read_text())["schema"] == "ioprobe.env/1"
    full = _run("--json", "/dev/full")
    assert_one_line_error(full, "--json /dev/full: cannot write")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert_one_line_error(_run("--json", str(tmp_path)), "is a directory")

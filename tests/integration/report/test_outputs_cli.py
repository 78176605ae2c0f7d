"""Outputs through the real command line never destroy anything: a device, a FIFO, a link or
/dev/stdout is written, never replaced; what cannot be written is refused, before any work."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import REPO, assert_one_line_error, run_cli
from tests.unit.ground.test_record import make_record

pytestmark = pytest.mark.slow


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    make_record().save(path)
    return path


def test_json_to_dev_full_is_one_line_and_the_device_stays(record: Path) -> None:
    proc = run_cli("report", str(record), "--json", "/dev/full")
    assert_one_line_error(proc, "--json /dev/full", "No space left on device")
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


@pytest.mark.parametrize(
    ("flag", "name", "starts"),
    [
        ("--json", "pipe", b"{"),
        ("--html", "pipe", b"<!doctype html>"),
        ("--md", "pipe", b"#"),
        ("--trace", "pipe", b"{"),
        ("-o", "pipe.html", b"<!doctype html>"),
    ],
)
def test_every_output_flag_writes_a_fifo_in_place(
    record: Path, tmp_path: Path, flag: str, name: str, starts: bytes
) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = run_cli("report", str(record), flag, str(fifo))
    if reader.is_alive():  # the CLI never opened it: end the reader's wait before asserting
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(10)
    assert proc.returncode == 0, proc.stderr
    assert len(got) == 1 and got[0].lower().startswith(starts.lower()), got
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlinked_output_writes_its_target_and_stays_a_link(
    record: Path, tmp_path: Path
) -> None:
    real = tmp_path / "kept"
    real.mkdir()
    link = tmp_path / "page.html"
    link.symlink_to(real / "page.html")  # dangling until the page is written
    proc = run_cli("report", str(record), "--html", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink()
    assert (real / "page.html").read_text().lower().startswith("<!doctype html>")


def test_json_to_dev_stdout_appends_to_a_redirected_stdout(record: Path, tmp_path: Path) -> None:
    # `ioprobe report R --json /dev/stdout >> log`: the log keeps what it held and gets the
    # record (and no terminal view mixed into it)
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "a") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "ioprobe", "report", str(record), "--json", "/dev/stdout"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    head, _, rest = log.read_text().partition("\n")
    assert head == "earlier line"
    assert json.loads(rest)["schema"] == "ioprobe.run/1"
    assert os.path.islink("/dev/stdout")


def test_json_to_dev_stdout_is_the_record_alone_on_stdout(record: Path) -> None:
    proc = run_cli("report", str(record), "--json", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == "ioprobe.run/1"


def _unix_socket(tmp_path: Path) -> Path:
    path = tmp_path / "sock"
    socket.socket(socket.AF_UNIX).bind(str(path))  # the node stays after the socket closes
    return path


@pytest.mark.parametrize(
    ("command", "flag", "kind"),
    [
        ("report", "--json", "directory"),
        ("report", "-o", "directory"),
        ("report", "--md", "socket"),
        ("whatif", "--json", "directory"),
    ],
)
def test_a_directory_or_socket_is_refused_before_the_record_is_read(
    tmp_path: Path, command: str, flag: str, kind: str
) -> None:
    target = tmp_path / "out.json" if kind == "directory" else _unix_socket(tmp_path)
    if kind == "directory":
        target.mkdir()
    # the record does not exist: the output's error coming first shows the check ran first
    args = [command, str(tmp_path / "missing.json"), flag, str(target)]
    proc = run_cli(*args, *(["--workers", "2"] if command == "whatif" else []))
    assert_one_line_error(proc, f"{flag} {target}", f"is a {kind}")
    assert target.is_dir() if kind == "directory" else target.is_socket()


def test_two_outputs_naming_one_file_are_refused(tmp_path: Path) -> None:
    proc = run_cli(
        "report",
        str(tmp_path / "missing.json"),
        "--json",
        str(tmp_path / "a.json"),
        "-o",
        str(tmp_path / "." / "a.json"),
    )
    assert_one_line_error(proc, "names the same file as --json")


def _unwritable(tmp_path: Path, kind: str) -> str:
    """An output path whose directory will not take a file, even for root where it can."""
    if kind == "missing-dir":
        return "/nonexistent-dir/x.json"
    if kind == "file-as-dir":
        (tmp_path / "file.txt").write_text("")
        return str(tmp_path / "file.txt" / "x.json")
    if kind == "proc":
        return "/proc/x.json"
    if kind == "proc-file":
        return "/proc/version/x.json"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return str(ro / "x.json")


UNWRITABLE = ["missing-dir", "file-as-dir", "proc", "proc-file", "read-only-dir"]


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_probe_refuses_an_unwritable_output_before_measuring(tmp_path: Path, kind: str) -> None:
    if kind == "read-only-dir" and os.geteuid() == 0:
        pytest.skip("root writes in a read-only directory; the /proc cases cover root")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(5):
        (data / f"{i}.bin").write_bytes(os.urandom(50_000))
    out = _unwritable(tmp_path, kind)
    start = time.monotonic()
    proc = run_cli("probe", str(data), "--time-budget", "30", "-q", "--json", out)
    elapsed = time.monotonic() - start
    assert_one_line_error(proc, f"--json {out}")
    assert elapsed < 5, elapsed  # this probe measures for about 9 s


def test_run_refuses_dev_stdout_as_it_refuses_dash() -> None:
    # the script's own output goes there; a record mixed into it would be lost in it
    proc = run_cli("run", "--json", "/dev/stdout", "--", sys.executable, "-c", "print(1)")
    assert_one_line_error(proc, "stdout is the script's")


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_run_of_a_command_it_cannot_execute_is_one_line(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "train.py"
    if kind == "file":
        target.write_text("print('hi')\n")
        target.chmod(0o644)
    else:
        target.mkdir()
    proc = run_cli("run", "--", str(target))
    assert_one_line_error(proc, str(target), "not executable" if kind == "file" else "directory")


def test_run_of_a_script_in_the_current_directory_says_to_give_its_path(tmp_path: Path) -> None:
    # exec looks a bare name up on PATH only, so ./train.py is what would run it
    (tmp_path / "train.py").write_text("print('hi')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ioprobe", "run", "--", "train.py"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        timeout=120,
    )
    assert_one_line_error(proc, "train.py: not on PATH", "./train.py")


def test_run_of_an_executable_exec_refuses_is_one_line(tmp_path: Path) -> None:
    # executable, but neither a #! script nor a binary: exec fails after the checks pass
    target = tmp_path / "no-shebang"
    target.write_bytes(b"\x00\x01 not a program")
    target.chmod(0o755)
    proc = run_cli("run", "--", str(target))
    assert_one_line_error(proc, str(target), "cannot run", "Exec format error")

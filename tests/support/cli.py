"""Run the real ioprobe CLI in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
    stdin: IO[bytes] | None = None,
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ioprobe", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
    )


def run_cli_on_terminal(
    *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[bytes], str]:
    """The CLI with its stderr on a pseudo-terminal 100 columns wide (stdout a pipe, stdin
    empty): the process and everything the terminal was sent, escapes included."""
    primary, secondary = pty.openpty()
    got = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end closed
                return
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100", "TERM": "xterm"}
    env.pop("RANK", None)  # a job's other ranks draw nothing: this is no job's rank
    env.pop("LOCAL_RANK", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ioprobe", *args],
            stdout=subprocess.PIPE,
            stderr=secondary,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env=env,
            timeout=timeout,
        )
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    return proc, got.decode("utf-8", "replace")


def watched_and_plain(
    out: Path, *cmd: str
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """A training command run as the user runs it, then under ``ioprobe run --json out``;
    each must succeed. Both results, the watched one first."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = subprocess.run(
        list(cmd), capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )
    assert plain.returncode == 0, plain.stderr
    watched = run_cli("run", "--json", str(out), "--", *cmd)
    assert watched.returncode == 0, watched.stderr
    return watched, plain


def probe_json(tmp: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = tmp / "run.json"
    proc = run_cli("probe", *args, "--json", str(out), "-q", env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ioprobe: error: ")
    assert "Traceback" not in proc.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]


_TRACEBACK = re.compile(
    r"(?:Exception in thread [^\n]*\n)?Traceback \(most recent call last\):\n"
    r"(?P<frames>(?:[ \t][^\n]*\n)+)(?P<error>[A-Za-z]\w*(?:Error)?: [^\n]*)\n?"
)
_DROPPED_PEER = ("ConnectionResetError", "BrokenPipeError", "EOFError")


def without_dropped_worker_tracebacks(stderr: str) -> str:
    """``stderr`` less the tracebacks of a DataLoader worker whose main process died while it
    was handing over a batch: its ``multiprocessing`` resource sharer, left with a reset
    connection, prints one. The script prints it unwatched too, when its main process alone
    gets a SIGHUP or SIGTERM (2 in 25 such deaths of tests/fixtures/in_run_train.py), so it is
    the script's output, not ioprobe's. Every other traceback is kept."""

    def drop(found: re.Match[str]) -> str:
        files = re.findall(r'^\s+File "([^"]+)"', found["frames"], re.MULTILINE)
        ours = files and all("/multiprocessing/" in f for f in files)
        return "" if ours and found["error"].startswith(_DROPPED_PEER) else found[0]

    return _TRACEBACK.sub(drop, stderr)

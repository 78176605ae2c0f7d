"""Run the real ioprobe CLI in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ioprobe", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


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

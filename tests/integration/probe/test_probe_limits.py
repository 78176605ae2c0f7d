"""A probe that meets the process's own limits (too many open files as the CPU phase starts
its worker pool) ends in one line naming the limit, with the phases that ended saved, where
it was an OSError traceback from multiprocessing and nothing written."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from ioprobe.record import RunRecord
from tests.support.cli import REPO


def test_too_many_open_files_keeps_the_storage_passes_and_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    out = tmp_path / "run.json"

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))

    proc = subprocess.run(
        [sys.executable, "-m", "ioprobe", "probe", str(data), "--loader", "raw",
         "--time-budget", "2", "-q", "--json", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=60, preexec_fn=few_files,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("ioprobe: error: cpu (raw): Too many open files"), line
    assert "may open 16 files (ulimit -n)" in line
    rec = RunRecord.load(out)
    assert rec.complete is False and rec.stages.storage.capacity_samples_per_s

"""What the ``ioprobe run`` hook does at a script's exit costs a script that never imported
torch nothing of torch's (a DALI script, a script that made no loader)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import REPO


def test_saving_at_exit_imports_no_torch_into_a_script_without_it(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from ioprobe.loaders import run_hook\n"
        "run_hook._write_records()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "IOPROBE_RUN_DIR": str(tmp_path)}
    for trial in (None, '{"overrides": {}, "batches": 50}'):
        if trial is not None:
            env["IOPROBE_TRIAL"] = trial
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "[]", out.stdout

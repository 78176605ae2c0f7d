"""The metered reader's local path costs a sample no import: a worker forked from a parent
that never imported fsspec paid about 30 ms of CPU for it on its first sample, each epoch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.loaders import files
from tests.support.cli import REPO

pytestmark = pytest.mark.shared

FIRST_READ = """
import sys
from ioprobe.loaders import files
data = files.read_bytes(sys.argv[1])
print(len(data), "fsspec" in sys.modules, files.take()[0])
"""


def test_a_local_path_is_read_and_metered_without_importing_fsspec(tmp_path: Path) -> None:
    f = tmp_path / "a b.bin"
    f.write_bytes(b"x" * 1000)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_READ, str(f)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.stdout.split() == ["1000", "False", "1000"]


def test_a_url_and_a_bytes_path_still_open(tmp_path: Path) -> None:
    f = tmp_path / "b.bin"
    f.write_bytes(b"y" * 10)
    files.take()
    assert files.read_bytes(f"file://{f}") == b"y" * 10
    assert files.read_bytes(bytes(f)) == b"y" * 10  # type: ignore[arg-type]
    with files.open(str(f)) as fh:
        assert fh.read(4) == b"yyyy" and fh.tell() == 4
    assert files.take()[0] == 24
    # a local folder named like a URL is that folder (fsspec said "Protocol not known")
    odd = tmp_path / "runs" / "http:" / "h"
    odd.mkdir(parents=True)
    (odd / "x.bin").write_bytes(b"z" * 3)
    assert files.read_bytes(f"{tmp_path}/runs/http://h/x.bin") == b"zzz"
    with pytest.raises(ValueError, match="read-only"):
        files.open(str(f), "wb")

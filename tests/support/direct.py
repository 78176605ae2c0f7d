"""A folder on a file system that takes O_DIRECT, for the device-limit tests: the test's own
temporary folder, or one beside the repository where that is a tmpfs that refuses it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def takes_direct(folder: Path) -> bool:
    probe = folder / ".direct-check"
    probe.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


@contextlib.contextmanager
def direct_folder(tmp: Path) -> Iterator[Path]:
    if takes_direct(tmp):
        yield tmp
        return
    with tempfile.TemporaryDirectory(prefix=".direct-", dir=REPO) as d:
        yield Path(d)

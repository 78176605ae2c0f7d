"""Which tests may share the CPU with another.

Tests in the folders of ``SHARED`` check behaviour (arguments, records, renderers, escaping,
error lines) and measure nothing a test running beside them could move, so `make test` runs
them two or more at a time. Every other test builds a truth in time or CPU (a burn of
exactly X ms, a server throttled to R MB/s, a rerun against a prediction) and is marked
``serial``: `make test` runs those alone, after the others, as a quiet host would. A test in
a shared folder that measures against the clock carries ``pytest.mark.serial`` itself; a file
elsewhere that checks behaviour alone (a real training stack trains as unwatched, a signal
reaches the script) carries ``pytest.mark.shared``, and its tests that do measure carry
``serial`` as well.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = (
    "tests/unit/",
    "tests/integration/cli/",
    "tests/integration/env/",
    "tests/integration/harness/",
    "tests/integration/report/",
    "tests/integration/size/",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.resolve().relative_to(ROOT).as_posix()
        if not where.startswith(SHARED) and item.get_closest_marker("shared") is None:
            item.add_marker(pytest.mark.serial)

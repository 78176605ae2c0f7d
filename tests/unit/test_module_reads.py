"""A worker's module reads are the interpreter's: the audit hook that counts them must count
a module opened for reading at its size, nothing else, and never fail the open it sees."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.watch import torch as wt


@pytest.fixture
def own() -> Iterator[None]:
    saved = wt._own[0]
    wt._own[0] = 0
    yield
    wt._own[0] = saved


@pytest.mark.usefixtures("own")
def test_a_module_opened_for_reading_counts_its_size(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("x = 1\n" * 100)
    wt._audit("open", (str(module), "rb", os.O_RDONLY))
    assert wt._own[0] == 600
    wt._audit("open", (str(tmp_path / "m.pyc"), None, os.O_RDONLY))  # not there: nothing
    assert wt._own[0] == 600


@pytest.mark.usefixtures("own")
def test_data_files_writes_and_other_events_count_nothing(tmp_path: Path) -> None:
    data = tmp_path / "shard.bin"
    data.write_bytes(b"\0" * 4096)
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    for event, args in [
        ("open", (str(data), "rb", os.O_RDONLY)),  # the dataset's: counted as its reads
        ("open", (str(module), "w", os.O_WRONLY)),  # a module written
        ("open", (str(module), None, os.O_WRONLY | os.O_CREAT)),  # a .pyc cached
        ("open", (3, None, 0)),  # a file descriptor
        ("exec", (compile("1", "<x>", "eval"),)),
    ]:
        wt._audit(event, args)
    assert wt._own[0] == 0


@pytest.mark.usefixtures("own")
def test_odd_events_never_raise_into_the_open() -> None:
    for args in [("a.py",), ("a\0.py", "rb", 0), ("/nonexistent/a.py", "rb", 0), ()]:
        wt._audit("open", args)
    assert wt._own[0] == 0

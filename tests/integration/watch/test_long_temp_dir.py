"""A temp folder too long for the sockets DataLoader workers pass tensors through: the
kernel's limit, found by binding one, and the warning ``ioprobe.watch`` gives where the
workers would hang (watched or not), with the loader left as it was."""

from __future__ import annotations

import socket
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect import hostinfo
from tests.fixtures.datasets import SleepDataset

ROOM = hostinfo.SOCKET_PATH_MAX - hostinfo.SOCKET_TAIL
# behaviour alone, nothing against the clock: beside the other tests
pytestmark = pytest.mark.shared


@pytest.fixture
def short_base() -> Iterator[Path]:
    # under /tmp, not pytest's tmp_path, whose own length would leave no room to test
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="lt") as d:
        yield Path(d)


def _folder(base: Path, length: int) -> Path:
    """A folder under ``base`` whose path is ``length`` bytes long."""
    folder = base / ("x" * (length - len(str(base)) - 1))
    folder.mkdir()
    return folder


def test_a_socket_binds_in_a_folder_of_the_room_and_not_one_byte_longer(
    short_base: Path,
) -> None:
    for length, fits in ((ROOM, True), (ROOM + 1, False)):
        folder = _folder(short_base, length)
        # multiprocessing's own names: pymp- and listener- with 8 random characters each
        sub = folder / "pymp-abcdefgh"
        sub.mkdir()
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(str(sub / "listener-abcdefgh"))
            bound = True
        except OSError:
            bound = False
        finally:
            s.close()
        assert bound is fits, (length, fits)


def _watch(workers: int) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ioprobe.watch(DataLoader(SleepDataset(8, 0.0), batch_size=4, num_workers=workers))
    return [w for w in seen if "temp folder" in str(w.message)]


def test_watch_warns_where_the_workers_would_hang_and_only_there(
    short_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = _folder(short_base, ROOM + 1)
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    said = _watch(2)
    assert len(said) == 1
    text = str(said[0].message)
    assert str(long) in text and "hang" in text and "TMPDIR" in text
    assert said[0].filename == __file__  # pointed at the caller of ioprobe.watch
    # no workers, or the file-system sharing that needs no socket: nothing to say
    assert _watch(0) == []
    was = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        assert _watch(2) == []
    finally:
        torch.multiprocessing.set_sharing_strategy(was)
    monkeypatch.setattr(tempfile, "tempdir", str(_folder(short_base, ROOM)))
    assert _watch(2) == []

"""What in the process a DataLoader runs in would stop its workers, said when it is
watched: the loader itself is left as it is."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader

from ioprobe.collect import hostinfo
from ioprobe.redact import printable


def warn_long_temp_dir(inner: DataLoader[Any]) -> None:
    """Say so where this loader's workers will hang at their first batch, watched or not:
    the temp folder too long for the sockets they pass tensors through
    (``hostinfo.long_temp_dir``). Nothing is changed: the loader runs as it would."""
    strategy = torch.multiprocessing.get_sharing_strategy()  # type: ignore[no-untyped-call]
    if inner.num_workers == 0 or strategy != "file_descriptor":
        return
    folder = hostinfo.long_temp_dir()
    if folder is None:
        return
    room = hostinfo.SOCKET_PATH_MAX - hostinfo.SOCKET_TAIL
    warnings.warn(
        f"ioprobe.watch: the temp folder {printable(folder)} is {len(os.fsencode(folder))} "
        f"bytes long, over the {room} that leave room for the sockets DataLoader workers "
        "pass tensors through: the workers will hang at their first batch, watched or not. "
        "Set TMPDIR to a shorter folder, or call "
        "torch.multiprocessing.set_sharing_strategy('file_system') first.",
        stacklevel=6,  # the caller of ioprobe.watch (through Watched)
    )

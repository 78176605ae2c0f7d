"""The disk-to-GPU path on a real CUDA device: every byte arrives in its place (checked on the
device), and the path is no faster than the slower of its two halves measured alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ioprobe.collect import disk_to_gpu as d2g
from ioprobe.collect import storage as st_mod
from ioprobe.collect.cuda_copy import TorchCopier, open_copier
from ioprobe.collect.dataset import Dataset, FileEntry
from tests.fixtures.bare_copy import bare_rate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
MIB = 1 << 20
FILES, FILE_BYTES = 64, 4 * MIB  # 256 MiB
WEIGHTS = 251  # a byte's weight is its position in the stream mod 251, plus one


def _weights(offset: int, n: int, xp: Any, **kw: Any) -> Any:
    return (xp.arange(offset, offset + n, **kw) % WEIGHTS) + 1


class Checking(TorchCopier):
    """Adds up, on the device, each byte times a weight set by its place in the stream of
    copies: a byte lost, duplicated or moved changes the sum."""

    def __init__(self, index: int) -> None:
        super().__init__(torch, index)
        self.sum = torch.zeros((), dtype=torch.int64, device=f"cuda:{index}")
        torch.cuda.synchronize()  # the zeros are made on the default stream
        self.offset = 0

    def start(self, host: Any, device: Any, nbytes: int, direction: Any, reps: int) -> Any:
        pending = super().start(host, device, nbytes, direction, reps)
        # on the copier's own stream: after this copy, and before the next copy into the
        # same device buffer
        with torch.cuda.stream(self._stream):
            w = _weights(self.offset, nbytes, torch, device=device.device, dtype=torch.int64)
            self.sum += (device[:nbytes].to(torch.int64) * w).sum()
        self.offset += nbytes
        return pending


def _host_checksum(entries: list[FileEntry], buffer: int) -> int:
    """The same weighted sum over the files' bytes in the order the path reads them."""
    total, offset = 0, 0
    for path, off, length in st_mod.plan_items(entries, buffer):
        with open(path, "rb") as fh:
            fh.seek(off)
            data = np.frombuffer(fh.read(length), np.uint8).astype(np.int64)
        total += int((data * _weights(offset, length, np)).sum())
        offset += length
    return total


def test_disk_to_gpu_delivers_every_byte_no_faster_than_its_slower_half(tmp_path: Path) -> None:
    entries = []
    rng = np.random.default_rng(0)
    for i in range(FILES):
        p = tmp_path / f"{i:02d}.bin"
        p.write_bytes(rng.integers(0, 256, FILE_BYTES, dtype=np.uint8).tobytes())
        entries.append(FileEntry(str(p), FILE_BYTES))
    # the read half: the storage pass, warm, at one thread as the path reads; the best of
    # three (the first after writing can still meet writeback)
    ds = Dataset(target=str(tmp_path), entries=entries)
    read_rate = max(
        st_mod.measure_pass(ds, entries, "warm", 10.0, levels=(1,)).read_bytes_per_s or 0.0
        for _ in range(3)
    )
    # the copy half: a bare torch loop of pinned 8 MiB copies between CUDA events
    copy_rate = bare_rate(d2g.BUFFER, True, "h2d")
    copier = open_copier()
    assert isinstance(copier, TorchCopier)
    # integrity and rate from two runs: the device-side checksum costs the host time per
    # buffer that the rate must not carry
    checking = Checking(copier.index)
    checked = d2g.measure_path(checking, entries, budget_s=30, cold=False)
    torch.cuda.synchronize()
    assert checked.bytes == FILES * FILE_BYTES
    assert int(checking.sum) == _host_checksum(entries, d2g.BUFFER)
    path = d2g.measure_path(copier, entries, budget_s=30, cold=False)
    assert path.bytes == FILES * FILE_BYTES and path.files == FILES
    assert path.bytes_per_s is not None and path.bytes_per_s > 0
    print(
        f"disk-to-GPU {path.bytes_per_s / 1e9:.2f} GB/s; reads alone {read_rate / 1e9:.2f} GB/s, "
        f"pinned copies alone {copy_rate / 1e9:.2f} GB/s; cuFile: "
        f"{d2g.kvikio_read(copier, entries, 10)[1]}"
    )
    assert path.bytes_per_s <= 1.1 * min(read_rate, copy_rate)
    assert path.bytes_per_s >= 0.3 * min(read_rate, copy_rate)  # overlapped, not starved

"""The disk-to-GPU path on a real CUDA device: every byte arrives (checked on the device),
and the path is no faster than the slower of its two halves measured alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ioprobe.collect import disk_to_gpu as d2g
from ioprobe.collect.cuda_copy import TorchCopier, open_copier
from ioprobe.collect.dataset import FileEntry
from tests.fixtures.bare_copy import bare_rate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
MIB = 1 << 20


class Checking(TorchCopier):
    """Sums what each copy delivered, on the device, after the copy's own event."""

    def __init__(self, index: int) -> None:
        super().__init__(torch, index)
        self.sums: list[torch.Tensor] = []

    def start(self, host: Any, device: Any, nbytes: int, direction: Any, reps: int) -> Any:
        pending = super().start(host, device, nbytes, direction, reps)
        torch.cuda.current_stream().wait_event(pending[1])
        self.sums.append(device[:nbytes].to(torch.int64).sum())
        return pending


def test_the_path_delivers_every_byte_no_faster_than_its_slower_half(tmp_path: Path) -> None:
    entries = []
    rng = np.random.default_rng(0)
    for i in range(64):
        p = tmp_path / f"{i:02d}.bin"
        p.write_bytes(rng.integers(0, 256, 4 * MIB, dtype=np.uint8).tobytes())
        entries.append(FileEntry(str(p), 4 * MIB))
    host_sum = sum(
        int(np.frombuffer(Path(e.path).read_bytes(), np.uint8).sum(dtype=np.int64)) for e in entries
    )
    # the read half alone, warm, single-threaded as the path reads: the best of three
    # passes (the first after writing can still meet writeback)
    buf = bytearray(4 * MIB)
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        for e in entries:
            with open(e.path, "rb", buffering=0) as fh:
                fh.readinto(buf)
        rates.append(256 * MIB / (time.perf_counter() - t0))
    read_rate = max(rates)
    copy_rate = bare_rate(d2g.BUFFER, True, "h2d")
    copier = open_copier()
    assert isinstance(copier, TorchCopier)
    # integrity and rate from two runs: the device-side checksums cost the host time per
    # buffer that the rate must not carry
    checking = Checking(copier.index)
    d2g.measure_path(checking, entries, budget_s=30, cold=False)
    torch.cuda.synchronize()
    assert sum(int(s) for s in checking.sums) == host_sum
    path = d2g.measure_path(copier, entries, budget_s=30, cold=False)
    assert path.bytes == 256 * MIB and path.files == 64
    assert path.bytes_per_s is not None
    print(
        f"disk-to-GPU {path.bytes_per_s / 1e9:.2f} GB/s; reads alone {read_rate / 1e9:.2f} GB/s, "
        f"pinned copies alone {copy_rate / 1e9:.2f} GB/s"
    )
    assert path.bytes_per_s <= 1.1 * min(read_rate, copy_rate)
    assert path.bytes_per_s >= 0.3 * min(read_rate, copy_rate)  # overlapped, not starved

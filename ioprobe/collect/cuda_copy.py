"""The one seam between the probe and CUDA: host and device buffers, and timed copies.

The host-to-device probe (``collect/pcie.py``) and the disk-to-GPU path
(``collect/disk_to_gpu.py``) never call CUDA themselves; they go through a ``Copier``. The
real one, ``TorchCopier``, times copies with CUDA events on a stream of its own, so the
training job's default stream and whatever else runs on the device are not serialised with
the probe. Tests pass a stand-in that implements the same four calls with a model of a link.
Torch is imported only by ``open_copier``: the core of ioprobe never imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal, Protocol

Direction = Literal["h2d", "d2h"]


class Copier(Protocol):
    """Copies between host and device memory, timed on the device's clock."""

    name: str  # the device, as a person reads it: "NVIDIA H100 80GB HBM3 (cuda:0)"
    index: int  # the CUDA device index (NVML's index where CUDA_VISIBLE_DEVICES is unset)

    def host(self, nbytes: int, pinned: bool) -> Any:
        """A host buffer of ``nbytes``, page-locked when ``pinned``."""
        ...

    def view(self, host: Any) -> memoryview:
        """The writable bytes of a host buffer, for ``readinto``."""
        ...

    def device(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes``."""
        ...

    def start(self, host: Any, device: Any, nbytes: int, direction: Direction, reps: int) -> Any:
        """Queue ``reps`` copies of the first ``nbytes`` between two events; returns at once
        for pinned memory (pageable copies block the host while they stage)."""
        ...

    def wait(self, pending: Any) -> float:
        """Block until a started copy is done; the device seconds between its two events."""
        ...


class TorchCopier:
    """``Copier`` over torch's CUDA runtime: a dedicated stream, events with timing."""

    def __init__(self, torch: Any, index: int) -> None:
        self._torch = torch
        self.index = index
        self._device = torch.device("cuda", index)
        self._stream = torch.cuda.Stream(device=self._device)
        self.name = f"{torch.cuda.get_device_name(index)} (cuda:{index})"

    def host(self, nbytes: int, pinned: bool) -> Any:
        t = self._torch.empty(nbytes, dtype=self._torch.uint8, pin_memory=pinned)
        t.fill_(1)  # touch every page: a first-touch fault is not part of a copy
        return t

    def view(self, host: Any) -> memoryview:
        return memoryview(host.numpy())

    def device(self, nbytes: int) -> Any:
        return self._torch.empty(nbytes, dtype=self._torch.uint8, device=self._device)

    def start(self, host: Any, device: Any, nbytes: int, direction: Direction, reps: int) -> Any:
        cuda = self._torch.cuda
        src, dst = (host, device) if direction == "h2d" else (device, host)
        src, dst = src[:nbytes], dst[:nbytes]
        begin = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        with cuda.stream(self._stream):
            begin.record(self._stream)
            for _ in range(reps):
                dst.copy_(src, non_blocking=True)
            end.record(self._stream)
        return begin, end

    def wait(self, pending: Any) -> float:
        begin, end = pending
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3


def may_have_gpu() -> bool:
    """Whether this Linux host shows an NVIDIA device node (or WSL2's GPU node) at all; on
    other systems, assume it may and let torch decide. Where it says no, nothing starts CUDA."""
    if not sys.platform.startswith("linux"):
        return True
    dev = Path("/dev")
    return any(dev.glob("nvidia[0-9]*")) or (dev / "dxg").exists()


def open_copier(index: int | None = None) -> Copier | str:
    """A copier on CUDA device ``index`` (the current device when None), or why there is none.

    "No GPU" is a normal answer on a CPU machine, so it is returned as a reason, not raised.
    """
    if not may_have_gpu():
        # importing torch to learn that there is no GPU costs 1-2 s of every probe
        return "not measured: no CUDA device"
    try:
        import torch
    except ImportError:
        return "not measured: torch is not installed"
    try:
        if not torch.cuda.is_available():
            return "not measured: no CUDA device"
        if index is None:
            index = torch.cuda.current_device()
        return TorchCopier(torch, index)
    except Exception as exc:  # a broken driver or a busy device: say so, never a traceback
        return f"not measured: CUDA did not start ({type(exc).__name__}: {exc})"


__all__ = ["Copier", "Direction", "TorchCopier", "may_have_gpu", "open_copier"]

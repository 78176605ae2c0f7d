"""ioprobe: why is my GPU waiting, and what would stop it?

The core package never imports torch or DALI at module level; the adapters in
``ioprobe.loaders`` import them when they are used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("ioprobe")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

from ioprobe.collect import nvtx as _nvtx
from ioprobe.record import GpuAlone, RunRecord
from ioprobe.watcher import to_device, watch

# before any DALI pipeline exists: NVTX reads the variable at a library's first range
_nvtx.arm()


def gpu_alone(step: Any, batch: Any, device: Any = None, seconds: float = 1.0) -> GpuAlone:
    """The training step's rate with its batch already on the device, and the share of the
    GPU it fills (see ``ioprobe.loaders.torch.gpu_alone``)."""
    from ioprobe.loaders.torch import gpu_alone as _gpu_alone

    alone: GpuAlone = _gpu_alone(step, batch, device, seconds)
    return alone


__all__ = ["GpuAlone", "RunRecord", "__version__", "gpu_alone", "to_device", "watch"]

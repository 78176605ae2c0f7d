"""Watching a live loader: ``watch`` picks the framework adapter that accepts the loader and
wraps it; ``to_device`` moves (and, inside a watched loop, times) a batch; ``gpu_alone``
times the training step with no data to wait for.

This package measures and never judges: a wrapper's ``.run`` is ``finish`` of the record it
collected, and the caller supplies ``finish`` (``ioprobe.watch`` passes the analysis;
``ioprobe run`` judges in its parent process). Nothing here imports torch or DALI until a
loader of theirs is watched.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ioprobe.errors import BadInputError
from ioprobe.monitor.collector import ACTIVE, Finish, unjudged
from ioprobe.record import GpuAlone

# (the framework's top-level module, the adapter module that watches its loaders). A
# framework is recognised without importing it: only one already imported can have made the
# loader. Each adapter module has ``accepts(obj) -> bool`` and ``wrap(obj, device, finish)``
# and implements ``ioprobe.monitor.collector.Adapter`` for the collector.
FRAMEWORKS = (
    ("torch", "ioprobe.loaders.torch"),
    ("nvidia.dali", "ioprobe.loaders.dali"),
)


def watch(loader: Any, device: Any = None, finish: Finish = unjudged, live: bool = False) -> Any:
    """Wrap ``loader`` so that iterating it measures every stage: a PyTorch DataLoader, a DALI
    framework iterator (DALIGenericIterator, DALIClassificationIterator) or a DALI Pipeline
    driven with ``run()``. The wrapper behaves like what it wraps; ``.run`` (``.record`` for a
    Pipeline, whose ``run()`` stays DALI's) is ``finish`` of the RunRecord.

    ``device`` (DataLoader only), e.g. ``"cuda"``: yield each batch already moved there, its
    host-to-device copy timed with CUDA events, as ``to_device`` does.

    ``live``: while its epochs run, a panel on stderr (a terminal only) shows the rates of the
    last seconds (``ioprobe.monitor.live``)."""
    for framework, module in FRAMEWORKS:
        if framework in sys.modules:
            adapter = importlib.import_module(module)
            if adapter.accepts(loader):
                wrapped = adapter.wrap(loader, device, finish)
                if live:
                    from ioprobe.monitor.live import attach

                    attach(wrapped._collector)
                return wrapped
    raise BadInputError(
        f"ioprobe.watch: cannot watch a {type(loader).__qualname__} (expected a torch "
        "DataLoader, a DALI iterator or a DALI Pipeline)"
    )


def to_device(batch: Any, device: Any, non_blocking: bool | None = None) -> Any:
    """``batch`` (a tensor, or mappings, tuples and lists of them) moved to ``device``, like
    ``batch.to(device)``. Inside a watched loader's loop the copy is timed with CUDA events on
    the current stream, its bytes counted as pinned or pageable, and the record gets a PCIe
    stage. ``non_blocking`` defaults to True for tensors in pinned memory, False otherwise."""
    from ioprobe.loaders import torch as adapter

    dev = adapter.resolve_device(device)
    timeline = None
    if ACTIVE:
        col = ACTIVE[-1]
        timeline = col.gpu.use(adapter.event_backend(dev))
        # events on one CUDA device can't time a copy to another
        if timeline is not None and getattr(timeline.backend, "device", dev) != dev:
            timeline = None
    return adapter.move(batch, dev, non_blocking, timeline)


def gpu_alone(step: Any, batch: Any, device: Any = None, seconds: float = 1.0) -> GpuAlone:
    """The training step's rate with its batch already on the device, and the share of the
    GPU it fills (see ``ioprobe.loaders.torch.gpu_alone``)."""
    from ioprobe.loaders import torch as adapter

    alone: GpuAlone = adapter.gpu_alone(step, batch, device, seconds)
    return alone


__all__ = ["FRAMEWORKS", "gpu_alone", "to_device", "watch"]

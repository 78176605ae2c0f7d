"""ioprobe: why is my GPU waiting, and what would stop it?

The Python entry point. ``watch`` wraps a DataLoader or a DALI iterator or pipeline and
measures it while it trains; ``to_device`` moves a batch to the GPU (timed inside a watched
loop); ``gpu_alone`` times the training step with no data to wait for;
``time_dali_operators`` turns on DALI's per-operator timing for pipelines built afterwards;
``tune`` tries a DataLoader's settings and names the one that delivers fastest.

Importing ioprobe does nothing else: no framework is imported and the environment is left
alone. Each function imports what it needs when it is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ioprobe._version import __version__

if TYPE_CHECKING:
    from ioprobe.record import GpuAlone, RunRecord


def watch(loader: Any, device: Any = None, live: bool = False) -> Any:
    """Wrap ``loader`` so that iterating it measures every stage: a PyTorch DataLoader, a DALI
    framework iterator (DALIGenericIterator, DALIClassificationIterator) or a DALI Pipeline
    driven with ``run()``. The wrapper behaves like what it wraps; ``.run`` (``.record`` for a
    Pipeline, whose ``run()`` stays DALI's) is the RunRecord, with its verdict.

    ``device`` (DataLoader only), e.g. ``"cuda"``: yield each batch already moved there, its
    host-to-device copy timed with CUDA events, as ``to_device`` does.

    ``live=True``: while the loop runs, a panel on stderr redrawn every second shows the
    samples/s delivered and the stall over the last few seconds, each stage's capacity now
    and the lowest, and the stall over the last minute; cleared when the loop ends. Only on a
    terminal: with stderr a file or a pipe nothing is drawn (see docs/watch.md)."""
    from ioprobe.loaders.api import watch as _watch

    return _watch(loader, device, _judge, live)


# the function under a second name, for the deprecated package ioprobe.watch, which takes
# this name's place once imported and calls the function through it
_watch = watch


def tune(loader: Any, step: Any = None, batches: int = 200, trials: int = 4) -> RunRecord:
    """Find the DataLoader settings that deliver fastest, by trials in this process: the
    loader as it is, then the settings the replay of its batches ranks (``num_workers``,
    ``prefetch_factor``, ``in_order``; never one past the host's free memory), each
    iterated for its workers' first round and ``batches`` more, calling ``step(batch)`` on
    each batch as the training loop would (None: take the batches and do nothing).

    Returns the first trial's record, judged, with every trial in ``.tune`` (predicted and
    measured samples/s, memory; ``.tune.best`` indexes the measured best). Each trial begins
    a new pass over ``loader``; ``loader`` itself is left as it was."""
    from ioprobe.analysis import finalize_watch, loader_sim
    from ioprobe.analysis.catalog import try_load_catalog
    from ioprobe.analysis.queueing import MIN_BATCHES
    from ioprobe.analysis.tune import outcome, plan, trial_of
    from ioprobe.errors import BadInputError, TrialDone
    from ioprobe.loaders.torch import Watched

    if getattr(loader, "num_workers", 0) < 1:
        raise BadInputError(
            "ioprobe.tune: the loader loads in the main process (num_workers=0) or is not a "
            "DataLoader: give it workers to tune"
        )
    if batches < MIN_BATCHES or trials < 1:
        raise BadInputError(
            f"ioprobe.tune: batches must be at least {MIN_BATCHES} (the replay's least) and "
            "trials at least 1"
        )
    catalog = try_load_catalog()

    def trial(setting: loader_sim.Setting | None) -> RunRecord:
        overrides = setting.overrides() if setting is not None else None
        workers = setting.workers if setting is not None else loader.num_workers
        watched = Watched(loader, overrides=overrides, stop_after=batches + workers)
        try:
            for batch in watched:
                if step is not None:
                    step(batch)
        except TrialDone:
            pass
        return finalize_watch(watched.run, catalog)

    first = trial(None)
    base = loader_sim.recorded_setting(first)
    if base is None:
        raise BadInputError("ioprobe.tune: the first trial delivered no batches to replay")
    chosen = plan(first, trials)
    if not chosen:
        raise BadInputError(
            "ioprobe.tune: the first trial's batches could not be replayed (an epoch shorter "
            f"than its workers' first round and {MIN_BATCHES} batches)"
        )
    rows = [trial_of(base, first, None)]
    for p in chosen:
        rows.append(trial_of(p.setting, trial(p.setting), p))
    first.tune = outcome(rows, batches)
    return first


def _judge(rec: RunRecord) -> RunRecord:
    """A watched run's verdict and advice, with the storage catalog (the shipped classes and
    $IOPROBE_CATALOG) loaded here, at the edge."""
    from ioprobe.analysis import finalize_watch
    from ioprobe.analysis.catalog import try_load_catalog

    return finalize_watch(rec, try_load_catalog())


def to_device(batch: Any, device: Any, non_blocking: bool | None = None) -> Any:
    """``batch`` (a tensor, or mappings, tuples and lists of them) moved to ``device``, like
    ``batch.to(device)``. Inside a watched loader's loop the copy is timed with CUDA events on
    the current stream, its bytes counted as pinned or pageable, and the record gets a PCIe
    stage. ``non_blocking`` defaults to True for tensors in pinned memory, False otherwise."""
    from ioprobe.loaders.api import to_device as _to_device

    return _to_device(batch, device, non_blocking)


def gpu_alone(step: Any, batch: Any, device: Any = None, seconds: float = 1.0) -> GpuAlone:
    """The training step's rate with its batch already on the device, and the share of the
    GPU it fills (see ``ioprobe.loaders.torch.gpu_alone``)."""
    from ioprobe.loaders.api import gpu_alone as _gpu_alone

    return _gpu_alone(step, batch, device, seconds)


def time_dali_operators() -> str | None:
    """Time every DALI operator of the pipelines built from now on, through DALI's NVTX
    ranges: call it before building the first pipeline (NVTX settles where its ranges go at
    a process's first range). Child processes inherit it. None when it is on; otherwise why
    it can't be (the injection library was not built, ``IOPROBE_NVTX=0``, another tool such
    as Nsight Systems owns NVTX)."""
    from ioprobe.collect import nvtx

    return nvtx.arm()


def __getattr__(name: str) -> Any:
    # the record's classes, imported on first use: ``import ioprobe`` stays free of them
    if name in ("RunRecord", "GpuAlone"):
        from ioprobe import record

        return getattr(record, name)
    raise AttributeError(f"module 'ioprobe' has no attribute {name!r}")


__all__ = [
    "GpuAlone",
    "RunRecord",
    "__version__",
    "gpu_alone",
    "time_dali_operators",
    "to_device",
    "watch",
]

"""Watch a PyTorch DataLoader: same batches, same order, with every stage measured.

``watch(loader)`` builds a sibling DataLoader that shares the user's sampler or batch sampler
(so shuffling order and ``set_epoch`` are untouched) around two thin wrappers, the dataset's
and the collate's, which run in the workers (``loaders.torch_worker``): they time every sample and
collate and send the batch's measurements back *with the batch*, so measuring costs no
extra IPC.

The main process times ``next()`` (the data stall) and the gap between batches (the step).
The user's loader object is never modified.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler
from torch.utils.data._utils.collate import default_collate, default_convert

from ioprobe.capacity import worker_epochs
from ioprobe.collect import read_check
from ioprobe.collect.procfs import private_bytes
from ioprobe.errors import BadInputError, TrialDone
from ioprobe.loaders.torch_env import warn_long_temp_dir
from ioprobe.loaders.torch_iter import Maker, WatchedIter
from ioprobe.loaders.torch_stateful import ROUTED, is_stateful, patch_class, route
from ioprobe.loaders.torch_worker import (
    Stamped,
    TimedBatchedDataset,
    TimedCollate,
    TimedDataset,
    TimedIterable,
    main_process_epoch,
)
from ioprobe.monitor.collector import (
    Finish,
    WatchCollector,
    unjudged,
)
from ioprobe.monitor.stages import Measured, loader_stages
from ioprobe.record import GpuAlone, LoaderSettings, RunRecord, Stages, WatchEpoch
from ioprobe.redact import printable, redact_url

# ----------------------------------------------------------------------------- main side

# Workers blocked this share of their samples' time or more read more than they compute:
# how their storage scales with readers is what advice on their number rests on.
READ_CHECK_BLOCKED = 0.5


# The settings ``ioprobe tune`` may change in a trial: a DataLoader's queue, nothing that
# changes what the batches hold.
TRIAL_SETTINGS = ("num_workers", "prefetch_factor", "in_order")


def rebuild(
    loader: DataLoader[Any],
    overrides: dict[str, Any] | None = None,
    batches: list[list[int]] | None = None,
    generator: torch.Generator | None = None,
) -> DataLoader[Any]:
    """A sibling of ``loader`` over the timed dataset and collate, with every setting the
    user gave it (the same sampler object, so the same order), but ``overrides`` (of
    TRIAL_SETTINGS: a trial of ``ioprobe tune``). A trial inside the script's run
    (``torch_trials``) gives the part of the epoch it loads, ``batches`` (each a batch's
    indices, drawn from the user's sampler), and a ``generator`` of its own for the workers'
    seeds, so that making its iterator draws nothing from the user's."""
    ds = loader.dataset
    if isinstance(ds, IterableDataset):
        wrapped: Any = TimedIterable(ds)
    elif getattr(ds, "__getitems__", None):
        wrapped = TimedBatchedDataset(ds)
    else:
        wrapped = TimedDataset(ds)
    auto = loader.batch_sampler is not None  # torch's own rule for auto-collation
    user_collate = loader.collate_fn
    if user_collate is None:
        user_collate = default_collate if auto else default_convert
    kw: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": TimedCollate(user_collate),
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator if generator is None else generator,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
        "in_order": loader.in_order,
    }
    if loader.num_workers > 0:
        kw["prefetch_factor"] = loader.prefetch_factor
    kw.update({k: v for k, v in (overrides or {}).items() if k in TRIAL_SETTINGS})
    if kw["num_workers"] == 0:
        kw.pop("prefetch_factor", None)
    elif kw.get("prefetch_factor") is None:
        kw["prefetch_factor"] = 2  # torch's default with workers
    cls, extra = _sibling_class(loader)
    kw.update(extra)
    inner: DataLoader[Any]
    if isinstance(ds, IterableDataset):
        inner = cls(wrapped, batch_size=loader.batch_size, drop_last=loader.drop_last, **kw)
    elif batches is not None:
        inner = cls(wrapped, batch_sampler=batches, **kw)
    elif loader.batch_sampler is not None:
        # the user's own batch sampler object: same order, and set_epoch on it still works
        inner = cls(wrapped, batch_sampler=loader.batch_sampler, **kw)
    else:
        inner = cls(wrapped, batch_size=None, sampler=loader.sampler, **kw)
    inner._ioprobe_inner = True  # `ioprobe run` patches __iter__: this one runs unpatched
    pending = getattr(loader, "next_iter_state", None)
    if pending is not None:  # a state loaded before the first iteration: resume from it
        inner.load_state_dict(pending)  # type: ignore[attr-defined]
    return inner


def _sibling_class(loader: DataLoader[Any]) -> tuple[type[Any], dict[str, Any]]:
    """The class to build the sibling from, and the arguments only it takes: a stateful
    loader's own base class (``loaders.torch_stateful``, with how often it snapshots),
    else a plain DataLoader."""
    for klass in type(loader).__mro__:
        if is_stateful(klass):
            return klass, {"snapshot_every_n_steps": loader.snapshot_every_n_steps}  # type: ignore[attr-defined]
    return DataLoader, {}


def stateful(inner: DataLoader[Any]) -> bool:
    """Whether the sibling keeps its own iteration state (see ``_sibling_class``)."""
    return type(inner) is not DataLoader


def _batching(loader: DataLoader[Any]) -> tuple[int | None, str]:
    """Samples per batch and the sampler that orders them. A loader given
    ``batch_sampler=`` keeps its unused defaults in ``batch_size`` (None) and ``sampler``
    (sequential); the batch sampler holds the real ones."""
    bs = loader.batch_sampler
    if bs is not None and loader.batch_size is None:
        inner = getattr(bs, "sampler", None)
        size = getattr(bs, "batch_size", None)
        return (size if isinstance(size, int) else None), type(
            inner if inner is not None else bs
        ).__qualname__
    return loader.batch_size, type(loader.sampler).__qualname__


def dataset_source(ds: Any) -> str:
    """Where a chunked streaming dataset reads from, as it was given, redacted: litdata's
    ``input_dir`` (its URL, else its local path), a mosaicml-streaming dataset's first
    stream's ``remote`` (else its ``local``); "" where the dataset names none. A remote one
    downloads its chunks into a local cache and maps them from there, so the files the
    workers map look local: only the dataset's own word says the data comes over a network."""
    try:
        where = getattr(ds, "input_dir", None)
        if where is not None:
            found = getattr(where, "url", None) or getattr(where, "path", None)
            return redact_url(found) if isinstance(found, str) else ""
        streams = getattr(ds, "streams", None)
        if isinstance(streams, list | tuple) and streams:
            found = getattr(streams[0], "remote", None) or getattr(streams[0], "local", None)
            return redact_url(found) if isinstance(found, str) else ""
    except Exception:  # a dataset's own __getattr__ may raise anything: it names no source
        return ""
    return ""


def format_cache(ds: Any) -> tuple[int, int]:
    """A litdata dataset's cache limit in bytes (``max_cache_size`` given as a size, parsed
    by litdata's own rule; 0 for a share of the disk, or none) and the chunks each worker
    downloads ahead (``max_pre_download``); (0, 0) where no size is known, and for any other
    dataset. Each worker holds the chunk it reads and those ahead: a cache smaller than all
    workers' makes them wait for room, so more workers read slower
    (``scenario.cache_room``)."""
    try:
        ahead = getattr(ds, "max_pre_download", None)
        if getattr(ds, "input_dir", None) is None or not isinstance(ahead, int):
            return 0, 0
        # litdata's rule: the environment's MAX_CACHE_SIZE wins over the argument
        given = os.environ.get("MAX_CACHE_SIZE", "").strip() or getattr(ds, "max_cache_size", None)
        limit = 0
        if given is not None:
            from litdata.utilities.format import _is_absolute_cache_size, _parse_max_cache_size

            if _is_absolute_cache_size(given):
                limit = int(_parse_max_cache_size(given))
        return (limit, max(ahead, 0)) if limit > 0 else (0, 0)
    except Exception:  # another version's names, or a dataset's own __getattr__: not known
        return 0, 0


def describe(loader: DataLoader[Any]) -> dict[str, str]:
    """The loader's settings as the user wrote them, for reports."""
    ctx = loader.multiprocessing_context
    method = ctx.get_start_method() if ctx is not None else torch.multiprocessing.get_start_method()
    batch_size, sampler = _batching(loader)
    source = dataset_source(loader.dataset)
    limit, ahead = format_cache(loader.dataset)
    return {
        "framework": "torch",
        "dataset": type(loader.dataset).__qualname__,
        **({"source": source} if source else {}),
        **({"cache_limit_bytes": str(limit), "chunks_ahead": str(ahead)} if limit else {}),
        "iterable": str(isinstance(loader.dataset, IterableDataset)),
        "num_workers": str(loader.num_workers),
        "batch_size": str(batch_size),
        "pin_memory": str(loader.pin_memory),
        "prefetch_factor": str(loader.prefetch_factor),
        "persistent_workers": str(loader.persistent_workers),
        "in_order": str(loader.in_order),
        "sampler": sampler,
        "start_method": method if loader.num_workers > 0 else "none (main process)",
    }


def settings(loader: DataLoader[Any]) -> LoaderSettings:
    """The loader's settings, typed, read off the loader itself."""
    batch_size, sampler = _batching(loader)
    limit, ahead = format_cache(loader.dataset)
    return LoaderSettings(
        framework="torch",
        dataset=type(loader.dataset).__qualname__,
        source=dataset_source(loader.dataset),
        cache_limit_bytes=limit,
        chunks_ahead=ahead,
        workers=loader.num_workers,
        batch_size=batch_size,
        iterable=isinstance(loader.dataset, IterableDataset),
        sampler=sampler,
        pin_memory=loader.pin_memory,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        in_order=loader.in_order,
    )


class DataLoaderAdapter:
    """The collector's view of a DataLoader: its workers report each sample's times with the
    batch, so every stage comes from ``ioprobe.monitor.stages.loader_stages`` and nothing is
    measured per epoch."""

    def __init__(
        self, settings: LoaderSettings, description: dict[str, str], dataset: Any = None
    ) -> None:
        self.settings = settings
        self.description = description
        self.dataset = dataset

    @classmethod
    def of(cls, loader: DataLoader[Any]) -> DataLoaderAdapter:
        return cls(settings(loader), describe(loader), loader.dataset)

    def begin_epoch(self) -> None:
        return None

    def end_epoch(self, epoch: WatchEpoch) -> None:
        return None

    def stages(self, m: Measured) -> tuple[Stages, list[str]]:
        return loader_stages(m)

    def complete(self, record: RunRecord) -> None:
        costs = record.watch.sample_costs if record.watch is not None else None
        if costs is None or self.settings.iterable:
            return
        for heavy in costs.heaviest:
            heavy.path = sample_path(self.dataset, heavy.index)


# where datasets commonly keep their samples' sources: ImageFolder-style lists of
# (path, label), and lists of paths or URLs
_SOURCE_LISTS = ("samples", "imgs", "files", "paths", "file_paths", "filenames", "urls")


def sample_path(dataset: Any, index: int) -> str | None:
    """The file or URL a map-style dataset names for ``index``, where it keeps a list of
    them under a common attribute; None where it keeps none (the index still finds it). Only
    reads the list: never calls into the dataset."""
    if index < 0 or dataset is None:
        return None
    for name in _SOURCE_LISTS:
        try:
            seq = vars(dataset).get(name)
        except TypeError:  # no __dict__ (slots)
            return None
        if not isinstance(seq, list | tuple) or index >= len(seq):
            continue
        item = seq[index]
        if isinstance(item, tuple | list) and item:
            item = item[0]
        if isinstance(item, str | os.PathLike):
            return redact_url(printable(str(os.fspath(item))))
    return None


def _trial_batch(collector: WatchCollector) -> None:
    """One more request in a trial of ``ioprobe tune``: TrialDone once its batches are in."""
    assert collector.stop_after is not None
    if collector.stop_after <= 0:
        raise TrialDone
    collector.stop_after -= 1


def _unmeasured(collector: WatchCollector, t0: int, t1: int, batch: Any) -> Any:
    """A batch of a pass begun before the watch: the consumer's side of it alone."""
    collector.on_unmeasured(t0, t1, _first_dim(batch) or collector.batch_size or 1)
    return batch


# what ends a pass without an error: bound as a default of ``iterate``, not looked up in the
# module, because an iterator left open is closed at the interpreter's exit, after the
# module's names were cleared to None
_NOT_ERRORS: tuple[type[BaseException], ...] = (GeneratorExit, TrialDone)


def iterate(
    inner: DataLoader[Any],
    collector: WatchCollector,
    begin: Callable[[], Callable[[BaseException | None], None]],
    device: torch.device | None = None,
    _not_errors: tuple[type[BaseException], ...] = _NOT_ERRORS,
) -> Iterator[Any]:
    """Yield the user's batches (moved to ``device`` when given); report each batch's request
    and arrival times and its worker's measurements to ``collector``, and mark the step
    boundaries on its device timeline when it has one. The epoch begins (``begin``) at the
    first ``next()``: an iterator never advanced (Lightning's check) is no epoch."""
    clock, thread_ns, on_batch = time.perf_counter_ns, time.thread_time_ns, collector.on_batch
    error: BaseException | None = None
    on_end = begin()
    try:
        t_iter, it = clock(), iter(inner)  # iter() starts the workers: timed
        collector.iter_began(t_iter, clock())
        n, memory_at = 0, max(getattr(inner, "num_workers", 0), 0) + 1
        while True:
            if collector.stop_after is not None:  # a trial of ioprobe tune
                _trial_batch(collector)
            tl = collector.gpu.timeline  # per batch: to_device may begin one mid-epoch
            if tl is not None:
                tl.before_wait()
            # one next() in 16 timed in CPU too: taking a batch costs the main thread that
            sampled = n > 0 and not n & 15  # the first next() starts the epoch: not typical
            c0 = thread_ns() if sampled else 0
            t0 = collector.request_ns = clock()
            try:
                item = next(it)
            except StopIteration:
                # this last next() is where a loader without persistent workers joins them
                collector.iter_ended(t0, clock())
                return
            t1 = clock()
            if sampled:
                collector.note_next_cpu(thread_ns() - c0)
            if tl is not None:
                tl.after_wait(t1)
            if type(item) is Stamped:
                batch = item.batch
                on_batch(t0, t1, item.stats)
                n += 1
                if n == memory_at:  # once an epoch, the first round done: what memory holds
                    collector.note_memory(workers_private(it), tensor_bytes(batch))
            else:  # a pass begun before the watch (_adopt_pending_iterator): no stats
                batch = _unmeasured(collector, t0, t1, item)
            if device is not None:
                batch = move(batch, device, None, collector.gpu.timeline)
            yield batch
    except _not_errors:
        raise  # the consumer stopped early (break), or a trial ended: not an error
    except BaseException as exc:
        error = exc
        raise
    finally:
        on_end(error)
        # no frame-error-traceback cycle: the workers end with the loop, as unwatched (kept
        # to exit, they were killed there and left their temp folders)
        error = it = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------- devices


class _TorchCopies:
    """The copy itself, and whether its source is page-locked: the calls that need the
    device's driver, kept with the events so that a simulated device can stand in for all."""

    def copy(self, t: torch.Tensor, dev: torch.device, non_blocking: bool) -> torch.Tensor:
        return t.to(dev, non_blocking=non_blocking)

    def is_pinned(self, t: torch.Tensor) -> bool:
        return bool(t.is_pinned())


class CudaEvents(_TorchCopies):
    """Timing events on a CUDA device's current stream (the default one unless the user
    switched), stamped by the device itself."""

    on_device_clock = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.name = f"cuda events on {device}"
        self._index = device.index if device.index is not None else torch.cuda.current_device()
        self._stream_id: Any = None
        self._stream: Any = None
        # torch.cuda.current_stream builds a new Stream object per call (about 3 µs on an
        # H100 host, the largest share of an event's cost): look up only the current
        # stream's id, and build the object again only when the user switched streams
        self._current = getattr(torch._C, "_cuda_getCurrentStream", None)

    def new_event(self) -> Any:
        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def record(self, ev: Any) -> None:
        if self._current is None:
            ev.record(torch.cuda.current_stream(self.device))
            return
        sid = self._current(self._index)
        if sid != self._stream_id:
            self._stream_id = sid
            self._stream = torch.cuda.current_stream(self.device)
        ev.record(self._stream)

    def done(self, ev: Any) -> bool:
        return bool(ev.query())

    def elapsed_ns(self, a: Any, b: Any) -> int:
        return int(a.elapsed_time(b) * 1e6)  # milliseconds, resolution about 0.5 µs

    def wait(self, ev: Any) -> None:
        ev.synchronize()


class HostClock(_TorchCopies):
    """For devices without CUDA events: copies timed on the host around ``.to()``."""

    on_device_clock = False
    name = "host clock"

    def new_event(self) -> list[int]:
        return [0]

    def record(self, ev: list[int]) -> None:
        ev[0] = time.perf_counter_ns()

    def done(self, ev: list[int]) -> bool:
        return True

    def elapsed_ns(self, a: list[int], b: list[int]) -> int:
        return b[0] - a[0]

    def wait(self, ev: list[int]) -> None:
        return None


_UNTIMED = HostClock()


def resolve_device(device: Any) -> torch.device:
    """``device`` as a torch.device with its index filled in; a clear error if it can't be
    used here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BadInputError(f"ioprobe: {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BadInputError(
                f"ioprobe: device {str(dev)!r} asked for, but this torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise BadInputError(
                f"ioprobe: device {str(dev)!r} asked for, but there are only "
                f"{torch.cuda.device_count()} CUDA devices"
            )
    return dev


def event_backend(device: torch.device | None) -> Any:
    """The events a timeline records with: CUDA events for a CUDA device, or for the current
    device when CUDA is already in use (the model is on it); the host clock for other
    devices; None when nothing runs on a device."""
    if device is None:
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            return CudaEvents(torch.device("cuda", torch.cuda.current_device()))
        return None
    if device.type == "cuda":
        return CudaEvents(device)
    return HostClock()


def move(batch: Any, device: torch.device, non_blocking: bool | None, timeline: Any) -> Any:
    """``batch`` with every tensor in it on ``device``, its copies timed on ``timeline``.

    Tensors are found as ``default_collate`` builds them: in mappings, named tuples, tuples
    and lists; any other object with a ``.to`` method is moved by it (its bytes unknown).
    A tensor in page-locked memory is copied with ``non_blocking=True`` unless told
    otherwise: the copy engine then overlaps it with the host's work.
    """
    counts = [0, 0]  # bytes from host memory, of which pinned
    if timeline is None:
        return _move(batch, device, non_blocking, counts, _UNTIMED)
    timeline.copy_start()
    out = _move(batch, device, non_blocking, counts, timeline.backend)
    timeline.copy_end(counts[0], counts[1])
    return out


def _move(obj: Any, dev: torch.device, nb: bool | None, counts: list[int], via: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return _move_tensor(obj, dev, nb, counts, via)
    if isinstance(obj, str | bytes):
        return obj
    if isinstance(obj, Mapping | list | tuple):
        return _move_container(obj, dev, nb, counts, via)
    to = getattr(obj, "to", None)
    if callable(to):
        return to(dev) if nb is None else to(dev, non_blocking=nb)
    return obj


def _move_tensor(
    t: torch.Tensor, dev: torch.device, nb: bool | None, counts: list[int], via: Any
) -> torch.Tensor:
    """One tensor's copy, its bytes counted when they come from host memory (``counts``:
    bytes, of which pinned)."""
    if t.device == dev:
        return t
    pinned = False
    if t.device.type == "cpu":
        n = t.nbytes
        counts[0] += n
        pinned = via.is_pinned(t)
        if pinned:
            counts[1] += n
    out: torch.Tensor = via.copy(t, dev, pinned if nb is None else nb)
    return out


def _move_container(
    obj: Any, dev: torch.device, nb: bool | None, counts: list[int], via: Any
) -> Any:
    """A mapping, named tuple, tuple or list rebuilt as its own type around moved items."""
    if isinstance(obj, Mapping):
        moved = {k: _move(v, dev, nb, counts, via) for k, v in obj.items()}
        try:
            return type(obj)(moved)  # type: ignore[call-arg]
        except TypeError:  # a mapping type that can't be built from a dict
            return moved
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # named tuple
        return type(obj)(*(_move(v, dev, nb, counts, via) for v in obj))
    items = [_move(v, dev, nb, counts, via) for v in obj]
    return items if isinstance(obj, list) else tuple(items)


def workers_private(it: Any) -> int | None:
    """The most private memory any of a DataLoader iterator's worker processes holds now;
    None without workers (loading in the main process) or where /proc can't say."""
    sizes = [
        b
        for w in getattr(it, "_workers", None) or ()
        if (pid := getattr(w, "pid", None)) and (b := private_bytes(pid)) is not None
    ]
    return max(sizes) if sizes else None


def tensor_bytes(obj: Any, depth: int = 0) -> int | None:
    """Bytes of the tensors in a batch as collate built it (nested lists, tuples and
    mappings, 8 levels at most); None where it holds no tensor."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if depth >= 8:
        return None
    items = (
        obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, list | tuple) else ()
    )
    sizes = [b for v in items if (b := tensor_bytes(v, depth + 1)) is not None]
    return sum(sizes) if sizes else None


def _first_dim(obj: Any) -> int | None:
    """The batch size: the leading dimension of the first tensor found, as collate builds it."""
    if isinstance(obj, torch.Tensor):
        return int(obj.shape[0]) if obj.dim() else 1
    items = (
        obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, list | tuple) else ()
    )
    for v in items:
        n = _first_dim(v)
        if n is not None:
            return n
    return None


def gpu_alone(
    step: Callable[[Any], object],
    batch: Any,
    device: Any = None,
    seconds: float = 1.0,
    batch_size: int | None = None,
) -> GpuAlone:
    """``step(batch)`` repeated with ``batch`` already on ``device`` (the current CUDA device
    by default, else the CPU): the step rate with no data to wait for, and how much of the
    GPU it fills. ``step`` runs about ``seconds`` plus 3 warm-up calls: pass one that leaves
    the model as it was (a forward pass, or a step on a copy) where that matters."""
    from ioprobe.collect.gpu_alone import measure_alone

    if device is None:
        device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    dev = resolve_device(device)
    on = move(batch, dev, None, None)
    size = batch_size or _first_dim(on)
    if not size:
        raise BadInputError("ioprobe.gpu_alone: no tensor in the batch; pass batch_size=")
    if seconds <= 0:
        raise BadInputError("ioprobe.gpu_alone: seconds must be positive")
    return measure_alone(step, on, size, event_backend(dev), sm_activity(dev), seconds)


def sm_activity(dev: torch.device) -> Any:
    """The SM activity reader for ``dev`` (collect/gpu_alone.py), or why there is none."""
    from ioprobe.collect.gpu_alone import open_activity

    return open_activity(dev.index or 0) if dev.type == "cuda" else "not a CUDA device"


# ----------------------------------------------------------------------------- the wrapper


def _adopt_pending_iterator(loader: Any, inner: DataLoader[Any]) -> None:
    """Start the stateful sibling ``inner`` where ``loader`` would start. Asked for its
    ``state_dict()`` before iterating (Accelerate does so when it prepares a loader), a
    ``StatefulDataLoader`` makes the iterator its first pass will use, drawing that pass's
    worker seed from the random generator then. Where that pass keeps its place in its own
    state (no workers, or a sampler with a state), the sibling takes that state, seed
    included, and makes its own iterator now, with the generators put back as they were: a
    seed drawn again later would shift every draw after it, and the shuffle order with them.
    Where it does not (workers, and a shuffled sampler that keeps no state: its first batches'
    indices went to the workers as it started, from an order no new pass can draw again),
    the sibling's first pass is that very iterator: the same batches, with workers started
    without ioprobe's timing, so that pass's worker side goes unmeasured
    (``capacity.worker_epochs``); with persistent workers every pass reuses them."""
    if not (stateful(inner) and getattr(loader, "_initial_iter_for_state_dict", False)):
        return
    pending = loader._iterator
    state = pending.state_dict()
    main = state.get("_snapshot", {}).get("_main_snapshot", {})
    kept = main.get("_sampler_iter_state") is not None or main.get("_index_sampler_state")
    randoms = _random_samplers(inner)
    # the order is kept where every sampler drawing it keeps a state: torchdata's batch
    # sampler keeps one of its own around torch's RandomSampler, which keeps none
    kept = kept and all(hasattr(r, "state_dict") for r in randoms)
    if inner.num_workers > 0 and randoms and not kept:
        inner._iterator = pending
        inner._initial_iter_for_state_dict = True
        if inner.persistent_workers:
            warnings.warn(
                "ioprobe.watch: this loader's workers were started before it was watched (its "
                "state_dict() was taken first, as Accelerate's prepare() does) and persist, so "
                "no epoch of it can be timed on the worker side: its batches are the ones it "
                "gives unwatched, its record names no bottleneck. `ioprobe run` watches the "
                "loader from its first pass.",
                stacklevel=6,  # the caller of ioprobe.watch
            )
        return
    gen = inner.generator
    cpu = torch.get_rng_state()
    own = gen.get_state() if gen is not None else None
    try:
        inner.load_state_dict(state)  # type: ignore[attr-defined]
        inner.state_dict()  # type: ignore[attr-defined]
    finally:
        torch.set_rng_state(cpu)
        if gen is not None and own is not None:
            gen.set_state(own)


def _random_samplers(sampler: Any, depth: int = 0) -> list[Any]:
    """The samplers that draw a loader's random order: a ``RandomSampler`` (or a subclass,
    as Accelerate's seedable one) as its sampler, or inside its batch sampler, a few levels
    down (a batch sampler wrapped by a sharding one)."""
    if isinstance(sampler, RandomSampler):
        return [sampler]
    found: list[Any] = []
    if depth >= 4:
        return found
    for name in ("sampler", "batch_sampler"):
        child = getattr(sampler, name, None)
        if child is not None and child is not sampler:
            found += _random_samplers(child, depth + 1)
    return found


class Watched:
    """What ``ioprobe.watch`` returns for a DataLoader: the loader, plus ``.run`` (a RunRecord)."""

    def __init__(
        self,
        loader: Any,
        device: Any = None,
        finish: Finish = unjudged,
        overrides: dict[str, Any] | None = None,
        stop_after: int | None = None,
        batches: list[list[int]] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self._loader = loader
        self._finish = finish
        self._device = resolve_device(device) if device is not None else None
        self._inner = rebuild(loader, overrides, batches, generator)
        _adopt_pending_iterator(loader, self._inner)
        try:
            n: int | None = len(loader.dataset)
        except Exception:  # no length, or a __len__ that raises (a custom sampler needs none)
            n = None
        adapter = DataLoaderAdapter.of(loader)
        if overrides:  # a trial: the user's loader under the trial's settings
            inner = self._inner
            adapter.settings = dataclasses.replace(
                adapter.settings,
                workers=inner.num_workers,
                prefetch_factor=inner.prefetch_factor,
                in_order=inner.in_order,
            )
            adapter.description.update(
                num_workers=str(inner.num_workers),
                prefetch_factor=str(inner.prefetch_factor),
                in_order=str(inner.in_order),
            )
        self._collector = WatchCollector(
            adapter,
            adapter.settings.batch_size,
            n,
            str(self._device) if self._device is not None else None,
        )
        self._collector.stop_after = stop_after
        self._trial = bool(overrides)
        self._checked = False  # the read check ran (or was ruled out for good)
        self._run: RunRecord | None = None
        self._run_at = (0, 0)  # the collector's progress when _run was read
        if not overrides:
            warn_long_temp_dir(self._inner)

    @property
    def run(self) -> RunRecord:
        """The record so far; complete once iteration has ended. Read mid-pass, the loop
        may go on: the rest of the pass is recorded as an epoch entry of its own. Read
        between passes, where the workers were mostly blocked and the run could not tell how
        its storage scales with readers, the read check measures it first (``_read_check``)."""
        at = self._collector.progress()
        if self._run is None or self._run_at != at:
            between = self._collector.current is None
            self._run = self._finish(self._collector.stop())
            if between and self._read_check(self._run):
                self._run = self._finish(self._collector.stop())
            self._run_at = self._collector.progress()
        return self._run

    def _read_check(self, rec: RunRecord) -> bool:
        """Once per loader, where the workers spent most of their time blocked and the run's
        reads in flight varied too little to tell a bandwidth cap from a latency limit (so
        any advice on the workers would rest on an assumption): measure how the dataset's
        reads scale with readers (``collect.read_check``, about 1 s) into the collector;
        True where that gave a curve. Only with ``IOPROBE_READ_CHECK=1``: it runs the
        dataset's ``__getitem__`` outside the training's schedule, and what that does beyond
        its process stays done. Never in a trial of ``ioprobe tune``, a job of several ranks
        or a loader that does not fork its workers."""
        w = rec.watch
        if (
            self._checked
            or w is None
            or w.read_scaling is None
            or w.read_scaling.exponent is not None
        ):
            return False
        eps = worker_epochs(w.epochs)
        wall = sum(e.sample_wall_seconds for e in eps)
        cpu = sum(e.sample_cpu_seconds + e.runqueue_seconds for e in eps)
        if wall <= 0 or (wall - cpu) / wall < READ_CHECK_BLOCKED:
            return False
        inner, ds = self._inner, self._loader.dataset
        ctx = inner.multiprocessing_context
        if (
            os.environ.get("IOPROBE_READ_CHECK") != "1"
            or self._trial
            or (w.rank is not None and w.rank.world_size > 1)
            or inner.num_workers < 1
            or isinstance(ds, IterableDataset)
            or (ctx is not None and ctx.get_start_method() != "fork")
        ):
            return False
        self._checked = True
        try:
            size = len(ds)
        except Exception:  # no length, or one that raises: the check has no index to draw
            return False
        found = read_check.check(ds, size, inner.num_workers)
        self._collector.checked_scaling = found
        return found is not None

    @property
    def sibling(self) -> DataLoader[Any]:
        """The DataLoader that iterates: the loader's settings (a trial's) over the timed
        dataset and collate."""
        return self._inner

    # the name every wrapper has, a DALI Pipeline's too (whose run() is DALI's): code that
    # watches loaders of either framework reads .record
    record = run

    def measure_gpu_alone(
        self, step: Callable[[Any], object], batch: Any, seconds: float = 1.0
    ) -> GpuAlone:
        """Time ``step(batch)`` with the batch already on the loader's device (see
        ``ioprobe.gpu_alone``) and keep it in this run's record: the GPU stage gets the
        data-free step rate and the share of the GPU a step fills, which the advice on
        sharing the GPU (MPS, MIG) needs."""
        alone = gpu_alone(step, batch, self._device, seconds)
        self._collector.gpu.alone = alone
        self._run = None
        return alone

    def __iter__(self) -> Iterator[Any]:
        made = Maker(self._inner)  # keeps the iterator the pass makes, for WatchedIter
        batches = iterate(made, self._collector, self._begin, self._device)  # type: ignore[arg-type]
        return WatchedIter(batches, made, self._loader)

    def _begin(self) -> Callable[[BaseException | None], None]:
        """Begin an epoch; the function that ends it."""
        stop = self._collector.stop_after
        if stop is not None and stop <= 0:
            # a pass after its tune trial ended, in a script that caught the stop: it ends
            # before its workers start only to be torn down (some died holding temp folders)
            raise TrialDone
        self._run = None
        if not getattr(self._inner, "num_workers", 0):  # the main process loads
            main_process_epoch()
        self._collector.begin_epoch()
        epoch = self._collector.current

        def end(error: BaseException | None) -> None:
            # an iterator closed after a newer one began must not end the newer one's epoch
            if self._collector.in_pass(epoch):
                self._collector.end_epoch(error)
            self._run = None

        # CUDA events when batches go to a CUDA device or the model is on one already
        self._collector.gpu.use(event_backend(self._device))
        return end

    def __len__(self) -> int:
        return len(self._loader)

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy (pickle, deepcopy) is a watched copy of the loader with a record of its own:
        the collector measuring this one (its threads, locks, the NVML module) is no part of
        what the loader is, and could not be copied."""
        return (wrap, (self._loader, self._device, self._finish))

    def __getattr__(self, name: str) -> Any:
        """The loader's attribute. A checkpoint (``state_dict``, ``load_state_dict``) is the
        sibling's where it keeps one: it is the one that iterates, so the position saved is
        the position reached. Looked up here, not defined, so that a loader without them
        has none: Lightning checkpoints any loader that has both, and a plain DataLoader
        would raise."""
        own = self.__dict__
        if "_loader" not in own:  # not built yet (a copy being made)
            raise AttributeError(name)
        inner = own.get("_inner")
        if name in ROUTED and inner is not None and stateful(inner):
            return getattr(inner, name)
        return getattr(own["_loader"], name)

    def __enter__(self) -> Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        self._run = None
        _ = self.run


class WatchedInPlace:
    """What ``ioprobe.watch`` returns for a loader whose own ``__iter__`` wraps a DataLoader's
    (Accelerate's prepared loader, a subclass calling ``super().__iter__()``): iterating it
    runs that ``__iter__`` unchanged, and only the DataLoader inside is watched (``watcher``,
    routed by ``loaders.torch_stateful``). Everything else is the loader's own, plus ``.run``."""

    def __init__(self, loader: Any, watcher: Watched) -> None:
        self._loader = loader
        self._watcher = watcher
        self._collector = watcher._collector  # the live panel attaches here

    @property
    def run(self) -> RunRecord:
        """The record of the DataLoader inside; complete once iteration has ended."""
        return self._watcher.run

    # the name every wrapper has, a DALI Pipeline's too (whose run() is DALI's): code that
    # watches loaders of either framework reads .record
    record = run

    def measure_gpu_alone(
        self, step: Callable[[Any], object], batch: Any, seconds: float = 1.0
    ) -> GpuAlone:
        """As ``Watched.measure_gpu_alone``."""
        return self._watcher.measure_gpu_alone(step, batch, seconds)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._loader)

    def __reduce__(self) -> tuple[Any, ...]:
        """As ``Watched.__reduce__``: a watched copy of the loader."""
        w = self._watcher
        return (wrap, (self._loader, w._device, w._finish))

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __enter__(self) -> WatchedInPlace:
        return self

    def __exit__(self, *exc: object) -> None:
        self._watcher.__exit__(*exc)


def _iterated_inside(loader: Any) -> DataLoader[Any] | None:
    """The DataLoader whose iteration ``loader``'s own ``__iter__`` reaches: the loader itself
    for a DataLoader subclass (through ``super().__iter__()``), else the one DataLoader it
    holds (Accelerate's ``base_dataloader``); None where it holds none or several. A class
    is read with ``type()``: Accelerate's adapters answer ``__class__`` with DataLoader."""
    if issubclass(type(loader), DataLoader):
        return loader  # type: ignore[no-any-return]
    try:
        held = vars(loader)
    except TypeError:  # no __dict__ (slots)
        return None
    inner = held.get("base_dataloader")
    if issubclass(type(inner), DataLoader):
        return inner  # type: ignore[no-any-return]
    found = [v for v in held.values() if issubclass(type(v), DataLoader)]
    return found[0] if len(found) == 1 else None


def accepts(obj: object) -> bool:
    return "torch" in sys.modules and isinstance(obj, DataLoader)


def wrap(loader: DataLoader[Any], device: Any, finish: Finish) -> Watched | WatchedInPlace:
    """The watched loader. A DataLoader (a stateful one included) is iterated by a sibling
    (``Watched``). A loader whose own ``__iter__`` wraps a DataLoader's (Accelerate's prepared
    loader moves batches to the device, iterates one batch ahead and marks the end of the
    loader for gradient accumulation) keeps iterating through it, and the DataLoader inside is
    watched in place (``WatchedInPlace``); one that holds no DataLoader is refused, in one
    line. A DataLoader subclass is taken to reach DataLoader's ``__iter__``: one whose
    ``__iter__`` never does records no epoch."""
    cls = type(loader)
    if cls.__iter__ is DataLoader.__iter__ or is_stateful(cls):
        return Watched(loader, device, finish)
    inner = _iterated_inside(loader)
    if inner is None:
        raise BadInputError(
            f"ioprobe.watch: {cls.__module__}.{cls.__qualname__} iterates through its own "
            "__iter__ and holds no DataLoader that it could be iterating, so nothing of it "
            "can be watched; watch the DataLoader it reads from instead"
        )
    watcher = Watched(inner, device, finish)
    for klass in type(inner).__mro__:
        if klass is DataLoader or is_stateful(klass):
            patch_class(klass)
    route(inner, watcher)
    return WatchedInPlace(loader, watcher)

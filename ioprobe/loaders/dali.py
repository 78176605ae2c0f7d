"""Watch NVIDIA DALI: its PyTorch iterators and plain pipelines, operator by operator.

``watch(it)`` wraps a ``DALIGenericIterator`` / ``DALIClassificationIterator`` (or any
iterator over DALI pipelines built on DALI's base iterator) or a ``Pipeline`` driven with
``run()``. The wrapper returns DALI's own batches untouched; ``reset()``, ``size``, ``len()``
and last-batch policies are DALI's. Per batch it takes two clock readings and the consumer
thread's CPU clock around ``next()`` / ``run()``, nothing else.

Per epoch (never per batch) the ``DaliAdapter`` reads:
- the NVTX ranges DALI opens around every operator, its readers' per-sample fetches and its
  executor, captured by ioprobe's injection library (``ioprobe.collect.nvtx``): wall time, and
  CPU time of the executor thread plus DALI's thread pool while each operator ran;
- each DALI thread's CPU time (``/proc/self/task/*/schedstat``; DALI names its threads), the
  fallback when the ranges are unavailable and a cross-check when they are;
- the process's I/O counters and its child processes' CPU time (parallel external_source).
"""

from __future__ import annotations

import os
import re
import time
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from ioprobe import capacity
from ioprobe.collect import nvtx
from ioprobe.collect.procfs import read_io
from ioprobe.errors import BadInputError
from ioprobe.monitor.collector import Finish, WatchCollector
from ioprobe.monitor.stages import Measured, dali_stages
from ioprobe.record import (
    DaliData,
    DaliOperator,
    LoaderSettings,
    RunRecord,
    StageName,
    Stages,
    WatchEpoch,
)
from ioprobe.redact import redact_url

# DALI names its threads "[DALI][TP0]<pipeline>", "[DALI][WT]CPU executor", "[DALI] Executor"
# and its readers' "PrefetchWorker"; the kernel keeps the first 15 bytes
THREAD_PREFIXES = ("[DALI]", "PrefetchWorker")
_OP_RANGE = re.compile(r"^\[DALI\]\[(CPU|Mixed|GPU) op\] (?:(?:Run|Setup) )?(.+)$")
READ_RANGE = "[DALI][Loader] ReadOne"


def accepts(obj: object) -> bool:
    """A DALI pipeline or an iterator over DALI pipelines (checked without importing DALI)."""
    return any(cls.__module__.startswith("nvidia.dali") for cls in type(obj).__mro__)


def _threads() -> dict[str, int]:
    """CPU nanoseconds of each DALI thread, keyed "name/tid" (names repeat across pipelines)."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                name = f.read().decode("utf-8", "replace").strip()
            if not name.startswith(THREAD_PREFIXES):
                continue
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                out[f"{name}/{tid}"] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while we looked
    return out


def _children_cpu(pipes: list[Any]) -> float:
    """CPU seconds of the live child processes: parallel external_source workers. None of
    the pipelines started a pool of them: 0, without listing every process on the host
    (psutil's children() reads each one's /proc entry: 4-5 ms an epoch on a quiet host)."""
    if not any(getattr(p, "_py_pool", None) is not None for p in pipes):
        return 0.0
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _pretty(name: str) -> str:
    """Schema names as users write them: decoders__Image -> decoders.image."""
    parts = name.split("__")
    return ".".join([*parts[:-1], parts[-1].lower()]) if len(parts) > 1 else name


def _schemas(pipes: list[Any]) -> dict[str, str]:
    """Instance name -> operator type, for the ranges that name instances (__Resize_1)."""
    out: dict[str, str] = {}
    for p in pipes:
        for op in getattr(p, "_ops", None) or []:
            schema = getattr(getattr(op, "_op", None), "schema_name", None)
            if schema:
                out[op.name] = schema
    return out


def operators(ranges: dict[str, nvtx.RangeTotals], schemas: dict[str, str]) -> list[DaliOperator]:
    """Fold DALI's operator ranges into operators: a legacy executor names instances
    (``[DALI][CPU op] __Resize_1``), the dynamic one names types and splits ``Setup`` from
    ``Run``; both become one row per operator type and device."""
    rows: dict[tuple[str, str], DaliOperator] = {}
    for key, t in ranges.items():
        m = _OP_RANGE.match(key)
        if m is None:
            continue
        device = m.group(1).lower()
        raw = m.group(2).strip()
        schema = schemas.get(raw) or re.sub(r"^__|_\d+$|_(CpuToCpu|CpuToGpu|GpuToGpu).*$", "", raw)
        name = _pretty(schema)
        low = schema.lower()
        stage: StageName = "cpu" if device == "cpu" else "gpu"
        if low.startswith("readers") or low.endswith("reader"):
            stage = "storage"
        row = rows.get((name, device))
        if row is None:
            row = rows[(name, device)] = DaliOperator(
                name=name, device=device, stage=stage, calls=0, wall_seconds=0.0, cpu_seconds=0.0
            )
        # Setup and Run are two ranges of one call; count the Run (or the only) one
        if not key.split("] ", 1)[1].startswith("Setup "):
            row.calls += t.count
        row.wall_seconds += t.wall_ns / 1e9
        row.cpu_seconds += (t.cpu_ns + t.pool_ns) / 1e9
    return sorted(rows.values(), key=lambda o: -o.cpu_seconds)


MAX_LISTED = 200_000  # files stat()ed to size a reader's dataset; beyond, the mean of those


def reader_files(pipes: list[Any]) -> tuple[str, int, int, int] | None:
    """What the pipelines' file readers read: (target, files, bytes of the files listed, files
    listed). DALI's file reader maps files into memory, so the process's I/O counters miss
    them; its arguments (``file_root``, ``files``, ``file_list``) name them instead."""
    targets: list[str] = []
    paths: list[str] = []
    for p in pipes:
        for op in getattr(p, "_ops", None) or []:
            inner = getattr(op, "_op", None)
            if getattr(inner, "schema_name", "") == "readers__File":
                named = _named_files(getattr(inner, "_init_args", {}) or {})
                if named is not None:
                    targets.append(named[0])
                    paths += named[1]
    if not paths:
        return None
    listed = paths[:MAX_LISTED]
    return ", ".join(dict.fromkeys(targets)), len(paths), _total_size(listed), len(listed)


def _named_files(args: dict[str, Any]) -> tuple[str, list[str]] | None:
    """What one file reader's arguments name, and how to call it: its ``files``, its
    ``file_list``, or the class folders under its ``file_root``; None for a file list that
    can't be read."""
    root = str(args.get("file_root") or "")
    if args.get("files"):
        return root or "files=[...]", [os.path.join(root, f) for f in args["files"]]
    if args.get("file_list"):
        try:
            with open(args["file_list"], encoding="utf-8") as f:
                listed = [os.path.join(root, ln.split()[0]) for ln in f if ln.strip()]
        except OSError:
            return None
        return str(args["file_list"]), listed
    return (root, _walk_classes(root)) if root else None


def _total_size(paths: list[str]) -> int:
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue  # gone since it was listed
    return total


def _walk_classes(root: str) -> list[str]:
    """The layout the file reader takes: one folder per class, files inside."""
    out: list[str] = []
    try:
        for entry in os.scandir(root):
            if entry.is_dir():
                out += [f.path for f in os.scandir(entry.path) if f.is_file()]
    except OSError:
        pass
    return out


def _added(sums: array[int], after: array[int], before: array[int]) -> array[int]:
    """``sums`` plus what ran between two ``nvtx.totals()``, slot by slot; an array shorter
    than the others (the sum before the first epoch is empty) reads as zeros."""
    n = max(len(sums), len(after), len(before))
    s, a, b = (x + array("q", bytes(8 * (n - len(x)))) for x in (sums, after, before))
    return array("q", (p + q - r for p, q, r in zip(s, a, b, strict=True)))


def _count(batch: Any) -> int:
    """Samples in one delivered batch: the first output of each pipeline's part."""
    parts = batch if isinstance(batch, list) else [batch]
    n = 0
    for part in parts:
        first = next(iter(part.values())) if isinstance(part, dict) else part
        if isinstance(first, tuple | list):
            first = first[0]
        try:
            n += len(first)
        except TypeError:
            shape = getattr(first, "shape", None)
            n += int(shape[0]) if shape else 1
    return n


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _describe(pipes: list[Any], wrapper: str, extra: dict[str, str]) -> dict[str, str]:
    """The pipeline's settings as DALI holds them, for reports."""
    p = pipes[0]

    def get(name: str) -> str:
        try:
            return str(getattr(p, name))
        except Exception:
            return "unknown"

    threads = get("num_threads")
    info = {
        "framework": "dali",
        "dataset": "DALI pipeline",
        "wrapper": wrapper,
        "pipelines": str(len(pipes)),
        "batch_size": get("max_batch_size"),
        "num_threads": threads,
        # the model's loader parallelism: DALI's thread pool plays the workers' part
        "num_workers": threads,
        "prefetch_queue_depth": get("prefetch_queue_depth"),
        "exec_dynamic": get("exec_dynamic"),
        "device_id": get("device_id"),
    }
    info.update(extra)
    return info


class DaliAdapter:
    """The collector's view of DALI pipelines: per epoch it diffs the NVTX ranges, DALI's
    threads' CPU time, the I/O counters and the external_source workers' CPU; its stages
    come from ``ioprobe.monitor.stages.dali_stages``."""

    def __init__(self, pipes: list[Any], description: dict[str, str]) -> None:
        self.pipes = pipes
        self.description = description
        # samples one pipeline iteration makes; a delivered batch has one per pipeline
        self.iter_batch = _int(description.get("batch_size")) or 1
        self.settings = LoaderSettings(
            framework="dali",
            dataset=description.get("dataset", "DALI pipeline"),
            workers=_int(description.get("num_threads")) or 1,
            batch_size=self.iter_batch * len(pipes),
        )
        self.schemas = _schemas(pipes)
        # the ranges' totals over the epochs, laid flat as nvtx.totals() gives them
        self._ranges = array("q")
        self.thread_ns: dict[str, int] = {}
        self.consumer_cpu_ns = 0
        self.worker_cpu = 0.0
        self._mark: tuple[Any, ...] | None = None
        self._files: tuple[str, int, int, int] | None = None
        self._files_read = False

    def begin_epoch(self) -> None:
        self._mark = (nvtx.totals(), _threads(), read_io(), _children_cpu(self.pipes))

    def end_epoch(self, epoch: WatchEpoch) -> None:
        if self._mark is None:
            return
        ranges0, threads0, io0, kids0 = self._mark
        self._mark = None
        ranges1 = nvtx.totals()
        if ranges0 is not None and ranges1 is not None:
            self._ranges = _added(self._ranges, ranges1, ranges0)
        for k, ns in _threads().items():
            self.thread_ns[k] = self.thread_ns.get(k, 0) + ns - threads0.get(k, 0)
        rchar, rbytes = read_io()
        epoch.read_chars += rchar - io0[0]
        epoch.read_bytes += rbytes - io0[1]
        self.worker_cpu += max(_children_cpu(self.pipes) - kids0, 0.0)

    @property
    def ranges(self) -> dict[str, nvtx.RangeTotals]:
        """The ranges that ran over the epochs so far, by name."""
        return nvtx.named(self._ranges)

    def data(self) -> DaliData:
        """What the pipelines did besides delivering batches, over the epochs so far."""
        ranges = self.ranges
        ops = operators(ranges, self.schemas)
        reads = ranges.get(READ_RANGE)
        return DaliData(
            pipeline={
                k: v for k, v in self.description.items() if k not in ("framework", "dataset")
            },
            timing="nvtx" if ops else "thread cpu",
            timing_note=None if ops else (nvtx.status() or "no DALI operator ranges were seen"),
            operators=ops,
            reads=reads.count if reads else 0,
            read_seconds=reads.wall_ns / 1e9 if reads else 0.0,
            threads={k: v / 1e9 for k, v in sorted(self.thread_ns.items())},
            worker_cpu_seconds=self.worker_cpu,
            consumer_cpu_seconds=self.consumer_cpu_ns / 1e9,
            memory=self._memory(),
        )

    def _memory(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for p in self.pipes:
            try:
                stats = p.executor_statistics()
            except Exception:  # exec_dynamic pipelines do not keep them
                continue
            for op, meta in (stats or {}).items():
                sizes = meta.get("reserved_memory_size") if isinstance(meta, dict) else None
                if sizes:
                    out[str(op)] = [int(s) for s in sizes]
        return out

    def files(self) -> tuple[str, int, int, int] | None:
        """The readers' dataset, listed once: it does not change between reads of the record."""
        if not self._files_read:
            self._files = reader_files(self.pipes)
            self._files_read = True
        return self._files

    def _reader_bytes(self) -> float | None:
        files = self.files()
        return files[2] / files[3] if files is not None and files[3] else None

    def stages(self, m: Measured) -> tuple[Stages, list[str]]:
        return dali_stages(m, self.data(), self.iter_batch, self._reader_bytes())

    def complete(self, record: RunRecord) -> None:
        record.dali = self.data()
        files = self.files()
        if files is None:
            return
        target, n, total, listed = files
        ds = record.dataset
        ds.target, ds.files = redact_url(target), n
        ds.sample_bytes_mean = total / listed if listed else 0.0
        ds.bytes = round(ds.sample_bytes_mean * n)
        ds.sizes_estimated = listed < n
        ds.density = capacity.density_class(ds.sample_bytes_mean)


class _Watched:
    """What the two DALI wrappers share: epochs, the timed call, and passing through."""

    def __init__(self, loader: Any, adapter: DaliAdapter, n: int | None, finish: Finish) -> None:
        self._loader = loader
        self._adapter = adapter
        self._collector = WatchCollector(adapter, adapter.settings.batch_size, n)
        self._finish = finish
        self._record: RunRecord | None = None
        self._active = False

    def _finished(self) -> RunRecord:
        if self._record is None:
            self._record = self._finish(self._collector.stop())
        return self._record

    def _begin(self) -> None:
        self._record = None
        self._active = True
        self._collector.begin_epoch()

    def _end(self, error: BaseException | None) -> None:
        if self._active:
            self._active = False
            self._collector.end_epoch(error)
            self._record = None

    def _timed(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """One batch from DALI: begins an epoch if none is running; StopIteration ends it."""
        if not self._active:
            self._begin()
        clock, cclock = time.perf_counter_ns, time.thread_time_ns
        c0 = cclock()
        t0 = self._collector.request_ns = clock()
        try:
            out = call(*args, **kwargs)
        except StopIteration:
            self._end(None)
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        t1 = clock()
        self._collector.on_delivery(t0, t1, _count(out))
        self._adapter.consumer_cpu_ns += cclock() - c0
        return out

    def reset(self) -> None:
        self._end(None)
        self._reset(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __exit__(self, *exc: object) -> None:
        self._end(None)
        self._record = None
        self._finished()


def _reset(obj: Any) -> None:
    obj.reset()


class WatchedIterator(_Watched):
    """What ``ioprobe.watch`` returns for a DALI framework iterator; ``.run`` is the record.

    ``calls`` are the iterator's own ``iter``, ``next`` and ``reset`` as this wrapper calls
    them: the builtins by default; DALI's original methods where the iterator's class is
    watched in place (``watch_in_place``), whose patched methods call this wrapper."""

    def __init__(
        self,
        it: Any,
        finish: Finish,
        calls: tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], Any]] = (
            iter,
            next,
            _reset,
        ),
    ) -> None:
        pipes = list(getattr(it, "_pipes", None) or [])
        if not pipes:
            raise BadInputError(f"ioprobe.watch: {type(it).__qualname__} has no DALI pipelines")
        policy = getattr(it, "_last_batch_policy", None)
        extra = {
            "iterator": type(it).__qualname__,
            "size": str(getattr(it, "_size", "unknown")),
            "reader_name": str(getattr(it, "_reader_name", None)),
            "last_batch_policy": getattr(policy, "name", str(policy)),
            "auto_reset": str(getattr(it, "_auto_reset", "unknown")),
        }
        size = getattr(it, "_size", -1)
        n = size if isinstance(size, int) and size > 0 else None
        super().__init__(it, DaliAdapter(pipes, _describe(pipes, "iterator", extra)), n, finish)
        self._iter, self._next, self._reset = calls

    @property
    def run(self) -> RunRecord:
        """The record so far; complete once iteration has ended."""
        return self._finished()

    record = run

    def __iter__(self) -> Iterator[Any]:
        # DALI's own rule: iter() resets an iterator that next() was called on, and then a
        # new epoch begins; otherwise iteration carries on in the current one
        before = getattr(self._loader, "_counter", None)
        self._iter(self._loader)
        after = getattr(self._loader, "_counter", None)
        if self._active and before is not None and after is not None and after < before:
            self._end(None)
        if not self._active:
            self._begin()
        return self

    def __next__(self) -> Any:
        return self._timed(self._next, self._loader)

    next = __next__

    def __len__(self) -> int:
        return len(self._loader)

    def __enter__(self) -> WatchedIterator:
        return self


class WatchedPipeline(_Watched):
    """What ``ioprobe.watch`` returns for a DALI ``Pipeline``: ``run()`` is DALI's own (timed);
    the record is ``.record``. One epoch runs from the first ``run()`` to ``reset()``, the end
    of the ``with`` block or the first read of ``.record``."""

    def __init__(
        self,
        pipe: Any,
        finish: Finish,
        calls: tuple[Callable[..., Any], Callable[[Any], Any]] | None = None,
    ) -> None:
        super().__init__(pipe, DaliAdapter([pipe], _describe([pipe], "pipeline", {})), None, finish)
        # the pipeline's own run and reset (DALI's originals where watched in place)
        own: tuple[Callable[..., Any], Callable[[Any], Any]] = calls or (type(pipe).run, _reset)
        self._run, self._reset = own

    @property
    def record(self) -> RunRecord:
        self._end(None)
        return self._finished()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._run, self._loader, *args, **kwargs)

    def __enter__(self) -> WatchedPipeline:
        return self


# where an object watched in place keeps its watcher (``watch_in_place``)
WATCHER = "_ioprobe_watcher"


def _watcher_of(obj: Any) -> Any:
    return obj.__dict__.get(WATCHER)


def watch_in_place(
    iterators: list[type], pipeline: type | None, made: Callable[[Any], None], finish: Finish
) -> None:
    """Watch the DALI iterators of ``iterators`` (and their subclasses) and every
    ``pipeline`` driven with ``run()``, in the objects the script itself holds: ``ioprobe
    run`` cannot hand an unchanged script a wrapper. Each class's own ``__init__`` and
    ``__next__``, and the base iterator's ``__iter__`` and ``reset``, call a
    ``WatchedIterator`` made at the end of the iterator's ``__init__`` (the first batch DALI
    prepares inside it is not timed, as it is not under ``ioprobe.watch``); a pipeline's
    ``run`` and ``reset`` call a ``WatchedPipeline`` made at its first ``run()``.
    ``made(watcher)`` is told of each new one. Objects made before the patch, and DALI's own
    calls during ``__init__``, go through DALI's methods untouched."""
    for cls in iterators:
        _watch_iterator_class(cls, made, finish)
    if pipeline is not None and "run" in pipeline.__dict__:
        _watch_pipeline_class(pipeline, made, finish)


def _watch_iterator_class(cls: type, made: Callable[[Any], None], finish: Finish) -> None:
    init, nxt = cls.__dict__["__init__"], cls.__dict__["__next__"]
    base = next(
        (b for b in cls.__mro__ if "__iter__" in b.__dict__ and "reset" in b.__dict__), None
    )
    if base is None or getattr(init, "__ioprobe_original__", None) is not None:
        return
    it_fn, reset_fn = base.__dict__["__iter__"], base.__dict__["reset"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if _watcher_of(self) is None and getattr(self, "_pipes", None):
            w = WatchedIterator(self, finish, calls=(it_fn, nxt, reset_fn))
            self.__dict__[WATCHER] = w
            made(w)

    def __next__(self: Any) -> Any:
        w = _watcher_of(self)
        return nxt(self) if w is None else w._timed(nxt, self)

    __init__.__ioprobe_original__ = init  # type: ignore[attr-defined]
    __next__.__ioprobe_original__ = nxt  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    cls.__next__ = __next__  # type: ignore[attr-defined]
    if getattr(it_fn, "__ioprobe_original__", None) is not None:
        return  # the base is shared: patched with the first class

    def __iter__(self: Any) -> Any:
        w = _watcher_of(self)
        if w is None:
            return it_fn(self)
        w.__iter__()
        return self

    def reset(self: Any) -> None:
        w = _watcher_of(self)
        if w is None:
            reset_fn(self)
        else:
            w.reset()

    __iter__.__ioprobe_original__ = it_fn  # type: ignore[attr-defined]
    reset.__ioprobe_original__ = reset_fn  # type: ignore[attr-defined]
    base.__iter__ = __iter__  # type: ignore[attr-defined]
    base.reset = reset  # type: ignore[attr-defined]


def _watch_pipeline_class(cls: type, made: Callable[[Any], None], finish: Finish) -> None:
    run_fn, reset_fn = cls.__dict__["run"], cls.__dict__["reset"]
    if getattr(run_fn, "__ioprobe_original__", None) is not None:
        return

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        w = _watcher_of(self)
        if w is None:
            w = self.__dict__[WATCHER] = WatchedPipeline(self, finish, calls=(run_fn, reset_fn))
            made(w)
        return w.run(*args, **kwargs)

    def reset(self: Any) -> Any:
        w = _watcher_of(self)
        return reset_fn(self) if w is None else w.reset()

    run.__ioprobe_original__ = run_fn  # type: ignore[attr-defined]
    reset.__ioprobe_original__ = reset_fn  # type: ignore[attr-defined]
    cls.run = run  # type: ignore[attr-defined]
    cls.reset = reset  # type: ignore[attr-defined]


def wrap(obj: Any, device: Any, finish: Finish) -> WatchedIterator | WatchedPipeline:
    """The wrapper for a DALI ``Pipeline`` or framework iterator."""
    from nvidia.dali.pipeline import Pipeline

    if device is not None:
        raise BadInputError(
            "ioprobe.watch: device= is for DataLoaders; a DALI pipeline places its "
            "outputs itself (device='gpu' or 'mixed' operators)"
        )

    if isinstance(obj, Pipeline):
        return WatchedPipeline(obj, finish)
    if hasattr(obj, "_pipes"):
        return WatchedIterator(obj, finish)
    raise BadInputError(
        f"ioprobe.watch: cannot watch a {type(obj).__qualname__} (expected a DALI Pipeline or "
        "a DALI framework iterator such as DALIGenericIterator)"
    )

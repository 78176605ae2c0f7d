"""The worker side of watching a DataLoader: what runs in each worker process.

``loaders.torch.rebuild`` wraps the user's dataset and collate in the classes here; a worker
process gets them pickled (under spawn and forkserver, at every epoch's start without
persistent workers), so this module imports only what a worker needs: torch's data
classes, ``/proc`` parsing, the metered opener and the message it sends (``monitor.message``),
not the collector, the record or the stage rules.

- the dataset wrapper times each sample: wall time and the thread's CPU time, appended to
  arrays (no lock, no syscall beyond the two clocks);
- the collate wrapper runs once per batch in the same worker: it times collate (wall and
  thread CPU time), reads the worker's I/O and scheduler counters (one ``pread`` each on
  descriptors kept open), and sends the batch's measurements back *with the batch* (a
  ``BatchStats``), so measuring costs no extra IPC.
"""

from __future__ import annotations

import operator
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torch.utils.data._utils.pin_memory import pin_memory as _pin

from ioprobe import _began  # first of ours: what importing the rest cost is timed from it
from ioprobe.collect.procfs import IO, parse_io, parse_runqueue_ns
from ioprobe.loaders import files as _files
from ioprobe.loaders import sockets as _sockets
from ioprobe.monitor.message import MAPPED_FIELDS, BatchStats, folder_tag

# Each worker process's own buffers. A forked worker inherits the parent's: the fork hook
# empties them (and reopens /proc descriptors, which still name the parent) in the child.
_wall = array("q")
_cpu = array("q")
_index = array("q")  # each sample's dataset index (-1: not an integer)
# bytes it read through ioprobe.loaders.files, or else received over sockets (the metered
# opener's reads over HTTP arrive over sockets too: never both)
_nbytes = array("q")
_metered = _files.BYTES  # the opener's running byte count: one list read per sample
_received = _sockets.RECEIVED  # bytes received over sockets, read the same way
_NOTHING = (b"", b"")  # no listing at this batch


class _WorkerState:
    """What one worker process keeps between its samples and batches, in one place with one
    reset: a forked worker inherits the parent's, which the fork hook resets (the /proc
    descriptors too, which still name the parent). The per-sample buffers above stay module
    names: each sample appends to them, and a global is the cheapest thing to reach."""

    __slots__ = (
        "batches",
        "import_ns",
        "last",
        "listed",
        "overhead",
        "own",
        "present",
        "proc_fds",
        "process_cpu",
        "sent",
        "started",
        "turned",
    )

    def __init__(self) -> None:
        self.proc_fds: dict[str, int] = {}
        self.reset()

    def reset(self) -> None:
        self.proc_fds.clear()
        self.last: list[int] | None = None  # rchar, read_bytes, run-queue ns at the last batch
        # when this worker began its first sample (0 once reported): its start-up's end
        self.started = 0
        # bytes this module read from /proc: they count in rchar but are not the dataset's
        self.own = 0
        self.batches = 0  # batches made: the mapped files are read at the 1st, 2nd, 4th ...
        # the maps listing whose data files were all resident when last listed: unchanged,
        # nothing is left to learn from it; and the listing last sent, not sent again
        self.listed = b""
        self.sent = b""
        # the data files mapped at the last listing, by (device, inode), with their paths;
        # and the "directory/*ending" of each file the worker unmapped, sent once (_mapped)
        self.present: dict[tuple[int, int], str] = {}
        self.turned: set[str] = set()
        # the watch's own time after the last collate, sent with the next batch (BatchStats)
        self.overhead = 0
        self.process_cpu = 0  # the process's CPU time at the last collate's end (0: none yet)
        # what importing this module cost this process (set below, at its end), sent with a
        # worker's first batch; 0 in a forked worker, which imported nothing
        self.import_ns = 0
        del _wall[:]
        del _cpu[:]
        del _index[:]
        del _nbytes[:]


_S = _WorkerState()
os.register_at_fork(after_in_child=_S.reset)


def _read_proc(name: str) -> bytes:
    fd = _S.proc_fds.get(name)
    if fd is None:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            fd = -1
        _S.proc_fds[name] = fd
    if fd < 0:
        return b""
    try:
        data = os.pread(fd, 4096, 0)
    except OSError:
        return b""
    _S.own += len(data)
    return data


def _counters() -> list[int]:
    own = _S.own  # the value read excludes the read that returns it, includes earlier ones
    rchar, rbytes = parse_io(_read_proc(IO))
    runq = parse_runqueue_ns(_read_proc("/proc/thread-self/schedstat"))
    return [rchar - own if rchar else 0, rbytes, runq, _received[0]]


# Mapped files that are not a dataset's: devices, kernel files, shared memory (torch's batches
# cross in it), the system's library trees (the locale archive, gconv's cache) and /etc, and
# Python's own tree (its modules' data);
# libraries are known by an executable mapping, model weights by their formats' suffixes
_NOT_DATA_DIRS = (
    "/dev/", "/proc/", "/sys/", "/memfd:", "/SYSV", "/etc/", "/usr/lib/", "/usr/lib64/", "/lib/",
    "/lib64/",
)  # fmt: skip
_HEX = frozenset(b"0123456789abcdef")
_WEIGHTS = (".safetensors", ".pt", ".pth", ".ckpt", ".gguf", ".onnx")
_PREFIXES = (sys.prefix, sys.base_prefix, sys.exec_prefix)
_PYTHON_DIRS = tuple(sorted({d.rstrip("/") + "/" for d in _PREFIXES if d.strip("/")}))


def _file_key(dev: bytes, inode: bytes) -> tuple[int, int]:
    """A maps line's ``major:minor`` (hex) and inode as one file's ``(device, inode)``."""
    major, _, minor = dev.partition(b":")
    return int(major, 16) << 32 | int(minor, 16), int(inode)


def mapped_data_files(
    maps: bytes,
    skip: tuple[str, ...] = _PYTHON_DIRS,
    paths: dict[tuple[int, int], str] | None = None,
) -> array[int]:
    """The data files in a ``/proc/PID/maps`` listing, as flat ``(device, inode, bytes,
    folder)`` quads (``MAPPED_FIELDS``): each file's mapped extent (overlapping mappings of it
    counted once) and its directory's ``folder_tag``. Left out:
    anonymous and special mappings, files with an executable mapping (libraries, the
    interpreter), shared libraries' other segments, deleted files, paths under
    ``_NOT_DATA_DIRS`` and ``skip`` (Python's own tree), and model weights (``_WEIGHTS``).
    ``paths``, where given, gets each data file's path."""
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    folders: dict[tuple[int, int], bytes] = {}
    code: set[tuple[int, int]] = set()
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or parts[4] == b"0":
            continue  # anonymous memory, the heap, the stack: no file
        addresses, perms, offset, dev, inode, raw = parts
        key = _file_key(dev, inode)
        if b"x" in perms:
            code.add(key)
            continue
        path = raw.decode("utf-8", "replace")
        name = path.rsplit("/", 1)[-1]
        if (
            not path.startswith("/")
            or path.endswith(" (deleted)")
            or path.startswith(_NOT_DATA_DIRS)
            or path.startswith(skip)
            or name.endswith(_WEIGHTS)
            or name.endswith(".so")
            or ".so." in name
        ):
            continue
        if paths is not None:
            paths[key] = path
        folders[key] = raw.rpartition(b"/")[0]
        lo, _, hi = addresses.partition(b"-")
        start = int(offset, 16)
        spans.setdefault(key, []).append((start, start + int(hi, 16) - int(lo, 16)))
    out = array("q")
    for key, ranges in spans.items():
        if key in code:
            if paths is not None:
                paths.pop(key, None)
            continue
        total, end = 0, -1
        for a, b in sorted(ranges):
            if b > end:
                total += b - max(a, end)
                end = b
        out.extend((key[0], key[1], total, folder_tag(folders[key])))
    return out


def resident_files(smaps: bytes) -> set[tuple[int, int]]:
    """The ``(device, inode)`` of the files with resident pages in some mapping of a
    ``/proc/PID/smaps`` listing. A forked worker inherits its parent's file mappings without
    their page-table entries (the kernel lets them fault in again), so a file resident in a
    worker is one that worker read through its map, not one its parent mapped and read."""
    out: set[tuple[int, int]] = set()
    key: tuple[int, int] | None = None
    for line in smaps.splitlines():
        if line and line[0] in _HEX:  # a mapping's header line, as in the maps listing
            parts = line.split(None, 5)
            key = None
            if len(parts) >= 5 and parts[4] != b"0":
                key = _file_key(parts[3], parts[4])
        elif key is not None and line.startswith(b"Rss:"):
            fields = line.split()
            if len(fields) > 1 and fields[1] != b"0":
                out.add(key)
    return out


def _read_all(name: str) -> bytes:
    """A /proc listing whole (it can exceed a page); b"" if it can't be read. What this
    reads counts in rchar: it joins this module's own."""
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError:
        return b""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return b""
    finally:
        os.close(fd)
    data = b"".join(chunks)
    _S.own += len(data)
    return data


def _mapped() -> tuple[bytes, bytes]:
    """This process's mapped data files (``mapped_data_files``) that it read through their
    maps (``resident_files``), as bytes for a BatchStats, b"" when that is unchanged since it
    last sent it; and the ``directory/*ending`` of each data file unmapped since the last
    listing, NUL-separated, each sent once. Files mapped and never read here (one the script
    mapped, and maybe read, before the workers forked) stay out. The costly per-mapping
    listing (smaps, about 10 ms in a worker with torch loaded) is read only while some data
    file is mapped and not yet resident.

    A reader that maps its files in turn (litdata's chunks, a memmap per sample) has most of
    them mapped between two listings, which are sparse to cost nothing: a file it unmapped
    marks its directory, whose files with that ending the collector counts instead
    (``mapped.turned_files``)."""
    maps = _read_all("/proc/self/maps")
    if not maps or maps == _S.listed:
        return b"", b""
    paths: dict[tuple[int, int], str] = {}
    files = mapped_data_files(maps, paths=paths)
    turned = b""
    # by path too: a file deleted and another written in its place may get its inode
    gone = [p for k, p in _S.present.items() if paths.get(k) != p]
    _S.present = paths
    if gone:
        dirs = {f"{os.path.dirname(p)}/*{os.path.splitext(p)[1]}" for p in gone} - _S.turned
        _S.turned.update(dirs)
        turned = "\0".join(sorted(dirs)).encode("utf-8", "surrogateescape")
    if not files:
        _S.listed = maps
        return b"", turned
    resident = resident_files(_read_all("/proc/self/smaps"))
    kept = array("q")
    for i in range(0, len(files), MAPPED_FIELDS):
        if (files[i], files[i + 1]) in resident:
            kept.extend(files[i : i + MAPPED_FIELDS])
    if len(kept) == len(files):
        _S.listed = maps
    out = kept.tobytes()
    if out == _S.sent:
        return b"", turned
    _S.sent = out
    return out, turned


def _count_module_reads() -> None:
    """Count what the import system reads from this process's module files (sources and
    bytecode, through the file loaders every path import uses) as read by the interpreter,
    not the dataset: a dataset that imports an HTTP client in its first sample reads
    megabytes of them, once. A patch of the loaders' ``get_data`` in this process alone,
    which nothing but an import calls (an audit hook would see every ``id()`` call too:
    165 ns each, a deep copy 60% slower)."""
    from importlib import _bootstrap_external as loaders

    original = loaders.FileLoader.get_data
    if hasattr(original, "__ioprobe_original__"):
        return

    def get_data(self: Any, path: str) -> bytes:
        data: bytes = original(self, path)
        _S.own += len(data)
        return data

    get_data.__ioprobe_original__ = original  # type: ignore[attr-defined]
    loaders.FileLoader.get_data = get_data  # type: ignore[method-assign]


def _without_own_frames(
    tb: TracebackType | None, own: frozenset[Any] | None = None
) -> TracebackType | None:
    """The traceback ``tb`` with the wrappers' frames (``_OWN_CODE``, or ``own``) taken out
    of its chain, in place."""
    own = _OWN_CODE if own is None else own
    while tb is not None and tb.tb_frame.f_code in own:
        tb = tb.tb_next
    head = tb
    while tb is not None:
        after = tb.tb_next
        while after is not None and after.tb_frame.f_code in own:
            after = after.tb_next
        tb.tb_next = after
        tb = after
    return head


def _trim_worker_errors() -> None:
    """In a worker process: torch formats the traceback of an error the dataset or collate
    raised into the text of the exception the main process raises (a script that prints
    it, a log that is diffed), and the wrappers here are frames of it. Torch's worker loop
    makes that text through its module's ``ExceptionWrapper``: there it is made from the
    traceback without them, as it reads unwatched. Once per worker, off the sample path."""
    if get_worker_info() is None:  # the main process raises the exception itself
        return
    from torch.utils.data._utils import worker

    made = getattr(worker, "ExceptionWrapper", None)
    if made is None or hasattr(made, "__ioprobe_original__"):
        return

    def wrapper(exc_info: Any = None, where: str = "in background") -> Any:
        kind, value, tb = exc_info if exc_info is not None else sys.exc_info()
        return made((kind, value, _without_own_frames(tb)), where)

    wrapper.__ioprobe_original__ = made  # type: ignore[attr-defined]
    worker.ExceptionWrapper = wrapper  # type: ignore[attr-defined,assignment]


def _baseline() -> None:
    _trim_worker_errors()
    if get_worker_info() is not None:  # the main process's imports are left as they are
        _count_module_reads()
    _sockets.install()
    _S.started = time.perf_counter_ns()
    _S.last = _counters()


def main_process_epoch() -> None:
    """A loader that loads in the main process (``num_workers=0``) begins an epoch: its
    counters start again from its first sample. The main process keeps this module's state
    across epochs and loaders, and what it did between them (a validation loop's reads, its
    run-queue wait) would otherwise count in the first batch: a second loader's first batch
    once carried every run-queue nanosecond since the first loader's last, and its storage
    read as never blocked."""
    _S.last = None


def _as_index(index: Any) -> int:
    """A sampler's index that is not a plain int (a NumPy or tensor integer) as one; -1 for
    anything else (a key, a slice): the heaviest samples then go without their index."""
    try:
        return operator.index(index)
    except TypeError:
        return -1


class TimedDataset(Dataset[Any]):
    """A map-style dataset that times every ``__getitem__`` of the dataset it wraps."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: Any) -> Any:
        if _S.last is None:
            _baseline()
        b0 = _metered[0]
        r0 = _received[0]
        w0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        item = self.inner[index]
        _cpu.append(time.thread_time_ns() - c0)
        _wall.append(time.perf_counter_ns() - w0)
        _nbytes.append(_metered[0] - b0 or _received[0] - r0)
        _index.append(index if type(index) is int else _as_index(index))
        return item

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set while unpickling
            raise AttributeError(name)
        return getattr(self.inner, name)


class TimedBatchedDataset(TimedDataset):
    """For datasets with ``__getitems__`` (fetch a whole batch at once): the batch's time is
    shared evenly among its samples, because the dataset gives no finer split."""

    def __getitems__(self, indices: list[Any]) -> Any:
        if _S.last is None:
            _baseline()
        b0 = _metered[0]
        r0 = _received[0]
        w0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        items = self.inner.__getitems__(indices)
        n = max(len(indices), 1)
        cpu = (time.thread_time_ns() - c0) // n
        wall = (time.perf_counter_ns() - w0) // n
        nbytes = (_metered[0] - b0 or _received[0] - r0) // n
        for index in indices:
            _cpu.append(cpu)
            _wall.append(wall)
            _nbytes.append(nbytes)
            _index.append(index if type(index) is int else _as_index(index))
        return items


class TimedIterable(IterableDataset[Any]):
    """An iterable dataset whose every ``next()`` is timed like a ``__getitem__``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[Any]:
        if _S.last is None:
            _trim_worker_errors()  # before the stream's own iter(), which may raise
        it = iter(self.inner)
        clock, cclock = time.perf_counter_ns, time.thread_time_ns
        metered, received = _metered, _received
        if _S.last is None:
            _baseline()
        position = 0  # a stream has no index: its position in this worker's stream stands in
        while True:
            b0 = metered[0]
            r0 = received[0]
            w0 = clock()
            c0 = cclock()
            try:
                item = next(it)
            except StopIteration:
                return
            _cpu.append(cclock() - c0)
            _wall.append(clock() - w0)
            _nbytes.append(metered[0] - b0 or received[0] - r0)
            _index.append(position)
            position += 1
            yield item

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class Stamped:
    """A batch with the measurements of the worker that made it; unwrapped in the main process."""

    __slots__ = ("batch", "stats")

    def __init__(self, batch: Any, stats: BatchStats) -> None:
        self.batch = batch
        self.stats = stats

    def __reduce__(self) -> tuple[Any, ...]:
        # the stats cross as a plain tuple, the type restored on arrival: pickling the named
        # tuple itself would look its class up by name for every batch (about 1 µs)
        return (_restamp, (self.batch, tuple(self.stats)))

    def pin_memory(self, device: str | None = None) -> Stamped:
        # DataLoader's pin thread calls this for objects it doesn't know: pin the real batch
        return Stamped(_pin(self.batch, device), self.stats)  # type: ignore[no-untyped-call]


def _restamp(batch: Any, stats: tuple[Any, ...]) -> Stamped:
    return Stamped(batch, BatchStats._make(stats))


class TimedCollate:
    """Wraps the user's collate_fn; attaches the batch's measurements to its result."""

    def __init__(self, inner: Callable[[Any], Any]) -> None:
        self.inner = inner

    def __call__(self, samples: Any) -> Stamped:
        # wall and thread CPU time both: a collate that copies a large batch waits for
        # memory and, with more workers than cores, for a core; only its CPU time is CPU
        w0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        out = self.inner(samples)
        collate_cpu = time.thread_time_ns() - c0
        done = time.perf_counter_ns()
        proc = time.process_time_ns()
        proc_cpu = proc - _S.process_cpu if _S.process_cpu else 0
        _S.process_cpu = proc
        info = get_worker_info()
        wall = _wall.tobytes()
        cpu = _cpu.tobytes()
        index = _index.tobytes()
        nbytes = _nbytes.tobytes()
        del _wall[:]
        del _cpu[:]
        del _index[:]
        del _nbytes[:]
        now = _counters()
        prev = _S.last or now
        _S.last = now
        metered_bytes, metered_ns, metered_open_ns = _files.take()
        # the mapped files change rarely (a dataset maps its files once, or as it opens
        # them): listed at this worker's 1st, 2nd, 4th, 16th, 64th ... batch, a cost that
        # vanishes over an epoch
        n = _S.batches = _S.batches + 1
        mapped, turned = (
            _mapped() if not n & (n - 1) and (n == 2 or n.bit_length() & 1) else _NOTHING
        )
        if not _sockets.installed():  # ssl imported since the last batch (or uninstalled)
            _sockets.install()
        stats = BatchStats(
            worker=-1 if info is None else info.id,
            wall=wall,
            cpu=cpu,
            collate_ns=done - w0,
            read_chars=now[0] - prev[0],
            read_bytes=now[1] - prev[1],
            runqueue_ns=now[2] - prev[2],
            socket_bytes=now[3] - prev[3],
            metered_bytes=metered_bytes,
            metered_ns=metered_ns,
            metered_open_ns=metered_open_ns,
            done_ns=done,
            indices=index,
            sample_bytes=nbytes,
            started_ns=_S.started,
            mapped=mapped,
            turned=turned,
            collate_cpu_ns=collate_cpu,
            overhead_ns=_S.overhead,
            process_cpu_ns=proc_cpu,
            import_ns=_S.import_ns if info is not None else 0,
        )
        _S.started = _S.import_ns = 0
        # everything since the collate ended is the watch's own work in this worker
        _S.overhead = time.perf_counter_ns() - done
        return Stamped(out, stats)


# this module's import, its own modules' included, timed: in a spawned worker that is the
# watch's own start-up (torch and the user's modules, already there or not ours, cost nothing
# more here)
_S.import_ns = time.perf_counter_ns() - _began.NS


def user_frames(tb: TracebackType | None, own: frozenset[Any]) -> TracebackType | None:
    """The traceback of an error that passed through the watch's frames in the main process
    (the pass ``iterate``, the dataset and collate wrappers, each code object in ``own`` or
    ``_OWN_CODE``) as it reads unwatched: those frames out of it. An error raised in one of
    them (the watch's own) keeps them all: where it was raised stays in sight."""
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None or last.tb_frame.f_code in own | _OWN_CODE:
        return tb
    return _without_own_frames(tb, own | _OWN_CODE)


__all__ = [
    "Stamped",
    "TimedBatchedDataset",
    "TimedCollate",
    "TimedDataset",
    "TimedIterable",
    "main_process_epoch",
    "mapped_data_files",
    "resident_files",
    "user_frames",
]


# the frames of the wrappers around the user's dataset and collate
_OWN_CODE = frozenset(
    {
        TimedDataset.__getitem__.__code__,
        TimedDataset.__getattr__.__code__,
        TimedBatchedDataset.__getitems__.__code__,
        TimedIterable.__iter__.__code__,
        TimedIterable.__getattr__.__code__,
        TimedCollate.__call__.__code__,
    }
)

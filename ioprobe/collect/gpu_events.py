"""The device's own timeline of a watched loop, from events recorded at step boundaries.

The host cannot see when the GPU is idle: kernel launches return at once, so a training step
that looks short on the host clock may keep the GPU busy long after. CUDA events can: each
one is stamped by the device when its stream reaches it. Around every ``next()`` of a watched
loader two are recorded on the current stream:

- a *request* event just before ``next()``: it completes when the previous step's work is
  done;
- an *arrival* event just after: it completes when the device reaches the point where the
  new batch could be used.

Between a request and the following arrival the stream had nothing queued, so the device
time between them is the GPU waiting for data; from an arrival to the next request it is
the step's work. ``ioprobe.to_device`` adds a pair around its copies. Consecutive events on
one stream complete in order, so each gap is the elapsed time between neighbours, summed by
kind: the gaps add up exactly to the device time the epoch spanned.

Nothing here synchronises per batch. Events are polled (``cudaEventQuery``) oldest first and
resolved once complete; a bounded backlog forces a wait only when the device is hundreds of
events behind, and the epoch's end waits for the last one. Events are reused from a pool.
The backend is the one seam to the framework: ``ioprobe.loaders.torch`` supplies CUDA events,
or the host clock for devices without them.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from ioprobe.collect.timeline import Series

REQUEST, ARRIVAL, COPY_START, COPY_END = range(4)
MAX_PENDING = 256  # events in flight before the host waits for the oldest
GPU_ROWS = 32_768
GPU_COLUMNS = (
    ("start", "first", 1e-9),
    ("end", "last", 1e-9),
    ("wait", "sum", 1e-9),
    ("copy", "sum", 1e-9),
    ("batches", "sum", 1.0),
)


class EventBackend(Protocol):
    """Events on one device's current stream, timed by the device."""

    name: str  # "cuda events on cuda:0", "host clock"
    on_device_clock: bool  # False: stamps are the host's (no asynchronous device work seen)

    def new_event(self) -> Any: ...
    def record(self, ev: Any) -> None: ...
    def done(self, ev: Any) -> bool: ...
    def elapsed_ns(self, a: Any, b: Any) -> int: ...
    def wait(self, ev: Any) -> None: ...
    # the copy itself, and whether a host buffer is page-locked (how the copy can run)
    def copy(self, t: Any, dev: Any, non_blocking: bool) -> Any: ...
    def is_pinned(self, t: Any) -> bool: ...


class Sink(Protocol):
    def add(self, v: int) -> None: ...


class GpuTimeline:
    """Records step-boundary and copy events; sums what they measure, epoch by epoch."""

    __slots__ = (
        "_anchor",
        "_cursor",
        "_free",
        "_pending",
        "_prev",
        "_row_copy",
        "_row_start",
        "_row_wait",
        "_started",
        "_zeroed",
        "backend",
        "busy_ns",
        "copies",
        "copy_bytes",
        "copy_ns",
        "max_pending",
        "pinned_bytes",
        "pinned_ns",
        "series",
        "steps",
        "wait_ns",
    )

    # set by _reset, per epoch
    _started: bool  # a first arrival was recorded: request events may follow
    _zeroed: bool  # that arrival was resolved: the device timeline's zero
    _row_start: int
    _row_wait: int
    _row_copy: int
    wait_ns: int
    busy_ns: int
    copy_ns: int
    pinned_ns: int
    copies: int
    copy_bytes: int
    pinned_bytes: int

    def __init__(self, backend: EventBackend, steps: Sink, max_pending: int = MAX_PENDING) -> None:
        self.backend = backend
        self.steps = steps  # per-step device time, copies excluded (ns)
        self.max_pending = max_pending
        self.series = Series(GPU_COLUMNS, GPU_ROWS)
        self._free: list[Any] = []
        self._pending: deque[tuple[int, Any, int, int]] = deque()  # kind, event, bytes, pinned
        self._prev: tuple[int, Any, int, int] | None = None
        self._anchor = 0  # host ns of the epoch's first arrival
        self._cursor = 0  # device ns since then
        self._reset()

    # -- hot path ---------------------------------------------------------------------------
    def _push(self, kind: int, nbytes: int = 0, pinned: int = 0) -> None:
        ev = self._free.pop() if self._free else self.backend.new_event()
        self.backend.record(ev)
        self._pending.append((kind, ev, nbytes, pinned))

    def before_wait(self) -> None:
        """The consumer is about to ask for a batch: its step's work is all queued."""
        if self._started:
            self._push(REQUEST)

    def after_wait(self, t_arrival: int) -> None:
        """A batch arrived at host time ``t_arrival`` (perf_counter ns)."""
        if not self._started:
            # the epoch's device timeline starts here, placed at this host time: the device
            # is idle before its first batch, so its clock and the host's agree at this point
            self._started = True
            self._anchor = t_arrival
        self._push(ARRIVAL)
        self.poll()

    def copy_start(self) -> None:
        self._push(COPY_START)

    def copy_end(self, nbytes: int, pinned_bytes: int) -> None:
        self._push(COPY_END, nbytes, pinned_bytes)

    def poll(self) -> None:
        """Resolve every event the device has completed; wait only on a long backlog."""
        pending, backend = self._pending, self.backend
        if len(pending) > self.max_pending:
            backend.wait(pending[-self.max_pending][1])
        while pending and backend.done(pending[0][1]):
            self._resolve(pending.popleft())

    # -- resolution -------------------------------------------------------------------------
    def _resolve(self, cur: tuple[int, Any, int, int]) -> None:
        prev = self._prev
        self._prev = cur
        kind = cur[0]
        d, prev_kind = 0, -1
        if prev is not None:
            d = max(self.backend.elapsed_ns(prev[1], cur[1]), 0)
            prev_kind = prev[0]
            self._free.append(prev[1])
        if kind == ARRIVAL and not self._zeroed:
            # the epoch's first batch: the timeline's zero. Copies made before it (a
            # timeline begun by to_device mid-epoch) count; the gap up to it does not.
            self._zeroed = True
            self._cursor = 0
            self._row_start = 0
            return
        self._cursor += d
        self._credit(prev_kind, cur, d)
        if kind == REQUEST and self._row_start >= 0:
            self._end_row()
        elif kind == ARRIVAL:
            self._row_start = self._cursor

    def _credit(self, prev_kind: int, cur: tuple[int, Any, int, int], d: int) -> None:
        """Add the gap of ``d`` ns that ends at ``cur`` to waiting, copying or busy time, by
        the kinds of the two events around it."""
        kind = cur[0]
        if prev_kind == REQUEST and kind == ARRIVAL:
            self.wait_ns += d
            self._row_wait += d
        elif prev_kind == COPY_START and kind == COPY_END:
            self.copy_ns += d
            self._row_copy += d
            self.copies += 1
            self.copy_bytes += cur[2]
            self.pinned_bytes += cur[3]
            if cur[2] and cur[3] == cur[2]:
                self.pinned_ns += d
        elif self._zeroed:
            self.busy_ns += d

    def _end_row(self) -> None:
        """A step ended at a request event: its device time, copies excluded, to ``steps``
        and its row to the series."""
        start = self._row_start
        self.steps.add(self._cursor - start - self._row_copy)
        self.series.add(
            (
                self._anchor + start,
                self._anchor + self._cursor,
                self._row_wait,
                self._row_copy,
                1,
            )
        )
        self._row_start = -1
        self._row_wait = self._row_copy = 0

    def end_epoch(self) -> tuple[int, int, int, int, int, int, int]:
        """Wait for the last event, resolve all, and hand over the epoch's sums: wait, busy,
        copy ns, copies, bytes, pinned bytes, pinned-only copy ns. The next epoch starts a
        new timeline at its first arrival."""
        pending = self._pending
        if pending:
            self.backend.wait(pending[-1][1])
            while pending:
                self._resolve(pending.popleft())
        if self._prev is not None:
            self._free.append(self._prev[1])
        out = (
            self.wait_ns,
            self.busy_ns,
            self.copy_ns,
            self.copies,
            self.copy_bytes,
            self.pinned_bytes,
            self.pinned_ns,
        )
        self._reset()
        return out

    def _reset(self) -> None:
        """Back to before an epoch's first event; the event pool and series stay."""
        self._prev = None
        self._started = self._zeroed = False
        self._cursor = 0
        self._row_start = -1
        self._row_wait = self._row_copy = 0
        self.wait_ns = self.busy_ns = self.copy_ns = self.pinned_ns = 0
        self.copies = self.copy_bytes = self.pinned_bytes = 0

"""A live panel on stderr while a watched loader runs: ``ioprobe.watch(loader, live=True)``
and ``ioprobe run --live``.

A thread of its own reads the collector's running sums about once a second and draws, with
rich, samples/s delivered and the stall over the last few seconds, each stage's capacity now
and the lowest of them, and the stall of each second over the last minute. Where batches go
to a device with its own clock (CUDA events), the stall shown is the GPU's wait by that clock,
with the host's time blocked in next() beside it: a loop whose GPU queue runs ahead of the
host blocks in next() nearly always while the GPU is busy. The training loop
does nothing for it: the sums it reads are the ones the collector keeps for the record, read
without a lock (a value read mid-update only shifts a little time from one second to the
next). The capacities come from the collector's own stage rules (``ioprobe.monitor.stages``)
applied to the last few seconds' sums; "limiting now" is the lowest of them, a measurement,
not the record's verdict (that is the analysis's, at the end, with the storage catalog).

The panel runs while an epoch of a live loader runs, and is cleared when the last such epoch
ends (the loop's end, a ``break``, an exception, Ctrl-C) or at the process's exit: it shows
what is happening now, and the record keeps the rest. Nothing is drawn, and no thread
started, where stderr is not a terminal (a log, a pipe, a dumb terminal), nor in a
distributed job's processes other than rank 0.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ioprobe import capacity, units
from ioprobe.collect.distributed import rank_now
from ioprobe.collect.hostinfo import usable_cores
from ioprobe.collect.quiet import start_quiet
from ioprobe.monitor.collector import WatchCollector
from ioprobe.monitor.gpu_side import device_time
from ioprobe.monitor.stages import METERED_BASIS, Measured, worker_cpu, worker_storage
from ioprobe.record import LoaderSettings, WatchEpoch
from ioprobe.redact import console, printable

INTERVAL_S = 1.0  # between frames
WINDOW_S = 5.0  # the rates are over the last this many seconds
HISTORY = 60  # sparkline cells, one per frame: about a minute
JOIN_S = 2.0  # the longest an epoch's end waits for the panel to clear
BLOCKS = "▁▂▃▄▅▆▇█"


# -- what the collector counts, read from another thread ----------------------------------


@dataclass(frozen=True)
class Counters:
    """The collector's running sums at one moment, summed over its epochs so far. Every
    field only grows while the loader runs; the live view takes differences."""

    t_ns: int  # perf_counter_ns, the clock the collector's timestamps use
    process_cpu_s: float = 0.0  # the process's CPU time (all threads): the training loop's
    epoch: int = -1  # the running epoch's index; -1 between epochs
    epoch_batches: int = 0  # batches the running epoch has delivered
    batches: int = 0
    samples: int = 0
    # consumer time blocked in next(), each epoch's first batch and the wait in progress
    # included
    blocked_s: float = 0.0
    steps: int = 0  # host-clock steps (time from a batch's arrival to the next request)
    step_ns: int = 0
    device_steps: int = 0  # steps on the device's own clock (CUDA events)
    device_step_ns: int = 0
    # what the workers timed, per sample: the sums behind the CPU and storage stages
    timed_samples: int = 0
    sample_wall_s: float = 0.0
    sample_cpu_s: float = 0.0
    collate_s: float = 0.0
    collate_cpu_s: float = 0.0
    runqueue_s: float = 0.0
    metered_read_s: float = 0.0
    metered_open_s: float = 0.0
    # the device's own clock (CUDA events), where batches go to a device that has one: time
    # it waited for the next batch, and the time from its first batch on (waiting, the
    # steps and the copies); the host's stall above is the host's, which a GPU whose queue
    # runs ahead of it does not share
    device_wait_ns: int = 0
    device_span_ns: int = 0


def read(c: WatchCollector, clock: Callable[[], int] = time.perf_counter_ns) -> Counters:
    """``c``'s sums now. The loop keeps updating them meanwhile: the epochs are summed first
    and the wait in progress read last, so a batch that arrives in between is counted at the
    next frame rather than twice."""
    eps = list(c.epochs)
    samples = batches = 0
    blocked = wall = cpu = collate = collate_cpu = runq = mread = mopen = 0.0
    for e in eps:
        samples += e.samples
        batches += e.batches
        blocked += e.stall_seconds + (e.first_batch_seconds or 0.0)
        wall += e.sample_wall_seconds
        cpu += e.sample_cpu_seconds
        collate += e.collate_seconds
        collate_cpu += capacity.worker_cpu_seconds(e) - e.sample_cpu_seconds
        runq += e.runqueue_seconds
        mread += e.metered_read_seconds
        mopen += e.metered_open_seconds
    dwait, dspan = device_time(eps)  # the ended epochs on the device's clock
    steps, step_ns = c.step.count, c.step.total
    dsteps, dstep_ns = c.gpu.step.count, c.gpu.step.total
    tl = c.gpu.timeline
    if tl is not None and tl.backend.on_device_clock:  # the running epoch's sums so far
        w = tl.wait_ns
        dwait += w / 1e9
        dspan += (w + tl.busy_ns + tl.copy_ns) / 1e9
    timed = c.sample.count
    cur = c.current
    request, arrival = c.request_ns, c.last_arrival_ns
    now = clock()
    if cur is not None and request > arrival and now > request:
        blocked += (now - request) / 1e9  # in next() now: the wait so far
    return Counters(
        t_ns=now,
        process_cpu_s=time.process_time(),
        epoch=cur.index if cur is not None else -1,
        epoch_batches=cur.batches if cur is not None else 0,
        batches=batches,
        samples=samples,
        blocked_s=blocked,
        steps=steps,
        step_ns=step_ns,
        device_steps=dsteps,
        device_step_ns=dstep_ns,
        timed_samples=timed,
        sample_wall_s=wall,
        sample_cpu_s=cpu,
        collate_s=collate,
        collate_cpu_s=collate_cpu,
        runqueue_s=runq,
        metered_read_s=mread,
        metered_open_s=mopen,
        device_wait_ns=round(dwait * 1e9),
        device_span_ns=round(dspan * 1e9),
    )


# -- from two readings to what the panel shows ---------------------------------------------


@dataclass(frozen=True)
class StageNow:
    name: str  # storage, cpu, gpu
    capacity: float | None  # samples/s; None where the window gives none
    detail: str  # how it was measured, or why there is no figure


@dataclass(frozen=True)
class Frame:
    """What one frame of the panel shows: numbers only, drawn by ``panel``."""

    title: str
    window_s: float  # the span the rates are over; 0 before there are two readings
    samples_per_s: float | None
    stall: float | None  # share of the window the consumer was blocked in next()
    stages: tuple[StageNow, ...]
    limiting: str | None  # the stage with the lowest capacity now
    stall_history: tuple[float | None, ...]  # one value per frame, oldest first
    # share of the window's device time the GPU waited for data, by its own clock; None
    # where nothing ran on a device with one (the host's stall is then all there is)
    gpu_waiting: float | None = None


def rates(a: Counters, b: Counters) -> tuple[float | None, float | None]:
    """Samples/s delivered and the stall share from reading ``a`` to reading ``b``."""
    dt = (b.t_ns - a.t_ns) / 1e9
    if dt <= 0:
        return None, None
    delivered = max(b.samples - a.samples, 0) / dt
    stall = min(max((b.blocked_s - a.blocked_s) / dt, 0.0), 1.0)
    return delivered, stall


def gpu_waiting(a: Counters, b: Counters) -> float | None:
    """The share of the device time from reading ``a`` to reading ``b`` that the GPU waited
    for the next batch, by the device's clock; None where the window has none. The events
    are resolved as the device completes them, so the window ends at the last one resolved,
    a batch or so behind the host."""
    span = b.device_span_ns - a.device_span_ns
    if span <= 0:
        return None
    return min(max((b.device_wait_ns - a.device_wait_ns) / span, 0.0), 1.0)


def stall_of(a: Counters, b: Counters) -> float | None:
    """What the panel's stall history keeps for the window ``a`` to ``b``: the GPU's wait by
    its own clock where there is one, else the host's share blocked in next()."""
    device = gpu_waiting(a, b)
    return device if device is not None else rates(a, b)[1]


def stages_now(
    a: Counters,
    b: Counters,
    settings: LoaderSettings,
    usable_cores: int,
    batch_size: int | None,
) -> tuple[StageNow, ...]:
    """Each stage's capacity over ``a`` to ``b``, by the rules the record's stages use
    (``worker_cpu``, ``worker_storage``, ``capacity.gpu_from_step``) applied to the sums of
    the window as if it were an epoch. The GPU's step is the window's mean, not the record's
    median: over a few seconds a checkpoint is what is happening now."""
    dt = (b.t_ns - a.t_ns) / 1e9
    timed = b.timed_samples - a.timed_samples
    window = WatchEpoch(
        index=0,
        batches=max(b.batches - a.batches, 0),
        samples=max(timed, 0),
        seconds=max(dt, 0.0),
        sample_wall_seconds=max(b.sample_wall_s - a.sample_wall_s, 0.0),
        sample_cpu_seconds=max(b.sample_cpu_s - a.sample_cpu_s, 0.0),
        collate_seconds=max(b.collate_s - a.collate_s, 0.0),
        collate_cpu_seconds=max(b.collate_cpu_s - a.collate_cpu_s, 0.0),
        runqueue_seconds=max(b.runqueue_s - a.runqueue_s, 0.0),
        metered_read_seconds=max(b.metered_read_s - a.metered_read_s, 0.0),
        metered_open_seconds=max(b.metered_open_s - a.metered_open_s, 0.0),
        main_cpu_seconds=max(b.process_cpu_s - a.process_cpu_s, 0.0),
    )
    out: list[StageNow] = []
    if timed > 0 and dt > 0 and window.sample_wall_seconds > 0:
        m = Measured(
            settings=settings,
            epochs=[window],
            usable_cores=usable_cores,
            sample_bytes=0.0,
            batch_size=batch_size,
            step_ns=(),
        )
        cpu = worker_cpu(m, [])
        storage = worker_storage(m, cpu.cpu_seconds_per_sample or 0.0)
        if storage.capacity_samples_per_s is not None:
            how = "metered reads" if storage.basis == METERED_BASIS else "blocked time in workers"
            out.append(StageNow("storage", storage.capacity_samples_per_s, how))
        else:
            out.append(StageNow("storage", None, "not limiting: workers never blocked"))
        per = cpu.cpu_seconds_per_sample or 0.0
        out.append(StageNow("cpu", cpu.capacity_samples_per_s, f"{per * 1e3:.2f} ms CPU/sample"))
    else:
        why = "no batch in the window" if timed <= 0 else "not timed per sample"
        if settings.framework == "dali":
            why = "DALI: measured at the epoch's end"
        out.append(StageNow("storage", None, why))
        out.append(StageNow("cpu", None, why))
    out.append(_gpu_now(a, b, batch_size))
    return tuple(out)


def _gpu_now(a: Counters, b: Counters, batch_size: int | None) -> StageNow:
    """The GPU (the consumer's step) over the window: the device's clock where it has steps
    in it, the host's otherwise."""
    batches = b.batches - a.batches
    bs = batch_size or ((b.samples - a.samples) / batches if batches > 0 else 0)
    n, total, clock = b.device_steps - a.device_steps, b.device_step_ns - a.device_step_ns, "device"
    if n <= 0:
        n, total, clock = b.steps - a.steps, b.step_ns - a.step_ns, "host"
    if n <= 0 or total <= 0 or not bs:
        return StageNow("gpu", None, "no step in the window")
    step = total / n / 1e9
    return StageNow(
        "gpu", capacity.gpu_from_step(bs, step), f"step {step * 1e3:.1f} ms, {clock} clock"
    )


def limiting(stages: Sequence[StageNow]) -> str | None:
    """The stage with the lowest capacity now; None when no stage has one."""
    known = [s for s in stages if s.capacity is not None]
    return min(known, key=lambda s: s.capacity or 0.0).name if known else None


def frame_of(
    a: Counters | None,
    b: Counters,
    settings: LoaderSettings,
    usable_cores: int,
    batch_size: int | None,
    title: str,
    stall_history: Sequence[float | None] = (),
) -> Frame:
    """The frame for the window from reading ``a`` (None: there is none yet) to ``b``."""
    if a is None or b.t_ns <= a.t_ns:
        return Frame(title, 0.0, None, None, (), None, tuple(stall_history))
    delivered, stall = rates(a, b)
    stages = stages_now(a, b, settings, usable_cores, batch_size)
    return Frame(
        title=title,
        window_s=(b.t_ns - a.t_ns) / 1e9,
        samples_per_s=delivered,
        stall=stall,
        stages=stages,
        limiting=limiting(stages),
        stall_history=tuple(stall_history),
        gpu_waiting=gpu_waiting(a, b),
    )


# -- drawing --------------------------------------------------------------------------------


def sparkline(values: Sequence[float | None], cells: int = HISTORY) -> str:
    """The last ``cells`` shares (0 to 1) as blocks on a fixed scale, ▁ for none and █ for
    all the time; a gap (no reading) is a space."""
    out = []
    for v in list(values)[-cells:]:
        if v is None:
            out.append(" ")
        else:
            out.append(BLOCKS[min(max(round(v * (len(BLOCKS) - 1)), 0), len(BLOCKS) - 1)])
    return "".join(out)


def panel(frame: Frame, width: int = 80) -> RenderableType:
    """One frame, at most ``width`` (and 80) columns wide."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(no_wrap=True, overflow="ellipsis")
    device = frame.gpu_waiting is not None
    if frame.window_s > 0:
        stall = f"{frame.stall:.0%}" if frame.stall is not None else "-"
        last = f"last {frame.window_s:.0f} s"
        if device:
            # the GPU's own clock decides: a host blocked in next() while the device works
            # through queued steps is not a GPU waiting for data
            over = f"GPU waiting {frame.gpu_waiting:.0%}, {last}, device clock"
            shown = frame.gpu_waiting
        else:
            over, shown = f"stall {stall}, {last}", frame.stall
        style = "bold red" if (shown or 0.0) >= 0.3 else ""
        grid.add_row(
            Text("delivered"),
            Text(f"{units.samples_per_s(frame.samples_per_s)} samples/s"),
            Text(over, style),
        )
        if device:
            grid.add_row(Text("host"), Text(""), Text(f"blocked in next() {stall}", "dim"))
    else:
        grid.add_row(Text("delivered"), Text("-"), Text("measuring..."))
    for s in frame.stages:
        now = s.name == frame.limiting
        detail = f"◀ limiting now · {s.detail}" if now else s.detail
        rate = f"{units.samples_per_s(s.capacity)} samples/s" if s.capacity is not None else "-"
        grid.add_row(Text(s.name), Text(rate), Text(detail), style="bold yellow" if now else None)
    outer = min(width, 80)
    label = "waiting  " if device else "stall  "
    # the label + the cells + "  N s" within the panel's borders and padding
    cells = max(min(HISTORY, outer - 4 - len(label) - 6), 8)
    spark = Text.assemble(
        (label, ""),
        (sparkline(frame.stall_history, cells).rjust(cells), "red"),
        (f"  {cells * INTERVAL_S:.0f} s", "dim"),
    )
    return Panel(
        Group(grid, spark),
        title=Text(frame.title),
        title_align="left",
        width=outer,
        padding=(0, 1),
    )


# -- one loader's readings ------------------------------------------------------------------


class Feed:
    """A live loader's side of the panel: the readings of the last few seconds and the
    stall of each frame, kept across its epochs. ``collector.live`` points to it; the
    collector calls ``epoch_began`` and ``epoch_ended`` (once per epoch, never per batch)."""

    def __init__(self, collector: WatchCollector, display: Display) -> None:
        # weak: the collector holds the feed, and a cycle between them would keep the
        # collector, its loader's dataset and its CUDA events alive until a collection,
        # which in a forked DataLoader worker frees those events where CUDA cannot run
        self._collector = weakref.ref(collector)
        self.display = display
        self.usable_cores = usable_cores()
        self._readings: deque[Counters] = deque()
        self.history: deque[float | None] = deque(maxlen=HISTORY)
        self._began_ns = 0

    def epoch_began(self) -> None:
        self._began_ns = time.perf_counter_ns()
        self.display.began(self)

    def epoch_ended(self) -> None:
        self.display.ended(self)

    def frame(self, now: Counters | None = None) -> Frame:
        """Read the collector (or take ``now``) and make the frame: rates over the readings
        of the last ``WINDOW_S``, and this frame's stall added to the history."""
        c = self._collector()
        if c is None:
            raise ReferenceError("the watched loader this feed showed is gone")
        b = now if now is not None else read(c)
        readings = self._readings
        prev = readings[-1] if readings else None
        while readings and (b.t_ns - readings[0].t_ns) / 1e9 > WINDOW_S + INTERVAL_S / 2:
            readings.popleft()
        if prev is not None and (b.t_ns - prev.t_ns) / 1e9 <= 2.5 * INTERVAL_S:
            self.history.append(stall_of(prev, b))
        elif prev is not None:
            self.history.append(None)  # the panel was off (between epochs): a gap
        a = readings[0] if readings else None
        readings.append(b)
        settings = c.adapter.settings
        return frame_of(
            a, b, settings, self.usable_cores, c.batch_size, self._title(settings, b), self.history
        )

    def _title(self, settings: LoaderSettings, b: Counters) -> str:
        name = printable(settings.dataset or settings.framework or "loader")
        name = name if len(name) <= 24 else name[:23] + "…"
        if b.epoch < 0:
            return f"ioprobe live · {name} · between epochs"
        s = max(b.t_ns - self._began_ns, 0) // 1_000_000_000
        return (
            f"ioprobe live · {name} · epoch {b.epoch + 1} · batch {b.epoch_batches:,} · "
            f"{s // 60}:{s % 60:02d}"
        )


# -- the panel: one per process ------------------------------------------------------------


def _stderr_console() -> Console:
    """The console on stderr, a terminal only where stderr is one: FORCE_COLOR (set in many
    CI jobs for colored logs) must not draw a panel into a log."""
    return console(stderr=True, force_terminal=None if _isatty(sys.stderr) else False)


def _rank_zero() -> bool:
    """Not a distributed job's other ranks: they share the terminal, one panel is enough."""
    info = rank_now()  # the process group's rank where one is initialised (spawned ranks)
    if info is not None:
        return info.rank == 0
    # a launcher that sets a rank alone (no world size) still has other ranks beside it
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    return rank.strip() in ("", "0")


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


class Display:
    """The panel and its thread. It starts when a live loader's epoch begins and stops when
    no live loader's epoch is running; it shows the innermost one (the last begun)."""

    def __init__(self, console: Callable[[], Console] = _stderr_console) -> None:
        self.console = console  # tests hand in a console over a StringIO
        self._feeds: list[Feed] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # starting and stopping, never taken per batch
        self._streams: tuple[Any, Any] | None = None  # sys.stdout, sys.stderr before the panel
        self.frames = 0  # frames drawn, for tests
        self.error: str | None = None  # what stopped the panel early, if anything

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def began(self, feed: Feed) -> None:
        self._feeds.append(feed)
        with self._lock:
            if self._thread is None:
                self._start()

    def ended(self, feed: Feed) -> None:
        if feed in self._feeds:
            self._feeds.remove(feed)
        if not self._feeds:
            self.stop()

    def _start(self) -> None:
        if not _rank_zero():
            return
        console = self.console()
        if not console.is_terminal or console.is_dumb_terminal:
            return  # a log or a pipe: nothing drawn, no thread
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(console, self._stop), name="ioprobe-live", daemon=True
        )
        start_quiet(self._thread)

    def stop(self) -> None:
        """Clear the panel and end its thread (waiting at most ``JOIN_S``: a terminal that
        blocks writes must not hold up the loop)."""
        with self._lock:
            t, self._thread = self._thread, None
            self._stop.set()
        if t is not None and t is not threading.current_thread():
            t.join(JOIN_S)

    def _run(self, console: Console, stop: threading.Event) -> None:
        try:
            feed = self._current()
            if feed is not None:
                feed.frame()  # the baseline the first frame's rates start from
        except Exception as exc:  # a display never breaks the job it watches
            self.error = f"{type(exc).__name__}: {exc}"
            return
        # nothing for a pass shorter than a frame (a quick validation loop): no flicker
        if stop.wait(INTERVAL_S):
            return
        live = Live(
            console=console,
            auto_refresh=False,
            transient=True,
            # the script's prints appear above the panel; a stdout that is not the terminal
            # (a file, a pipe) is left alone
            redirect_stdout=_isatty(sys.stdout),
            redirect_stderr=True,
        )
        self._streams = (sys.stdout, sys.stderr)
        try:
            live.start()
            while True:
                feed = self._current()
                if feed is not None:
                    live.update(panel(feed.frame(), console.width), refresh=True)
                    self.frames += 1
                if stop.wait(INTERVAL_S):
                    break
        except Exception as exc:  # a display never breaks the job it watches
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                live.stop()
            except Exception as exc:  # the terminal went away
                self.error = self.error or f"{type(exc).__name__}: {exc}"
            self._streams = None

    def _current(self) -> Feed | None:
        try:
            return self._feeds[-1]
        except IndexError:
            return None

    def after_fork(self) -> None:
        """In a forked child (a DataLoader worker): no thread came along, and the streams the
        panel redirected go straight to the terminal again, never through the parent's
        console, whose locks the fork may have copied held."""
        streams = self._streams
        if streams is not None:
            sys.stdout, sys.stderr = streams
        self._streams = None
        self._feeds = []
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()


DISPLAY = Display()
atexit.register(DISPLAY.stop)
os.register_at_fork(after_in_child=DISPLAY.after_fork)


def attach(collector: WatchCollector, display: Display | None = None) -> Feed:
    """Show ``collector``'s loader in the live panel from its next epoch on."""
    feed = Feed(collector, display or DISPLAY)
    collector.live = feed
    return feed


__all__ = [
    "DISPLAY",
    "Counters",
    "Display",
    "Feed",
    "Frame",
    "StageNow",
    "attach",
    "frame_of",
    "gpu_waiting",
    "limiting",
    "panel",
    "rates",
    "read",
    "sparkline",
    "stages_now",
    "stall_of",
]

"""The live panel (``ioprobe.watch(loader, live=True)``, ``ioprobe run --live``): what it
shows for known counters, the rates over its window, and that its thread lives exactly as
long as a live loader's epoch, on a terminal only."""

from __future__ import annotations

import dataclasses
import io
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.file_proxy import FileProxy
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.monitor import live
from ioprobe.monitor.collector import WatchCollector
from ioprobe.monitor.live import Counters, Display, Feed, frame_of, panel, rates, read, sparkline
from ioprobe.monitor.stages import Measured
from ioprobe.record import LoaderSettings, RunRecord, Stages, WatchEpoch
from tests.fixtures.datasets import SleepDataset
from tests.unit.render.test_render_golden import check, text

S = 1_000_000_000  # ns per second


class _Adapter:
    """A loader's side with nothing of its own: the collector's counters are all there is."""

    def __init__(self, workers: int = 8, framework: str = "torch") -> None:
        self.settings = LoaderSettings(framework=framework, dataset="Shards", workers=workers)
        self.description = {"num_workers": str(workers)}

    def begin_epoch(self) -> None:
        pass

    def end_epoch(self, epoch: WatchEpoch) -> None:
        pass

    def stages(self, m: Measured) -> tuple[Stages, list[str]]:
        return Stages(), []

    def complete(self, record: RunRecord) -> None:
        pass


def _counters(t_s: float, **kw: float) -> Counters:
    return Counters(t_ns=round(t_s * S), **kw)  # type: ignore[arg-type]


# -- what is shown ---------------------------------------------------------------------------

# 5 s of an 8-worker loader on 16 cores: 125 batches of 32 (800 samples/s), blocked in next()
# 1.5 s of it; per sample 10 ms in a worker of which 2 ms CPU, then 0.1 ms of collate (all
# CPU), and 0.1 ms waiting for a core (so 7.9 ms blocked on reads); a 28 ms step; the loop
# used one core
BEFORE = _counters(
    100.0,
    process_cpu_s=50.0,
    epoch=2,
    epoch_batches=400,
    batches=1_000,
    samples=32_000,
    blocked_s=40.0,
    steps=997,
    step_ns=997 * 28_000_000,
    timed_samples=32_000,
    sample_wall_s=320.0,
    sample_cpu_s=64.0,
    collate_s=3.2,
    collate_cpu_s=3.2,
    runqueue_s=3.2,
)
AFTER = _counters(
    105.0,
    process_cpu_s=55.0,
    epoch=2,
    epoch_batches=525,
    batches=1_125,
    samples=36_000,
    blocked_s=41.5,
    steps=1_122,
    step_ns=1_122 * 28_000_000,
    timed_samples=36_000,
    sample_wall_s=360.0,
    sample_cpu_s=72.0,
    collate_s=3.6,
    collate_cpu_s=3.6,
    runqueue_s=3.6,
)
# a minute of it: about 30% stalled, a burst where the loader stopped for 4 s, a gap where
# the panel was off between epochs, and the new epoch's first seconds
HISTORY = [
    *[0.3, 0.28, 0.33, 0.3] * 6,
    *[0.7, 1.0, 1.0, 1.0, 1.0, 0.6],
    *[0.3, 0.31, 0.27, 0.3] * 4,
    None,
    None,
    *[0.9, 0.5],
    *[0.3, 0.32, 0.29] * 4,
]


def test_the_panel_for_known_counters_golden() -> None:
    f = frame_of(
        BEFORE, AFTER, _Adapter().settings, 16, 32, "ioprobe live · Shards · epoch 3", HISTORY
    )
    assert f.samples_per_s == pytest.approx(800.0)
    assert f.stall == pytest.approx(0.3)
    caps = {s.name: s.capacity for s in f.stages}
    # 8 lanes, each 7.9 ms blocked then 2.1 ms of CPU and 0.1 ms waiting for a core
    assert caps["storage"] == pytest.approx(8 / (0.0079 + 0.0021 + 0.0001))
    assert caps["cpu"] == pytest.approx(8 / 0.0021)  # 8 workers, on 15 cores the loop left
    assert caps["gpu"] == pytest.approx(32 / 0.028)
    assert f.limiting == "storage"
    check("live.txt", text(panel(f, 80), width=80))


def test_the_panel_before_any_rate_and_for_a_dali_pipeline_golden() -> None:
    settings = _Adapter(framework="dali").settings
    first = frame_of(None, AFTER, settings, 16, 32, "ioprobe live · pipe · epoch 1")
    assert first.samples_per_s is None and first.limiting is None
    dali = frame_of(
        BEFORE,
        dataclasses.replace(AFTER, timed_samples=BEFORE.timed_samples),
        settings,
        16,
        32,
        "ioprobe live · pipe · epoch 1",
        [0.5],
    )
    assert [s.capacity is None for s in dali.stages] == [True, True, False]
    assert dali.limiting == "gpu"  # the only stage measured live
    check("live_dali.txt", text(panel(first, 80), width=80) + text(panel(dali, 80), width=80))


def test_with_a_device_clock_the_panel_shows_the_gpu_waiting_by_it_golden() -> None:
    # the same 5 s on a CUDA device: its events say the GPU waited 1.2 s of 4.8 s of device
    # time (the rest the 28 ms steps and the copies) while the host was blocked in next()
    # 30% of the window; the GPU's own figure leads, the host's stands beside it
    before = dataclasses.replace(
        BEFORE, device_wait_ns=30 * S, device_span_ns=95 * S, device_steps=997,
        device_step_ns=997 * 28_000_000,
    )  # fmt: skip
    after = dataclasses.replace(
        AFTER, device_wait_ns=round(31.2 * S), device_span_ns=round(99.8 * S),
        device_steps=1_122, device_step_ns=1_122 * 28_000_000,
    )  # fmt: skip
    f = frame_of(before, after, _Adapter().settings, 16, 32, "ioprobe live · Shards", HISTORY)
    assert f.gpu_waiting == pytest.approx(0.25)
    assert f.stall == pytest.approx(0.3)  # the host's share, kept for the row beside it
    shown = text(panel(f, 80), width=80)
    assert "GPU waiting 25%, last 5 s, device clock" in shown
    assert "blocked in next() 30%" in shown
    check("live_device.txt", shown)
    # no device time in the window (a step the events have not resolved yet): no figure,
    # and the host's stall is all the panel shows
    still = dataclasses.replace(after, device_wait_ns=30 * S, device_span_ns=95 * S)
    g = frame_of(before, still, _Adapter().settings, 16, 32, "t", HISTORY)
    assert g.gpu_waiting is None
    assert "GPU waiting" not in text(panel(g, 80), width=80)
    assert live.stall_of(before, after) == pytest.approx(0.25)
    assert live.stall_of(before, still) == pytest.approx(0.3)


class _Timeline:
    """A device timeline's running sums mid-epoch (``GpuTimeline`` keeps them in ns)."""

    backend = types.SimpleNamespace(on_device_clock=True)
    wait_ns, busy_ns, copy_ns = 2 * S, 5 * S, 1 * S


def test_read_sums_the_ended_epochs_device_time_and_the_running_epochs_so_far() -> None:
    c = _collector()
    c.begin_epoch()
    c.end_epoch(None)
    ended = c.epochs[0]
    ended.gpu_wait_seconds, ended.gpu_step_seconds, ended.h2d_seconds = 3.0, 6.0, 0.5
    c.begin_epoch()
    try:
        c.gpu.timeline = _Timeline()  # type: ignore[assignment]
        now = read(c, clock=lambda: 10 * S)
        assert now.device_wait_ns == (3 + 2) * S
        assert now.device_span_ns == round((3 + 6 + 0.5 + 2 + 5 + 1) * S)
        # a host clock standing in for a device's (no CUDA events) counts nothing here
        _Timeline.backend.on_device_clock = False
        try:
            host = read(c, clock=lambda: 10 * S)
        finally:
            _Timeline.backend.on_device_clock = True
        assert (host.device_wait_ns, host.device_span_ns) == (3 * S, round(9.5 * S))
    finally:
        c.gpu.timeline = None
        c.end_epoch(None)


@pytest.mark.parametrize("width", [40, 60, 79, 80, 200])
def test_the_panel_fits_the_terminal_up_to_80_columns(width: int) -> None:
    f = frame_of(BEFORE, AFTER, _Adapter().settings, 16, 32, "ioprobe live · Shards", HISTORY)
    lines = text(panel(f, width), width=width).splitlines()
    assert max(len(line) for line in lines) == min(width, 80)
    assert len(lines) == 7  # compact: borders, delivered, three stages, the sparkline


def test_the_sparkline_has_a_fixed_scale_and_gaps() -> None:
    assert sparkline([0.0, 1 / 7, 0.5, 1.0, None, 1.2, -0.1]) == "▁▂▅█ █▁"
    assert sparkline([0.0] * 40 + [1.0] * 60, cells=60) == "█" * 60  # the newest


# -- the window's rates ----------------------------------------------------------------------


def test_rates_over_a_window_are_the_truth_built_in() -> None:
    a = _counters(10.0, samples=1_000, blocked_s=3.0)
    b = _counters(15.0, samples=6_000, blocked_s=5.0)
    assert rates(a, b) == pytest.approx((1_000.0, 0.4))
    assert rates(b, b) == (None, None)
    # a torn read can make a sum step back by a little: never a negative share or rate
    assert rates(b, _counters(16.0, samples=5_990, blocked_s=4.9)) == (0.0, 0.0)


def _collector(workers: int = 2) -> WatchCollector:
    return WatchCollector(_Adapter(workers), 32, None)


def test_a_wait_in_progress_counts_before_its_batch_arrives() -> None:
    c = _collector()
    c.begin_epoch()
    try:
        c.request_ns = 1 * S  # the first batch: 0.5 s of start-up
        c.on_delivery(1 * S, int(1.5 * S), 32)
        c.request_ns = int(1.6 * S)  # then 0.1 s of step and 0.1 s of stall
        c.on_delivery(int(1.6 * S), int(1.7 * S), 32)
        c.request_ns = int(1.8 * S)  # in next() since 1.8 s
        during = read(c, clock=lambda: int(2.3 * S))
        assert during.blocked_s == pytest.approx(0.5 + 0.1 + 0.5)
        c.on_delivery(int(1.8 * S), int(2.4 * S), 32)  # it arrives at 2.4 s
        after = read(c, clock=lambda: int(2.5 * S))
        assert after.blocked_s == pytest.approx(0.5 + 0.1 + 0.6)
        assert (after.samples, after.batches, after.epoch_batches) == (96, 3, 3)
        # 2.3 s to 2.5 s: blocked until 2.4 s, then the step
        assert rates(during, after) == pytest.approx((32 / 0.2, 0.5))
    finally:
        c.end_epoch(None)
    idle = read(c, clock=lambda: 9 * S)  # between epochs nothing is in progress
    assert idle.blocked_s == pytest.approx(0.5 + 0.1 + 0.6)
    assert idle.epoch == -1


def test_the_window_keeps_the_last_five_seconds_and_the_history_each_second() -> None:
    collector = _collector()  # the loader holds it; the feed only points to it
    feed = Feed(collector, Display())
    feed.usable_cores = 16
    samples, blocked = 0, 0.0
    frames = []
    for t in range(12):  # 100 samples/s and 20% stall for 6 s, then 200 samples/s and 60%
        frames.append(feed.frame(_counters(float(t), samples=samples, blocked_s=blocked)))
        fast = t >= 5
        samples += 200 if fast else 100
        blocked += 0.6 if fast else 0.2
    assert frames[0].window_s == 0 and frames[0].samples_per_s is None
    assert frames[3].window_s == pytest.approx(3.0)
    assert frames[3].samples_per_s == pytest.approx(100.0)
    assert frames[-1].window_s == pytest.approx(5.0)  # 6 s to 11 s: the new rates alone
    assert frames[-1].samples_per_s == pytest.approx(200.0)
    assert frames[-1].stall == pytest.approx(0.6)
    assert frames[8].samples_per_s == pytest.approx((2 * 100 + 3 * 200) / 5)  # 3 s to 8 s
    assert frames[-1].stall_history == pytest.approx([0.2] * 5 + [0.6] * 6)
    # the panel was off for a while (between epochs): a gap, and no rate across it
    later = feed.frame(_counters(30.0, samples=samples, blocked_s=blocked))
    assert later.stall_history[-1] is None
    assert later.samples_per_s is None


# -- the thread's life -----------------------------------------------------------------------


def _panels() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ioprobe-live" and t.is_alive()]


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The process's panel drawing on a terminal that is a StringIO, a frame every 0.25 s."""
    out = io.StringIO()
    monkeypatch.setattr(live, "INTERVAL_S", 0.25)
    monkeypatch.setattr(
        live.DISPLAY,
        "console",
        lambda: Console(file=out, force_terminal=True, width=80, color_system=None),
    )
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    yield out
    live.DISPLAY.stop()


def _loader(n: int) -> DataLoader[object]:
    # 2 workers sleeping 50 ms per sample: 40 samples/s, about n / 40 seconds
    return DataLoader(SleepDataset(n, 0.05), batch_size=4, num_workers=2)


def test_with_stderr_not_a_terminal_nothing_is_drawn_and_no_thread_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(live, "INTERVAL_S", 0.25)
    monkeypatch.setattr(live.DISPLAY, "console", lambda: Console(file=out))
    frames = live.DISPLAY.frames
    seen = []
    loader = ioprobe.watch(_loader(40), live=True)
    for _ in loader:
        seen.append(len(_panels()))
    assert seen and set(seen) == {0}
    assert live.DISPLAY.frames == frames
    assert out.getvalue() == ""
    assert loader.run.watch is not None and loader.run.watch.epochs[0].samples == 40


def test_force_color_does_not_make_a_log_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # set in many CI jobs for colored logs
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not live._stderr_console().is_terminal


def _ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("ending", ["end", "break", "exception", "ctrl-c"])
def test_on_a_terminal_the_panel_draws_while_the_loop_runs_and_is_gone_after(
    terminal: io.StringIO, ending: str
) -> None:
    before = sys.stdout, sys.stderr
    frames = live.DISPLAY.frames
    loader = ioprobe.watch(_loader(80), live=True)
    alive_during = drawn_during = False
    t0 = time.perf_counter()

    def loop() -> None:
        nonlocal alive_during, drawn_during
        for _ in loader:
            alive_during |= bool(_panels())
            drawn_during |= live.DISPLAY.frames > frames
            if ending != "end" and time.perf_counter() - t0 > 1.2:
                if ending == "break":
                    break
                if ending == "exception":
                    raise ValueError("the loop body failed")
                _ctrl_c()

    if ending in ("exception", "ctrl-c"):
        with pytest.raises(ValueError if ending == "exception" else KeyboardInterrupt):
            loop()
    else:
        loop()
    assert alive_during and drawn_during
    assert _panels() == []  # gone at once, not at the next frame
    assert (sys.stdout, sys.stderr) == before  # the redirection undone
    assert not isinstance(sys.stderr, FileProxy)
    shown = terminal.getvalue()
    assert "ioprobe live · SleepDataset · epoch 1" in shown
    assert "samples/s" in shown and "◀ limiting now" in shown
    assert shown.rindex("\x1b[?25h") > shown.rindex("\x1b[?25l")  # the cursor is back
    assert shown.endswith("\x1b[2K")  # and the panel cleared: it showed the run, not its end
    assert live.DISPLAY.error is None


def test_the_panel_stays_up_while_a_nested_live_loader_runs_and_shows_it() -> None:
    out = io.StringIO()
    d = Display(lambda: Console(file=out, force_terminal=True, width=80, color_system=None))
    collectors = _collector(), _collector()  # their loaders hold them
    outer, inner = Feed(collectors[0], d), Feed(collectors[1], d)
    outer.epoch_began()
    inner.epoch_began()
    try:
        inner.epoch_ended()
        assert d.running  # the outer loader's epoch still runs
    finally:
        outer.epoch_ended()
    assert not d.running
    assert _panels() == []


def test_other_ranks_of_a_distributed_job_draw_nothing(
    terminal: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    d = Display(live.DISPLAY.console)
    collector = _collector()
    feed = Feed(collector, d)
    feed.epoch_began()
    try:
        assert not d.running
    finally:
        feed.epoch_ended()
    monkeypatch.setenv("RANK", "0")
    feed.epoch_began()
    try:
        assert d.running
    finally:
        feed.epoch_ended()
    assert not d.running


def test_a_forked_child_writes_past_the_panel(monkeypatch: pytest.MonkeyPatch) -> None:
    # a DataLoader worker forked while the panel redirects the streams: its prints go to the
    # terminal directly, never through the parent's console and its (maybe held) locks
    d = Display()
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", FileProxy(Console(file=io.StringIO()), out))
    monkeypatch.setattr(sys, "stderr", FileProxy(Console(file=io.StringIO()), err))
    d._streams = (out, err)
    d.after_fork()
    assert (sys.stdout, sys.stderr) == (out, err)
    assert not d.running

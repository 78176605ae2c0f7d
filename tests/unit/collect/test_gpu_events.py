"""The device timeline's arithmetic, on events whose device stamps the test sets."""

from __future__ import annotations

from typing import Any

from ioprobe.collect.gpu_events import GpuTimeline
from ioprobe.monitor.reservoir import Reservoir

MS = 1_000_000


class ScriptedDevice:
    """Events stamped with ``now`` (device ns) when recorded; complete up to ``done_upto``."""

    on_device_clock = True
    name = "scripted"

    def __init__(self) -> None:
        self.now = 0
        self.done_upto = 10**18
        self.created = 0
        self.waited: list[int] = []

    def new_event(self) -> list[int]:
        self.created += 1
        return [0]

    def record(self, ev: list[int]) -> None:
        ev[0] = self.now

    def done(self, ev: list[int]) -> bool:
        return ev[0] <= self.done_upto

    def elapsed_ns(self, a: list[int], b: list[int]) -> int:
        return b[0] - a[0]

    def wait(self, ev: list[int]) -> None:
        self.waited.append(ev[0])
        self.done_upto = max(self.done_upto, ev[0])

    def copy(self, t: Any, dev: Any, non_blocking: bool) -> Any:
        return t

    def is_pinned(self, t: Any) -> bool:
        return False


def at(dev: ScriptedDevice, ms: float) -> ScriptedDevice:
    dev.now = int(ms * MS)
    return dev


def two_steps(tl: GpuTimeline, dev: ScriptedDevice) -> None:
    """Step 1: arrives at 0, pinned copy 0-2, work to 10. Data arrives at 15 (waited 5),
    pageable copy 15-19, work to 30."""
    tl.before_wait()  # before the first batch: nothing to close
    at(dev, 0)
    tl.after_wait(1_000)
    tl.copy_start()
    at(dev, 2)
    tl.copy_end(100, 100)
    at(dev, 10)
    tl.before_wait()
    at(dev, 15)
    tl.after_wait(2_000)
    tl.copy_start()
    at(dev, 19)
    tl.copy_end(200, 0)
    at(dev, 30)
    tl.before_wait()


def test_gaps_between_events_are_summed_by_kind_and_add_up_to_the_span() -> None:
    dev = ScriptedDevice()
    steps = Reservoir(100)
    tl = GpuTimeline(dev, steps)
    two_steps(tl, dev)
    wait, busy, copy, copies, nbytes, pinned, pinned_ns = tl.end_epoch()
    assert wait == 5 * MS
    assert copy == 6 * MS
    assert busy == (10 - 2 + 30 - 19) * MS
    assert wait + busy + copy == 30 * MS  # the epoch's span on the device clock
    assert (copies, nbytes, pinned, pinned_ns) == (2, 300, 100, 2 * MS)
    assert list(steps.values) == [8 * MS, 11 * MS]  # arrival to request, copies excluded


def test_rows_place_each_step_on_the_host_clock_from_the_first_arrival() -> None:
    dev = ScriptedDevice()
    tl = GpuTimeline(dev, Reservoir(100))
    two_steps(tl, dev)
    tl.end_epoch()
    track = tl.series.to_record("gpu", None, 0)
    c = track.columns
    anchor = 1_000e-9  # host ns of the first arrival, in seconds
    assert c["start"] == [round(anchor, 6), round(anchor + 0.015, 6)]
    assert c["end"] == [round(anchor + 0.010, 6), round(anchor + 0.030, 6)]
    assert c["wait"] == [0.0, 0.005]
    assert c["copy"] == [0.002, 0.004]


def test_polling_never_waits_until_the_backlog_is_long_and_events_are_reused() -> None:
    dev = ScriptedDevice()
    dev.done_upto = -1  # the device is far behind: nothing completes
    tl = GpuTimeline(dev, Reservoir(100), max_pending=16)
    for i in range(8):
        at(dev, i)
        tl.before_wait()
        tl.after_wait(i)
    assert dev.waited == []  # 15 events in flight: under the limit, no wait
    at(dev, 8)
    tl.before_wait()
    tl.after_wait(8)  # the 17th: wait for the oldest beyond the limit
    assert len(dev.waited) == 1
    for i in range(9, 200):
        at(dev, i)
        tl.before_wait()
        tl.after_wait(i)
    tl.end_epoch()
    # resolved events go back to the pool: far fewer made than recorded
    assert dev.created < 40


def test_an_epoch_end_waits_once_and_the_next_epoch_starts_a_new_timeline() -> None:
    dev = ScriptedDevice()
    steps = Reservoir(100)
    tl = GpuTimeline(dev, steps)
    dev.done_upto = -1
    two_steps(tl, dev)
    assert tl.end_epoch()[0] == 5 * MS
    assert dev.waited == [30 * MS]
    # the next epoch: its first arrival is the new zero; the 70 ms between epochs count nowhere
    at(dev, 100)
    tl.after_wait(5_000)
    at(dev, 104)
    tl.before_wait()
    wait, busy, copy, *_ = tl.end_epoch()
    assert (wait, busy, copy) == (0, 4 * MS, 0)
    assert list(steps.values)[-1] == 4 * MS


def test_copies_before_the_first_batch_count_but_the_gap_to_it_does_not() -> None:
    # to_device began the timeline mid-epoch: its copy comes before any arrival
    dev = ScriptedDevice()
    tl = GpuTimeline(dev, Reservoir(100))
    at(dev, 0)
    tl.copy_start()
    at(dev, 3)
    tl.copy_end(64, 0)
    tl.before_wait()  # not started: no request event
    at(dev, 50)
    tl.after_wait(9_000)
    at(dev, 60)
    tl.before_wait()
    wait, busy, copy, copies, nbytes, *_ = tl.end_epoch()
    assert (copy, copies, nbytes) == (3 * MS, 1, 64)
    assert (wait, busy) == (0, 10 * MS)

"""Device-side timing of a watched DataLoader: CUDA events, host-to-device copies.

The device is simulated (tests/fixtures/sim_device.py) for the driver calls alone: events,
the copy and the pinned check. The DataLoader, its workers, ioprobe.to_device, the timeline
and the model run for real, against kernels and link rates the test sets.
tests/integration/watch/test_watch_cuda.py runs the same paths on a real CUDA device.
"""

from __future__ import annotations

import gc
import json
import time
import weakref
from collections import namedtuple
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import ioprobe
from ioprobe.errors import BadInputError
from ioprobe.loaders import torch as adapter
from tests.fixtures.datasets import BurnDataset, SleepDataset
from tests.fixtures.sim_device import SimStream

pytestmark = pytest.mark.slow


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimStream:
    """A simulated CUDA device that watched loaders and to_device record their events on."""
    stream = SimStream()
    monkeypatch.setattr(adapter, "event_backend", lambda device: stream)
    return stream


def test_device_clock_sees_the_gpu_busy_while_the_host_waits_in_next(sim: SimStream) -> None:
    # Data takes about 8 x 6 ms per batch; each step queues a 40 ms kernel and returns at
    # once, so the host spends almost all its time in next() while the GPU is mostly busy.
    # Long steps keep the host's own time between a batch's arrival and its kernel (idle on
    # the device, but not waiting for data: ioprobe counts it as the step's) a sliver of
    # the truth's idle, even on a loaded machine.
    kernel = 0.040
    loader = ioprobe.watch(
        DataLoader(SleepDataset(240, 0.006, 65536), batch_size=8, num_workers=1), device="meta"
    )
    t0 = time.perf_counter()
    batches = 0
    for batch in loader:
        assert batch.device.type == "meta"
        if batches == 0:
            t0 = time.perf_counter()  # the timeline starts at the first batch too
        sim.launch(kernel)
        batches += 1
    sim.synchronize()
    span = time.perf_counter() - t0  # the device's span: from the first kernel to the last's end
    copy = 8 * 65536 * 4 / sim.pageable_rate
    rec = loader.run
    assert rec.watch is not None
    assert rec.watch.gpu_timing == "cuda events on sim:0"
    # truth: the device works kernel + copy per batch over that span
    truth = 1 - batches * (kernel + copy) / span
    assert rec.gpu_idle_fraction == pytest.approx(truth, abs=0.05)
    assert rec.gpu_idle_method is not None and rec.gpu_idle_method.startswith("cuda events")
    ep = rec.watch.epochs[0]
    assert ep.stall_seconds / ep.seconds > 0.8  # what the host clock alone would have said
    gpu = rec.stages.gpu
    assert gpu.capacity_samples_per_s == pytest.approx(8 / kernel, rel=0.1)
    assert gpu.method.startswith("cuda events")
    assert rec.watch.gpu_track is not None
    assert len(rec.watch.gpu_track.columns["start"]) == batches  # a step per batch


def run_copies(sim: SimStream, pin_memory: bool, floats: int = 262144) -> Any:
    # one worker: its torch runs single-threaded (in the main process torch's idle intra-op
    # threads would wake between slow copies, and their spin-up count as loading CPU)
    loader = ioprobe.watch(
        DataLoader(SleepDataset(160, 0.0, floats), batch_size=8, num_workers=1), device="meta"
    )
    sim.pinned = pin_memory
    for _ in loader:
        pass
    sim.synchronize()
    return loader.run


def test_pageable_copies_are_timed_at_the_link_rate(sim: SimStream) -> None:
    # copies of 17 ms: a host wake-up late by a fraction of a millisecond is noise
    sim.pageable_rate = 0.5e9
    rec = run_copies(sim, pin_memory=False)
    pc = rec.stages.pcie
    assert pc.bytes_per_sample == pytest.approx(262144 * 4, rel=1e-6)
    assert pc.pinned_fraction == 0.0
    assert pc.pinned_bytes_per_s is None
    assert pc.pageable_bytes_per_s == pytest.approx(0.5e9, rel=0.1)
    assert pc.capacity_samples_per_s == pytest.approx(0.5e9 / (262144 * 4), rel=0.1)
    ep = rec.watch.epochs[0]
    assert ep.h2d_copies == ep.batches == 20
    assert ep.h2d_bytes == 160 * 262144 * 4


def test_pinned_copies_are_told_apart_from_pageable_ones(sim: SimStream) -> None:
    sim.pinned_rate = 1e9
    rec = run_copies(sim, pin_memory=True)
    pc = rec.stages.pcie
    assert pc.pinned_fraction == 1.0
    assert pc.pinned_bytes_per_s == pytest.approx(1e9, rel=0.1)
    assert pc.pageable_bytes_per_s is None
    assert "100% of bytes pinned" in pc.method


def test_a_slow_pageable_link_is_the_bottleneck_and_pinning_is_recommended(
    sim: SimStream,
) -> None:
    sim.pageable_rate = 50e6  # 2 MiB batches: 42 ms each, far slower than making them
    rec = run_copies(sim, pin_memory=False, floats=65536)
    assert rec.bottleneck == "pcie"
    assert rec.stages.pcie.capacity_samples_per_s == pytest.approx(50e6 / 262144, rel=0.1)
    pin = [r for r in rec.recommendations if r.kind == "pin_memory"]
    assert pin, [r.text for r in rec.recommendations]
    assert pin[0].predicted_samples_per_s is not None
    assert pin[0].predicted_samples_per_s > 1.5 * (rec.predicted_samples_per_s or 0)

    pinned = run_copies(sim, pin_memory=True, floats=65536)
    assert not [r for r in pinned.recommendations if r.kind == "pin_memory"]


def test_to_device_in_the_loop_records_every_call_on_the_host_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a device without CUDA events: the real host-clock path, no simulation at all. On a GPU
    # machine an earlier test has initialised CUDA in this process, and a timeline would then
    # take the current CUDA device's events (and leave a copy to "meta" untimed); this test is
    # about a process that never touched CUDA.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    loader = ioprobe.watch(DataLoader(SleepDataset(64, 0.0, 1024), batch_size=8, num_workers=0))
    for x in loader:
        moved = ioprobe.to_device({"x": x, "y": x[:, 0]}, "meta")
        assert moved["x"].device.type == "meta"
    rec = loader.run
    ep = rec.watch.epochs[0]
    assert ep.h2d_copies == 8
    assert ep.h2d_bytes == 64 * (1024 + 1) * 4
    assert ep.h2d_seconds > 0
    assert rec.watch.gpu_timing == "host clock"
    assert ep.gpu_wait_seconds is None  # no device clock: GPU idle stays the host's
    assert rec.gpu_idle_method is not None and rec.gpu_idle_method.startswith("wall clock")
    assert rec.stages.pcie.method.startswith("host clock")
    assert rec.watch.gpu_track is None


def test_a_model_already_on_the_gpu_gets_device_idle_without_device_argument(
    sim: SimStream,
) -> None:
    loader = ioprobe.watch(DataLoader(BurnDataset(96, 0.0), batch_size=8, num_workers=0))
    for _ in loader:
        sim.launch(0.005)
        sim.synchronize()
    rec = loader.run
    assert rec.gpu_idle_method is not None and rec.gpu_idle_method.startswith("cuda events")
    assert rec.stages.gpu.capacity_samples_per_s == pytest.approx(8 / 0.005, rel=0.15)
    assert rec.stages.pcie.method.startswith("not measured: batches were not moved")


Pair = namedtuple("Pair", ["image", "label"])


class Movable:
    def __init__(self) -> None:
        self.moved_to: Any = None

    def to(self, device: Any, non_blocking: bool = False) -> Movable:
        self.moved_to = device
        return self


def test_to_device_keeps_the_batch_structure_and_leaves_other_objects_alone() -> None:
    m = Movable()
    batch = {
        "pair": Pair(torch.zeros(2, 3), torch.ones(2, dtype=torch.long)),
        "names": ["a", "b"],
        "ids": (torch.arange(2), "tag"),
        "custom": m,
        "n": 3,
    }
    out = ioprobe.to_device(batch, "meta")  # outside any watched loop: just moves
    assert isinstance(out, dict)
    assert isinstance(out["pair"], Pair)
    assert out["pair"].image.device.type == "meta"
    assert out["pair"].label.dtype == torch.long
    assert out["names"] == ["a", "b"]
    assert isinstance(out["ids"], tuple) and out["ids"][1] == "tag"
    assert out["ids"][0].device.type == "meta"
    assert out["custom"] is m and str(m.moved_to) == "meta"
    assert out["n"] == 3
    assert batch["pair"].image.device.type == "cpu"  # the user's batch is not modified


def test_a_device_that_cannot_be_used_is_a_clear_error() -> None:
    loader = DataLoader(BurnDataset(8, 0.0), batch_size=4)
    with pytest.raises(BadInputError, match="not a torch device"):
        ioprobe.watch(loader, device="warp-drive")
    # no CUDA here: say so; with CUDA, an index past the last device
    bad = "cuda:99" if torch.cuda.is_available() else "cuda"
    with pytest.raises(BadInputError, match="CUDA device"):
        ioprobe.watch(loader, device=bad)
    with pytest.raises(BadInputError, match="CUDA device"):
        ioprobe.to_device(torch.zeros(1), bad)


def batches_of(loader: Any) -> list[list[int]]:
    return [b.flatten().tolist() for b in loader]


def test_pin_memory_loader_gives_the_same_batches() -> None:
    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(
            BurnDataset(64, 0.0),
            batch_size=8,
            shuffle=True,
            num_workers=2,
            pin_memory=True,
            generator=torch.Generator().manual_seed(3),
        )

    with pytest.warns(UserWarning) if not torch.cuda.is_available() else nullcontext():
        plain = batches_of(make())
    watched = ioprobe.watch(make())
    with pytest.warns(UserWarning) if not torch.cuda.is_available() else nullcontext():
        got = batches_of(watched)
    assert got == plain
    assert watched.run.watch.loader["pin_memory"] == "True"


def test_distributed_sampler_set_epoch_reshuffles_through_the_wrapper() -> None:
    def make() -> DataLoader[torch.Tensor]:
        sampler = DistributedSampler(BurnDataset(40, 0.0), num_replicas=2, rank=1, seed=5)
        return DataLoader(BurnDataset(40, 0.0), batch_size=4, sampler=sampler, num_workers=2)

    plain, watched = make(), ioprobe.watch(make())
    orders = []
    for epoch in (0, 1):
        plain.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        watched.sampler.set_epoch(epoch)
        want = batches_of(plain)
        assert batches_of(watched) == want
        orders.append(want)
    assert orders[0] != orders[1]  # set_epoch really reshuffled
    assert all(sum(len(b) for b in o) == 20 for o in orders)  # this rank's half, each epoch
    assert len(watched.run.watch.epochs) == 2


def test_the_trace_and_summary_show_the_device_timeline_and_copies(sim: SimStream) -> None:
    from ioprobe.analysis.report import findings
    from ioprobe.render.facts import measurements
    from ioprobe.render.trace import render as render_trace

    loader = ioprobe.watch(
        DataLoader(SleepDataset(96, 0.001, 4096), batch_size=8, num_workers=1), device="meta"
    )
    for _ in loader:
        sim.launch(0.004)
    rec = loader.run
    assert rec.watch is not None
    events = json.loads(render_trace(rec, findings(rec)))["traceEvents"]
    dev = [ev for ev in events if ev["pid"] == 2 and ev["ph"] == "X"]
    steps = [ev for ev in dev if ev["name"].startswith("step ")]
    idle = [ev for ev in dev if ev["name"] == "idle: waiting for data"]
    copies = [ev for ev in dev if ev["name"] == "host-to-device copy"]
    assert len(steps) == len(copies) == 12
    ep = rec.watch.epochs[0]
    # rows are kept to the microsecond: up to 1 µs off per row
    assert sum(ev["dur"] for ev in idle) / 1e6 == pytest.approx(ep.gpu_wait_seconds, abs=12e-6)
    assert sum(ev["dur"] for ev in copies) / 1e6 == pytest.approx(ep.h2d_seconds, abs=12e-6)
    # each step starts where its copy ends, and the next wait where it ends
    for c, s in zip(copies, steps, strict=True):
        assert s["ts"] == pytest.approx(c["ts"] + c["dur"], abs=1.0)
    facts = dict(measurements(rec, findings(rec)))
    assert facts["host-to-device"].startswith("12 copies, 1.57 MB")  # 96 x 4,096 float32
    assert "0% from pinned memory" in facts["host-to-device"]
    assert "blocked in next()" in facts["host stall"]


def test_the_live_panel_shows_the_gpu_waiting_by_the_device_clock(sim: SimStream) -> None:
    # each batch takes about 8 x 3 ms to load and queues a 12 ms kernel: the GPU waits about
    # half the time while the host, which returns from each step at once, waits nearly all
    # of it; the panel must show the GPU's half, not the host's whole
    from ioprobe.monitor.live import panel
    from tests.fixtures.live_frames import frames_while

    kernel = 0.012
    loader = ioprobe.watch(
        DataLoader(SleepDataset(800, 0.003, 1024), batch_size=8, num_workers=1),
        device="meta",
        live=True,
    )
    frames, period, n = frames_while(loader, lambda b: sim.launch(kernel), sim.synchronize)
    assert len(frames) >= 2, f"{n} batches gave {len(frames)} frames"
    copy = 8 * 1024 * 4 / sim.pageable_rate
    truth = 1 - (kernel + copy) / period
    last = frames[-1]
    assert last.gpu_waiting == pytest.approx(truth, abs=0.08)
    assert last.stall is not None and last.stall > 0.8  # the host's clock alone
    assert last.samples_per_s == pytest.approx(8 / period, rel=0.1)
    gpu = {s.name: s for s in last.stages}["gpu"]
    assert gpu.capacity == pytest.approx(8 / kernel, rel=0.1)
    assert "device clock" in gpu.detail
    # the history keeps the device's wait too, and the drawing says which clock it shows
    assert last.stall_history[-1] == pytest.approx(truth, abs=0.15)
    from tests.unit.render.test_render_golden import text

    shown = text(panel(last, 80), width=80)
    assert f"GPU waiting {last.gpu_waiting:.0%}" in shown and "device clock" in shown
    assert f"blocked in next() {last.stall:.0%}" in shown


@pytest.mark.parametrize("live", [False, True], ids=["plain", "live"])
def test_a_dropped_watched_loader_is_freed_at_once_with_its_device_events(
    sim: SimStream, live: bool
) -> None:
    # Freed by reference counts alone, not left in a cycle for a later collection: a
    # collection that runs in a forked DataLoader worker would free the loader's CUDA
    # events there, where CUDA cannot run, and abort the worker (seen on an H100 when the
    # live panel's feed and the collector held each other).
    dataset = SleepDataset(64, 0.0, 16)
    loader = ioprobe.watch(
        DataLoader(dataset, batch_size=8, num_workers=1), device="meta", live=live
    )
    for _ in loader:
        sim.launch(0.001)
    sim.synchronize()
    assert loader.run.watch is not None
    data, collector = weakref.ref(dataset), weakref.ref(loader._collector)
    gc.disable()  # only reference counts may free them
    try:
        del loader, dataset
        assert data() is None and collector() is None
    finally:
        gc.enable()

"""The host-to-device probe: what the PCIe link carries, by copy size and kind of host memory.

For each size from 64 KiB to 256 MiB, each direction (host to device, device to host) and each
kind of host memory (pinned, pageable), the probe times copies with CUDA events on a stream of
its own and keeps the median of three trials, as nvbandwidth does. A trial repeats the copy
until it has moved at least ``TRIAL_BYTES``, so a 64 KiB copy measures the steady rate rather
than one launch. The link's generation and width are read from NVML *while* a large copy
runs: GPUs lower the link's generation when idle to save power, and an idle reading would
name a healthy link degraded.

Everything CUDA goes through ``collect.cuda_copy.Copier``; NVML through a ``link_reader``
callable. Both are thin seams the tests replace.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ioprobe import units
from ioprobe.capacity import copy_rate_at, pcie_from_rate, peak_copy_rate
from ioprobe.collect.cuda_copy import Copier, Direction
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.record import CopyPoint, PcieLink, PcieStage

KIB = 1 << 10
MIB = 1 << 20
SIZES = (64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
TRIALS = 3
TRIAL_BYTES = 64 * MIB  # each trial moves at least this much, in repeats of one size
MAX_REPS = 1000  # a 64 KiB trial is 1,000 copies, not 1,024: enough to amortise launches
# Per-lane transfer rate in GT/s and the line code's payload share, per PCIe generation.
# Generation 6 sends 256-byte FLITs of which 236 carry data (after CRC and FEC).
GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 236 / 256}
COMBOS: tuple[tuple[Direction, bool], ...] = (
    ("h2d", True),
    ("h2d", False),
    ("d2h", True),
    ("d2h", False),
)

LinkReader = Callable[[int], PcieLink | None]


def link_rate(gen: int | None, width: int | None) -> float | None:
    """Bytes/s one direction of a link can carry after line encoding: the ceiling for copies.

    Gen 5 x16 is 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s. Packet headers and flow
    control take a further 10-15%, so a healthy link's copies reach 80-90% of this figure.
    """
    if gen not in GT_PER_S or not width:
        return None
    return GT_PER_S[gen] * 1e9 * width * ENCODING[gen] / 8


def make_link(
    gen_current: int | None,
    gen_max: int | None,
    width_current: int | None,
    width_max: int | None,
) -> PcieLink:
    return PcieLink(
        gen_current=gen_current,
        gen_max=gen_max,
        width_current=width_current,
        width_max=width_max,
        theoretical_bytes_per_s=link_rate(gen_current, width_current),
        max_bytes_per_s=link_rate(gen_max, width_max),
    )


def nvml_link(cuda_index: int, nvml: Any = None) -> PcieLink | None:
    """The link of the GPU that CUDA calls ``cuda_index``, from NVML; None without NVML.

    NVML counts every GPU while CUDA counts the visible ones, so the index goes through
    ``CUDA_VISIBLE_DEVICES``. "Max" is what this GPU *in this slot* can reach
    (``nvmlDeviceGetMaxPcieLinkGeneration`` is bounded by the system's side), so current
    below max means the link trained down, not that the slot is older than the GPU.
    """
    from ioprobe.collect.gpu_sampler import cuda_handle

    try:
        if nvml is None:
            nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        h = cuda_handle(nvml, cuda_index)
        if h is None:
            return None
        return make_link(
            _try(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
            _try(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
            _try(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            _try(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
        )
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _try(fn: Callable[[Any], Any], handle: Any) -> int | None:
    try:
        value = fn(handle)
    except Exception:  # NotSupported on MIG slices and some virtual GPUs
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def _reps(size: int) -> int:
    return max(1, min(MAX_REPS, TRIAL_BYTES // size))


def measure_copies(
    copier: Copier,
    sizes: Sequence[int] = SIZES,
    budget_s: float = 10.0,
    link_reader: LinkReader | None = None,
    reporter: Reporter | None = None,
) -> tuple[list[CopyPoint], PcieLink | None]:
    """Median-of-three copy rates by size, direction and host memory, and the busy link.

    Sizes run smallest first; when the budget runs out the remaining sizes are left out
    rather than every size measured badly. The largest size's buffers are allocated once and
    sliced. The link is read during a queued burst of pinned copies (see the module note).
    """
    rep = reporter or SilentReporter()
    largest = max(sizes)
    pinned, pageable = copier.host(largest, True), copier.host(largest, False)
    device = copier.device(largest)
    hosts = {True: pinned, False: pageable}
    _warm_up(copier, pinned, device, min(largest, 16 * MIB))
    link = _link_under_load(copier, pinned, device, largest, link_reader)
    points: list[CopyPoint] = []
    deadline = time.perf_counter() + budget_s
    for i, size in enumerate(sorted(sizes)):
        if time.perf_counter() > deadline and points:
            break
        for direction, is_pinned in COMBOS:
            host = hosts[is_pinned]
            points.append(_measure_point(copier, host, is_pinned, device, size, direction))
        rep.update((i + 1) / len(sizes), units.memory(size))
    return points, link


def _measure_point(
    copier: Copier, host: Any, is_pinned: bool, device: Any, size: int, direction: Direction
) -> CopyPoint:
    """One size, direction and kind of host memory: an untimed copy, then the median of
    ``TRIALS`` timed trials."""
    # untimed: the first copy of a size and direction may pay one-off costs the trials must not
    copier.wait(copier.start(host, device, size, direction, 1))
    reps = _reps(size)
    rates = []
    for _ in range(TRIALS):
        seconds = copier.wait(copier.start(host, device, size, direction, reps))
        rates.append(size * reps / seconds if seconds > 0 else float("inf"))
    return CopyPoint(
        direction=direction,
        memory="pinned" if is_pinned else "pageable",
        size_bytes=size,
        bytes_per_s=statistics.median(rates),
        trials=rates,
    )


def _warm_up(copier: Copier, pinned: Any, device: Any, size: int, device_s: float = 0.2) -> None:
    """Copy for ``device_s`` of device time before measuring: an idle GPU runs low clocks
    and a low link generation, and its first copies read up to 30% slow."""
    spent, deadline = 0.0, time.perf_counter() + 2 * device_s + 0.5
    while spent < device_s and time.perf_counter() < deadline:
        spent += copier.wait(copier.start(pinned, device, size, "h2d", 8))


def _link_under_load(
    copier: Copier, pinned: Any, device: Any, size: int, link_reader: LinkReader | None
) -> PcieLink | None:
    if link_reader is None:
        return None
    pending = copier.start(pinned, device, size, "h2d", max(1, (512 * MIB) // size))
    try:
        return link_reader(copier.index)
    finally:
        copier.wait(pending)


def pcie_stage(
    points: Sequence[CopyPoint],
    link: PcieLink | None,
    per_sample: float | None,
    batch: int,
    basis: str,
) -> PcieStage:
    """The pcie stage from the probe: the capacity a loader gets copying one batch at a time.

    A DataLoader copies a whole batch per ``.to(device)``, so the rate that matters is the
    measured rate at the batch's size (``per_sample x batch`` bytes), from pinned memory,
    which is what ``pin_memory=True`` gives; the pageable rate is kept beside it for the
    advice. ``basis`` says whether ``per_sample`` is the decoded size or the file size.
    """
    stage = PcieStage(method="not measured: no copies completed", link=link, copies=list(points))
    top = peak_copy_rate(points, "h2d", "pinned")
    if link is not None and link.theoretical_bytes_per_s and top:
        stage.efficiency = top / link.theoretical_bytes_per_s
    if not points:
        return stage
    size = (per_sample or 0) * batch or float(max(p.size_bytes for p in points))
    stage.pinned_bytes_per_s = copy_rate_at(points, "h2d", "pinned", size)
    stage.pageable_bytes_per_s = copy_rate_at(points, "h2d", "pageable", size)
    stage.bytes_per_s = stage.pinned_bytes_per_s
    stage.method = "probe: pinned host-to-device copies, CUDA events"
    if per_sample:
        stage.bytes_per_sample = per_sample
        stage.capacity_samples_per_s = pcie_from_rate(stage.pinned_bytes_per_s, per_sample)
        stage.method = (
            f"probe: pinned copies of one batch ({batch} x {units.size(per_sample)}, "
            f"{basis}), CUDA events"
        )
    return stage


__all__ = [
    "SIZES",
    "link_rate",
    "make_link",
    "measure_copies",
    "nvml_link",
    "pcie_stage",
]

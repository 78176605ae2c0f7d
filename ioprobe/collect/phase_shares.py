"""Each phase of the probe: its order, its share of what the time budget leaves the phases,
and the least time it takes whatever its share (``budget.plan_phases`` splits the budget
with them)."""

from __future__ import annotations

from ioprobe.collect import cpu as cpu_mod
from ioprobe.collect import decode_paths as paths_mod
from ioprobe.collect import device_limit as dl_mod
from ioprobe.collect import storage as st_mod
from ioprobe.collect import workers as workers_mod

COLD_MAX_BYTES = 4 << 30
WARM_MAX_BYTES = 1 << 30
PHASES = (
    "cold",
    "warm",
    "direct",
    "disk_to_gpu",
    "cpu",
    "pcie",
    "decode",
    "pipeline",
)  # as they run
MIN_PHASE_S = 0.2
# least times of the GPU phases, whatever their share: the disk-to-GPU path's pinned buffers
# and its eviction; the host-to-device probe's set-up (its 256 MiB buffers, 0.14-0.2 s to pin
# and touch on the H100 host; its warm-up, 0.2 s of copies; the link read under load), which
# comes out of its share, and a few sizes
D2G_LEAST_S = 0.75
PCIE_SETUP_S = 0.5
PCIE_LEAST_S = 1.0
# the device limit's least: both block sizes over their first depths
DIRECT_LEAST_S = 4 * dl_mod.MIN_POINT_S
# what a phase spends around its measuring: reading the decode inputs, a pool's shutdown,
# reads in flight at the end, a storage pass's evictions
PHASE_SLACK_S = 0.25
# a local storage pass's selection read once, for its least time: a fast local disk's rate,
# and the evictions and residency checks around it
FAST_READ_BYTES_PER_S = 1e9
EVICT_S = 0.1


def shares(
    remote: bool,
    passes: list[str],
    emulated: bool,
    dali: bool = False,
    device: bool = False,
    direct: bool = False,
) -> dict[str, float]:
    """Each phase's share of the time the budget leaves them (not yet adding up to 1)."""
    share = {"cold": 0.35, "warm": 0.2, "cpu": 0.2, "pipeline": 0.25}
    if direct and not remote:
        share["direct"] = 0.2  # the device limit: two block sizes of up to 7 depths
    if dali:
        share["decode"] = 0.2  # DALI's paths, beside Pillow's in the cpu share
    if device:
        share["pcie"] = 0.1  # the host-to-device probe: about 2 s on a healthy link
        if not remote:
            share["disk_to_gpu"] = 0.1  # storage into pinned buffers and on to the device
    if remote:
        share["cold"] += share.pop("warm")  # one pass: no page cache to compare with
    else:
        for p in ("cold", "warm"):
            if p not in passes:
                share.pop(p)
    if not emulated:
        share.pop("pipeline")
    return share


def floors(
    usable: int, workers: int, gpu_decode: bool, data_bytes: int, remote: bool
) -> dict[str, float]:
    """The least time each phase takes whatever its share: a storage pass one level, or less
    where a local selection is read sooner (at ``FAST_READ_BYTES_PER_S``: the sample's 96 MB
    read at 0.8-6 GB/s here), the CPU sweep its pool's start and ``cpu.MIN_LEVEL_S`` per
    level, each DALI path ``MIN_PATH_S`` (the mixed decoder's warm-up ``GPU_WARMUP_S`` more),
    the end-to-end run its pool's start and a level's time. A slower disk than that takes
    longer in its storage passes, which the margin holds."""
    level = st_mod.MIN_LEVEL_S

    def read_once(cap: int) -> float:
        if remote:
            return level
        return min(level, EVICT_S + min(data_bytes, cap) / FAST_READ_BYTES_PER_S)

    return {
        "cold": read_once(COLD_MAX_BYTES),
        "warm": read_once(WARM_MAX_BYTES),
        "direct": DIRECT_LEAST_S,
        "disk_to_gpu": D2G_LEAST_S,
        "cpu": cpu_mod.least_seconds(usable) + PHASE_SLACK_S,
        "pcie": PCIE_LEAST_S,
        "decode": paths_mod.least_path_seconds("cpu")
        + (paths_mod.least_path_seconds("mixed") if gpu_decode else 0.0)
        + PHASE_SLACK_S,
        "pipeline": workers_mod.pool_start_s(workers) + level + PHASE_SLACK_S,
    }


__all__ = [
    "COLD_MAX_BYTES",
    "D2G_LEAST_S",
    "DIRECT_LEAST_S",
    "EVICT_S",
    "FAST_READ_BYTES_PER_S",
    "MIN_PHASE_S",
    "PCIE_LEAST_S",
    "PCIE_SETUP_S",
    "PHASES",
    "PHASE_SLACK_S",
    "WARM_MAX_BYTES",
    "floors",
    "shares",
]

"""Density guidance: how many bytes and reads one GPU asks of storage, and which storage
classes deliver them at this sample size.

A sample's size decides what kind of storage a pipeline needs. Small samples (low density)
ask for many reads of few bytes each: every read pays a request's latency and counts against
the device's IOPS, so storage delivers a fraction of its sequential bandwidth and the class
that fits is the one with the most IOPS and the lowest latency (NVMe). Large samples (high
density) ask for few reads of many bytes: they reach the sequential bandwidth, so a network
filer or object storage with enough parallel connections fits as well as local flash, and
the link's bandwidth per GPU is the figure to buy. The figures come from the same model the
sizing grid uses (``catalog.read_limits``), so the guidance can't disagree with the table.
"""

from __future__ import annotations

from ioprobe.analysis.catalog import read_limits
from ioprobe.capacity import density_class
from ioprobe.record import DensityGuide, DensityRow, SizeInputs, StorageClassInfo

SMALL_CONTRAST = 16 * 1024  # a low-density sample: a small JPEG, a text record
LARGE_CONTRAST = 16 * 1024 * 1024  # a high-density one: a 3D volume, a video clip
CONTRAST_SPLIT = 1024 * 1024  # at or above this, the contrast is a small sample
BANDWIDTH_BOUND = 0.9  # delivering this share of its bandwidth, a class is bandwidth-bound


def delivery(cls: StorageClassInfo, sample_bytes: float, in_flight: int) -> DensityRow:
    """What ``cls`` delivers to one node reading whole samples of ``sample_bytes`` with
    ``in_flight`` reads outstanding, its share of the datasheet bandwidth, and the limit
    that sets it."""
    limits = read_limits(cls, sample_bytes, in_flight)
    name = min(limits, key=lambda k: limits[k])
    rate = limits[name]
    # object storage's bandwidth is per connection, and a node opens one per read in flight
    full = cls.seq_read_bytes_per_s * (max(in_flight, 1) if cls.scope == "object" else 1)
    share = min(rate / full, 1.0)
    return DensityRow(
        storage=cls.name,
        bytes_per_s=rate,
        share_of_bandwidth=share,
        # a request limit that costs less than a tenth of the bandwidth is not what to buy for
        limit=name if share < BANDWIDTH_BOUND else "bandwidth",
    )


def density_guide(inp: SizeInputs, classes: list[StorageClassInfo], node_gpus: int) -> DensityGuide:
    """The dataset's density class, one GPU's appetite in reads and bytes per second (fully
    fed and at the target utilisation), and each class's delivery at this sample size and at
    a size of the other regime, so a reader sees what changes with density."""
    size = inp.sample_bytes
    contrast = SMALL_CONTRAST if size >= CONTRAST_SPLIT else LARGE_CONTRAST
    return DensityGuide(
        sample_bytes=size,
        density=density_class(size),
        gpu_samples_per_s=inp.gpu_samples_per_s,
        gpu_bytes_per_s=inp.gpu_samples_per_s * size,
        target_bytes_per_s=inp.gpu_samples_per_s * inp.target_utilization * size,
        node_gpus=node_gpus,
        rows=[delivery(c, size, inp.in_flight) for c in classes],
        contrast_bytes=float(contrast),
        contrast_rows=[delivery(c, contrast, inp.in_flight) for c in classes],
    )


__all__ = ["delivery", "density_guide"]

"""The numbers behind a report's key measurements, computed once from the record: batches and
stall percentiles, the copies a watched run timed, DALI's totals, the NVML series' means and
peaks, the decode paths against Pillow, the probe's peak copy rates, a what-if's gain. The
renderers put them in words (``ioprobe.render.facts``) and compute nothing themselves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ioprobe.analysis.decode_paths import current_path, measured
from ioprobe.capacity import peak_copy_rate, single_thread_rate
from ioprobe.record import DaliData, DecodePath, GpuSeries, RunRecord, WatchData, WatchEpoch


@dataclass
class Delivery:
    """A watched run's batches, and how long the consumer waited for one."""

    batches: int
    epochs: int
    stall_p50_ms: float | None = None
    stall_p95_ms: float | None = None
    # the host clock's stall share over the epochs the device's own clock also timed
    host_stall_share: float | None = None


@dataclass
class CopyTotals:
    """The host-to-device copies a watched run timed (``ioprobe.to_device``)."""

    copies: int
    bytes: int
    seconds: float
    bytes_per_s: float | None
    pinned_share: float


@dataclass
class DaliTotals:
    thread_cpu_seconds: float
    threads: int
    fetch_ms: float | None  # per sample a reader fetched


@dataclass
class SeriesSummary:
    """The NVML series in a line: how often it read, and the readings looked at first."""

    rows: int
    hz: float | None  # None: no sampling interval recorded
    sm_mean: float | None
    pcie_rx_peak: float | None  # bytes/s
    power_mean: float | None  # W


@dataclass
class DecodeRow:
    path: DecodePath
    vs_pillow: float | None  # its rate over Pillow's, both measured on the same images


@dataclass
class CopyPeak:
    """A direction's best copy rate over all sizes (bytes/s), from each kind of memory."""

    direction: str  # h2d, d2h
    pinned: float
    pageable: float | None


@dataclass
class BlockBest:
    """A block size's best point of the device-limit sweep."""

    block_bytes: int
    read_bytes_per_s: float
    reads_per_s: float
    depth: int


@dataclass
class Headroom:
    """The device's direct reads beside the loader-like cold pass: how much more the device
    gives, and which of the levers the sweep shows would buy it."""

    small: BlockBest | None
    large: BlockBest | None
    loader_bytes_per_s: float | None  # the cold pass's best (None: no cold pass)
    loader_depth: int | None  # the threads it took
    ratio: float | None  # large block's best over the loader's
    # the device at the loader's own depth, large blocks: what reads past the page cache
    # (direct I/O, GPUDirect Storage) give with nothing else changed
    at_loader_depth: float | None
    levers: list[str] = field(default_factory=list)


@dataclass
class KeyNumbers:
    delivery: Delivery | None = None
    copies: CopyTotals | None = None
    dali: DaliTotals | None = None
    series: SeriesSummary | None = None
    decode: list[DecodeRow] = field(default_factory=list)
    decode_in_use: str | None = None
    copy_peaks: list[CopyPeak] = field(default_factory=list)
    # the storage pass's rate beside the disk-to-GPU path: one thread as the path reads, and
    # that pass's cache; the cache is None where the stage's best rate stands in
    storage_beside_path: tuple[float, str | None] | None = None
    whatif_gain: float | None = None  # predicted over the run it started from
    headroom: Headroom | None = None  # the device limit beside the loader's reads


def key_numbers(rec: RunRecord) -> KeyNumbers:
    w = rec.watch
    return KeyNumbers(
        delivery=delivery(w) if w is not None else None,
        copies=copy_totals(w.epochs) if w is not None else None,
        dali=dali_totals(rec.dali) if rec.dali is not None else None,
        series=series_summary(rec.gpu_series),
        decode=decode_rows(rec),
        decode_in_use=current_path(rec) if rec.stages.cpu.decode_paths else None,
        copy_peaks=copy_peaks(rec),
        storage_beside_path=storage_beside_path(rec),
        whatif_gain=whatif_gain(rec),
        headroom=device_headroom(rec),
    )


# a lever is named where it buys at least this much over what the loader's reads got
LEVER_GAIN = 1.1


def device_headroom(rec: RunRecord) -> Headroom | None:
    """The device-limit sweep against the cold pass (the reads a loader makes on a first
    epoch): each block size's best, the large block's best over the loader's rate, and the
    levers the sweep itself shows: more reads in flight (the device's rate at the loader's
    depth is below its best at a deeper one), reads past the page cache (direct reads at the
    loader's depth beat its buffered ones). Each lever is named only where it buys 10% or
    more; None where the sweep did not run or read nothing."""
    dev = rec.stages.storage.device
    if dev is None or not dev.sweep:
        return None
    blocks = sorted({p.block_bytes for p in dev.sweep})
    best = {
        b: max((p for p in dev.sweep if p.block_bytes == b), key=lambda p: p.read_bytes_per_s)
        for b in blocks
    }

    def summary(b: int) -> BlockBest:
        p = best[b]
        return BlockBest(b, p.read_bytes_per_s, p.reads_per_s, p.queue_depth)

    large = summary(blocks[-1]) if len(blocks) > 1 or blocks[0] > 4096 else None
    small = summary(blocks[0]) if blocks[0] == 4096 else None
    cold = rec.stages.storage.cold
    rate = cold.read_bytes_per_s if cold is not None else None
    depth = cold.best_concurrency if cold is not None else None
    out = Headroom(small, large, rate, depth, None, None)
    if large is None or not rate:
        return out
    out.ratio = large.read_bytes_per_s / rate
    same = [p for p in dev.sweep if p.block_bytes == large.block_bytes and p.queue_depth == depth]
    if same:
        out.at_loader_depth = same[0].read_bytes_per_s
        if out.at_loader_depth >= LEVER_GAIN * rate:
            out.levers.append("direct")
        if large.read_bytes_per_s >= LEVER_GAIN * out.at_loader_depth and large.depth > (
            depth or 0
        ):
            out.levers.append("depth")
    return out


def share_text(x: float) -> str:
    """A share for a sentence: whole percents, "under 1%" where rounding would say 0% of
    something that happened."""
    return "under 1%" if 0 < x < 0.005 else f"{x:.0%}"


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank ``q`` of the sorted values (no interpolation: a value that was seen)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def delivery(w: WatchData) -> Delivery:
    # an entry may stand for several epochs merged past the record's cap
    epochs = sum(e.merged for e in w.epochs)
    out = Delivery(batches=sum(e.batches for e in w.epochs), epochs=epochs)
    if w.stall_ms.values:  # a count without values (a damaged record) has no percentiles
        out.stall_p50_ms = percentile(w.stall_ms.values, 0.5)
        out.stall_p95_ms = percentile(w.stall_ms.values, 0.95)
    timed = [e for e in w.epochs if e.gpu_wait_seconds is not None]
    wall = sum(e.seconds for e in timed)
    if wall > 0:
        out.host_stall_share = sum(e.stall_seconds for e in timed) / wall
    return out


def copy_totals(eps: Sequence[WatchEpoch]) -> CopyTotals | None:
    nbytes = sum(e.h2d_bytes for e in eps)
    if not nbytes:
        return None
    secs = sum(e.h2d_seconds for e in eps)
    return CopyTotals(
        copies=sum(e.h2d_copies for e in eps),
        bytes=nbytes,
        seconds=secs,
        bytes_per_s=nbytes / secs if secs > 0 else None,
        pinned_share=sum(e.h2d_pinned_bytes for e in eps) / nbytes,
    )


def dali_totals(d: DaliData) -> DaliTotals:
    return DaliTotals(
        thread_cpu_seconds=sum(d.threads.values()),
        threads=len(d.threads),
        fetch_ms=d.read_seconds / d.reads * 1e3 if d.reads else None,
    )


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def series_summary(s: GpuSeries | None) -> SeriesSummary | None:
    """None without a series, or when the sampler got nothing (its status says why)."""
    if s is None or not s.columns.get("t"):
        return None
    cols = s.columns
    rx = [v for v in cols.get("pcie_rx_bytes_per_s", []) if v is not None]
    return SeriesSummary(
        rows=len(cols["t"]),
        hz=1 / s.interval_s if s.interval_s > 0 else None,
        sm_mean=_mean(cols.get("sm_util", [])),
        pcie_rx_peak=max(rx) if rx else None,
        power_mean=_mean(cols.get("power_w", [])),
    )


def decode_rows(rec: RunRecord) -> list[DecodeRow]:
    base = measured(rec, "pillow")
    rows = []
    for p in rec.stages.cpu.decode_paths:
        ratio = None
        if base is not None and p is not base and base.samples_per_s and p.samples_per_s:
            ratio = p.samples_per_s / base.samples_per_s
        rows.append(DecodeRow(path=p, vs_pillow=ratio))
    return rows


def copy_peaks(rec: RunRecord) -> list[CopyPeak]:
    """Each direction's best pinned and pageable copy; a direction not measured is left out."""
    copies = rec.stages.pcie.copies
    out = []
    for direction in ("h2d", "d2h"):
        pinned = peak_copy_rate(copies, direction, "pinned")
        if pinned is not None:
            out.append(CopyPeak(direction, pinned, peak_copy_rate(copies, direction, "pageable")))
    return out


def storage_beside_path(rec: RunRecord) -> tuple[float, str | None] | None:
    """The storage pass's rate to set beside the disk-to-GPU path: one thread, as the path
    reads, in the same page-cache state where that pass ran; the best rate where no one-thread
    level is."""
    path = rec.stages.pcie.disk_to_gpu
    if path is None:
        return None
    st = rec.stages.storage
    one = single_thread_rate(st, path.cache == "cold")
    if one is not None:
        return one
    return (st.read_bytes_per_s, None) if st.read_bytes_per_s else None


def whatif_gain(rec: RunRecord) -> float | None:
    w = rec.whatif
    if w is None:
        return None
    was = w.base_measured_samples_per_s or w.base_predicted_samples_per_s
    return rec.predicted_samples_per_s / was if was else None


__all__ = [
    "BlockBest",
    "CopyPeak",
    "CopyTotals",
    "DaliTotals",
    "DecodeRow",
    "Delivery",
    "Headroom",
    "KeyNumbers",
    "SeriesSummary",
    "key_numbers",
    "percentile",
]

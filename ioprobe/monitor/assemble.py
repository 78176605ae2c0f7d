"""The watched run's record, assembled from what the collector accumulated (``record``):
functions of its buffers (the batch log laid flat, the reservoirs, the worker series, the
kept spans), run once when the record is read, never per batch."""

from __future__ import annotations

import dataclasses
import os
import time
from array import array
from typing import Protocol

from ioprobe import capacity
from ioprobe._version import __version__
from ioprobe.capacity import steady, worker_epochs
from ioprobe.collect.dataset import is_remote
from ioprobe.collect.timeline import Series
from ioprobe.monitor.gpu_side import GpuSide
from ioprobe.monitor.mapped import MappedFiles
from ioprobe.monitor.reservoir import Heaviest, Reservoir
from ioprobe.monitor.stages import Measured
from ioprobe.record import (
    BatchLog,
    DatasetProfile,
    Distribution,
    HeavySample,
    LoaderSettings,
    RankInfo,
    ReadScaling,
    RunRecord,
    SampleCosts,
    Stages,
    Track,
    WatchData,
    WatchEpoch,
    WorkerStats,
)
from ioprobe.redact import redact_url

# the batch log's columns, one row per batch laid flat in an array("q"): request, arrival,
# ready, worker, work ns, slowest sample ns, samples, epoch, CPU ns, run-queue ns, process CPU ns
LOG_COLUMNS = 11


class Collected(Protocol):
    """What ``record`` reads of a collector (``ioprobe.monitor.collector.WatchCollector``)."""

    @property
    def adapter(self) -> Adapter: ...

    device: str | None
    batch_size: int | None
    dataset_len: int | None
    created: str
    started: float  # perf_counter at the collector's start
    origin: int  # the run's time zero, perf_counter_ns
    epochs: list[WatchEpoch]
    workers: dict[int, WorkerStats]
    stall: Reservoir
    step: Reservoir
    sample: Reservoir
    sample_cpu: Reservoir
    sample_bytes: Reservoir
    heaviest: Heaviest
    log: array[int]
    log_dropped: int
    main: Series
    worker_series: dict[int, Series]
    spans: list[tuple[int, int, bytes, bytes, int]]
    mapped: MappedFiles
    gpu: GpuSide
    next_cpu_ns: int
    next_cpu_calls: int
    worker_private: int | None
    batch_bytes: int | None
    checked_scaling: ReadScaling | None

    def kept_notes(self) -> list[str]: ...

    def rank(self) -> RankInfo | None: ...


class Adapter(Protocol):
    """The framework's side ``record`` asks for (``ioprobe.monitor.collector.Adapter``)."""

    settings: LoaderSettings
    description: dict[str, str]

    def stages(self, m: Measured) -> tuple[Stages, list[str]]: ...

    def complete(self, record: RunRecord) -> None: ...


def epochs_merged(epochs: list[WatchEpoch]) -> int:
    """The epochs held in merged entries (``WatchData.epochs_merged``)."""
    return sum(e.merged for e in epochs if e.merged > 1)


def kept_notes(
    epochs: list[WatchEpoch], begun: int, head: int, log_rows: int, log_dropped: int
) -> list[str]:
    """What the record says of the runs too long to keep one by one: epochs merged past
    the collector's cap on entries, batches past the batch log's rows."""
    out = []
    merged = epochs_merged(epochs)
    if merged:
        most = max(e.merged for e in epochs)
        out.append(
            f"{begun:,} epochs ({sum(e.batches for e in epochs):,} "
            f"batches): the first {head} and the last are kept one by one, "
            f"{merged:,} others merged in entries of up to {most:,} consecutive epochs "
            "(their figures summed; per-epoch figures there are the entries' means)"
        )
    if log_dropped:
        out.append(
            f"the batch log keeps the first {log_rows:,} batches one by one "
            f"({log_dropped:,} later ones are in the totals, reservoirs and "
            "timelines only): the queue and loader replays read those"
        )
    return out


def delivered(epochs: list[WatchEpoch]) -> float | None:
    """Samples/s delivered in steady state: the first round of batches of each epoch
    waits for worker start-up and arrives bunched, so it is left out (an epoch too short
    for it counts whole)."""
    ok = steady(epochs)
    n = sum(e.samples - e.startup_samples for e in ok)
    wall = sum(e.seconds - e.startup_seconds for e in ok)
    return n / wall if wall > 0 else None


def dataset(
    settings: LoaderSettings,
    dataset_len: int | None,
    epochs: list[WatchEpoch],
    read_total: int,
    mean_bytes: float,
) -> DatasetProfile:
    samples = sum(e.samples for e in epochs)
    name, source = redact_url(settings.dataset), settings.source
    return DatasetProfile(
        target=f"{name} ({source})" if source else name,
        remote=is_remote(source),
        files=dataset_len if dataset_len is not None else samples,
        bytes=read_total,
        sample_bytes_mean=mean_bytes,
        # no bytes seen is no size, not the smallest class
        density=capacity.density_class(mean_bytes) if samples and mean_bytes else "unknown",
    )


def sample_costs(
    sample: Reservoir,
    sample_cpu: Reservoir,
    sample_bytes: Reservoir,
    heavy: list[tuple[int, int, int, int, int, int]],
    iterable: bool,
) -> SampleCosts | None:
    if not sample.count:  # no worker reported per-sample times (DALI)
        return None
    metered = sample_bytes.count > 0  # some batch read through the metered opener
    heaviest = [
        HeavySample(
            index=index,
            worker=worker,
            epoch=epoch,
            wall_ms=wall / 1e6,
            cpu_ms=cpu / 1e6,
            bytes=nbytes if metered and nbytes >= 0 else None,
        )
        for wall, cpu, nbytes, index, worker, epoch in sorted(heavy, reverse=True)
    ]
    return SampleCosts(
        cpu_ms=sample_cpu.to_record(),
        bytes=sample_bytes.to_record() if metered else Distribution(),
        heaviest=heaviest,
        index_kind=("position in its worker's stream" if iterable else "dataset index"),
    )


def batch_log(log: array[int], origin: int, dropped: int) -> BatchLog | None:
    if not log:
        return None
    c = LOG_COLUMNS

    def times(k: int) -> list[float]:
        return [round((v - origin) / 1e9, 6) for v in log[k::c]]

    return BatchLog(
        request=times(0),
        arrival=times(1),
        ready=times(2),
        worker=list(log[3::c]),
        work_ms=[round(v / 1e6, 4) for v in log[4::c]],
        slowest_ms=[round(v / 1e6, 4) for v in log[5::c]],
        samples=list(log[6::c]),
        epoch=list(log[7::c]),
        cpu_ms=[round(v / 1e6, 4) for v in log[8::c]],
        runqueue_ms=[round(v / 1e6, 4) for v in log[9::c]],
        process_cpu_ms=[round(v / 1e6, 4) for v in log[10::c]],
        dropped=dropped,
    )


def end_first_round(ep: WatchEpoch) -> None:
    """Keep what an epoch's workers measured by the end of its first round of batches (one
    per worker: their start-up), which its steady-state figures leave out."""
    ep.startup_metered_read_seconds = ep.metered_read_seconds
    ep.startup_metered_open_seconds = ep.metered_open_seconds
    ep.startup_read_chars = ep.read_chars
    ep.startup_socket_bytes = ep.socket_bytes
    ep.startup_read_bytes = ep.read_bytes
    ep.startup_sample_wall_seconds = ep.sample_wall_seconds
    ep.startup_sample_cpu_seconds = ep.sample_cpu_seconds
    ep.startup_runqueue_seconds = ep.runqueue_seconds


def sample_spans(spans: list[tuple[int, int, bytes, bytes, int]]) -> list[capacity.SampleSpan]:
    """Each kept sample's span and blocked time. A worker's samples ran back to back
    before its collate, so the batch's end and their wall times place them; the batch's
    run-queue wait is shared evenly. Each worker's first batch (start-up, imports) is
    left out."""
    out: list[capacity.SampleSpan] = []
    seen: set[int] = set()
    for worker, end, wall_b, cpu_b, runq in spans:
        if worker not in seen:
            seen.add(worker)
            continue
        wall, cpu = array("q", wall_b), array("q", cpu_b)
        share = runq // max(len(wall), 1)
        for w, c in zip(reversed(wall), reversed(cpu), strict=False):
            out.append(capacity.SampleSpan(worker, end - w, end, max(w - c - share, 0)))
            end -= w
    return out


def tracks(main: Series, worker_series: dict[int, Series], origin: int) -> list[Track]:
    if not origin:
        return []
    tracks = [main.to_record("main process", None, origin)]
    for w in sorted(worker_series):
        name = "loading in the main process" if w < 0 else f"worker {w}"
        tracks.append(worker_series[w].to_record(name, w, origin))
    return tracks


def bytes_read(
    epochs: list[WatchEpoch], mapped: int, dataset_len: int | None
) -> tuple[int, float, str]:
    """Bytes the loader read, per sample (0 when below what IPC alone accounts for), and
    how they were seen (``WatchData.bytes_seen``). Metered reads also count in rchar when
    they are local, and over sockets when remote: never add them. Metered bytes are the
    dataset's by construction; the workers' rchar and socket bytes also hold what their
    first samples set up, so their per-sample figures come from the steady batches. A
    dataset that downloads a file and then reads it counts in both: the larger stands.
    Where the steady batches read() nothing, the data files the workers mapped stand in
    (``capacity.mapped_bytes_per_sample``): the bytes are then the files' size, not an
    epoch's reads; but a reader that downloads its chunks over a socket and maps them
    (litdata from S3) received them, and what it received stands."""
    eps = worker_epochs(epochs)
    samples = sum(e.samples for e in eps)
    metered = sum(e.metered_bytes for e in eps)
    if metered:
        return metered, metered / samples if samples else 0.0, "metered"
    received = capacity.socket_bytes_per_sample(eps)
    if received > 0 and received >= capacity.file_bytes_per_sample(eps):
        return sum(e.socket_bytes for e in eps), received, "socket"
    read_chars = sum(e.read_chars for e in eps)
    held = dataset_len or max((e.samples for e in eps), default=0)
    by_map = capacity.mapped_bytes_per_sample(mapped, held)
    if by_map > 0 and capacity.steady_read_bytes_per_sample(eps) == 0.0:
        return mapped, by_map, "mmap"
    per_sample = capacity.file_bytes_per_sample(eps)
    if per_sample > 0:
        return read_chars, per_sample, "read"
    return read_chars, 0.0, "none"


def with_check(run: ReadScaling | None, checked: ReadScaling | None) -> ReadScaling | None:
    """The run's read scaling, or where it could not tell (no exponent) and a read check
    after the run did: the check's curve, at the run's own reads in flight (what its
    samples' blocked times were measured at)."""
    if (
        checked is None
        or checked.exponent is None
        or (run is not None and run.exponent is not None)
    ):
        return run
    if run is None:
        return checked
    return dataclasses.replace(
        checked,
        reads_in_flight_mean=run.reads_in_flight_mean,
        reads_in_flight_max=max(run.reads_in_flight_max, checked.reads_in_flight_max),
    )


def record(col: Collected) -> RunRecord:
    """The record of what ``col`` accumulated: the stage capacities by its adapter's rules,
    the GPU's idle and busy shares, the buffers written out, the notes on what was kept."""
    from ioprobe.collect.hostinfo import host_info

    host = host_info(None)
    usable = host.usable_cores or os.cpu_count() or 1
    turned_note = col.mapped.note()
    mapped = col.mapped.total()
    read_total, mean_bytes, seen = bytes_read(col.epochs, mapped[0], col.dataset_len)
    scaling = with_check(capacity.read_scaling(sample_spans(col.spans)), col.checked_scaling)
    stages, notes = col.adapter.stages(measured(col, usable, mean_bytes, seen, scaling))
    idle, idle_method = col.gpu.idle(col.epochs)
    if turned_note and seen == "mmap":
        notes.append(turned_note)
    if col.gpu.error:
        notes.append(f"the device timeline stopped ({col.gpu.error}): host clock used")
    notes += col.kept_notes()
    if scaling is not None and scaling.checked and scaling.exponent is not None:
        notes.append(
            f"reads scale with readers as a {scaling.limit} limit (throughput ~ readers ** "
            f"{scaling.exponent:.2f}), measured by {scaling.checked}: the run's own reads in "
            "flight varied too little to tell"
        )
    col.gpu.use_of(stages.gpu, idle)
    rec = RunRecord(
        kind="watch",
        host=host,
        dataset=dataset(col.adapter.settings, col.dataset_len, col.epochs, read_total, mean_bytes),
        stages=stages,
        measured_samples_per_s=delivered(col.epochs),
        gpu_idle_fraction=idle,
        gpu_idle_method=idle_method,
        watch=_watch_data(col, mean_bytes, seen, mapped, scaling),
        notes=notes,
        created=col.created,
        ioprobe_version=__version__,
        duration_s=time.perf_counter() - col.started,
    )
    rec.gpu_series = col.gpu.series(col.origin)
    col.adapter.complete(rec)
    return rec


def measured(
    col: Collected,
    usable: int,
    mean_bytes: float,
    bytes_seen: str = "read",
    scaling: ReadScaling | None = None,
) -> Measured:
    """The inputs of the stage rules, as they stand."""
    return Measured(
        settings=col.adapter.settings,
        epochs=col.epochs,
        usable_cores=usable,
        sample_bytes=mean_bytes,
        bytes_seen=bytes_seen,
        batch_size=col.batch_size,
        step_ns=col.step.values,
        device_step_ns=col.gpu.step.values,
        timing=col.gpu.timing,
        on_device_clock=col.gpu.on_device_clock,
        device=col.device,
        read_scaling=scaling,
    )


def _watch_data(
    col: Collected,
    mean_bytes: float,
    seen: str,
    mapped: tuple[int, int],
    scaling: ReadScaling | None,
) -> WatchData:
    mapped_bytes, mapped_files = mapped
    settings = col.adapter.settings
    return WatchData(
        loader=dict(col.adapter.description),
        settings=settings,
        epochs=list(col.epochs),
        epochs_merged=epochs_merged(col.epochs),
        workers=sorted(col.workers.values(), key=lambda w: w.worker),
        stall_ms=col.stall.to_record(),
        step_ms=col.step.to_record(),
        sample_ms=col.sample.to_record(),
        storage_metered=mean_bytes > 0,
        bytes_seen=seen,
        mapped_bytes=mapped_bytes,
        mapped_files=mapped_files,
        tracks=tracks(col.main, col.worker_series, col.origin),
        device=col.device,
        gpu_timing=col.gpu.timing,
        gpu_step_ms=col.gpu.step.to_record(),
        gpu_track=col.gpu.track(col.device, col.origin),
        read_scaling=scaling,
        sample_costs=sample_costs(
            col.sample, col.sample_cpu, col.sample_bytes, col.heaviest.heap, settings.iterable
        ),
        batch_log=batch_log(col.log, col.origin, col.log_dropped),
        rank=col.rank(),
        next_cpu_ms=(
            round(col.next_cpu_ns / col.next_cpu_calls / 1e6, 4) if col.next_cpu_calls else None
        ),
        worker_private_bytes=col.worker_private,
        batch_bytes=col.batch_bytes,
    )

"""A record's timelines as Chrome trace event JSON, for Perfetto (ui.perfetto.dev) and
chrome://tracing.

One process, one thread track per timeline: the main process (waiting for each batch vs the
training step between batches) and each loader worker (its batches, each split into time on
reads and time on the CPU, both summed over the batch's samples). A probe without a pipeline
run has no per-batch timeline: its measurement phases are laid end to end on one track.
A watch that recorded CUDA events adds a second process, the device's current stream: per
step, the idle wait for its batch, its host-to-device copies and its work, on the device's
clock, placed on the host's at each epoch's first batch. Where NVML was sampled, a third
process holds its readings as counter tracks (utilisation, PCIe, power, clock, memory). The
host's process has a counter track of its own, "stall %": the share of each second the
training loop waited for data.
A distributed run adds a process per rank, "rank N (host)", after the others: a probe's
ranks hold a slice per level of the clients curve they read in (the levels laid end to end,
the full world's with the rank's own read figures), a watched job's ranks a slice over their
run with their loader's figures and a "stall %" counter; each process's labels sum up its
figures.
Times are microseconds from the first batch request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ioprobe import units
from ioprobe.analysis.cluster import RankTable
from ioprobe.analysis.ranks import RankSpread
from ioprobe.analysis.report import Findings
from ioprobe.analysis.stall_series import StallOverTime
from ioprobe.record import ClientsPoint, GpuSeries, RankFigures, RunRecord, Track
from ioprobe.redact import shown_all

PID = 1
GPU_PID = 2  # the device's timeline (CUDA events), its own process in the viewer
MAIN_TID = 0


def _tid(t: Track) -> int:
    # -1 (loading in the main process) gets tid 1, worker k gets k + 2
    return MAIN_TID if t.worker is None else t.worker + 2


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _slice(
    name: str, tid: int, ts: float, dur: float, pid: int = PID, **args: Any
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(ts),
        "dur": _us(max(dur, 0.0)),
    }
    if args:
        ev["args"] = args
    return ev


def _label(first: int, count: int) -> str:
    return f"batch {first}" if count == 1 else f"batches {first}-{first + count - 1}"


def _main_events(t: Track) -> list[dict[str, Any]]:
    c = t.columns
    out = []
    first = 1
    n = len(c["start"])
    for i in range(n):
        count = int(c["batches"][i])
        start, end, stall = c["start"][i], c["end"][i], c["stall"][i]
        if count == 1:
            out.append(_slice(f"wait for {_label(first, 1)}", MAIN_TID, start, end - start))
        else:
            out.append(
                _slice(
                    _label(first, count),
                    MAIN_TID,
                    start,
                    end - start,
                    stall_ms=round(stall * 1e3, 3),
                    note="several batches per row in a long run: waits summed",
                )
            )
        if i + 1 < n:
            nxt = c["start"][i + 1]
            if nxt > end:
                out.append(_slice("step", MAIN_TID, end, nxt - end))
        first += count
    return out


def _worker_events(t: Track) -> list[dict[str, Any]]:
    c = t.columns
    tid = _tid(t)
    out = []
    first = 1
    for i in range(len(c["start"])):
        count = int(c["batches"][i])
        start, end = c["start"][i], c["end"][i]
        span = max(end - start, 0.0)
        wall, cpu, read = c["wall"][i], c["cpu"][i], c["read"][i]
        out.append(
            _slice(
                f"{_label(first, count)} of this worker",
                tid,
                start,
                span,
                samples=int(c["samples"][i]),
                cpu_ms=round(cpu * 1e3, 3),
                read_ms=round(read * 1e3, 3),
                sample_wall_ms=round(wall * 1e3, 3),
            )
        )
        # summed over the batch's samples, shown as two phases inside it
        waited = read if read > 0 else max(wall - cpu, 0.0)
        waited = min(waited, span)
        if waited > 0:
            out.append(
                _slice("read" if read > 0 else "blocked (I/O or waiting)", tid, start, waited)
            )
        cpu_d = min(cpu, span - waited)
        if cpu_d > 0:
            out.append(_slice("CPU", tid, start + waited, cpu_d))
        first += count
    return out


def _gpu_events(t: Track) -> list[dict[str, Any]]:
    """Per step on the device's clock: the wait for its batch, its copies, then its work."""
    c = t.columns
    out = []
    first = 1
    for i in range(len(c["start"])):
        count = int(c["batches"][i])
        start, end, wait, copy = c["start"][i], c["end"][i], c["wait"][i], c["copy"][i]
        if count > 1:
            out.append(
                _slice(
                    f"steps {first}-{first + count - 1}",
                    MAIN_TID,
                    start,
                    end - start,
                    GPU_PID,
                    wait_ms=round(wait * 1e3, 3),
                    copy_ms=round(copy * 1e3, 3),
                    note="several batches per row in a long run: waits and copies summed",
                )
            )
        else:
            if wait > 0:
                out.append(_slice("idle: waiting for data", MAIN_TID, start - wait, wait, GPU_PID))
            if copy > 0:
                out.append(_slice("host-to-device copy", MAIN_TID, start, copy, GPU_PID))
            out.append(_slice(f"step {first}", MAIN_TID, start + copy, end - start - copy, GPU_PID))
        first += count
    return out


def _phase_events(rec: RunRecord) -> list[dict[str, Any]]:
    out = []
    t = 0.0
    st = rec.stages
    for p in (st.storage.cold, st.storage.warm):
        if p is None:
            continue
        for pt in p.sweep:
            out.append(
                _slice(
                    f"storage {p.cache}: {pt.concurrency} threads",
                    MAIN_TID,
                    t,
                    pt.seconds,
                    mb_per_s=round(pt.read_bytes_per_s / 1e6, 3),
                    p99_ms=pt.latency_p99_ms,
                )
            )
            t += pt.seconds
    for lv in st.cpu.sweep:
        out.append(
            _slice(
                f"cpu: {lv.workers} workers",
                MAIN_TID,
                t,
                lv.seconds,
                samples_per_s=round(lv.samples_per_s, 3),
            )
        )
        t += lv.seconds
    return out


NVML_PID = 3  # the NVML series, counter tracks of their own process
# counter track -> (series column, label in the viewer, scale from the record's unit)
COUNTERS: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...] = (
    ("GPU utilisation %", (("sm_util", "SM", 1.0), ("mem_util", "memory", 1.0))),
    (
        "PCIe GB/s",
        (
            ("pcie_rx_bytes_per_s", "host to device (RX)", 1e-9),
            ("pcie_tx_bytes_per_s", "device to host (TX)", 1e-9),
        ),
    ),
    ("power W", (("power_w", "power", 1.0),)),
    ("SM clock MHz", (("sm_clock_mhz", "SM clock", 1.0),)),
    ("GPU memory GiB", (("mem_used_bytes", "used", 1 / 2**30),)),
)


def _counter_events(series: GpuSeries) -> list[dict[str, Any]]:
    """NVML readings as counter events ("ph": "C"), one track per kind of reading; a row
    where a reading did not answer leaves that value out of its event."""
    cols = series.columns
    times = cols.get("t", [])
    out: list[dict[str, Any]] = []
    for name, parts in COUNTERS:
        present = [(col, label, k) for col, label, k in parts if col in cols]
        if present:
            out += _counter_track(name, present, cols, times)
    return out


def _counter_track(
    name: str,
    present: Sequence[tuple[str, str, float]],
    cols: dict[str, list[float | None]],
    times: Sequence[float | None],
) -> list[dict[str, Any]]:
    """One counter track's events: a row's readings of the ``present`` columns, scaled."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(times):
        if t is None:
            continue
        args = {
            label: round(v * k, 4) for col, label, k in present if (v := cols[col][i]) is not None
        }
        if args:
            out.append(
                {"name": name, "ph": "C", "pid": NVML_PID, "tid": 0, "ts": _us(t), "args": args}
            )
    return out


def render(rec: RunRecord, f: Findings) -> str:
    """The trace file's text: ``{"traceEvents": [...]}``, keys sorted."""
    rec, f = shown_all(rec), shown_all(f)  # outside text masked and escaped before any use
    process = _meta(
        "process_name", PID, MAIN_TID, {"name": f"ioprobe {rec.kind}: {rec.dataset.target}"}
    )
    meta: list[dict[str, Any]] = [process]
    events: list[dict[str, Any]] = []
    for part_meta, part_events in (
        _host_part(rec, f.timeline),
        _device_part(f.device_timeline),
        _nvml_part(rec.gpu_series),
        _stall_part(f.stall_over_time),
        _ranks_part(rec, f.ranks, f.rank_spread),
    ):
        meta += part_meta
        events += part_events
    events.sort(key=lambda ev: (ev["pid"], ev["tid"], ev["ts"], -ev.get("dur", 0.0)))
    doc = {
        "displayTimeUnit": "ms",
        "otherData": {
            "bottleneck": rec.bottleneck,
            "created": rec.created,
            "ioprobe_version": rec.ioprobe_version,
            "kind": rec.kind,
        },
        "traceEvents": meta + events,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


# Each process of the trace as its metadata events (names, track order) and its events.
Part = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """A metadata event: a process's or a thread's name, or a thread's place in the list."""
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _host_part(rec: RunRecord, tracks: Sequence[Track]) -> Part:
    """A thread per timeline; a probe without one lays its phases end to end on one thread."""
    if not tracks:
        name = _meta("thread_name", PID, MAIN_TID, {"name": "probe phases (laid end to end)"})
        return [name], _phase_events(rec)
    meta: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for t in tracks:
        tid = _tid(t)
        meta += [
            _meta("thread_name", PID, tid, {"name": t.name}),
            _meta("thread_sort_index", PID, tid, {"sort_index": tid}),
        ]
        events += _main_events(t) if t.worker is None else _worker_events(t)
    return meta, events


def _device_part(gpu: Track | None) -> Part:
    if gpu is None:
        return [], []
    meta = [
        _meta(
            "process_name",
            GPU_PID,
            MAIN_TID,
            {"name": f"device: {gpu.name} (placed at each epoch's first batch)"},
        ),
        _meta("thread_name", GPU_PID, MAIN_TID, {"name": "current stream"}),
    ]
    return meta, _gpu_events(gpu)


def _stall_part(st: StallOverTime | None) -> Part:
    """The stall fraction of each bin as a counter track ("stall %") of the host's process,
    one event at each bin's start; a bin the run barely covered has none."""
    if st is None:
        return [], []
    s = st.series
    events = [
        {
            "name": "stall %",
            "ph": "C",
            "pid": PID,
            "tid": MAIN_TID,
            "ts": _us(s.t0_s + i * s.bin_s),
            "args": {"stall %": round(v * 100, 2)},
        }
        for i, v in enumerate(s.stall_fraction)
        if v is not None
    ]
    return [], events


def _nvml_part(series: GpuSeries | None) -> Part:
    if series is None or not series.columns.get("t"):
        return [], []
    name = f"NVML: GPU {series.device_index}, every {series.interval_s * 1e3:g} ms"
    return [_meta("process_name", NVML_PID, 0, {"name": name})], _counter_events(series)


RANK_PID = 1000  # rank N is process RANK_PID + N, after the host's, the device's and NVML's


def _ranks_part(rec: RunRecord, t: RankTable | None, spread: RankSpread | None) -> Part:
    """A process per rank of a distributed run, named "rank N (host)", sorted by rank."""
    if t is None or rec.distributed is None:
        return [], []
    causes = {s.rank: s.cause for s in spread.stragglers} if spread is not None else {}
    curve = sorted(rec.distributed.curve, key=lambda p: p.clients)
    meta: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for r in t.ranks:
        pid = RANK_PID + r.rank
        meta += [
            _meta("process_name", pid, 0, {"name": f"rank {r.rank} ({r.host or 'unknown host'})"}),
            _meta("process_sort_index", pid, 0, {"sort_index": pid}),
            _meta("process_labels", pid, 0, {"labels": _rank_labels(t, r, causes.get(r.rank))}),
        ]
        if t.kind == "watch":
            meta.append(_meta("thread_name", pid, 0, {"name": "loader"}))
            events += _rank_watch_events(pid, r, causes.get(r.rank))
        else:
            meta.append(
                _meta("thread_name", pid, 0, {"name": "clients curve (levels laid end to end)"})
            )
            events += _rank_probe_events(pid, r, curve)
    return meta, events


def _rank_labels(t: RankTable, r: RankFigures, cause: str | None) -> str:
    """The figures a rank's process shows beside its name."""
    if t.kind == "watch":
        parts = [
            f"stall {r.stall_fraction:.1%}" if r.stall_fraction is not None else "",
            f"step {r.step_ms:.3g} ms" if r.step_ms is not None else "",
            f"ready p99 {r.ready_ms_p99:.3g} ms" if r.ready_ms_p99 is not None else "",
            f"straggler: {cause}" if cause else "",
        ]
    else:
        parts = [
            f"read {units.bandwidth(r.read_bytes_per_s)}" if r.read_bytes_per_s is not None else "",
            f"decode {r.cpu_samples_per_s:,.0f} samples/s" if r.cpu_samples_per_s else "",
            f"{r.usable_cores} cores" if r.usable_cores is not None else "",
        ]
    return ", ".join(p for p in parts if p)


def _rank_probe_events(pid: int, r: RankFigures, curve: list[ClientsPoint]) -> list[dict[str, Any]]:
    """A slice per level of the clients curve this rank read in, at the level's place when
    the levels are laid end to end; the full world's (the last) carries the rank's own
    figures."""
    out = []
    t = 0.0
    for i, p in enumerate(curve):
        last = i == len(curve) - 1
        if r.rank in p.ranks or (last and not p.ranks):
            args: dict[str, Any] = {
                "aggregate_mb_per_s": round(p.read_bytes_per_s / 1e6, 3),
                "per_client_mb_per_s": round(p.per_client_bytes_per_s / 1e6, 3),
                "nodes": p.nodes,
            }
            if last:
                args.update(_probe_figures(r))
            out.append(
                _slice(
                    f"{p.clients} client{'s' * (p.clients != 1)} reading",
                    0,
                    t,
                    p.seconds,
                    pid,
                    **args,
                )
            )
        t += p.seconds
    return out


def _probe_figures(r: RankFigures) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "read_mb_per_s": None if r.read_bytes_per_s is None else round(r.read_bytes_per_s / 1e6, 3),
        "files_per_s": None if r.files_per_s is None else round(r.files_per_s, 3),
        "latency_p50_ms": r.latency_p50_ms,
        "latency_p99_ms": r.latency_p99_ms,
        "read_errors": r.read_errors,
        "cpu_samples_per_s": None if r.cpu_samples_per_s is None else round(r.cpu_samples_per_s, 3),
        "cpu_ms_per_sample": None
        if r.cpu_seconds_per_sample is None
        else round(r.cpu_seconds_per_sample * 1e3, 4),
        "usable_cores": r.usable_cores,
    }
    return {k: v for k, v in figures.items() if v is not None}


def _rank_watch_events(pid: int, r: RankFigures, cause: str | None) -> list[dict[str, Any]]:
    """One slice over the rank's watched run with its loader's figures, and its stall share
    as a counter across it."""
    span = r.wall_seconds or 0.0
    figures: dict[str, Any] = {
        "stall_fraction": r.stall_fraction,
        "step_ms": r.step_ms,
        "ready_p50_ms": r.ready_ms_p50,
        "ready_p95_ms": r.ready_ms_p95,
        "ready_p99_ms": r.ready_ms_p99,
        "samples_per_s": r.samples_per_s,
        "samples": r.samples,
        "verdict": r.bottleneck,
        "straggler": cause,
        **{f"worker {k} batch p50 ms": v for k, v in sorted(r.worker_batch_ms_p50.items())},
    }
    # rounded as the other tracks' arguments are: the figures, not float noise
    args = {
        k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items() if v is not None
    }
    name = f"rank {r.rank}: straggler ({cause})" if cause else f"rank {r.rank}: loader"
    out = [_slice(name, 0, 0.0, span, pid, **args)]
    if r.stall_fraction is not None:
        stall = {"stall %": round(r.stall_fraction * 100, 2)}
        out += [
            {"name": "stall %", "ph": "C", "pid": pid, "tid": 0, "ts": _us(ts), "args": stall}
            for ts in sorted({0.0, span})
        ]
    return out

"""Reports from records whose truth the test builds: a watched run driven by a fake clock
(every batch stalls exactly S ms and computes exactly C ms), timelines, findings, the HTML
page, the Markdown summary and the Chrome trace."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.report import coarsen, consumer_points, findings, worker_throughput
from ioprobe.collect.timeline import MAIN_COLUMNS, Series
from ioprobe.loaders.torch import DataLoaderAdapter
from ioprobe.monitor.collector import BatchStats, WatchCollector
from ioprobe.record import LoaderSettings, RunRecord, Track
from ioprobe.render.facts import verdict
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import md
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.trace import render as render_trace

MS = 1_000_000  # ns
XSS = "<img src=x onerror=alert(1)>"


def synthetic_watch(
    batches: int = 2000,
    workers: int = 2,
    stall_ms: float = 2.0,
    step_ms: float = 5.0,
    sample_ms: float = 0.4,
    batch_size: int = 32,
    target: str = "synthetic",
) -> RunRecord:
    """A watched run on a fake clock: batch i is requested at i x (stall + step), arrives
    ``stall_ms`` later, and was made by worker i mod ``workers`` just before it arrived."""
    loader = {"num_workers": str(workers), "batch_size": str(batch_size), "dataset": target}
    c = WatchCollector(
        DataLoaderAdapter(LoaderSettings.parse(loader), loader), batch_size, batches * batch_size
    )
    c.begin_epoch()
    period = int((stall_ms + step_ms) * MS)
    sample_ns = int(sample_ms * MS)
    walls = (sample_ns).to_bytes(8, "little", signed=True) * batch_size
    cpus = (sample_ns // 2).to_bytes(8, "little", signed=True) * batch_size
    t0 = 10**12
    for i in range(batches):
        req = t0 + i * period
        arr = req + int(stall_ms * MS)
        stats = BatchStats(i % workers, walls, cpus, 0, 0, 0, 0, 0, 0, 0, arr - 1000)
        c.on_batch(req, arr, stats)
    c.end_epoch(None)
    return finalize(c.stop())


def test_samples_begun_before_the_first_request_start_at_or_after_the_runs_origin() -> None:
    # iter() at t0 starts the worker; its first batch's samples begin 3 ms later, 2 ms before
    # the consumer first asks: every track row and logged time is at or after time zero
    loader = {"num_workers": "1", "batch_size": "4", "dataset": "d"}
    c = WatchCollector(DataLoaderAdapter(LoaderSettings.parse(loader), loader), 4, 8)
    c.begin_epoch()
    t0 = 10**12
    c.iter_began(t0, t0 + MS)
    walls = MS.to_bytes(8, "little", signed=True) * 4
    for i, req in enumerate((t0 + 5 * MS, t0 + 9 * MS)):
        done = t0 + (7 + 4 * i) * MS  # 4 samples of 1 ms each before it
        c.on_batch(req, done + MS, BatchStats(0, walls, walls, 0, 0, 0, 0, 0, 0, 0, done))
    c.end_epoch(None)
    rec = c.stop()
    assert rec.watch is not None and rec.watch.batch_log is not None
    starts = [v for t in rec.watch.tracks for v in t.columns["start"]]
    assert starts and min(starts) == pytest.approx(0.003)  # the first sample, 3 ms after iter()
    assert min(rec.watch.batch_log.request) == pytest.approx(0.005)


def test_series_keeps_every_batch_and_the_run_ends_within_its_row_limit() -> None:
    s = Series(MAIN_COLUMNS, 64)
    for i in range(1000):
        s.add((i * 10 * MS, i * 10 * MS + 3 * MS, 3 * MS, 1, 32, 0))
    t = s.to_record("main", None, origin=0)
    c = t.columns
    assert len(c["start"]) <= 64
    assert sum(c["batches"]) == 1000
    assert sum(c["samples"]) == 32_000
    assert c["start"][0] == 0.0
    assert c["end"][-1] == pytest.approx(9.993)
    assert sum(c["stall"]) == pytest.approx(3.0)
    assert t.batches_per_row >= 1000 / 64


def test_consumer_timeline_sums_to_the_stall_and_compute_the_clock_gave() -> None:
    rec = synthetic_watch(batches=5000, stall_ms=2.0, step_ms=5.0)
    assert rec.watch is not None
    main = rec.watch.tracks[0]
    points, batches = consumer_points(main)
    assert batches == 5000
    assert len(points) <= 400
    assert sum(p.stall_s for p in points) == pytest.approx(5000 * 0.002, rel=1e-4)
    # the last batch has no next request: 4999 steps
    assert sum(p.compute_s for p in points) == pytest.approx(4999 * 0.005, rel=1e-4)
    assert points[0].first == 1 and points[-1].last == 5000


def test_worker_throughput_matches_each_workers_true_rate() -> None:
    workers, bs, period_s = 2, 32, 0.007
    rec = synthetic_watch(batches=4000, workers=workers, batch_size=bs)
    assert rec.watch is not None
    tp = worker_throughput(rec.watch.tracks)
    assert tp is not None and len(tp.lines) == workers
    truth = bs / (workers * period_s)  # each worker makes every other batch
    for line in tp.lines:
        middle = line.samples_per_s[2:-2]
        assert sum(middle) / len(middle) == pytest.approx(truth, rel=0.02)
        assert all(v == pytest.approx(truth, rel=0.1) for v in middle)


def test_coarsen_keeps_totals_and_the_runs_span() -> None:
    t = Track(
        name="main",
        columns={
            "start": [float(i) for i in range(1001)],
            "end": [i + 0.5 for i in range(1001)],
            "stall": [0.25] * 1001,
            "batches": [1.0] * 1001,
            "samples": [8.0] * 1001,
            "epoch": [0.0] * 1001,
        },
    )
    c = coarsen(t, 100).columns
    assert len(c["start"]) <= 100
    assert sum(c["batches"]) == 1001 and sum(c["samples"]) == 8008
    assert c["start"][0] == 0.0 and c["end"][-1] == 1000.5
    assert sum(c["stall"]) == pytest.approx(250.25)


def _trace_events(text: str) -> list[dict[str, object]]:
    doc = json.loads(text)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for ev in events:
        assert ev["ph"] in ("X", "M", "C"), ev  # C: a counter (stall %, NVML readings)
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev["name"], str)
        if ev["ph"] == "X":
            assert isinstance(ev["ts"], int | float) and isinstance(ev["dur"], int | float)
            assert ev["dur"] >= 0
        else:
            assert isinstance(ev["args"], dict)
        if ev["ph"] == "C":
            assert isinstance(ev["ts"], int | float)
    return events  # type: ignore[no-any-return]


def test_trace_has_a_track_per_worker_and_the_main_process_waits_and_steps() -> None:
    rec = synthetic_watch(batches=300, workers=3, stall_ms=2.0, step_ms=5.0)
    events = _trace_events(render_trace(rec, findings(rec)))
    names = {ev["tid"]: ev["args"]["name"] for ev in events if ev["name"] == "thread_name"}  # type: ignore[index]
    assert names == {0: "main process", 2: "worker 0", 3: "worker 1", 4: "worker 2"}
    waits = [ev for ev in events if ev["tid"] == 0 and str(ev["name"]).startswith("wait")]
    steps = [ev for ev in events if ev["tid"] == 0 and ev["name"] == "step"]
    assert len(waits) == 300 and len(steps) == 299
    assert all(ev["dur"] == pytest.approx(2000.0) for ev in waits)  # microseconds
    assert all(ev["dur"] == pytest.approx(5000.0) for ev in steps)
    batches = [ev for ev in events if ev["tid"] == 2 and "of this worker" in str(ev["name"])]
    assert len(batches) == 100
    cpu = [ev for ev in events if ev["tid"] == 2 and ev["name"] == "CPU"]
    # half of each sample's 0.4 ms is CPU, 32 samples a batch
    assert all(ev["dur"] == pytest.approx(32 * 200.0) for ev in cpu)


def test_trace_of_a_probe_without_a_pipeline_lays_its_phases_end_to_end() -> None:
    from tests.unit.analysis.test_whatif import probe_record

    rec = finalize(probe_record())
    events = _trace_events(render_trace(rec, findings(rec)))
    slices = [ev for ev in events if ev["ph"] == "X"]
    assert [ev["name"] for ev in slices][:2] == [
        "storage cold: 1 threads",
        "storage cold: 2 threads",
    ]
    ends = [float(ev["ts"]) + float(ev["dur"]) for ev in slices]  # type: ignore[arg-type]
    assert all(a <= float(b["ts"]) + 1e-6 for a, b in zip(ends, slices[1:], strict=False))  # type: ignore[arg-type]


def _hostile() -> RunRecord:
    rec = synthetic_watch(batches=50, target=XSS)
    rec.dataset.target = XSS
    rec.host.hostname = "</script><script>alert(2)</script>"
    rec.notes.append("path & <b>bold</b> | pipe")
    return rec


def test_html_escapes_every_data_string_and_its_json_blob() -> None:
    rec = _hostile()
    page = render_html(rec, findings(rec))
    assert XSS not in page
    assert "<script>alert(2)" not in page and "<b>bold</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    blob = re.search(
        r'<script type="application/json" id="ioprobe-data">(.*?)</script>', page, re.S
    )
    assert blob is not None
    assert "<" not in blob.group(1)
    data = json.loads(blob.group(1))
    assert data["record"]["dataset"]["target"] == XSS
    assert data["findings"]["verdict"] == verdict(rec, findings(rec))
    assert page.count("<script") == 1  # the data blob, nothing else


def test_markdown_escapes_data_strings() -> None:
    rec = _hostile()
    text = render_markdown(rec, findings(rec))
    assert XSS not in text and "<b>" not in text and "</script>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert md("a|b") == "a\\|b"  # a pipe cannot split a table cell


def test_html_is_byte_identical_for_the_same_record(tmp_path: Path) -> None:
    rec = synthetic_watch(batches=500)
    rec.save(tmp_path / "r.json")
    again = RunRecord.load(tmp_path / "r.json")
    assert render_html(rec, findings(rec)) == render_html(again, findings(again))
    assert render_trace(rec, findings(rec)) == render_trace(again, findings(again))


def test_a_million_batch_record_renders_in_seconds_and_the_page_stays_small() -> None:
    n = 1_000_000
    rec = synthetic_watch(batches=64, workers=4)
    assert rec.watch is not None
    # the worst case: every batch its own row, as a record could hold it
    rec.watch.tracks[0] = Track(
        name="main process",
        columns={
            "start": [i * 0.007 for i in range(n)],
            "end": [i * 0.007 + 0.002 for i in range(n)],
            "stall": [0.002] * n,
            "batches": [1.0] * n,
            "samples": [32.0] * n,
            "epoch": [float(i // 10_000) for i in range(n)],
        },
    )
    t0 = time.perf_counter()
    f = findings(rec)
    page = render_html(rec, f)
    render_markdown(rec, f)
    trace = render_trace(rec, f)
    took = time.perf_counter() - t0
    assert took < 10, f"rendering took {took:.1f} s"
    assert len(page.encode()) < 5 * 2**20
    assert f.consumer_batches == n and len(f.consumer) <= 400
    assert len(trace.encode()) < 50 * 2**20


def test_an_end_to_end_prediction_is_read_against_the_end_to_end_rate() -> None:
    """persistent_workers predicts an end-to-end rate (epoch starts included): its gain is
    over today's end-to-end rate, not the steady rate the run measured, which made a 64%
    gain read "0.2x"."""
    from ioprobe.analysis.report import advice
    from ioprobe.record import DatasetProfile, HostInfo, Recommendation

    rec = RunRecord(
        kind="watch",
        host=HostInfo(),
        dataset=DatasetProfile(target="t", files=10),
        measured_samples_per_s=4318.0,
        recommendations=[
            Recommendation("persistent_workers", "t", 762.0, baseline_samples_per_s=465.0),
            Recommendation("num_workers", "t", 8636.0),
        ],
    )
    gains = [a.gain for a in advice(rec)]
    assert gains == [pytest.approx(762 / 465), pytest.approx(2.0)]
    # the baseline is the record's: it survives a save and a load
    back = RunRecord.from_json(json.loads(rec.dumps()))
    assert back.recommendations[0].baseline_samples_per_s == 465.0

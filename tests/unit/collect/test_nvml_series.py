"""The NVML series: readings and units through a stand-in NVML, bounded memory, and the
record a probe or a watched run gets (the real NVML: tests/integration/probe/test_nvml_series_gpu.py)."""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.collect import gpu_sampler
from ioprobe.collect.gpu_sampler import (
    SERIES_COLUMNS,
    GpuBusySampler,
    SeriesBuffer,
    SeriesReader,
    series_record,
)
from ioprobe.record import RunRecord
from ioprobe.render.trace import render as render_trace
from tests.fixtures.datasets import SleepDataset
from tests.fixtures.scripted_nvml import NotSupported, ScriptedNvml


def sampled(nvml: ScriptedNvml, seconds: float = 0.15, **kw: Any) -> GpuBusySampler:
    s = GpuBusySampler(nvml, interval_s=0.005, **kw)
    assert s.start()
    time.sleep(seconds)
    s.stop()
    return s


def test_every_reading_lands_in_its_column_in_record_units() -> None:
    s = sampled(ScriptedNvml())
    cols, dropped = s.series_columns(0.0)
    assert dropped == 0
    assert set(cols) == {"t", *SERIES_COLUMNS}
    n = len(cols["t"])
    assert n >= 5 and all(len(v) == n for v in cols.values())
    assert set(cols["sm_util"]) == {63.0} and set(cols["mem_util"]) == {21.0}
    assert set(cols["pcie_rx_bytes_per_s"]) == {2_000_000 * 1024.0}
    assert set(cols["pcie_tx_bytes_per_s"]) == {500 * 1024.0}
    assert set(cols["power_w"]) == {310.5}
    assert set(cols["sm_clock_mhz"]) == {1980.0}
    assert set(cols["mem_used_bytes"]) == {float(5 << 30)}
    assert cols["t"] == sorted(cols["t"])
    poll = s.poll_seconds()
    assert poll is not None and 0 < poll < 0.05


def test_a_reading_the_device_never_gives_is_dropped_and_the_rest_kept() -> None:
    nvml = ScriptedNvml(refuse=("power",))
    s = sampled(nvml)
    cols, _ = s.series_columns(0.0)
    assert "power_w" not in cols
    assert set(cols["sm_util"]) == {63.0}
    reader = s._reader
    assert reader is not None
    # asked a few times, then no more: a refused reading must not cost every poll
    assert reader.fails[SERIES_COLUMNS.index("power_w")] == gpu_sampler.MAX_READING_FAILS


def test_a_reading_that_fails_now_and_then_leaves_none_in_its_rows_only() -> None:
    nvml = ScriptedNvml()
    reader = SeriesReader(nvml)
    util = nvml.nvmlDeviceGetUtilizationRates(0)
    good = reader.read(0, util)
    nvml.refuse = ("pcie",)
    bad = reader.read(0, util)
    assert not math.isnan(good[2]) and math.isnan(bad[2]) and math.isnan(bad[3])
    assert bad[0] == 63.0 and bad[4] == 310.5
    assert reader.answered[2]  # it answered once: still asked, not dropped


def test_the_buffer_thins_when_full_and_counts_what_it_dropped() -> None:
    buf = SeriesBuffer(capacity=8, width=2)
    for i in range(20):
        buf.add(float(i), [float(i), -float(i)])
    assert buf.n <= 8 and buf.dropped == 20 - buf.n
    times = list(buf.times[: buf.n])
    assert times[0] == 0.0 and times == sorted(times)
    gaps = {b - a for a, b in itertools.pairwise(times)}
    assert len(gaps) == 1  # evenly spaced after thinning
    assert list(buf.columns[1][: buf.n]) == [-t for t in times]


def test_series_times_are_seconds_from_the_runs_start() -> None:
    started = time.perf_counter()
    s = sampled(ScriptedNvml(), seconds=0.1)
    rec = series_record(s, started)
    assert rec is not None
    t = rec.columns["t"]
    assert 0.0 < t[0] < t[-1] < time.perf_counter() - started + 0.01
    assert rec.interval_s == 0.005 and rec.poll_seconds is not None


def test_no_nvml_means_no_series_and_no_error() -> None:
    class Missing(ScriptedNvml):
        def nvmlInit(self) -> None:
            raise NotSupported("NVML Shared Library Not Found")

    s = GpuBusySampler(Missing(), interval_s=0.005)
    assert not s.start()
    assert series_record(s, 0.0) is None


def _watch_with(monkeypatch: pytest.MonkeyPatch, nvml: ScriptedNvml) -> RunRecord:
    monkeypatch.setattr(gpu_sampler, "new_sampler", lambda: GpuBusySampler(nvml, interval_s=0.005))
    loader = ioprobe.watch(DataLoader(SleepDataset(96, 0.002, 64), batch_size=8, num_workers=1))
    for _ in loader:
        time.sleep(0.01)
    return loader.run


def test_a_watched_run_records_the_series_and_it_round_trips(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rec = _watch_with(monkeypatch, ScriptedNvml())
    series = rec.gpu_series
    assert series is not None and series.columns["power_w"][0] == 310.5
    # on the run's timeline: within the watched span (seconds from the first batch request)
    assert series.columns["t"][-1] <= (rec.duration_s or 0) + 0.5
    rec.save(tmp_path / "run.json")
    back = RunRecord.load(tmp_path / "run.json")
    assert back.gpu_series == series


def test_the_trace_has_a_counter_track_per_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _watch_with(monkeypatch, ScriptedNvml(refuse=("power",)))
    events = json.loads(render_trace(rec, findings(rec)))["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert {"GPU utilisation %", "PCIe GB/s", "SM clock MHz", "GPU memory GiB"} <= names
    assert "power W" not in names
    util = [e for e in counters if e["name"] == "GPU utilisation %"]
    assert util[0]["args"] == {"SM": 63.0, "memory": 21.0}
    pcie = next(e for e in counters if e["name"] == "PCIe GB/s")["args"]
    assert pcie["host to device (RX)"] == pytest.approx(2_000_000 * 1024 / 1e9, rel=1e-3)


def test_torch_sees_no_gpu_here_so_a_real_probe_has_no_series() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from ioprobe.collect.probe import Probe, ProbeOptions

    rec = Probe(ProbeOptions(target=str(Path(__file__)), loader="raw", time_budget_s=2)).run()
    assert rec.gpu_series is None


def test_the_page_charts_the_series_and_its_blob_carries_only_the_reduced_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import re

    from ioprobe.render.html import render as render_html

    rec = _watch_with(monkeypatch, ScriptedNvml())
    page = render_html(rec, findings(rec))
    assert "GPU over time (NVML)" in page and "PCIe GB/s" in page
    blob = re.search(r'<script type="application/json" id="ioprobe-data">(.*?)</script>', page)
    assert blob is not None
    data = json.loads(blob.group(1))
    assert data["record"]["gpu_series"] is None
    view = data["findings"]["gpu_series"]
    assert set(view["sm_util"]) == {63.0} and len(view["t"]) <= 400
    facts = dict(data["findings"]["measurements"])
    assert facts["NVML"].startswith("SM busy 63% mean; PCIe to GPU 2.05 GB/s peak; 310 W mean")


def test_a_long_series_is_binned_to_at_most_400_points_with_means() -> None:
    from ioprobe.analysis.report import gpu_series_view
    from ioprobe.record import DatasetProfile, GpuSeries, HostInfo

    n = 1000
    rec = RunRecord(kind="watch", host=HostInfo(), dataset=DatasetProfile(target="x"))
    rec.gpu_series = GpuSeries(
        columns={
            "t": [i * 0.1 for i in range(n)],
            "sm_util": [float(i % 2) * 100 for i in range(n)],
        }
    )
    view = gpu_series_view(rec)
    assert view is not None and len(view.t) == 400 and view.rows == n
    assert all(v is not None and 0.0 <= v <= 100.0 for v in view.sm_util)
    assert sum(v or 0.0 for v in view.sm_util) / 400 == pytest.approx(50.0, abs=1.0)
    assert view.pcie_rx_gbps == [None] * 400  # not sampled: no line, not zeros


# -- devices that give part of the series, or none of it ------------------------------------


def _sampler_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "ioprobe-gpu-sampler"]


def test_a_gpu_that_refuses_utilisation_keeps_its_other_readings_and_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a MIG-mode GPU: no utilisation, but power, clocks, memory and PCIe answer
    monkeypatch.setattr(gpu_sampler, "MAX_FAILED_POLLS", 3)
    s = GpuBusySampler(ScriptedNvml(refuse=("util",)), interval_s=0.002)
    assert s.start()
    time.sleep(0.1)  # about 50 polls: far past MAX_FAILED_POLLS
    assert s.running and _sampler_threads()  # the thread did not give up
    s.stop()
    cols, _ = s.series_columns(0.0)
    assert "sm_util" not in cols and "mem_util" not in cols
    assert set(cols["power_w"]) == {310.5} and set(cols["sm_clock_mhz"]) == {1980.0}
    assert len(s.samples()[0]) == 0  # no busy figure without utilisation
    rec = series_record(s, 0.0)
    assert rec is not None
    assert rec.status.endswith("not given by this device: sm_util, mem_util")


def test_a_gpu_that_gives_nothing_records_an_empty_series_that_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ioprobe.analysis.report import gpu_series_view
    from ioprobe.record import DatasetProfile, HostInfo
    from ioprobe.render.facts import series_facts

    monkeypatch.setattr(gpu_sampler, "MAX_FAILED_POLLS", 3)
    everything = ("util", "pcie", "power", "clock", "memory")
    s = GpuBusySampler(ScriptedNvml(refuse=everything), interval_s=0.002)
    assert s.start()
    deadline = time.monotonic() + 5
    while _sampler_threads() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not _sampler_threads()  # gave up: polling on would only spin
    s.stop()
    series = series_record(s, 0.0)
    assert series is not None and series.columns == {}
    assert series.status == (
        "nvml: GPU 0 at 500 Hz, nothing recorded (NVML gives no utilisation for these GPUs)"
    )
    rec = RunRecord(kind="watch", host=HostInfo(), dataset=DatasetProfile(target="x"))
    rec.gpu_series = series
    assert series_facts(rec, findings(rec)) == [("NVML", series.status)]
    assert gpu_series_view(rec) is None
    assert not [
        e for e in json.loads(render_trace(rec, findings(rec)))["traceEvents"] if e["ph"] == "C"
    ]


def test_the_rate_is_10_hz_unless_set_and_stays_within_10_to_20_hz(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ioprobe.collect.gpu_sampler import interval_from_env

    assert interval_from_env(None) == pytest.approx(0.1)
    assert interval_from_env("") == pytest.approx(0.1)
    assert interval_from_env("15") == pytest.approx(1 / 15)
    assert interval_from_env("100") == pytest.approx(0.05)  # clamped to 20 Hz
    assert interval_from_env("1") == pytest.approx(0.1)  # clamped to 10 Hz
    assert interval_from_env("fast") == pytest.approx(0.1)
    assert interval_from_env("nan") == pytest.approx(0.1)
    monkeypatch.setenv(gpu_sampler.RATE_ENV, "20")
    assert gpu_sampler.new_sampler().interval_s == pytest.approx(0.05)


def test_a_probe_samples_throughout_with_the_stand_in_and_stops_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ioprobe.collect.probe import Probe, ProbeOptions

    nvml = ScriptedNvml()
    monkeypatch.setattr(gpu_sampler, "new_sampler", lambda: GpuBusySampler(nvml, interval_s=0.01))
    started = time.perf_counter()
    rec = Probe(ProbeOptions(target=str(Path(__file__)), loader="raw", time_budget_s=2)).run()
    took = time.perf_counter() - started
    assert not _sampler_threads() and nvml.init_calls == nvml.shutdown_calls == 1
    series = rec.gpu_series
    assert series is not None and series.status == "nvml: GPU 0 at 100 Hz"
    t = series.columns["t"]
    assert set(series.columns["pcie_rx_bytes_per_s"]) == {2_000_000 * 1024.0}
    # from the probe's first phase to its last: the whole probe, not a part of it
    assert 0 <= t[0] < 0.5 and took - 0.5 < t[-1] <= took

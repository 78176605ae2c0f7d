"""The NVML series through the real CLI: a probe on a host without a GPU, and a saved record
with a series re-rendered as a page (opened in headless Chromium) and as a trace."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect import gpu_sampler
from ioprobe.collect.gpu_sampler import GpuBusySampler
from tests.fixtures.datasets import SleepDataset
from tests.fixtures.scripted_nvml import ScriptedNvml
from tests.support.browser import chromium_path, non_blank_fraction, open_page
from tests.support.cli import probe_json, run_cli

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]


def _host_has_nvml_gpu() -> bool:
    sampler = GpuBusySampler()
    found = sampler.start()
    sampler.stop()
    return found


def test_probe_of_the_built_in_sample_exits_0_and_has_a_series_only_with_a_gpu(
    tmp_path: Path,
) -> None:
    env = {"IOPROBE_CACHE_DIR": str(tmp_path / "cache")}
    rec = probe_json(tmp_path, "--time-budget", "4", "--loader", "raw", env=env)
    assert "gpu_series" in rec
    if _host_has_nvml_gpu():
        assert rec["gpu_series"]["status"].startswith("nvml: GPU ")
        assert rec["gpu_series"]["columns"]["t"]
    else:
        assert rec["gpu_series"] is None  # no error, no note: a host without a GPU is normal


@pytest.fixture(scope="module")
def series_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A watched run sampled through the stand-in NVML, saved, then re-rendered by the CLI."""
    d = tmp_path_factory.mktemp("series")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            gpu_sampler, "new_sampler", lambda: GpuBusySampler(ScriptedNvml(), interval_s=0.005)
        )
        loader = ioprobe.watch(DataLoader(SleepDataset(96, 0.002, 64), batch_size=8))
        for _ in loader:
            time.sleep(0.01)
    loader.run.save(d / "run.json")
    proc = run_cli(
        "report", str(d / "run.json"), "--html", str(d / "run.html"), "--trace", str(d / "t.json")
    )
    assert proc.returncode == 0, proc.stderr
    assert "NVML" in proc.stdout  # the key-measurements line in the terminal summary
    return d


def test_the_page_draws_the_series_offline_in_a_browser(series_run: Path) -> None:
    assert chromium_path() is not None, "Chromium is missing; `make chromium` installs it"
    page = open_page(series_run / "run.html", ["#gpu-series", "#gpu-series svg polyline"])
    text = page.texts["#gpu-series"]
    assert text is not None
    for label in ("utilisation %", "SM", "PCIe GB/s", "host to device", "W", "readings every"):
        assert label in text
    assert page.texts["#gpu-series svg polyline"] is not None  # a line was drawn
    assert page.requests == [(series_run / "run.html").resolve().as_uri()]
    assert page.console_errors == []
    assert non_blank_fraction(page.screenshot_png) > 0.05


def test_the_trace_carries_the_series_as_counter_tracks_on_the_runs_timeline(
    series_run: Path,
) -> None:
    rec = json.loads((series_run / "run.json").read_text())
    events = json.loads((series_run / "t.json").read_text())["traceEvents"]
    # the run's own stall counter (its stall over time) may stand beside NVML's
    counters = [e for e in events if e["ph"] == "C" and e["name"] != "stall %"]
    assert {e["name"] for e in counters} == {
        "GPU utilisation %",
        "PCIe GB/s",
        "power W",
        "SM clock MHz",
        "GPU memory GiB",
    }
    rows = len(rec["gpu_series"]["columns"]["t"])
    assert len([e for e in counters if e["name"] == "power W"]) == rows
    first_t = rec["gpu_series"]["columns"]["t"][0]
    assert min(e["ts"] for e in counters) == pytest.approx(first_t * 1e6, abs=1.0)
    assert all(e["args"]["power"] == 310.5 for e in counters if e["name"] == "power W")

"""`ioprobe size` as a report to forward: the page in real headless Chromium, the Markdown,
prices, and the errors, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ioprobe.analysis.catalog import load_catalog
from ioprobe.record import RunRecord
from tests.support.browser import chromium_path, non_blank_fraction, open_page
from tests.support.cli import assert_one_line_error, run_cli
from tests.unit.analysis.test_whatif import watch_record

pytestmark = pytest.mark.slow

PRICES = """currency = "EUR"
gpu = 25000
core = 120
[storage]
nvme-gen3 = 700
nvme-gen4 = 900
nfs-100gbe = 200000
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sizing of a saved watched run, priced, written as a page, Markdown and JSON."""
    d = tmp_path_factory.mktemp("sizing")
    watch_record().save(d / "run.json")
    (d / "prices.toml").write_text(PRICES)
    proc = run_cli(
        "size",
        str(d / "run.json"),
        # the run's 8 cores decode 800 samples/s: 8 GPUs of 100 samples/s at 90%
        "--gpu-samples-per-s",
        "100",
        "--gpus",
        "1,2,4,8",
        "--cost",
        str(d / "prices.toml"),
        "--html",
        str(d / "size.html"),
        "--md",
        str(d / "size.md"),
        "--json",
        str(d / "size.json"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Accelerators each storage class keeps" in proc.stdout
    return d


def test_the_page_opens_offline_with_the_answer_on_top_and_its_charts(report: Path) -> None:
    assert chromium_path() is not None, "Chromium is missing; `make chromium` installs it"
    rec = RunRecord.load(report / "size.json")
    assert rec.sizing is not None and rec.sizing.cheapest is not None
    page = open_page(
        report / "size.html",
        ["#verdict", "#utilisation svg", "#units", "#references", "#density", "#inputs", "h2"],
        height=2400,
    )
    assert page.console_errors == []
    assert page.requests == [(report / "size.html").resolve().as_uri()]
    # the answer on top is the record's cheapest configuration, priced
    assert page.texts["#verdict"] == rec.sizing.cheapest.text
    assert "EUR" in (page.texts["#verdict"] or "")
    assert page.texts["h2"] == "GPU utilisation against GPUs per node"
    # the chart's axes and every class in its table, the reference's nearest workload
    assert "GPUs per node" in (page.texts["#utilisation svg"] or "")
    units = page.texts["#units"] or ""
    for name in load_catalog():
        assert name in units
    assert rec.sizing.references is not None
    assert rec.sizing.references.points[0].system in (page.texts["#references"] or "")
    inputs = page.texts["#inputs"] or ""
    assert "measured: dataset.sample_bytes_mean" in inputs and "given" in inputs
    assert non_blank_fraction(page.screenshot_png) > 0.05


def test_the_chart_draws_a_line_per_class_and_the_target(report: Path) -> None:
    page = (report / "size.html").read_text()
    chart = page[page.index('id="utilisation"') :]
    chart = chart[: chart.index("</svg>")]
    rec = RunRecord.load(report / "size.json")
    assert rec.sizing is not None
    assert chart.count("<polyline") == len(rec.sizing.storage) + 1
    # each class's line passes through its rows' utilisation: the first point of each
    # line is at 1 GPU, and a class fed 100% there sits on the chart's top gridline
    assert "target 90%" in chart


def test_the_markdown_says_what_the_page_says(report: Path) -> None:
    text = (report / "size.md").read_text()
    rec = RunRecord.load(report / "size.json")
    assert rec.sizing is not None and rec.sizing.cheapest is not None
    assert rec.sizing.cheapest.text.split(";")[0] in text
    for part in ("MLPerf Storage units", "**Density**", "**Reference points", "**Inputs**"):
        assert part in text
    units = [line for line in text.splitlines() if line.startswith("| nvme-gen4 |")]
    u = next(u for u in rec.sizing.units if u.storage == "nvme-gen4")
    assert units and f"| {u.accelerators:,} |" in units[0]
    assert "| cost EUR | EUR per sample/s |" in text
    assert u.cost is not None and f"| {u.cost:,.0f} |" in units[0]


def test_size_refuses_a_trace_and_a_bad_price_file_in_one_line(tmp_path: Path) -> None:
    base = ["size", "--sample-bytes", "110kB", "--gpu-samples-per-s", "2500"]
    proc = run_cli(*base, "-o", str(tmp_path / "s.trace.json"))
    assert_one_line_error(proc, "no timeline to trace")
    bad = tmp_path / "p.toml"
    bad.write_text("[storage]\nnvme-gen9 = 100\n")
    proc = run_cli(*base, "--cost", str(bad))
    assert_one_line_error(proc, "no storage class named nvme-gen9")
    proc = run_cli(*base, "--cost", str(tmp_path / "missing.toml"))
    assert_one_line_error(proc, "missing.toml: no such file")
    assert not (tmp_path / "s.trace.json").exists()


def test_json_on_stdout_carries_the_units_and_prints_no_table(tmp_path: Path) -> None:
    proc = run_cli("size", "--sample-bytes", "110kB", "--gpu-samples-per-s", "2500", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    units = {u["storage"]: u for u in data["sizing"]["units"]}
    assert set(units) == set(load_catalog())
    assert data["sizing"]["density"]["density"] == "low"
    assert data["sizing"]["references"]["points"]

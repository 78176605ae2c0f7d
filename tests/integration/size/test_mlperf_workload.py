"""``ioprobe size --workload W --accelerator A``: MLPerf Storage's emulation sized in its own
units, held to the published results it must reproduce."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from ioprobe.analysis.mlperf import shipped_references
from ioprobe.record import ReferencePoint
from tests.support.cli import assert_one_line_error, run_cli


def _pairings() -> dict[tuple[str, str], list[ReferencePoint]]:
    by: dict[tuple[str, str], list[ReferencePoint]] = defaultdict(list)
    for r in shipped_references():
        by[(r.workload, r.accelerator)].append(r)
    return dict(by)


@pytest.mark.parametrize(("workload", "accelerator"), sorted(_pairings()))
def test_each_published_systems_throughput_keeps_about_its_published_accelerators(
    tmp_path: Path, workload: str, accelerator: str
) -> None:
    # a storage class delivering exactly a result's published throughput must keep about
    # the simulated accelerators that result reports: the workload's record length, batch,
    # step and AU threshold all enter the count, and a wrong one moves it
    results = _pairings()[(workload, accelerator)]
    rates = ",".join(f"{r.bytes_per_s / 1e9:.4f}GB/s" for r in results)
    out = tmp_path / "s.json"
    proc = run_cli("size", "--workload", workload, "--accelerator", accelerator,
                   "--storage", rates, "--gpus", "1", "--json", str(out), timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sizing = json.loads(out.read_text())["sizing"]
    kept = [u["storage_accelerators"] for u in sizing["units"]]
    for r, n in zip(results, kept, strict=True):
        # a result's count is what its runs kept at about the AU threshold (one 3D U-Net
        # result, 13 H100s at 36.25 GB/s, ran at 88% by the mean record length): within 12%
        assert abs(n - r.accelerators) <= 0.12 * r.accelerators, (r.system, n)
    wl = sizing["inputs"]["workload"]
    assert (wl["name"], wl["accelerator"]) == (workload, accelerator)
    assert sizing["inputs"]["target_utilization"] == wl["au_threshold"]


def test_the_emulation_names_its_units_and_sets_its_own_published_results_first(
    tmp_path: Path,
) -> None:
    md = tmp_path / "s.md"
    proc = run_cli("size", "--workload", "unet3d", "--accelerator", "b200", "--gpus", "8",
                   "--md", str(md), timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert (
        "(MLPerf Storage unet3d, simulated B200) 147 MB/sample, 43.2 samples/s per accelerator"
        in out
    )
    assert "Simulated B200s each storage class keeps at >= 90% AU on unet3d" in out
    # 99 B200s at 578 GB/s is v3.0's largest unet3d result; an H100 result is nearer in
    # nothing but the workload
    assert "The largest published unet3d result on B200s (v3.0, closed): YanRongTech" in out
    assert "computation_time 0.162 s" in out
    page = md.read_text()
    assert "/configs/dlio/workload/unet3d\\_b200.yaml" in page  # Markdown-escaped
    assert "| samples/s per accelerator | 43.2 | MLPerf Storage unet3d (B200): batch 7" in page
    assert "measured:" not in page  # nothing here was measured


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--workload", "bert"), "one of cosmoflow, resnet50, retinanet, unet3d"),
        (("--workload", "resnet50", "--accelerator", "B200"), "configured for A100, H100"),
        (("--accelerator", "H100"), "give --workload too"),
        (("--workload", "unet3d", "--sample-bytes", "1MB"), "drop --sample-bytes"),
        (("--workload", "unet3d", "--target-utilization", "0.5"), "drop --target-utilization"),
    ],
)
def test_a_workload_the_benchmark_does_not_configure_is_one_line(
    args: tuple[str, ...], said: str
) -> None:
    assert_one_line_error(run_cli("size", *args, timeout=30), said)

"""The host-to-device probe's logic, through the CUDA seam's stand-in and a fake NVML.

The stand-in copier (tests/fixtures/sim_copier.py) times each copy as latency + bytes/rate,
so every rate the probe reports has an exact truth; the real CUDA path is the same code with
``TorchCopier`` behind the seam (tests/integration/probe/test_pcie_gpu.py runs it on a GPU).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ioprobe.analysis import finalize
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.pcie import (
    copy_rows,
    degraded,
    degraded_link_rule,
    low_efficiency_rule,
    probe_pageable_rule,
)
from ioprobe.analysis.report import findings
from ioprobe.capacity import copy_rate_at
from ioprobe.collect import pcie
from ioprobe.collect.cpu import measure_cpu
from ioprobe.collect.cuda_copy import open_copier
from ioprobe.collect.decode import decode_image, output_nbytes
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.record import CopyPoint, PcieLink, RunRecord
from ioprobe.render.terminal import view
from tests.fixtures.sim_copier import SimCopier

MIB = 1 << 20
SMALL = (64 << 10, MIB, 16 * MIB)


def rate_of(c: SimCopier, size: int, direction: str, pinned: bool) -> float:
    return size / c.seconds(size, direction, pinned)  # type: ignore[arg-type]


def test_link_rate_follows_each_generations_line_code() -> None:
    assert pcie.link_rate(5, 16) == pytest.approx(63.0e9, rel=0.001)
    assert pcie.link_rate(4, 16) == pytest.approx(31.5e9, rel=0.001)
    assert pcie.link_rate(3, 8) == pytest.approx(7.88e9, rel=0.001)
    assert pcie.link_rate(2, 16) == pytest.approx(8.0e9)  # 8b/10b
    assert pcie.link_rate(None, 16) is None
    assert pcie.link_rate(5, None) is None


def test_copy_rates_are_the_modelled_rates_for_every_size_direction_and_memory() -> None:
    c = SimCopier(store=False)
    points, link = pcie.measure_copies(c, sizes=SMALL, budget_s=10)
    assert link is None  # no reader given
    assert len(points) == len(SMALL) * 4
    for p in points:
        truth = rate_of(c, p.size_bytes, p.direction, p.memory == "pinned")
        assert p.bytes_per_s == pytest.approx(truth, rel=1e-9)
        assert len(p.trials) == 3
    # small copies are latency-bound: the curve rises with size
    h2d = sorted(
        (p.size_bytes, p.bytes_per_s)
        for p in points
        if p.direction == "h2d" and p.memory == "pinned"
    )
    assert [r for _, r in h2d] == sorted(r for _, r in h2d)


def test_each_trial_moves_at_least_64_mib_or_a_thousand_copies() -> None:
    class Counting(SimCopier):
        reps_seen: list[tuple[int, int]]

        def start(self, host: Any, device: Any, nbytes: int, direction: Any, reps: int) -> Any:
            self.reps_seen.append((nbytes, reps))
            return super().start(host, device, nbytes, direction, reps)

    c = Counting(store=False)
    c.reps_seen = []
    pcie.measure_copies(c, sizes=(64 << 10, 256 * MIB), budget_s=10)
    timed = [(n, r) for n, r in c.reps_seen if r > 1 or n == 256 * MIB]
    assert (64 << 10, 1000) in timed
    assert (256 * MIB, 1) in timed


def test_the_link_is_read_while_a_copy_burst_is_in_flight() -> None:
    order: list[str] = []

    class Recording(SimCopier):
        def start(self, *a: Any) -> Any:
            order.append("start")
            return super().start(*a)

        def wait(self, pending: Any) -> float:
            order.append("wait")
            return super().wait(pending)

    def reader(index: int) -> PcieLink:
        order.append(f"link {index}")
        return pcie.make_link(5, 5, 16, 16)

    _, link = pcie.measure_copies(Recording(store=False, index=3), sizes=(MIB,), link_reader=reader)
    at = order.index("link 3")
    assert order[at - 1 : at + 2] == ["start", "link 3", "wait"]
    assert link is not None and link.theoretical_bytes_per_s == pytest.approx(63.0e9, rel=0.001)


def test_a_spent_budget_keeps_the_smallest_size_and_stops() -> None:
    points, _ = pcie.measure_copies(SimCopier(store=False), sizes=SMALL, budget_s=0.0)
    assert {p.size_bytes for p in points} == {SMALL[0]}


def test_rate_at_interpolates_on_log_size_and_holds_beyond_the_ends() -> None:
    pts = [
        CopyPoint("h2d", "pinned", MIB, 10e9),
        CopyPoint("h2d", "pinned", 4 * MIB, 20e9),
    ]
    assert copy_rate_at(pts, "h2d", "pinned", 2 * MIB) == pytest.approx(15e9)
    assert copy_rate_at(pts, "h2d", "pinned", 1024) == 10e9
    assert copy_rate_at(pts, "h2d", "pinned", 1 << 40) == 20e9
    with pytest.raises(ValueError):
        copy_rate_at(pts, "d2h", "pinned", MIB)


def test_stage_capacity_is_the_pinned_rate_at_one_batch_over_bytes_per_sample() -> None:
    c = SimCopier(store=False)
    points, _ = pcie.measure_copies(c, sizes=(64 << 10, 256 << 10, MIB, 4 * MIB, 16 * MIB))
    per_sample, batch = 150_528.0, 32  # 224x224x3 uint8
    stage = pcie.pcie_stage(points, pcie.make_link(5, 5, 16, 16), per_sample, batch, "decoded")
    truth = copy_rate_at(points, "h2d", "pinned", per_sample * batch)
    assert stage.capacity_samples_per_s == pytest.approx(truth / per_sample)
    assert stage.pageable_bytes_per_s == pytest.approx(
        copy_rate_at(points, "h2d", "pageable", per_sample * batch)
    )
    assert stage.efficiency == pytest.approx(
        max(p.bytes_per_s for p in points if p.direction == "h2d" and p.memory == "pinned")
        / 63.0e9,
        rel=0.001,
    )
    assert "decoded" in stage.method


def test_nvml_link_maps_the_cuda_index_through_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    class NotSupported(Exception):
        pass

    def width(h: int) -> int:
        if h == 2:
            raise NotSupported  # a MIG slice: one reading missing, the others kept
        return 16

    nvml = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(i) or i,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=width,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
    link = pcie.nvml_link(1, nvml)
    assert asked == [2]
    assert link is not None
    assert (link.gen_current, link.gen_max, link.width_current, link.width_max) == (4, 5, None, 16)
    assert link.theoretical_bytes_per_s is None and link.max_bytes_per_s == pytest.approx(
        63.0e9, rel=0.001
    )
    assert pcie.nvml_link(2, nvml) is None  # only two devices visible


def test_no_gpu_is_a_reason_not_an_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert open_copier() == "not measured: no CUDA device"


# --------------------------------------------------------------------------- decoded bytes


def test_decoded_bytes_are_what_a_loader_copies_not_the_file() -> None:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((160, 200, 3), dtype=np.uint8)).save(buf, "JPEG")
    assert output_nbytes(decode_image(buf.getvalue())) == 224 * 224 * 3
    assert output_nbytes(np.zeros((10, 10), dtype=np.float32)) == 400
    assert output_nbytes([np.zeros(3, np.uint8), np.zeros(5, np.uint8)]) == 8
    assert output_nbytes(b"abc") == 3
    assert output_nbytes(object()) is None
    # the CPU phase's workers size the decoded samples as they decode them
    stage = measure_cpu("image", [buf.getvalue()] * 3, 1, 0.3, levels=[1])
    assert stage.output_bytes_per_sample == 224 * 224 * 3


# --------------------------------------------------------------------------- the probe


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    for i in range(60):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)).save(buf, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    return root


def _probe(jpegs: Path, copier: SimCopier, link: PcieLink | None = None, **kw: Any) -> RunRecord:
    opts = ProbeOptions(
        target=str(jpegs),
        passes=["warm"],
        time_budget_s=6,
        workers=1,
        copier=copier,
        link_reader=lambda i: link,
        **kw,
    )
    return finalize(Probe(opts).run())


@pytest.mark.slow
def test_a_slow_link_is_named_the_bottleneck_at_its_modelled_rate(jpegs: Path) -> None:
    # 2 MB/s pinned: about 13 decoded 224x224 images/s, far below what one core decodes
    slow = SimCopier(
        store=False,
        rates={("h2d", True): 2e6, ("h2d", False): 1e6, ("d2h", True): 2e6, ("d2h", False): 1e6},
        latency_s=0.0,
    )
    rec = _probe(jpegs, slow, pcie.make_link(5, 5, 16, 16), batch_size=8)
    pc = rec.stages.pcie
    assert rec.bottleneck == "pcie"
    assert pc.bytes_per_sample == 224 * 224 * 3
    assert pc.capacity_samples_per_s == pytest.approx(2e6 / (224 * 224 * 3), rel=1e-6)
    assert len(pc.copies) == len(pcie.SIZES) * 4 or len(pc.copies) % 4 == 0
    # pageable copies at half the rate would cap it lower still: the advice says so
    kinds = [r.kind for r in rec.recommendations]
    assert "pin_memory" in kinds
    text = next(r.text for r in rec.recommendations if r.kind == "pin_memory")
    assert "2.0x" in text


@pytest.mark.slow
def test_a_fast_link_leaves_the_cpu_the_bottleneck_and_the_record_round_trips(
    jpegs: Path, tmp_path: Path
) -> None:
    rec = _probe(jpegs, SimCopier(store=False), pcie.make_link(4, 5, 8, 16))
    assert rec.bottleneck == "cpu"
    assert rec.stages.pcie.capacity_samples_per_s is not None
    assert rec.stages.pcie.capacity_samples_per_s > rec.predicted_samples_per_s
    assert not any(r.kind == "pin_memory" for r in rec.recommendations)
    link_advice = [r for r in rec.recommendations if r.kind == "pcie_link"]
    assert len(link_advice) == 1 and "gen 4 x8" in link_advice[0].text
    assert link_advice[0].predicted_samples_per_s is None  # the link does not limit this run
    rec.save(tmp_path / "run.json")
    back = RunRecord.load(tmp_path / "run.json")
    assert back.stages.pcie.copies == rec.stages.pcie.copies
    assert back.stages.pcie.link == rec.stages.pcie.link
    text = _render(back)
    assert "H2D pinned" in text and "PCIe link" in text and "gen 4 x8 (supports gen 5 x16)" in text


def _render(rec: RunRecord) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=io.StringIO())
    console.print(view(rec, findings(rec)))
    return console.export_text()


def test_pcie_only_measures_the_link_with_no_dataset() -> None:
    opts = ProbeOptions(
        target="",
        pcie_only=True,
        time_budget_s=5,
        copier=SimCopier(store=False),
        link_reader=lambda i: pcie.make_link(5, 5, 16, 16),
    )
    rec = finalize(Probe(opts).run())
    assert rec.stages.pcie.copies and rec.stages.pcie.capacity_samples_per_s is None
    # a fully trained link carrying 25 of 63 GB/s: only the efficiency advice
    assert [r.kind for r in rec.recommendations] == ["pcie_efficiency"]
    text = _render(rec)
    assert "host-to-device: pinned copies reach 25 GB/s on a gen 5 x16 link" in text
    assert "256 MiB" in text


def test_the_cli_refuses_pcie_only_without_a_gpu_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    r = subprocess.run(
        [sys.executable, "-m", "ioprobe", "probe", "--pcie-only"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ioprobe: error: --pcie-only needs a CUDA device: no CUDA device"
    ]


# --------------------------------------------------------------------------- advice


def _link_record(
    link: PcieLink, cap: float, pinned: float, pageable: float, **caps: float
) -> RunRecord:
    from ioprobe.record import DatasetProfile, HostInfo

    rec = RunRecord(kind="probe", host=HostInfo(), dataset=DatasetProfile(target="x"))
    pc = rec.stages.pcie
    pc.link, pc.capacity_samples_per_s, pc.bytes_per_sample = link, cap, 1e5
    pc.pinned_bytes_per_s, pc.pageable_bytes_per_s, pc.bytes_per_s = pinned, pageable, pinned
    pc.copies = [
        CopyPoint("h2d", "pinned", MIB, pinned),
        CopyPoint("h2d", "pageable", MIB, pageable),
    ]
    pc.efficiency = pinned / link.theoretical_bytes_per_s if link.theoretical_bytes_per_s else None
    rec.stages.cpu.capacity_samples_per_s = caps.get("cpu")
    rec.stages.storage.capacity_samples_per_s = caps.get("storage")
    return rec


def test_a_trained_down_link_that_limits_predicts_the_ratio_of_link_rates() -> None:
    link = pcie.make_link(3, 5, 16, 16)  # 15.75 of 63 GB/s
    rec = _link_record(link, cap=100_000.0, pinned=13e9, pageable=6e9, cpu=1e6)
    f = pipeline_model(rec.stages)
    assert f.bottleneck == "pcie" and degraded(link)
    (advice,) = degraded_link_rule(rec, f)
    assert advice.predicted_samples_per_s == pytest.approx(400_000.0, rel=0.01)
    assert "4.0x" in advice.text


def test_a_healthy_link_gets_no_link_advice() -> None:
    rec = _link_record(
        pcie.make_link(5, 5, 16, 16), cap=500_000.0, pinned=54e9, pageable=7e9, cpu=1e4
    )
    f = pipeline_model(rec.stages)
    assert degraded_link_rule(rec, f) == []
    assert low_efficiency_rule(rec, f) == []  # 86% of the link
    assert probe_pageable_rule(rec, f) == []  # pageable: 70,000/s, far above the CPU's 10,000/s


def test_low_efficiency_on_a_full_link_points_past_the_link() -> None:
    rec = _link_record(
        pcie.make_link(5, 5, 16, 16), cap=200_000.0, pinned=20e9, pageable=7e9, cpu=1e4
    )
    (advice,) = low_efficiency_rule(rec, pipeline_model(rec.stages))
    assert "32%" in advice.text and "iommu" in advice.text.lower()


def test_copy_rows_pair_each_size_with_its_four_rates() -> None:
    rec = _link_record(pcie.make_link(5, 5, 16, 16), cap=1.0, pinned=2e9, pageable=1e9)
    (row,) = copy_rows(rec)
    assert (row.size_bytes, row.h2d_pinned, row.h2d_pageable, row.d2h_pinned) == (
        MIB,
        2e9,
        1e9,
        None,
    )


def test_json_of_a_probe_with_copies_has_the_contract_keys(jpegs: Path, tmp_path: Path) -> None:
    from tests.support.contract import CONTRACT_KEYS

    rec = _probe(jpegs, SimCopier(store=False), pcie.make_link(5, 5, 16, 16))
    data = json.loads(rec.dumps())
    for key in CONTRACT_KEYS:
        assert key in data
    assert data["stages"]["pcie"]["capacity_samples_per_s"] > 0

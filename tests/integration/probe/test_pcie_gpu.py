"""The host-to-device probe on a real CUDA device, against a bare torch copy timed alike.

The truth is measured in the same test: a plain ``dst.copy_(src, non_blocking=True)`` loop
between two CUDA events on a fresh stream, with none of ioprobe's code. ioprobe's figures at
the same sizes must agree within 10% (pinned) and 20% (pageable); the link must be what NVML reports; the CLI's
``--pcie-only`` must produce a record that says all of it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ioprobe.collect import pcie
from ioprobe.collect.cuda_copy import TorchCopier, open_copier
from tests.fixtures.bare_copy import bare_rate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MIB = 1 << 20
SIZES = (MIB, 16 * MIB, 256 * MIB)
ROUNDS = 5
# A pageable copy is a CPU memcpy into a staging buffer, so its rate follows the host's memory
# traffic from moment to moment: on the H100 host ioprobe's pageable figures read 0.74-1.19 of
# the bare loop's across sizes in one benchmark run, and 0.96, 0.90, 0.87 at 16 MiB in three
# rounds of this test, where pinned copies stayed within 5% from 1 MiB up. A 20% band still
# catches a method error (a wrong byte count or clock is off by far more).
PAGEABLE_TOLERANCE = 0.20


def test_copy_rates_match_a_bare_torch_copy_pinned_within_10_pageable_within_20_percent() -> None:
    # ioprobe and the bare loop alternate, five rounds, and the median of the per-round
    # ratios is compared (the protocol of docs/benchmarks.md): on a shared host a copy's rate
    # moves with the host's memory traffic, so one measurement each would compare two
    # moments as much as two methods
    copier = open_copier()
    assert isinstance(copier, TorchCopier)
    ratios: dict[tuple[int, str], list[float]] = {}
    lines = []
    for _ in range(ROUNDS):
        points, _ = pcie.measure_copies(copier, sizes=SIZES, budget_s=60)
        for p in points:
            if p.direction != "h2d":
                continue
            truth = bare_rate(p.size_bytes, p.memory == "pinned", "h2d")
            ratios.setdefault((p.size_bytes, p.memory), []).append(p.bytes_per_s / truth)
            lines.append(
                f"{p.size_bytes >> 20} MiB {p.memory}: ioprobe {p.bytes_per_s / 1e9:.2f} GB/s, "
                f"bare {truth / 1e9:.2f} GB/s"
            )
    print("\n".join(lines))
    for (size, memory), rs in ratios.items():
        tolerance = 0.10 if memory == "pinned" else PAGEABLE_TOLERANCE
        assert statistics.median(rs) == pytest.approx(1.0, abs=tolerance), (size, memory, rs)
    pinned = max(p.bytes_per_s for p in points if p.memory == "pinned" and p.direction == "h2d")
    pageable = max(p.bytes_per_s for p in points if p.memory == "pageable" and p.direction == "h2d")
    assert pinned > pageable  # the reason pin_memory exists


def test_the_link_is_read_under_load_and_pinned_copies_reach_most_of_it() -> None:
    copier = open_copier()
    assert isinstance(copier, TorchCopier)
    points, link = pcie.measure_copies(
        copier, sizes=(256 * MIB,), budget_s=30, link_reader=pcie.nvml_link
    )
    assert link is not None and link.gen_current and link.width_current
    assert link.theoretical_bytes_per_s
    stage = pcie.pcie_stage(points, link, 150_528.0, 32, "decoded")
    assert stage.efficiency is not None
    # no copy beats the wire; a healthy link carries well over half of it
    assert 0.5 < stage.efficiency < 1.0, (link, stage.efficiency)


def test_cli_pcie_only_writes_a_record_with_the_link_and_copies(tmp_path: Path) -> None:
    out = tmp_path / "pcie.json"
    r = subprocess.run(
        [sys.executable, "-m", "ioprobe", "probe", "--pcie-only", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    pc = data["stages"]["pcie"]
    assert len(pc["copies"]) == len(pcie.SIZES) * 4
    assert pc["link"]["gen_current"] >= 1
    assert pc["efficiency"] > 0.5
    assert data["host"]["gpus"], "the host's GPU list"

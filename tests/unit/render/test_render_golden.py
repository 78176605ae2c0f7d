"""Terminal output pinned byte for byte at a fixed width.

A change to a renderer shows up here as a diff a reviewer can read. To accept an intended
change: ``IOPROBE_UPDATE_GOLDEN=1 pytest tests/unit/render/test_render_golden.py`` and review the diff.
"""

from __future__ import annotations

import io
import math
import os
import re
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from ioprobe.analysis import finalize
from ioprobe.analysis.catalog import load_catalog, resolve_storage
from ioprobe.analysis.report import findings
from ioprobe.analysis.size import size
from ioprobe.analysis.whatif import whatif
from ioprobe.record import Change, RunRecord, SizeInputs
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.terminal import view
from tests.unit.analysis.test_whatif import watch_record

GOLDEN = Path(__file__).parent / "golden"


def text(renderable: RenderableType, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue()


def shown(rec: RunRecord) -> RenderableType:
    return view(rec, findings(rec))


def check(name: str, got: str) -> None:
    path = GOLDEN / name
    if os.environ.get("IOPROBE_UPDATE_GOLDEN"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8"), f"{name} changed; see the module docstring"


def test_size_table_golden() -> None:
    cat = load_catalog()
    inp = SizeInputs(
        sample_bytes=110e3,
        gpu_samples_per_s=2500.0,
        cpu_seconds_per_sample=0.004,
        cores=64,
        dataset_bytes=140e9,
    )
    classes = [
        resolve_storage("2000MB/s", cat),
        cat["sata-ssd"],
        cat["nvme-gen4"],
        cat["nfs-10gbe"],
    ]
    check("size.txt", text(shown(size(inp, classes, [1, 2, 4, 8, 16, 32]))))


def test_a_size_table_wider_than_the_terminal_keeps_the_ends_and_each_class_knee() -> None:
    cat = load_catalog()
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    rec = size(inp, [cat["sata-ssd"], cat["nfs-10gbe"], cat["nvme-gen3"]], list(range(1, 41)))
    assert rec.gpus_supported == {"sata-ssd": 2, "nfs-10gbe": 4, "nvme-gen3": 12}
    got = text(shown(rec), width=80)
    lines = got.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if line.startswith("storage"))
    heads = [int(h) for h in re.findall(r"(\d+) GPUs? ", header)]
    # the ends, and each class's most GPUs kept at 90% (the knee a reader looks for)
    assert {1, 40, 2, 4, 12} <= set(heads) and heads == sorted(heads) and len(heads) < 40
    assert f"{len(heads)} of 40 GPU counts shown in 80 columns" in " ".join(lines)
    # every cell sits under its own count's column
    sata = next(line for line in lines if line.startswith("sata-ssd")).split()
    by = {r.gpus: r for r in rec.sizing.rows if r.storage == "sata-ssd"} if rec.sizing else {}
    cells = [c for c in sata[2:-1] if c != "S"]
    assert cells == [f"{math.floor(by[n].gpu_utilization * 100 + 1e-9)}%" for n in heads]
    # a width that holds every count shows them all, with no note
    wide = text(shown(rec), width=400)
    assert "GPU counts shown" not in wide and "40 GPUs" in wide and "39 GPUs" in wide


def test_watch_summary_and_whatif_golden() -> None:
    rec = finalize(watch_record(cpu_s=0.01, workers=1, storage=900.0, gpu=350.0, cores=8))
    rec.dataset.target = "train/"
    check("watch.txt", text(shown(rec)))
    check("whatif.txt", text(shown(whatif(rec, Change(workers=4)))))
    check("watch.md", render_markdown(rec, findings(rec)))


@pytest.mark.parametrize("width", [60, 200])
def test_renderers_fit_any_width(width: int) -> None:
    rec = finalize(watch_record())
    for r in (shown(rec), shown(whatif(rec, Change(workers=3)))):
        assert all(len(line) <= width for line in text(r, width).splitlines())


def test_a_watched_run_with_no_file_reads_says_its_bytes_were_not_seen() -> None:
    # a Hugging Face Arrow dataset reads through memory maps: it showed "mean 0.0 KB"
    rec = finalize(watch_record(cpu_s=0.004, workers=2, storage=None, gpu=1000.0, cores=4))
    assert rec.watch is not None
    rec.watch.storage_metered = False
    rec.dataset.sample_bytes_mean = 0.0
    got = text(shown(rec), width=160) + render_markdown(rec, findings(rec))
    assert "bytes per sample not seen" in got and "memory maps" in got
    assert "mean 0.0" not in got

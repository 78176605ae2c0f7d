"""`ioprobe whatif` and `ioprobe size` through the real CLI in a subprocess."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.cli import assert_one_line_error, probe_json, run_cli
from tests.support.contract import CONTRACT_KEYS
from tests.unit.analysis.test_whatif import watch_record

pytestmark = pytest.mark.slow


def saved(tmp_path: Path, name: str = "run.json", **kw: Any) -> Path:
    path = tmp_path / name
    watch_record(**kw).save(path)
    return path


def as_json(*args: str) -> dict[str, Any]:
    proc = run_cli(*args, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_size_from_numbers_answers_the_analytic_case() -> None:
    data = as_json(
        "size",
        "--sample-bytes",
        "110kB",
        "--gpu-samples-per-s",
        "2500",
        "--storage",
        "2000MB/s",
        "--gpus",
        "1,2,4,8,16",
    )
    assert data["kind"] == "size"
    assert data.keys() >= CONTRACT_KEYS
    assert data["gpus_supported"] == {"2000MB/s": 8}
    rows = {r["gpus"]: r for r in data["sizing"]["rows"]}
    assert rows[8]["gpu_utilization"] == pytest.approx(2000e6 / 110e3 / 20000, rel=1e-6)


def test_size_table_names_every_class_and_the_gpus_each_supports() -> None:
    proc = run_cli(
        "size", "--sample-bytes", "110kB", "--gpu-samples-per-s", "2500", "--gpus", "1,8,64"
    )
    assert proc.returncode == 0, proc.stderr
    for name in (
        "hdd",
        "sata-ssd",
        "nvme-gen3",
        "nvme-gen4",
        "nvme-gen5",
        "nfs-10gbe",
        "object-storage",
    ):
        assert name in proc.stdout
    assert "GPUs >= 90%" in proc.stdout
    assert "No class keeps 64 GPUs per node" in proc.stdout or "Cheapest balanced" in proc.stdout


def test_size_from_a_saved_run_takes_its_figures_and_flags_override(tmp_path: Path) -> None:
    run = saved(tmp_path, cpu_s=0.004, workers=4, storage=500.0, gpu=1000.0, cores=16)
    data = as_json("size", str(run), "--storage", "1GB/s", "--gpus", "1,2")
    inputs = data["sizing"]["inputs"]
    assert inputs["sample_bytes"] == 100_000.0
    assert inputs["gpu_samples_per_s"] == 1000.0
    assert inputs["cpu_seconds_per_sample"] == 0.004
    assert inputs["cores"] == 16
    assert inputs["sources"]["gpu_samples_per_s"] == "stages.gpu (per GPU)"
    # 1 GB/s / 100 kB = 10,000/s; 16 cores / 4 ms = 4,000/s: 4 GPUs at 1,000/s are fed
    assert data["gpus_supported"] == {"1GB/s": 4}
    over = as_json("size", str(run), "--storage", "1GB/s", "--gpus", "1", "--cores", "64")
    assert over["sizing"]["inputs"]["sources"]["cores"] == "given"
    # 64 cores feed 16,000/s, so storage binds: 10,000 / (0.9 x 1,000) = 11 GPUs
    assert over["gpus_supported"] == {"1GB/s": 11}


def test_user_catalog_adds_a_class_and_bad_catalogs_are_one_line_errors(tmp_path: Path) -> None:
    good = tmp_path / "mine.toml"
    good.write_text(
        '[classes.lustre-hdr]\nlabel = "Lustre over HDR"\nscope = "network"\n'
        "seq_read_MBps = 20000\niops_4k = 500000\niops_128k = 150000\nlatency_ms = 0.2\n"
        'source = "site measurement"\n'
    )
    data = as_json(
        "size",
        "--sample-bytes",
        "1MB",
        "--gpu-samples-per-s",
        "1000",
        "--storage",
        "lustre-hdr,nvme-gen4",
        "--catalog",
        str(good),
    )
    assert set(data["gpus_supported"]) == {"lustre-hdr", "nvme-gen4"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[classes.x]\nlabel = "x"\nscope = "tape"\n')
    proc = run_cli(
        "size", "--sample-bytes", "1MB", "--gpu-samples-per-s", "1", "--catalog", str(bad)
    )
    assert_one_line_error(proc, "bad.toml", "classes.x")
    proc = run_cli(
        "size",
        "--sample-bytes",
        "1MB",
        "--gpu-samples-per-s",
        "1",
        "--storage",
        "x",
        env={"IOPROBE_CATALOG": str(good)},
    )
    assert_one_line_error(proc, "unknown storage class 'x'", "lustre-hdr", "nvme-gen4")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["size"], ["--sample-bytes"]),
        (["size", "--sample-bytes", "110kB"], ["--gpu-samples-per-s"]),
        (["size", "--sample-bytes", "lots", "--gpu-samples-per-s", "1"], ["--sample-bytes 'lots'"]),
        (
            ["size", "--sample-bytes", "1kB", "--gpu-samples-per-s", "1", "--gpus", "1,x"],
            ["--gpus"],
        ),
        (
            ["size", "--sample-bytes", "1kB", "--gpu-samples-per-s", "1", "--storage", "ssd"],
            ["unknown storage class", "nvme-gen4"],
        ),
        (["size", "--sample-bytes", "1kB", "--gpu-samples-per-s", "1", "--nic", "fast"], ["--nic"]),
        (
            [
                "size",
                "--sample-bytes",
                "1kB",
                "--gpu-samples-per-s",
                "1",
                "--target-utilization",
                "2",
            ],
            ["target-utilization"],
        ),
        (["size", "missing.json"], ["missing.json", "no such file"]),
        (["whatif", "missing.json", "--workers", "2"], ["missing.json"]),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(run_cli(*args), *fragments)


def test_whatif_needs_a_change_and_valid_flags(tmp_path: Path) -> None:
    run = saved(tmp_path)
    assert_one_line_error(run_cli("whatif", str(run)), "nothing to change")
    assert_one_line_error(run_cli("whatif", str(run), "--pcie", "fast"), "gen4x16")
    assert_one_line_error(run_cli("whatif", str(run), "--storage", "tape"), "unknown storage class")
    assert_one_line_error(run_cli("whatif", str(run), "--workers", "-1"), "--workers")
    size_rec = tmp_path / "size.json"
    size_rec.write_text(
        run_cli("size", "--sample-bytes", "1kB", "--gpu-samples-per-s", "1", "--json", "-").stdout
    )
    assert_one_line_error(run_cli("whatif", str(size_rec), "--workers", "2"), "size record")


def test_whatif_record_says_what_changed_and_composes(tmp_path: Path) -> None:
    run = saved(tmp_path, cpu_s=0.01, workers=1, storage=None, gpu=400.0, cores=8)
    data = as_json("whatif", str(run), "--workers", "2")
    assert data.keys() >= CONTRACT_KEYS
    assert data["kind"] == "whatif"
    assert data["predicted_samples_per_s"] == pytest.approx(200.0)
    assert data["gpu_idle_fraction"] == pytest.approx(0.5)
    assert data["whatif"]["change"]["workers"] == 2
    assert [d["stage"] for d in data["whatif"]["deltas"]] == ["cpu"]
    first = tmp_path / "w1.json"
    first.write_text(json.dumps(data))
    again = as_json("whatif", str(first), "--workers", "4")
    assert again["predicted_samples_per_s"] == pytest.approx(400.0)
    assert again["whatif"]["base_kind"] == "watch"
    shown = run_cli("report", str(first))
    assert (
        shown.returncode == 0 and "was cpu-bound" in shown.stdout and "--workers 2" in shown.stdout
    )


def test_whatif_and_size_from_a_real_probe(tmp_path: Path) -> None:
    root = tmp_path / "jpegs"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(80):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (160, 200, 3), dtype=np.uint8)).save(buf, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    probe = probe_json(tmp_path, str(root), "--time-budget", "6", "--gpu-samples-per-s", "100000")
    assert probe["bottleneck"] in ("cpu", "storage")
    run = tmp_path / "run.json"
    more = as_json("whatif", str(run), "--cores", "64", "--storage", "nvme-gen5", "--cache-gb", "1")
    assert more["predicted_samples_per_s"] > probe["predicted_samples_per_s"]
    sized = as_json("size", str(run), "--gpus", "1,2")
    assert sized["sizing"]["inputs"]["gpu_samples_per_s"] == pytest.approx(100000.0)
    assert set(sized["gpus_supported"]) >= {"nvme-gen4", "hdd"}
    # every recommendation of the probe states its predicted rate
    assert all(r["predicted_samples_per_s"] is not None for r in probe["recommendations"])

"""``ioprobe export dlio``: the workload YAML carries the measured run's figures, checked
against what the test built (file sizes, CPU burnt per sample, a step of known length)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.fixtures.burn import _burn as burn_cpu
from tests.support.cli import probe_json, run_cli

# its step and preprocess times are measured against sleeps and burns of known length
pytestmark = [pytest.mark.slow, pytest.mark.serial]

STEP_S = 0.02  # the consumer's step: computation_time's truth
BURN_S = 0.002  # CPU per sample: preprocess_time's truth
SIZES = [40_000 + 4_000 * (i % 5) for i in range(64)]  # mean 48 kB, a known spread


def _export(run: Path, *extra: str) -> dict[str, Any]:
    proc = run_cli("export", "dlio", str(run), *extra)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = yaml.safe_load(proc.stdout)
    return data


def _files(root: Path) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, size in enumerate(SIZES):
        p = root / f"s{i:03d}.npy"
        np.save(p, np.zeros(size - 128, dtype=np.uint8))  # 128 bytes of npy header
        out.append(p)
    return out


def test_a_watched_loop_exports_its_sizes_cpu_and_step(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader, Dataset

    import ioprobe
    from ioprobe.loaders import files as metered

    paths = [str(p) for p in _files(tmp_path / "data")]

    class Npy(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> torch.Tensor:
            n = len(metered.read_bytes(paths[i]))
            burn_cpu(BURN_S)
            return torch.tensor([n])

    loader = ioprobe.watch(
        DataLoader(Npy(), batch_size=4, num_workers=2, prefetch_factor=3, shuffle=True)
    )
    for _ in range(2):
        for _batch in loader:
            time.sleep(STEP_S)
    run = tmp_path / "run.json"
    loader.run.save(run)
    w = _export(run, "--data-folder", "/mnt/dlio/data")
    ds, reader, train = w["dataset"], w["reader"], w["train"]
    assert ds["data_folder"] == "/mnt/dlio/data"
    assert ds["record_length_bytes"] == pytest.approx(statistics.fmean(SIZES), rel=0.02)
    assert ds["record_length_bytes_stdev"] == pytest.approx(statistics.pstdev(SIZES), rel=0.10)
    assert ds["num_files_train"] == len(SIZES)  # one sample per file: the epoch's samples
    assert reader["batch_size"] == 4 and reader["read_threads"] == 2
    assert reader["prefetch_size"] == 6  # PyTorch's prefetch_factor x workers, as DLIO splits it
    assert reader["sample_shuffle"] == "seed" and reader["data_loader"] == "pytorch"
    # the burn and the sample's own read and tensor: CPU time, so load does not inflate it
    assert BURN_S * 0.95 <= reader["preprocess_time"] <= BURN_S * 1.5
    assert train["computation_time"] == pytest.approx(STEP_S, rel=0.25)
    assert train["epochs"] == 2
    assert w["metric"]["au"] == 0.9
    assert w["workflow"] == {"generate_data": False, "train": True, "checkpoint": False}


def test_a_probe_with_an_emulated_step_exports_its_dataset_and_step(tmp_path: Path) -> None:
    _files(tmp_path / "data")
    rec = probe_json(
        tmp_path,
        str(tmp_path / "data"),
        "--time-budget",
        "6",
        "--compute-ms-per-batch",
        "25",
        "--batch-size",
        "8",
        "--workers",
        "1",
    )
    run = tmp_path / "run.json"
    w = _export(run, "--epochs", "3")
    assert w["dataset"]["format"] == "npy"
    assert w["dataset"]["num_files_train"] == rec["dataset"]["files"] == len(SIZES)
    assert w["dataset"]["record_length_bytes"] == round(rec["dataset"]["sample_bytes_mean"])
    assert w["dataset"]["record_length_bytes_stdev"] == round(statistics.pstdev(SIZES))
    assert w["reader"]["batch_size"] == 8 and w["reader"]["read_threads"] == 1
    assert w["train"]["computation_time"] == pytest.approx(0.025)
    assert w["train"]["epochs"] == 3
    cost = rec["stages"]["cpu"]["cpu_seconds_per_sample"]
    assert w["reader"]["preprocess_time"] == pytest.approx(cost, abs=1e-6)


def test_a_record_without_a_step_is_refused_in_one_line(tmp_path: Path) -> None:
    _files(tmp_path / "data")
    probe_json(tmp_path, str(tmp_path / "data"), "--time-budget", "3")
    proc = run_cli("export", "dlio", str(tmp_path / "run.json"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("ioprobe: error: ") and "no step time" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("value", [5e-05, 5.1e-05, 1e-07, 1e20, 0.025, 3])
def test_every_number_reads_back_as_a_number_in_yaml(value: float) -> None:
    """A float repr'd in exponent form without a point ("5e-05", a preprocess time that
    rounded to it) is a string to YAML 1.1 readers: DLIO would get "5e-05", not 5e-05."""
    from ioprobe.render.dlio import _scalar

    back = yaml.safe_load(f"v: {_scalar(value)}")["v"]
    assert back == value and type(back) is type(value)


def test_output_dash_is_stdout_and_writes_no_file_named_dash(tmp_path: Path) -> None:
    from tests.unit.analysis.test_whatif import probe_record

    run = tmp_path / "run.json"
    probe_record().save(run)
    proc = run_cli("export", "dlio", str(run), "-o", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["dataset"]["record_length_bytes"] > 0
    assert not (tmp_path / "-").exists()

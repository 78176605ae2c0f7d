"""DLIO's own configuration code reads the workload ``ioprobe export dlio`` writes, every key
as intended.

The file is composed as ``dlio_benchmark --config-dir DIR workload=NAME`` composes it (Hydra,
DLIO's packaged config.yaml, the file at DIR/workload/NAME.yaml), then handed to
``dlio_benchmark.utils.config.LoadConfig``, as ``DLIOBenchmark.__init__`` does, in a DLIO
installation's own interpreter (``tests/support/dlio_load.py``): ``make test`` builds
``.venv-dlio`` with the DLIO that PyPI has (2.0.0, tests/requirements-dlio.txt says how), and
``IOPROBE_DLIO_PYTHON`` names another (the DLIO MLPerf Storage runs: argonne-lcf's, or the
MLCommons fork v3.0 ran). The two read different spellings:

- PyPI 2.0.0: ``dataset.record_length[_stdev|_resize]``, ``train.computation_time`` a float,
  ``model`` kept whole, no ``storage.storage_options``;
- since MLPerf Storage v2.0: ``dataset.record_length_bytes[...]``, ``computation_time`` a
  ``{mean, stdev}`` mapping, ``storage.storage_options``.

Which one it is, the loading script reads off LoadConfig's own source.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.support.cli import REPO, probe_json, run_cli

pytestmark = pytest.mark.slow

DLIO_PYTHON = os.environ.get("IOPROBE_DLIO_PYTHON") or str(REPO / ".venv-dlio" / "bin" / "python")


def _dlio_reads(config_dir: Path, name: str) -> dict[str, Any]:
    """What DLIO made of ``config_dir/workload/name.yaml``: the mapping Hydra composed, each
    attribute's value, the keys it never looked at, and which spelling it reads."""
    script = REPO / "tests" / "support" / "dlio_load.py"
    assert Path(DLIO_PYTHON).exists(), f"no DLIO at {DLIO_PYTHON}: make test builds .venv-dlio"
    proc = subprocess.run(
        [DLIO_PYTHON, str(script), str(config_dir), name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=config_dir,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _expected(w: dict[str, Any], current: bool, storage_options: bool) -> dict[str, Any]:
    """ConfigArguments attribute -> the value DLIO must hold after reading ``w``: a DLIO of
    the ``current`` spelling, with or without ``storage_options``."""
    ds, rd, tr, wf = w["dataset"], w["reader"], w["train"], w["workflow"]
    e: dict[str, Any] = {"framework": w["framework"]}
    e["model"] = w["model"]["name"] if current else w["model"]
    e |= {"generate_data": wf["generate_data"], "generate_only": not wf["train"]}
    e["do_checkpoint"] = wf["checkpoint"]
    for suffix in ("", "_stdev", "_resize"):
        # whichever spelling this DLIO reads, it must hold the size written
        if f"record_length_bytes{suffix}" in ds:
            e[f"record_length{suffix}"] = ds[f"record_length_bytes{suffix}"]
    e["data_folder"] = ds["data_folder"].rstrip("/")
    e |= {k: ds[k] for k in ("format", "num_files_train", "num_samples_per_file")}
    keys = ("data_loader", "batch_size", "read_threads", "prefetch_size", "sample_shuffle")
    e |= {k: rd[k] for k in (*keys, "file_shuffle", "multiprocessing_context") if k in rd}
    for stem, src in (("preprocess_time", rd), ("computation_time", tr)):
        if stem not in src:
            continue
        if current:
            e[stem] = {"mean": src[stem], "stdev": src[f"{stem}_stdev"]}
        else:
            e |= {stem: src[stem], f"{stem}_stdev": src[f"{stem}_stdev"]}
    e |= {"epochs": tr["epochs"], "au": w["metric"]["au"]}
    st = w.get("storage", {})
    keys = ("storage_type", "storage_root") + (("storage_options",) if storage_options else ())
    e |= {k: st[k] for k in keys if k in st}
    return e


def _misread(w: dict[str, Any], dlio: dict[str, Any]) -> list[str]:
    """What DLIO holds other than what ``w`` says, attribute by attribute."""
    problems = []
    attrs = dlio["attrs"]
    for attr, want in _expected(w, dlio["current"], dlio["storage_options"]).items():
        got = attrs.get(attr, "<no such attribute>")
        if isinstance(want, float) or isinstance(got, float):
            ok = isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-12)
        else:
            ok = got == want
        if not ok:
            problems.append(f"{attr}: wrote {want!r}, DLIO holds {got!r}")
    return problems


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A probe's record of 32 npy files of 40-56 kB with an emulated 25 ms step."""
    root = tmp_path_factory.mktemp("dlio")
    data = root / "data"
    data.mkdir()
    for i in range(32):
        np.save(data / f"s{i:03d}.npy", np.zeros(40_000 + 4_000 * (i % 5), dtype=np.uint8))
    args = ("--time-budget", "5", "--compute-ms-per-batch", "25", "--batch-size", "8")
    probe_json(root, str(data), *args, "--workers", "1")
    return root / "run.json"


def _export_as_dlio_finds_it(run: Path, config_dir: Path, name: str) -> dict[str, Any]:
    """The export written where ``--config-dir config_dir workload=name`` looks for it (as
    docs/export.md says), parsed as YAML."""
    target = config_dir / "workload" / f"{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    proc = run_cli("export", "dlio", str(run), "-o", str(target), "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    w: dict[str, Any] = yaml.safe_load(target.read_text())
    return w


def test_dlio_reads_a_probes_export_as_written(probed: Path, tmp_path: Path) -> None:
    w = _export_as_dlio_finds_it(probed, tmp_path, "ioprobe_job")
    dlio = _dlio_reads(tmp_path, "ioprobe_job")
    assert dlio["workload"] == w  # Hydra composed the file, nothing else
    assert _misread(w, dlio) == []
    size = round(json.loads(probed.read_text())["dataset"]["sample_bytes_mean"])
    assert dlio["attrs"]["record_length"] == size
    assert dlio["unread"] == []


def test_dlio_reads_the_bucket_of_an_s3_export(probed: Path, tmp_path: Path) -> None:
    # the same run, as a probe of a bucket records it
    rec = json.loads(probed.read_text())
    rec["dataset"]["target"] = "s3://ioprobe-bucket/datasets/job1"
    rec["dataset"]["remote"] = True
    run = tmp_path / "s3.json"
    run.write_text(json.dumps(rec))
    w = _export_as_dlio_finds_it(run, tmp_path, "ioprobe_s3")
    assert w["storage"] == {
        "storage_type": "s3",
        "storage_root": "ioprobe-bucket",
        "storage_options": {"storage_library": "s3torchconnector"},
    }
    assert w["dataset"]["data_folder"] == "s3://ioprobe-bucket/datasets/job1/"
    dlio = _dlio_reads(tmp_path, "ioprobe_s3")
    assert _misread(w, dlio) == []
    assert dlio["attrs"]["storage_type"] == "s3"
    # storage_options is what 2.0.0 cannot read: the export says so where it lists what
    # DLIO does not carry over
    options = dlio["storage_options"]
    assert dlio["unread"] == ([] if options else ["storage.storage_options.storage_library"])
    text = (tmp_path / "workload" / "ioprobe_s3.yaml").read_text()
    assert "DLIO 2.0.0 from PyPI reads no storage_options" in text


def test_the_workload_beside_the_config_dir_is_not_found(probed: Path, tmp_path: Path) -> None:
    # why docs/export.md writes to workload/NAME.yaml: Hydra looks in the group's folder
    proc = run_cli("export", "dlio", str(probed), "-o", str(tmp_path / "myjob.yaml"))
    assert proc.returncode == 0, proc.stderr
    script = REPO / "tests" / "support" / "dlio_load.py"
    found = subprocess.run(
        [DLIO_PYTHON, str(script), str(tmp_path), "myjob"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode != 0 and "Could not find 'workload/myjob'" in found.stderr

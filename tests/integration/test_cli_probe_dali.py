"""``ioprobe probe --loader dali`` through the real CLI: Pillow and DALI decode the same JPEGs
side by side (CPU only here: no GPU), and bad inputs exit 2 with one line."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ioprobe.collect.decode import decode_image
from tests.integration.cli import REPO, assert_one_line_error, probe_json, run_cli

pytestmark = pytest.mark.slow

FILES = 60


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(1)
    for i in range(FILES):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(buf, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    return root


def pillow_ms_per_image(root: Path) -> float:
    """The truth for the CPU cost: this thread's CPU time decoding every file once."""
    blobs = [p.read_bytes() for p in sorted(root.iterdir())]
    decode_image(blobs[0])  # imports and first-call set-up
    t0 = time.thread_time()
    for b in blobs:
        decode_image(b)
    return (time.thread_time() - t0) / len(blobs) * 1e3


@pytest.mark.gpu  # on a GPU it measures DALI's mixed decoder too
def test_probe_measures_pillow_and_dali_on_the_same_images(jpegs: Path, tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    rec = probe_json(tmp_path, str(jpegs), "--loader", "dali", "--time-budget", "10")
    assert rec["settings"]["loader"] == "dali"
    cpu = rec["stages"]["cpu"]
    paths = {p["path"]: p for p in cpu["decode_paths"]}
    assert list(paths) == ["pillow", "dali-cpu", "dali-gpu"]
    pillow, dali, gpu = paths["pillow"], paths["dali-cpu"], paths["dali-gpu"]
    if _cuda():
        # a GPU: DALI's mixed decoder is measured beside the CPU paths
        assert gpu["error"] is None and gpu["samples_per_s"] > 0, gpu
        assert gpu["files"] == FILES
    else:
        assert "no CUDA GPU" in gpu["error"] and gpu["samples_per_s"] is None

    cores = len(os.sched_getaffinity(0))
    for p in (pillow, dali):
        assert p["error"] is None
        assert p["samples_per_s"] > 0 and p["cpu_seconds_per_sample"] > 0
        # every path cycles through the same files: all of this small dataset
        assert p["files"] == FILES
        assert 1 <= p["threads"] <= cores
    # DALI gets every core Pillow's sweep used; Pillow's figure is its best level
    assert dali["threads"] == max(lv["workers"] for lv in cpu["sweep"]) == cpu["usable_cores"]
    assert pillow["threads"] <= dali["threads"]
    # DALI decoded every file at least once, in whole batches, over the time it reports
    assert dali["samples"] >= FILES
    assert dali["samples_per_s"] == pytest.approx(dali["samples"] / dali["seconds"])
    # its threads cannot keep more cores busy than they are
    assert dali["samples_per_s"] * dali["cpu_seconds_per_sample"] <= dali["threads"] * 1.1

    # the CPU cost per image matches decoding the same files here, for both libraries (both
    # run libjpeg-turbo underneath); loose bounds: this machine is shared and noisy
    truth = pillow_ms_per_image(jpegs)
    assert 0.5 * truth <= pillow["cpu_seconds_per_sample"] * 1e3 <= 2.5 * truth
    assert 0.3 * truth <= dali["cpu_seconds_per_sample"] * 1e3 <= 3.0 * truth

    # the CPU stage stands for the fastest path that fits the cores (DALI's mixed decoder
    # too, on a GPU), and the verdict with it
    best = pillow
    for p in (dali, gpu):
        if p["error"] is not None or not p["samples_per_s"]:
            continue
        fits = p["samples_per_s"] * p["cpu_seconds_per_sample"] <= cpu["usable_cores"] * 1.05
        if fits and p["samples_per_s"] > best["samples_per_s"]:
            best = p
    if best is pillow:
        assert cpu["loader"] == "image"
        assert cpu["capacity_samples_per_s"] == pytest.approx(pillow["samples_per_s"])
    else:
        assert cpu["loader"] == best["path"]
        assert cpu["capacity_samples_per_s"] == pytest.approx(best["samples_per_s"])
        assert any(best["path"] in n for n in rec["notes"])
    assert rec["duration_s"] < 10 * 1.5


def test_dali_loader_on_a_dataset_that_is_not_images_exits_2(tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    data = tmp_path / "arrays"
    data.mkdir()
    for i in range(8):
        np.save(data / f"{i}.npy", np.zeros((16, 16), dtype=np.float32))
    proc = run_cli("probe", str(data), "--loader", "dali", "--time-budget", "3")
    assert_one_line_error(proc, "--loader dali", "not an image dataset", "npy")


def test_dali_loader_without_dali_names_the_extra(jpegs: Path, tmp_path: Path) -> None:
    # a package named nvidia.dali that fails to import, ahead of the real one on the path
    fake = tmp_path / "fake" / "nvidia" / "dali"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('libdali.so: cannot open')\n")
    (fake.parent / "__init__.py").write_text("")  # a regular package: the real one is hidden
    env = {"PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{REPO}"}
    proc = run_cli("probe", str(jpegs), "--loader", "dali", "--time-budget", "3", env=env)
    assert_one_line_error(proc, "--loader dali needs NVIDIA DALI", "ioprobe[dali]")


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())

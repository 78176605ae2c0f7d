from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.support.cli import assert_one_line_error, probe_json, run_cli
from tests.support.contract import CONTRACT_KEYS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    for i in range(120):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (160, 200, 3), dtype=np.uint8)).save(buf, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    return root


def test_probe_writes_a_complete_record_and_prints_a_verdict(jpegs: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = run_cli("probe", str(jpegs), "--time-budget", "8", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec.keys() >= CONTRACT_KEYS
    assert rec["kind"] == "probe"
    assert rec["dataset"]["files"] == 120
    assert rec["dataset"]["formats"] == {"jpeg": 64}  # the magic-byte sample
    assert rec["stages"]["storage"]["read_bytes_per_s"] > 0
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] > 0
    assert rec["settings"]["loader"] == "image"
    assert rec["bottleneck"] in {"storage", "cpu"}  # no GPU stage without emulation
    assert rec["stages"]["gpu"]["capacity_samples_per_s"] is None
    assert rec["recommendations"]
    assert f"{rec['bottleneck']}-bound" in proc.stdout
    # stdout is not a terminal: progress comes as plain lines on stderr
    assert "ioprobe: storage (cold):" in proc.stderr
    assert "cannot hold" not in proc.stderr  # 8 s holds here: nothing to say


@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "quiet"])
def test_a_budget_that_cannot_hold_is_said_before_measuring_and_kept_to(
    jpegs: Path, tmp_path: Path, quiet: bool
) -> None:
    """Half a second cannot hold the CPU sweep's pool and levels and DALI's two paths on top
    of the command's start: the probe says so in one line before its first phase (with -q
    too), then takes about what it said, from the command's start to its end."""
    pytest.importorskip("nvidia.dali")
    out = tmp_path / "run.json"
    args = ["probe", str(jpegs), "--loader", "dali", "--time-budget", "0.5", "--json", str(out)]
    t0 = time.monotonic()
    proc = run_cli(*args, *(["-q"] if quiet else []))
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "cannot hold" in line]
    assert len(said) == 1, proc.stderr
    line = lines[said[0]]
    assert line.startswith("ioprobe: --time-budget 0.5 s cannot hold on this host: ")
    assert "the command's start" in line and "no phase can share" in line
    if not quiet:
        first = next(i for i, ln in enumerate(lines) if ln.startswith("ioprobe: storage"))
        assert said[0] < first  # before anything is measured
    else:
        assert len(lines) == 1
    expected = re.search(r"expect about ([0-9.]+) s \(--time-budget (\d+) or more", line)
    assert expected is not None, line
    # within 20% of what it said (the interpreter's start, before /proc's clock, included)
    assert took <= 1.2 * float(expected[1]), (took, line)
    assert int(expected[2]) % 5 == 0 and int(expected[2]) >= 5
    rec = json.loads(out.read_text())
    assert any("could not hold" in n for n in rec["notes"])


def test_report_re_renders_a_saved_record(jpegs: Path, tmp_path: Path) -> None:
    rec = probe_json(tmp_path, str(jpegs), "--time-budget", "5", "--warm", "--loader", "raw")
    assert rec["stages"]["storage"]["cold"] is None
    assert rec["stages"]["storage"]["warm"]["read_bytes_per_s"] > 0
    proc = run_cli("report", str(tmp_path / "run.json"))
    assert proc.returncode == 0, proc.stderr
    assert f"{rec['bottleneck']}-bound" in proc.stdout


def test_long_compute_makes_the_gpu_the_bottleneck_with_no_idle(
    jpegs: Path, tmp_path: Path
) -> None:
    rec = probe_json(
        tmp_path,
        str(jpegs),
        "--loader",
        "raw",
        "--time-budget",
        "10",
        "--compute-ms-per-batch",
        "100",
        "--batch-size",
        "8",
    )
    assert rec["bottleneck"] == "gpu"
    assert rec["stages"]["gpu"]["capacity_samples_per_s"] == pytest.approx(80.0)
    assert rec["gpu_idle_fraction"] < 0.05
    assert rec["measured_samples_per_s"] == pytest.approx(80.0, rel=0.1)
    assert rec["pipeline"]["batches"] >= 5


def test_known_cpu_cost_is_measured_and_named(jpegs: Path, tmp_path: Path) -> None:
    rec = probe_json(
        tmp_path,
        str(jpegs),
        "--warm",
        "--loader",
        "tests.fixtures.burn:burn_10ms",
        "--time-budget",
        "8",
        "--gpu-samples-per-s",
        "100000",
    )
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.010, rel=0.10)
    assert rec["bottleneck"] == "cpu"
    assert rec["stages"]["cpu"]["capacity_samples_per_s"] <= 2 * 100 * 1.05  # 2 cores, 10 ms each


def test_no_target_probes_the_built_in_sample(tmp_path: Path) -> None:
    env = {"IOPROBE_CACHE_DIR": str(tmp_path / "cache")}
    rec = probe_json(tmp_path, "--time-budget", "6", "--loader", "raw", env=env)
    assert rec["dataset"]["files"] == 2000
    assert rec["dataset"]["formats"] == {"jpeg": 64}
    assert (tmp_path / "cache" / "sample-v1.complete").exists()
    # a second run reuses it: no regeneration, same listing
    assert (
        probe_json(tmp_path, "--time-budget", "3", "--warm", "--loader", "raw", env=env)["dataset"][
            "bytes"
        ]
        == rec["dataset"]["bytes"]
    )


def test_probe_never_changes_the_data(jpegs: Path, tmp_path: Path) -> None:
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in jpegs.iterdir()}
    probe_json(tmp_path, str(jpegs), "--time-budget", "4", "--loader", "raw")
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in jpegs.iterdir()}
    assert before == after


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["probe", "/no/such/dir"], ["/no/such/dir: no such file or directory"]),
        (["probe", "{empty}"], ["no readable non-empty files"]),
        (["probe", "{fifo}"], ["a FIFO"]),
        (["probe", "{jpegs}", "--time-budget", "-1"], ["'--time-budget'", "not in the range"]),
        (["probe", "{jpegs}", "--workers", "0"], ["'--workers'", "not in the range"]),
        (["probe", "{jpegs}", "--time-budget", "soon"], ["'soon' is not a valid float"]),
        (["probe", "{jpegs}", "--loader", "bogus"], ["use auto, raw, image, numpy"]),
        (
            ["probe", "{jpegs}", "--compute-ms-per-batch", "5", "--gpu-samples-per-s", "9"],
            ["not both"],
        ),
        (["probe", "http://127.0.0.1:9/data/"], ["cannot reach it"]),
        (["probe", "{jpegs}", "--no-such-flag"], ["No such option"]),
        (["report", "{bad_json}"], ["not valid JSON"]),
        (["report", "/no/run.json"], ["/no/run.json: no such file"]),
        (["frobnicate"], ["No such command"]),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_input_exits_2_with_one_line(
    jpegs: Path, tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bad.json").write_text("{nope")
    subst = {
        "{empty}": str(tmp_path / "empty"),
        "{fifo}": str(tmp_path / "fifo"),
        "{jpegs}": str(jpegs),
        "{bad_json}": str(tmp_path / "bad.json"),
    }
    proc = run_cli(*[subst.get(a, a) for a in args])
    assert_one_line_error(proc, *fragments)


def test_help_and_module_entry_point_work() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    for sub in ("probe", "env", "report"):
        assert sub in proc.stdout
    assert "--compute-ms-per-batch" in run_cli("probe", "--help").stdout


def test_raw_decoding_of_files_over_the_cap_is_scaled_to_their_whole_size(
    tmp_path: Path,
) -> None:
    """A file over the 64 MiB decode cap is decoded from its prefix; the raw decode is the
    copy a loader makes of a sample's bytes, so its cost scales with the whole file, and a
    cache of the dataset gains what that copy allows, not a million-fold (it did: a copy
    of nothing cost nothing)."""
    data = tmp_path / "data"
    data.mkdir()
    size = 96 << 20
    (data / "volume.bin").write_bytes(os.urandom(size))
    rec = probe_json(tmp_path, str(data), "--loader", "raw", "--time-budget", "8")
    cpu = rec["stages"]["cpu"]
    assert cpu["output_bytes_per_sample"] == pytest.approx(size)
    assert any("64 MiB prefix" in n and "1.50x" in n for n in rec["notes"]), rec["notes"]
    # one copy of 96 MiB per sample: slower than 100 GB/s per core, faster than 50 MB/s
    copy_rate = size / cpu["cpu_seconds_per_sample"]
    assert 50e6 < copy_rate < 100e9
    now = rec["predicted_samples_per_s"]
    gains = [
        r["predicted_samples_per_s"] / now
        for r in rec["recommendations"]
        if r["predicted_samples_per_s"]
    ]
    assert all(g < 1000 for g in gains), gains


def test_the_device_limit_is_measured_beside_the_loaders_reads(tmp_path: Path) -> None:
    from tests.support.direct import direct_folder

    with direct_folder(tmp_path) as data:
        for k in range(64):
            (data / f"{k:02d}.bin").write_bytes(os.urandom(256 * 1024))
        out, md = tmp_path / "run.json", tmp_path / "run.md"
        proc = run_cli(
            "probe", str(data), "--time-budget", "6", "--device-limit", "--loader", "raw",
            "--json", str(out), "--md", str(md),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    device = json.loads(out.read_text())["stages"]["storage"]["device"]
    # 4 KiB reads and the whole 256 KiB file's block, each from one read in flight up
    blocks = {(p["block_bytes"], p["queue_depth"]) for p in device["sweep"]}
    assert {(4096, 1), (256 * 1024, 1)} <= blocks, blocks
    assert all(p["reads"] > 0 and p["read_bytes_per_s"] > 0 for p in device["sweep"])
    assert device["files"] == 64 and device["bytes_spanned"] == 64 * 256 * 1024
    assert "device limit (direct reads)" in proc.stderr  # the phase's progress
    for text in (proc.stdout, md.read_text()):
        assert "device limit" in text and "in direct 256 KiB reads" in " ".join(text.split())


def test_a_signal_during_the_device_limit_ends_the_probe_with_what_it_measured(
    tmp_path: Path,
) -> None:
    import signal
    import subprocess
    import sys

    from tests.support.direct import direct_folder

    with direct_folder(tmp_path) as data:
        for k in range(200):
            (data / f"{k:03d}.bin").write_bytes(os.urandom(200_000))
        out = tmp_path / "run.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "ioprobe", "probe", str(data), "--time-budget", "20",
             "--device-limit", "--loader", "raw", "--json", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        )  # fmt: skip
        assert proc.stderr is not None
        seen = ""
        while "device limit (direct reads)" not in seen:
            line = proc.stderr.readline()
            assert line, seen
            seen += line
        time.sleep(0.3)  # reads in flight on the ring
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = proc.wait(timeout=30)  # it spun for ever in the ring's drain
        rest = proc.stderr.read()
    assert code == 143, seen + rest
    assert time.monotonic() - t0 < 5
    assert "terminated during device limit" in rest
    assert json.loads(out.read_text())["complete"] is False


@pytest.mark.parametrize(
    ("function", "raised"),
    [
        ("interrupted", "KeyboardInterrupt"),
        ("exits_with_text", "SystemExit: no sample for me"),
        ("generator_exit", "GeneratorExit"),
        ("own_base_exception", "Unusual: not an Exception"),
    ],
)
def test_a_loader_function_raising_a_baseexception_is_its_error_not_a_traceback(
    jpegs: Path, function: str, raised: str
) -> None:
    # each CPU-pool worker printed a traceback as it started, and the line blamed the
    # interpreter: a pool worker ignores SIGINT, so the interrupt is the function's own, and
    # so are its SystemExit, GeneratorExit or BaseException of its own
    spec = f"tests.fixtures.burn:{function}"
    proc = run_cli("probe", str(jpegs), "--loader", spec, "--time-budget", "2")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ioprobe: error: --loader {spec}: decoding fails: {raised}"
    )

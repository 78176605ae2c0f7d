"""Bad numbers end in one line naming where they are, through the real CLI: every numeric flag
refuses NaN, infinities and out-of-range values before anything is read or measured, and a
record holding a bad figure is refused by the field that holds it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ioprobe.collect.probe import ProbeOptions
from ioprobe.errors import BadInputError
from tests.support.cli import assert_one_line_error, run_cli
from tests.unit.analysis.test_whatif import probe_record

# the flags a size needs besides the one under test; a whatif's record need not exist, since
# flags are checked before it is read
SIZE = ("size", "--sample-bytes", "1kB", "--gpu-samples-per-s", "100")
WHATIF = ("whatif", "missing.json")

BAD_FLAGS: list[tuple[tuple[str, ...], str, str]] = [
    *[(("probe",), "--time-budget", v) for v in ("nan", "inf", "-inf", "-1", "0", "1e9")],
    *[(("probe",), "--workers", v) for v in ("0", "-3", "99999999")],
    *[(("probe",), "--batch-size", v) for v in ("0", "-1")],
    *[(("probe",), "--compute-ms-per-batch", v) for v in ("nan", "-inf", "-1")],
    *[(("probe",), "--gpu-samples-per-s", v) for v in ("nan", "inf", "0", "-5")],
    *[(("probe",), "--gpus", v) for v in ("0", "-1")],
    *[
        (("size", "--gpu-samples-per-s", "100"), "--sample-bytes", v)
        for v in ("1e400", "nan", "inf", "-5", "0", "1e19")
    ],
    *[(SIZE, "--dataset-bytes", v) for v in ("1e400", "-1")],
    *[(SIZE, "--cpu-ms-per-sample", v) for v in ("nan", "inf", "-1")],
    *[
        (("size", "--sample-bytes", "1kB"), "--gpu-samples-per-s", v)
        for v in ("nan", "inf", "0", "-1", "1e400")
    ],
    *[(SIZE, "--cores", v) for v in ("nan", "0", "-2")],
    *[(SIZE, "--nodes", v) for v in ("0", "-1")],
    *[(SIZE, "--in-flight", v) for v in ("0", "-1")],
    *[(SIZE, "--target-utilization", v) for v in ("nan", "0", "1.5", "-inf")],
    *[(SIZE, "--nic", v) for v in ("1e400GB/s", "-1GB/s", "nanGB/s")],
    *[(SIZE, "--gpus", v) for v in ("0", "1,-4", "99999999", "", ",")],
    *[(SIZE, "--storage", v) for v in ("1e400MB/s", "-5MB/s", "infMB/s", "", ",")],
    *[(WHATIF, "--workers", v) for v in ("-1", "99999999")],
    *[(WHATIF, "--cores", v) for v in ("0", "-1")],
    *[(WHATIF, "--gpus", v) for v in ("0", "-2")],
    *[(WHATIF, "--cache-gb", v) for v in ("nan", "inf", "-1", "1e12")],
    *[(WHATIF, "--storage", v) for v in ("1e400MB/s", "-5MB/s")],
]


@pytest.mark.parametrize(
    ("before", "flag", "value"), BAD_FLAGS, ids=[f"{b[0]} {f} {v}" for b, f, v in BAD_FLAGS]
)
def test_a_bad_number_for_any_flag_is_one_line_naming_the_flag(
    before: tuple[str, ...], flag: str, value: str
) -> None:
    proc = run_cli(*before, flag, value, timeout=30)
    assert_one_line_error(proc, flag)


def _catalog(tmp_path: Path, classes: int) -> str:
    rows = (
        f'[classes.c{i}]\nlabel = "x"\nscope = "local"\nseq_read_MBps = {100 + i}\n'
        'iops_4k = 1000\niops_128k = 100\nlatency_ms = 1\nsource = "s"\n'
        for i in range(classes)
    )
    path = tmp_path / "catalog.toml"
    path.write_text("".join(rows))
    return str(path)


def test_size_refuses_more_gpu_counts_or_classes_than_a_table_holds(tmp_path: Path) -> None:
    # each count is a column and each class a row, priced against the other: thousands took
    # minutes and a record of tens of megabytes
    counts = ",".join(str(n) for n in range(1, 130))
    assert_one_line_error(run_cli(*SIZE, "--gpus", counts, timeout=30), "--gpus: 129 GPU counts")
    rates = ",".join(f"{n}MB/s" for n in range(1, 258))
    assert_one_line_error(run_cli(*SIZE, "--storage", rates, timeout=30), "--storage: 257")
    many = _catalog(tmp_path, 257)
    assert_one_line_error(run_cli(*SIZE, "--catalog", many, timeout=30), "257 classes")
    # the limits themselves are accepted
    ok = run_cli(*SIZE, "--gpus", ",".join(str(n) for n in range(1, 129)), "--catalog",
                 _catalog(tmp_path, 256), "--storage", "c255", "--json", str(tmp_path / "s.json"),
                 timeout=60)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    sizing = json.loads((tmp_path / "s.json").read_text())["sizing"]
    assert len(sizing["gpu_counts"]) == 128 and [c["name"] for c in sizing["storage"]] == ["c255"]


@pytest.mark.parametrize("flag", ["--catalog", "--cost"])
def test_a_toml_file_nested_past_the_parsers_depth_is_one_line(tmp_path: Path, flag: str) -> None:
    # tomllib recurses per level: 3,000 inline arrays deep was a RecursionError traceback
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    assert_one_line_error(run_cli(*SIZE, flag, str(deep), timeout=30), "nested too deep")


LITERAL_1E400 = "@1e400@"  # stands for the bare JSON number 1e400 (which parses as infinity)


def _saved(tmp_path: Path, name: str, mutate: Any) -> Path:
    """A real record's JSON with one figure changed by ``mutate``, written as Python's json
    writes NaN and Infinity (which it also reads)."""
    data = probe_record().to_json()
    mutate(data)
    path = tmp_path / name
    path.write_text(json.dumps(data).replace(f'"{LITERAL_1E400}"', "1e400"))
    return path


BAD_RECORDS: list[tuple[str, Any, str]] = [
    (
        "nan",
        lambda d: d["stages"]["storage"].update(read_bytes_per_s=float("nan")),
        "stages.storage.read_bytes_per_s: not a finite number: NaN",
    ),
    (
        "infinity",
        lambda d: d["stages"]["cpu"].update(capacity_samples_per_s=float("inf")),
        "stages.cpu.capacity_samples_per_s: not a finite number: Infinity",
    ),
    (
        "1e400",
        lambda d: d["dataset"].update(sample_bytes_mean=LITERAL_1E400),
        "dataset.sample_bytes_mean: not a finite number: Infinity",
    ),
    (
        "an integer of 401 digits",
        lambda d: d["dataset"].update(bytes=10**400),
        "dataset.bytes: out of range",
    ),
    (
        "minus five bytes",
        lambda d: d["stages"]["storage"]["cold"]["sweep"][1].update(bytes=-5),
        "stages.storage.cold.sweep[1].bytes: must not be negative, got -5",
    ),
]


@pytest.mark.parametrize(
    ("name", "mutate", "fragment"), BAD_RECORDS, ids=[n for n, _, _ in BAD_RECORDS]
)
@pytest.mark.parametrize("command", ["report", "whatif", "size", "compare"])
def test_a_record_with_a_bad_figure_is_one_line_naming_the_field(
    tmp_path: Path, command: str, name: str, mutate: Any, fragment: str
) -> None:
    bad = _saved(tmp_path, "run.json", mutate)
    args = {
        "report": ("report", str(bad)),
        "whatif": ("whatif", str(bad), "--workers", "2"),
        "size": ("size", str(bad)),
        "compare": ("compare", str(_saved(tmp_path, "a.json", lambda d: None)), str(bad)),
    }[command]
    proc = run_cli(*args, timeout=30)
    assert_one_line_error(proc, f"{bad}: {fragment}")


@pytest.mark.parametrize(
    "bad",
    [
        {"time_budget_s": math.nan},
        {"time_budget_s": math.inf},
        {"compute_ms_per_batch": math.nan},
        {"gpu_samples_per_s": math.inf},
        {"gpu_samples_per_s": math.nan},
    ],
    ids=str,
)
def test_probe_options_from_python_refuse_non_finite_numbers(bad: dict[str, float]) -> None:
    # what the CLI's flags refuse, a caller building the options in Python gets refused too
    with pytest.raises(BadInputError, match="--"):
        ProbeOptions(target=".", **bad).validate()


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"WORLD_SIZE": "1" * 23, "RANK": "0"}, "WORLD_SIZE="),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "99999"}, "MASTER_PORT="),
        (
            {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
            | {"SLURM_STEP_TASKS_PER_NODE": "4(x99999999999)"},
            "tasks per node",
        ),
        (
            {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
            | {"SLURM_STEP_NODELIST": "n[0-99999999]"},
            "node list",
        ),
    ],
)
def test_a_launcher_variable_out_of_bounds_is_one_line(
    env: dict[str, str], fragment: str, tmp_path: Path
) -> None:
    (tmp_path / "f.bin").write_bytes(b"x" * 1000)
    assert_one_line_error(run_cli("probe", str(tmp_path), "-q", env=env, timeout=60), fragment)


def test_ioprobe_alone_prints_its_help_laid_out_as_help_does() -> None:
    # click >= 8.2 raises its help as an error: it came out as one 900-character error line
    proc = run_cli(timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("Usage: ioprobe") and "Commands:" in lines
    assert max(len(line) for line in lines) <= 120 and "ioprobe: error" not in proc.stderr


def test_a_password_holding_a_space_is_masked_in_the_error_line() -> None:
    proc = run_cli("probe", "http://alice:S3KR1T x@127.0.0.1:9/", "--time-budget", "2")
    assert proc.returncode == 2
    assert "S3KR1T" not in proc.stdout + proc.stderr, proc.stderr
    assert "http://alice:***@127.0.0.1:9/" in proc.stderr

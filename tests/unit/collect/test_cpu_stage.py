from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from ioprobe.collect import cpu
from ioprobe.errors import BadInputError
from tests.support.cli import run_cli


def test_levels_cover_powers_of_two_up_to_the_usable_cores() -> None:
    assert cpu.levels_for(1) == [1]
    assert cpu.levels_for(2) == [1, 2]
    assert cpu.levels_for(6) == [1, 2, 4, 6]
    assert cpu.levels_for(8) == [1, 2, 4, 8]


@pytest.mark.slow
def test_cpu_seconds_per_sample_matches_a_known_cost() -> None:
    stage = cpu.measure_cpu("tests.fixtures.burn:burn_4ms", [b"x"] * 8, 2, budget_s=2.0)
    assert stage.cpu_seconds_per_sample == pytest.approx(0.004, rel=0.10)
    # one worker on a 4 ms sample can't exceed 250 samples/s; two can't exceed 500
    assert stage.sweep[0].samples_per_s <= 250 * 1.05
    assert stage.capacity_samples_per_s is not None
    assert stage.capacity_samples_per_s <= 500 * 1.05


def test_a_decoders_per_process_set_up_is_not_counted_as_a_samples_cost() -> None:
    # eight idle workers: at one task in flight successive tasks land on different ones, so
    # without a warm-up each of them would charge its 200 ms set-up to the one-worker level
    stage = cpu.measure_cpu(
        "tests.fixtures.burn:burn_4ms_after_200ms_setup", [b"x"] * 8, 8, 2.0, levels=[1, 8]
    )
    assert stage.cpu_seconds_per_sample == pytest.approx(0.004, rel=0.10)


def test_the_payloads_temporary_file_is_removed_after_the_sweep_and_after_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cpu.measure_cpu("tests.fixtures.burn:burn_4ms", [b"x"] * 4, 1, budget_s=0.3)
    with pytest.raises(BadInputError):
        cpu.measure_cpu("tests.fixtures.burn:always_fails", [b"x"], 1, budget_s=0.3)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_decoder_that_always_fails_is_a_clear_error() -> None:
    with pytest.raises(BadInputError, match="decoding fails: ValueError: not a sample"):
        cpu.measure_cpu("tests.fixtures.burn:always_fails", [b"x"], 1, budget_s=1.0)


def test_an_unknown_loader_name_is_a_clear_error() -> None:
    with pytest.raises(BadInputError, match="use auto, raw, image, numpy"):
        cpu.measure_cpu("bogus", [b"x"], 1, budget_s=1.0)
    with pytest.raises(BadInputError, match="cannot import"):
        cpu.measure_cpu("no_such_module_xyz:f", [b"x"], 1, budget_s=1.0)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (":", "give it as module:function"),
        ("json:", "give it as module:function"),
        (":loads", "give it as module:function"),
        ("no_such_module_here:f", "cannot import it"),
        ("json:no_such_function", "cannot import it"),
        ("hostile_decoder_mod:f", "importing it failed: RuntimeError: boom"),
    ],
)
def test_a_loader_spec_that_cannot_be_imported_is_one_line(
    spec: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the user's own module may fail in any way as it is imported: ValueError for an empty
    # name, its own RuntimeError or SyntaxError; each is a BadInputError, never a traceback
    from ioprobe.collect.decode import resolve

    (tmp_path / "hostile_decoder_mod.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BadInputError, match=re.escape(says)):
        resolve(spec)


def test_the_loader_function_runs_only_in_the_workers_which_size_its_outputs(
    tmp_path: Path,
) -> None:
    # it ran in the probe's own process too, to size a decoded sample: a thread it started
    # kept the probe from exiting, a crash in it lost the measured phases
    data = tmp_path / "data"
    data.mkdir()
    for i in range(24):
        (data / f"s{i:02d}.bin").write_bytes(bytes(4096))
    calls = tmp_path / "calls.txt"
    out = tmp_path / "p.json"
    proc = run_cli(
        "probe", str(data), "--loader", "tests.fixtures.burn:noting_its_process",
        "--time-budget", "3", "--json", str(out), "-q",
        env={"IOPROBE_TEST_CALLS": str(calls)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in calls.read_text().splitlines()]
    assert lines
    # the probe is this test's child: a call there has this process as its parent
    assert all(int(parent) != os.getpid() for _pid, parent in lines)
    cpu_stage = json.loads(out.read_text())["stages"]["cpu"]
    assert cpu_stage["output_bytes_per_sample"] == 4096

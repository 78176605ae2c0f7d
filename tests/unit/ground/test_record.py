from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ioprobe.errors import BadInputError, RecordError
from ioprobe.record import (
    MAX_LEVELS,
    SCHEMA,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    Recommendation,
    RunRecord,
    Stages,
    StoragePass,
    StorageStage,
    SweepPoint,
)
from tests.support.contract import CONTRACT_KEYS


def make_record() -> RunRecord:
    point = SweepPoint(
        concurrency=4,
        bytes=1000,
        items=10,
        seconds=0.5,
        read_bytes_per_s=2000.0,
        files_per_s=20.0,
        latency_p50_ms=1.0,
    )
    return RunRecord(
        kind="probe",
        host=HostInfo(hostname="h", usable_cores=2),
        dataset=DatasetProfile(target="/data", files=10, bytes=1000, sample_bytes_mean=100.0),
        stages=Stages(
            storage=StorageStage(
                capacity_samples_per_s=20.0,
                read_bytes_per_s=2000.0,
                cold=StoragePass(cache="cold", sweep=[point], best_concurrency=4),
            ),
            cpu=CpuStage(capacity_samples_per_s=500.0, cpu_seconds_per_sample=0.004),
            gpu=GpuStage(capacity_samples_per_s=None),
        ),
        bottleneck="storage",
        predicted_samples_per_s=20.0,
        recommendations=[
            Recommendation(kind="shard_small_files", text="shard", predicted_samples_per_s=None)
        ],
    )


def test_round_trip_through_a_file_keeps_every_field(tmp_path: Path) -> None:
    rec = make_record()
    path = tmp_path / "run.json"
    rec.save(path)
    assert RunRecord.load(path) == rec


def test_a_record_an_editor_saved_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    # round eleven: refused as "does not start with '{'", which it does, after the mark
    path = tmp_path / "run.json"
    make_record().save(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert RunRecord.load(path) == make_record()


def test_json_has_every_contract_key_and_stage() -> None:
    data = make_record().to_json()
    assert data.keys() >= CONTRACT_KEYS
    assert data["schema"] == SCHEMA
    assert set(data["stages"]) == {"storage", "cpu", "pcie", "gpu"}
    for stage in data["stages"].values():
        assert "capacity_samples_per_s" in stage
    assert {"target", "files", "bytes", "sample_bytes_mean", "density"} <= data["dataset"].keys()
    assert data["stages"]["storage"]["read_bytes_per_s"] == 2000.0
    assert data["stages"]["cpu"]["cpu_seconds_per_sample"] == 0.004


def test_json_output_is_deterministic_with_sorted_keys() -> None:
    text = make_record().dumps()
    assert text == make_record().dumps()
    keys = list(json.loads(text))
    assert keys == sorted(keys)


def test_infinite_capacity_is_written_as_null() -> None:
    rec = make_record()
    rec.stages.cpu.capacity_samples_per_s = math.inf
    assert json.loads(rec.dumps())["stages"]["cpu"]["capacity_samples_per_s"] is None


def test_invalid_json_names_the_file_and_the_position(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema": "ioprobe.run/1",')
    with pytest.raises(RecordError, match=r"broken\.json: not valid JSON \(line 1"):
        RunRecord.load(path)


def test_another_schema_version_is_refused_by_name(tmp_path: Path) -> None:
    data = make_record().to_json()
    data["schema"] = "ioprobe.run/2"
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"future\.json: unsupported schema 'ioprobe.run/2'"):
        RunRecord.load(path)


def test_wrong_type_deep_inside_names_the_json_path() -> None:
    data = make_record().to_json()
    data["stages"]["storage"]["cold"]["sweep"][0]["concurrency"] = "four"
    with pytest.raises(
        RecordError, match=r"stages\.storage\.cold\.sweep\[0\]\.concurrency: expected an integer"
    ):
        RunRecord.from_json(data, source="x.json")


def test_missing_required_key_is_named() -> None:
    data = make_record().to_json()
    del data["dataset"]
    with pytest.raises(RecordError, match=r"x\.json: dataset: required key is missing"):
        RunRecord.from_json(data, source="x.json")


def test_unknown_bottleneck_value_is_refused() -> None:
    data = make_record().to_json()
    data["bottleneck"] = "network"
    with pytest.raises(RecordError, match="bottleneck: 'network' is not one of"):
        RunRecord.from_json(data, source="x.json")


def test_missing_file_and_directory_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no such file"):
        RunRecord.load(tmp_path / "nope.json")
    with pytest.raises(RecordError, match="is a directory"):
        RunRecord.load(tmp_path)


def test_save_leaves_no_temporary_files(tmp_path: Path) -> None:
    make_record().save(tmp_path / "a.json")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_save_where_no_file_can_be_made_is_one_error_naming_the_path() -> None:
    # a raw FileNotFoundError naming the atomic write's own temporary file: what the command
    # line refuses in one line, the API raised as it came
    with pytest.raises(BadInputError, match="/proc/self/mem") as caught:
        make_record().save("/proc/self/mem")
    assert ".mem." not in str(caught.value)


def _load_text(tmp_path: Path, text: str) -> RunRecord:
    path = tmp_path / "run.json"
    path.write_text(text)
    return RunRecord.load(path)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_figure_is_refused_by_its_path(tmp_path: Path, literal: str) -> None:
    # Python's json reads NaN, Infinity and 1e400 (as infinity) though JSON has none of them
    data = make_record().to_json()
    data["stages"]["storage"]["read_bytes_per_s"] = "@"
    text = json.dumps(data).replace('"@"', literal)
    shown = {"1e400": "Infinity"}.get(literal, literal)
    with pytest.raises(RecordError) as err:
        _load_text(tmp_path, text)
    assert str(err.value) == (
        f"{tmp_path / 'run.json'}: stages.storage.read_bytes_per_s: not a finite number: {shown}"
    )


def test_a_negative_figure_is_refused_by_its_path() -> None:
    data = make_record().to_json()
    data["stages"]["storage"]["cold"]["sweep"][0]["bytes"] = -5
    with pytest.raises(
        RecordError,
        match=r"^x\.json: stages\.storage\.cold\.sweep\[0\]\.bytes: must not be negative, got -5$",
    ):
        RunRecord.from_json(data, source="x.json")


def test_figures_beyond_float_range_or_1e30_are_refused() -> None:
    for value in (10**400, 1e31, -(10**31)):
        data = make_record().to_json()
        data["dataset"]["bytes" if isinstance(value, int) else "sample_bytes_mean"] = value
        with pytest.raises(RecordError, match=r"x\.json: dataset\.\w+: out of range"):
            RunRecord.from_json(data, source="x.json")


def test_a_figure_of_the_wrong_type_is_refused_and_null_kept_where_allowed() -> None:
    data = make_record().to_json()
    data["stages"]["cpu"]["capacity_samples_per_s"] = None  # allowed: not measured
    assert RunRecord.from_json(data).stages.cpu.capacity_samples_per_s is None
    data["dataset"]["files"] = None
    with pytest.raises(RecordError, match=r"dataset\.files: expected an integer, got null"):
        RunRecord.from_json(data)
    data["dataset"]["files"] = 1.5
    with pytest.raises(RecordError, match=r"dataset\.files: expected an integer, got a number"):
        RunRecord.from_json(data)


def test_signed_fields_keep_their_negative_values() -> None:
    from ioprobe.record import GpuSeries, Track, WatchData, WorkerStats

    rec = make_record()
    rec.watch = WatchData(
        workers=[WorkerStats(worker=-1)],
        tracks=[Track(name="loading in the main process", worker=-1, columns={"start": [-0.1]})],
    )
    rec.gpu_series = GpuSeries(t0_host=-0.5, columns={"t": [-0.0002, 0.1]})
    assert RunRecord.from_json(json.loads(rec.dumps())) == rec


def test_timeline_columns_of_unequal_length_are_refused() -> None:
    from ioprobe.record import Track, WatchData

    rec = make_record()
    rec.watch = WatchData(tracks=[Track(name="main", columns={"start": [0.0, 1.0], "end": [1.0]})])
    with pytest.raises(
        RecordError,
        match=r"watch\.tracks\[0\]\.columns: columns of unequal length \(start 2, end 1\)",
    ):
        RunRecord.from_json(rec.to_json(), source="x.json")


def test_an_integer_of_thousands_of_digits_or_deep_nesting_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not a usable JSON document"):
        _load_text(tmp_path, '{"schema": "ioprobe.run/1", "n": ' + "9" * 5000 + "}")
    with pytest.raises(RecordError, match="not a usable JSON document"):
        _load_text(tmp_path, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_a_tune_record_whose_best_names_no_trial_is_refused(tmp_path: Path) -> None:
    from ioprobe.record import TuneData, TuneTrial

    rec = make_record()
    trial = TuneTrial(2, 2, True, None, 100.0)
    rec.tune = TuneData(trials=[trial], best=7)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rec.to_json()))
    with pytest.raises(RecordError, match=r"tune\.best: 7 names no trial"):
        RunRecord.load(path)


def test_a_sweep_of_more_levels_than_a_measurement_makes_is_refused_naming_it() -> None:
    # 300,000 levels made by hand took every what-if minutes (each copies the stages)
    data = make_record().to_json()
    point = data["stages"]["storage"]["cold"]["sweep"][0]
    data["stages"]["storage"]["cold"]["sweep"] = [point] * (MAX_LEVELS + 1)
    with pytest.raises(RecordError, match=r"stages\.storage\.cold\.sweep: 1,001 levels"):
        RunRecord.from_json(data)
    data["stages"]["storage"]["cold"]["sweep"] = [point] * MAX_LEVELS
    assert len(RunRecord.from_json(data).stages.storage.cold.sweep) == MAX_LEVELS  # type: ignore[union-attr]

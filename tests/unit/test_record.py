from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ioprobe.errors import RecordError
from ioprobe.record import (
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
from tests.contract import CONTRACT_KEYS


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

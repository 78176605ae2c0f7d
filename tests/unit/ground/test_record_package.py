"""The record is a package of parts: every part is importable from ``ioprobe.record``, resolves
its annotations where it is defined (the codec reads them with ``typing.get_type_hints``
against the class's own module), and a record holding parts of every module survives the
JSON codec, pickling and ``dataclasses.replace`` unchanged."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import typing
from importlib import import_module
from pathlib import Path

import pytest

import ioprobe.record as record
from ioprobe.record import (
    BatchLog,
    Change,
    ClientsPoint,
    ClusterSizing,
    DatasetProfile,
    Distributed,
    HostInfo,
    RankFigures,
    RankInfo,
    Recommendation,
    RunRecord,
    SizeData,
    SizeInputs,
    SizeRow,
    StageDelta,
    Stages,
    StoragePass,
    SweepPoint,
    Track,
    TuneData,
    TuneTrial,
    WatchData,
    WatchEpoch,
    WhatIfData,
)

PACKAGE = Path(record.__file__).parent
PARTS = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def defined_in(path: Path) -> list[str]:
    """The public names a module's own top-level statements define (not those it imports)."""
    names = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def test_the_package_has_its_parts() -> None:
    assert PARTS == ["distributed", "sizing", "stages", "watch"]


@pytest.mark.parametrize("part", PARTS)
def test_every_name_a_part_defines_is_exported_by_the_package(part: str) -> None:
    module = import_module(f"ioprobe.record.{part}")
    names = defined_in(PACKAGE / f"{part}.py")
    assert names  # the part defines something, or it has no reason to be
    assert sorted(set(names) - set(record.__all__)) == []
    assert all(getattr(record, n) is getattr(module, n) for n in names)


def test_every_exported_name_exists_and_is_defined_once() -> None:
    assert len(record.__all__) == len(set(record.__all__))
    assert [n for n in record.__all__ if not hasattr(record, n)] == []
    everywhere = defined_in(PACKAGE / "__init__.py") + [
        n for part in PARTS for n in defined_in(PACKAGE / f"{part}.py")
    ]
    assert len(everywhere) == len(set(everywhere))


def record_classes() -> list[type]:
    return [
        obj
        for obj in vars(record).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    ]


@pytest.mark.parametrize("cls", record_classes(), ids=lambda c: c.__name__)
def test_every_part_resolves_its_annotations_in_its_own_module(cls: type) -> None:
    # a name an annotation uses but its module does not import breaks loading that part
    assert cls.__module__.startswith("ioprobe.record")
    hints = typing.get_type_hints(cls)
    assert set(hints) == {f.name for f in dataclasses.fields(cls)}


def full_record() -> RunRecord:
    """A record holding parts of every module of the package."""
    sweep = SweepPoint(
        concurrency=2, bytes=4096, items=4, seconds=0.5, read_bytes_per_s=8192.0, files_per_s=8.0
    )
    stages = Stages()
    stages.storage.cold = StoragePass(cache="cold", sweep=[sweep], best_concurrency=2)
    change = Change(workers=4, storage_sweep=[sweep], storage_sweep_source="probe.json")
    track = Track(name="main", columns={"start": [-0.5, 0.1], "end": [0.0, 0.2]})
    return RunRecord(
        kind="watch",
        host=HostInfo(hostname="h"),
        dataset=DatasetProfile(target="/data", files=4, bytes=4096, sample_bytes_mean=1024.0),
        stages=stages,
        recommendations=[Recommendation(kind="workers", text="more", change=change)],
        watch=WatchData(
            loader={"num_workers": "2"},
            epochs=[WatchEpoch(index=0, batches=2, samples=8, seconds=0.2)],
            tracks=[track],
            batch_log=BatchLog(
                request=[0.0],
                arrival=[0.1],
                ready=[0.05],
                worker=[-1],
                work_ms=[40.0],
                slowest_ms=[12.0],
                samples=[4],
                epoch=[0],
            ),
            rank=RankInfo(launcher="torchrun", rank=1, world_size=2),
        ),
        distributed=Distributed(
            launcher="torchrun",
            world_size=2,
            nodes=1,
            ranks=[RankFigures(rank=0), RankFigures(rank=1)],
            curve=[
                ClientsPoint(
                    clients=2,
                    nodes=1,
                    read_bytes_per_s=1e6,
                    per_client_bytes_per_s=5e5,
                    rank_sum_bytes_per_s=1e6,
                    seconds=1.0,
                )
            ],
            one_client=StoragePass(cache="warm", sweep=[sweep]),
        ),
        whatif=WhatIfData(
            change=change,
            base_kind="watch",
            base_stages=Stages(),
            base_bottleneck="cpu",
            base_predicted_samples_per_s=10.0,
            deltas=[StageDelta(stage="cpu", before=10.0, after=20.0, why="workers")],
        ),
        sizing=SizeData(
            inputs=SizeInputs(sample_bytes=1024.0, gpu_samples_per_s=100.0),
            rows=[
                SizeRow(
                    storage="nvme-gen4",
                    gpus=1,
                    nodes=1,
                    predicted_samples_per_s=100.0,
                    gpu_utilization=1.0,
                    bottleneck="gpu",
                    storage_samples_per_s=1e4,
                    cpu_samples_per_s=None,
                    gpu_samples_per_s=100.0,
                )
            ],
            cluster=ClusterSizing(
                aggregate_bytes_per_s=1e6,
                node_bytes_per_s=1e6,
                node_cpu_samples_per_s=None,
                clients=2,
                hosts=1,
                saturated=False,
            ),
        ),
        tune=TuneData(
            trials=[
                TuneTrial(
                    workers=2,
                    prefetch_factor=2,
                    in_order=True,
                    predicted_samples_per_s=None,
                    measured_samples_per_s=9.0,
                    exit_code=-15,
                )
            ]
        ),
    )


def test_a_record_of_every_part_round_trips_through_json() -> None:
    rec = full_record()
    again = RunRecord.from_json(rec.to_json())
    assert again == rec
    assert again.dumps() == rec.dumps()
    # the parts came back as their own classes, each from its module
    assert isinstance(again.watch, WatchData) and isinstance(again.watch.rank, RankInfo)
    assert isinstance(again.distributed, Distributed)
    assert isinstance(again.recommendations[0].change, Change)
    assert again.whatif is not None and isinstance(again.whatif.change.storage_sweep[0], SweepPoint)


def test_a_record_of_every_part_pickles_and_replaces() -> None:
    rec = full_record()
    assert pickle.loads(pickle.dumps(rec)) == rec
    assert rec.watch is not None and rec.sizing is not None
    for part, changes in (
        (rec.stages.storage.cold, {"best_concurrency": 4}),
        (rec.watch.rank, {"rank": 0}),
        (rec.distributed, {"world_size": 3}),
        (rec.sizing.inputs, {"nodes": 2}),
        (rec.recommendations[0], {"text": "fewer"}),
        (rec, {"kind": "probe"}),
    ):
        assert part is not None
        changed = dataclasses.replace(part, **changes)
        assert type(changed) is type(part)
        assert changed != part
        assert dataclasses.replace(changed, **{k: getattr(part, k) for k in changes}) == part

"""The run record: everything one probe or watch measured, as plain data.

A ``RunRecord`` carries no behaviour beyond (de)serialisation. Collectors build one, analysis
reads one and returns findings, renderers turn findings into text. A record saved today can be
re-analysed and re-rendered by a later ioprobe (``ioprobe report run.json``).

The JSON form is versioned by ``schema``; loading (``codec.Codec``) checks every field's
type, that every number is finite, within 1e30 and (but for the ``SIGNED_FIELDS``) not
negative, and names the offending path (``stages.storage.sweep[2].concurrency``) when
something is wrong.

The record's parts live in this package's modules, every one re-exported here (import them
from ``ioprobe.record``): ``stages`` (host, dataset, the four stages, the NVML series),
``watch`` (a watched run: epochs, tracks, loader settings, per-sample costs, the batch log,
DALI's operators), ``distributed`` (ranks and the clients curve) and ``sizing`` (what-if,
sizing and tune records). The codec resolves each class's annotations against its own
module, so a module imports every name its annotations use.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ioprobe.codec import Codec, check_columns, join, to_plain
from ioprobe.errors import BadInputError, RecordError
from ioprobe.outputs import check_output, read_input, write_output
from ioprobe.record.distributed import (
    ClientsPoint,
    Distributed,
    RankFigures,
    RankInfo,
)
from ioprobe.record.sizing import (
    CacheOrder,
    Change,
    Cheapest,
    ClassUnits,
    ClusterSizing,
    CostInputs,
    DensityGuide,
    DensityRow,
    EmulatedWorkload,
    NodeFit,
    ReferencePoint,
    References,
    SizeData,
    SizeInputs,
    SizeRow,
    StageDelta,
    StorageClassInfo,
    StorageScope,
    TuneData,
    TuneTrial,
    WhatIfData,
)
from ioprobe.record.stages import (
    STAGE_NAMES,
    CopyPoint,
    CpuLevel,
    CpuStage,
    DatasetProfile,
    DecodePath,
    DeviceLimit,
    DirectPoint,
    DiskToGpu,
    FilesystemInfo,
    GpuAlone,
    GpuInfo,
    GpuSeries,
    GpuStage,
    HostInfo,
    Kind,
    PcieLink,
    PcieStage,
    StageName,
    Stages,
    StoragePass,
    StorageStage,
    SweepPoint,
)
from ioprobe.record.watch import (
    MAIN_COLUMNS,
    MERGE_RULES,
    WORKER_COLUMNS,
    BatchLog,
    ColumnSpec,
    DaliData,
    DaliOperator,
    Distribution,
    HeavySample,
    LoaderSettings,
    PipelineRun,
    ReadScaling,
    SampleCosts,
    ScalingPoint,
    Track,
    WatchData,
    WatchEpoch,
    WorkerStats,
)
from ioprobe.redact import redacted_all

SCHEMA = "ioprobe.run/1"


@dataclass
class Recommendation:
    kind: str
    text: str
    predicted_samples_per_s: float | None = None
    # today's rate that prediction is to be read against, where it is not the run's
    # measured steady rate: an end-to-end rate, epoch starts included
    baseline_samples_per_s: float | None = None
    evidence: str = ""
    # the what-if that predicts it, when it is one; `ioprobe compare` matches a later run to it
    change: Change | None = None
    # assumptions the prediction rests on that the run could not check (printed beside it)
    unchecked: list[str] = field(default_factory=list)


@dataclass
class ProbeSettings:
    loader: str = "auto"
    passes: list[str] = field(default_factory=lambda: ["cold", "warm"])
    time_budget_s: float = 60.0
    workers: int | None = None
    batch_size: int | None = None
    compute_ms_per_batch: float | None = None
    gpu_samples_per_s: float | None = None
    gpus: int = 1
    samples_per_file: int | None = None  # --samples-per-file: what each data file holds
    device_limit: bool = False  # --device-limit: direct reads at a queue-depth sweep


@dataclass
class RunRecord:
    kind: Kind
    host: HostInfo
    dataset: DatasetProfile
    stages: Stages = field(default_factory=Stages)
    bottleneck: StageName = "storage"
    predicted_samples_per_s: float = 0.0
    measured_samples_per_s: float | None = None
    gpu_idle_fraction: float | None = None
    gpu_idle_method: str | None = None
    recommendations: list[Recommendation] = field(default_factory=list)
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    pipeline: PipelineRun | None = None
    watch: WatchData | None = None
    dali: DaliData | None = None
    whatif: WhatIfData | None = None
    sizing: SizeData | None = None
    tune: TuneData | None = None  # ioprobe tune's trials, on the first trial's record
    gpus_supported: dict[str, int] | None = None  # size: GPUs per node kept at the target
    gpu_series: GpuSeries | None = None  # NVML readings during the probe or the watched run
    distributed: Distributed | None = None  # a run across ranks: what each measured
    notes: list[str] = field(default_factory=list)
    created: str = ""
    ioprobe_version: str = ""
    duration_s: float | None = None
    schema: str = SCHEMA
    # False when Ctrl-C or SIGTERM stopped the run: the record holds what was measured before
    complete: bool = True
    interrupted: str | None = None  # where it stopped: the probe's phase, the watched epoch

    def to_json(self) -> dict[str, Any]:
        return to_plain(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: Any, source: str = "record") -> RunRecord:
        if not isinstance(data, dict):
            raise RecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise RecordError(
                f"{source}: unsupported schema {schema!r} (this ioprobe reads {SCHEMA!r})"
            )
        try:
            rec: RunRecord = _CODEC.load(cls, data)
        except RecordError as exc:
            raise RecordError(f"{source}: {exc}") from None
        tune = rec.tune
        if tune is not None and tune.best is not None and not 0 <= tune.best < len(tune.trials):
            # an index into the trials: one past them would fail every view that shows it
            raise RecordError(
                f"{source}: tune.best: {tune.best} names no trial (the record has "
                f"{len(tune.trials)})"
            )
        return rec

    def dumps(self) -> str:
        """The record as JSON text; every string in it redacted (``redact.redacted_all``):
        whatever field a URL reached (a catalog's source, a library's error in a note), its
        credentials are never written."""
        data = redacted_all(self.to_json())
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write as ``outputs.write_output`` does: a file atomically (a crash mid-write never
        leaves half a record), a symlink's target, a device or FIFO in place; anything else
        (a directory, a socket) raises BadInputError, and nothing but a regular file is ever
        replaced. A path no file can be made at (``/proc/self/mem``) is a BadInputError
        naming it, checked as the command line checks its outputs; a write that fails (a full
        device) raises its OSError."""
        name = os.fspath(path)
        check_output(name)
        write_output(name, self.dumps())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        name = os.fspath(path)
        try:
            # a FIFO or /dev/zero given as a record must neither block nor fill the memory
            text = read_input(path, name, MAX_RECORD_BYTES, opens=b"{")
        except BadInputError as exc:
            raise RecordError(str(exc).replace("expected a file", "expected a run file")) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(
                f"{name}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except (ValueError, RecursionError) as exc:
            # an integer of thousands of digits, or lists nested thousands deep
            raise RecordError(f"{name}: not a usable JSON document: {exc}") from None
        return cls.from_json(data, source=name)


# the largest record file loaded: a day's watched run with every series is well under it
MAX_RECORD_BYTES = 1 << 30
# Fields whose numbers may be negative: a worker index of -1 is the main process; timelines
# and the NVML series hold times relative to the run's origin, which a sampler started
# before it precedes; every other count, size, rate and duration a record holds is >= 0
SIGNED_FIELDS = frozenset(
    {
        "WorkerStats.worker",
        "Track.worker",
        "Track.columns",
        "GpuSeries.t0_host",
        "GpuSeries.columns",
        "HeavySample.index",
        "HeavySample.worker",
        "TuneTrial.exit_code",
        "BatchLog.request",
        "BatchLog.arrival",
        "BatchLog.ready",
        "BatchLog.worker",
    }
)
# Tables held column by column: a row per index, so every column has one length
_COLUMN_TABLES: tuple[type, ...] = (Track, GpuSeries)


# The lists of a measurement's levels (a sweep's reads in flight or workers, the copy
# sizes, a scaling fit's bins, a tune's trials): a run makes tens; past this, a record was
# made by hand, and every what-if would copy it for minutes
MAX_LEVELS = 1000
_LEVEL_LISTS = ("sweep", "storage_sweep", "copies", "decode_paths", "curve", "points", "trials")


def _check_tables(tp: type, kwargs: dict[str, Any], path: str) -> None:
    """A table held column by column has one length in every column; an epoch entry stands
    for one epoch or more; a list of a measurement's levels holds at most MAX_LEVELS."""
    for name in _LEVEL_LISTS:
        got = kwargs.get(name)
        if isinstance(got, list) and len(got) > MAX_LEVELS:
            raise RecordError(
                f"{join(path, name)}: {len(got):,} levels, where a measurement makes tens "
                f"(at most {MAX_LEVELS:,} are read)"
            )
    if "columns" in kwargs and tp in _COLUMN_TABLES:
        check_columns(kwargs["columns"], join(path, "columns"))
    if tp is WatchEpoch and kwargs.get("merged", 1) < 1:  # readers divide by it
        raise RecordError(
            f"{join(path, 'merged')}: an entry stands for one epoch or more, got {kwargs['merged']}"
        )
    if tp is BatchLog:  # the CPU columns are empty where a log was made without them
        optional = ("cpu_ms", "runqueue_ms", "process_cpu_ms")
        check_columns(
            {k: v for k, v in kwargs.items() if isinstance(v, list) and (v or k not in optional)},
            path,
        )


_CODEC = Codec(SIGNED_FIELDS, _check_tables)


__all__ = [
    "MAIN_COLUMNS",
    "MAX_LEVELS",
    "MAX_RECORD_BYTES",
    "MERGE_RULES",
    "SCHEMA",
    "SIGNED_FIELDS",
    "STAGE_NAMES",
    "WORKER_COLUMNS",
    "BatchLog",
    "CacheOrder",
    "Change",
    "Cheapest",
    "ClassUnits",
    "ClientsPoint",
    "ClusterSizing",
    "ColumnSpec",
    "CopyPoint",
    "CostInputs",
    "CpuLevel",
    "CpuStage",
    "DaliData",
    "DaliOperator",
    "DatasetProfile",
    "DecodePath",
    "DensityGuide",
    "DensityRow",
    "DeviceLimit",
    "DirectPoint",
    "DiskToGpu",
    "Distributed",
    "Distribution",
    "EmulatedWorkload",
    "FilesystemInfo",
    "GpuAlone",
    "GpuInfo",
    "GpuSeries",
    "GpuStage",
    "HeavySample",
    "HostInfo",
    "Kind",
    "LoaderSettings",
    "NodeFit",
    "PcieLink",
    "PcieStage",
    "PipelineRun",
    "ProbeSettings",
    "RankFigures",
    "RankInfo",
    "ReadScaling",
    "Recommendation",
    "ReferencePoint",
    "References",
    "RunRecord",
    "SampleCosts",
    "ScalingPoint",
    "SizeData",
    "SizeInputs",
    "SizeRow",
    "StageDelta",
    "StageName",
    "Stages",
    "StorageClassInfo",
    "StoragePass",
    "StorageScope",
    "StorageStage",
    "SweepPoint",
    "Track",
    "TuneData",
    "TuneTrial",
    "WatchData",
    "WatchEpoch",
    "WhatIfData",
    "WorkerStats",
    "to_plain",
]

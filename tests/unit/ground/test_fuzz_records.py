"""Fuzzing the record loader and everything that reads a loaded record.

Real records (a probe with every part filled in, a watched DataLoader with its timelines, a
DALI run, a what-if and a sizing) are mutated — a key deleted, a value replaced with null,
0, -1, a huge integer, a string, an empty list, NaN or Infinity, a list cut short — or
replaced by random JSON, then taken through the path ``ioprobe report FILE`` takes (JSON text
parsed, ``RunRecord.from_json``, ``findings``, every renderer) and through the what-if, sizing
and compare views where the record's kind allows. Each case must end in rendered text or in
an ``IoprobeError``: any other exception is a bug a user could hit with a damaged file.

The default run tries a few thousand cases; ``make fuzz`` runs the long variant, 20,000 cases
(``IOPROBE_FUZZ_EXAMPLES=N`` for N).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ioprobe.analysis import finalize
from ioprobe.analysis.catalog import load_catalog, resolve_storage
from ioprobe.analysis.compare import compare
from ioprobe.analysis.cost import parse_costs
from ioprobe.analysis.mlperf import shipped_references
from ioprobe.analysis.report import findings
from ioprobe.analysis.size import size
from ioprobe.analysis.whatif import whatif, with_probe
from ioprobe.cli._common import analysable
from ioprobe.errors import IoprobeError
from ioprobe.record import (
    SCHEMA,
    Change,
    CopyPoint,
    DaliData,
    DaliOperator,
    DecodePath,
    GpuAlone,
    GpuSeries,
    PcieLink,
    PipelineRun,
    RunRecord,
    SizeInputs,
    to_plain,
)
from ioprobe.render import html, markdown, terminal, trace
from ioprobe.render.compare import compare_markdown, render_compare
from tests.unit.analysis.test_whatif import probe_record, watch_record
from tests.unit.render.test_reports import synthetic_watch

WIDTH = 100  # the terminal view's width, pinned so a case renders the same everywhere


def _probe() -> RunRecord:
    """A probe with every part a real one can have: sweeps, a CPU curve, decode paths, a PCIe
    link and copies, the GPU alone, an NVML series and an end-to-end pipeline's timelines."""
    rec = probe_record()
    st_ = rec.stages
    st_.cpu.decode_paths = [
        DecodePath(path="pillow", samples=100, seconds=1.0, samples_per_s=100.0, threads=4),
        DecodePath(path="dali-gpu", error="no GPU"),
    ]
    st_.pcie.link = PcieLink(4, 4, 16, 16, 31.5e9, 31.5e9)
    st_.pcie.copies = [
        CopyPoint("h2d", "pinned", 1 << 20, 20e9, [19e9, 20e9]),
        CopyPoint("h2d", "pageable", 1 << 20, 8e9),
        CopyPoint("d2h", "pinned", 1 << 26, 22e9),
    ]
    st_.pcie.capacity_samples_per_s = 2e5
    st_.pcie.bytes_per_sample = 1e5
    st_.gpu.alone = GpuAlone(samples_per_s=3000.0, step_seconds=0.01, steps=20, batch_size=32)
    rec.gpu_series = GpuSeries(
        columns={
            "t": [0.0, 0.1, 0.2, 0.3],
            "sm_util": [10.0, None, 30.0, 40.0],
            "pcie_rx_bytes_per_s": [1e9, 2e9, None, 1e9],
            "power_w": [100.0, 120.0, 110.0, None],
        },
        poll_seconds=1e-4,
        status="sampled",
    )
    watched = synthetic_watch(batches=40, workers=2)
    assert watched.watch is not None
    rec.pipeline = PipelineRun(
        workers=2,
        batch_size=32,
        compute_seconds_per_batch=0.005,
        batches=40,
        samples=1280,
        seconds=0.3,
        samples_per_s=4000.0,
        wait_seconds=0.08,
        gpu_idle_fraction=0.3,
        cache="warm",
        wait_p50_ms=2.0,
        wait_p95_ms=2.5,
        tracks=watched.watch.tracks,
    )
    rec.measured_samples_per_s = 4000.0
    rec.notes = ["a note"]
    return finalize(rec, load_catalog())


def _dali() -> RunRecord:
    rec = watch_record(workers=4)
    rec.dali = DaliData(
        pipeline={"batch_size": "32", "num_threads": "4"},
        timing="nvtx",
        operators=[
            DaliOperator("readers.file", "cpu", "storage", 10, 0.1, 0.05),
            DaliOperator("decoders.image", "mixed", "gpu", 10, 0.4, 0.2),
            DaliOperator("Resize", "cpu", "cpu", 10, 0.3, 1.2),
        ],
        reads=320,
        read_seconds=0.1,
        threads={"worker": 1.5},
        memory={"Resize": [1 << 20]},
    )
    return finalize(rec, load_catalog())


def _size() -> RunRecord:
    cat = load_catalog()
    inp = SizeInputs(
        sample_bytes=110e3,
        gpu_samples_per_s=2500.0,
        cpu_seconds_per_sample=0.004,
        cores=64,
        dataset_bytes=140e9,
    )
    classes = [resolve_storage("2000MB/s", cat), cat["sata-ssd"], cat["nvme-gen4"]]
    # priced and with reference points: every part of a sizing report is mutated
    costs = parse_costs(
        'currency = "USD"\ngpu = 30000\ncore = 150\n[storage]\nsata-ssd = 300\nnvme-gen4 = 900\n',
        "prices.toml",
    )
    return size(inp, classes, [1, 2, 8], costs=costs, references=shipped_references())


@functools.cache
def seeds() -> tuple[dict[str, Any], ...]:
    """The real records every mutation starts from, as their JSON."""
    probe = _probe()
    watched = synthetic_watch(batches=60, workers=3)
    records = (
        probe,
        watched,
        _dali(),
        whatif(probe, Change(workers=8, cache_bytes=2e9, gpus=2), load_catalog()),
        # a watched run's storage along a probe's sweep: the what-if carries the sweep
        whatif(watched, with_probe(watched, Change(workers=6), probe, "probe.json")),
        _size(),  # last: the sizing tests take it from the end
    )
    return tuple(r.to_json() for r in records)


# ---------------------------------------------------------------------- the path under test


def through_every_view(text: str) -> None:
    """What ``ioprobe report FILE`` does with ``text``, and the what-if, size and compare views
    of the same record; an ``IoprobeError`` is a refusal a user sees as one line."""
    try:
        rec = RunRecord.from_json(json.loads(text), source="fuzz.json")
        _report(rec)
        event("rendered")
        _compare(rec)
        _whatif(rec)
        _size_of(rec)
        event("every view rendered")
    except IoprobeError as exc:
        assert str(exc)  # the line the CLI prints
        event(f"refused: {type(exc).__name__}")


def _report(rec: RunRecord) -> None:
    f = findings(rec)
    assert terminal.render(rec, f, width=WIDTH)
    assert html.render(rec, f)
    assert markdown.render(rec, f)
    json.loads(trace.render(rec, f))
    json.loads(rec.dumps())


def _whatif(rec: RunRecord) -> None:
    analysable(rec, "fuzz.json")  # what `ioprobe whatif` and `ioprobe size RUN.json` accept
    out = whatif(rec, Change(workers=4, cores=16, gpus=2, cache_bytes=1e9), load_catalog())
    f = findings(out)
    assert terminal.render(out, f, width=WIDTH)
    json.loads(out.dumps())


def _size_of(rec: RunRecord) -> None:
    from ioprobe.cli.size import _inputs

    inp = _inputs(rec, sample_bytes=None, cpu_s=None, gpu_rate=None, cores=None, dataset_bytes=None)
    cat = load_catalog()
    out = size(inp, [cat["sata-ssd"], cat["nvme-gen4"]], [1, 4], rec)
    assert terminal.render(out, findings(out), width=WIDTH)
    json.loads(out.dumps())


def _compare(rec: RunRecord) -> None:
    base = RunRecord.from_json(seeds()[0])
    c = compare(base, rec, names=("a.json", "b.json"))
    assert terminal.to_text(render_compare(c), width=WIDTH)
    assert compare_markdown(c)
    json.dumps(to_plain(c), allow_nan=False)


# ---------------------------------------------------------------------- mutations

HUGE = 10**400  # an integer no float can hold
# values the loader must refuse wherever they stand in for a figure
INVALID: tuple[Any, ...] = (
    None,
    -1,
    -5.5,
    1e31,
    HUGE,
    "x",
    [],
    {},
    True,
    math.nan,
    math.inf,
    -math.inf,
)
# extremes the loader accepts, which every view must survive: zeros, tiny and huge figures
INTS = (0, 1, 2**31, 10**18, 10**30)
FLOATS = (0.0, 1e-300, 1e-12, 1.0, 1e18, 1e30)
STRINGS = ("", "<b>&", "x" * 300)


def _nudged(old: Any, draw: st.DrawFn) -> Any:
    """``old`` replaced by an extreme of its own kind, so that the record still loads."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, int):
        return draw(st.sampled_from(INTS))
    if isinstance(old, float):
        return draw(st.sampled_from(FLOATS))
    if isinstance(old, str):
        return draw(st.sampled_from(STRINGS))
    return draw(st.sampled_from(INVALID))


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON tree, the root's children down."""
    out: list[tuple[Any, ...]] = []
    items: Any = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        out.append((*path, key))
        out.extend(_paths(child, (*path, key)))
    return out


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        tree = tree[key]
    return tree


def _mutate(tree: Any, path: tuple[Any, ...], op: str, value: Any, keep: int) -> None:
    parent, key = _parent(tree, path), path[-1]
    if op == "delete":
        del parent[key]
    elif op == "truncate":
        if isinstance(parent[key], dict):
            parent[key] = dict(list(parent[key].items())[:keep])
        elif isinstance(parent[key], list):
            parent[key] = parent[key][:keep]
    else:
        parent[key] = value


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A seed record with one to three places changed, as JSON text (NaN and Infinity
    written as Python's json writes and reads them, a huge integer in all its digits)."""
    tree = copy.deepcopy(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 3))):
        places = _paths(tree)
        if not places:
            break
        path = places[draw(st.integers(0, len(places) - 1))]
        op = draw(st.sampled_from(OPS))
        value: Any = None
        if op == "extreme":
            value = _nudged(_parent(tree, path)[path[-1]], draw)
        elif op == "invalid":
            value = draw(st.sampled_from(INVALID))
        elif op == "random":
            value = draw(json_values())
        _mutate(tree, path, op, value, draw(st.integers(0, 2)))
    return json.dumps(tree)


# how a place is changed, weighted towards changes a record survives, so that most cases
# reach the views: an extreme of the same kind, a key deleted (most have defaults), a list
# or an object cut short; then a value that must be refused, or random JSON
OPS = (
    "extreme",
    "extreme",
    "extreme",
    "delete",
    "delete",
    "truncate",
    "truncate",
    "invalid",
    "random",
)


def json_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=8)
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=12,
    )


@st.composite
def random_records(draw: st.DrawFn) -> str:
    """Random JSON, most of it shaped like a record (the schema and some of its keys) so that
    it gets past the first checks."""
    seed = draw(st.sampled_from(seeds()))
    keys = draw(st.lists(st.sampled_from(sorted(seed)), max_size=len(seed), unique=True))
    tree: dict[str, Any] = {k: seed[k] for k in keys}
    for k in draw(st.lists(st.sampled_from(sorted(seed)), max_size=4, unique=True)):
        tree[k] = draw(json_values())
    tree["schema"] = SCHEMA
    return json.dumps(tree)


# ---------------------------------------------------------------------- the tests

FAST = settings(
    max_examples=500,  # `make fuzz` runs 20,000
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@given(mutated())
@FAST
def test_a_mutated_record_renders_or_is_refused_in_one_line(text: str) -> None:
    through_every_view(text)


@given(random_records())
@settings(FAST, max_examples=400)
def test_random_json_shaped_like_a_record_renders_or_is_refused(text: str) -> None:
    through_every_view(text)


@given(json_values())
@settings(FAST, max_examples=200)
def test_any_json_document_is_refused_as_a_record(value: Any) -> None:
    with pytest.raises(IoprobeError):
        RunRecord.from_json(json.loads(json.dumps(value)), source="fuzz.json")


LONG = int(os.environ.get("IOPROBE_FUZZ_EXAMPLES", "20000"))


@pytest.mark.long  # deselected by default: `make fuzz` runs it
@given(mutated() | random_records())
@settings(FAST, max_examples=LONG)
def test_long_fuzzing_run(text: str) -> None:
    through_every_view(text)


# ---------------------------------------------------------------------- what fuzzing found
# Records the loader accepts that crashed a view before; each pinned by the view's answer.


def _watched() -> RunRecord:
    return RunRecord.from_json(seeds()[1])


def test_a_timeline_lacking_a_column_is_left_out_with_a_note() -> None:
    rec = _watched()
    assert rec.watch is not None
    del rec.watch.tracks[1].columns["cpu"]
    f = findings(rec)
    assert [t.name for t in f.timeline] == [
        t.name for t in rec.watch.tracks if t.name != "worker 0"
    ]
    assert "the timeline 'worker 0' lacks its cpu column: left out of the charts and the trace" in (
        f.notes
    )
    assert "worker 0 " not in trace.render(rec, f)
    assert "lacks its cpu column" in html.render(rec, f)


def test_a_batch_row_counting_no_batch_draws_its_totals() -> None:
    rec = _watched()
    assert rec.watch is not None
    rec.watch.tracks[0].columns["batches"][0] = 0.0
    page = html.render(rec, findings(rec))
    assert "consumer timeline" in page


def test_a_sizing_table_missing_a_row_shows_a_gap() -> None:
    rec = RunRecord.from_json(seeds()[-1])
    assert rec.sizing is not None
    rec.sizing.rows = [r for r in rec.sizing.rows if (r.storage, r.gpus) != ("nvme-gen4", 2)]
    rec.sizing.gpu_counts.append(3)  # no row at all for 3 GPUs
    text = terminal.render(rec, findings(rec), width=WIDTH)
    nvme = next(line for line in text.splitlines() if line.startswith("nvme-gen4"))
    # storage, MB/s, then 1, 2, 8 and 3 GPUs, then the GPUs it keeps fed
    assert re.split(r"\s{2,}", nvme.strip())[2:6] == ["100%", "-", "80% C", "-"]


def test_an_nvml_series_without_an_interval_reports_its_rows_alone() -> None:
    rec = RunRecord.from_json(seeds()[0])
    assert rec.gpu_series is not None
    rec.gpu_series.interval_s = 0.0
    f = findings(rec)
    assert f.numbers.series is not None and f.numbers.series.hz is None
    assert "4 rows" in terminal.render(rec, f, width=WIDTH)


def test_a_stall_count_without_values_has_no_percentiles() -> None:
    rec = _watched()
    assert rec.watch is not None
    rec.watch.stall_ms.values = []
    delivery = findings(rec).numbers.delivery
    assert delivery is not None and delivery.stall_p50_ms is None


def test_a_whatif_that_leaves_no_stage_limiting_says_so() -> None:
    rec = watch_record(storage=500.0)
    rec.stages.cpu.capacity_samples_per_s = None
    rec.stages.gpu.capacity_samples_per_s = None
    # a cache as large as the dataset serves every read, and storage was all that was measured
    with pytest.raises(IoprobeError, match="no measured stage limits the pipeline"):
        whatif(rec, Change(cache_bytes=2e9))


def test_gpus_supported_checks_its_closed_form_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ioprobe.analysis import size as sizing

    # infinite bytes per sample (what --sample-bytes 1e400 gave) makes the model's
    # utilisation NaN: the check used to walk down from 2^20 GPUs one model run at a time
    inp = SizeInputs(sample_bytes=math.inf, gpu_samples_per_s=100.0)
    runs = 0
    model = sizing.pipeline_model

    def counted(stages: Any) -> Any:
        nonlocal runs
        runs += 1
        assert runs <= 2 * sizing.CHECK_STEPS, "a walk, not a bounded check"
        return model(stages)

    monkeypatch.setattr(sizing, "pipeline_model", counted)
    sizing.gpus_supported(load_catalog()["nvme-gen4"], inp)

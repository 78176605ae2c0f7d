"""Folding DALI's NVTX ranges into operators, and what the reports make of them."""

from __future__ import annotations

from array import array

import pytest

from ioprobe.analysis.report import dali_operators, findings
from ioprobe.collect.nvtx import RangeTotals, diff
from ioprobe.loaders.dali import _added, operators
from ioprobe.record import DaliData, DaliOperator, DatasetProfile, HostInfo, RunRecord
from ioprobe.render.markdown import render as render_markdown

MS = 1_000_000


def test_dynamic_executor_ranges_fold_setup_into_run_and_count_calls_once() -> None:
    ranges = {
        "[DALI][CPU op] Run decoders__Image": RangeTotals(10, 300 * MS, 5 * MS, 580 * MS),
        "[DALI][CPU op] Setup decoders__Image": RangeTotals(10, 2 * MS, 2 * MS, 0),
        "[DALI][CPU op] Run readers__File": RangeTotals(10, 4 * MS, 1 * MS, 0),
        "[DALI][Mixed op] Run decoders__Image": RangeTotals(5, 50 * MS, 20 * MS, 0),
        "[DALI][Executor] Launch": RangeTotals(10, 1 * MS, 1 * MS, 0),
        "[DALI][Loader] ReadOne": RangeTotals(320, 3 * MS, 2 * MS, 0),
    }
    ops = {(o.name, o.device): o for o in operators(ranges, {})}
    assert set(ops) == {
        ("decoders.image", "cpu"),
        ("readers.file", "cpu"),
        ("decoders.image", "mixed"),
    }
    dec = ops[("decoders.image", "cpu")]
    assert dec.calls == 10 and dec.stage == "cpu"
    assert dec.wall_seconds == pytest.approx(0.302)
    assert dec.cpu_seconds == pytest.approx(0.587)  # own 5 + pool 580 + setup 2
    assert ops[("readers.file", "cpu")].stage == "storage"
    assert ops[("decoders.image", "mixed")].stage == "gpu"


def test_legacy_executor_instance_names_map_to_their_operator_types() -> None:
    ranges = {
        "[DALI][CPU op] __Resize_1": RangeTotals(4, 40 * MS, 1 * MS, 70 * MS),
        "[DALI][CPU op] Reader": RangeTotals(4, 2 * MS, 1 * MS, 0),
        "[DALI][CPU op] __MakeContiguous_CpuToCpu_Reader[1]": RangeTotals(4, 1 * MS, 1 * MS, 0),
    }
    ops = {
        o.name: o for o in operators(ranges, {"__Resize_1": "Resize", "Reader": "readers__File"})
    }
    assert set(ops) == {"Resize", "readers.file", "MakeContiguous"}
    assert ops["readers.file"].stage == "storage"
    assert ops["Resize"].cpu_seconds == pytest.approx(0.071)


def test_epochs_add_the_flat_totals_slot_by_slot_as_names_appear() -> None:
    # two slots at the epoch's start, a third name seen during it; the sum so far had one
    before = array("q", [1, 10, 5, 0, 2, 20, 10, 0])
    after = array("q", [1, 10, 5, 0, 5, 50, 25, 3, 1, 1, 1, 0])
    sums = array("q", [4, 40, 20, 1])
    assert _added(sums, after, before) == array("q", [4, 40, 20, 1, 3, 30, 15, 3, 1, 1, 1, 0])
    # a later epoch's totals never shrink, but a sum longer than them keeps its tail
    assert _added(array("q", [0] * 12), after[:8], before) == array(
        "q", [0, 0, 0, 0, 3, 30, 15, 3, 0, 0, 0, 0]
    )


def test_snapshot_diff_keeps_only_ranges_that_ran_between_the_two() -> None:
    before = {"a": RangeTotals(1, 10, 5, 0), "b": RangeTotals(2, 20, 10, 0)}
    after = {
        "a": RangeTotals(1, 10, 5, 0),
        "b": RangeTotals(5, 50, 25, 3),
        "c": RangeTotals(1, 1, 1, 0),
    }
    assert diff(after, before) == {"b": RangeTotals(3, 30, 15, 3), "c": RangeTotals(1, 1, 1, 0)}


def _record() -> RunRecord:
    return RunRecord(
        kind="watch",
        host=HostInfo(),
        dataset=DatasetProfile(target="/data/<b>imgs</b>", files=10),
        dali=DaliData(
            operators=[
                DaliOperator("Resize", "cpu", "cpu", 4, 0.2, 0.6),
                DaliOperator("decoders.image", "cpu", "cpu", 4, 0.1, 0.3),
                DaliOperator("readers|file", "cpu", "storage", 4, 0.01, 0.1),
                DaliOperator("never ran", "cpu", "cpu", 0, 0.0, 0.0),
            ]
        ),
    )


def test_operator_rows_are_per_batch_with_shares_of_all_operator_cpu() -> None:
    rows = dali_operators(_record())
    assert [r.name for r in rows] == ["Resize", "decoders.image", "readers|file"]
    assert rows[0].cpu_ms == pytest.approx(150.0) and rows[0].wall_ms == pytest.approx(50.0)
    assert sum(r.cpu_share for r in rows) == pytest.approx(1.0)
    assert rows[0].cpu_share == pytest.approx(0.6)


def test_markdown_operator_table_escapes_names() -> None:
    rec = _record()
    text = render_markdown(rec, findings(rec))
    assert "| Resize | cpu | cpu | 150.00 | 50.00 | 60% |" in text
    assert "readers\\|file" in text  # a pipe in a name does not split the table

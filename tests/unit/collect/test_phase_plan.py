"""The probe's time plan: costs no phase can share are measured before the first phase, what
is left is split with no phase below its least time, and where the budget cannot hold that,
the probe says so before it measures, with the time it will take instead.

The arithmetic is checked on made-up costs; the probe itself on a small folder, with CUDA's
start stood in for by a function that sleeps (the thinnest seam: ``open_copier``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ioprobe.cli.probe import budget_statement
from ioprobe.collect import budget
from ioprobe.collect import dataset as ds_mod
from ioprobe.collect import decode_paths as paths_mod
from ioprobe.collect import probe as probe_mod
from ioprobe.collect.budget import PhasePlan, plan_phases, split
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.progress import SilentReporter

# a phase's time is held to the plan's: run alone (tests/conftest.py)
pytestmark = pytest.mark.serial

SHARES = {"cold": 0.35, "warm": 0.2, "cpu": 0.2}


# -- the arithmetic ---------------------------------------------------------------------------


def test_what_is_left_is_shared_as_planned_where_every_share_is_above_its_floor() -> None:
    plan = plan_phases(20.0, {"cuda": 5.0}, SHARES, {"cold": 0.5, "warm": 0.5, "cpu": 1.5})
    assert plan.phases_s == pytest.approx({"cold": 7.0, "warm": 4.0, "cpu": 4.0})
    assert plan.expected_s == pytest.approx(20.0 + budget.TAIL_S)
    assert plan.holds


def test_a_phase_whose_share_is_below_its_floor_gets_its_floor_and_the_others_the_rest() -> None:
    # 6 s left: the CPU sweep's share would be 1.6 s, under its 3 s
    plan = plan_phases(10.0, {"cuda": 4.0}, SHARES, {"cold": 0.5, "warm": 0.5, "cpu": 3.0})
    assert plan.phases_s["cpu"] == 3.0
    assert plan.phases_s["cold"] == pytest.approx(3.0 * 0.35 / 0.55)
    assert plan.phases_s["warm"] == pytest.approx(3.0 * 0.2 / 0.55)
    assert sum(plan.phases_s.values()) == pytest.approx(6.0)
    assert plan.holds


def test_shares_pushed_under_their_floors_by_another_are_held_there_too() -> None:
    parts = split(3.0, {"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 0.0, "b": 0.8, "c": 1.0})
    # c: 0.6 < 1.0, held; then b: 2.0 * 0.3 / 0.8 = 0.75 < 0.8, held; a takes the rest
    assert parts == pytest.approx({"a": 1.2, "b": 0.8, "c": 1.0})


def test_floors_past_the_budget_plus_its_margin_are_a_plan_that_cannot_hold() -> None:
    fixed = {"start": 1.2, "listing": 0.1, "cuda": 4.6, "dali": 1.9}
    floors = {"cold": 0.5, "warm": 0.5, "cpu": 3.0}
    plan = plan_phases(10.0, fixed, SHARES, floors)
    assert plan.phases_s == floors  # 2.2 s left: every phase at its least time
    assert plan.elapsed_s == pytest.approx(7.8)
    assert plan.least_s == pytest.approx(4.0)
    assert plan.expected_s == pytest.approx(7.8 + 4.0 + budget.TAIL_S)
    assert not plan.holds  # 12.3 s against 10 + 2
    # the CPU sweep needs 3 s at a share of 0.2/0.75: 11.25 s after 7.8 s of fixed costs
    assert plan.full_share_budget_s == 20.0


def test_an_overrun_the_margin_absorbs_still_holds() -> None:
    plan = plan_phases(10.0, {"cuda": 8.0}, SHARES, {"cold": 0.5, "warm": 0.5, "cpu": 2.0})
    assert plan.expected_s == pytest.approx(8.0 + 3.0 + budget.TAIL_S)  # 11.5 s
    assert plan.holds  # within 10 + 2


def test_the_costs_are_named_largest_first_and_small_ones_left_out() -> None:
    words = budget.cost_words({"start": 1.24, "listing": 0.03, "cuda": 4.61, "dali": 1.93})
    assert words == (
        "7.8 s (CUDA's start 4.6 s, DALI's pipeline builds 1.9 s, the command's start 1.2 s)"
    )
    assert budget.cost_words({"listing": 0.03}) == "0.0 s (listing the dataset 0.0 s)"


def test_the_statement_says_what_cannot_hold_what_it_will_take_and_what_would() -> None:
    fixed = {"start": 1.2, "listing": 0.1, "cuda": 4.6, "dali": 1.9}
    plan = plan_phases(10.0, fixed, SHARES, {"cold": 0.5, "warm": 0.5, "cpu": 3.0})
    assert budget_statement(plan) == (
        "--time-budget 10 s cannot hold on this host: 7.8 s (CUDA's start 4.6 s, DALI's "
        "pipeline builds 1.9 s, the command's start 1.2 s, listing the dataset 0.1 s) went "
        "before the first phase, which "
        "no phase can share, and the phases need at least 4.0 s; expect about 12 s "
        "(--time-budget 20 or more gives every phase its planned share)"
    )
    fits = plan_phases(30.0, fixed, SHARES, {"cold": 0.5, "warm": 0.5, "cpu": 3.0})
    assert budget_statement(fits) is None


# -- the probe --------------------------------------------------------------------------------


class _Phases(SilentReporter):
    """A reporter that keeps the phases in order."""

    def __init__(self) -> None:
        self.phases: list[str] = []

    def phase(self, name: str) -> None:
        self.phases.append(name)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for i in range(40):
        (root / f"f{i:03d}.bin").write_bytes(bytes([i]) * 20_000)
    return root


def _slow_listing(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    resolve = ds_mod.resolve

    def slow(*args: Any, **kwargs: Any) -> ds_mod.Dataset:
        time.sleep(seconds)
        return resolve(*args, **kwargs)

    monkeypatch.setattr(ds_mod, "resolve", slow)


def test_cuda_starts_beside_the_listing_and_the_plan_comes_before_the_first_phase(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []

    def slow_cuda() -> str:
        threads.append(threading.current_thread().name)
        time.sleep(0.8)
        return "not measured: no CUDA device (a stand-in)"

    monkeypatch.setattr(probe_mod, "may_have_gpu", lambda: True)
    monkeypatch.setattr(probe_mod, "open_copier", slow_cuda)
    _slow_listing(monkeypatch, 0.4)
    reporter = _Phases()
    seen: list[tuple[PhasePlan, list[str]]] = []
    opts = ProbeOptions(
        target=str(folder),
        loader="raw",
        time_budget_s=4.0,
        started_at=time.perf_counter() - 1.0,  # the command started a second ago
        on_plan=lambda plan: seen.append((plan, list(reporter.phases))),
    )
    rec = Probe(opts, reporter).run()
    assert threads == ["ioprobe-cuda"]  # on a thread of its own, once
    [(plan, phases_then)] = seen
    assert not any(p.startswith("storage") for p in phases_then)  # told before measuring
    assert plan.fixed_s["start"] == pytest.approx(1.0, abs=0.05)
    assert plan.fixed_s["listing"] >= 0.4
    # the 0.8 s start ran beside the 0.4 s listing: about 0.4 s of it was left to wait for
    assert 0.25 <= plan.fixed_s["cuda"] <= 0.6, plan.fixed_s
    assert rec.stages.pcie.method == "not measured: no CUDA device (a stand-in)"
    # the budget, and the record's duration, count from the command's start
    assert rec.duration_s is not None and rec.duration_s >= 1.0 + 0.8
    assert plan.holds and rec.duration_s <= 4.0 + budget.margin_s(4.0)


def test_a_host_without_a_gpu_never_starts_cuda(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no(*args: object) -> None:
        raise AssertionError("CUDA started on a host without a GPU")

    monkeypatch.setattr(probe_mod, "may_have_gpu", lambda: False)
    monkeypatch.setattr(probe_mod, "_CudaStart", no)
    monkeypatch.setattr("ioprobe.collect.cuda_copy.may_have_gpu", lambda: False)
    seen: list[PhasePlan] = []
    opts = ProbeOptions(target=str(folder), loader="raw", time_budget_s=3.0, on_plan=seen.append)
    rec = Probe(opts).run()
    assert rec.stages.pcie.method == "not measured: no CUDA device"
    assert "cuda" not in seen[0].fixed_s


def test_a_budget_that_cannot_hold_is_said_before_measuring_and_the_probe_keeps_to_it(
    folder: Path,
) -> None:
    seen: list[PhasePlan] = []
    began = time.perf_counter()
    opts = ProbeOptions(
        target=str(folder),
        loader="raw",
        time_budget_s=0.5,
        started_at=began - 2.5,  # a slow command start: 2.5 s before the probe
        on_plan=seen.append,
    )
    rec = Probe(opts).run()
    took = time.perf_counter() - began + 2.5
    [plan] = seen
    assert not plan.holds
    assert plan.phases_s == {p: plan.floors_s[p] for p in plan.phases_s}  # each its least
    note = next(n for n in rec.notes if "could not hold" in n)
    assert f"about {plan.expected_s:.1f} s" in note
    # it ends within what it said, less the record and the exit it did not have to do here
    assert took <= 1.2 * plan.expected_s, (took, plan)


def test_with_dali_the_pipelines_are_built_before_the_first_phase_and_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("nvidia.dali")
    from tests.unit.analysis.test_decode_paths import jpegs

    root = tmp_path / "jpegs"
    root.mkdir()
    for i, blob in enumerate(jpegs(12)):
        (root / f"{i:02d}.jpg").write_bytes(blob)
    reporter = _Phases()
    built: list[tuple[str, list[str]]] = []
    build = paths_mod._build

    def counting(device: paths_mod.Device, *args: Any) -> Any:
        built.append((device, list(reporter.phases)))
        return build(device, *args)

    monkeypatch.setattr(paths_mod, "_build", counting)
    seen: list[PhasePlan] = []
    opts = ProbeOptions(target=str(root), loader="dali", time_budget_s=6.0, on_plan=seen.append)
    rec = Probe(opts, reporter).run()
    # built once, before any storage phase; the decode paths phase builds nothing
    assert [d for d, _ in built] == ["cpu"]
    assert not any(p.startswith("storage") for p in built[0][1])
    assert seen[0].fixed_s["dali"] > 0
    paths = {p.path: p for p in rec.stages.cpu.decode_paths}
    assert paths["dali-cpu"].error is None and paths["dali-cpu"].timed_batches >= 4
    assert paths["dali-cpu"].warmed_up is not None and paths["pillow"].warmed_up is None

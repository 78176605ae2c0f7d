"""The loader replay on real DataLoaders with truths built by construction: the run as it
was replayed to its measured rate, the memory it measures, the what-if that reproduces the
advice, and the fast subset of the advice validation matrix (the first recommendation
applied and rerun, and swept against its neighbours)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ioprobe.analysis import loader_sim
from ioprobe.collect import procfs
from ioprobe.record import RunRecord
from tests.fixtures.datasets import SleepDataset
from tests.support.cli import run_cli
from tests.support.validation import CASES, SWEEPS, Case, rate, run, validate

# the matrix's cases cut short for CI: the same construction, fewer samples
SMALL = {
    name: dataclasses.replace(CASES[name], steady_batches=100)
    for name in ("skewed-remote", "latency-bound", "mixed")
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_run_as_it_was_replays_to_within_15_percent_of_its_measured_rate(name: str) -> None:
    replay = loader_sim.replay(run(SMALL[name]))
    assert replay is not None
    assert abs(replay.error) < 0.15, replay


def test_beside_another_sessions_busy_loop_more_workers_come_out_as_predicted() -> None:
    # a busy loop in a session of its own beside 3 ms of CPU per sample: where the kernel
    # groups sessions beside this one's it keeps its core and 4 workers run as 1 did (the
    # scan tells it apart); where it does not (a cpu cgroup other than the root one, or this
    # job in the first session, whose tasks are the root group's own and meet the loop's
    # group as one more thread), they take cores from it thread by thread. The replay of 4
    # workers from the 1-worker run meets the rerun either way.
    case = dataclasses.replace(CASES["foreign-session"], steady_batches=100)
    rec = run(case)
    assert rec.watch is not None and rec.watch.epochs[0].apart_cpu_seconds is not None
    more = loader_sim.Setting(4, 2, True)
    predicted = loader_sim.predict(rec, more)
    assert predicted is not None
    measured = rate(case, more)
    ep = rec.watch.epochs[0]
    seen = procfs.group_cpu()  # where this job's group sits, should the check fail
    own = seen.own if seen is not None else None
    why = (predicted.samples_per_s, measured, ep.apart_cpu_seconds, ep.apart_groups, own)
    assert abs(predicted.samples_per_s / measured - 1) < 0.15, why


def test_a_batchs_bytes_and_a_workers_private_memory_are_measured() -> None:
    case = Case(
        "bytes",
        lambda n: SleepDataset(n, 0.0, floats=1024),
        8,
        loader_sim.Setting(2, 2, True),
        0.0,
        "",
    )
    rec = run(case)
    assert rec.watch is not None
    assert rec.watch.batch_bytes == 8 * 1024 * 4  # 8 samples of 1024 float32
    # a forked worker's own pages: more than nothing, far less than the parent's torch
    assert rec.watch.worker_private_bytes is not None
    assert 64 * 1024 < rec.watch.worker_private_bytes < 1 << 30
    assert rec.watch.next_cpu_ms is not None and rec.watch.next_cpu_ms > 0


def test_whatif_on_the_command_line_gives_the_replays_prediction(tmp_path: Path) -> None:
    rec = run(SMALL["skewed-remote"])
    saved = tmp_path / "run.json"
    rec.save(saved)
    out = tmp_path / "whatif.json"
    result = run_cli(
        "whatif", str(saved), "--in-order", "false", "--workers", "6", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr
    predicted = RunRecord.load(out).predicted_samples_per_s
    expected = loader_sim.predict(RunRecord.load(saved), loader_sim.Setting(6, 2, False))
    assert expected is not None
    assert predicted == pytest.approx(expected.samples_per_s, rel=1e-6)
    bad = run_cli("whatif", str(saved), "--in-order", "maybe")
    assert bad.returncode != 0 and "--in-order" in bad.stderr


# a minute or two each, and the rates of 16-24 workers on a 2-core host swing with any other
# load: run with `pytest -m long tests/integration/watch/test_loader_sim.py` on a quiet host, as
# bench_advice.py runs the whole matrix; the default run holds the replay's own figures
@pytest.mark.long
@pytest.mark.parametrize("name", ["skewed-remote", "latency-bound"])
def test_the_first_advice_comes_true_on_a_rerun_and_is_the_best_of_its_sweep(name: str) -> None:
    case = SMALL[name]
    # CI's share of the matrix: the advice against its first neighbours (bench_advice.py
    # sweeps them all)
    outcome = validate(case, pairs=2, sweep=SWEEPS[name][:4])
    assert outcome.advice != "none"
    assert outcome.error <= 0.15, outcome
    assert outcome.advised_vs_best >= 0.95, outcome

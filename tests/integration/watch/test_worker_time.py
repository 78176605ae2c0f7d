"""A worker's time split into CPU and waiting, on real DataLoader workers with known costs.

Collate is timed in the thread's CPU time: a collate that burns a known CPU time and also
waits (asleep, as a large batch's copy waits on memory) is charged its CPU alone, with more
workers than cores (4 on 2), where a wall clock would also count each worker's wait for a
core. Inside one worker, the wait and the CPU run one after the other: N workers that each
sleep 40 ms and burn 10 ms per sample deliver N / 50 ms, not N / 40 ms.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.record import RunRecord
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.terminal import render as render_terminal
from tests.fixtures.datasets import BurnDataset, SleepBurnDataset, WaitingCollate

REPO = Path(__file__).resolve().parents[3]
SAMPLE_CPU_S = 0.002
COLLATE_CPU_S = 0.016
COLLATE_WAIT_S = 0.020
BATCH = 8


def children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def collate_run() -> tuple[RunRecord, float]:
    """One pass of 4 workers (more than this host's cores, at most 2 of them given) whose
    collate burns and waits; and the CPU the workers really spent, by the kernel's
    accounting of the exited worker processes (their start-up and IPC included)."""
    before = children_cpu_s()
    loader = ioprobe.watch(
        DataLoader(
            BurnDataset(960, SAMPLE_CPU_S),
            batch_size=BATCH,
            num_workers=4,
            prefetch_factor=8,
            collate_fn=WaitingCollate(COLLATE_CPU_S, COLLATE_WAIT_S),
        )
    )
    for _ in loader:
        pass
    rec = loader.run
    del loader  # the workers were joined at the epoch's end: their CPU is accounted
    return rec, children_cpu_s() - before


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) > 2, reason="needs more workers than cores")
def test_collate_is_charged_its_cpu_time_not_its_wall_time() -> None:
    truth = SAMPLE_CPU_S + COLLATE_CPU_S / BATCH  # 4 ms per sample, by construction
    rec, spent = collate_run()
    cpu = rec.stages.cpu
    assert cpu.cpu_seconds_per_sample is not None and cpu.capacity_samples_per_s is not None
    assert cpu.cpu_seconds_per_sample == pytest.approx(truth, rel=0.10)
    w = rec.watch
    assert w is not None
    samples = sum(e.samples for e in w.epochs)
    # never more than the kernel says the worker processes spent
    assert cpu.cpu_seconds_per_sample <= 1.02 * spent / samples, spent / samples
    collate_cpu = sum(e.collate_cpu_seconds or 0.0 for e in w.epochs)
    collate_wall = sum(e.collate_seconds for e in w.epochs)
    batches = sum(e.batches for e in w.epochs)
    assert collate_cpu / batches == pytest.approx(COLLATE_CPU_S, rel=0.10)
    assert collate_wall / batches >= COLLATE_CPU_S + COLLATE_WAIT_S  # the wait is wall only
    # the CPU stage can deliver what was delivered: it is the bound, not below the rate
    assert rec.measured_samples_per_s is not None
    assert cpu.capacity_samples_per_s >= 0.9 * rec.measured_samples_per_s, (
        cpu.capacity_samples_per_s,
        rec.measured_samples_per_s,
    )


def blocked_run() -> RunRecord:
    loader = ioprobe.watch(
        DataLoader(SleepBurnDataset(160, 0.040, 0.010), batch_size=4, num_workers=2)
    )
    for _ in loader:
        pass
    return loader.run


# the same sum on a record built by hand is test_capacity.py's
# test_workers_that_wait_then_compute_deliver_lanes_over_the_sum, in the default run
@pytest.mark.long
def test_blocked_time_and_cpu_in_one_worker_add_up() -> None:
    """2 workers, each 40 ms asleep then 10 ms of CPU per sample: 40 samples/s, where the
    storage lanes alone (2 / 40 ms) would say 50."""
    errors = []
    for _ in range(3):  # the median of three: a busy host slows one run now and then
        rec = blocked_run()
        assert rec.measured_samples_per_s is not None
        errors.append(rec.predicted_samples_per_s / rec.measured_samples_per_s - 1)
        assert rec.bottleneck == "storage"
        cpu_s = rec.stages.cpu.cpu_seconds_per_sample
        assert cpu_s == pytest.approx(0.010, rel=0.10)
    assert abs(statistics.median(errors)) <= 0.10, errors


# Run in a fresh interpreter: a worker forked from the test process inherits every mapping
# of the frameworks earlier tests imported (about 1,100), which its mapped-files listings
# then read, a cost a training script's workers do not have.
WATCH_COST_RUN = """
import sys
from torch.utils.data import DataLoader
import ioprobe
from tests.fixtures.datasets import BurnDataset
loader = ioprobe.watch(
    DataLoader(BurnDataset(400, 0.001), batch_size=4, num_workers=2, prefetch_factor=4)
)
for _ in loader:
    pass
loader.run.save(sys.argv[1])
"""


def test_the_record_says_what_the_watch_cost_the_workers(tmp_path: Path) -> None:
    """The workers time the watch's own work after each collate and send it with the next
    batch: a few tens of microseconds per batch, far below the 4 x 1 ms of CPU each batch's
    samples burn, and every report states it."""
    out = tmp_path / "run.json"
    subprocess.run(
        [sys.executable, "-c", WATCH_COST_RUN, str(out)], cwd=REPO, check=True, timeout=120
    )
    rec = RunRecord.load(out)
    w = rec.watch
    assert w is not None
    batches = sum(e.batches for e in w.epochs)
    spent = sum(e.watch_worker_seconds for e in w.epochs)
    # every batch but each worker's first sends the work after its previous collate
    assert spent > 0
    assert spent / batches < 0.002  # its mapped-files listings are the largest part
    f = findings(rec)
    assert f.watch_cost is not None and f.watch_cost.share < 0.10
    assert f.watch_cost.per_batch_ms == pytest.approx(spent / batches * 1e3)
    for text in (render_terminal(rec, f), render_markdown(rec, f), render_html(rec, f)):
        assert "watch cost" in text and f"{f.watch_cost.per_batch_ms:.2f} ms per batch" in text


SCAN_DELAY_S = 0.03


def test_the_main_processs_work_at_each_epochs_start_and_end_is_what_the_record_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch's own work in the main process at an epoch's start and end (the host's
    processes scanned among it), timed per epoch: with each scan made 30 ms slower, the first
    epoch's figure holds its two scans' 60 ms, and not much more; those cost more than 0.5%
    of its epoch, so the epochs after it scan nothing and their figure is small. The
    reports say it."""
    from ioprobe.monitor import collector

    real = collector.group_cpu

    def slow_scan() -> object:
        time.sleep(SCAN_DELAY_S)
        return real()

    monkeypatch.setattr(collector, "group_cpu", slow_scan)
    loader = ioprobe.watch(DataLoader(BurnDataset(64, 0.001), batch_size=8, num_workers=2))
    for _ in range(3):
        for _ in loader:
            pass
    rec = loader.run
    assert rec.watch is not None and len(rec.watch.epochs) == 3
    first, *later = rec.watch.epochs
    assert 2 * SCAN_DELAY_S <= first.watch_main_seconds < 2 * SCAN_DELAY_S + 0.05
    assert first.apart_cpu_seconds is not None
    for e in later:
        assert e.apart_cpu_seconds is None and 0 < e.watch_main_seconds < 0.01
    f = findings(rec)
    assert f.watch_cost is not None
    mean = sum(e.watch_main_seconds for e in rec.watch.epochs) / 3
    assert f.watch_cost.epoch_ms == pytest.approx(mean * 1e3)
    for text in (render_terminal(rec, f), render_markdown(rec, f), render_html(rec, f)):
        assert f"{f.watch_cost.epoch_ms:.1f} ms per epoch in the main process" in text


_IMPORT = (
    "import time, torch.utils.data.dataloader\n"
    "t = time.perf_counter_ns()\n"
    "import ioprobe.loaders.torch_worker\n"
    "print(time.perf_counter_ns() - t)\n"
)


@pytest.mark.parametrize(("context", "starts"), [("spawn", 2), ("fork", 0)])
def test_a_spawned_workers_import_of_the_watch_is_counted_at_each_start_and_timed(
    context: str, starts: int
) -> None:
    """Under spawn each worker imports the watch's worker module at its start, at every
    epoch's start without persistent workers (1 worker, 2 epochs: 2 starts); a forked
    worker has it already. The record counts the starts and times them as long as the
    import takes a fresh interpreter with torch's DataLoader loaded, measured beside it."""
    loader = ioprobe.watch(
        DataLoader(
            BurnDataset(16, 0.001), batch_size=8, num_workers=1, multiprocessing_context=context
        )
    )
    for _ in range(2):
        for _ in loader:
            pass
    rec = loader.run
    assert rec.watch is not None
    assert sum(e.watch_imports for e in rec.watch.epochs) == starts
    f = findings(rec)
    assert f.watch_cost is not None and f.watch_cost.imports == starts
    text = render_terminal(rec, f)
    if not starts:
        assert f.watch_cost.import_ms == 0 and "worker start" not in text
        return
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT], capture_output=True, text=True, check=True, cwd=REPO
    )
    truth = int(out.stdout) / 1e6
    assert truth / 3 < f.watch_cost.import_ms < truth * 3, (f.watch_cost.import_ms, truth)
    assert f"{f.watch_cost.import_ms:.1f} ms per worker start" in text

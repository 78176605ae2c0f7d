"""Budgets hold whatever the storage does: deadlines abandon reads that never return, network
timeouts come from the budget, and flags cannot make a loop or a sleep unbounded.

A read that never returns is real here: opening a FIFO for reading blocks until a writer
comes, as a read from a hung NFS server or a silent HTTP server would. Each test opens the
FIFO for writing at the end, which lets the abandoned reader finish. The storage pass opens
files without blocking (a FIFO in a dataset is an error it counts, not a hang), so its tests
hang the open of one regular file instead, as a hung NFS server would, until the test ends."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ioprobe.collect import budget
from ioprobe.collect import pipeline as pipe_mod
from ioprobe.collect import storage as st
from ioprobe.collect.dataset import Dataset, FileEntry
from ioprobe.collect.probe import ProbeOptions
from ioprobe.errors import BadInputError

# deadlines are held to within fractions of a second: run alone (tests/conftest.py)
pytestmark = pytest.mark.serial


@pytest.fixture
def stuck(tmp_path: Path) -> Iterator[Path]:
    """A path whose open() blocks until the test ends."""
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    yield fifo
    # a writer arriving lets every reader blocked in open() go on (to end of file)
    with contextlib.suppress(OSError):  # ENXIO: no reader is left blocked
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def hung(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A regular file whose open() blocks until the test ends (a hung NFS server)."""
    path = tmp_path / "stuck"
    path.write_bytes(b"x" * 100)
    release = threading.Event()
    real_open = os.open

    def open_(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(name) == str(path):
            release.wait()
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    yield path
    release.set()


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def test_timeouts_are_a_fifth_of_the_budget_with_a_floor_and_caps() -> None:
    assert budget.network_timeouts(5) == (1.0, 1.0)  # the floor
    assert budget.network_timeouts(20) == (4.0, 4.0)
    assert budget.network_timeouts(600) == (10.0, 60.0)  # the caps


def test_margin_is_two_seconds_or_a_fifth_of_the_budget() -> None:
    assert budget.margin_s(5) == 2.0
    assert budget.margin_s(60) == 12.0


def test_within_abandons_a_call_that_never_returns(stuck: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(budget.Overdue):
        budget.within(0.3, _read, stuck)
    assert time.monotonic() - t0 < 1.0


def test_within_returns_the_value_or_raises_the_error_of_a_prompt_call(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert budget.within(5, _read, tmp_path / "f") == b"abc"
    with pytest.raises(FileNotFoundError):
        budget.within(5, _read, tmp_path / "missing")


def test_map_within_keeps_what_finished_and_marks_what_did_not(tmp_path: Path, stuck: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    paths = [tmp_path / "f", stuck, tmp_path / "missing"]
    t0 = time.monotonic()
    out = budget.map_within(_read, paths, 3, seconds=0.5)
    assert time.monotonic() - t0 < 1.5
    assert out[0] == b"abc"
    assert isinstance(out[1], budget.Pending)
    assert isinstance(out[2], FileNotFoundError)


def test_a_storage_level_stops_waiting_for_a_read_that_never_returns(hung: Path) -> None:
    items = [(str(hung), 0, 100)]
    t0 = time.monotonic()
    res = st.run_level(st._local_reader, items, 1, 0.2, hard_s=0.6)
    assert time.monotonic() - t0 < 1.5
    assert (res.items, res.bytes, res.abandoned) == (0, 0, 1)


def test_a_pass_on_storage_that_never_answers_is_a_timeout_within_its_budget(
    hung: Path,
) -> None:
    ds = Dataset(target=str(hung.parent), entries=[FileEntry(str(hung), 100)])
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no read finished"):
        st.measure_pass(ds, ds.entries, "warm", 1.0, levels=(1, 2))
    # the warm-up and the level share the pass's second; in-flight reads get a grace of 0.5 s
    assert time.monotonic() - t0 < 1.0 + st.LEVEL_GRACE_S + 0.3


def test_a_petabyte_sparse_file_plans_a_bounded_number_of_items() -> None:
    items = st.plan_items([FileEntry("huge", 1 << 50), FileEntry("next", 10)])
    assert len(items) == st.MAX_ITEMS
    assert items[-1] == ("huge", (st.MAX_ITEMS - 1) * st.CHUNK, st.CHUNK)


def test_huge_compute_time_does_not_outlast_the_end_to_end_budget(tmp_path: Path) -> None:
    files = []
    for i in range(8):
        (tmp_path / f"f{i}").write_bytes(b"x" * 100)
        files.append(FileEntry(str(tmp_path / f"f{i}"), 100))
    t0 = time.monotonic()
    run = pipe_mod.run_pipeline(
        files, None, "raw", workers=2, batch_size=2, compute_s=1e9, budget_s=1.0, cache="warm"
    )
    # worker start-up (spawn) comes on top of the budget; a day of sleep does not
    assert time.monotonic() - t0 < 8.0
    assert run.workers == 2


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ({"time_budget_s": math.nan}, "--time-budget must be a positive"),
        ({"time_budget_s": math.inf}, "--time-budget must be a positive"),
        ({"time_budget_s": 1e12}, "at most 86,400"),
        ({"compute_ms_per_batch": math.inf}, "--compute-ms-per-batch must be a finite"),
        ({"compute_ms_per_batch": math.nan}, "--compute-ms-per-batch must be a finite"),
        ({"gpu_samples_per_s": math.nan}, "--gpu-samples-per-s must be a finite"),
        ({"workers": 10**9}, "--workers must be at most 1024"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_flags_that_would_make_a_loop_or_sleep_unbounded_are_refused(
    flags: dict[str, float], fragment: str
) -> None:
    with pytest.raises(BadInputError, match=fragment):
        ProbeOptions(target="x", **flags).validate()  # type: ignore[arg-type]


def test_a_ctrl_c_handed_to_another_thread_stops_the_wait_at_once() -> None:
    # the kernel hands a process's SIGINT to any thread that does not block it: handed to the
    # listing's thread, it stopped the main thread's wait only when the wait's limit ran out
    # (15 s into a 30 s probe). ioprobe's own threads now block it (collect/quiet.py); a
    # library's thread, started as a plain thread here, may still take it
    import signal

    ready, ident = threading.Event(), []

    def library() -> None:
        ident.append(threading.get_ident())
        ready.set()
        time.sleep(5)

    def poke() -> None:
        ready.wait()
        time.sleep(0.2)
        signal.pthread_kill(ident[0], signal.SIGINT)

    threading.Thread(target=library, daemon=True).start()
    threading.Thread(target=poke, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        budget.within(4.0, time.sleep, 5)
    assert time.monotonic() - t0 < 1.5

"""The read check on datasets whose storage is built here: one that sleeps per read (a
per-request latency: readers overlap freely), one whose reads hold a lock shared by every
reader process (a bandwidth: one read at a time), and the fit of the points it takes."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import pytest

from ioprobe.collect import read_check
from ioprobe.collect.read_check import Level

pytestmark = pytest.mark.serial  # the truth is the clock: alone on the CPU

READ_S = 0.004


class Latency:
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> int:
        time.sleep(READ_S)
        return i


class OneAtATime:
    """A read holds a lock every reader process shares (forked with it): readers queue."""

    def __init__(self) -> None:
        self.lock = multiprocessing.get_context("fork").Lock()

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> int:
        with self.lock:
            time.sleep(READ_S)
        return i


class Loud(Latency):
    """Prints and changes the process's state as it reads, as a careless dataset may."""

    def __getitem__(self, i: int) -> int:
        print("reading", i, flush=True)
        os.environ["LOUD_READ"] = "1"
        return super().__getitem__(i)


def test_readers_that_overlap_freely_scale_as_a_latency_limit() -> None:
    got = read_check.check(Latency(), 1000, 2)
    assert got is not None and got.exponent is not None
    assert got.exponent >= 0.85, got
    assert got.limit == "per-request latency"
    assert [round(p.read_ms) for p in got.points] == [4, 4, 4]
    assert "2, 4, 8 processes" in got.checked


def test_readers_that_queue_for_one_read_at_a_time_scale_as_a_bandwidth() -> None:
    got = read_check.check(OneAtATime(), 1000, 2)
    assert got is not None and got.exponent is not None
    assert got.exponent <= 0.15, got
    assert got.limit == "bandwidth"
    # every reader blocked at once, each read waiting for all the others'
    for p in got.points:
        assert p.read_ms == pytest.approx(READ_S * 1e3 * p.reads_in_flight, rel=0.25), got.points


def test_the_readers_print_nothing_and_change_nothing_of_the_callers(
    capfd: pytest.CaptureFixture[str],
) -> None:
    got = read_check.check(Loud(), 1000, 1)
    assert got is not None
    out, err = capfd.readouterr()
    assert "reading" not in out + err
    assert "LOUD_READ" not in os.environ
    assert multiprocessing.active_children() == []


class Broken(Latency):
    def __getitem__(self, i: int) -> Any:
        raise OSError("gone")


def test_a_dataset_that_fails_every_read_gives_no_curve() -> None:
    assert read_check.check(Broken(), 1000, 2) is None
    assert multiprocessing.active_children() == []


def test_levels_go_from_the_runs_workers_to_four_times_them_within_the_cap() -> None:
    assert read_check.readers_for(2) == [2, 4, 8]
    assert read_check.readers_for(8) == [8, 16]
    assert read_check.readers_for(0) == [1, 2, 4]


def test_levels_without_enough_reads_give_no_curve() -> None:
    few = [Level(2, 3, 0.02, 0.8), Level(4, 5, 0.04, 1.6)]
    assert read_check.scaling(few) is None
    one = [Level(2, 100, 0.8, 0.8), Level(4, 4, 0.8, 1.6)]
    assert read_check.scaling(one) is None

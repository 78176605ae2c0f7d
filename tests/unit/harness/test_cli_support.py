"""The test harness's filter of a dying script's worker tracebacks keeps every other one."""

from __future__ import annotations

from tests.support.cli import without_dropped_worker_tracebacks

# printed by a DataLoader worker of tests/fixtures/in_run_train.py, run unwatched, whose main
# process got SIGHUP while it took a batch
WORKER = """Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 138, in _serve
    with self._listener.accept() as conn:
         ^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/multiprocessing/connection.py", line 395, in _recv
    chunk = read(handle, remaining)
            ^^^^^^^^^^^^^^^^^^^^^^^
ConnectionResetError: [Errno 104] Connection reset by peer
"""
OURS = """Traceback (most recent call last):
  File "/src/ioprobe/cli/tune.py", line 10, in main
    raise ValueError("x")
ValueError: x
"""
LINE = "ioprobe tune --in-run: interrupted (SIGHUP) before a trial ended: nothing to compare\n"


def test_a_workers_reset_connection_traceback_is_dropped_and_the_lines_around_it_kept() -> None:
    assert without_dropped_worker_tracebacks("a\n" + WORKER + LINE) == "a\n" + LINE


def test_a_traceback_through_ioprobe_is_kept_even_beside_a_workers() -> None:
    text = WORKER + OURS + LINE
    assert without_dropped_worker_tracebacks(text) == OURS + LINE


def test_a_reset_connection_raised_outside_multiprocessing_is_kept() -> None:
    text = WORKER.replace("/multiprocessing/resource_sharer.py", "/ioprobe/collect/remote.py")
    assert without_dropped_worker_tracebacks(text) == text

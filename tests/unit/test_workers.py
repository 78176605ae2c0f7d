"""A pool's terminate() ends its workers whatever they are doing, even where a Python
SIGTERM handler would never run."""

from __future__ import annotations

import os
import signal
import time

from ioprobe.collect.workers import quiet_worker, spawn_pool


def _init() -> None:
    quiet_worker()


def _deaf_forever() -> None:
    # stands for a worker whose SIGTERM handler never runs: one that took the signal while
    # in a C wait the signal did not interrupt
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    time.sleep(3600)


def _pid() -> int:
    return os.getpid()


def test_terminate_ends_a_worker_that_cannot_act_on_sigterm() -> None:
    pool = spawn_pool(1, _init, ())
    try:
        assert pool.apply_async(_pid).get(timeout=60) > 0  # the worker is up, handler in place
        pool.apply_async(_deaf_forever)
        time.sleep(0.5)
        t0 = time.monotonic()
        pool.terminate()
        assert time.monotonic() - t0 < 5.0
    finally:
        pool.terminate()

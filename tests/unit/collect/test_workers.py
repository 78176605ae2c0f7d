"""A pool's terminate() ends its workers whatever they are doing, even where a Python
SIGTERM handler would never run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def test_workers_that_die_as_they_start_end_the_phase_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import contextlib

    from ioprobe.collect import cpu as cpu_mod
    from ioprobe.collect.workers import WorkersFailed

    @contextlib.contextmanager
    def missing(payloads: object) -> Iterator[str]:
        yield str(tmp_path / "gone")  # each worker's initializer fails to open it, and dies

    monkeypatch.setattr(cpu_mod, "_payload_file", missing)
    t0 = time.monotonic()
    with pytest.raises(WorkersFailed, match="die as they start") as failed:
        cpu_mod.measure_cpu("raw", [b"x" * 100], 2, 2.0, levels=[1, 2])
    assert time.monotonic() - t0 < 30  # the pool started new workers for ever
    # an exception in the start (status 1) points at the interpreter, not at a decoder
    assert "exit status 1" in str(failed.value) and "import ioprobe" in str(failed.value)


def _exits_on_first_sample(payload: bytes) -> int:
    os._exit(3)


def test_a_decoder_that_exits_is_named_as_what_ended_the_workers(tmp_path: Path) -> None:
    from ioprobe.collect import cpu as cpu_mod
    from ioprobe.collect.workers import WorkersFailed

    decoder = f"{__name__}:_exits_on_first_sample"
    with pytest.raises(WorkersFailed) as failed:
        cpu_mod.measure_cpu(decoder, [b"x" * 100], 2, 2.0, levels=[1, 2])
    message = str(failed.value)
    assert "exit status 3" in message and "sys.exit or os._exit" in message, message
    assert "import ioprobe" not in message  # the interpreter was fine


def test_payload_files_of_killed_probes_are_removed_by_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import tempfile

    from ioprobe.collect import cpu as cpu_mod

    ended = subprocess.Popen(["true"])  # a probe killed with SIGKILL: its pid runs no more
    ended.wait()
    stale = tmp_path / f"ioprobe-payloads-{ended.pid}-abc"
    alive = tmp_path / f"ioprobe-payloads-{os.getpid()}-def"  # a probe still running
    other = tmp_path / "ioprobe-payloads-notapid"
    for p in (stale, alive, other):
        p.write_bytes(b"x")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cpu_mod.measure_cpu("raw", [b"x" * 100], 1, 0.3, levels=[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])


def test_the_payload_file_stays_readable_when_a_cleaner_removes_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle
    import tempfile

    from ioprobe.collect import cpu as cpu_mod

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with cpu_mod._payload_file([b"abc", b"de"]) as held:
        for name in tmp_path.iterdir():  # tmpreaper, systemd-tmpfiles: the name goes
            name.unlink()
        with open(held, "rb") as fh:  # what a worker starting now opens
            assert pickle.load(fh) == [b"abc", b"de"]
    assert not list(tmp_path.iterdir())  # and the exit raised nothing over the gone name
    # a whole CPU phase with the name removed as soon as it is made
    real = cpu_mod._payload_file

    @contextlib.contextmanager
    def cleaned(payloads: list[bytes]) -> Iterator[str]:
        with real(payloads) as path:
            for name in tmp_path.iterdir():
                name.unlink()
            yield path

    monkeypatch.setattr(cpu_mod, "_payload_file", cleaned)
    stage = cpu_mod.measure_cpu("raw", [b"x" * 100] * 8, 1, 0.5, levels=[1])
    assert stage.sweep and stage.sweep[0].samples > 0

"""A pool's terminate() ends its workers whatever they are doing, even where a Python
SIGTERM handler would never run; a Ctrl-C while it starts is never lost to a helper
thread."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from ioprobe.collect.budget import map_within, within
from ioprobe.collect.progress import SilentReporter
from ioprobe.collect.quiet import HELD, start_quiet
from ioprobe.collect.workers import (
    FirstCalls,
    WorkersFailed,
    quiet_worker,
    spawn_pool,
    wait_started,
)
from tests.support.cli import REPO


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


def _die_holding_the_result_lock() -> None:
    # what a worker killed (or stopped) as it wrote a result leaves: the result queue's write
    # lock held by a process that never releases it
    import multiprocessing

    multiprocessing.current_process()._args[1]._wlock.acquire()  # type: ignore[attr-defined]
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_dead_holding_the_result_lock_leaves_a_pool_that_still_ends() -> None:
    # both of the pool's sentinels go on that queue under that lock as it ends: its own, and
    # its task handler's once the worker handler exits. Either waited for ever
    pool = spawn_pool(2, _init, ())
    ended: threading.Thread | None = None
    try:
        assert pool.apply_async(_pid).get(timeout=60) > 0
        workers = list(pool._pool)  # type: ignore[attr-defined]
        pool.apply_async(_die_holding_the_result_lock)
        deadline = time.monotonic() + 30
        while all(p.is_alive() for p in workers):  # dead, or reaped and replaced
            assert time.monotonic() < deadline, "the worker did not die"
            time.sleep(0.01)
        t0 = time.monotonic()
        ended = threading.Thread(target=pool.terminate, daemon=True)
        ended.start()
        ended.join(15)
        assert not ended.is_alive(), "the pool's end waited on the dead worker's lock"
        assert time.monotonic() - t0 < 10.0
        assert _no_workers_left()
    finally:
        if ended is None or not ended.is_alive():
            pool.terminate()


BROKEN_PIPE = """
import os
from ioprobe.collect.workers import quiet_worker
quiet_worker()
r, w = os.pipe()
os.close(r)  # the reader gone, as a parent killed outright closes its end
os.write(w, b"result")
print("wrote")
"""


def test_a_worker_writing_to_a_pipe_whose_reader_is_gone_ends_quietly() -> None:
    # a probe killed outright closes its result pipe before the kernel sends its workers the
    # parent-death signal; a worker that wrote in between printed BrokenPipeError tracebacks
    proc = subprocess.run(
        [sys.executable, "-c", BROKEN_PIPE], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGPIPE, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


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
    from ioprobe.collect.leftovers import own_prefix

    ended = subprocess.Popen(["true"])  # a probe killed with SIGKILL: its pid runs no more
    ended.wait()
    stale = tmp_path / f"{own_prefix(cpu_mod.PAYLOAD_PREFIX, ended.pid)}abc"
    alive = tmp_path / f"{own_prefix(cpu_mod.PAYLOAD_PREFIX)}def"  # a probe still running
    other = tmp_path / "ioprobe-payloads-notapid"
    # another host's (a TMPDIR that nodes share): its pid says nothing here
    elsewhere = tmp_path / f"ioprobe-payloads-{ended.pid}-0badf00d-ghi"
    for p in (stale, alive, other, elsewhere):
        p.write_bytes(b"x")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cpu_mod.measure_cpu("raw", [b"x" * 100], 1, 0.3, levels=[1])
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([alive.name, other.name, elsewhere.name])


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


def _mask_of_a_thread_started_by(start: Callable[[threading.Thread], object]) -> set[int]:
    """The signals blocked in a thread started by ``start``, and in one that thread starts."""
    seen: list[set[int]] = []

    def grandchild() -> None:
        seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))

    def child() -> None:
        seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        t = threading.Thread(target=grandchild)
        t.start()
        t.join()

    t = threading.Thread(target=child)
    start(t)
    t.join()
    assert len(seen) == 2 and seen[0] == seen[1]  # a thread's mask is its starter's
    return seen[0]


def test_threads_ioprobe_starts_block_the_signals_the_main_thread_takes() -> None:
    held = {int(s) for s in HELD}
    assert held <= _mask_of_a_thread_started_by(start_quiet)
    assert not held & _mask_of_a_thread_started_by(threading.Thread.start)  # the control
    assert not held & set(signal.pthread_sigmask(signal.SIG_BLOCK, []))  # the caller's as it was
    # the deadline helpers run their calls on such threads
    mask = lambda _=None: set(signal.pthread_sigmask(signal.SIG_BLOCK, []))  # noqa: E731
    assert held <= within(10.0, mask)
    (got,) = map_within(mask, [0], threads=1)
    assert isinstance(got, set) and held <= got


def test_fsspecs_event_loop_started_by_ioprobe_blocks_them_too() -> None:
    # in a fresh interpreter: the loop thread is started once per process
    script = (
        "import signal\n"
        "from fsspec import asyn\n"
        "from ioprobe.collect.quiet import HELD, quiet_fsspec_loop\n"
        "quiet_fsspec_loop()\n"
        "async def mask():\n"
        "    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))\n"
        "print(HELD <= asyn.sync(asyn.get_loop(), mask))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


SLOW_POOL = """
import os, subprocess, sys, time
from ioprobe.collect import workers
from ioprobe.collect.budget import Overdue, within

class SlowPool(workers._Pool):
    def __init__(self, *args, **kwargs):
        time.sleep(1.0)  # the pool's start, long enough for the signal to land inside it
        super().__init__(*args, **kwargs)

workers._Pool = SlowPool
try:
    within(0.05, time.sleep, 60)  # a call past its deadline: its thread lives on
except Overdue:
    pass
subprocess.Popen(["sh", "-c", f"sleep 0.4; kill -INT {os.getpid()}"])
try:
    pool = workers.spawn_pool(1, workers.quiet_worker, ())
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(0)
time.sleep(1.0)
pool.terminate()
print("lost")
"""


def test_a_ctrl_c_while_a_pool_starts_beside_a_helper_thread_interrupts_the_start() -> None:
    # SIGINT is ignored process-wide while the pool starts and blocked in the main thread:
    # handed to the abandoned call's thread, it was discarded and the probe ran on
    out = subprocess.run(
        [sys.executable, "-c", SLOW_POOL], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "interrupted", (out.stdout, out.stderr[-2000:])


def _first_call_never_returns(first: FirstCalls) -> None:
    quiet_worker()
    with first.calling():
        time.sleep(3600)  # a --loader function that never returns


def _ready(_: int) -> int:
    return 0


def test_a_first_call_that_never_returns_is_named_within_its_limit_not_blamed_on_the_start() -> (
    None
):
    # it waited the pool's 30 s and said the workers did not start
    first = FirstCalls("--loader mod:hangs", limit=0.5)
    pool = spawn_pool(1, _first_call_never_returns, (first,))
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkersFailed) as caught:
            wait_started(pool, 1, _ready, first)
        took = time.monotonic() - t0
    finally:
        pool.terminate()
    assert str(caught.value) == (
        "--loader mod:hangs did not return from its first sample within 0.5 s"
    )
    assert took < 15.0, took


class _Stops(SilentReporter):
    """After the first level, sends ``sig`` to one of the CPU pool's workers (``every``: to
    each of them), then (``interrupt``) stands for a SIGTERM coming to the probe."""

    def __init__(self, sig: int, every: bool = False, interrupt: bool = False) -> None:
        self.sig = sig
        self.every = every
        self.interrupt = interrupt
        self.sent = False

    def result(self, line: str) -> None:
        if self.sent:
            return
        workers = [
            c
            for c in psutil.Process().children()
            if "spawn_main" in " ".join(c.cmdline())
            and "resource_tracker" not in " ".join(c.cmdline())
        ]
        for w in workers if self.every else workers[:1]:
            w.send_signal(self.sig)
        self.sent = True
        if self.interrupt:
            time.sleep(0.3)  # the other worker writes its results meanwhile
            raise KeyboardInterrupt


def _no_workers_left() -> bool:
    return not [
        c
        for c in psutil.Process().children(recursive=True)
        if "spawn_main" in " ".join(c.cmdline())
    ]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_cpu_worker_killed_or_stopped_ends_the_phase_with_its_levels_not_a_hang(sig: int) -> None:
    # the phase waited for the lost task for ever, and terminate() for the task queue's lock
    # that an idle worker killed from outside still held
    from ioprobe.collect.cpu import PhaseCut, measure_cpu

    stops = _Stops(sig)
    t0 = time.monotonic()
    with pytest.raises(PhaseCut) as cut:
        measure_cpu(
            "tests.fixtures.burn:burn_4ms", [b"x"] * 50, 2, 2.0, reporter=stops, levels=[1, 2]
        )
    assert time.monotonic() - t0 < 15.0
    assert stops.sent
    assert [lv.workers for lv in cut.value.stage.sweep] == [1]
    assert cut.value.stage.capacity_samples_per_s is not None  # the measured level stands
    said = "died (signal 9)" if sig == signal.SIGKILL else "was stopped (SIGSTOP)"
    assert cut.value.reason == f"a worker process {said} at the 2-worker level"
    assert _no_workers_left()


@pytest.mark.parametrize(
    ("sig", "every", "interrupt"),
    [(signal.SIGKILL, True, False), (signal.SIGSTOP, False, True), (signal.SIGKILL, False, True)],
)
def test_the_pool_ends_whatever_its_workers_held_when_they_were_lost(
    sig: int, every: bool, interrupt: bool
) -> None:
    # every worker killed at once, or one stopped and then a SIGTERM to the probe: its end
    # waited for ever on a lock a lost worker held (the result queue's, as it wrote)
    from ioprobe.collect.cpu import PhaseCut, measure_cpu

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt if interrupt else PhaseCut):
        measure_cpu(
            "tests.fixtures.burn:burn_4ms",
            [b"x"] * 50,
            2,
            2.0,
            reporter=_Stops(sig, every, interrupt),
            levels=[1, 2],
        )
    assert time.monotonic() - t0 < 15.0
    assert _no_workers_left()


NO_INTERPRETER = """
import multiprocessing, sys
multiprocessing.set_executable("/nonexistent/python")  # what the tracker and workers run
from ioprobe.cli import main
sys.argv = ["ioprobe", *sys.argv[1:]]
main()
"""


def test_a_pool_that_cannot_start_its_tracker_keeps_the_measured_phases_and_says_why(
    tmp_path: Path,
) -> None:
    # as a user who may not run the interpreter's path: the line said "a write failed
    # (Broken pipe; a full TMPDIR?)", or, where the tracker died a moment later, blamed the
    # --loader function, and multiprocessing's finalizers printed BrokenPipeError tracebacks
    data = tmp_path / "data"
    data.mkdir()
    for i in range(8):
        (data / f"f{i}.bin").write_bytes(os.urandom(4000))
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_INTERPRETER,
            "probe",
            str(data),
            "--time-budget",
            "2",
            "--json",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "ioprobe: error: cpu (raw): the worker processes could not start: this user cannot "
        "run /nonexistent/python; what was measured before is reported"
    )
    assert "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["stages"]["storage"]["capacity_samples_per_s"]


def test_a_probe_started_in_a_removed_folder_measures_its_cpu_stage(tmp_path: Path) -> None:
    # the spawned workers are told the parent's working folder, which os.getcwd() could not
    # give: a FileNotFoundError traceback and no record, with every path absolute
    import shlex

    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):
        (data / f"f{i}.bin").write_bytes(os.urandom(8192))
    gone, out = tmp_path / "gone", tmp_path / "p.json"
    gone.mkdir()
    probe = [sys.executable, "-m", "ioprobe", "probe", str(data), "--time-budget", "3", "-q",
             "--json", str(out)]  # fmt: skip
    line = (
        f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && exec {shlex.join(probe)}"
    )
    proc = subprocess.run(
        ["sh", "-c", line], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["stages"]["cpu"]["sweep"]


STOPPED_TRACKER = """
import os, signal, time
from multiprocessing import resource_tracker
from ioprobe.collect import procfs
from ioprobe.collect.workers import start_tracker
start_tracker()
pid = resource_tracker._resource_tracker._pid
os.kill(pid, signal.SIGSTOP)
while procfs.process_state(pid) != b"T":
    time.sleep(0.01)
print(pid)
"""


def test_a_stopped_resource_tracker_is_woken_at_exit_and_ends() -> None:
    # it ends when it reads the end of its parent's pipe: stopped, it stayed for ever, an
    # orphan holding the caller's stdout and stderr (`ioprobe probe ... | cat` never returned)
    from ioprobe.collect import procfs

    proc = subprocess.run(
        [sys.executable, "-c", STOPPED_TRACKER], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout)
    deadline = time.monotonic() + 10
    while procfs.process_state(pid) not in (None, b"Z", b"X"):
        assert time.monotonic() < deadline, f"the tracker is still {procfs.process_state(pid)!r}"
        time.sleep(0.05)

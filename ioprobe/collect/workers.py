"""Process pools that Ctrl-C and SIGTERM end quietly, with no traceback from a worker.

Ctrl-C reaches the whole process group: the parent handles it and ends the pool, so workers
ignore SIGINT. They must not act on it before their first instruction has ignored it (a
worker still importing its modules when Ctrl-C comes prints a traceback): the pool starts
with SIGINT, SIGTERM and SIGHUP blocked in the parent's main thread (``HELD``), the blocked
mask survives exec, and each worker unblocks them once it ignores SIGINT and SIGHUP, which
discards one that came meanwhile. In the parent a signal that comes while the pool starts is
kept for the end of the start, never acted on in its middle (a Ctrl-C raised half way through
the pool's constructor leaves workers no one ends): the main thread holds it pending, and
one the kernel hands to another thread (a library's, or a call abandoned at its deadline)
is taken by a handler that only notes it, then raised again once the pool stands. The pool
once started with SIGINT ignored process-wide instead, and a Ctrl-C handed to another thread
was discarded: the probe ran on and exited 0. Threads ioprobe starts also block ``HELD``
for life (``collect/quiet.py``), so the kernel hands such signals to the main thread.

SIGTERM is blocked while the pool starts too, and the blocked mask survives exec: a SIGTERM
that comes while workers are being spawned waits until every one of them has been handed its
start-up data. Handled at once, it ended the pool while a worker spawned after the signal
still waited for that data, and the worker printed an EOFError traceback. Each worker
unblocks it once its handler is in place.

The pool's own ``terminate()`` kills its workers with SIGKILL, not SIGTERM. A Python signal
handler runs only when the interpreter next checks for signals: a SIGTERM that lands while
an idle worker is inside the C semaphore wait for the task queue's lock (between two futex
sleeps, when a wake-up it lost to another waiter sends it back to sleep) trips the flag and
is never acted on, and ``terminate()`` joins that worker for ever. SIGKILL cannot be missed,
and it is safe there: ``terminate()`` takes the task queue's lock before it signals, so no
worker it kills holds it. The SIGTERM handler stays for a SIGTERM from outside. A worker
killed from outside may hold that lock (an idle worker waits for its next task holding it):
``terminate()`` then takes it for at most a second (``_Pool._help_stuff_finish``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import multiprocessing as mp
import multiprocessing.context as mp_context
import multiprocessing.pool as mp_pool
import multiprocessing.spawn as mp_spawn
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import resource_tracker
from multiprocessing.pool import Pool
from types import FrameType
from typing import Any

from ioprobe import units
from ioprobe.collect import procfs
from ioprobe.collect.quiet import HELD
from ioprobe.errors import IoprobeError

# a spawn pool's start, every worker up with its imports done: about 0.4 s and 0.05 s a
# worker (0.9-1.1 s for 16 on the H100 host's 16 cores, 0.6 s for 2 on the 2-core host)
POOL_START_S = 0.4
POOL_START_PER_WORKER_S = 0.05


def pool_start_s(processes: int) -> float:
    """About how long a spawn pool of ``processes`` takes to start, for planning a budget."""
    return POOL_START_S + POOL_START_PER_WORKER_S * processes


def spawn_pool(processes: int, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> Pool:
    """A spawn pool (safe beside threads and fsspec's event loop) of quiet workers; each
    ``initializer`` must call ``quiet_worker`` first."""
    ctx = mp.get_context("spawn")
    _leave_a_removed_folder()
    if threading.current_thread() is not threading.main_thread():
        # signal handlers belong to the main thread, and so does the Ctrl-C to handle
        start_tracker()
        return _Pool(processes, initializer, initargs, context=ctx)
    # started first: starting it unblocks SIGINT in this thread
    start_tracker()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    came: list[int] = []
    handlers = _noting(came)
    pool: Pool | None = None
    try:
        pool = _Pool(processes, initializer, initargs, context=ctx)
    except BrokenPipeError:
        # the pool's first lock registers with the tracker, which has already ended
        raise TrackerGone() from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        _unblock(mask, pool, came)
    return pool


def _leave_a_removed_folder() -> None:
    """Move to / where this process's working folder has been removed: a spawned worker is
    told the parent's folder to start in (``os.getcwd()``, which then fails). Nothing relative
    resolves in a removed folder, so nothing this process could open changes."""
    try:
        os.getcwd()
    except FileNotFoundError:
        os.chdir("/")


class TrackerGone(BrokenPipeError):
    """A pool that cannot start: the interpreter it runs (``multiprocessing``'s executable,
    ``sys.executable``) cannot be run by this user, or its resource tracker ended as it
    started. An OSError, so a probe keeps the phases it measured before, as it does for a
    write the host refused."""

    def __init__(self, why: str = "") -> None:
        exe = os.fsdecode(mp_spawn.get_executable())
        super().__init__(
            errno.EPIPE,
            "the worker processes could not start: "
            + (
                why
                or f"multiprocessing's resource tracker ended as it started (can this user run {exe}?)"
            ),
        )


def start_tracker() -> None:
    """Start multiprocessing's resource tracker, as every pool and shared value of ioprobe's
    must (its first lock starts it otherwise): with SIGHUP blocked while it starts, a mask
    the tracker keeps for life. A closed terminal's SIGHUP to the whole group would kill it
    (it ignores only SIGINT and SIGTERM), and the one started in its place would print a
    KeyError for each lock released after, and "leaked" warnings. Checks first that this
    user may run the interpreter it runs (``check_runnable``)."""
    check_runnable()
    hup = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, hup)
    if not _waking[0]:
        _waking[0] = True
        atexit.register(_wake_tracker)


_waking = [False]


def _wake_tracker() -> None:
    """At exit, SIGCONT to the resource tracker where something stopped it (SIGSTOP, a cgroup
    freezer): it ends when it reads the end of this process's pipe, and stopped it never
    would, holding the caller's stdout and stderr (``probe | cat`` never returned)."""
    pid = getattr(resource_tracker._resource_tracker, "_pid", None)
    if pid and procfs.process_state(pid) == b"T":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)


def check_runnable() -> None:
    """Raise ``TrackerGone`` where this user may not run the interpreter the pool and its
    resource tracker start: checked before either starts, since a tracker that dies as it
    starts is seen only by a later write to it, and by then the pool's locks exist and their
    finalizers print a BrokenPipeError traceback each at exit."""
    exe = os.fsdecode(mp_spawn.get_executable())
    if not os.access(exe, os.X_OK):
        raise TrackerGone(f"this user cannot run {exe}")


def _noting(came: list[int]) -> dict[signal.Signals, Any]:
    """Each of ``HELD`` that has a handler or its default action now only noted in
    ``came`` (an ignored one stays ignored); returns what each had."""

    def note(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    was = {}
    for sig in sorted(HELD):
        handler = signal.getsignal(sig)
        if handler is not signal.SIG_IGN and handler is not None:
            was[sig] = signal.signal(sig, note)
    return was


class WorkersFailed(IoprobeError):
    """A pool whose workers die as they start: the pool would start new ones for ever."""


class WorkerLost(WorkersFailed):
    """A worker killed or stopped from outside (SIGKILL, the OOM killer, SIGSTOP) as the pool
    started: the task it held is never done."""


# How long a worker's first call of the user's function (in its initializer) may take: a
# library's first-call set-up (Pillow's plugins: 30 ms; an import of torch: 2 s) fits well
# within it, and a function that never returns is named within it rather than blamed on the
# workers' start 30 s later
FIRST_CALL_S = 10.0


class FirstCalls:
    """How many of a pool's workers have begun and ended their initializer's first call of
    the user's function: shared with them through the pool's initargs, so the parent can
    tell a function that does not return from workers that do not start."""

    def __init__(self, what: str, limit: float = FIRST_CALL_S) -> None:
        ctx = mp.get_context("spawn")
        self.what = what
        self.limit = limit
        start_tracker()  # its shared values would start it, SIGHUP unblocked
        try:
            self.begun = ctx.Value("i", 0)
            self.ended = ctx.Value("i", 0)
        except BrokenPipeError:  # a shared value's lock registers with the tracker
            raise TrackerGone() from None

    def __getstate__(self) -> dict[str, Any]:
        return {"what": self.what, "limit": self.limit, "begun": self.begun, "ended": self.ended}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """In a worker: around its first call of the function."""
        with self.begun.get_lock():
            self.begun.value += 1
        try:
            yield
        finally:
            with self.ended.get_lock():
                self.ended.value += 1

    def inside(self) -> bool:
        """Whether some worker is inside its first call now."""
        return bool(self.begun.value > self.ended.value)


def lost_worker(workers: Iterable[Any], signalled: bool = False) -> str | None:
    """How one of ``workers`` (a pool's processes) was lost: died (its exit status, once the
    pool has reaped it) or stopped (SIGSTOP: its state in /proc); None where none was.
    ``signalled``: only a death by a signal counts (an exit of its own is the caller's)."""
    for p in workers:
        code = p.exitcode
        if code is not None and (code < 0 if signalled else code != 0):
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            return f"a worker process died ({how})"
        state = procfs.process_state(p.pid)
        if state == b"T":
            return "a worker process was stopped (SIGSTOP)"
        if state in (b"Z", b"X"):
            return "a worker process died"
    return None


def wait_started(
    pool: Pool, processes: int, ready: Callable[[int], Any], first: FirstCalls | None = None
) -> None:
    """Return once each of the pool's ``processes`` workers has run ``ready`` (its
    initializer done). A worker that dies as it starts (its initializer raised, the
    interpreter cannot import what it needs) is replaced by the pool for ever, and a task
    waits for ever: after more than twice as many workers as asked have come and gone, or
    ``max(30 s, 10 x pool_start_s)`` without them, this raises ``WorkersFailed`` (one line).
    ``first``: where a worker stays inside its first call of the user's function for
    ``first.limit``, the line names the function instead."""
    result = pool.map_async(ready, range(processes), chunksize=1)
    limit = max(30.0, 10 * pool_start_s(processes))
    deadline = time.monotonic() + limit
    seen: dict[int, Any] = {}
    inside_since: float | None = None
    while not result.ready():
        result.wait(0.05)
        lost = lost_worker(seen.values(), signalled=True)
        if lost is not None:  # killed or stopped from outside: its task is never done
            raise WorkerLost(f"{lost} as the pool started")
        if first is not None:
            inside_since = (inside_since or time.monotonic()) if first.inside() else None
            if inside_since is not None and time.monotonic() - inside_since > first.limit:
                raise WorkersFailed(
                    f"{first.what} did not return from its first sample within "
                    f"{units.figure(first.limit)} s"
                )
        # the pool's own list of its workers: the ones it has started so far
        seen.update((p.pid, p) for p in getattr(pool, "_pool", []) if p.pid is not None)
        if len(seen) > 2 * processes + 1:
            codes = sorted({p.exitcode for p in seen.values() if p.exitcode is not None})
            raise WorkersFailed(
                f"the CPU phase's worker processes die as they start ({len(seen)} started for "
                f"{processes}{', exit status ' if codes else ''}"
                f"{', '.join(map(str, codes))}){why_workers_die(codes)}"
            )
        if time.monotonic() > deadline:
            raise WorkersFailed(
                f"the CPU phase's worker processes did not start within {limit:.0f} s"
            )
    result.get()


def why_workers_die(codes: list[int]) -> str:
    """What a worker's exit status says of why it died as it started: 1 is an uncaught
    exception (an import that failed: Python prints it on stderr), anything else an exit the
    worker's own code asked for (the decoder called ``sys.exit`` or ``os._exit``), a signal
    (negative) or the interpreter not starting."""
    if codes and all(c not in (1, 120) and c > 0 for c in codes):
        return (
            ": what each runs as it starts ended it with sys.exit or os._exit (the --loader"
            " function runs once there, on the first sample)"
        )
    return f": check that {sys.executable} can run and import ioprobe"


class _KilledProcess(mp_context.SpawnProcess):
    """A spawned worker that ``terminate()`` ends with SIGKILL: see the module's docstring."""

    def terminate(self) -> None:
        self.kill()


class _Pool(Pool):
    @staticmethod
    def Process(ctx: Any, *args: Any, **kwds: Any) -> Any:  # a SpawnProcess
        return _KilledProcess(*args, **kwds)

    @classmethod
    def _terminate_pool(
        cls,
        taskqueue: Any,
        inqueue: Any,
        outqueue: Any,
        pool: list[Any],
        change_notifier: Any,
        worker_handler: Any,
        *rest: Any,
    ) -> None:
        # A worker killed or stopped from outside while it wrote a result holds the result
        # queue's write lock, which nothing releases, and two sentinels go on that queue
        # under it as the pool ends: the pool's own, and the task handler's once the worker
        # handler exits. Either waited for ever. Where a worker was lost (``mark_lost``, one
        # stopped or dead and not yet replaced, or that lock held past TERMINATE_LOCK_S)
        # the workers are killed, the lock is released if one of them died holding it (any
        # process may release it, and no live one holds it), and only then may the worker
        # handler exit. Otherwise the pool ends as it always does: its idle workers take
        # their sentinels and exit
        wlock = outqueue._wlock
        held = not wlock.acquire(timeout=TERMINATE_LOCK_S)
        if not held:
            wlock.release()
        if held or getattr(outqueue, "ioprobe_lost", False) or lost_worker(pool) is not None:
            worker_handler._state = mp_pool.TERMINATE
            change_notifier.put(None)
            _kill_all(pool)
            wlock.acquire(timeout=TERMINATE_LOCK_S)  # ours, or a dead worker's past the wait
            wlock.release()
            if threading.current_thread() is not worker_handler:
                worker_handler.join()
            _kill_all(pool)  # any the handler started before it saw the end
        super()._terminate_pool(  # type: ignore[misc]
            taskqueue, inqueue, outqueue, pool, change_notifier, worker_handler, *rest
        )

    @staticmethod
    def _help_stuff_finish(inqueue: Any, task_handler: Any, size: int) -> None:
        # An idle worker waits for its next task holding the task queue's read lock, and one
        # killed from outside there (SIGKILL, the OOM killer) never releases it: terminate()
        # waited for it for ever. Past TERMINATE_LOCK_S it drains the queue without the lock:
        # every worker is about to be killed, and the others wait on that lock too
        inqueue._rlock.acquire(timeout=TERMINATE_LOCK_S)
        while task_handler.is_alive() and inqueue._reader.poll():
            inqueue._reader.recv()
            time.sleep(0)


TERMINATE_LOCK_S = 1.0
LOST_JOIN_S = 5.0  # a worker SIGKILL ends is reaped at once; a host under load may lag


def _kill_all(pool: list[Any]) -> None:
    """SIGKILL to each of a pool's workers still running (it ends a stopped one too), and
    each reaped."""
    for p in list(pool):
        if p.exitcode is None:
            p.kill()
    for p in list(pool):
        p.join(LOST_JOIN_S)


def mark_lost(pool: Pool) -> None:
    """Note that one of ``pool``'s workers was lost (killed or stopped from outside), so
    that its end kills the rest before it puts anything on a queue a lost one may lock."""
    outqueue = getattr(pool, "_outqueue", None)
    if outqueue is not None:
        outqueue.ioprobe_lost = True


def _unblock(mask: set[int | signal.Signals], pool: Pool | None, came: list[int]) -> None:
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C that came is raised here
        for signum in dict.fromkeys(came):  # and one another thread took, as it was noted
            signal.raise_signal(signum)
    except BaseException:
        if pool is not None:
            pool.terminate()  # nobody else holds it yet
        raise


def quiet_worker() -> None:
    """A pool worker's signals: SIGINT and SIGHUP ignored (a closed terminal reaches the whole
    group; the parent ends the pool), SIGTERM an exit through Python (a SIGTERM held since the
    pool's start is taken now), SIGPIPE at its default (a broken pipe ends it quietly)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # a write to a pipe whose reader is gone ends the worker as the parent-death signal
    # would: a parent killed outright closes its end of the result pipe before the kernel
    # sends that signal, and a worker that wrote in between printed BrokenPipeError
    # tracebacks (once in four fresh runs of the suite, the probe killed by SIGUSR1)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _die_with_parent()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """Where the parent dies without ending the pool (SIGKILL, or a signal ioprobe does not
    handle, whose default ends it), its workers end at once and quietly: the kernel sends
    them SIGKILL (Linux's parent-death signal). Orphaned, they printed tracebacks as their
    pipe to it broke, or as they started and found its files gone. A worker whose parent
    died before it asked exits now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)


class Terminated(SystemExit):
    """A pool worker's SIGTERM, raised where it runs: code that catches what a user's
    function raises lets this one through."""


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (the pool's terminate, or a service manager's stop reaching every process)
    # exits through Python, which releases the pool's queue locks: a worker that dies at once
    # while it holds one (an idle worker waits for a task holding it) hangs the parent's
    # terminate() for ever. A worker whose loop has ended holds none and is exiting already:
    # raising inside the interpreter's shutdown would print a traceback, so it ends at once.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once
    if not _in_pool_loop(frame):
        os._exit(128 + signum)
    raise Terminated(128 + signum)


def _in_pool_loop(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _POOL_LOOP:
            return True
        frame = frame.f_back
    return False


_POOL_LOOP = mp_pool.worker.__code__  # type: ignore[attr-defined]

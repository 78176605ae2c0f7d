"""Signals belong to the main thread: the threads ioprobe starts never take one.

The kernel hands a signal sent to the process to any of its threads that does not block it.
Python runs every handler in the main thread whichever thread took the signal, so a helper
thread gains nothing by taking one, and it costs the main thread its prompt wake-up: a
signal taken by another thread only marks the handler as due, and a main thread asleep in a
wait is not woken by it (the waits that matter are sliced, ``budget._join``, but a library's
are not). While a pool started (``collect/workers.py``) with SIGINT ignored process-wide, a
Ctrl-C handed to a helper thread (a listing under its deadline, fsspec's event loop) was
even discarded, and the probe ran on to exit 0 as if nobody had pressed it.

Every thread ioprobe starts therefore starts with ``HELD`` blocked (``start_quiet``), and so
does every thread started from one (a thread inherits the mask of the thread that starts it:
fsspec's event loop, a library's executor). A signal then goes to the main thread.
"""

from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def held() -> Iterator[None]:
    """``HELD`` blocked in the calling thread for the block's length: a thread started inside
    it keeps them blocked for life. A signal that comes meanwhile is taken as it ends."""
    was = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, was)


def start_quiet(thread: threading.Thread) -> threading.Thread:
    """Start ``thread`` with ``HELD`` blocked in it; returns it. A thread the host will not
    start (its limit on threads or on the address space, ``ulimit -u`` or ``-v``, reached) is
    an OSError with EAGAIN, as a process it will not start is: the host's limit, not a bug."""
    with held():
        try:
            thread.start()
        except RuntimeError as exc:
            if "can't start new thread" not in str(exc):
                raise
            raise OSError(errno.EAGAIN, "the host would not start another thread") from None
    return thread


def quiet_fsspec_loop() -> None:
    """Start fsspec's event-loop thread, if it has not started, with ``HELD`` blocked: it is
    started by whichever thread first needs it, and a remote target's first call may come
    from the main thread."""
    from fsspec import asyn

    with held():
        asyn.get_loop()

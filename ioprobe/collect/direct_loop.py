"""The device-limit pass's reads kept in flight by C (``csrc/uring_reads.c``), where built.

``device_limit`` keeps ``depth`` direct reads in flight on an io_uring. Its Python loop costs
the thread a few microseconds a read, which at 4 KiB and 64 in flight is a third of its
time: the depth dips while it works and the pass read 0.91 of fio's figure. The C loop does
the same thing for a few stores a read. It runs in a thread of its own, so the main thread
stays free to take Ctrl-C: it then sets the loop's stop flag and waits for its reads in
flight (at most the loop's 2 s drain) before the interrupt goes on.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

from ioprobe.collect import native
from ioprobe.collect.quiet import start_quiet

LATENCIES = 1 << 20  # read times kept per point at most (the first ones)
JOIN_POLL_S = 0.05  # how often the waiting main thread can take a signal

_I64P = ctypes.POINTER(ctypes.c_int64)


@dataclass(frozen=True)
class Targets:
    """The (descriptor, offset) pairs a block size's reads cycle through, as C arrays."""

    fds: ctypes.Array[ctypes.c_int32]
    offsets: ctypes.Array[ctypes.c_int64]

    @classmethod
    def of(cls, pairs: list[tuple[int, int]]) -> Targets:
        n = len(pairs)
        return cls((ctypes.c_int32 * n)(*(fd for fd, _ in pairs)),
                   (ctypes.c_int64 * n)(*(off for _, off in pairs)))  # fmt: skip


@dataclass(frozen=True)
class Loop:
    """What one point's loop did."""

    reads: int
    bytes: int
    seconds: float  # first submission to last completion
    latencies_ns: list[int]  # each read's, submission to the reap that saw it
    failed: int  # the first failed read's errno; 0: none
    in_flight: int  # reads not back when it returned: their buffers must stay mapped


@functools.cache
def _library() -> ctypes.CDLL | None:
    path = native.built("_uring_reads")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path))
        fn = lib.ioprobe_uring_reads
    except (OSError, AttributeError):  # built for another system, or an older build
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.POINTER(ctypes.c_int32), _I64P, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
        ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), _I64P, ctypes.c_int64,
        _I64P,
    ]  # fmt: skip
    return lib


def _wait(t: threading.Thread) -> None:
    """Wait for a stopped loop: it ends within its drain (2 s). A second Ctrl-C meanwhile
    is let go, since the arrays it writes into must outlive it."""
    while t.is_alive():
        try:
            t.join(JOIN_POLL_S)
        except KeyboardInterrupt:
            continue


def available() -> bool:
    """Whether the install built the C loop and it loads here."""
    return _library() is not None


def reads(targets: Targets, block: int, depth: int, seconds: float, buffers: int) -> Loop | int:
    """``depth`` direct reads of ``block`` bytes kept in flight for ``seconds`` into the
    ``depth`` blocks at address ``buffers``; or, where no ring could be set up, its errno
    (the caller uses its own loop)."""
    lib = _library()
    assert lib is not None
    stop = ctypes.c_int32(0)
    lat = (ctypes.c_int64 * LATENCIES)()
    out = (ctypes.c_int64 * 6)()
    rc = [0]

    def run() -> None:
        rc[0] = lib.ioprobe_uring_reads(
            targets.fds, targets.offsets, len(targets.fds), block, depth, int(seconds * 1e9),
            buffers, ctypes.byref(stop), lat, LATENCIES, out,
        )  # fmt: skip

    t = threading.Thread(target=run, name="ioprobe-direct-reads", daemon=True)
    start_quiet(t)
    try:
        while t.is_alive():
            t.join(JOIN_POLL_S)
    except BaseException:
        stop.value = 1  # the loop stops submitting and drains what is in flight
        _wait(t)
        raise
    if rc[0] < 0:
        return -rc[0]
    kept = out[5]
    return Loop(
        reads=out[0],
        bytes=out[1],
        seconds=out[2] / 1e9,
        latencies_ns=lat[:kept],
        failed=out[3],
        in_flight=out[4],
    )

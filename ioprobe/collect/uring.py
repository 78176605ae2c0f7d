"""A minimal io_uring for reads, through the kernel's two system calls and three shared rings.

Python has no io_uring binding; the device-limit pass (``collect/device_limit.py``) needs
reads kept in flight at a chosen queue depth from one thread, as ``fio --ioengine=io_uring``
keeps them, so this module sets up a ring with ``io_uring_setup`` (425), maps its submission
and completion rings and its submission entries, and drives it with ``io_uring_enter`` (426).
The two numbers are the same on every architecture: they were added after the system call
tables were unified. Only ``IORING_OP_READ`` into caller-owned buffers is used.

Ordering: the kernel publishes a completion before it returns from ``io_uring_enter`` with
``IORING_ENTER_GETEVENTS``, and reads a submission's tail after it is entered; every ring
read and write here sits on one side of such a call, so the system call is the barrier.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from typing import Literal

_Format = Literal["B", "I", "Q", "i"]

SYS_IO_URING_SETUP = 425
SYS_IO_URING_ENTER = 426
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_ENTER_GETEVENTS = 1
IORING_FEAT_SINGLE_MMAP = 1
IORING_OP_READ = 22
# one thread submits and reaps (6.0), and completions are handled when it waits for them,
# not by interrupting it as each lands (6.1): 5-15% more 4 KiB reads at depth 64 here
IORING_SETUP_SINGLE_ISSUER = 1 << 12
IORING_SETUP_DEFER_TASKRUN = 1 << 13
ONE_THREAD = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
SQE_SIZE = 64
CQE_SIZE = 16


_U32 = ctypes.c_uint32


class _SqOffsets(ctypes.Structure):
    _fields_ = [
        ("head", _U32),
        ("tail", _U32),
        ("ring_mask", _U32),
        ("ring_entries", _U32),
        ("flags", _U32),
        ("dropped", _U32),
        ("array", _U32),
        ("resv1", _U32),
        ("user_addr", ctypes.c_uint64),
    ]


class _CqOffsets(ctypes.Structure):
    _fields_ = [
        ("head", _U32),
        ("tail", _U32),
        ("ring_mask", _U32),
        ("ring_entries", _U32),
        ("overflow", _U32),
        ("cqes", _U32),
        ("flags", _U32),
        ("resv1", _U32),
        ("user_addr", ctypes.c_uint64),
    ]


class _Params(ctypes.Structure):
    _fields_ = [
        ("sq_entries", _U32),
        ("cq_entries", _U32),
        ("flags", _U32),
        ("sq_thread_cpu", _U32),
        ("sq_thread_idle", _U32),
        ("features", _U32),
        ("wq_fd", _U32),
        ("resv", _U32 * 3),
        ("sq_off", _SqOffsets),
        ("cq_off", _CqOffsets),
    ]


class _Sqe(ctypes.Structure):
    _fields_ = [
        ("opcode", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("ioprio", ctypes.c_uint16),
        ("fd", ctypes.c_int32),
        ("off", ctypes.c_uint64),
        ("addr", ctypes.c_uint64),
        ("len", ctypes.c_uint32),
        ("rw_flags", ctypes.c_uint32),
        ("user_data", ctypes.c_uint64),
        ("pad", ctypes.c_uint64 * 3),
    ]


class _Cqe(ctypes.Structure):
    _fields_ = [("user_data", ctypes.c_uint64), ("res", ctypes.c_int32), ("flags", ctypes.c_uint32)]


assert ctypes.sizeof(_Sqe) == SQE_SIZE and ctypes.sizeof(_Cqe) == CQE_SIZE

_libc = ctypes.CDLL(None, use_errno=True)  # CDLL releases the GIL for each call
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class UringUnavailable(OSError):
    """io_uring cannot be set up here (an old kernel, a seccomp filter, a sysctl)."""


class Ring:
    """One io_uring of ``entries`` slots, each slot with its own submission entry.
    ``prepare(slot, address, length, user_data)`` fixes a slot's buffer, ``submit(slot, fd,
    offset)`` queues its read, ``enter(wait)`` submits what is queued and waits for at least
    ``wait`` completions, ``completions()`` returns ``(user_data, result)`` of the completions
    published so far and consumes them. Close it (or use ``with``).

    The per-read work is a few stores into the shared maps through typed memoryviews: a
    slot's entry keeps its opcode, buffer and length, so a read changes only the descriptor
    and the offset."""

    def __init__(self, entries: int, flags: int = ONE_THREAD) -> None:
        params = _Params(flags=flags)
        fd = _syscall(SYS_IO_URING_SETUP, ctypes.c_uint32(entries), ctypes.byref(params))
        if fd < 0 and flags and ctypes.get_errno() == errno.EINVAL:
            params = _Params()  # a kernel before 6.1 knows neither flag
            fd = _syscall(SYS_IO_URING_SETUP, ctypes.c_uint32(entries), ctypes.byref(params))
        if fd < 0:
            err = ctypes.get_errno()
            raise UringUnavailable(err, f"io_uring_setup: {os.strerror(err)}")
        self.fd = fd
        self._maps: list[mmap.mmap] = []
        self._views: list[memoryview] = []
        try:
            self._map(params)
        except BaseException:
            self.close()
            raise

    def _view(self, m: mmap.mmap, start: int, size: int, fmt: _Format) -> memoryview[int]:
        v = memoryview(m)[start : start + size].cast(fmt)
        self._views.append(v)
        return v

    def _map(self, p: _Params) -> None:
        sq_size = p.sq_off.array + p.sq_entries * 4
        cq_size = p.cq_off.cqes + p.cq_entries * CQE_SIZE
        if p.features & IORING_FEAT_SINGLE_MMAP:
            sq_size = cq_size = max(sq_size, cq_size)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        sq = mmap.mmap(self.fd, sq_size, flags, prot, offset=IORING_OFF_SQ_RING)
        self._maps.append(sq)
        if p.features & IORING_FEAT_SINGLE_MMAP:
            cq = sq
        else:
            cq = mmap.mmap(self.fd, cq_size, flags, prot, offset=IORING_OFF_CQ_RING)
            self._maps.append(cq)
        sqes = mmap.mmap(self.fd, p.sq_entries * SQE_SIZE, flags, prot, offset=IORING_OFF_SQES)
        self._maps.append(sqes)
        self.entries = n = p.sq_entries
        self._sq_tail = self._view(sq, p.sq_off.tail, 4, "I")
        self._sq_mask = self._view(sq, p.sq_off.ring_mask, 4, "I")[0]
        self._sq_array = self._view(sq, p.sq_off.array, 4 * n, "I")
        self._cq_head = self._view(cq, p.cq_off.head, 4, "I")
        self._cq_tail = self._view(cq, p.cq_off.tail, 4, "I")
        self._cq_mask = self._view(cq, p.cq_off.ring_mask, 4, "I")[0]
        cq_bytes = p.cq_entries * CQE_SIZE
        self._cqe_u64 = self._view(cq, p.cq_off.cqes, cq_bytes, "Q")  # user_data at 2k
        self._cqe_i32 = self._view(cq, p.cq_off.cqes, cq_bytes, "i")  # res at 4k + 2
        self._sqe_raw = self._view(sqes, 0, n * SQE_SIZE, "B")
        self._sqe_i32 = self._view(sqes, 0, n * SQE_SIZE, "i")  # fd at 16k + 1
        self._sqe_u64 = self._view(sqes, 0, n * SQE_SIZE, "Q")  # off at 8k + 1
        self._queued = 0
        self._tail = self._sq_tail[0]

    def prepare(self, slot: int, address: int, length: int, user_data: int) -> None:
        """Fix slot ``slot``'s entry: a read of ``length`` bytes into ``address``."""
        sqe = _Sqe(opcode=IORING_OP_READ, addr=address, len=length, user_data=user_data)
        self._sqe_raw[slot * SQE_SIZE : (slot + 1) * SQE_SIZE] = bytes(sqe)

    def submit(self, slot: int, fd: int, offset: int) -> None:
        self._sqe_i32[slot * 16 + 1] = fd
        self._sqe_u64[slot * 8 + 1] = offset
        tail = self._tail
        self._sq_array[tail & self._sq_mask] = slot
        self._tail = (tail + 1) & 0xFFFFFFFF
        self._queued += 1

    def enter(self, wait: int) -> None:
        """Submit the queued reads and wait for ``wait`` completions (0: none)."""
        self._sq_tail[0] = self._tail
        flags = IORING_ENTER_GETEVENTS if wait else 0
        while True:  # once, or again where a submission was cut short
            rc = _syscall(
                SYS_IO_URING_ENTER,
                ctypes.c_int(self.fd),
                ctypes.c_uint(self._queued),
                ctypes.c_uint(wait),
                ctypes.c_uint(flags),
                None,
                ctypes.c_size_t(0),
            )
            if rc >= 0:
                self._queued -= rc
                return
            err = ctypes.get_errno()
            if err == errno.EINTR:
                return  # a signal: back to Python, whose handler runs (its exception, if any)
            raise OSError(err, f"io_uring_enter: {os.strerror(err)}")

    def completions(self) -> list[tuple[int, int]]:
        head, tail = self._cq_head[0], self._cq_tail[0]
        mask, u64, i32 = self._cq_mask, self._cqe_u64, self._cqe_i32
        out = []
        while head != tail:
            k = head & mask
            out.append((u64[2 * k], i32[4 * k + 2]))
            head = (head + 1) & 0xFFFFFFFF
        self._cq_head[0] = head
        return out

    def close(self) -> None:
        for v in self._views:  # the views pin the maps: released before the maps close
            v.release()
        self._views.clear()
        for m in reversed(self._maps):
            m.close()
        self._maps.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

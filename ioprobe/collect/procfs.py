"""The few /proc files the collectors read: a process's I/O counters, a thread's run-queue
wait. Parsing lives here once; each caller decides how to read (a kept-open descriptor in a
DataLoader worker's hot path, a plain open per epoch elsewhere)."""

from __future__ import annotations

IO = "/proc/self/io"


def parse_io(data: bytes) -> tuple[int, int]:
    """``rchar`` (bytes passed to read() and pread()) and ``read_bytes`` (bytes fetched from
    storage) from the text of /proc/<pid>/io; zeros for what is missing."""
    rchar = rbytes = 0
    for line in data.splitlines():
        if line.startswith(b"rchar:"):
            rchar = int(line.split()[1])
        elif line.startswith(b"read_bytes:"):
            rbytes = int(line.split()[1])
    return rchar, rbytes


def read_io() -> tuple[int, int]:
    """This process's ``rchar`` and ``read_bytes`` now (zeros where /proc is unavailable)."""
    try:
        with open(IO, "rb") as f:
            return parse_io(f.read())
    except OSError:
        return 0, 0


def parse_runqueue_ns(data: bytes) -> int:
    """Run-queue wait from the text of /proc/thread-self/schedstat (run time, wait, slices)."""
    parts = data.split()
    return int(parts[1]) if len(parts) > 1 else 0


__all__ = ["IO", "parse_io", "parse_runqueue_ns", "read_io"]

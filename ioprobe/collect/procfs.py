"""The few /proc files the collectors read: a process's I/O counters, a thread's run-queue
wait, this process's age, a process's private memory. Parsing lives here once; each caller decides how to read (a
kept-open descriptor in a DataLoader worker's hot path, a plain open per epoch elsewhere)."""

from __future__ import annotations

import os

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


def parse_age_s(stat: str, uptime: str, ticks_per_s: int) -> float:
    """Seconds since a process started, from its /proc/<pid>/stat (the start time, field 22,
    in clock ticks since boot) and /proc/uptime (seconds since boot)."""
    # the command name (field 2) may hold spaces and parentheses: count from its closing one
    fields = stat.rsplit(")", 1)[1].split()
    return max(float(uptime.split()[0]) - int(fields[19]) / ticks_per_s, 0.0)


def process_age_s() -> float:
    """How long this process has run (10 ms resolution): the interpreter's start and the
    imports before any of ioprobe's code ran. 0.0 where /proc cannot say."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = f.read()
        return parse_age_s(stat, uptime, os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


__all__ = ["IO", "parse_age_s", "parse_io", "parse_runqueue_ns", "process_age_s", "read_io"]


def parse_private_bytes(data: bytes) -> int | None:
    """A process's private memory (``Private_Clean`` + ``Private_Dirty``) from the text of
    /proc/<pid>/smaps_rollup: what one more such process adds to the host's use (pages
    shared with its parent after fork are counted there once). None where neither line is
    there."""
    total = None
    for line in data.splitlines():
        if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
            total = (total or 0) + int(line.split()[1]) * 1024
    return total


def private_bytes(pid: int) -> int | None:
    """Process ``pid``'s private memory now; None where it is gone or /proc can't say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            return parse_private_bytes(f.read())
    except OSError:
        return None


def parse_host_busy(stat: bytes, ticks_per_s: int) -> float | None:
    """Seconds the host's CPUs were busy since boot (user, nice, system, irq, softirq and
    steal time, every CPU summed) from the text of /proc/stat; None where its first line is
    not the CPUs' total."""
    first = stat.split(b"\n", 1)[0].split()
    if len(first) < 8 or first[0] != b"cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks_per_s


def host_busy_seconds() -> float | None:
    """The host's busy CPU seconds since boot now; None where /proc/stat can't say."""
    try:
        with open("/proc/stat", "rb") as f:
            return parse_host_busy(f.read(4096), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None

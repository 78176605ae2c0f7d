"""The few /proc files the collectors read: a process's I/O counters, a thread's run-queue
wait, this process's age, a process's private memory. Parsing lives here once; each caller decides how to read (a
kept-open descriptor in a DataLoader worker's hot path, a plain open per epoch elsewhere)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ioprobe.collect import cgroup

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


def parse_state(stat: bytes) -> bytes | None:
    """A process's state letter (``R``, ``S``, ``T`` stopped, ``t`` traced, ``Z`` a zombie,
    ...) from the text of /proc/<pid>/stat; None where the text has none."""
    # the command name (field 2) may hold spaces and parentheses: count from its closing one
    fields = stat.rsplit(b")", 1)[-1].split()
    return fields[0] if fields else None


def process_state(pid: int) -> bytes | None:
    """Process ``pid``'s state letter now; None where it is gone or /proc can't say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_state(f.read())
    except OSError:
        return None


__all__ = [
    "IO",
    "GroupCpu",
    "apart_cpu",
    "core_share",
    "group_cpu",
    "parse_age_s",
    "parse_cpu_list",
    "parse_cpu_ticks",
    "parse_io",
    "parse_runqueue_ns",
    "parse_state",
    "process_age_s",
    "process_state",
    "read_io",
    "sched_group",
    "sibling_cpus",
]


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


KTHREAD = 0x00200000  # PF_KTHREAD in /proc/<pid>/stat's flags: a kernel thread


def parse_cpu_ticks(stat: bytes) -> tuple[int, int] | None:
    """A process's start time and CPU time (user and system), in clock ticks, from the text
    of /proc/<pid>/stat; None for a kernel thread (its time is the host's own work)."""
    # the command name (field 2) may hold spaces and parentheses: count from its closing one
    fields = stat.rsplit(b")", 1)[1].split()
    if int(fields[6]) & KTHREAD:
        return None
    return int(fields[19]), int(fields[11]) + int(fields[12])


Group = tuple[str, ...]  # a scheduling group's path from the root task group down


def sched_group(autogroup: bytes, cpu_path: str, sessions: bool) -> Group:
    """What the scheduler shares the cores between before it shares them between threads,
    as a path from the root group down: the process's cpu cgroup (``cgroup.cpu_group``)
    and, where the kernel groups sessions (``sessions``) and the process is in the root cpu
    cgroup, its session's autogroup (a child of the root group; none for the first session,
    whose processes are the root group's own). The kernel puts a task in its session's
    autogroup only there: inside any other cgroup (a container's, a service's, a batch
    job's) sessions share its cores thread by thread."""
    path = tuple(p for p in cpu_path.split("/") if p)
    name = autogroup.split()[0].decode(errors="replace") if autogroup.strip() else ""
    # NUL in no cgroup's name: an autogroup is never taken for a cgroup of the same name
    return ("\0" + name,) if not path and sessions and name else path


def apart(own: Group, other: Group) -> bool:
    """Whether a process in group ``other`` keeps its share of the cores however many
    threads this job (in ``own``) runs: groups side by side share the cores group by group.
    A group below this job's own (a session's autogroup where this job is the root group's,
    a child cgroup of its cgroup) is one entity among this job's threads: it shares thread
    by thread, as one more thread. Own tasks in cgroup X, a busy loop in X's child, 3 ms of
    CPU per sample on the 2-core VM: 4 workers gave 405 samples/s against 309 with 2."""
    return other[: len(own)] != own


@dataclass(frozen=True)
class GroupCpu:
    """Every user process's CPU ticks at one moment, with its scheduling group: what
    ``apart_cpu`` takes the difference of."""

    own: Group  # this process's group
    ticks: dict[int, tuple[int, int, Group]]  # pid: (start, CPU ticks, group)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4096)


def group_cpu() -> GroupCpu | None:
    """The CPU ticks of every process on the host now, with its scheduling group; None where
    /proc cannot say (another system, a restricted one). Where /proc hides other users'
    processes (``hidepid``) their load is not seen here, and is then taken as the rest of
    the host's busy time: shared thread by thread."""
    try:
        enabled = _read("/proc/sys/kernel/sched_autogroup_enabled").strip() == b"1"
    except OSError:
        enabled = False
    # inside a container's namespace "/" is the container's cgroup, never the root one
    sessions = enabled and cgroup.host_namespace()
    me = str(os.getpid())
    own: Group | None = None
    ticks: dict[int, tuple[int, int, Group]] = {}
    paths: dict[bytes, str] = {}  # a few cgroups hold every process: read each one's once
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            got = parse_cpu_ticks(_read(f"/proc/{name}/stat"))
            if got is None:
                continue
            text = _read(f"/proc/{name}/cgroup")
            if text not in paths:
                paths[text] = cgroup.cpu_group(text.decode(errors="replace"))
            root = sessions and paths[text] == "/"
            auto = _read(f"/proc/{name}/autogroup") if root else b""
            group = sched_group(auto, paths[text], sessions)
        except (OSError, ValueError, IndexError):  # gone, or not ours to read
            continue
        ticks[int(name)] = (*got, group)
        if name == me:
            own = group
    return GroupCpu(own, ticks) if own is not None else None


def apart_cpu(before: GroupCpu, after: GroupCpu) -> tuple[float, int]:
    """The CPU seconds between two snapshots of processes in scheduling groups ``apart``
    from this one's, and how many such groups were busy: work the scheduler gives its own
    share of the cores, however many threads this job runs. A process that began between
    them counts whole; one that ended is missed."""
    spent = 0
    groups: set[Group] = set()
    for pid, (start, cpu, group) in after.ticks.items():
        if not apart(after.own, group):
            continue
        was = before.ticks.get(pid)
        used = cpu - was[1] if was is not None and was[0] == start else cpu
        if used > 0:
            spent += used
            groups.add(group)
    return spent / os.sysconf("SC_CLK_TCK"), len(groups)


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a list as the kernel writes it (``Cpus_allowed_list``: ``0-3,8,10-11``)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _allowed(pid: int | str) -> frozenset[int] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


def sibling_cpus() -> tuple[frozenset[int], list[frozenset[int]]] | None:
    """This process's CPUs and those of its siblings that run the same program: the ranks a
    launcher (torchrun's agent, srun's step) started beside it on this host. None where
    /proc cannot say."""
    own, parent = _allowed("self"), os.getppid()
    try:
        exe = os.readlink("/proc/self/exe")
        tasks = os.listdir(f"/proc/{parent}/task")
    except OSError:
        return None
    if own is None:
        return None
    pids: set[int] = set()
    for task in tasks:
        try:
            with open(f"/proc/{parent}/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    siblings: list[frozenset[int]] = []
    for pid in sorted(pids - {os.getpid()}):
        try:
            same = os.readlink(f"/proc/{pid}/exe") == exe
        except OSError:
            continue
        cpus = _allowed(pid) if same else None
        if cpus is not None:
            siblings.append(cpus)
    return own, siblings


def core_share(own: frozenset[int], others: list[frozenset[int]]) -> float:
    """This process's share of the cores it may run on, among ``others`` that may run on
    some of them: each of its cores divided by how many of all of them may use it. Ranks left
    on every core (torchrun) share them all evenly; ranks pinned to cores of their own
    (``srun --cpu-bind=cores``) each have their own whole."""
    return sum(1.0 / (1 + sum(1 for o in others if c in o)) for c in own)

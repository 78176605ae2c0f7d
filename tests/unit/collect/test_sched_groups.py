"""The host's processes by scheduling group, from /proc's text: which process's CPU is
another session's or cgroup's (work that keeps its share of the cores), counted between two
snapshots, and the scan of the real /proc against processes the test starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ioprobe.collect import cgroup
from ioprobe.collect.procfs import (
    GroupCpu,
    apart,
    apart_cpu,
    core_share,
    group_cpu,
    parse_cpu_list,
    parse_cpu_ticks,
    parse_state,
    process_state,
    sched_group,
)


def _stat(name: str, flags: int, utime: int, stime: int, start: int) -> bytes:
    # fields after the name: state (3), ppid ... flags (9), ... utime (14), stime (15), ...
    # starttime (22)
    after = ["S", "1", "1", "1", "0", "-1", str(flags)] + ["0"] * 4
    after += [str(utime), str(stime)] + ["0"] * 6 + [str(start), "0"]
    return f"42 ({name}) ".encode() + " ".join(after).encode()


def test_a_processs_ticks_are_its_user_and_system_time_and_kernel_threads_none() -> None:
    assert parse_cpu_ticks(_stat("python", 0x400000, 150, 50, 9000)) == (9000, 200)
    # a name with spaces and parentheses is counted from its last ')'
    assert parse_cpu_ticks(_stat("a) (b c", 0, 7, 3, 12)) == (12, 10)
    assert parse_cpu_ticks(_stat("kworker/0:1", 0x00200040, 5, 5, 1)) is None


def test_a_processs_state_is_read_past_its_name_and_a_stopped_child_reads_t() -> None:
    assert parse_state(_stat("a) T (b", 0, 1, 1, 1)) == b"S"  # not the name's "T"
    assert parse_state(b"") is None
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while process_state(child.pid) != b"T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(child.pid) == b"T"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None  # reaped: gone


def test_the_group_is_the_cpu_cgroup_and_the_sessions_autogroup_only_in_the_root_one() -> None:
    auto = b"/autogroup-3526 nice 0\n"
    assert sched_group(auto, "/", True) == ("\0/autogroup-3526",)
    assert sched_group(auto, "/", True) != sched_group(b"/autogroup-9 nice 0", "/", True)
    # the first session's processes are the root group's own: /proc names no autogroup
    assert sched_group(b"", "/", True) == ()
    # inside any other cpu cgroup the kernel leaves autogroups out: sessions share its cores
    assert sched_group(auto, "/slurm/job_7", True) == ("slurm", "job_7")
    assert sched_group(auto, "/job", True) == sched_group(b"/autogroup-9 nice 0", "/job", True)
    # autogroups off (or a container's namespace): sessions share the cores thread by thread
    assert sched_group(auto, "/", False) == ()
    # a cgroup named as an autogroup is not one
    assert sched_group(b"", "/\0/autogroup-9", True) != sched_group(auto, "/", True)


def test_only_a_group_beside_this_ones_keeps_its_share_not_one_below_it() -> None:
    root, session, other = (), ("\0/autogroup-1",), ("\0/autogroup-2",)
    job, child = ("slurm", "job_7"), ("slurm", "job_7", "step_0")
    # two sessions' autogroups, two cgroups side by side: each keeps its share
    assert apart(session, other) and apart(job, ("slurm", "job_8")) and apart(session, job)
    # this job in the root group (the first session): another session's autogroup is one
    # entity among its threads, and so is a cgroup below its own
    assert not apart(root, other) and not apart(job, child)
    # this job below another's group: that group's own threads keep a share beside it
    assert apart(session, root) and apart(child, job)
    assert not apart(job, job)


def test_the_cpu_cgroup_is_v1s_cpu_path_or_v2s_cut_back_to_where_the_controller_reaches(
    tmp_path: Path,
) -> None:
    v1 = "9:name=systemd:/user.slice\n4:memory:/job7\n2:cpu,cpuacct:/slurm/job_7\n"
    assert cgroup.cpu_group(v1, tmp_path) == "/slurm/job_7"
    # no cpu controller named at all: every process is in the root group
    assert cgroup.cpu_group("9:name=systemd:/user.slice\n", tmp_path) == "/"
    # v2: the root hands cpu to system.slice, which does not hand it on to its services
    (tmp_path / "system.slice" / "job.scope").mkdir(parents=True)
    (tmp_path / "user.slice").mkdir()
    (tmp_path / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "system.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroup.cpu_group("0::/system.slice/job.scope\n", tmp_path) == "/system.slice"
    assert cgroup.cpu_group("0::/user.slice\n", tmp_path) == "/user.slice"
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroup.cpu_group("0::/system.slice/job.scope\n", tmp_path) == "/"
    # a path not under the mount (another namespace's) is taken whole
    assert cgroup.cpu_group("0::/elsewhere/pod\n", tmp_path) == "/elsewhere/pod"


def test_apart_cpu_counts_other_groups_between_snapshots_a_new_process_whole() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    ours, theirs, third = ("\0/autogroup-1",), ("\0/autogroup-2",), ("job",)
    before = GroupCpu(ours, {1: (10, 500, ours), 2: (10, 100, theirs), 3: (20, 40, third)})
    after = GroupCpu(
        ours,
        {
            1: (10, 900, ours),  # this job's own: never counted
            2: (10, 100 + ticks, theirs),  # a second of another session's
            3: (99, ticks // 2, third),  # pid reused by a process that began between: whole
            4: (50, ticks // 2, theirs),  # a new process of that session: whole
        },
    )
    spent, groups = apart_cpu(before, after)
    assert abs(spent - 2.0) < 2 / ticks and groups == 2


def _busy(seconds: float, new_session: bool) -> subprocess.Popen[bytes]:
    code = f"import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass\n"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=new_session)


def test_the_real_scan_tells_another_sessions_busy_process_from_this_ones() -> None:
    before = group_cpu()
    assert before is not None and before.ticks
    other, same = _busy(1.5, True), _busy(1.5, False)
    time.sleep(1.0)  # both still running at the second snapshot
    after = group_cpu()
    other.wait()
    same.wait()
    assert after is not None
    assert after.ticks[same.pid][2] == after.own
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            enabled = f.read().strip() == "1"
    except OSError:
        enabled = False
    with open("/proc/self/cgroup") as f:
        in_root = cgroup.host_namespace() and cgroup.cpu_group(f.read()) == "/"
    with open("/proc/self/autogroup", "rb") as f:
        own_autogroup = bool(f.read().strip())
    # a new session is a group beside this one only where the kernel groups sessions and
    # this process is in the root cpu cgroup (inside any other, sessions share its cores)
    # in a session's autogroup: in the first session the new one's group is below its own
    sessions_apart = enabled and in_root and own_autogroup
    assert apart(after.own, after.ticks[other.pid][2]) is sessions_apart
    spent, groups = apart_cpu(before, after)
    if sessions_apart:  # the other session's process ran about a second, on its own
        assert spent >= 0.6 and groups >= 1


def test_a_cpu_list_and_a_ranks_share_of_the_cores_by_the_ranks_affinity_sets() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    every = frozenset(range(8))
    # torchrun leaves 4 ranks on all 8 cores: 2 each; srun pins each to 2 of its own: 2
    assert core_share(every, [every] * 3) == 2.0
    assert core_share(frozenset({0, 1}), [frozenset({2, 3}), frozenset({4, 5})]) == 2.0
    # two ranks pinned to the same core share it
    assert core_share(frozenset({0}), [frozenset({0})]) == 0.5


_RANK = """
import os, sys, time
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
time.sleep(1.0)  # both ranks alive while each reads the other's set
from ioprobe.collect.procfs import core_share, sibling_cpus
own, others = sibling_cpus()
print(len(others), core_share(own, others), flush=True)
time.sleep(1.0)  # alive while the other rank reads, however late it started
"""


_LAUNCHER = """
import subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1], c], stdout=subprocess.PIPE,
         text=True) for c in sys.argv[2:]]
print("|".join(p.communicate(timeout=30)[0].strip() for p in procs))
"""


def _ranks(*cpus: str) -> list[tuple[int, float]]:
    """Ranks started side by side by a launcher of their own (as torchrun's agent starts
    them: its children are the ranks alone), each pinned to ``cpus``: each one's count of
    siblings and its share of the cores."""
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, _RANK, *cpus],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return [(int(n), float(share)) for n, share in (r.split() for r in out.strip().split("|"))]


def test_ranks_pinned_to_a_core_each_have_it_whole_and_two_on_one_core_share_it() -> None:
    assert _ranks("0", "1") == [(1, 1.0), (1, 1.0)]
    assert _ranks("0", "0") == [(1, 0.5), (1, 0.5)]

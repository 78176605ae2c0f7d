"""A container's limits read from cgroup trees laid out as the kernel writes them (v2, v1
with joined controllers, a container's own mount): the CPU quota in cores and the memory
limit with its working set, the tightest along the path, and the host facts narrowed to
them."""

from __future__ import annotations

from pathlib import Path

from ioprobe.collect import cgroup
from ioprobe.collect.hostinfo import _cgroup_limits
from ioprobe.record import HostInfo
from ioprobe.render.host import host_facts

GIB = 1 << 30
MIB = 1 << 20


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_v2_inside_a_container_reads_its_own_root(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "fs",
        {
            "cpu.max": "250000 100000\n",
            "memory.max": f"{GIB}\n",
            "memory.current": f"{600 * MIB}\n",
            "memory.stat": f"anon 1\nfile 5\ninactive_file {200 * MIB}\nactive_file 3\n",
        },
    )
    me = _tree(tmp_path, {"self": "0::/\n"}) / "self"
    assert cgroup.cpu_quota(root, me) == 2.5
    # the page cache it can drop is not held: the working set is what counts
    assert cgroup.memory_limit(root, me) == (GIB, 400 * MIB)


def test_v2_nested_takes_the_tightest_limit_along_the_path(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "fs",
        {
            "kubepods/pod1/cpu.max": "400000 100000\n",
            "kubepods/pod1/memory.max": f"{2 * GIB}\n",
            "kubepods/pod1/memory.current": f"{GIB}\n",
            "kubepods/pod1/ctr/cpu.max": "max 100000\n",
            "kubepods/pod1/ctr/memory.max": "max\n",
            "kubepods/pod1/ctr/memory.current": f"{GIB}\n",
            "kubepods/cpu.max": "max 100000\n",
        },
    )
    me = _tree(tmp_path, {"self": "0::/kubepods/pod1/ctr\n"}) / "self"
    assert cgroup.cpu_quota(root, me) == 4.0
    assert cgroup.memory_limit(root, me) == (2 * GIB, GIB)


def test_v1_joined_controllers_and_a_path_outside_the_mount(tmp_path: Path) -> None:
    # docker on v1 without a cgroup namespace: /proc/self/cgroup names /docker/<id>, the
    # mount inside the container is that cgroup itself
    root = _tree(
        tmp_path / "fs",
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
            "memory/memory.usage_in_bytes": f"{GIB}\n",
        },
    )
    me = _tree(tmp_path, {"self": "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n"})
    assert cgroup.cpu_quota(root, me / "self") == 2.0
    assert cgroup.memory_limit(root, me / "self") is None


def test_no_quota_no_limit_and_unreadable_trees_leave_the_host_as_it_is(tmp_path: Path) -> None:
    root = _tree(tmp_path / "fs", {"cpu.max": "max 100000\n", "memory.max": "max\n"})
    me = _tree(tmp_path, {"self": "0::/\n"}) / "self"
    assert cgroup.cpu_quota(root, me) is None and cgroup.memory_limit(root, me) is None
    assert cgroup.cpu_quota(tmp_path / "none", tmp_path / "none") is None
    host = HostInfo(usable_cores=64, memory_bytes=512 * GIB, memory_available_bytes=400 * GIB)
    _cgroup_limits(host, root, me)
    assert (host.usable_cores, host.memory_bytes, host.memory_available_bytes) == (
        64,
        512 * GIB,
        400 * GIB,
    )


def test_the_host_facts_are_narrowed_to_a_pods_limits_and_say_so(tmp_path: Path) -> None:
    # a pod of 2.5 CPUs and 8 GiB on a 64-core host of 512 GiB: 2 cores to keep busy, and
    # what is left of the 8 GiB, not of the host's 400 free
    root = _tree(
        tmp_path / "fs",
        {
            "cpu.max": "250000 100000\n",
            "memory.max": f"{8 * GIB}\n",
            "memory.current": f"{3 * GIB}\n",
        },
    )
    me = _tree(tmp_path, {"self": "0::/\n"}) / "self"
    host = HostInfo(usable_cores=64, memory_bytes=512 * GIB, memory_available_bytes=400 * GIB)
    _cgroup_limits(host, root, me)
    assert host.usable_cores == 2 and host.cpu_quota_cores == 2.5
    assert (host.memory_bytes, host.memory_available_bytes) == (8 * GIB, 5 * GIB)
    facts = dict(host_facts(host))
    assert "2 usable by this process (its cgroup's CPU quota: 2.5 cores)" in facts["cores"]
    assert facts["memory"] == "8 GiB total, 5 GiB available (its cgroup's limit: 8 GiB)"
    assert cgroup.usable_share(64, 0.5) == 1 and cgroup.usable_share(8, None) == 8

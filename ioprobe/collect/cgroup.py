"""The limits this process's cgroups put on it: a CPU quota (cores' worth of CPU time per
second) and a memory limit, cgroup v1 or v2, the tightest along the path from its cgroup up
to the hierarchy's root. A container's limits live here: Kubernetes' CPU limit is a quota,
not a CPU set, so the affinity says nothing of it, and a pod's memory limit is far below
what /proc/meminfo says the host has. A worker count or a queue past either is throttled
or killed, not faster.

Inside a container the hierarchy mounted at /sys/fs/cgroup is often the container's own
cgroup while /proc/self/cgroup names a path outside it: where the path is not found, the
mount's root stands for it."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
SELF = Path("/proc/self/cgroup")
# v1 writes "no limit" as the largest page-aligned 64-bit count: anything this large is none
UNLIMITED = 1 << 62
# the kernel's first cgroup namespace (PROC_CGROUP_INIT_INO): the host's own, whose "/" is
# the hierarchy's root; a container's namespace has "/" at some cgroup below it
HOST_NAMESPACE = "cgroup:[4026531835]"


def own_paths(text: str) -> dict[str, str]:
    """Each controller's cgroup path from the text of /proc/<pid>/cgroup; v2's one
    hierarchy under the key ``""``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _chain(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under ``mount`` and each above it up to ``mount``, the ones that
    exist; ``mount`` alone where the path is not there (a container's own mount)."""
    parts = [p for p in path.split("/") if p]
    if not mount.joinpath(*parts).is_dir():
        return [mount]
    return [mount.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        with open(path) as f:
            return f.read(4096)
    except OSError:
        return None


def host_namespace(link: str = "/proc/self/ns/cgroup") -> bool:
    """Whether this process sees the host's cgroup hierarchy from its root (the paths in
    /proc/<pid>/cgroup are then the kernel's own), not a container's namespace."""
    try:
        return os.readlink(link) == HOST_NAMESPACE
    except OSError:
        return False


def cpu_group(text: str, root: Path = ROOT) -> str:
    """The cgroup whose share of the cores a process's threads take theirs from, from the
    text of its /proc/<pid>/cgroup: v1's cpu controller's path; v2's path cut back to the
    deepest cgroup the cpu controller reaches (one whose parent does not hand the controller
    down shares its parent's share). "/" where no cpu controller is named; the path whole
    where its folders are not there to read (another namespace's)."""
    paths = own_paths(text)
    if "cpu" in paths or "" not in paths:
        return paths.get("cpu", "/")
    unified = _v2_mount(root)
    parts = [p for p in paths[""].split("/") if p]
    if not unified.joinpath(*parts).is_dir():
        return paths[""]
    kept = 0
    while kept < len(parts):
        handed = _read(unified.joinpath(*parts[:kept]) / "cgroup.subtree_control") or ""
        if "cpu" not in handed.split():
            break
        kept += 1
    return "/" + "/".join(parts[:kept])


def _v2_mount(root: Path) -> Path:
    """Where v2's one hierarchy is mounted: ``unified`` beside v1's (a hybrid host), else
    the root itself."""
    return root / "unified" if (root / "unified").is_dir() else root


def _v1_mount(root: Path, controller: str) -> Path | None:
    """Where v1 mounted ``controller``: its own folder or a joined one (``cpu,cpuacct``)."""
    for d in (root / controller, *sorted(root.glob(f"*{controller}*"))):
        if d.is_dir() and controller in d.name.split(","):
            return d
    return None


def _quota(text: str | None) -> float | None:
    """Cores' worth from v2's ``cpu.max`` (``quota period`` or ``max period``)."""
    if text is None:
        return None
    quota, _, period = text.strip().partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period) if int(period) > 0 and int(quota) > 0 else None


def cpu_quota(root: Path = ROOT, self_cgroup: Path = SELF) -> float | None:
    """The tightest CPU quota on this process, in cores (2.5: two and a half cores' CPU
    time per second); None where no cgroup sets one or none can be read."""
    paths = own_paths(_read(self_cgroup) or "")
    found: list[float] = []
    mount = _v1_mount(root, "cpu")
    if mount is not None and "cpu" in paths:
        for d in _chain(mount, paths["cpu"]):
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            if quota is not None and period is not None and int(quota) > 0 < int(period):
                found.append(int(quota) / int(period))
    elif "" in paths:
        for d in _chain(_v2_mount(root), paths[""]):
            got = _quota(_read(d / "cpu.max"))
            if got is not None:
                found.append(got)
    return min(found, default=None)


def _stat_value(text: str | None, key: str) -> int:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def memory_limit(root: Path = ROOT, self_cgroup: Path = SELF) -> tuple[int, int] | None:
    """The tightest memory limit on this process's cgroups and what that cgroup holds now
    less the page cache it can drop (its working set, as Kubernetes counts it): (limit,
    in use); None where no cgroup sets one or none can be read."""
    paths = own_paths(_read(self_cgroup) or "")
    best: tuple[int, int] | None = None
    mount = _v1_mount(root, "memory")
    if mount is not None and "memory" in paths:
        files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        dirs = _chain(mount, paths["memory"])
    elif "" in paths:
        files = ("memory.max", "memory.current", "inactive_file")
        dirs = _chain(_v2_mount(root), paths[""])
    else:
        return None
    for d in dirs:
        limit = _read(d / files[0])
        if limit is None or limit.strip() == "max" or int(limit) >= UNLIMITED:
            continue
        used = int(_read(d / files[1]) or 0) - _stat_value(_read(d / "memory.stat"), files[2])
        if best is None or int(limit) - used < best[0] - best[1]:
            best = (int(limit), max(used, 0))
    return best


def usable_share(affinity: int, quota: float | None) -> int:
    """Whole cores this process can keep busy: its affinity, or fewer where a quota allows
    less (at least one)."""
    if quota is None:
        return affinity
    return max(min(affinity, int(quota)), 1)


__all__ = [
    "HOST_NAMESPACE",
    "ROOT",
    "SELF",
    "cpu_group",
    "cpu_quota",
    "host_namespace",
    "memory_limit",
    "own_paths",
    "usable_share",
]

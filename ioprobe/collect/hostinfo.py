"""What this machine is: CPU, memory, the storage holding a path, and the GPUs.

Every probe report starts from these facts because they decide what a measured number means:
300 MB/s is excellent for a spinning disk and a fault on NVMe. Collection only reads files and
asks libraries; it never writes, never needs root and never fails because a piece of hardware is
absent or unusual. A fact that cannot be learnt is left as ``None`` or ``"unknown"``.

The storage class is learnt from Linux's own view: ``/proc/self/mountinfo`` names the mount and
its block device, and sysfs says whether that device rotates and what model it is. Partitions,
device-mapper (LVM, dm-crypt) and md RAID are followed down to the physical disk, because that
disk is what limits read bandwidth. GPUs come from NVML when nvidia-ml-py and a driver exist.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ioprobe.collect import cgroup
from ioprobe.errors import BadInputError
from ioprobe.record import FilesystemInfo, GpuInfo, HostInfo

# Filesystems whose reads cross a network: their speed is the link's and the server's, not a
# local disk's, so no block device is looked for.
NETWORK_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "ceph",
        "lustre",
        "gpfs",
        "beegfs",
        "glusterfs",
        "afs",
        "orangefs",
        "weka",
        "wekafs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.goofys",
        "fuse.juicefs",
        "fuse.ceph-fuse",
        "fuse.glusterfs",
        "fuse.mountpoint-s3",
        "fuse.blobfuse",
        "fuse.blobfuse2",
        "fuse.ossfs",
        "fuse.alluxio-fuse",
        "fuse.geesefs",
        "fuse.lizardfs",
        "fuse.moosefs",
        "fuse.mfs",
    }
)
MEMORY_FS_TYPES = frozenset({"tmpfs", "ramfs"})

# Block devices that are a hypervisor's or the kernel's construction rather than a disk.
_VIRTUAL_NAME = re.compile(r"^(vd[a-z]|xvd[a-z]|loop\d|zram\d)")
# Block devices whose reads go over the network (NBD, Ceph RBD).
_NETWORK_NAME = re.compile(r"^(nbd\d|rbd\d)")
# Vendor or model strings of emulated or cloud block storage; an NVMe name on a cloud VM
# (Amazon EBS, Google Persistent Disk) still reads at network-storage speed.
_VIRTUAL_MODEL_MARKERS = (
    "qemu",
    "vmware",
    "virtual",
    "vbox",
    "virtio",
    "xen",
    "elastic block store",
    "persistentdisk",
    "nvme_card-pd",
)
# How many overlay layers to follow before giving up; a cycle in a hand-edited mountinfo
# must not recurse forever.
_MAX_OVERLAY_DEPTH = 4


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo, with only the fields used here."""

    major: int
    minor: int
    mount_point: str
    fs_type: str
    source: str
    options: str  # per-superblock options, where overlay keeps upperdir=


def filesystem_info(
    path: str, *, sys_root: str = "/sys", mountinfo: str = "/proc/self/mountinfo"
) -> FilesystemInfo:
    """Describe the filesystem and storage device that hold ``path``.

    The mount is the longest mount point in ``mountinfo`` that contains the path and carries
    the path's device number; where no such mount exists (containers, btrfs subvolumes) the
    longest containing mount point is used. Network and memory filesystems are classed by their
    type alone. Block devices are resolved through ``{sys_root}/dev/block/MAJ:MIN`` from a
    partition to its disk, and from a device-mapper or md device to its first underlying disk,
    whose ``queue/rotational`` and ``device/model`` give the class. ``sys_root`` and
    ``mountinfo`` exist so tests can point at a fake tree.

    Raises ``BadInputError`` only when ``path`` does not exist; every other unknown is reported
    as ``None`` or ``"unknown"``.
    """
    try:
        st_dev: int | None = os.stat(path).st_dev
    except (FileNotFoundError, NotADirectoryError):
        raise BadInputError(f"{path}: no such file or directory") from None
    except OSError:
        # Exists but cannot be stat'ed (a permission on a parent); the mount is still found
        # by its path.
        st_dev = None
    absolute = os.path.abspath(path)
    info = FilesystemInfo(path=absolute)
    mounts = _read_mountinfo(mountinfo)
    dev = (os.major(st_dev), os.minor(st_dev)) if st_dev is not None else None
    mount = _find_mount(os.path.realpath(absolute), dev, mounts)
    if mount is None:
        return info
    info.mount_point = mount.mount_point
    info.fs_type = mount.fs_type
    _classify(info, mount, mounts, Path(sys_root), depth=0)
    return info


def _classify(
    info: FilesystemInfo, mount: Mount, mounts: list[Mount], sys_root: Path, depth: int
) -> None:
    """Fill device, rotational, model and class of ``info`` from the mount that holds it."""
    fs_type = mount.fs_type
    if fs_type in NETWORK_FS_TYPES:
        info.device_class = "network"
    elif fs_type in MEMORY_FS_TYPES:
        info.device_class = "tmpfs"
    elif fs_type == "overlay":
        _classify_overlay(info, mount, mounts, sys_root, depth)
    else:
        _classify_block(info, mount, sys_root)


def _classify_overlay(
    info: FilesystemInfo, mount: Mount, mounts: list[Mount], sys_root: Path, depth: int
) -> None:
    # Written and newly created files live in the upper layer; its filesystem is the best
    # single answer for where an overlay's data sits.
    upper = _option(mount.options, "upperdir")
    if upper is None or depth >= _MAX_OVERLAY_DEPTH:
        return
    below = _find_mount(upper, _device_number(upper), [m for m in mounts if m is not mount])
    if below is not None and below.fs_type != "overlay":
        _classify(info, below, mounts, sys_root, depth + 1)


def _device_number(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # another mount namespace's path, as inside a container
    return os.major(st.st_dev), os.minor(st.st_dev)


def _classify_block(info: FilesystemInfo, mount: Mount, sys_root: Path) -> None:
    disk = _block_device(mount, sys_root)
    if disk is None:
        return
    info.device = disk
    info.rotational = _read_rotational(sys_root, disk)
    info.model = _read_text(sys_root / "block" / disk / "device" / "model")
    vendor = _read_text(sys_root / "block" / disk / "device" / "vendor")
    info.device_class = device_class(disk, info.rotational, info.model, vendor)


def device_class(
    disk: str, rotational: bool | None, model: str | None = None, vendor: str | None = None
) -> str:
    """The class of a whole block device, from its kernel name, rotation flag and model.

    Virtual devices are recognised before anything else because a hypervisor's disk can claim
    to rotate, or be NVMe, while its speed is the host's or the network's.
    """
    if _is_virtual(disk, model, vendor):
        return "virtual"
    if _NETWORK_NAME.match(disk):
        return "network"
    if disk.startswith("nvme"):
        return "nvme"
    if rotational:
        return "hdd"
    if rotational is False and disk.startswith(("sd", "hd")):
        return "sata-ssd"
    return "unknown"


def _is_virtual(disk: str, model: str | None, vendor: str | None) -> bool:
    if _VIRTUAL_NAME.match(disk):
        return True
    label = f"{vendor or ''} {model or ''}".lower()
    return any(m in label for m in _VIRTUAL_MODEL_MARKERS)


def _block_device(mount: Mount, sys_root: Path) -> str | None:
    """The physical disk under a mount: partitions to their disk, dm/md to their first slave."""
    name: str | None = None
    if mount.major != 0:
        name = _disk_of(sys_root / "dev" / "block" / f"{mount.major}:{mount.minor}")
    if name is None and mount.source.startswith("/dev/"):
        # Major-0 filesystems (btrfs, fuseblk) still name their device as the mount source.
        name = _disk_by_name(os.path.basename(mount.source), sys_root)
    if name is None:
        return None
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        slaves_dir = sys_root / "block" / name / "slaves"
        try:
            slaves = sorted(slaves_dir.iterdir())
        except OSError:
            break
        if not slaves:
            break
        name = _disk_of(slaves[0]) or slaves[0].name
    return name


def _disk_of(link: Path) -> str | None:
    """Disk name for a sysfs device entry; a partition's directory sits inside its disk's."""
    try:
        target = Path(os.path.realpath(link))
    except OSError:
        return None
    if not target.exists():
        return None
    if (target / "partition").exists():
        return target.parent.name
    return target.name


def _disk_by_name(name: str, sys_root: Path) -> str | None:
    if (sys_root / "block" / name).exists():
        return name
    disk = _disk_of(sys_root / "class" / "block" / name)
    if disk is not None:
        return disk
    # Without a class/block entry, strip a partition suffix the way the kernel names them.
    match = re.match(r"^(nvme\d+n\d+|mmcblk\d+)p\d+$", name) or re.match(r"^([a-z]+)\d+$", name)
    if match and (sys_root / "block" / match.group(1)).exists():
        return match.group(1)
    return None


def _read_rotational(sys_root: Path, disk: str) -> bool | None:
    text = _read_text(sys_root / "block" / disk / "queue" / "rotational")
    if text == "1":
        return True
    if text == "0":
        return False
    return None


def _read_text(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def _read_mountinfo(path: str) -> list[Mount]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        mount = _parse_mountinfo_line(line)
        if mount is not None:
            mounts.append(mount)
    return mounts


def _parse_mountinfo_line(line: str) -> Mount | None:
    # Format (proc(5)): id parent major:minor root mount-point options [optional...] - fstype
    # source super-options. Optional fields vary in number, hence the split on the separator.
    left, sep, right = line.partition(" - ")
    if not sep:
        return None
    fields = left.split()
    tail = right.split()
    if len(fields) < 6 or not tail:
        return None
    major_s, _, minor_s = fields[2].partition(":")
    try:
        major, minor = int(major_s), int(minor_s)
    except ValueError:
        return None
    return Mount(
        major=major,
        minor=minor,
        mount_point=_unescape(fields[4]),
        fs_type=tail[0],
        source=_unescape(tail[1]) if len(tail) > 1 else "",
        options=tail[2] if len(tail) > 2 else "",
    )


def _unescape(text: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _option(options: str, key: str) -> str | None:
    prefix = f"{key}="
    for item in options.split(","):
        if item.startswith(prefix):
            return _unescape(item[len(prefix) :])
    return None


def _find_mount(path: str, dev: tuple[int, int] | None, mounts: list[Mount]) -> Mount | None:
    """The deepest mount containing ``path``, among those on device ``dev`` when any are."""
    containing = [m for m in mounts if _contains(m.mount_point, path)]
    if dev is not None:
        same_dev = [m for m in containing if (m.major, m.minor) == dev]
        if same_dev:
            containing = same_dev
    if not containing:
        return None
    # Later lines are mounted over earlier ones at the same point; max() keeps the first of
    # equals, so reverse to let the most recent mount win.
    return max(reversed(containing), key=lambda m: len(m.mount_point))


def _contains(mount_point: str, path: str) -> bool:
    if mount_point == "/":
        return path.startswith("/")
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def gpu_info(nvml: Any | None = None) -> tuple[list[GpuInfo], str]:
    """List the GPUs NVML sees, and say in a few words how the list was obtained.

    ``nvml`` is the ``pynvml`` module, imported here when not given; tests pass a stand-in with
    the same function names and an ``NVMLError`` class. A machine without GPUs, driver or
    nvidia-ml-py is normal, so each of those is a status string (``"none: ..."``), never an
    exception. A field one GPU cannot report (older drivers, MIG, virtual GPUs) is ``None``.
    """
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return [], "none: nvidia-ml-py not installed"
        nvml = pynvml
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # a missing library or driver surfaces as assorted errors
        return [], f"none: NVML not available ({_reason(exc)})"
    try:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml_error as exc:
            return [], f"none: NVML not available ({_reason(exc)})"
        gpus: list[GpuInfo] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml_error:
                continue  # a GPU this process may not open (permissions, fallen off the bus)
            gpus.append(_one_gpu(nvml, nvml_error, index, handle))
    finally:
        # Nothing useful can be done if shutting NVML down fails; the answer is already known.
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    if not gpus:
        return [], "none: no GPU"
    return gpus, f"nvml: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"


def _one_gpu(nvml: Any, nvml_error: type[BaseException], index: int, handle: Any) -> GpuInfo:
    # Older bindings lack some functions (AttributeError); any one field missing must not
    # cost the others.
    errors = (nvml_error, AttributeError)

    def field(getter: str) -> Any:
        try:
            return getattr(nvml, getter)(handle)
        except errors:
            return None

    name = field("nvmlDeviceGetName")
    if isinstance(name, bytes):
        name = name.decode("utf-8", errors="replace")
    memory = field("nvmlDeviceGetMemoryInfo")
    total = getattr(memory, "total", None)
    return GpuInfo(
        index=index,
        name=str(name) if name else "unknown",
        memory_bytes=int(total) if total is not None else None,
        pcie_gen_current=_int_or_none(field("nvmlDeviceGetCurrPcieLinkGeneration")),
        pcie_gen_max=_int_or_none(field("nvmlDeviceGetMaxPcieLinkGeneration")),
        pcie_width_current=_int_or_none(field("nvmlDeviceGetCurrPcieLinkWidth")),
        pcie_width_max=_int_or_none(field("nvmlDeviceGetMaxPcieLinkWidth")),
    )


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def host_info(path: str | None = None, *, nvml: Any | None = None) -> HostInfo:
    """Collect the host facts a report needs: CPU, cores, memory, storage of ``path``, GPUs.

    ``usable_cores`` is this process's CPU affinity, which a container or ``taskset`` may set
    below the machine's core count; it, not ``logical_cores``, bounds how many decode workers
    can run at once. The storage is described only when ``path`` is a local path (a URL such
    as ``s3://bucket/x`` has no local device); a local path that does not exist raises
    ``BadInputError``. ``nvml`` is passed through to :func:`gpu_info`.
    """
    host = HostInfo(
        hostname=platform.node(),
        platform=platform.platform(),
        python=platform.python_version(),
        cpu_model=_cpu_model(),
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True),
        usable_cores=_usable_cores(),
    )
    memory = psutil.virtual_memory()
    host.memory_bytes = int(memory.total)
    host.memory_available_bytes = int(memory.available)
    _cgroup_limits(host)
    if path is not None and _is_local(path):
        host.filesystem = filesystem_info(path)
    host.gpus, host.gpu_probe = gpu_info(nvml)
    return host


def _cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or None


def _cgroup_limits(
    host: HostInfo, root: Path = cgroup.ROOT, self_cgroup: Path = cgroup.SELF
) -> None:
    """Narrow ``host``'s usable cores and memory to its cgroups' limits (a container's, a
    job scheduler's): a CPU quota caps the cores it can keep busy, a memory limit what it
    may hold and what is left of it (``collect.cgroup``)."""
    try:
        quota = cgroup.cpu_quota(root, self_cgroup)
        memory = cgroup.memory_limit(root, self_cgroup)
    except (OSError, ValueError):  # a cgroup file not as the kernel writes it: no limit known
        return
    if quota is not None:
        host.cpu_quota_cores = round(quota, 3)
        if host.usable_cores is not None:
            host.usable_cores = cgroup.usable_share(host.usable_cores, quota)
    if memory is not None:
        limit, used = memory
        host.memory_limit_bytes = limit
        host.memory_bytes = min(host.memory_bytes or limit, limit)
        left = max(limit - used, 0)
        host.memory_available_bytes = min(host.memory_available_bytes or left, left)


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on macOS or Windows
        return os.cpu_count()


def usable_cores() -> int:
    """The cores this process can keep busy now: its affinity, narrowed by its cgroups'
    CPU quota (``host_info`` records both)."""
    affinity = _usable_cores() or 1
    try:
        return cgroup.usable_share(affinity, cgroup.cpu_quota())
    except (OSError, ValueError):
        return affinity


def _is_local(path: str) -> bool:
    return "://" not in path


__all__ = [
    "MEMORY_FS_TYPES",
    "NETWORK_FS_TYPES",
    "device_class",
    "filesystem_info",
    "gpu_info",
    "host_info",
    "usable_cores",
]


# The socket a DataLoader worker passes each tensor's shared memory through (torch's default
# "file_descriptor" sharing): multiprocessing's <temp folder>/pymp-XXXXXXXX/listener-XXXXXXXX.
# bind() refuses a path past AF_UNIX's 107 bytes; the worker's feeder thread dies on it, the
# worker lives on, and the loader waits for its batch for ever (watched or not).
SOCKET_TAIL = len("/pymp-xxxxxxxx/listener-xxxxxxxx")
SOCKET_PATH_MAX = 107


def long_temp_dir() -> str | None:
    """The temp folder Python's multiprocessing makes its sockets in (``TMPDIR`` or the
    first usable of its defaults), where it is too long for them (over ``SOCKET_PATH_MAX``
    less ``SOCKET_TAIL`` bytes: 75); None where they fit."""
    folder = tempfile.gettempdir()
    return folder if len(os.fsencode(folder)) + SOCKET_TAIL > SOCKET_PATH_MAX else None

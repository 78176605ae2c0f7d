"""Host facts from a fake sysfs tree and fake mountinfo files, and GPUs from a fake NVML."""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import pytest

from ioprobe.collect.hostinfo import device_class, filesystem_info, gpu_info, host_info
from ioprobe.errors import BadInputError
from ioprobe.record import HostInfo
from ioprobe.render.host import render_host
from ioprobe.units import memory as format_bytes


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _disk(sys_root: Path, name: str, rotational: str | None, model: str | None = None) -> Path:
    disk = sys_root / "block" / name
    disk.mkdir(parents=True)
    if rotational is not None:
        _write(disk / "queue" / "rotational", rotational + "\n")
    if model is not None:
        _write(disk / "device" / "model", model + "   \n")
    return disk


def _partition(sys_root: Path, disk: str, part: str, majmin: str) -> None:
    _write(sys_root / "block" / disk / part / "partition", "1\n")
    link = sys_root / "dev" / "block" / majmin
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("..", "..", "block", disk, part))


def _whole(sys_root: Path, disk: str, majmin: str) -> None:
    link = sys_root / "dev" / "block" / majmin
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("..", "..", "block", disk))


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """nvme0n1 (SSD) with partition p1, sda (HDD), sdb (SSD) under dm-0, vda (virtio)."""
    root = tmp_path / "sys"
    _disk(root, "nvme0n1", "0", "Samsung SSD 980 PRO 1TB")
    _partition(root, "nvme0n1", "nvme0n1p1", "259:1")
    _disk(root, "sda", "1", "ST4000DM004-2CV1")
    _whole(root, "sda", "8:0")
    _disk(root, "sdb", "0", "Samsung SSD 870")
    _disk(root, "sdc", "0", "QEMU HARDDISK")
    _whole(root, "sdc", "8:32")
    dm = _disk(root, "dm-0", "1")
    (dm / "slaves" / "sdb").mkdir(parents=True)
    _whole(root, "dm-0", "253:0")
    _disk(root, "vda", "1")
    _partition(root, "vda", "vda1", "254:1")
    _disk(root, "md0", "0")
    (root / "block" / "md0" / "slaves").mkdir()
    # md members are partitions: the slave entry links to the partition's directory.
    _write(root / "block" / "sda" / "sda2" / "partition", "2\n")
    (root / "block" / "md0" / "slaves" / "sda2").symlink_to(Path("..", "..", "sda", "sda2"))
    _whole(root, "md0", "9:0")
    return root


# A device number no real filesystem uses, for the fake root mount.
ROOT_DEV = "4095:4095"


def _mountinfo(
    tmp_path: Path, lines: list[tuple[str, str, str, str, str]], *, real_dev_ok: bool = False
) -> str:
    """Write mountinfo lines from (major:minor, mount point, fs type, source, super options).

    The paths looked up are real directories under tmp_path, so their real device number takes
    part in the lookup; a fake line carrying that same number would change which mount wins.
    """
    st = os.stat(tmp_path)
    real = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if not real_dev_ok and any(line[0] == real for line in lines):
        pytest.skip(f"tmp_path lives on device {real}, which this fake mountinfo also uses")
    out = []
    for i, (majmin, mount_point, fs_type, source, options) in enumerate(lines, start=20):
        escaped = mount_point.replace(" ", "\\040")
        out.append(
            f"{i} 1 {majmin} / {escaped} rw,relatime shared:{i} - {fs_type} {source} {options}"
        )
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(out) + "\n")
    return str(path)


def _data_dir(tmp_path: Path, name: str = "data") -> Path:
    target = tmp_path / name / "sub"
    target.mkdir(parents=True)
    return target


@pytest.mark.parametrize(
    ("majmin", "fs_type", "source", "device", "cls", "rotational", "model"),
    [
        ("259:1", "ext4", "/dev/nvme0n1p1", "nvme0n1", "nvme", False, "Samsung SSD 980 PRO 1TB"),
        ("8:0", "xfs", "/dev/sda", "sda", "hdd", True, "ST4000DM004-2CV1"),
        ("253:0", "ext4", "/dev/mapper/vg-data", "sdb", "sata-ssd", False, "Samsung SSD 870"),
        ("254:1", "ext4", "/dev/vda1", "vda", "virtual", True, None),
        ("8:32", "ext4", "/dev/sdc", "sdc", "virtual", False, "QEMU HARDDISK"),
        ("9:0", "ext4", "/dev/md0", "sda", "hdd", True, "ST4000DM004-2CV1"),
    ],
)
def test_block_device_classes(
    tmp_path: Path,
    sysfs: Path,
    majmin: str,
    fs_type: str,
    source: str,
    device: str,
    cls: str,
    rotational: bool,
    model: str | None,
) -> None:
    data = _data_dir(tmp_path)
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            (majmin, str(tmp_path / "data"), fs_type, source, "rw"),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.path == str(data)
    assert info.mount_point == str(tmp_path / "data")
    assert info.fs_type == fs_type
    assert info.device == device
    assert info.device_class == cls
    assert info.rotational is rotational
    assert info.model == model


@pytest.mark.parametrize(
    ("fs_type", "source", "cls"),
    [
        ("nfs4", "server:/export", "network"),
        ("nfs", "server:/export", "network"),
        ("cifs", "//server/share", "network"),
        ("fuse.sshfs", "user@host:/data", "network"),
        ("fuse.s3fs", "s3fs", "network"),
        ("lustre", "10.0.0.1@tcp:/fs", "network"),
        ("9p", "hostshare", "network"),
        ("tmpfs", "tmpfs", "tmpfs"),
        ("ramfs", "ramfs", "tmpfs"),
        ("zfs", "pool/data", "unknown"),
        ("fuse.mystery", "mystery", "unknown"),
    ],
)
def test_classes_by_filesystem_type(
    tmp_path: Path, sysfs: Path, fs_type: str, source: str, cls: str
) -> None:
    data = _data_dir(tmp_path)
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            ("0:77", str(tmp_path / "data"), fs_type, source, "rw"),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.fs_type == fs_type
    assert info.device_class == cls
    assert info.device is None
    assert info.rotational is None


def test_longest_mount_point_wins_and_escapes_are_decoded(tmp_path: Path, sysfs: Path) -> None:
    data = _data_dir(tmp_path, "my data")
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            ("8:0", str(tmp_path), "xfs", "/dev/sda", "rw"),
            ("259:1", str(tmp_path / "my data"), "ext4", "/dev/nvme0n1p1", "rw"),
            # A sibling whose name is a prefix of the path's directory must not match.
            ("0:80", str(tmp_path / "my"), "tmpfs", "tmpfs", "rw"),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.mount_point == str(tmp_path / "my data")
    assert info.device_class == "nvme"


def test_device_number_match_beats_longer_prefix(tmp_path: Path, sysfs: Path) -> None:
    data = _data_dir(tmp_path)
    st = os.stat(data)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    mountinfo = _mountinfo(
        tmp_path,
        [
            (majmin, "/", "ext4", "/dev/sda", "rw"),
            # Longer but on another device: a stale entry, not where the path lives.
            ("0:99", str(tmp_path), "nfs4", "server:/x", "rw"),
        ],
        real_dev_ok=True,
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.mount_point == "/"
    assert info.fs_type == "ext4"


def test_overlay_takes_the_class_of_its_upper_layer(tmp_path: Path, sysfs: Path) -> None:
    data = _data_dir(tmp_path)
    upper = "/var/lib/docker/overlay2/abc/diff"
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            ("259:1", "/var/lib/docker", "ext4", "/dev/nvme0n1p1", "rw"),
            (
                "0:60",
                str(tmp_path / "data"),
                "overlay",
                "overlay",
                f"rw,lowerdir=/l1:/l2,upperdir={upper},workdir=/var/lib/docker/overlay2/abc/work",
            ),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.fs_type == "overlay"
    assert info.mount_point == str(tmp_path / "data")
    assert info.device == "nvme0n1"
    assert info.device_class == "nvme"


def test_overlay_without_upperdir_is_unknown(tmp_path: Path, sysfs: Path) -> None:
    data = _data_dir(tmp_path)
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            ("0:60", str(tmp_path / "data"), "overlay", "overlay", "ro,lowerdir=/a:/b"),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.fs_type == "overlay"
    assert info.device_class == "unknown"
    assert info.device is None


def test_major_zero_filesystem_uses_its_source_device(tmp_path: Path, sysfs: Path) -> None:
    data = _data_dir(tmp_path)
    mountinfo = _mountinfo(
        tmp_path,
        [
            (ROOT_DEV, "/", "ext4", "/dev/vda", "rw"),
            ("0:45", str(tmp_path / "data"), "btrfs", "/dev/nvme0n1p1", "rw,subvol=/@"),
        ],
    )
    info = filesystem_info(str(data), sys_root=str(sysfs), mountinfo=mountinfo)
    assert info.device == "nvme0n1"
    assert info.device_class == "nvme"


def test_unknown_pieces_never_raise(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    empty_sys = tmp_path / "empty-sys"
    empty_sys.mkdir()
    mountinfo = _mountinfo(tmp_path, [("8:0", "/", "ext4", "/dev/sda", "rw")])
    info = filesystem_info(str(data), sys_root=str(empty_sys), mountinfo=mountinfo)
    assert info.mount_point == "/"
    assert info.device_class == "unknown"
    assert info.device is None

    garbage = tmp_path / "garbage"
    garbage.write_text("not a mountinfo line\n1 2 x:y / / rw - ext4\n")
    info = filesystem_info(str(data), sys_root=str(empty_sys), mountinfo=str(garbage))
    assert info.mount_point is None
    assert info.device_class == "unknown"

    info = filesystem_info(str(data), sys_root=str(empty_sys), mountinfo=str(tmp_path / "missing"))
    assert info.device_class == "unknown"


def test_missing_path_is_bad_input(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(BadInputError, match="no such file or directory"):
        filesystem_info(missing)
    with pytest.raises(BadInputError):
        host_info(missing, nvml=_FailingNvml())


def test_real_root_is_classified() -> None:
    info = filesystem_info("/")
    assert info.mount_point == "/"
    assert info.fs_type
    assert info.device_class != "unknown"


@pytest.mark.parametrize(
    ("disk", "rotational", "model", "vendor", "cls"),
    [
        ("nvme0n1", False, "Samsung SSD 980", None, "nvme"),
        ("nvme1n1", False, "Amazon Elastic Block Store", None, "virtual"),
        ("sda", True, "ST4000", "ATA", "hdd"),
        ("sda", False, "Samsung SSD 870", "ATA", "sata-ssd"),
        ("sda", False, "Virtual Disk", "Msft", "virtual"),
        ("sdb", False, "VMware Virtual S", "VMware", "virtual"),
        ("xvda", True, None, None, "virtual"),
        ("loop0", False, None, None, "virtual"),
        ("zram0", False, None, None, "virtual"),
        ("nbd0", False, None, None, "network"),
        ("mmcblk0", False, None, None, "unknown"),
        ("sda", None, None, None, "unknown"),
    ],
)
def test_device_class(
    disk: str, rotational: bool | None, model: str | None, vendor: str | None, cls: str
) -> None:
    assert device_class(disk, rotational, model, vendor) == cls


class _NVMLError(Exception):
    pass


class _FakeNvml:
    """Two GPUs; the second cannot report its maximum PCIe generation, and names are bytes."""

    NVMLError = _NVMLError

    def __init__(self) -> None:
        self.shutdown_calls = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        return b"NVIDIA A100-SXM4-80GB" if handle == 0 else "NVIDIA L4"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=(80 if handle == 0 else 24) * 2**30, free=0, used=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int:
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        if handle == 1:
            raise _NVMLError("Not Supported")
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int:
        return 16 if handle == 0 else 8

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return 16


class _FailingNvml(_FakeNvml):
    def nvmlInit(self) -> None:
        raise _NVMLError("NVML Shared Library Not Found")


def test_gpu_info_reads_every_field_and_tolerates_one_failing() -> None:
    nvml = _FakeNvml()
    gpus, status = gpu_info(nvml)
    assert status == "nvml: 2 GPUs"
    assert nvml.shutdown_calls == 1
    a100, l4 = gpus
    assert (a100.index, a100.name, a100.memory_bytes) == (0, "NVIDIA A100-SXM4-80GB", 80 * 2**30)
    assert (a100.pcie_gen_current, a100.pcie_gen_max) == (4, 4)
    assert (a100.pcie_width_current, a100.pcie_width_max) == (16, 16)
    assert (l4.index, l4.name, l4.memory_bytes) == (1, "NVIDIA L4", 24 * 2**30)
    assert l4.pcie_gen_max is None
    assert (l4.pcie_gen_current, l4.pcie_width_current, l4.pcie_width_max) == (4, 8, 16)


def test_gpu_info_without_nvml_is_a_status_not_an_error() -> None:
    gpus, status = gpu_info(_FailingNvml())
    assert gpus == []
    assert status == "none: NVML not available (NVML Shared Library Not Found)"


def test_gpu_info_with_zero_devices() -> None:
    nvml = _FakeNvml()
    nvml.nvmlDeviceGetCount = lambda: 0  # type: ignore[method-assign]
    assert gpu_info(nvml) == ([], "none: no GPU")
    assert nvml.shutdown_calls == 1


def test_gpu_info_on_this_machine_never_raises() -> None:
    gpus, status = gpu_info()
    assert status.startswith(("nvml: ", "none: "))
    assert (status.startswith("nvml: ")) == bool(gpus)


def test_host_info_fills_cpu_memory_storage_and_gpus(tmp_path: Path) -> None:
    host = host_info(str(tmp_path), nvml=_FakeNvml())
    assert host.hostname
    assert host.python.count(".") == 2
    assert host.logical_cores == os.cpu_count()
    assert host.usable_cores == len(os.sched_getaffinity(0))
    assert host.memory_bytes and host.memory_available_bytes
    assert 0 < host.memory_available_bytes <= host.memory_bytes
    assert host.filesystem is not None and host.filesystem.path == str(tmp_path)
    assert host.gpu_probe == "nvml: 2 GPUs"
    assert [g.name for g in host.gpus] == ["NVIDIA A100-SXM4-80GB", "NVIDIA L4"]


def test_host_info_skips_storage_for_urls() -> None:
    host = host_info("s3://bucket/prefix", nvml=_FailingNvml())
    assert host.filesystem is None
    assert host.gpus == []


def test_render_host_names_every_fact() -> None:
    from rich.console import Console

    host = host_info(".", nvml=_FakeNvml())
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render_host(host))
    text = console.export_text()
    assert str(host.cpu_model) in text
    assert f"{host.logical_cores} logical" in text
    assert "NVIDIA L4" in text
    assert "PCIe gen 4/? x8/16" in text
    empty = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    empty.print(render_host(HostInfo()))
    assert "not checked" in empty.export_text()


@pytest.mark.parametrize(
    ("n", "text"),
    [(None, "unknown"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (80 * 2**30, "80 GiB")],
)
def test_format_bytes(n: int | None, text: str) -> None:
    assert format_bytes(n) == text

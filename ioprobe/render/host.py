"""The host as a compact rich panel: CPU, memory, storage and GPUs, one line each.

``ioprobe env`` prints it alone; probe and report output reuse it so every result is shown next
to the machine it was measured on. Values are plain ``Text``, never markup, because hostnames,
paths and device models are the user's and may contain square brackets.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.record import FilesystemInfo, GpuInfo, HostInfo
from ioprobe.redact import shown

_CLASS_WORDS = {
    "nvme": "NVMe SSD",
    "sata-ssd": "SATA/SAS SSD",
    "hdd": "spinning disk",
    "virtual": "virtual disk",
    "network": "network filesystem",
    "tmpfs": "memory (tmpfs)",
    "unknown": "unknown device class",
}


def host_facts(host: HostInfo) -> list[tuple[str, str]]:
    """One (label, fact) pair per line of the inventory; missing facts read as "unknown"."""
    rows = [
        ("host", f"{host.hostname or 'unknown'} · {host.platform or 'unknown'}"),
        ("python", host.python or "unknown"),
        ("CPU", host.cpu_model or "unknown"),
        ("cores", _cores(host)),
        ("memory", _memory(host)),
    ]
    if host.filesystem is not None:
        rows.append(("storage", _storage(host.filesystem)))
    if host.gpus:
        rows += [(f"GPU {gpu.index}", _gpu(gpu)) for gpu in host.gpus]
    else:
        rows.append(("GPUs", host.gpu_probe))
    return rows


def render_host(host: HostInfo) -> RenderableType:
    """A titled panel with one labelled row per fact."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, fact in host_facts(host):
        grid.add_row(label, Text(shown(fact)))  # a path's escape sequence shows as text
    return Panel(grid, title="host", title_align="left", expand=False)


def _cores(host: HostInfo) -> str:
    parts = [
        f"{_num(host.logical_cores)} logical",
        f"{_num(host.physical_cores)} physical",
        f"{_num(host.usable_cores)} usable by this process",
    ]
    if host.cpu_quota_cores is not None:
        parts[-1] += f" (its cgroup's CPU quota: {host.cpu_quota_cores:g} cores)"
    return ", ".join(parts)


def _memory(host: HostInfo) -> str:
    limit = host.memory_limit_bytes
    return (
        f"{units.memory(host.memory_bytes)} total, "
        f"{units.memory(host.memory_available_bytes)} available"
        + (f" (its cgroup's limit: {units.memory(limit)})" if limit is not None else "")
    )


def _storage(fs: FilesystemInfo) -> str:
    where = fs.path
    if fs.mount_point is not None:
        where += f" on {fs.mount_point}"
    details = [fs.fs_type or "unknown filesystem"]
    if fs.device is not None:
        details.append(fs.device)
    details.append(_CLASS_WORDS.get(fs.device_class, fs.device_class))
    if fs.rotational is not None:
        details.append("rotational" if fs.rotational else "non-rotational")
    if fs.model:
        details.append(fs.model)
    return f"{where} ({', '.join(details)})"


def _gpu(gpu: GpuInfo) -> str:
    parts = [gpu.name, units.memory(gpu.memory_bytes)]
    if any(
        v is not None
        for v in (
            gpu.pcie_gen_current,
            gpu.pcie_gen_max,
            gpu.pcie_width_current,
            gpu.pcie_width_max,
        )
    ):
        parts.append(
            f"PCIe gen {_num(gpu.pcie_gen_current)}/{_num(gpu.pcie_gen_max)}"
            f" x{_num(gpu.pcie_width_current)}/{_num(gpu.pcie_width_max)} (current/max)"
        )
    return " · ".join(parts)


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


__all__ = ["host_facts", "render_host"]

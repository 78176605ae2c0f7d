"""Units and rates, formatted once for every renderer: a figure reads the same in the terminal,
the HTML page, the Markdown summary and the what-if and sizing views."""

from __future__ import annotations

from ioprobe.record import Change


def rate(x: float | None) -> str:
    """Samples per second as people read them: thousands separated, one decimal below 100."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def figure(x: float) -> str:
    """A measured figure in three significant digits, thousands whole: 0.0759, 20.3, 1,234."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


def mb_per_s(x: float | None) -> str:
    """Bytes/s as MB/s (10^6) with one decimal; "-" where not measured."""
    return "-" if x is None else f"{x / 1e6:,.1f} MB/s"


def gbps(x: float | None) -> str:
    """Bytes/s as GB/s with one decimal and no unit (a table's column names it)."""
    return "-" if x is None else f"{x / 1e9:,.1f}"


def size_label(n: int) -> str:
    """A power-of-two buffer size: 64 KiB, 256 MiB."""
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def sample_size(n: float) -> str:
    """A sample's size in decimal units: 110 kB, 4.2 MB."""
    if n >= 1e6:
        return f"{n / 1e6:,.1f} MB"
    return f"{n / 1e3:,.0f} kB"


def cache_size(n: float) -> str:
    """A cache size as people write it: whole GB, or MB below one GB."""
    return f"{n / 1e9:,.0f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


def binary_bytes(n: int | float | None) -> str:
    """Binary units, three significant digits: ``31.4 GiB`` (memory, as the OS reports it)."""
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def change_flags(ch: Change) -> str:
    """A what-if's change as the flags a user would type: ``--workers 4  --storage nvme-gen4``."""
    flags = (
        ("workers", _given(ch.workers)),
        ("prefetch-factor", _given(ch.prefetch_factor)),
        ("in-order", None if ch.in_order is None else str(ch.in_order).lower()),
        ("cores", _given(ch.cores)),
        ("storage", ch.storage.name if ch.storage is not None else None),
        ("gpus", _given(ch.gpus)),
        ("cache", _cache_flag(ch)),
        ("pcie", ch.pcie),
        ("gpu-decode", "yes" if ch.gpu_decode else None),
        ("decode", ch.decode),
        # the probe's file name leads its source ("p.json, the cold pass of a probe of ...")
        (
            "probe",
            (ch.storage_sweep_source or "a probe").split(",", 1)[0] if ch.storage_sweep else None,
        ),
    )
    return "  ".join(f"--{k} {v}" for k, v in flags if v is not None)


def _given(n: int | None) -> str | None:
    return None if n is None else str(n)


def _cache_flag(ch: Change) -> str | None:
    if ch.cache_bytes is None:
        return None
    order = f" {ch.cache_order}" if ch.cache_order else ""
    return f"{ch.cache_bytes / 1e9:g} GB{order}"


__all__ = [
    "binary_bytes",
    "cache_size",
    "change_flags",
    "gbps",
    "mb_per_s",
    "percent",
    "rate",
    "ratio",
    "sample_size",
    "size_label",
]

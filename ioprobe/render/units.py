"""Units the renderers share, so a figure reads the same in the terminal, HTML and Markdown."""

from __future__ import annotations


def size_label(n: int) -> str:
    """A power-of-two buffer size: 64 KiB, 256 MiB."""
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def gbps(x: float | None) -> str:
    """Bytes/s as GB/s with one decimal; "-" where not measured."""
    return "-" if x is None else f"{x / 1e9:,.1f}"


__all__ = ["gbps", "size_label"]

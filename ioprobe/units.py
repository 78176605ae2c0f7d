"""Quantities as people read them, one rule each.

Every view, advice sentence and progress line formats bytes, byte rates, sample rates, ratios
and shares here, so one report never prints the same quantity two ways (a test finds any
``x / 1e6`` formatted elsewhere). The ground floor: it imports nothing of ioprobe's.

- Sizes of data (a dataset, a file, a sample, a cache) and read rates are decimal, as disks
  and networks are sold: ``110 kB``, ``4.2 MB``, ``1.5 GB/s``.
- Sizes of memory (RAM, GPU memory, a worker's private pages, a pinned buffer) are binary,
  as the OS reports them: ``31.4 GiB``, ``64 KiB``.
- A figure has three significant digits, thousands whole: ``0.0759``, ``20.3``, ``1,234``.
"""

from __future__ import annotations

_DECIMAL: tuple[tuple[str, float], ...] = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
_BINARY: tuple[tuple[str, float], ...] = (
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
)
_UNIT = {name: scale for name, scale in _DECIMAL}


def figure(x: float) -> str:
    """A measured figure in three significant digits, thousands whole: 0.0759, 20.3, 1,234."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def size(n: float | None) -> str:
    """Bytes of data in decimal units, three significant digits: ``812 B``, ``110 kB``,
    ``52.4 MB``, ``1.5 GB``; "-" where not known."""
    return "-" if n is None else _scaled(n, _DECIMAL)


def bandwidth(x: float | None) -> str:
    """Bytes per second in decimal units: ``812 MB/s``, ``1.5 GB/s``; "-" where not measured."""
    return "-" if x is None else f"{size(x)}/s"


def memory(n: float | None) -> str:
    """Bytes of memory in binary units, three significant digits: ``31.4 GiB``, ``64 KiB``,
    ``512 B``; "unknown" where the host did not say."""
    return "unknown" if n is None else _scaled(n, _BINARY)


def _scaled(n: float, units: tuple[tuple[str, float], ...]) -> str:
    """``n`` bytes in the largest of ``units`` it reaches, else whole bytes."""
    for unit, scale in units:
        if abs(n) >= scale:
            return f"{figure(n / scale)} {unit}"
    return f"{n:.0f} B"


def in_unit(n: float | None, unit: str) -> str:
    """Bytes (or bytes per second) as a figure in one named decimal unit, without the unit:
    for a table whose column names it (``GB/s``). "-" where not measured."""
    return "-" if n is None else figure(n / _UNIT[unit])


def samples_per_s(x: float | None) -> str:
    """Samples per second as people read them: thousands separated, one decimal below 100."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def ratio(r: float | None) -> str:
    """One rate over another: ``1.25x``."""
    return "-" if r is None else f"{r:.2f}x"


def percent(x: float | None) -> str:
    """A share as a whole percentage: ``37%``."""
    return "-" if x is None else f"{x:.0%}"

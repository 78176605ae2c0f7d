"""Storage classes: the shipped catalog, users' own TOML files, and what a class delivers.

The catalog (``ioprobe/data/storage_catalog.toml``, every figure cited in
docs/storage-catalog.md) describes typical devices by four datasheet numbers. ``read_rate``
turns them into the bytes/s a loader can pull at a given sample size and number of reads in
flight, which is all the what-if and sizing code needs to know about a device.
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from importlib import resources
from typing import Any

from ioprobe import units
from ioprobe.errors import BadInputError
from ioprobe.outputs import read_input
from ioprobe.record import StorageClassInfo
from ioprobe.redact import redact_url

CATALOG_ENV = "IOPROBE_CATALOG"
_SMALL = 4096
_LARGE = 131072

StorageClass = StorageClassInfo

Catalog = dict[str, StorageClass]

# a datasheet's MB/s, IOPS or milliseconds beyond this is a typo, and a class built from it
# would overflow the rates (MB/s x 1e6 stays within MAX_BYTES)
MAX_DATASHEET = 1e12
# a catalog or a price list the user names: a hand-written table is far smaller
MAX_TABLE_BYTES = 4 << 20

_KEYS = {"label", "scope", "seq_read_MBps", "iops_4k", "iops_128k", "latency_ms", "source"}


def _parse_class(name: str, raw: Any, where: str) -> StorageClass:
    if not isinstance(raw, dict):
        raise BadInputError(f"{where}: classes.{name} must be a table")
    missing = sorted(_KEYS - raw.keys())
    if missing:
        raise BadInputError(f"{where}: classes.{name} lacks {', '.join(missing)}")
    unknown = sorted(raw.keys() - _KEYS)
    if unknown:
        raise BadInputError(f"{where}: classes.{name} has unknown keys {', '.join(unknown)}")
    if raw["scope"] not in ("local", "network", "object"):
        raise BadInputError(
            f"{where}: classes.{name}.scope must be local, network or object, not {raw['scope']!r}"
        )
    nums: dict[str, float] = {}
    for key in ("seq_read_MBps", "iops_4k", "iops_128k", "latency_ms"):
        v = raw[key]
        # TOML has inf and nan; NaN fails every comparison, so `0 < v <= ...` refuses it too
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= MAX_DATASHEET:
            raise BadInputError(
                f"{where}: classes.{name}.{key} must be a positive number up to {MAX_DATASHEET:g}"
            )
        nums[key] = float(v)
    return StorageClass(
        name=name,
        label=str(raw["label"]),
        scope=raw["scope"],
        seq_read_bytes_per_s=nums["seq_read_MBps"] * 1e6,
        iops_4k=nums["iops_4k"],
        iops_128k=nums["iops_128k"],
        latency_s=nums["latency_ms"] / 1e3,
        source=redact_url(str(raw["source"])),  # a private wiki's URL may carry a token
    )


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """A TOML file's tables (the catalog, a --cost file, the reference results); a file
    that does not parse is one line naming it."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{where}: not valid TOML ({exc})") from None
    except RecursionError:  # arrays or tables nested past the parser's depth
        raise BadInputError(f"{where}: not valid TOML (nested too deep to read)") from None


# The most classes a catalog may hold: each is a row of every sizing table and priced
# against every GPU count, so a catalog of thousands would take minutes to size
MAX_CLASSES = 256


def parse_catalog(text: str, where: str) -> Catalog:
    data = parse_toml(text, where)
    classes = data.get("classes")
    if not isinstance(classes, dict) or not classes:
        raise BadInputError(f"{where}: expected [classes.NAME] tables")
    if len(classes) > MAX_CLASSES:
        raise BadInputError(
            f"{where}: {len(classes):,} classes; a catalog holds at most {MAX_CLASSES}"
        )
    return {name: _parse_class(name, raw, where) for name, raw in classes.items()}


@functools.cache
def _shipped() -> Catalog:
    # package data does not change while the process runs; callers get their own dict and
    # nothing mutates a class
    text = resources.files("ioprobe").joinpath("data/storage_catalog.toml").read_text("utf-8")
    return parse_catalog(text, "ioprobe/data/storage_catalog.toml")


def shipped_catalog() -> Catalog:
    """The classes ioprobe ships (cheapest tier first): the catalog when the user gave none."""
    return dict(_shipped())


def load_catalog(user_file: str | None = None) -> Catalog:
    """The shipped classes, then the user's file (``--catalog`` or $IOPROBE_CATALOG) on top:
    read at the edges (the CLI, ``ioprobe.watch``), which pass it to the analysis.

    A user class with a new name is appended (after the shipped ones, so "cheapest first"
    ordering still starts with the shipped tiers); one with a shipped name replaces it in place.
    """
    catalog = shipped_catalog()
    path = user_file or os.environ.get(CATALOG_ENV) or None
    if path:
        user_text = read_input(path, f"catalog {path}", MAX_TABLE_BYTES)
        catalog.update(parse_catalog(user_text, path))
    return catalog


def try_load_catalog(user_file: str | None = None) -> Catalog:
    """``load_catalog`` for advice that must not fail on it: a broken user catalog gives no
    storage classes at all (no class-based advice) rather than an error; ``whatif --storage``
    and ``size`` name the problem when the user asks for a class."""
    try:
        return load_catalog(user_file)
    except BadInputError:
        return {}


_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]i?)?B?\s*$")
_UNIT = {
    None: 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "ki": 1024.0,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
}


# The largest size or rate a flag may give: an exabyte (per second). A larger one is a typo
# (1e400 reads as infinity), and would overflow the model's products
MAX_BYTES = 1e18


def parse_bytes(text: str) -> float | None:
    """``110kB``, ``4MiB``, ``1.5GB``, ``110000`` to bytes; None when not a positive size up
    to ``MAX_BYTES``."""
    m = _QUANTITY.match(text)
    if not m:
        return None
    value = float(m.group(1)) * _UNIT[m.group(2)]
    return value if 0 < value <= MAX_BYTES else None


def parse_rate(text: str) -> float | None:
    """``2000MB/s``, ``2 GB/s``, ``500MiB/s`` to bytes/s; None when ``text`` is not a rate."""
    head, sep, tail = text.strip().rpartition("/")
    if not sep or tail.strip() != "s" or not head.rstrip().endswith("B"):
        return None
    return parse_bytes(head)


def resolve_storage(spec: str, catalog: Catalog) -> StorageClass:
    """A class name from the catalog, or a plain read rate such as ``2000MB/s``."""
    spec = spec.strip()
    if spec in catalog:
        return catalog[spec]
    rate = parse_rate(spec)
    if rate is not None:
        return StorageClass(
            name=spec.replace(" ", ""),
            label=f"{units.bandwidth(rate)}, bandwidth only",
            scope="given",
            seq_read_bytes_per_s=rate,
        )
    raise BadInputError(
        f"unknown storage class {spec!r}: give a rate such as 2000MB/s or one of "
        + ", ".join(catalog)
    )


def iops_at(cls: StorageClass, size: float) -> float | None:
    """Random-read IOPS at ``size`` bytes: the datasheet's 4 KiB and 128 KiB figures,
    interpolated on a log-log scale between them and held flat outside."""
    if cls.iops_4k is None or cls.iops_128k is None:
        return None
    if size <= _SMALL:
        return cls.iops_4k
    if size >= _LARGE:
        return cls.iops_128k
    t = math.log(size / _SMALL) / math.log(_LARGE / _SMALL)
    return math.exp(math.log(cls.iops_4k) * (1 - t) + math.log(cls.iops_128k) * t)


def read_rate(cls: StorageClass, sample_bytes: float, in_flight: int) -> float:
    """Bytes/s a loader reading whole samples of ``sample_bytes`` with ``in_flight`` reads
    outstanding gets from ``cls``.

    Three limits, the smallest wins: the sequential bandwidth; the random-read IOPS at this
    size times the size (small files are IOPS-bound long before bandwidth-bound); and Little's
    law, ``in_flight / (latency + size / bandwidth)`` requests/s, which is what caps a loader
    with few workers on a high-latency store. Object storage figures are per connection, so
    each of the ``in_flight`` connections gets its own bandwidth and latency. A rate given on
    the command line is bandwidth only, by the user's choice.
    """
    return min(read_limits(cls, sample_bytes, in_flight).values())


def read_limits(cls: StorageClass, sample_bytes: float, in_flight: int) -> dict[str, float]:
    """The limits ``read_rate`` takes the smallest of, by name: ``bandwidth``, ``iops`` and
    ``latency`` (Little's law over the reads in flight). Which one is smallest says whether
    a dataset of this density is bandwidth- or request-bound on ``cls``."""
    size = max(float(sample_bytes), 1.0)
    q = max(int(in_flight), 1)
    bw = cls.seq_read_bytes_per_s
    if cls.scope == "given":
        return {"bandwidth": bw}
    per_request = cls.latency_s + size / bw
    if cls.scope == "object":
        # each connection has its own bandwidth, and its latency and transfer add up: the
        # larger of the two terms names the limit
        name = "latency" if cls.latency_s >= size / bw else "bandwidth"
        return {name: q * size / per_request}
    limits = {"bandwidth": bw, "latency": q * size / per_request}
    iops = iops_at(cls, size)
    if iops is not None:
        limits["iops"] = iops * size
    return limits


__all__ = [
    "CATALOG_ENV",
    "MAX_BYTES",
    "Catalog",
    "StorageClass",
    "iops_at",
    "load_catalog",
    "parse_bytes",
    "parse_catalog",
    "parse_rate",
    "parse_toml",
    "read_limits",
    "read_rate",
    "resolve_storage",
]

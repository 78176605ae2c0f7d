"""Prices for a sizing (``ioprobe size --cost FILE``): what each configuration costs.

The file is TOML::

    currency = "USD"
    gpu = 30000            # per GPU
    core = 150             # per CPU core of loader workers
    [storage]
    nvme-gen4 = 900        # a local class: per node (one device in each)
    nfs-100gbe = 250000    # a network or object class: once, shared by every node

A configuration costs its GPUs, the cores its loaders need (at most the cores a node has),
and its storage. Parts without a price cost nothing, and a storage class without a price
leaves its configurations unpriced: the cheapest is then chosen among priced ones only.
"""

from __future__ import annotations

import math
from typing import Any

from ioprobe.analysis.catalog import MAX_TABLE_BYTES, parse_toml
from ioprobe.errors import BadInputError
from ioprobe.outputs import read_input
from ioprobe.record import CostInputs, SizeInputs, SizeRow, StorageClassInfo

MAX_PRICE = 1e15
_TOP_KEYS = {"currency", "gpu", "core", "storage"}


def _price(value: Any, where: str) -> float:
    # TOML has inf and nan; NaN fails every comparison, so the range check refuses it too
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_PRICE:
        raise BadInputError(f"{where} must be a price from 0 to {MAX_PRICE:g}")
    return float(value)


def parse_costs(text: str, where: str) -> CostInputs:
    """The prices of a --cost file, each checked; anything else in it is an error, so a
    misspelt key never silently prices a part at nothing."""
    data = parse_toml(text, where)
    unknown = sorted(data.keys() - _TOP_KEYS)
    if unknown:
        raise BadInputError(
            f"{where}: unknown keys {', '.join(unknown)} (expected currency, gpu, core, [storage])"
        )
    currency = data.get("currency", "")
    if not isinstance(currency, str):
        raise BadInputError(f'{where}: currency must be a string such as "USD"')
    storage = data.get("storage", {})
    if not isinstance(storage, dict):
        raise BadInputError(f"{where}: storage must be a table of class = price")
    return CostInputs(
        currency=currency,
        source=where,
        gpu=_price(data["gpu"], f"{where}: gpu") if "gpu" in data else None,
        core=_price(data["core"], f"{where}: core") if "core" in data else None,
        storage={k: _price(v, f"{where}: storage.{k}") for k, v in storage.items()},
    )


def load_costs(path: str) -> CostInputs:
    text = read_input(path, f"--cost {path}", MAX_TABLE_BYTES)
    return parse_costs(text, path)


def check_classes(costs: CostInputs, known: set[str]) -> None:
    """A price for a class that is neither sized nor in the catalog is a typo: say so."""
    stray = sorted(set(costs.storage) - known)
    if stray:
        raise BadInputError(
            f"{costs.source}: no storage class named {', '.join(stray)} "
            f"(known: {', '.join(sorted(known))})"
        )


def cores_bought(row: SizeRow, inp: SizeInputs) -> int:
    """Cores per node a configuration pays for: what its loaders need to feed its GPUs,
    rounded up, and no more than a node has."""
    if not row.cores_needed:
        return 0
    need = math.ceil(row.cores_needed - 1e-9)
    return min(need, math.ceil(inp.cores)) if inp.cores else need


def row_cost(
    row: SizeRow, cls: StorageClassInfo, inp: SizeInputs, costs: CostInputs
) -> float | None:
    """The price of ``row``'s configuration: GPUs, loader cores and storage over every node;
    None where its storage class has no price."""
    storage = costs.storage.get(cls.name)
    if storage is None:
        return None
    units = inp.nodes if cls.scope == "local" else 1
    return (
        (costs.gpu or 0.0) * row.gpus * inp.nodes
        + (costs.core or 0.0) * cores_bought(row, inp) * inp.nodes
        + storage * units
    )


__all__ = ["check_classes", "cores_bought", "load_costs", "parse_costs", "row_cost"]

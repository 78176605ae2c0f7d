"""Published MLPerf Storage results, and the sized need placed beside them.

``ioprobe/data/mlperf_storage.toml`` (every figure cited in docs/mlperf-reference.md) lists
results as MLPerf Storage states them: a system, a workload, the simulated accelerators it
kept at the workload's accelerator-utilisation threshold, and the throughput that took. A
buyer reads their own need against those: one node of G GPUs at the target needs so many
GB/s, so a published system would feed about so many such nodes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from importlib import resources
from typing import Any

from ioprobe.analysis.catalog import parse_toml
from ioprobe.errors import BadInputError
from ioprobe.record import EmulatedWorkload, ReferencePoint, References, SizeInputs

SHIPPED = "data/mlperf_storage.toml"
_RESULT_KEYS = {
    "system": str,
    "version": str,
    "division": str,
    "workload": str,
    "accelerator": str,
    "accelerators": int,
    "GBps": float,
    "source": str,
}


def _result(raw: Any, workloads: dict[str, Any], where: str, k: int) -> ReferencePoint:
    if not isinstance(raw, dict):
        raise BadInputError(f"{where}: results[{k}] must be a table")
    for key, kind in _RESULT_KEYS.items():
        v = raw.get(key)
        ok = (
            isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1e12
            if kind is not str
            else isinstance(v, str) and v != ""
        )
        if not ok:
            raise BadInputError(f"{where}: results[{k}].{key} is missing or not valid")
    wl = workloads.get(raw["workload"], {})
    size = wl.get("sample_bytes", 0) if isinstance(wl, dict) else 0
    hosts = raw.get("hosts", 0)
    return ReferencePoint(
        system=raw["system"],
        version=raw["version"],
        division=raw["division"],
        workload=raw["workload"],
        accelerator=raw["accelerator"],
        accelerators=int(raw["accelerators"]),
        bytes_per_s=float(raw["GBps"]) * 1e9,
        source=raw["source"],
        hosts=int(hosts) if isinstance(hosts, int) and not isinstance(hosts, bool) else 0,
        sample_bytes=float(size) if isinstance(size, int | float) else 0.0,
    )


def parse_references(text: str, where: str) -> list[ReferencePoint]:
    """The results of a reference file, each checked; a broken file is one clear error."""
    data = parse_toml(text, where)
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise BadInputError(f"{where}: expected [[results]] tables")
    workloads = data.get("workloads", {})
    workloads = workloads if isinstance(workloads, dict) else {}
    return [_result(raw, workloads, where, k) for k, raw in enumerate(results)]


@functools.cache
def _shipped_text() -> str:
    """The shipped file, read once: its results and its workloads are parsed from it."""
    return resources.files("ioprobe").joinpath(SHIPPED).read_text("utf-8")


@functools.cache
def _shipped() -> tuple[ReferencePoint, ...]:
    return tuple(parse_references(_shipped_text(), f"ioprobe/{SHIPPED}"))


# The simulated accelerators MLPerf Storage's workload configurations name, as their keys
# in the shipped file spell them (compute_s_h100)
ACCELERATORS = ("A100", "H100", "B200")


@functools.cache
def _shipped_workloads() -> dict[str, Any]:
    found = parse_toml(_shipped_text(), f"ioprobe/{SHIPPED}").get("workloads", {})
    return found if isinstance(found, dict) else {}


def emulated(name: str, accelerator: str | None) -> EmulatedWorkload:
    """MLPerf Storage's emulation of workload ``name`` on ``accelerator`` (A100, H100, B200;
    None: H100 where the workload has it, else the one accelerator it has): its batch, its
    emulated step and its AU threshold. A workload or pairing the benchmark has no
    configuration for is a BadInputError naming those it has."""
    workloads = _shipped_workloads()
    raw = workloads.get(name)
    if not isinstance(raw, dict):
        raise BadInputError(
            f"--workload {name!r}: not an MLPerf Storage training workload; one of "
            + ", ".join(sorted(workloads))
        )
    has = [a for a in ACCELERATORS if f"compute_s_{a.lower()}" in raw]
    if accelerator is None:
        accelerator = "H100" if "H100" in has else has[0]
    accelerator = accelerator.upper()
    if accelerator not in has:
        raise BadInputError(
            f"--accelerator {accelerator!r}: MLPerf Storage has no {name} configuration for "
            f"it; {name} is configured for " + ", ".join(has)
        )
    return EmulatedWorkload(
        name=name,
        accelerator=accelerator,
        batch_size=int(raw["batch_size"]),
        compute_seconds=float(raw[f"compute_s_{accelerator.lower()}"]),
        au_threshold=float(raw["au_threshold"]),
        source=_config_source(raw, accelerator),
    )


def _config_source(raw: dict[str, Any], accelerator: str) -> str:
    """The workload configuration for ``accelerator``: its own ``source_<type>`` where the
    file names one, else the H100 config's path (with _a100 for the A100 one)."""
    own = raw.get(f"source_{accelerator.lower()}")
    if isinstance(own, str):
        return own
    source = str(raw["source"])
    return source.replace("_h100", "_a100") if accelerator == "A100" else source


def workload_sample_bytes(name: str) -> float:
    """The mean bytes of one sample of workload ``name`` (its record_length)."""
    return float(_shipped_workloads()[name]["sample_bytes"])


def shipped_references() -> list[ReferencePoint]:
    """The published results ioprobe ships, in the file's order."""
    return list(_shipped())


def node_need(inp: SizeInputs, node_gpus: int) -> float:
    """Bytes/s one node of ``node_gpus`` GPUs reads to keep them at the target utilisation:
    GPUs x samples/s per GPU x target x bytes per sample."""
    return node_gpus * inp.gpu_samples_per_s * inp.target_utilization * inp.sample_bytes


def place(inp: SizeInputs, points: list[ReferencePoint], node_gpus: int) -> References:
    """Each published result with the nodes of ``node_gpus`` GPUs its throughput would feed
    at the target, ordered by how close its workload's sample size is to this dataset's
    (the nearest density first: a result on far larger records says least about small
    ones), then by throughput."""
    need = node_need(inp, node_gpus)
    wl = inp.workload

    def distance(p: ReferencePoint) -> tuple[int, float]:
        # sizing a workload's emulation: its own results on its accelerator first, then on
        # the others, as a submitter compares them
        same = 2 if wl is None or p.workload != wl.name else int(p.accelerator != wl.accelerator)
        if p.sample_bytes <= 0:
            return same, math.inf
        return same, abs(math.log(p.sample_bytes / inp.sample_bytes))

    placed = [
        dataclasses.replace(p, nodes_fed=p.bytes_per_s / need if need > 0 else 0.0) for p in points
    ]
    placed.sort(key=lambda p: (*distance(p), -p.bytes_per_s))
    return References(
        node_gpus=node_gpus,
        node_bytes_per_s=need,
        points=placed,
        source="docs/mlperf-reference.md",
    )


__all__ = [
    "ACCELERATORS",
    "emulated",
    "node_need",
    "parse_references",
    "place",
    "shipped_references",
    "workload_sample_bytes",
]

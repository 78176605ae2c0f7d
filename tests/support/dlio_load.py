"""Load a DLIO workload as ``dlio_benchmark --config-dir DIR workload=NAME`` does, in the
interpreter of a DLIO installation (``.venv-dlio``, which ``make test`` builds), and print
what DLIO made of it as JSON: the mapping Hydra composed, the value of each of DLIO's
``ConfigArguments`` attributes, and the keys DLIO never looked at.

    python tests/support/dlio_load.py DIR NAME

DLIO runs in a process of its own: its imports (mpi4py, dftracer, Hydra) change what other
libraries do in the process that imports them (Lightning's MPI detection loads mpi4py.MPI,
dftracer installs signal handlers), so none of it goes near the test process. ConfigArguments
asks DLIOMPI for rank and size: ``set_parent_values(0, 1)`` (the path DLIO's reader processes
take) gives rank 0 of 1 without an MPI library.
"""

from __future__ import annotations

import enum
import inspect
import json
import sys
from typing import Any


class Seen(dict[str, Any]):
    """A mapping that logs every key LoadConfig asks about (``in``, ``[]``, ``get``)."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], log: set[tuple[str, ...]]):
        self.path, self.log = path, log
        super().__init__(
            {k: Seen(v, (*path, k), log) if isinstance(v, dict) else v for k, v in data.items()}
        )

    def __contains__(self, k: object) -> bool:
        self.log.add((*self.path, str(k)))
        return super().__contains__(k)

    def __getitem__(self, k: str) -> Any:
        self.log.add((*self.path, k))
        return super().__getitem__(k)

    def get(self, k: str, default: Any = None) -> Any:
        self.log.add((*self.path, k))
        return super().get(k, default)


# the same size in the other DLIO's spelling: unread is right where its twin was read
TWINS = {
    ("dataset", f"record_length{s}"): ("dataset", f"record_length_bytes{s}")
    for s in ("", "_stdev", "_resize")
}
TWINS |= {v: k for k, v in TWINS.items()}


def leaves(d: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for k, v in d.items():
        out += leaves(v, (*path, k)) if isinstance(v, dict) else [(*path, k)]
    return out


def at(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        d = d[k]
    return d


def plain(x: Any) -> Any:
    """What an attribute holds, as JSON: an enum's value, a DictConfig as a dict."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(x, DictConfig):
        return OmegaConf.to_container(x)
    if isinstance(x, enum.Enum):
        return x.value
    try:
        json.dumps(x)
    except (TypeError, ValueError):
        return repr(x)
    return x


def values(args: Any) -> dict[str, Any]:
    """Every attribute of ``args`` as JSON: instance attributes, and the properties some
    DLIOs compute them through (one that raises is left out)."""
    out = {}
    for k in dir(args):
        try:
            v = getattr(args, k)
        except Exception:
            continue
        if not k.startswith("_") and not callable(v):
            out[k] = plain(v)
    return out


def main(config_dir: str, name: str) -> None:
    from dlio_benchmark.utils.config import ConfigArguments, LoadConfig
    from dlio_benchmark.utils.utility import DLIOMPI
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="dlio_benchmark.configs", version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[f"workload={name}", f"hydra.searchpath=[file://{config_dir}]"],
        )
    workload = OmegaConf.to_container(cfg["workload"])
    assert isinstance(workload, dict)
    DLIOMPI.get_instance().set_parent_values(0, 1)
    args = ConfigArguments.get_instance()
    LoadConfig(args, cfg["workload"])
    attrs = values(args)
    ConfigArguments.reset()
    log: set[tuple[str, ...]] = set()
    seen_args = ConfigArguments.get_instance()
    LoadConfig(seen_args, Seen(workload, (), log))
    kept = [v for v in vars(seen_args).values() if isinstance(v, dict)]
    unread = []
    for leaf in leaves(workload):
        # a mapping DLIO kept whole (2.0.0's ``model``) counts as read with its keys
        whole = any(leaf[:i] in log and at(workload, leaf[:i]) in kept for i in range(1, len(leaf)))
        twin = TWINS.get(leaf)
        if leaf in log or whole or (twin is not None and twin in log and twin in leaves(workload)):
            continue
        unread.append(".".join(leaf))
    source = inspect.getsource(LoadConfig)
    json.dump(
        {
            "workload": workload,
            "attrs": attrs,
            "unread": unread,
            # which spelling this DLIO reads, off its own source
            "current": "record_length_bytes" in source,
            "storage_options": "'storage_options'" in source,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

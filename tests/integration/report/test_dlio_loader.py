"""DLIO's own configuration code reads the workload ``ioprobe export dlio`` writes, every key
as intended.

The file is composed as ``dlio_benchmark --config-dir DIR workload=NAME`` composes it (Hydra,
DLIO's packaged config.yaml, the file at DIR/workload/NAME.yaml), then handed to
``dlio_benchmark.utils.config.LoadConfig``, as ``DLIOBenchmark.__init__`` does. ``make test``
installs the DLIO that PyPI has (2.0.0, tests/requirements-dlio.txt says how); the same test
runs against the DLIO MLPerf Storage runs (argonne-lcf/dlio_benchmark, and the MLCommons fork
of it v3.0 ran) where one is installed instead. The two read different spellings:

- PyPI 2.0.0: ``dataset.record_length[_stdev|_resize]``, ``train.computation_time`` a float,
  ``model`` kept whole, no ``storage.storage_options``;
- since MLPerf Storage v2.0: ``dataset.record_length_bytes[...]``, ``computation_time`` a
  ``{mean, stdev}`` mapping, ``storage.storage_options``.

Which one is installed is read off LoadConfig's own source. ConfigArguments asks DLIOMPI for
rank and size: ``set_parent_values(0, 1)`` (the path DLIO's reader processes take) gives rank
0 of 1 without an MPI library.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from dlio_benchmark.utils import config as dlio_config
from dlio_benchmark.utils.utility import DLIOMPI
from omegaconf import DictConfig, OmegaConf

from tests.support.cli import probe_json, run_cli

pytestmark = pytest.mark.slow

ConfigArguments = dlio_config.ConfigArguments
LoadConfig = dlio_config.LoadConfig
CURRENT = "record_length_bytes" in inspect.getsource(LoadConfig)
HAS_STORAGE_OPTIONS = "'storage_options'" in inspect.getsource(LoadConfig)
# the same size in the other DLIO's spelling: unread is right where its twin was read
TWINS = {
    ("dataset", f"record_length{s}"): ("dataset", f"record_length_bytes{s}")
    for s in ("", "_stdev", "_resize")
}
TWINS |= {v: k for k, v in TWINS.items()}


def _compose(config_dir: Path, name: str) -> DictConfig:
    """``dlio_benchmark --config-dir config_dir workload=name``, as Hydra composes it."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="dlio_benchmark.configs", version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[f"workload={name}", f"hydra.searchpath=[file://{config_dir}]"],
        )
    workload: DictConfig = cfg["workload"]
    return workload


@pytest.fixture
def dlio_args() -> Iterator[Callable[[], Any]]:
    """A fresh ConfigArguments, rank 0 of 1, no MPI library loaded."""
    DLIOMPI.reset()
    DLIOMPI.get_instance().set_parent_values(0, 1)
    ConfigArguments.reset()
    yield ConfigArguments.get_instance
    ConfigArguments.reset()
    DLIOMPI.reset()


class _Seen(dict[str, Any]):
    """A mapping that logs every key LoadConfig asks about (``in``, ``[]``, ``get``)."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], log: set[tuple[str, ...]]):
        self.path, self.log = path, log
        super().__init__(
            {k: _Seen(v, (*path, k), log) if isinstance(v, dict) else v for k, v in data.items()}
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


def _leaves(d: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for k, v in d.items():
        out += _leaves(v, (*path, k)) if isinstance(v, dict) else [(*path, k)]
    return out


def _unread(workload: dict[str, Any], args: Any) -> list[str]:
    """The workload's keys LoadConfig never looked at; a mapping it kept whole (2.0.0's
    ``model``) counts as read with its keys, and a size read in the other spelling too."""
    log: set[tuple[str, ...]] = set()
    LoadConfig(args, _Seen(workload, (), log))
    kept = [v for v in vars(args).values() if isinstance(v, dict)]
    missed = []
    for leaf in _leaves(workload):
        whole = any(
            leaf[:i] in log and _at(workload, leaf[:i]) in kept for i in range(1, len(leaf))
        )
        twin = TWINS.get(leaf)
        if leaf in log or whole or (twin is not None and twin in log and _has(workload, twin)):
            continue
        missed.append(".".join(leaf))
    return missed


def _at(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        d = d[k]
    return d


def _has(d: dict[str, Any], path: tuple[str, ...]) -> bool:
    try:
        _at(d, path)
    except KeyError:
        return False
    return True


def _plain(x: Any) -> Any:
    """An enum's value, a DictConfig as a dict, else the thing itself."""
    if isinstance(x, DictConfig):
        return OmegaConf.to_container(x)
    return getattr(x, "value", x)


def _expected(w: dict[str, Any]) -> dict[str, Any]:
    """ConfigArguments attribute -> the value DLIO must hold after reading ``w``."""
    ds, rd, tr, wf = w["dataset"], w["reader"], w["train"], w["workflow"]
    e: dict[str, Any] = {"framework": w["framework"]}
    e["model"] = w["model"]["name"] if CURRENT else w["model"]
    e |= {"generate_data": wf["generate_data"], "generate_only": not wf["train"]}
    e["do_checkpoint"] = wf["checkpoint"]
    for suffix in ("", "_stdev", "_resize"):
        # whichever spelling this DLIO reads, it must hold the size written
        if f"record_length_bytes{suffix}" in ds:
            e[f"record_length{suffix}"] = ds[f"record_length_bytes{suffix}"]
    e["data_folder"] = ds["data_folder"].rstrip("/")
    e |= {k: ds[k] for k in ("format", "num_files_train", "num_samples_per_file")}
    keys = ("data_loader", "batch_size", "read_threads", "prefetch_size", "sample_shuffle")
    e |= {k: rd[k] for k in (*keys, "file_shuffle", "multiprocessing_context") if k in rd}
    for stem, src in (("preprocess_time", rd), ("computation_time", tr)):
        if stem not in src:
            continue
        if CURRENT:
            e[stem] = {"mean": src[stem], "stdev": src[f"{stem}_stdev"]}
        else:
            e |= {stem: src[stem], f"{stem}_stdev": src[f"{stem}_stdev"]}
    e |= {"epochs": tr["epochs"], "au": w["metric"]["au"]}
    st = w.get("storage", {})
    keys = ("storage_type", "storage_root") + (("storage_options",) if HAS_STORAGE_OPTIONS else ())
    e |= {k: st[k] for k in keys if k in st}
    return e


def _misread(w: dict[str, Any], args: Any) -> list[str]:
    problems = []
    for attr, want in _expected(w).items():
        got = _plain(getattr(args, attr, "<no such attribute>"))
        if isinstance(want, float) or isinstance(got, float):
            ok = isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-12)
        else:
            ok = got == want
        if not ok:
            problems.append(f"{attr}: wrote {want!r}, DLIO holds {got!r}")
    return problems


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A probe's record of 32 npy files of 40-56 kB with an emulated 25 ms step."""
    root = tmp_path_factory.mktemp("dlio")
    data = root / "data"
    data.mkdir()
    for i in range(32):
        np.save(data / f"s{i:03d}.npy", np.zeros(40_000 + 4_000 * (i % 5), dtype=np.uint8))
    args = ("--time-budget", "5", "--compute-ms-per-batch", "25", "--batch-size", "8")
    probe_json(root, str(data), *args, "--workers", "1")
    return root / "run.json"


def _export_as_dlio_finds_it(run: Path, config_dir: Path, name: str) -> dict[str, Any]:
    """The export written where ``--config-dir config_dir workload=name`` looks for it (as
    docs/export.md says), parsed as YAML."""
    target = config_dir / "workload" / f"{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    proc = run_cli("export", "dlio", str(run), "-o", str(target), "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    w: dict[str, Any] = yaml.safe_load(target.read_text())
    return w


def test_dlio_reads_a_probes_export_as_written(
    probed: Path, tmp_path: Path, dlio_args: Callable[[], Any]
) -> None:
    w = _export_as_dlio_finds_it(probed, tmp_path, "ioprobe_job")
    cfg = _compose(tmp_path, "ioprobe_job")
    assert OmegaConf.to_container(cfg) == w  # Hydra composed the file, nothing else
    args = dlio_args()
    LoadConfig(args, cfg)
    assert _misread(w, args) == []
    assert args.record_length == round(
        json.loads(probed.read_text())["dataset"]["sample_bytes_mean"]
    )
    ConfigArguments.reset()
    assert _unread(w, dlio_args()) == []


def test_dlio_reads_the_bucket_of_an_s3_export(
    probed: Path, tmp_path: Path, dlio_args: Callable[[], Any]
) -> None:
    # the same run, as a probe of a bucket records it
    rec = json.loads(probed.read_text())
    rec["dataset"]["target"] = "s3://ioprobe-bucket/datasets/job1"
    rec["dataset"]["remote"] = True
    run = tmp_path / "s3.json"
    run.write_text(json.dumps(rec))
    w = _export_as_dlio_finds_it(run, tmp_path, "ioprobe_s3")
    assert w["storage"] == {
        "storage_type": "s3",
        "storage_root": "ioprobe-bucket",
        "storage_options": {"storage_library": "s3torchconnector"},
    }
    assert w["dataset"]["data_folder"] == "s3://ioprobe-bucket/datasets/job1/"
    args = dlio_args()
    LoadConfig(args, _compose(tmp_path, "ioprobe_s3"))
    assert _misread(w, args) == []
    assert _plain(args.storage_type) == "s3" and args.storage_root == "ioprobe-bucket"
    ConfigArguments.reset()
    # storage_options is what 2.0.0 cannot read: the export says so where it lists what
    # DLIO does not carry over
    unread = _unread(w, dlio_args())
    assert unread == ([] if HAS_STORAGE_OPTIONS else ["storage.storage_options.storage_library"])
    assert (
        "DLIO 2.0.0 from PyPI reads no storage_options"
        in (tmp_path / "workload" / "ioprobe_s3.yaml").read_text()
    )


def test_the_workload_beside_the_config_dir_is_not_found(probed: Path, tmp_path: Path) -> None:
    # why docs/export.md writes to workload/NAME.yaml: Hydra looks in the group's folder
    from hydra.errors import MissingConfigException

    proc = run_cli("export", "dlio", str(probed), "-o", str(tmp_path / "myjob.yaml"))
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(MissingConfigException):
        _compose(tmp_path, "myjob")

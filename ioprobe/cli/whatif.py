"""Predict a saved run under changed resources: workers, cores, storage, GPUs, cache, PCIe.

RUN.json is a record from `ioprobe probe`, `ioprobe run` or `watch()` (or an earlier what-if,
whose changes the new ones are added to). Each stage's capacity is recomputed from what the
run measured, and the pipeline model gives the new delivered rate, bottleneck and GPU idle
time. The method and its assumptions are in docs/methodology.md.

A change of the DataLoader's settings alone (--workers, --prefetch-factor, --in-order) on a
watched run is predicted by replaying the run's logged batches under them: slow samples
holding the queue, workers sharing the cores, reads sharing the storage as measured. On a
watched DALI pipeline, --workers is its num_threads and --prefetch-factor its
prefetch_queue_depth, replayed the same way.

With more workers or GPUs, a watched run's storage scales by the evidence in the run (how
its read times grew with the reads in flight) or, lacking it, linearly. --probe PROBE.json,
a probe of the same storage (`ioprobe probe TARGET --json PROBE.json`), makes it follow the
probe's measured concurrency sweep instead, flat past its last level: right where storage is
a bandwidth cap that one run cannot see.
"""

from __future__ import annotations

import os
from typing import cast

import click

from ioprobe.analysis.catalog import load_catalog, try_load_catalog
from ioprobe.analysis.report import findings
from ioprobe.analysis.scenario import parse_pcie
from ioprobe.analysis.whatif import whatif
from ioprobe.cli._common import (
    catalog_option,
    check_outputs,
    count,
    finite_float,
    json_option,
    load_analysable,
    show,
    storage_flag,
    write_record,
)
from ioprobe.errors import BadInputError
from ioprobe.outputs import writes_stdout
from ioprobe.record import CacheOrder, Change, RunRecord

MAX_CACHE_GB = 1e9  # an exabyte


@click.command(help=__doc__)
@click.argument("run_file", metavar="RUN.json")
@click.option(
    "--workers",
    type=count(min=0),
    help="Loader workers per GPU process (a DALI pipeline's num_threads).",
)
@click.option(
    "--prefetch-factor",
    type=count(),
    help="Batches each DataLoader worker may hold (a DALI pipeline's prefetch_queue_depth).",
)
@click.option(
    "--in-order",
    type=click.Choice(["true", "false"]),
    help="Whether the DataLoader hands batches over in the sampler's order.",
)
@click.option("--cores", type=count(), help="CPU cores the loaders may use.")
@click.option(
    "--storage", metavar="CLASS|RATE", help="A storage class (see --catalog) or a rate: 2000MB/s."
)
@click.option("--gpus", type=count(), help="GPUs, one training process each.")
@click.option(
    "--cache-gb",
    type=finite_float(0, MAX_CACHE_GB),
    metavar="G",
    help="A RAM cache of G GB (10^9).",
)
@click.option(
    "--cache-order",
    type=click.Choice(["shuffled", "sequential", "static"]),
    help="How the cache is used: an LRU under a shuffled or sequential order, or a pinned "
    "subset. Default: the recorded loader's order (shuffled for a probe).",
)
@click.option("--pcie", metavar="GENxW", help="Host-to-GPU link per GPU, e.g. gen4x16.")
@click.option("--gpu-decode", is_flag=True, help="Decode images on the GPU (DALI's mixed decoder).")
@click.option(
    "--probe",
    "probe_file",
    metavar="PROBE.json",
    help="A probe of the storage a watched run read: storage follows its concurrency sweep "
    "at a new number of readers (with --workers or --gpus).",
)
@click.option(
    "--decode",
    type=click.Choice(["pillow", "dali-cpu"]),
    help="Decode on the CPU with another path that `probe --loader dali` measured.",
)
@catalog_option
@json_option
def command(
    run_file: str,
    workers: int | None,
    prefetch_factor: int | None,
    in_order: str | None,
    cores: int | None,
    storage: str | None,
    gpus: int | None,
    cache_gb: float | None,
    cache_order: str | None,
    pcie: str | None,
    gpu_decode: bool,
    decode: str | None,
    probe_file: str | None,
    catalog_path: str | None,
    json_path: str | None,
) -> None:
    check_outputs([("--json", json_path)], [run_file, probe_file, catalog_path])
    if pcie is not None:
        parse_pcie(pcie)  # a typo fails before the record is read
    # a class asked for must come from a catalog that loads; otherwise the catalog only
    # feeds the advice, which a broken file must not stop
    catalog = load_catalog(catalog_path) if storage else try_load_catalog(catalog_path)
    storage_class = storage_flag(storage, catalog) if storage else None
    change = Change(
        workers=workers,
        prefetch_factor=prefetch_factor,
        in_order=None if in_order is None else in_order == "true",
        cores=cores,
        storage=storage_class,
        gpus=gpus,
        cache_bytes=cache_gb * 1e9 if cache_gb is not None else None,
        cache_order=cast(CacheOrder | None, cache_order),
        pcie=pcie,
        gpu_decode=gpu_decode,
        decode=decode,
    )
    if probe_file and workers is None and gpus is None:
        raise BadInputError(
            "--probe scales storage to a new number of readers: give --workers or --gpus with it"
        )
    if change == Change(cache_order=change.cache_order):  # an order alone changes nothing
        raise BadInputError(
            "nothing to change: give at least one of --workers, --prefetch-factor, --in-order, "
            "--cores, --storage, --gpus, "
            "--cache-gb, --pcie, --gpu-decode, --decode"
        )
    rec = load_analysable(run_file)
    if in_order is not None and rec.watch is not None and rec.watch.settings.framework == "dali":
        raise BadInputError(
            "--in-order is a DataLoader setting: a DALI pipeline hands its batches over in order"
        )
    probe = RunRecord.load(probe_file) if probe_file else None
    out = whatif(rec, change, catalog, probe, os.path.basename(probe_file or ""))
    if json_path:
        write_record(out, json_path)
    if not writes_stdout(json_path):
        show(out, findings(out))

"""Size the hardware: how many GPUs each storage class keeps busy, and what binds.

From a saved run (its bytes per sample, CPU time per sample, GPU rate and cores) or from
numbers alone: for each storage class and each GPU count, the predicted GPU utilisation and
the binding resource; per class, the most GPUs kept at or above the target utilisation; the
CPU cores and RAM cache each configuration needs; and the cheapest balanced configuration.
Flags override what the run measured. From a distributed probe (torchrun ... -m ioprobe
probe), the storage it measured is sized across nodes: how many nodes of G GPUs it feeds
(G: --gpus, else the ranks the probe ran per node) and what binds the next one.

\b
Examples:
  ioprobe size run.json --gpus 1,2,4,8
  ioprobe size cluster.json --gpus 8 --nodes 12 --gpu-samples-per-s 2500
  ioprobe size --sample-bytes 110kB --gpu-samples-per-s 2500 --storage 2000MB/s,nvme-gen4
  ioprobe size run.json --gpus 8 --cost prices.toml --html sizing.html --md sizing.md
"""

from __future__ import annotations

from collections.abc import Callable

import click

from ioprobe.analysis.catalog import (
    MAX_CLASSES,
    Catalog,
    load_catalog,
    parse_bytes,
    parse_rate,
)
from ioprobe.analysis.cluster import cluster_figures
from ioprobe.analysis.cost import check_classes, load_costs
from ioprobe.analysis.mlperf import emulated, shipped_references, workload_sample_bytes
from ioprobe.analysis.scenario import dataset_bytes, recorded_gpus
from ioprobe.analysis.size import DEFAULT_GPU_COUNTS, MEASURED, size
from ioprobe.capacity import request_bytes
from ioprobe.cli._common import (
    MAX_COUNT,
    MAX_RATE,
    MAX_SECONDS,
    catalog_option,
    count,
    deliver,
    finite_float,
    load_analysable,
    output_options,
    plan_outputs,
    storage_flag,
)
from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord, SizeInputs, StorageClassInfo

# The most GPU counts one sizing compares: each is a column of the table, priced against
# every storage class
MAX_GPU_COUNTS = 128


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInputError(
            f"--gpus {text!r}: expected a comma-separated list such as 1,2,4,8"
        ) from None
    if not out:
        raise BadInputError(f"--gpus {text!r}: no GPU count given, e.g. 1,2,4,8")
    if min(out) < 1 or max(out) > MAX_COUNT:
        raise BadInputError(f"--gpus {text!r}: GPU counts must be from 1 to {MAX_COUNT:,}")
    if len(set(out)) > MAX_GPU_COUNTS:
        raise BadInputError(
            f"--gpus: {len(set(out)):,} GPU counts; at most {MAX_GPU_COUNTS}, each a column"
        )
    return sorted(set(out))


def _parsed(
    flag: str, text: str | None, parse: Callable[[str], float | None], expected: str
) -> float | None:
    """``text`` of ``flag`` parsed, None when not given, one line naming the flag if bad."""
    if text is None:
        return None
    value = parse(text)
    if value is None:
        raise BadInputError(f"{flag} {text!r}: expected {expected}")
    return value


def _bytes(flag: str, text: str | None) -> float | None:
    return _parsed(
        flag, text, parse_bytes, "a positive size up to 1e18 bytes such as 110kB or 4MiB"
    )


@click.command(help=__doc__)
@click.argument("run_file", metavar="[RUN.json]", required=False)
@click.option("--sample-bytes", metavar="B", help="Bytes read per sample, e.g. 110kB, 4MiB.")
@click.option(
    "--cpu-ms-per-sample",
    type=finite_float(0, MAX_SECONDS * 1e3),
    metavar="MS",
    help="CPU time per sample.",
)
@click.option(
    "--gpu-samples-per-s",
    type=finite_float(0, MAX_RATE, min_open=True),
    metavar="R",
    help="Samples/s one GPU trains on when data is always ready.",
)
@click.option("--gpus", "gpus_text", metavar="LIST", help="GPU counts per node, e.g. 1,2,4,8.")
@click.option(
    "--storage", "storage_text", metavar="LIST", help="Storage classes or rates, comma-separated."
)
@click.option(
    "--cores",
    type=finite_float(0, MAX_COUNT, min_open=True),
    metavar="N",
    help="CPU cores per node for the loaders (default: the run's usable cores; none: not limiting).",
)
@click.option(
    "--nodes",
    type=count(),
    default=1,
    show_default=True,
    metavar="N",
    help="Nodes, each with the GPU counts of --gpus (from a distributed probe: how those fare).",
)
@click.option("--nic", metavar="RATE", help="Each node's network limit, e.g. 12.5GB/s.")
@click.option(
    "--in-flight",
    type=count(),
    default=64,
    show_default=True,
    help="Reads in flight per node (loader workers x reads per worker).",
)
@click.option("--dataset-bytes", metavar="B", help="Dataset size, for the cache that would help.")
@click.option(
    "--target-utilization",
    type=finite_float(0, 1, min_open=True),
    metavar="U",
    help="The GPU utilisation a configuration must keep to count as balanced.  [default: 0.9]",
)
@click.option(
    "--workload",
    metavar="NAME",
    help="Size MLPerf Storage's emulation of a training workload (unet3d, resnet50, "
    "cosmoflow, retinanet) in its units: its sample size, step and AU threshold, in "
    "simulated accelerators.",
)
@click.option(
    "--accelerator",
    metavar="TYPE",
    help="The simulated accelerator of --workload: A100, H100 or B200 (default: H100 where "
    "the workload has it).",
)
@click.option(
    "--cost",
    "cost_path",
    metavar="FILE",
    help="A TOML of prices (per GPU, per core, per storage class): each configuration is "
    "priced and the cheapest balanced one is the cheapest.",
)
@catalog_option
@output_options
def command(
    run_file: str | None,
    sample_bytes: str | None,
    cpu_ms_per_sample: float | None,
    gpu_samples_per_s: float | None,
    gpus_text: str | None,
    storage_text: str | None,
    cores: float | None,
    nodes: int,
    nic: str | None,
    in_flight: int,
    dataset_bytes: str | None,
    target_utilization: float | None,
    workload: str | None,
    accelerator: str | None,
    cost_path: str | None,
    catalog_path: str | None,
    json_path: str | None,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
) -> None:
    inputs = [run_file, cost_path, catalog_path]
    plan = plan_outputs(json_path, html_path, md_path, trace_path, outputs, inputs)
    if plan["trace"]:
        raise BadInputError(
            f"{plan['trace'][0]}: a sizing has no timeline to trace; write .html, .md or .json"
        )
    catalog = load_catalog(catalog_path)
    gpu_counts = _int_list(gpus_text) if gpus_text is not None else list(DEFAULT_GPU_COUNTS)
    classes = _classes(storage_text, catalog)
    cpu_s = cpu_ms_per_sample / 1e3 if cpu_ms_per_sample is not None else None
    if workload is not None or accelerator is not None:
        _no_own_figures(run_file, sample_bytes, gpu_samples_per_s, target_utilization)
        base = None
        inp = _emulation(workload, accelerator, cpu_s, cores)
        inp.dataset_bytes = _bytes("--dataset-bytes", dataset_bytes)
    else:
        base = load_analysable(run_file) if run_file else None
        inp = _inputs(
            base,
            sample_bytes=_bytes("--sample-bytes", sample_bytes),
            cpu_s=cpu_s,
            gpu_rate=gpu_samples_per_s,
            cores=cores,
            dataset_bytes=_bytes("--dataset-bytes", dataset_bytes),
        )
        inp.target_utilization = target_utilization or 0.9
    inp.nodes = nodes
    inp.nic_bytes_per_s = _rate("--nic", nic)
    inp.in_flight = in_flight
    if cores is None and cpu_ms_per_sample is None:
        _node_cpu(inp, base)
    fit_gpus = gpu_counts if gpus_text is not None else None
    costs = load_costs(cost_path) if cost_path else None
    if costs is not None:
        check_classes(costs, {*catalog, *(c.name for c in classes), MEASURED})
    refs = shipped_references()
    deliver(size(inp, classes, gpu_counts, base, fit_gpus, costs=costs, references=refs), plan)


def _no_own_figures(run_file: str | None, *flags: object) -> None:
    """--workload sets what a run or these flags would: one line naming those given."""
    names = ("RUN.json", "--sample-bytes", "--gpu-samples-per-s", "--target-utilization")
    given = [n for n, v in zip(names, (run_file, *flags), strict=True) if v is not None]
    if given:
        raise BadInputError(
            "--workload sizes MLPerf Storage's emulation, whose sample size, step and AU "
            f"threshold are its own: drop {', '.join(given)}"
        )


def _emulation(
    workload: str | None, accelerator: str | None, cpu_s: float | None, cores: float | None
) -> SizeInputs:
    """The inputs of an MLPerf Storage workload's emulation on its simulated accelerator: a
    sample of its record length, one accelerator's appetite its batch over its emulated
    step, the target its AU threshold; the hosts' CPU only where the flags give it."""
    if workload is None:
        raise BadInputError(
            "--accelerator names the simulated accelerator of an MLPerf Storage workload: "
            "give --workload too"
        )
    wl = emulated(workload, accelerator)
    where = f"MLPerf Storage {wl.name} ({wl.accelerator})"
    src = {
        "sample_bytes": f"{where}: record length",
        "gpu_samples_per_s": (
            f"{where}: batch {wl.batch_size} / computation_time {wl.compute_seconds:g} s"
        ),
    }
    src |= {k: "given" for k, v in (("cpu_seconds_per_sample", cpu_s), ("cores", cores)) if v}
    return SizeInputs(
        sample_bytes=workload_sample_bytes(wl.name),
        gpu_samples_per_s=wl.batch_size / wl.compute_seconds,
        cpu_seconds_per_sample=cpu_s,
        cores=cores,
        target_utilization=wl.au_threshold,
        sources=src,
        workload=wl,
    )


def _classes(text: str | None, catalog: Catalog) -> list[StorageClassInfo]:
    """The storage classes or rates of --storage, else every class in the catalog."""
    specs = [s for s in text.split(",") if s.strip()] if text is not None else list(catalog)
    if not specs:
        raise BadInputError(f"--storage {text!r}: no storage class or rate given")
    if text and len(specs) > MAX_CLASSES:
        raise BadInputError(f"--storage: {len(specs):,} classes; at most {MAX_CLASSES}")
    return [storage_flag(s, catalog) for s in specs]


def _rate(flag: str, text: str | None) -> float | None:
    return _parsed(flag, text, parse_rate, "a positive rate up to 1e18 bytes/s such as 12.5GB/s")


def _inputs(
    base: RunRecord | None,
    *,
    sample_bytes: float | None,
    cpu_s: float | None,
    gpu_rate: float | None,
    cores: float | None,
    dataset_bytes: float | None,
) -> SizeInputs:
    """Each figure from its flag, else from the run, with where it came from."""
    recorded = _recorded(base) if base is not None else {}
    src: dict[str, str] = {}
    b = _pick(src, "sample_bytes", sample_bytes, recorded)
    r = _pick(src, "gpu_samples_per_s", gpu_rate, recorded)
    c = _pick(src, "cpu_seconds_per_sample", cpu_s, recorded)
    n = _pick(src, "cores", cores, recorded)
    d = _pick(src, "dataset_bytes", dataset_bytes, recorded)
    if b is None:
        raise BadInputError(
            "bytes per sample unknown: give --sample-bytes (or a run whose reads were metered)"
        )
    if r is None:
        raise BadInputError(
            "GPU rate unknown: give --gpu-samples-per-s (or a run with a GPU stage)"
        )
    inp = SizeInputs(
        sample_bytes=b,
        gpu_samples_per_s=r,
        cpu_seconds_per_sample=c,
        cores=n,
        dataset_bytes=d,
        sources=src,
    )
    if base is not None and base.dataset.samples is not None and sample_bytes is None:
        # packed samples are read a file at a time: storage latency is paid per file
        inp.request_bytes = request_bytes(base.dataset)
        inp.sources["request_bytes"] = (
            f"dataset: {base.dataset.layout}, read a file at a time ({base.dataset.files:,} "
            f"files of {base.dataset.samples:,} samples)"
        )
    return inp


def _node_cpu(inp: SizeInputs, base: RunRecord | None) -> None:
    """A distributed probe's own per-node CPU figure, where neither --cores nor
    --cpu-ms-per-sample overrides it: the slowest node's ranks decoding at once."""
    figures = cluster_figures(base) if base is not None else None
    if figures is not None and figures.node_cpu_samples_per_s:
        inp.node_cpu_samples_per_s = figures.node_cpu_samples_per_s
        inp.sources["node_cpu_samples_per_s"] = "distributed.ranks (the slowest node's, summed)"


def _recorded(base: RunRecord) -> dict[str, tuple[float | None, str]]:
    """Each figure as the run recorded it (None where it did not), and where in the record."""
    ds, st = base.dataset, base.stages
    gpu_cap = st.gpu.capacity_samples_per_s
    cores: float | None = st.cpu.usable_cores
    where = "stages.cpu.usable_cores"
    figures = cluster_figures(base)
    if figures is not None:
        # a distributed probe's CPU stage sums every node's: a node is what a sizing repeats
        cores, where = figures.node_cores, "distributed.ranks (one node's cores)"
    total = dataset_bytes(base) if ds.files and ds.sample_bytes_mean else None
    return {
        "sample_bytes": (ds.sample_bytes_mean, "dataset.sample_bytes_mean"),
        "gpu_samples_per_s": (
            gpu_cap / recorded_gpus(base) if gpu_cap else None,
            "stages.gpu (per GPU)",
        ),
        "cpu_seconds_per_sample": (
            st.cpu.cpu_seconds_per_sample,
            "stages.cpu.cpu_seconds_per_sample",
        ),
        "cores": (float(cores) if cores else None, where),
        "dataset_bytes": (total, "dataset (samples x mean size)"),
    }


def _pick(
    src: dict[str, str],
    name: str,
    flag: float | None,
    recorded: dict[str, tuple[float | None, str]],
) -> float | None:
    """The figure ``name`` from its flag, else from the run where it recorded one; notes in
    ``src`` where it came from."""
    value, where = recorded.get(name, (None, ""))
    if flag is not None:
        src[name] = "given"
        return flag
    if value:
        src[name] = where
        return value
    return None

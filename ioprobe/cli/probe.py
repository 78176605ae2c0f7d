"""Probe a dataset on its own: read it cold and warm, decode it, and name the bottleneck.

TARGET is a local file, directory or glob, or an fsspec URL (s3://, http(s)://, memory://,
file://). With no TARGET, ioprobe probes a built-in sample dataset of 2,000 JPEGs.

On a machine with a CUDA device the probe also times host-to-device copies (64 KiB to 256 MiB,
pinned and pageable, both directions) and reads the PCIe link from NVML; --pcie-only does
that alone, with no dataset.

--time-budget counts from the command's start. Where the costs no phase can share (the
command's start, CUDA's start, DALI's pipeline builds) and the phases' least times cannot
fit it plus its margin, the probe says so in one line before it measures anything, with the
time it will take instead.

Under torchrun or srun (``torchrun --nproc-per-node N -m ioprobe probe TARGET``) the ranks
probe TARGET together over a gloo group: a curve of aggregate read bandwidth against the
number of ranks reading at once shows where shared storage saturates, every rank decodes with
its share of its node's cores, and rank 0 alone reports and writes one record for the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from ioprobe.analysis import finalize
from ioprobe.analysis.catalog import try_load_catalog
from ioprobe.cli._common import (
    MAX_RATE,
    MAX_SECONDS,
    count,
    deliver,
    finite_float,
    output_options,
    plan_outputs,
)
from ioprobe.collect.budget import PhasePlan, cost_words
from ioprobe.collect.distributed import detect
from ioprobe.collect.distributed_probe import RANK_TIMEOUT_S, DistributedProbe
from ioprobe.collect.group import open_group
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.progress import Reporter, RichReporter, make_reporter
from ioprobe.collect.workers import TrackerGone
from ioprobe.errors import (
    LIMIT_ERRNOS,
    WRITE_ERRNOS,
    BadInputError,
    Interrupted,
    RankLostError,
    Terminated,
    TermSignal,
    limits,
)
from ioprobe.record import RankInfo, RunRecord


@click.command(help=__doc__)
@click.argument("target", required=False)
@output_options
@click.option(
    "--time-budget",
    type=finite_float(0, MAX_SECONDS, min_open=True),
    default=60.0,
    show_default=True,
    metavar="S",
    help="Seconds for the whole probe.",
)
@click.option(
    "--cold/--warm",
    "cold",
    default=None,
    help="Measure only cold (evicted) or only warm (cached) reads. Default: both.",
)
@click.option(
    "--loader",
    default="auto",
    show_default=True,
    help="auto, raw, image, numpy, dali, or module:function (a callable taking bytes).",
)
@click.option(
    "--workers", type=count(), help="Decode workers in the end-to-end run (default: usable cores)."
)
@click.option(
    "--batch-size", type=count(), help="Samples per batch in the end-to-end run (default 32)."
)
@click.option(
    "--compute-ms-per-batch",
    type=finite_float(0, MAX_SECONDS * 1e3),
    metavar="MS",
    help="Emulate an accelerator that computes MS per batch.",
)
@click.option(
    "--gpu-samples-per-s",
    type=finite_float(0, MAX_RATE, min_open=True),
    metavar="R",
    help="Emulate an accelerator that consumes R samples/s.",
)
@click.option("--gpus", type=count(), default=1, show_default=True, help="GPUs the pipeline feeds.")
@click.option(
    "--samples-per-file",
    type=count(),
    metavar="N",
    help="Samples each data file holds (shards, chunks, tables), where the format's own "
    "index or headers do not say. Default: counted from tar headers, an MDS or litdata "
    "index.json, Parquet or Arrow metadata; else one per file.",
)
@click.option(
    "--pcie-only",
    is_flag=True,
    help="Only the host-to-device probe and the PCIe link (needs a CUDA device; no TARGET).",
)
@click.option(
    "--rank-timeout",
    type=finite_float(0, MAX_SECONDS, min_open=True),
    default=RANK_TIMEOUT_S,
    show_default=True,
    metavar="S",
    help="Under torchrun or srun: seconds a rank waits past a phase's planned end for the "
    "others before it reports them lost.",
)
@click.option(
    "--device-limit",
    is_flag=True,
    help="Also read the files directly (O_DIRECT, past the page cache) at queue depths 1-64 "
    "in small and large blocks: what the device can do beside what the loader's reads get "
    "(local files).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
def command(
    target: str | None,
    json_path: str | None,
    time_budget: float,
    cold: bool | None,
    loader: str,
    workers: int | None,
    batch_size: int | None,
    compute_ms_per_batch: float | None,
    gpu_samples_per_s: float | None,
    gpus: int,
    samples_per_file: int | None,
    pcie_only: bool,
    rank_timeout: float,
    device_limit: bool,
    quiet: bool,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
) -> None:
    started = _command_started()
    plan = plan_outputs(json_path, html_path, md_path, trace_path, outputs)
    info = detect()  # a launcher's environment that makes no sense fails here, in one line
    reporter = make_reporter(quiet or (info is not None and info.rank != 0))
    passes = ["cold", "warm"] if cold is None else (["cold"] if cold else ["warm"])
    opts = ProbeOptions(
        target=_target(target, pcie_only, reporter),
        passes=passes,
        loader=loader,
        time_budget_s=time_budget,
        workers=workers,
        batch_size=batch_size,
        compute_ms_per_batch=compute_ms_per_batch,
        gpu_samples_per_s=gpu_samples_per_s,
        gpus=gpus,
        samples_per_file=samples_per_file,
        pcie_only=pcie_only,
        device_limit=device_limit,
    )
    if info is not None:
        _distributed(opts, info, reporter, plan, rank_timeout)
        return
    opts.started_at = started
    opts.on_plan = _plan_teller(reporter)
    _probe(Probe(opts, reporter), reporter, plan)


def _probe(probe: Probe, reporter: Reporter, plan: dict[str, list[str]]) -> None:
    """Run the probe and deliver its record; on Ctrl-C, or a write of ours the host refused
    (a full TMPDIR), deliver what the phases that ended measured."""
    stop: KeyboardInterrupt | None = None
    refused: OSError | None = None
    try:
        measured = probe.run()
    except KeyboardInterrupt as exc:
        stop = exc  # handled once the progress display has closed
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS | LIMIT_ERRNOS or probe.partial is None:
            raise  # cli.main makes a write error one line; anything else is a bug
        refused = exc
    finally:
        reporter.close()
    if stop is not None:
        raise _stopped(stop, probe.partial, plan)
    if refused is not None and probe.partial is not None:
        deliver(finalize(probe.partial, try_load_catalog()), plan)
        why = (
            refused.strerror
            if isinstance(refused, TrackerGone)
            else f"{refused.strerror or refused}: {limits()}"
            if refused.errno in LIMIT_ERRNOS
            else f"a write failed ({refused.strerror or refused}; a full TMPDIR?)"
        )
        raise BadInputError(
            f"{probe.partial.interrupted}: {why}; what was measured before is reported"
        )
    deliver(finalize(measured, try_load_catalog()), plan)


def _command_started() -> float:
    """When the command started: the context's object, set by ``cli.main`` from the
    process's start; now where the command runs without it."""
    obj = click.get_current_context().find_root().obj
    return float(obj) if isinstance(obj, float) else time.perf_counter()


def budget_statement(plan: PhasePlan) -> str | None:
    """One line, before anything is measured, where the budget cannot hold: what went before
    the first phase, the phases' least time, what the probe will take instead, and the
    budget at which every phase gets its share; None where it holds."""
    if plan.holds:
        return None
    return (
        f"--time-budget {plan.budget_s:g} s cannot hold on this host: "
        f"{cost_words(plan.fixed_s)} went before the first phase, which no phase can share, "
        f"and the phases need at least {plan.least_s:.1f} s; expect about "
        f"{_about(plan.expected_s)} s (--time-budget {plan.full_share_budget_s:g} or more "
        "gives every phase its planned share)"
    )


def _about(seconds: float) -> str:
    """A duration as the statement gives it: whole seconds from 10 s, tenths below."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"


def _plan_teller(reporter: Reporter) -> Callable[[PhasePlan], None]:
    """What the probe calls with its plan: the statement, where there is one, on stderr
    (above the progress display on a terminal; with -q too)."""

    def tell(plan: PhasePlan) -> None:
        line = budget_statement(plan)
        if line is None:
            return
        if isinstance(reporter, RichReporter):
            reporter.say(f"ioprobe: {line}")
        else:
            click.echo(f"ioprobe: {line}", err=True)

    return tell


def _distributed(
    opts: ProbeOptions,
    info: RankInfo,
    reporter: Reporter,
    plan: dict[str, list[str]],
    rank_timeout: float,
) -> None:
    """The probe across the ranks: rank 0 writes the job's one record (what was measured,
    where a rank was lost or the probe stopped); the others write nothing."""
    opts.validate()  # every rank checks its flags before the ranks meet
    stop: KeyboardInterrupt | None = None
    lost: RankLostError | None = None
    measured: RunRecord | None = None
    probe: DistributedProbe | None = None
    group = open_group(info, max(rank_timeout, opts.time_budget_s))
    try:
        probe = DistributedProbe(opts, info, group, reporter, rank_timeout)
        measured = probe.run()
    except RankLostError as exc:
        lost = exc
    except KeyboardInterrupt as exc:
        stop = exc  # handled once the progress display has closed
    finally:
        reporter.close()
        group.close()
    if stop is not None:
        raise _stopped(stop, probe.partial if probe else None, plan)
    if lost is not None:
        if probe is None or probe.partial is None:
            raise lost
        deliver(finalize(probe.partial, try_load_catalog()), plan)
        raise RankLostError(f"{lost}; what was measured before is reported", lost.missing)
    if measured is not None:
        deliver(finalize(measured, try_load_catalog()), plan)


def _stopped(
    exc: KeyboardInterrupt, partial: RunRecord | None, plan: dict[str, list[str]]
) -> Interrupted:
    """Ctrl-C or SIGTERM during the probe: the outputs asked for, from what was measured
    (the record says it is incomplete), and the error that exits 130 or 143."""
    error = Terminated if isinstance(exc, TermSignal) else Interrupted
    word = "terminated" if error is Terminated else "interrupted"
    if partial is None:
        return error(word)  # nothing measured yet: nothing written
    said = f"{word} during {partial.interrupted}; what was measured before is reported"
    try:
        deliver(finalize(partial, try_load_catalog()), plan)
    except BadInputError as exc:
        # an output that failed (the summary on a terminal that hung up and sent the
        # SIGHUP) is said, and the exit stays the signal's: 130 or 143, not 2
        return error(f"{said}, but: {exc}")
    return error(said)


def _target(target: str | None, pcie_only: bool, reporter: Reporter) -> str:
    """What to probe: TARGET, else the built-in sample dataset (fetched on first use); nothing
    with --pcie-only."""
    if pcie_only and target is not None:
        raise BadInputError("--pcie-only takes no TARGET: it measures the link alone")
    if target is None and not pcie_only:
        from ioprobe.collect.sample_data import ensure_sample

        reporter.phase("sample dataset")
        root = ensure_sample(on_progress=lambda i, n: reporter.update(i / n, f"{i}/{n} images"))
        return str(root)
    return target or ""

"""Find the DataLoader settings that feed the GPU fastest, measured on your own script.

  ioprobe tune [--trial-batches N] [--trials K] [--json F] [--md F] -- python train.py ARGS...

Runs the unchanged script several times, each a short trial: the first as it is, the rest
with the DataLoader's num_workers, prefetch_factor and in_order overridden (every
DataLoader with workers that the script iterates). A trial stops the script once its loader
has delivered its workers' first round and N more batches (--trial-batches, default 200): at
the loader's next request the script exits as on sys.exit(0), so its finally blocks run.

The settings tried after the first come from replaying the first trial's batches under every
nearby setting (workers sharing the cores, slow samples holding the queue, reads sharing the
storage as measured): the advised one, the fastest predicted, and their neighbours, never one
past the host's free memory. It prints a table of the trials (setting, predicted, measured,
memory), the measured best and the change to make, and how far the predictions were off.

Each trial runs the script's own code up to that point: what it writes (logs, checkpoints,
a first evaluation) it writes in every trial. Point it at a scratch output directory, or
have it read IOPROBE_TRIAL (set only in a trial) and skip its side effects there.

--in-run: the trials run inside one run of the script, which trains to its end as it would
unwatched. The first epoch of the first DataLoader long enough for them is cut into windows
of batches, one per setting, each given the next part of the epoch's own order: the script
sees every sample of the epoch once, in its order (but within a window with
in_order=False), and the settings return to the script's own after the trials.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
from pathlib import Path

import click

from ioprobe.analysis import finalize_watch, loader_sim
from ioprobe.analysis.catalog import try_load_catalog
from ioprobe.analysis.loader_sim import Prediction, Setting
from ioprobe.analysis.queueing import MIN_BATCHES
from ioprobe.analysis.report import findings
from ioprobe.analysis.tune import outcome, plan, trial_of
from ioprobe.cli._common import (
    attempt,
    check_outputs,
    command_files,
    count,
    write_record,
    write_text,
)
from ioprobe.cli.run import (
    _check_command,
    _load_saved,
    _run_watched,
    _signal_name,
    hook_skipped,
)
from ioprobe.errors import BadInputError
from ioprobe.loaders.run_hook import TRIAL_ENV
from ioprobe.outputs import writes_stdout
from ioprobe.record import RunRecord, TuneTrial
from ioprobe.redact import console
from ioprobe.render import markdown
from ioprobe.render.tune_text import tune_lines

MAX_TRIALS = 12
# a trial whose script died of a signal ioprobe passes on to it (run._Relay): the user
# interrupted the tuning, not the script its trial
_INTERRUPTS = {-signal.SIGINT, -signal.SIGTERM, -signal.SIGHUP}


@click.command(help=__doc__, context_settings={"ignore_unknown_options": True})
@click.option(
    "--trial-batches",
    type=count(min=MIN_BATCHES),
    default=200,
    show_default=True,
    help="Batches each trial measures after its workers' first round.",
)
@click.option(
    "--trials",
    type=click.IntRange(1, MAX_TRIALS),
    default=4,
    show_default=True,
    help="Settings tried after the script's own.",
)
@click.option(
    "--json",
    "json_path",
    metavar="FILE",
    help="Write the first trial's record, with every trial, as JSON.",
)
@click.option(
    "--md", "md_path", metavar="FILE", help="Write the report and the trials as Markdown."
)
@click.option(
    "--in-run",
    is_flag=True,
    help="Try the settings in windows of one run's first epoch; the script then trains to its end.",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    trial_batches: int,
    trials: int,
    json_path: str | None,
    md_path: str | None,
    in_run: bool,
    cmd: tuple[str, ...],
) -> None:
    check_outputs([("--json", json_path), ("--md", md_path)], command_files(cmd))
    if any(writes_stdout(p) for p in (json_path, md_path) if p):
        raise BadInputError("ioprobe tune: stdout is the script's; give the outputs file names")
    _check_command(cmd[0])
    unhooked = hook_skipped(cmd)
    if unhooked is not None:  # no trial could set or measure anything
        raise BadInputError(
            f"ioprobe tune: python {unhooked} keeps ioprobe's hook from loading; run the script "
            f"without {unhooked}"
        )
    if in_run:
        first = _tune_in_run(cmd, trial_batches, trials)
    else:
        first = _tune_by_runs(cmd, trial_batches, trials)
    assert first.tune is not None
    err = console(stderr=True)
    err.print("")
    for line in tune_lines(first.tune):
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    # each output tried whatever became of the other (a full disk costs that one alone)
    failed: list[str] = []
    if json_path:
        attempt(failed, "--json", write_record, first, json_path)
    if md_path:
        text = attempt(failed, "--md", lambda: markdown.render(first, findings(first)))
        if text is not None:
            attempt(failed, "--md", write_text, md_path, text, "--md")
    if failed:
        raise BadInputError("; ".join(failed))
    if first.tune.interrupted_by:  # ended by a signal ioprobe passed on: as the script would
        sys.exit(128 + first.tune.interrupted_by)
    script_code = first.tune.trials[0].exit_code if first.tune.trials else None
    if in_run and script_code:
        # the one run is the script's: its exit status passes on, as under ioprobe run (a
        # script a signal ended gives 128 + the signal, as a shell reports it)
        sys.exit(128 - script_code if script_code < 0 else script_code)
    if first.tune.best is None:
        sys.exit(1)


def _tune_by_runs(cmd: tuple[str, ...], trial_batches: int, trials: int) -> RunRecord:
    """Each setting a run of its own, stopped once measured: the first trial's record, with
    the trials."""
    err = console(stderr=True)
    err.print(f"ioprobe tune: trial 1 of up to {trials + 1}: the script as it is")
    code, first = _trial(cmd, None, trial_batches)
    if code in _INTERRUPTS:
        err.print(
            f"ioprobe tune: interrupted ({_signal_name(-code)}) in trial 1: nothing to compare"
        )
        sys.exit(128 - code)
    if first is None:
        # a script killed mid-trial saved no record, whatever it iterated: say how it ended
        ended = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        raise BadInputError(
            f"ioprobe tune: no DataLoader with workers was recorded in the first trial "
            f"(the script: {ended}): nothing to tune"
        )
    base = loader_sim.recorded_setting(first)
    if base is None:
        raise BadInputError(
            "ioprobe tune: the script's loader loads in its main process (num_workers=0) "
            "or is not a DataLoader: give it workers to tune"
        )
    chosen = plan(first, trials)
    if not chosen:
        raise BadInputError(
            "ioprobe tune: the first trial's batches could not be replayed (no steady "
            f"epoch of {MIN_BATCHES} batches past the first round): give a longer epoch or "
            "more --trial-batches"
        )
    rows = [trial_of(base, first, None)]
    rows[0].exit_code = code
    for k, p in enumerate(chosen, 2):
        err.print(f"ioprobe tune: trial {k} of {len(chosen) + 1}: {_label(p.setting)}")
        rows.append(_measure(cmd, p, trial_batches))
        code = rows[-1].exit_code or 0
        if code in _INTERRUPTS:  # Ctrl-C, a kill: stop here, with what was measured
            rows[-1].measured_samples_per_s = None
            rows[-1].note = f"interrupted ({_signal_name(-code)})"
            first.tune = outcome(rows, trial_batches)
            first.tune.notes = [
                f"Interrupted ({_signal_name(-code)}) in trial {k}: the trials after it were "
                "not run"
            ]
            first.tune.interrupted_by = -code
            return first
    first.tune = outcome(rows, trial_batches)
    return first


def _tune_in_run(cmd: tuple[str, ...], trial_batches: int, trials: int) -> RunRecord:
    """Every setting a window of one run's first epoch: the first window's record, with the
    trials."""
    err = console(stderr=True)
    err.print(
        f"ioprobe tune: up to {trials + 1} trials in the first epoch of one run; the script "
        "then runs to its end"
    )
    found: list[RunRecord] = []
    notes: list[str] = []

    def read(folder: Path) -> None:
        windows: dict[int, list[tuple[int, Path]]] = {}
        for path in folder.iterdir():
            m = _TRIAL.fullmatch(path.name)
            if m:
                windows.setdefault(int(m[1]), []).append((int(m[2]), path))
            elif _NOTES.fullmatch(path.name):
                with contextlib.suppress(OSError, ValueError, TypeError):
                    notes.extend(str(n) for n in json.loads(path.read_text())["notes"])
        if len(windows) > 1:
            notes.append(f"{len(windows)} processes ran trials (ranks): the first one's are shown")
        for _pid, paths in sorted(windows.items())[:1]:
            for _k, path in sorted(paths):
                rec = _load_saved(path)
                if rec is not None:
                    found.append(rec)

    plan_env = {"in_run": True, "batches": trial_batches, "trials": trials}
    code, _runs, _made = _run_watched(cmd, extra_env={TRIAL_ENV: json.dumps(plan_env)}, also=read)
    if not found and code in _INTERRUPTS:  # a signal ioprobe passed on ended the one run
        err.print(
            f"ioprobe tune --in-run: interrupted ({_signal_name(-code)}) before a trial ended: "
            "nothing to compare"
        )
        sys.exit(128 - code)
    if not found:
        why = "; ".join(notes) or "it iterated no DataLoader with workers"
        raise BadInputError(
            f"ioprobe tune --in-run: no trial ran (the script exited {code}): {why}. Lower "
            "--trial-batches or --trials, or run the trials as runs of their own (without "
            "--in-run)"
        )
    catalog = try_load_catalog()
    judged = [finalize_watch(r, catalog) for r in found]
    first = judged[0]
    base = loader_sim.recorded_setting(first)
    if base is None:
        raise BadInputError("ioprobe tune --in-run: the first window delivered no batches")
    predicted = {p.setting: p for p in plan(first, trials)}
    rows = [trial_of(base, first, None)]
    rows[0].exit_code = code
    for rec in judged[1:]:
        setting = loader_sim.recorded_setting(rec) or base
        rows.append(trial_of(setting, rec, predicted.get(setting)))
    first.tune = outcome(rows, trial_batches)
    first.tune.in_run = True
    first.tune.notes = notes
    return first


def plan_in_run(record: RunRecord, trials: int) -> list[dict[str, int | bool]]:
    """The settings ``--in-run`` tries after the first window, as DataLoader arguments: the
    same plan as for trials by runs, judged in the script's process from the window's record
    (the hook there calls it)."""
    return [p.setting.overrides() for p in plan(finalize_watch(record, try_load_catalog()), trials)]


# the names the hook saves --in-run's windows under (loaders/run_hook.py)
_TRIAL = re.compile(r"trial-(\d+)-(\d+)\.json")
_NOTES = re.compile(r"trials-\d+\.json")


def _trial(
    cmd: tuple[str, ...], setting: Setting | None, batches: int
) -> tuple[int, RunRecord | None]:
    """Run the script as one trial: its exit code and the record of the loader with workers
    that delivered the most, or None where it iterated none."""
    overrides = setting.overrides() if setting is not None else {}
    plan_env = {"overrides": overrides, "batches": batches}
    got: list[int] = []
    code, runs, _made = _run_watched(cmd, extra_env={TRIAL_ENV: json.dumps(plan_env)}, got=got)
    runs = [r for r in runs if r.watch is not None and r.watch.settings.workers > 0]
    if got and code not in _INTERRUPTS:
        # the script did not die of it (it was ending, or it caught the signal and exited):
        # the stop was asked of ioprobe all the same; the trial's measurement stands
        code = -got[0]
    return code, runs[0] if runs else None


def _measure(cmd: tuple[str, ...], p: Prediction, batches: int) -> TuneTrial:
    code, rec = _trial(cmd, p.setting, batches)
    row = trial_of(p.setting, rec, p)
    row.exit_code = code
    if rec is None:
        row.note = f"no record: the script exited {code} before its loader ran"
    return row


def _label(s: Setting) -> str:
    return f"num_workers={s.workers}, prefetch_factor={s.prefetch_factor}, in_order={s.in_order}"

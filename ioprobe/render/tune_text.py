"""``ioprobe tune``'s trials as every renderer shows them: the table's columns and cells,
and the lines under it (the measured best, the change to make, the predictions' error)."""

from __future__ import annotations

from ioprobe import units
from ioprobe.analysis.tune import change_text, median_error, prediction_errors
from ioprobe.record import TuneData, TuneTrial

TUNE_COLUMNS: list[tuple[str, bool]] = [
    ("trial", True),
    ("num_workers", True),
    ("prefetch_factor", True),
    ("in_order", False),
    ("predicted samples/s", True),
    ("measured samples/s", True),
    ("error", True),
    ("memory", True),
    ("note", False),
]


def tune_cells(tune: TuneData, i: int) -> list[str]:
    """Trial ``i``'s row, in TUNE_COLUMNS order; the first is the script's own setting."""
    t = tune.trials[i]
    err = _error(t)
    note = "the setting as given" if i == 0 else t.note
    if i == tune.best:
        note = "measured best" + (f"; {note}" if note else "")
    return [
        str(i + 1),
        str(t.workers),
        str(t.prefetch_factor),
        str(t.in_order),
        units.samples_per_s(t.predicted_samples_per_s) if i else "-",
        units.samples_per_s(t.measured_samples_per_s),
        "-" if err is None else f"{err:+.0%}",
        units.memory(t.memory_bytes) if t.memory_bytes is not None else "-",
        note,
    ]


def _error(t: TuneTrial) -> float | None:
    if not t.predicted_samples_per_s or not t.measured_samples_per_s:
        return None
    return t.predicted_samples_per_s / t.measured_samples_per_s - 1.0


def tune_summary(tune: TuneData) -> list[str]:
    """The sentences under the table."""
    out: list[str] = []
    base = tune.trials[0].measured_samples_per_s if tune.trials else None
    if tune.best is None:
        return ["No trial delivered a record: nothing measured to compare."]
    best = tune.trials[tune.best]
    change = change_text(tune)
    if change is None and tune.interrupted_by:
        out.append(
            "Of the trials measured before the interruption, the script's own setting is the "
            f"fastest ({units.samples_per_s(best.measured_samples_per_s)} samples/s)."
        )
    elif change is None:
        out.append(
            f"The script's own setting is the measured best ({units.samples_per_s(best.measured_samples_per_s)} "
            "samples/s): nothing to change."
        )
    else:
        gain = (best.measured_samples_per_s or 0.0) / base if base else None
        out.append(
            f"Measured best: trial {tune.best + 1}, {units.samples_per_s(best.measured_samples_per_s)} "
            f"samples/s ({'-' if gain is None else f'{gain:.2f}x'} the script's own). "
            f"Change: {change}."
        )
    errors = prediction_errors(tune)
    med = median_error(tune)
    if errors and med is not None:
        worst = max(errors, key=abs)
        out.append(
            f"The replay's predictions: median error {units.percent(med)} over {len(errors)} "
            f"trial{'s' * (len(errors) != 1)}, worst {worst:+.0%}."
        )
    if tune.in_run:
        code = tune.trials[0].exit_code if tune.trials else None
        then = (
            "the script then trained to its end with its own setting, every sample of the "
            "epoch seen once"
            if not code
            else "the script then ran with its own setting and "
            + (f"was ended by signal {-code}" if code < 0 else f"exited {code}")
        )
        out.append(
            f"The trials were windows of the first epoch of one run, one after another, each "
            f"{tune.trial_batches:,} batches after its workers' first round; {then}."
        )
    else:
        out.append(
            f"Each trial measured {tune.trial_batches:,} batches after its workers' first round."
        )
    out.extend(n if n.endswith(".") else f"{n}." for n in tune.notes)
    return out


def tune_lines(tune: TuneData) -> list[str]:
    """The trials as plain text for a terminal: an aligned table, then the summary."""
    rows = [[name for name, _ in TUNE_COLUMNS]]
    rows += [tune_cells(tune, i) for i in range(len(tune.trials))]
    widths = [max(len(r[k]) for r in rows) for k in range(len(TUNE_COLUMNS))]
    lines = []
    for r in rows:
        cells = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, (_, num) in zip(r, widths, TUNE_COLUMNS, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return [*lines, "", *tune_summary(tune)]


__all__ = ["TUNE_COLUMNS", "tune_cells", "tune_lines", "tune_summary"]

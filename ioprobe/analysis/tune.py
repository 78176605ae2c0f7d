"""``ioprobe tune``'s judgement: which DataLoader settings to try, and what the trials say.

The first trial runs the script as it is; the loader replay (``loader_sim``) ranks every
setting from its batches, and ``plan`` picks the few worth a trial: the advised setting, the
fastest predicted if it is another (it may need more memory or workers than the advice
allows for a small gain), and the advised setting's neighbours (a worker count either side,
the other order), never one past the host's memory. ``outcome`` reads the trials: the
measured best, and how far the replay's predictions were from the measurements.
"""

from __future__ import annotations

import dataclasses
import statistics

from ioprobe.analysis import loader_sim
from ioprobe.analysis.loader_sim import Prediction, Setting
from ioprobe.record import RunRecord, TuneData, TuneTrial

# A setting within this share of the measured best is as good as it: the cheaper is named.
NEAR = 0.98


def plan(rec: RunRecord, trials: int) -> list[Prediction]:
    """Up to ``trials`` settings to try after the first trial ``rec``, with their predictions,
    the advised one first; empty where the record has nothing to replay."""
    base = loader_sim.recorded_setting(rec)
    ranked = [p for p in loader_sim.search(rec) if p.fits]
    if base is None or not ranked:
        return []
    by_setting = {p.setting: p for p in ranked}
    chosen: list[Prediction] = []

    def add(p: Prediction | None) -> None:
        if p is not None and p.setting != base and p not in chosen:
            chosen.append(p)

    advised = loader_sim.best(ranked, base)
    add(advised)
    add(ranked[0])
    anchor = advised.setting if advised is not None else base
    counts = sorted({p.setting.workers for p in ranked})
    i = counts.index(anchor.workers) if anchor.workers in counts else 0
    for w in (counts[max(i - 1, 0)], counts[min(i + 1, len(counts) - 1)]):
        add(by_setting.get(dataclasses.replace(anchor, workers=w)))
    add(by_setting.get(dataclasses.replace(anchor, in_order=not anchor.in_order)))
    for p in ranked:  # then the next best predicted, to fill the trials asked for
        add(p)
    return chosen[:trials]


def trial_of(setting: Setting, rec: RunRecord | None, predicted: Prediction | None) -> TuneTrial:
    """A trial's row: its setting, the replay's prediction, and what its record measured."""
    w = rec.watch if rec is not None else None
    return TuneTrial(
        workers=setting.workers,
        prefetch_factor=setting.prefetch_factor,
        in_order=setting.in_order,
        predicted_samples_per_s=predicted.samples_per_s if predicted is not None else None,
        measured_samples_per_s=rec.measured_samples_per_s if rec is not None else None,
        memory_bytes=predicted.memory_bytes if predicted is not None else None,
        batches=sum(e.batches for e in w.epochs) if w is not None else 0,
        note=("batch order varies run to run" if not setting.in_order else ""),
    )


def outcome(trials: list[TuneTrial], trial_batches: int) -> TuneData:
    """The trials with the measured best named: the one that asks least of the host among
    those within NEAR of the fastest."""
    measured = [t.measured_samples_per_s or 0.0 for t in trials]
    top = max(measured, default=0.0)
    best = None
    if top > 0:
        near = [i for i, m in enumerate(measured) if m >= NEAR * top]
        best = min(near, key=lambda i: _cost(trials[i]))
    return TuneData(trials=trials, trial_batches=trial_batches, best=best)


def _cost(t: TuneTrial) -> tuple[int, int, int]:
    return Setting(t.workers, t.prefetch_factor, t.in_order).cost()


def prediction_errors(tune: TuneData) -> list[float]:
    """Each predicted trial's error: predicted over measured, less one."""
    return [
        t.predicted_samples_per_s / t.measured_samples_per_s - 1.0
        for t in tune.trials[1:]
        if t.predicted_samples_per_s and t.measured_samples_per_s
    ]


def median_error(tune: TuneData) -> float | None:
    """The median absolute prediction error over the trials the replay predicted."""
    errors = [abs(e) for e in prediction_errors(tune)]
    return statistics.median(errors) if errors else None


def change_text(tune: TuneData) -> str | None:
    """The change to make, as the user writes it: ``DataLoader(..., num_workers=6)``; None
    where the first trial (the script as it is) is the best or nothing was measured."""
    if tune.best is None or tune.best == 0 or not tune.trials:
        return None
    base, best = tune.trials[0], tune.trials[tune.best]
    parts = [
        f"{name}={getattr(best, attr)}"
        for name, attr in (
            ("num_workers", "workers"),
            ("prefetch_factor", "prefetch_factor"),
            ("in_order", "in_order"),
        )
        if getattr(best, attr) != getattr(base, attr)
    ]
    return f"DataLoader(..., {', '.join(parts)})" if parts else None


__all__ = ["change_text", "median_error", "outcome", "plan", "prediction_errors", "trial_of"]

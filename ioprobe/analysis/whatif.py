"""What-if records: a run's pipeline re-modelled with some resources changed.

``whatif(rec, change)`` is what ``ioprobe whatif`` prints and saves: the record's stages under
the change (``ioprobe.analysis.scenario.evaluate``), the new verdict and advice, and the run
it started from. Applied to a what-if record, the changes compose on the original run.
"""

from __future__ import annotations

import dataclasses

from ioprobe.analysis.catalog import Catalog
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.scenario import base_of, evaluate, merge, split_base
from ioprobe.analysis.verdict import finalize
from ioprobe.record import Change, RunRecord, WhatIfData


def whatif(rec: RunRecord, change: Change, catalog: Catalog | None = None) -> RunRecord:
    """A ``whatif`` record: ``rec`` with ``change`` applied, its verdict and recommendations
    recomputed (``catalog``: the storage classes the advice may suggest)."""
    sc = evaluate(rec, change)
    base, before = split_base(rec)
    was = pipeline_model(base.stages)  # the verdict as this version of the model sees it
    judged = dataclasses.replace(
        base, bottleneck=was.bottleneck, predicted_samples_per_s=was.predicted_samples_per_s
    )
    f = sc.findings
    gpu_cap = f.capacities["gpu"]
    out = dataclasses.replace(
        base,
        kind="whatif",
        stages=sc.stages,
        measured_samples_per_s=None,
        gpu_idle_fraction=(1.0 - f.predicted_samples_per_s / gpu_cap) if gpu_cap else None,
        gpu_idle_method="predicted: 1 - delivered / GPU capacity" if gpu_cap else None,
        recommendations=[],
        pipeline=None,
        whatif=WhatIfData(
            **base_of(judged),
            change=merge(before, change),
            deltas=list(sc.deltas),
            assumptions=list(sc.assumptions) + list(f.assumptions),
        ),
        notes=list(base.notes),
    )
    return finalize(out, catalog)


__all__ = ["whatif"]

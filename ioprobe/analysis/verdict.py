"""A record's verdict: the bottleneck, the rate the pipeline model predicts, and the advice."""

from __future__ import annotations

import dataclasses

from ioprobe.analysis.catalog import Catalog
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.pcie import degraded_link_rule, low_efficiency_rule
from ioprobe.analysis.recommend import recommend
from ioprobe.record import RunRecord


def finalize(rec: RunRecord, catalog: Catalog | None = None) -> RunRecord:
    """Fill the record's verdict fields (bottleneck, predicted rate, recommendations);
    ``catalog`` is the storage classes the advice may suggest (default: the shipped ones).

    A record with no stage capacity at all is the link alone (``probe --pcie-only``): it has
    no pipeline to model, only the link's own advice.
    """
    if not any(rec.stages.capacities().values()):
        done = dataclasses.replace(rec, bottleneck="pcie", predicted_samples_per_s=0.0)
        done.recommendations = degraded_link_rule(done, None) + low_efficiency_rule(done, None)
        return done
    pf = pipeline_model(rec.stages)
    done = dataclasses.replace(
        rec, bottleneck=pf.bottleneck, predicted_samples_per_s=pf.predicted_samples_per_s
    )
    done.recommendations = recommend(done, pf, catalog)
    return done


def finalize_watch(rec: RunRecord, catalog: Catalog | None = None) -> RunRecord:
    """A watched run's verdict, once the record has something to model: a loader that
    delivered nothing, or whose loader side went unmeasured (no CPU stage: its workers were
    started before the watch), is returned as measured. The GPU stage alone would name
    itself the bottleneck whatever the GPU waited."""
    if rec.dataset.files and rec.stages.cpu.capacity_samples_per_s is not None:
        return finalize(rec, catalog)
    return rec


__all__ = ["finalize", "finalize_watch"]

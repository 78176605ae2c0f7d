"""Pure functions from a RunRecord to findings. Nothing here measures or prints."""

from __future__ import annotations

import dataclasses

from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.analysis.pcie import degraded_link_rule, low_efficiency_rule
from ioprobe.analysis.recommend import recommend
from ioprobe.record import RunRecord


def finalize(rec: RunRecord) -> RunRecord:
    """Fill the record's verdict fields (bottleneck, predicted rate, recommendations).

    A record with no stage capacity at all is the link alone (``probe --pcie-only``): it has
    no pipeline to model, only the link's own advice.
    """
    if not any(rec.stages.capacities().values()):
        done = dataclasses.replace(rec, bottleneck="pcie", predicted_samples_per_s=0.0)
        done.recommendations = degraded_link_rule(done, None) + low_efficiency_rule(done, None)
        return done
    f = pipeline_model(rec.stages)
    done = dataclasses.replace(
        rec, bottleneck=f.bottleneck, predicted_samples_per_s=f.predicted_samples_per_s
    )
    done.recommendations = recommend(done, f)
    return done


__all__ = ["PipelineFindings", "finalize", "pipeline_model", "recommend"]

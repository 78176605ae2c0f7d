"""Pure functions from a RunRecord to findings. Nothing here measures or prints."""

from __future__ import annotations

import dataclasses

from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.analysis.recommend import recommend
from ioprobe.record import RunRecord


def finalize(rec: RunRecord) -> RunRecord:
    """Fill the record's verdict fields (bottleneck, predicted rate, recommendations)."""
    f = pipeline_model(rec.stages)
    done = dataclasses.replace(
        rec, bottleneck=f.bottleneck, predicted_samples_per_s=f.predicted_samples_per_s
    )
    done.recommendations = recommend(done, f)
    return done


__all__ = ["PipelineFindings", "finalize", "pipeline_model", "recommend"]

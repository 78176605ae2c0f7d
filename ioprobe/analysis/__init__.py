"""Pure functions from a RunRecord to findings. Nothing here measures or prints.

The layers inside, each importing only those before it: ``model`` (the pipeline model),
``cache``, ``catalog``, ``decode_paths``; ``scenario`` (the model under a change);
``pcie`` and ``recommend`` (the advice); ``verdict`` (``finalize``); ``whatif``, ``size``,
``compare`` and ``report`` (what the commands and renderers use).
"""

from __future__ import annotations

from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.analysis.recommend import recommend
from ioprobe.analysis.verdict import finalize, finalize_watch

__all__ = ["PipelineFindings", "finalize", "finalize_watch", "pipeline_model", "recommend"]

"""Pure functions from a RunRecord to findings. Nothing here measures or prints.

The modules build on each other in the order docs/architecture.md gives ("Inside
``analysis/``"), each importing only those before it; ``tests/unit/test_layers.py`` holds that
order to the imports. The package exports what the edges call: the pipeline model, the advice
and ``finalize``.
"""

from __future__ import annotations

from ioprobe.analysis.model import PipelineFindings, pipeline_model
from ioprobe.analysis.recommend import recommend
from ioprobe.analysis.verdict import finalize, finalize_watch

__all__ = ["PipelineFindings", "finalize", "finalize_watch", "pipeline_model", "recommend"]

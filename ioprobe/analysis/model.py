"""The pipeline model: stage capacities in, delivered rate and bottleneck out."""

from __future__ import annotations

from dataclasses import dataclass, field

from ioprobe.record import STAGE_NAMES, StageName, Stages


@dataclass(frozen=True)
class PipelineFindings:
    bottleneck: StageName
    predicted_samples_per_s: float
    capacities: dict[StageName, float | None]
    # capacity / delivered - 1 per measured stage: how much faster it could go unused
    headroom: dict[StageName, float] = field(default_factory=dict)
    # predicted / gpu capacity, when the GPU's capacity is known
    gpu_utilization: float | None = None
    assumptions: tuple[str, ...] = ()


def pipeline_model(stages: Stages) -> PipelineFindings:
    """Stages run concurrently, so the pipeline delivers the smallest stage capacity.

    Each stage is treated as an independent server with a steady capacity in samples/s and
    enough buffering between stages to absorb jitter (DataLoader's prefetch queue); under
    those assumptions throughput is ``min(capacities)`` and the stage that attains it is the
    bottleneck. Stages that were not measured (null capacity) are left out, so a probe
    without an emulated GPU names the slowest of storage, CPU and PCIe. GPU utilisation is
    the delivered rate over the GPU's own capacity, which is 1.0 only when the GPU limits.
    """
    caps = stages.capacities()
    measured = {k: v for k, v in caps.items() if v is not None and v > 0}
    if not measured:
        raise ValueError("no stage has a measured capacity")
    bottleneck = min(measured, key=lambda k: (measured[k], STAGE_NAMES.index(k)))
    delivered = measured[bottleneck]
    headroom = {k: v / delivered - 1.0 for k, v in measured.items()}
    gpu = caps["gpu"]
    assumptions = [
        "stages overlap fully (prefetch absorbs jitter); throughput = min(capacities)",
    ]
    missing = [k for k in STAGE_NAMES if caps[k] is None]
    if missing:
        assumptions.append("not measured, so not limiting: " + ", ".join(missing))
    return PipelineFindings(
        bottleneck=bottleneck,
        predicted_samples_per_s=delivered,
        capacities=caps,
        headroom=headroom,
        gpu_utilization=min(delivered / gpu, 1.0) if gpu else None,
        assumptions=tuple(assumptions),
    )


# the least gain worth advising: below it a change is within the model's own error
MIN_GAIN = 1.05


def gains(pred: float | None, pf: PipelineFindings) -> bool:
    """Whether a predicted rate gains at least ``MIN_GAIN`` over the pipeline's."""
    return pred is not None and pred >= pf.predicted_samples_per_s * MIN_GAIN


def other_stages(pf: PipelineFindings, stage: StageName) -> list[float]:
    """The measured capacities of every stage but ``stage``: what caps a gain on it."""
    return [v for k, v in pf.capacities.items() if k != stage and v]


__all__ = ["MIN_GAIN", "PipelineFindings", "gains", "other_stages", "pipeline_model"]

"""The pipeline model: stage capacities in, delivered rate and bottleneck out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ioprobe.record import STAGE_NAMES, StageName, Stages, WatchEpoch


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


@dataclass(frozen=True)
class CpuContext:
    """What else competed for the CPU while a loader ran."""

    loop_cores: float  # cores the training loop (main process) used
    contention: float  # other runnable threads on the host, on average (0: none seen)
    share: float  # of the time the workers were runnable, the share they ran


def cpu_context(epochs: Sequence[WatchEpoch], workers: int, usable: float) -> CpuContext:
    """Infer the host's other load from how long the workers waited for a core.

    Linux's scheduler shares cores fairly among runnable threads: with ``N`` cores and ``R``
    runnable threads each runs ``min(1, N / R)`` of the time. The workers' run-queue wait
    (``/proc/thread-self/schedstat``) against their CPU time gives that share ``s``; with our
    own ``k`` runnable threads (busy workers and the training loop), ``R = N / s`` and the
    rest, ``N / s - k``, is someone else's. A share above 0.95 is read as no contention: with
    a free core the wait says nothing about how much else is running.
    """
    wall = sum(e.seconds for e in epochs)
    # with no workers the main process loaded too: its CPU is not the training loop's alone
    loop = sum(e.main_cpu_seconds for e in epochs) / wall if wall > 0 and workers > 0 else 0.0
    cpu = sum(e.sample_cpu_seconds + e.collate_seconds for e in epochs)
    runq = sum(e.runqueue_seconds for e in epochs)
    share = cpu / (cpu + runq) if cpu + runq > 0 else 1.0
    mine = max(workers, 1) + loop
    other = max(usable / share - mine, 0.0) if 0.0 < share < 0.95 else 0.0
    return CpuContext(loop_cores=loop, contention=other, share=share)


def loader_cores(lanes: float, usable: float, ctx: CpuContext, workers: int) -> float:
    """Cores a loader with ``lanes`` busy workers gets on ``usable`` cores.

    Without contention: one core per worker, up to the usable cores less the training
    loop's. With no workers, each process loads on its main thread between training steps,
    so its one core is shared with its loop. With other runnable threads, each of ours gets
    the fair share ``N / (others + ours)`` of a core (see ``cpu_context``).
    """
    loop = ctx.loop_cores
    if workers > 0:
        alone = min(lanes, max(usable - loop, 0.5))
    else:
        # every process's core is shared with its loop, and all of them with the host's
        alone = min(max(lanes - loop, 0.5 * lanes), max(usable - loop, 0.5))
    if ctx.contention <= 0:
        return alone
    return min(alone, lanes * min(1.0, usable / (ctx.contention + lanes + loop)))

"""What the host-to-device probe found: the link, copies by size, and the advice they support.

Pure functions over a record's ``stages.pcie``: the probe measured copies by size and read
the link from NVML (``collect/pcie.py``); here those become a table of rates, the link's
efficiency, and two rules whose premises are checked against the record: a link trained
below what the GPU and slot support, and pageable copies that would cap the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from ioprobe import units
from ioprobe.analysis.model import PipelineFindings, gains, other_stages
from ioprobe.record import PcieLink, PcieStage, Recommendation, RunRecord

# Below this share of the link's theoretical rate, pinned copies point at something other
# than the link itself (an IOMMU, a PCIe switch shared with other devices, a NUMA hop).
LOW_EFFICIENCY = 0.6


@dataclass(frozen=True)
class CopyRow:
    """One copy size: bytes/s by direction and host memory (None where not measured)."""

    size_bytes: int
    h2d_pinned: float | None
    h2d_pageable: float | None
    d2h_pinned: float | None
    d2h_pageable: float | None


def copy_rows(rec: RunRecord) -> list[CopyRow]:
    """The probe's copies as one row per size, smallest first."""
    by: dict[tuple[int, str, str], float] = {
        (p.size_bytes, p.direction, p.memory): p.bytes_per_s for p in rec.stages.pcie.copies
    }
    sizes = sorted({p.size_bytes for p in rec.stages.pcie.copies})
    return [
        CopyRow(
            size_bytes=s,
            h2d_pinned=by.get((s, "h2d", "pinned")),
            h2d_pageable=by.get((s, "h2d", "pageable")),
            d2h_pinned=by.get((s, "d2h", "pinned")),
            d2h_pageable=by.get((s, "d2h", "pageable")),
        )
        for s in sizes
    ]


def degraded(link: PcieLink | None) -> bool:
    """The link runs at a lower generation or width than the GPU in this slot supports.

    The probe reads the link while copies run (an idle GPU lowers its link's generation to
    save power), so "current" here is the link under load.
    """
    if link is None:
        return False
    gen = link.gen_current is not None and link.gen_max is not None
    width = link.width_current is not None and link.width_max is not None
    return (gen and link.gen_current < link.gen_max) or (  # type: ignore[operator]
        width and link.width_current < link.width_max  # type: ignore[operator]
    )


def link_label(link: PcieLink) -> str:
    def one(gen: int | None, width: int | None) -> str:
        return f"gen {gen or '?'} x{width or '?'}"

    text = one(link.gen_current, link.width_current)
    if degraded(link):
        text += f" (supports {one(link.gen_max, link.width_max)})"
    return text


def degraded_link_rule(rec: RunRecord, pf: PipelineFindings | None) -> list[Recommendation]:
    """The link trained below the generation or width this GPU and slot support.

    A GPU in a x16 slot that trained to x8, or a gen 5 GPU running gen 3, has half or less of
    its copy rate: a reseated card, a riser, a BIOS setting or a bifurcated slot is the usual
    cause. The gain is the ratio of the two theoretical rates, applied to the pcie stage; when
    another stage limits, the run gains nothing today and the advice says so.
    """
    pc = rec.stages.pcie
    link = pc.link
    if link is None or not degraded(link):
        return []
    ratio = (
        link.max_bytes_per_s / link.theoretical_bytes_per_s
        if link.max_bytes_per_s and link.theoretical_bytes_per_s
        else None
    )
    ending, pred = _restored_link(pf, pc.capacity_samples_per_s, ratio)
    text = (
        f"The GPU's PCIe link runs at {link_label(link)} under load: check the card is seated in "
        "a full-width slot, the riser, and the BIOS's link speed setting" + ending
    )
    evidence = f"NVML, read during a copy burst; pinned copies {pc.efficiency or 0:.0%} of the link"
    return [
        Recommendation(kind="pcie_link", text=text, predicted_samples_per_s=pred, evidence=evidence)
    ]


def _restored_link(
    pf: PipelineFindings | None, cap: float | None, ratio: float | None
) -> tuple[str, float | None]:
    """What restoring the link's full rate (``ratio`` times today's) does to this run: the end
    of the advice's sentence, and the predicted rate, which is None unless the link limits."""
    if pf is None or not cap or not ratio:
        return ".", None
    if pf.bottleneck != "pcie":
        return (
            f"; it does not limit this run ({pf.bottleneck} does), but caps the copies at 1/{ratio:.1f} of their rate.",
            None,
        )
    others = [v for k, v in pf.capacities.items() if k != "pcie" and v]
    return f"; restoring it lifts the pcie stage {ratio:.1f}x.", min([cap * ratio, *others])


def probe_pageable_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """A probe's pcie capacity assumes pinned copies: say what pageable ones would cost.

    The probe measured both kinds at the batch's size. When copying from pageable memory
    would make the link the stage that limits (its capacity below today's predicted rate),
    pinning is not a detail: the advice gives the measured ratio and the rate pageable
    copies would hold the pipeline to. When pageable copies would still keep up, nothing.
    """
    pc = rec.stages.pcie
    if not pc.copies or not pc.bytes_per_sample:
        return []
    pinned, pageable = pc.pinned_bytes_per_s, pc.pageable_bytes_per_s
    if not pinned or not pageable or pageable >= pinned:
        return []
    capped = pageable / pc.bytes_per_sample
    if capped >= pf.predicted_samples_per_s:
        return []
    return [
        Recommendation(
            kind="pin_memory",
            text=(
                f"Copy from pinned memory (DataLoader(pin_memory=True), .to(device, "
                f"non_blocking=True)): at this batch size pinned copies ran "
                f"{units.bandwidth(pinned)} and pageable ones {units.bandwidth(pageable)} "
                f"({pinned / pageable:.1f}x); from pageable memory the link would cap the "
                f"pipeline at {capped:,.0f} samples/s."
            ),
            predicted_samples_per_s=pf.predicted_samples_per_s,
            evidence=f"host-to-device probe ({pc.method})",
        )
    ]


def low_efficiency_rule(rec: RunRecord, pf: PipelineFindings | None) -> list[Recommendation]:
    """Pinned copies reach well under the link's rate although the link trained fully.

    A healthy link carries 80-90% of its theoretical rate in large pinned copies. Far less
    with a full-speed link points past the link: an IOMMU in translated mode, a PCIe switch
    shared with NICs or NVMe drives, or the process running on the other CPU socket.
    """
    pc = rec.stages.pcie
    if pc.efficiency is None or pc.efficiency >= LOW_EFFICIENCY or degraded(pc.link):
        return []
    return [
        Recommendation(
            kind="pcie_efficiency",
            text=(
                f"Pinned copies reach only {pc.efficiency:.0%} of the link's rate on a fully "
                "trained link: check the IOMMU mode (iommu=pt), what else shares the PCIe "
                "switch, and that the job runs on the GPU's NUMA node (nvidia-smi topo -m)."
            ),
            predicted_samples_per_s=None,
            evidence="host-to-device probe, largest pinned copies",
        )
    ]


def pin_memory_rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """Host-to-device copies limit the pipeline, or pageable copies were seen on a GPU host.

    Pinned (page-locked) buffers let the copy engine DMA directly instead of staging through
    a bounce buffer, typically about twice the rate of pageable copies. Where the watched
    copies included both kinds, their measured ratio is the factor; otherwise 2. Copies
    measured as all pinned (or a loader with pin_memory=True and no measured copies) leave
    nothing to gain.
    """
    pcie = _unpinned_pcie(rec, pf)
    if pcie is None:
        return []
    pc = rec.stages.pcie
    factor, why = _pinned_speedup(pc)
    # only the pageable share speeds up
    pageable = 1.0 - (pc.pinned_fraction or 0.0)
    gain = 1.0 / (1.0 - pageable + pageable / factor) if factor > 0 else 1.0
    pred = min([gain * pcie, *other_stages(pf, "pcie")])
    if not gains(pred, pf):
        return []
    return [
        Recommendation(
            kind="pin_memory",
            text=f"{_pin_memory_first(rec)} .to(device, non_blocking=True): {why}.",
            predicted_samples_per_s=pred,
            evidence=f"PCIe delivers {pcie:,.0f} samples/s ({pc.method})",
        )
    ]


def _pin_memory_set(rec: RunRecord) -> bool:
    return rec.watch.settings.pin_memory if rec.watch else False


def _unpinned_pcie(rec: RunRecord, pf: PipelineFindings) -> float | None:
    """The pcie stage's capacity when pinning could raise it: copies not all pinned (as
    measured, else as the loader's flag says), the link limiting or a watched run on a GPU
    host; None otherwise."""
    pc = rec.stages.pcie
    flag = _pin_memory_set(rec)
    pinned = pc.pinned_fraction >= 0.99 if pc.pinned_fraction is not None else flag
    # a probe's capacity already assumes pinned copies: probe_pageable_rule speaks for it
    if pc.capacity_samples_per_s is None or pinned or pc.copies:
        return None
    if pf.bottleneck != "pcie" and not (rec.watch and rec.host.gpus):
        return None
    return pc.capacity_samples_per_s


def _pinned_speedup(pc: PcieStage) -> tuple[float, str]:
    """How much faster pinned copies run than pageable ones, and the reason to print: the
    ratio of the two measured rates where both were measured, else the usual 2x."""
    if pc.pinned_bytes_per_s and pc.pageable_bytes_per_s:
        return pc.pinned_bytes_per_s / pc.pageable_bytes_per_s, (
            f"pinned copies ran {units.bandwidth(pc.pinned_bytes_per_s)} here, pageable ones "
            f"{units.bandwidth(pc.pageable_bytes_per_s)}"
        )
    return 2.0, "pinned copies run about 2x pageable ones"


def _pin_memory_first(rec: RunRecord) -> str:
    """The advice's opening: set the flag, or, where it is set, pin what the loader returns."""
    if not _pin_memory_set(rec):
        return "Use pin_memory=True and"
    pc = rec.stages.pcie
    share = f"{1 - pc.pinned_fraction:.0%} of the bytes copied" if pc.pinned_fraction else "copies"
    return (
        f"pin_memory=True is set, yet {share} came from pageable memory: pin what the "
        "collate_fn returns (tensors, not other types), then"
    )


__all__ = [
    "CopyRow",
    "copy_rows",
    "degraded",
    "degraded_link_rule",
    "link_label",
    "low_efficiency_rule",
    "pin_memory_rule",
    "probe_pageable_rule",
]

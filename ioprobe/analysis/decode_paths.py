"""Decode paths in a record: which one the pipeline uses, which were measured, and how they
compare. ``probe --loader dali`` measures Pillow, DALI on the CPU and DALI's mixed (GPU)
decoder on the same images (``stages.cpu.decode_paths``); a watched DALI pipeline shows its
decoder's device in its operators. What-if, recommendations and reports read them here.
"""

from __future__ import annotations

from ioprobe.record import DecodePath, RunRecord

LABELS = {"pillow": "Pillow", "dali-cpu": "DALI on the CPU", "dali-gpu": "DALI on the GPU"}
# CPU-stage loaders that are a decode path by another name: "image" is the Pillow decoder
_LOADER_PATH = {
    "image": "pillow",
    "pillow": "pillow",
    "dali-cpu": "dali-cpu",
    "dali-gpu": "dali-gpu",
}


def label(path: str) -> str:
    return LABELS.get(path, path)


def measured(rec: RunRecord, path: str | None) -> DecodePath | None:
    """The record's measurement of ``path`` when it has a usable one (a rate, no error)."""
    for p in rec.stages.cpu.decode_paths:
        if p.path == path and p.error is None and p.samples_per_s:
            return p
    return None


def decodes_on_gpu(rec: RunRecord) -> bool:
    """The recorded pipeline already decodes on the GPU: a watched DALI pipeline with a mixed
    decoder, or a probe whose CPU stage took DALI's GPU path."""
    if rec.dali is not None and any(
        op.device == "mixed" and op.name.startswith("decoders") for op in rec.dali.operators
    ):
        return True
    return rec.stages.cpu.loader == "dali-gpu"


def current_path(rec: RunRecord) -> str | None:
    """The decode path the record's CPU stage stands for, when it is one of the three."""
    if decodes_on_gpu(rec):
        return "dali-gpu"
    if rec.dali is not None and any(op.name.startswith("decoders") for op in rec.dali.operators):
        return "dali-cpu"
    return _LOADER_PATH.get(rec.stages.cpu.loader or "")


def facts(rec: RunRecord) -> list[tuple[str, str]]:
    """Key-measurement lines comparing the measured decode paths, as (label, value) pairs:
    one per path, rates relative to Pillow's, and the path the CPU stage uses."""
    paths = rec.stages.cpu.decode_paths
    if not paths:
        return []
    base = measured(rec, "pillow")
    out: list[tuple[str, str]] = []
    for p in paths:
        key = f"decode {p.path}"
        if p.error is not None or not p.samples_per_s:
            out.append((key, f"not measured: {p.error or 'no images decoded'}"))
            continue
        text = f"{p.samples_per_s:,.0f} images/s"
        if base is not None and p is not base and base.samples_per_s:
            text += f" ({p.samples_per_s / base.samples_per_s:.2f}x Pillow)"
        if p.cpu_seconds_per_sample is not None:
            text += f", {p.cpu_seconds_per_sample * 1e3:.2f} ms CPU/image"
        unit = "worker" if p.path == "pillow" else "thread"
        text += f", {p.threads} {unit}{'s' if p.threads != 1 else ''}, {p.files} files"
        out.append((key, text))
    cur = current_path(rec)
    if cur is not None:
        out.append(("decode in use", f"{label(cur)}: the CPU stage's capacity is its rate"))
    return out


__all__ = ["LABELS", "current_path", "decodes_on_gpu", "facts", "label", "measured"]

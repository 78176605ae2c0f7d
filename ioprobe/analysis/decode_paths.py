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


__all__ = ["LABELS", "current_path", "decodes_on_gpu", "label", "measured"]

"""A what-if's change as the flags a user would type. Quantities (bytes, rates, shares) are
formatted by ``ioprobe.units``, one rule each."""

from __future__ import annotations

from ioprobe.record import Change


def change_flags(ch: Change) -> str:
    """A what-if's change as the flags a user would type: ``--workers 4  --storage nvme-gen4``."""
    flags = (
        ("workers", _given(ch.workers)),
        ("prefetch-factor", _given(ch.prefetch_factor)),
        ("in-order", None if ch.in_order is None else str(ch.in_order).lower()),
        ("cores", _given(ch.cores)),
        ("storage", ch.storage.name if ch.storage is not None else None),
        ("gpus", _given(ch.gpus)),
        ("cache-gb", _cache_flag(ch)),
        ("pcie", ch.pcie),
        ("gpu-decode", "yes" if ch.gpu_decode else None),
        ("decode", ch.decode),
        # the probe's file name leads its source ("p.json, the cold pass of a probe of ...")
        (
            "probe",
            (ch.storage_sweep_source or "a probe").split(",", 1)[0] if ch.storage_sweep else None,
        ),
    )
    return "  ".join(f"--{k} {v}" for k, v in flags if v is not None)


def _given(n: int | None) -> str | None:
    return None if n is None else str(n)


def _cache_flag(ch: Change) -> str | None:
    """The cache as ``whatif`` takes it: ``--cache-gb 16 --cache-order shuffled``."""
    if ch.cache_bytes is None:
        return None
    gb = ch.cache_bytes / 1e9  # the flag's own unit, typed back as given
    order = f" --cache-order {ch.cache_order}" if ch.cache_order else ""
    return f"{gb:g}{order}"


__all__ = ["change_flags"]

"""Rules that read a rate off a stage's measurements, shared by the collectors and the
analysis (a ground-floor module: it imports only the record)."""

from __future__ import annotations

from collections.abc import Sequence

from ioprobe.record import CopyPoint, StorageStage


def single_thread_rate(storage: StorageStage, cold: bool) -> tuple[float, str] | None:
    """The storage pass's one-thread read rate and that pass's cache: the cold pass when
    ``cold`` and it ran, else the warm one. The disk-to-GPU path reads on one thread, so this
    is the rate it is sized by and compared with."""
    passes = (storage.cold, storage.warm) if cold else (storage.warm, storage.cold)
    for p in passes:
        one = next((s for s in p.sweep if s.concurrency == 1), None) if p else None
        if p is not None and one is not None and one.read_bytes_per_s > 0:
            return one.read_bytes_per_s, p.cache
    return None


def peak_copy_rate(copies: Sequence[CopyPoint], direction: str, memory: str) -> float | None:
    """The fastest measured copy of one direction and kind of host memory, over all sizes:
    what the link carries at best (the probe's efficiency, the reports' headline rate)."""
    rates = [c.bytes_per_s for c in copies if c.direction == direction and c.memory == memory]
    return max(rates) if rates else None


__all__ = ["peak_copy_rate", "single_thread_rate"]

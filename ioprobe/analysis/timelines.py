"""The record's per-batch timelines as a report reads them: which tracks hold every column it
needs, and how a row's amount is spread over time bins.

Shared by the findings (``report``) and the stall over time (``stall_series``), which both bin
the same rows by time.
"""

from __future__ import annotations

from ioprobe.record import RunRecord, Track


def tracks_of(rec: RunRecord) -> list[Track]:
    """The record's timelines: a watched run's, else the probe's pipeline run's."""
    if rec.watch is not None and rec.watch.tracks:
        return rec.watch.tracks
    if rec.pipeline is not None:
        return rec.pipeline.tracks
    return []


# The columns the report reads from each kind of timeline; a track lacking one (a damaged or
# hand-made record) is left out of the charts and the trace, with a note saying so
MAIN_READS = ("start", "end", "stall", "batches")
WORKER_READS = ("start", "end", "batches", "samples", "wall", "cpu", "read")
DEVICE_READS = ("start", "end", "wait", "copy", "batches")


def complete_tracks(rec: RunRecord) -> tuple[list[Track], Track | None, list[str]]:
    """The record's host timelines and its device timeline that hold every column the report
    reads, and a note for each one left out."""
    kept, notes = [], []
    for t in tracks_of(rec):
        lacking = _lacking(t, MAIN_READS if t.worker is None else WORKER_READS)
        if lacking:
            notes.append(_left_out(t, lacking))
        else:
            kept.append(t)
    device = rec.watch.gpu_track if rec.watch is not None else None
    if device is not None and (lacking := _lacking(device, DEVICE_READS)):
        notes.append(_left_out(device, lacking))
        device = None
    return kept, device, notes


def _lacking(track: Track, reads: tuple[str, ...]) -> list[str]:
    return [c for c in reads if c not in track.columns]


def _left_out(track: Track, lacking: list[str]) -> str:
    return (
        f"the timeline {track.name!r} lacks its {', '.join(lacking)} column"
        f"{'s' if len(lacking) > 1 else ''}: left out of the charts and the trace"
    )


def spread(acc: list[float], lo: float, hi: float, n: float) -> None:
    """Add ``n`` samples to the bins of ``acc`` that the span ``lo``..``hi`` (in bins) covers,
    each its share of the overlap; a span too short to cover any lands in its own bin."""
    bins = len(acc)
    if hi - lo < 1e-9:
        acc[min(int(lo), bins - 1)] += n
        return
    b = int(lo)
    while b < hi and b < bins:
        overlap = min(hi, b + 1) - max(lo, b)
        acc[b] += n * overlap / (hi - lo)
        b += 1

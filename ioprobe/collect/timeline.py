"""Bounded per-batch timelines: the main process's waits and each worker's batches.

Both ``ioprobe.watch`` and the probe's pipeline run fill them; reports draw them and the
trace export lays them out as tracks.
"""

from __future__ import annotations

from array import array

from ioprobe.record import MAIN_COLUMNS, WORKER_COLUMNS, ColumnSpec, Track

__all__ = ["MAIN_COLUMNS", "MAIN_ROWS", "WORKER_COLUMNS", "WORKER_ROWS", "Series"]

MAIN_ROWS = 32_768  # rows kept on the main track; a longer run merges neighbours
WORKER_ROWS = 4_096  # per worker track


class Series:
    """A timeline of at most ``limit`` rows that never drops a batch: when full, neighbouring
    rows merge pairwise and each later row gathers twice as many batches. Memory stays
    bounded for any run length while totals and the run's shape survive."""

    __slots__ = ("buf", "flat", "limit", "merge", "n", "spec", "stride")

    def __init__(self, spec: ColumnSpec, limit: int) -> None:
        self.spec = spec
        self.n = len(spec)
        self.limit = (limit - limit % 2) * self.n  # in values: rows are laid flat, row-major
        self.merge = tuple(m for _, m, _ in spec)
        self.flat = array("q")  # one C-level extend per batch: no per-column Python loop
        self.buf = array("q")  # raw rows gathering into the next merged row
        self.stride = 1

    def add(self, row: tuple[int, ...]) -> None:
        if self.stride == 1:
            flat = self.flat
            flat.extend(row)
            if len(flat) >= self.limit:
                self._halve()
            return
        buf = self.buf
        buf.extend(row)
        if len(buf) >= self.stride * self.n:
            self._flush()

    def _flush(self) -> None:
        buf, n = self.buf, self.n
        if not buf:
            return
        last = len(buf) - n
        self.flat.extend(
            buf[k] if m == "first" else buf[last + k] if m == "last" else sum(buf[k::n])
            for k, m in enumerate(self.merge)
        )
        del buf[:]
        if len(self.flat) >= self.limit:
            self._halve()

    def _halve(self) -> None:
        flat, n = self.flat, self.n
        rows = len(flat) // n
        pairs = rows // 2
        merged = array("q", bytes(8 * n * pairs))
        for k, m in enumerate(self.merge):
            col = flat[k : 2 * pairs * n : n]
            if m == "first":
                merged[k::n] = col[0::2]
            elif m == "last":
                merged[k::n] = col[1::2]
            else:
                merged[k::n] = array("q", map(int.__add__, col[0::2], col[1::2]))
        # an odd row out stays as it is, behind the merged pairs
        merged.extend(flat[2 * pairs * n :])
        self.flat = merged
        self.stride *= 2

    def to_record(self, name: str, worker: int | None, origin: int) -> Track:
        self._flush()
        columns: dict[str, list[float]] = {}
        for k, (col_name, m, scale) in enumerate(self.spec):
            col = self.flat[k :: self.n]
            base = origin if m != "sum" and scale != 1.0 else 0
            # microseconds are finer than anything a chart or trace shows, and keep JSON small
            columns[col_name] = (
                [round((v - base) * scale, 6) for v in col]
                if scale != 1.0
                else [float(v) for v in col]
            )
        return Track(name=name, worker=worker, batches_per_row=self.stride, columns=columns)

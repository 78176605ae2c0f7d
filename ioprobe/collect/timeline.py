"""Bounded per-batch timelines: the main process's waits and each worker's batches.

Both ``ioprobe.watch`` and the probe's pipeline run fill them; reports draw them and the
trace export lays them out as tracks.
"""

from __future__ import annotations

from array import array

from ioprobe.record import Track

# (name, merge, scale): "first"/"last" columns are times, kept as the first batch's or the
# last's in a row and written out relative to the watch's origin; "sum" columns add up.
ColumnSpec = tuple[tuple[str, str, float], ...]
MAIN_COLUMNS: ColumnSpec = (
    ("start", "first", 1e-9),
    ("end", "last", 1e-9),
    ("stall", "sum", 1e-9),
    ("batches", "sum", 1.0),
    ("samples", "sum", 1.0),
    ("epoch", "first", 1.0),
)
WORKER_COLUMNS: ColumnSpec = (
    ("start", "first", 1e-9),
    ("end", "last", 1e-9),
    ("batches", "sum", 1.0),
    ("samples", "sum", 1.0),
    ("wall", "sum", 1e-9),
    ("cpu", "sum", 1e-9),
    ("read", "sum", 1e-9),
)
MAIN_ROWS = 32_768  # rows kept on the main track; a longer run merges neighbours
WORKER_ROWS = 4_096  # per worker track


class Series:
    """A timeline of at most ``limit`` rows that never drops a batch: when full, neighbouring
    rows merge pairwise and each later row gathers twice as many batches. Memory stays
    bounded for any run length while totals and the run's shape survive."""

    __slots__ = (
        "cols",
        "lasts",
        "limit",
        "merge",
        "pending",
        "pending_n",
        "spec",
        "stride",
        "sums",
    )

    def __init__(self, spec: ColumnSpec, limit: int) -> None:
        self.spec = spec
        self.limit = limit - limit % 2
        self.merge = tuple(m for _, m, _ in spec)
        self.sums = tuple(i for i, m in enumerate(self.merge) if m == "sum")
        self.lasts = tuple(i for i, m in enumerate(self.merge) if m == "last")
        self.cols = tuple(array("q") for _ in spec)
        self.stride = 1
        self.pending: list[int] | None = None
        self.pending_n = 0

    def add(self, row: tuple[int, ...]) -> None:
        if self.stride == 1:
            self._append(row)
            return
        p = self.pending
        if p is None:
            self.pending = list(row)
            self.pending_n = 1
        else:
            for i in self.sums:
                p[i] += row[i]
            for i in self.lasts:
                p[i] = row[i]
            self.pending_n += 1
        if self.pending_n == self.stride:
            self._flush()

    def _flush(self) -> None:
        if self.pending is not None:
            row, self.pending, self.pending_n = self.pending, None, 0
            self._append(tuple(row))

    def _append(self, row: tuple[int, ...]) -> None:
        for col, v in zip(self.cols, row, strict=True):
            col.append(v)
        if len(self.cols[0]) >= self.limit:
            self._halve()

    def _halve(self) -> None:
        for col, m in zip(self.cols, self.merge, strict=True):
            if m == "first":
                merged = col[0::2]
            elif m == "last":
                merged = col[1::2]
            else:
                merged = array("q", map(int.__add__, col[0::2], col[1::2]))
            col[:] = merged
        self.stride *= 2

    def to_record(self, name: str, worker: int | None, origin: int) -> Track:
        self._flush()
        columns: dict[str, list[float]] = {}
        for (col_name, m, scale), col in zip(self.spec, self.cols, strict=True):
            base = origin if m != "sum" and scale != 1.0 else 0
            # microseconds are finer than anything a chart or trace shows, and keep JSON small
            columns[col_name] = (
                [round((v - base) * scale, 6) for v in col]
                if scale != 1.0
                else [float(v) for v in col]
            )
        return Track(name=name, worker=worker, batches_per_row=self.stride, columns=columns)

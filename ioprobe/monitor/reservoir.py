"""Exact values up to a limit, then a uniform random sample of everything seen: the
collector's per-batch and per-sample distributions, bounded however long a run; and the
heaviest samples, kept by index."""

from __future__ import annotations

import heapq
import math
import random
from array import array

from ioprobe.record import Distribution


class Reservoir:
    """Exact up to ``limit`` values, then a uniform random sample of everything seen.

    Values are integers (nanoseconds), kept raw and multiplied by ``scale`` only when written
    out, so the per-batch path never converts or allocates. Past the limit it uses Li's
    Algorithm L: it draws how many values to skip before the next replacement, so a batch of
    values costs a few comparisons, not a random draw per value.
    """

    __slots__ = ("_next", "_w", "count", "limit", "linked", "rng", "scale", "total", "values")

    def __init__(self, limit: int, scale: float = 1.0, linked: Reservoir | None = None) -> None:
        self.limit = limit
        self.scale = scale
        self.values = array("q")
        self.count = 0
        self.total = 0
        self.rng = random.Random(0)
        self._w = 1.0
        self._next = 0  # the 1-based count at which the next value replaces a kept one
        # a reservoir of a second value of the same items (a sample's CPU time beside its
        # wall time), filled through ``extend``'s ``paired``: it keeps the same items, so
        # the two stay row by row and its random draws cost nothing more
        self.linked = linked

    def _skip(self) -> None:
        self._w *= math.exp(math.log(self.rng.random() or 1e-300) / self.limit)
        gap = (
            math.floor(math.log(self.rng.random() or 1e-300) / math.log1p(-self._w))
            if self._w < 1
            else 0
        )
        self._next += gap + 1

    def _filled(self) -> None:
        self._next = self.limit
        self._skip()

    def add(self, v: int) -> None:
        self.count += 1
        self.total += v
        if len(self.values) < self.limit:
            self.values.append(v)
            if len(self.values) == self.limit:
                self._filled()
        elif self.count == self._next:
            self.values[self.rng.randrange(self.limit)] = v
            self._skip()

    def extend(
        self,
        vs: array[int],
        total: int | None = None,
        paired: array[int] | None = None,
        paired_total: int | None = None,
    ) -> None:
        """Many values at once; ``total`` is their sum when the caller has it already.
        ``paired``: the same items' values for the ``linked`` reservoir (as long as ``vs``)."""
        n = len(vs)
        self.total += sum(vs) if total is None else total
        other = self.linked if paired is not None else None
        if other is not None and paired is not None:
            other.count += n
            other.total += sum(paired) if paired_total is None else paired_total
        room = self.limit - len(self.values)
        if room > 0:
            self.values.extend(vs[:room])
            if other is not None and paired is not None:
                other.values.extend(paired[:room])
            if len(self.values) == self.limit:
                self._filled()
        first = self.count + 1  # the count of vs[0]
        self.count += n
        while self.count >= self._next > 0 and self._next >= first:
            slot = self.rng.randrange(self.limit)
            self.values[slot] = vs[self._next - first]
            if other is not None and paired is not None:
                other.values[slot] = paired[self._next - first]
            self._skip()

    def to_record(self) -> Distribution:
        return Distribution(
            count=self.count,
            total=self.total * self.scale,
            exact=self.count <= self.limit,
            values=[v * self.scale for v in self.values],
        )


class Heaviest:
    """The ``limit`` heaviest samples by wall time: a min-heap of (wall, cpu, bytes, index,
    worker, epoch) whose root is ``bar``, the weight a sample must pass, so most batches
    cost one max() and a compare before ``keep`` is called at all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.heap: list[tuple[int, int, int, int, int, int]] = []
        self.bar = -1

    def keep(
        self, wall: array[int], cpu: array[int], index_b: bytes, bytes_b: bytes, worker: int,
        epoch: int,
    ) -> None:  # fmt: skip
        """Keep this batch's samples that outweigh the lightest of the heaviest kept."""
        index = array("q", index_b) if index_b else None
        nbytes = array("q", bytes_b) if bytes_b else None
        heap = self.heap
        for k, w in enumerate(wall):
            if w <= self.bar:
                continue
            item = (
                w,
                cpu[k] if k < len(cpu) else 0,
                nbytes[k] if nbytes is not None and k < len(nbytes) else -1,
                index[k] if index is not None and k < len(index) else -1,
                worker,
                epoch,
            )
            if len(heap) < self.limit:
                heapq.heappush(heap, item)
            else:
                heapq.heapreplace(heap, item)
            if len(heap) == self.limit:
                self.bar = heap[0][0]


__all__ = ["Heaviest", "Reservoir"]

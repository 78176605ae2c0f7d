"""How many reads a RAM cache absorbs: a closed form per access order, and a simulator.

The page cache is an LRU (near enough: Linux's two-list variant behaves like LRU for a
working set read once per epoch). Whether it helps depends less on its size than on the
order samples are read in, which is why the what-if asks for the order and not just the size.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal

Order = Literal["shuffled", "sequential", "static"]


def steady_hit_rate(cache_bytes: float, dataset_bytes: float, order: Order) -> float:
    """The fraction of reads served from a cache of ``cache_bytes`` in epochs after the first.

    With the cache fraction ``c = cache / dataset``:

    - ``static`` (a cache that pins a fixed subset, such as a copy of part of the dataset on
      local NVMe or in RAM): ``c``.
    - ``shuffled`` under LRU (a fresh random permutation each epoch, the DataLoader default):
      ``c + (1 - c) ln(1 - c)``. A point ``t`` of the way through an epoch (``t < c``), the
      cache holds the ``t`` just read plus ``c - t`` of the previous epoch's most recent
      samples not yet read again; the next read is uniform over the ``1 - t`` unread, so it
      hits with probability ``(c - t) / (1 - t)``. Integrating over ``t`` from 0 to ``c``
      gives the formula, about ``c**2 / 2`` for small ``c``: a cache half the dataset's size
      serves only 15% of the reads.
    - ``sequential`` under LRU: 0 — each sample is evicted just before it is read again, the
      classic LRU thrash.

    All three give 1 once the dataset fits (``c >= 1``). Metadata and the cache's own
    overhead are ignored, so the answer is optimistic near ``c = 1``.
    """
    if dataset_bytes <= 0:
        return 1.0
    c = max(cache_bytes, 0.0) / dataset_bytes
    if c >= 1.0:
        return 1.0
    if order == "static":
        return c
    if order == "shuffled":
        return c + (1.0 - c) * math.log1p(-c)
    return 0.0


def lru_hit_rate(accesses: Iterable[int], capacity_items: int, skip: int = 0) -> float:
    """Hit rate of an LRU cache of ``capacity_items`` samples over ``accesses`` (sample
    indices, epochs concatenated); the first ``skip`` accesses warm the cache unscored.

    An exact simulation, used to check ``steady_hit_rate`` and for orders the closed forms
    don't cover (a sampler that repeats or weights samples).
    """
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for i, key in enumerate(accesses):
        counted = i >= skip
        if key in cache:
            cache.move_to_end(key)
            hits += counted
        else:
            cache[key] = None
            if len(cache) > capacity_items:
                cache.popitem(last=False)
        total += counted
    return hits / total if total else 0.0


__all__ = ["Order", "cache_for_hit_rate", "lru_hit_rate", "steady_hit_rate"]


def cache_for_hit_rate(hit: float, dataset_bytes: float, order: Order) -> float | None:
    """The smallest cache giving ``hit`` in steady state; None when no cache size does
    (a sequential order under LRU never hits until everything fits)."""
    if hit <= 0:
        return 0.0
    if hit >= 1:
        return dataset_bytes
    if order == "static":
        return hit * dataset_bytes
    if order == "sequential":
        return dataset_bytes
    lo, hi = 0.0, 1.0  # steady_hit_rate rises with the cache: bisect on the fraction
    for _ in range(60):
        mid = (lo + hi) / 2
        if steady_hit_rate(mid, 1.0, order) < hit:
            lo = mid
        else:
            hi = mid
    return hi * dataset_bytes

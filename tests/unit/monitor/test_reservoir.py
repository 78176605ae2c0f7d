from __future__ import annotations

import statistics
from array import array

from ioprobe.monitor.reservoir import Reservoir


def test_exact_until_the_limit() -> None:
    r = Reservoir(100)
    r.extend(array("q", range(60)))
    r.add(60)
    r.extend(array("q", range(61, 100)))
    assert list(r.values) == list(map(float, range(100)))
    assert r.count == 100 and r.total == sum(range(100))
    assert r.to_record().exact


def test_past_the_limit_memory_is_bounded_and_the_sample_is_uniform() -> None:
    r = Reservoir(1000)
    for start in range(0, 200_000, 37):  # batches of uneven size, like real loaders
        r.extend(array("q", range(start, min(start + 37, 200_000))))
    assert r.count == 200_000
    assert len(r.values) == 1000
    assert r.total == sum(range(200_000))
    assert not r.to_record().exact
    # uniform over 0..199,999: mean near 100,000 and every fifth of the range represented
    assert abs(statistics.mean(r.values) - 100_000) < 6_000
    fifths = [sum(1 for v in r.values if k * 40_000 <= v < (k + 1) * 40_000) for k in range(5)]
    assert all(150 < f < 250 for f in fifths), fifths


def test_a_linked_reservoir_keeps_the_same_items_row_by_row() -> None:
    cpu = Reservoir(500)
    wall = Reservoir(500, linked=cpu)
    for start in range(0, 50_000, 32):
        vs = array("q", range(start, min(start + 32, 50_000)))
        wall.extend(vs, None, array("q", [-v for v in vs]))
    assert wall.count == cpu.count == 50_000
    assert cpu.total == -wall.total
    assert len(cpu.values) == len(wall.values) == 500
    # past the limit the replacements went to the same slots: each row is one item's pair
    assert all(c == -w for w, c in zip(wall.values, cpu.values, strict=True))
    assert max(wall.values) > 40_000  # and it did replace

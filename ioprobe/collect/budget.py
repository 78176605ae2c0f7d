"""Time budgets that hold whatever the storage does.

A probe ends within its ``--time-budget`` plus ``margin_s(budget)``: the larger of 2 s and 20%
of the budget. Three things make that hold when storage stops answering, or answers a byte at
a time:

- every network request has a connect and a read timeout derived from the budget
  (``network_timeouts``), so a server that accepts a connection and never answers fails the
  request within seconds instead of minutes;
- a call that can block on storage runs on a daemon thread with a deadline (``within``,
  ``map_within``): a read still in flight at its deadline is abandoned, not waited for, so a
  server that trickles bytes (which no read timeout catches, since bytes keep arriving) cannot
  hold a phase past its share of the budget;
- each phase stops starting new reads at its share of the budget.

An abandoned read keeps its thread until the storage answers or the read's own timeout fires;
the threads are daemons, so they never keep the process alive.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
E = TypeVar("E")

MARGIN_FLOOR_S = 2.0
MARGIN_SHARE = 0.2
# connect and read timeouts: each a share of the budget, never under the floor (a healthy
# remote can take most of a second to a first byte) nor over the caps (a dead one is dead)
TIMEOUT_SHARE = 0.2
TIMEOUT_FLOOR_S = 1.0
CONNECT_CAP_S = 10.0
READ_CAP_S = 60.0


def margin_s(budget_s: float) -> float:
    """How far past its budget a probe may end: in-flight reads, pool shutdown, the record."""
    return max(MARGIN_FLOOR_S, MARGIN_SHARE * budget_s)


def network_timeouts(budget_s: float) -> tuple[float, float]:
    """(connect, read) timeouts in seconds for a probe of ``budget_s``; the read timeout bounds
    the wait for each next byte of a response."""
    share = max(TIMEOUT_FLOOR_S, TIMEOUT_SHARE * budget_s)
    return min(share, CONNECT_CAP_S), min(share, READ_CAP_S)


class Overdue(TimeoutError):
    """A call that had not returned by its deadline; it goes on in its abandoned thread."""


def within(seconds: float, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, or Overdue once ``seconds`` have passed without it returning.

    With an infinite limit the call runs here, on the caller's thread.
    """
    if math.isinf(seconds):
        return fn(*args)
    box: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:  # handed to the caller, who decides
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True, name="ioprobe-within")
    thread.start()
    thread.join(max(seconds, 0.0))
    if not box:
        raise Overdue(f"no answer within {seconds:.1f} s")
    ok, value = box[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


class Pending:
    """``map_within``'s outcome for an item whose call had not returned by the deadline."""


PENDING = Pending()


def map_within(
    fn: Callable[[E], T], items: Sequence[E], threads: int, seconds: float = math.inf
) -> list[T | Exception | Pending]:
    """``fn`` over ``items`` on up to ``threads`` daemon threads, for at most ``seconds``.

    Each outcome is the call's result, the exception it raised, or PENDING where the call was
    still running at the deadline (or never started); results keep the items' order.
    """
    out: list[T | Exception | Pending] = [PENDING] * len(items)
    counter = itertools.count()
    stop = time.monotonic() + seconds

    def work() -> None:
        for k in counter:
            if k >= len(items) or time.monotonic() >= stop:
                return
            try:
                out[k] = fn(items[k])
            except Exception as exc:  # an outcome like any other: the caller counts it
                out[k] = exc

    workers = [
        threading.Thread(target=work, daemon=True, name=f"ioprobe-map-{i}")
        for i in range(max(1, min(threads, len(items))))
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join(None if math.isinf(seconds) else max(stop - time.monotonic(), 0.0))
    return list(out)  # a snapshot: an abandoned call that returns later changes nothing here

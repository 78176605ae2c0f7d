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

Some costs no phase can share: the command's own start (the interpreter, the imports, DALI's
among them), CUDA's start (importing torch: 4.3-4.7 s on the H100 host, of which CUDA's
context took 0.3 s), DALI's pipeline builds. The probe pays them before its first phase, so
they are known, not guessed, when ``plan_phases`` splits what is left; each phase also has a
least time it takes whatever its share (a storage level of 0.5 s, the CPU sweep's pool and
0.3 s per level). Where those cannot fit the budget plus its margin, the plan says so
(``PhasePlan.holds``), with the time the probe will take instead, before anything is
measured.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ioprobe.collect.quiet import start_quiet

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
# after the last phase: the record, the report, the outputs and the process's exit (0.1-0.15 s
# on the 2-core development machine; more where CUDA and DALI are torn down at the exit)
TAIL_S = 0.3
# what each cost before the first phase is, as a person reads it (PhasePlan.fixed_s's keys)
COSTS = {
    "start": "the command's start",
    "listing": "listing the dataset",
    "cuda": "CUDA's start",
    "dali": "DALI's pipeline builds",
}


def margin_s(budget_s: float) -> float:
    """How far past its budget a probe may end: in-flight reads, pool shutdown, the record."""
    return max(MARGIN_FLOOR_S, MARGIN_SHARE * budget_s)


def network_timeouts(budget_s: float) -> tuple[float, float]:
    """(connect, read) timeouts in seconds for a probe of ``budget_s``; the read timeout bounds
    the wait for each next byte of a response."""
    share = max(TIMEOUT_FLOOR_S, TIMEOUT_SHARE * budget_s)
    return min(share, CONNECT_CAP_S), min(share, READ_CAP_S)


@dataclass(frozen=True)
class PhasePlan:
    """How a probe spends its budget: what it spent before its first phase (``fixed_s``, by
    cost, in the order they came), each phase's least time, and each phase's planned seconds.
    Planned seconds add up to what is left of the budget, or to the phases' least times where
    those need more."""

    budget_s: float
    fixed_s: dict[str, float]
    floors_s: dict[str, float]
    shares: dict[str, float]  # each phase's share of what is left, adding up to 1
    phases_s: dict[str, float]
    tail_s: float = TAIL_S

    @property
    def elapsed_s(self) -> float:
        """Seconds spent before the first phase."""
        return sum(self.fixed_s.values())

    @property
    def least_s(self) -> float:
        """The least time the phases take, all together."""
        return sum(self.floors_s.get(p, 0.0) for p in self.phases_s)

    @property
    def expected_s(self) -> float:
        """The whole probe's expected time, from its start to the command's end."""
        return self.elapsed_s + sum(self.phases_s.values()) + self.tail_s

    @property
    def holds(self) -> bool:
        """Whether the probe is expected to end within its budget plus the margin."""
        return self.expected_s <= self.budget_s + margin_s(self.budget_s) + 1e-9

    @property
    def full_share_budget_s(self) -> float:
        """The least budget, in whole 5 s, at which every phase gets its planned share of
        what is left, none held to its least time: on this host, after these fixed costs."""
        need = max(
            (self.floors_s.get(p, 0.0) / w for p, w in self.shares.items() if w > 0), default=0.0
        )
        return 5.0 * math.ceil((self.elapsed_s + need) / 5.0 - 1e-9)


def plan_phases(
    budget_s: float,
    fixed_s: Mapping[str, float],
    shares: Mapping[str, float],
    floors_s: Mapping[str, float],
    tail_s: float = TAIL_S,
) -> PhasePlan:
    """Split what ``fixed_s`` left of ``budget_s`` across the phases by ``shares``, none
    below its floor: a phase whose share is under its floor gets the floor and the others
    share the rest. Where the floors need more than is left, each phase gets its floor."""
    total = sum(shares.values())
    weights = {p: w / total for p, w in shares.items()} if total > 0 else {}
    floors = {p: floors_s.get(p, 0.0) for p in weights}
    left = budget_s - sum(fixed_s.values())
    return PhasePlan(
        budget_s=budget_s,
        fixed_s=dict(fixed_s),
        floors_s=floors,
        shares=weights,
        phases_s=split(max(left, sum(floors.values())), weights, floors),
        tail_s=tail_s,
    )


def split(
    total: float, weights: Mapping[str, float], floors: Mapping[str, float]
) -> dict[str, float]:
    """``total`` by ``weights``, each part at least its floor: parts whose share falls below
    their floor are held there, and the rest is shared again among the others."""
    held: dict[str, float] = {}
    free = dict(weights)
    while free:
        rest = total - sum(held.values())
        scale = rest / sum(free.values()) if sum(free.values()) > 0 else 0.0
        under = [p for p, w in free.items() if w * scale < floors.get(p, 0.0)]
        if not under:
            return {p: (held[p] if p in held else weights[p] * scale) for p in weights}
        for p in under:
            held[p] = floors.get(p, 0.0)
            del free[p]
    return {p: held[p] for p in weights}


def cost_words(fixed_s: Mapping[str, float], least_s: float = 0.1) -> str:
    """What went before the first phase: the total, and the costs of at least ``least_s``
    (the largest whatever its size), largest first: "7.8 s (CUDA's start 4.6 s, DALI's
    pipeline builds 1.9 s, the command's start 1.3 s)"."""
    ranked = sorted(fixed_s.items(), key=lambda kv: -kv[1])
    kept = [kv for i, kv in enumerate(ranked) if i == 0 or kv[1] >= least_s]
    parts = ", ".join(f"{COSTS.get(name, name)} {seconds:.1f} s" for name, seconds in kept)
    return f"{sum(fixed_s.values()):.1f} s ({parts})"


class Overdue(TimeoutError):
    """A call that had not returned by its deadline; it goes on in its abandoned thread."""


# How long a wait on a thread lasts before the waiting thread looks at its signals again
JOIN_SLICE_S = 0.1


def _join(thread: threading.Thread, until: float) -> None:
    """``thread.join`` until ``until`` (``time.monotonic``; infinite: for ever), a slice at a
    time: a Ctrl-C the kernel hands to another thread (the listing's, fsspec's event loop)
    only marks the signal, and the main thread acts on it when it next runs Python; one long
    join left it waiting out the whole limit (15 s for a 30 s probe) before it stopped."""
    while thread.is_alive():
        left = until - time.monotonic()
        if left <= 0:
            return
        thread.join(min(left, JOIN_SLICE_S))


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

    thread = start_quiet(threading.Thread(target=run, daemon=True, name="ioprobe-within"))
    _join(thread, time.monotonic() + max(seconds, 0.0))
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
        start_quiet(t)
    for t in workers:
        _join(t, stop)
    return list(out)  # a snapshot: an abandoned call that returns later changes nothing here

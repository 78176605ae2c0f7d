"""Trials of DataLoader settings inside one run of the script (``ioprobe tune --in-run``).

The loader's first epoch is cut into windows of batches, each loaded under one setting: the
first as the script has it, the rest as the planner (the edge's, from the first window's
record) ranks them; then the rest of the epoch, and every later epoch, as the script has it.
The epoch's order is drawn once from the user's own sampler, as the loader would draw it, and
each window's loader is given its part of that order, so the script sees every batch of the
epoch once, in its order (out of order within a window whose setting has
``in_order=False``), and trains as it would unwatched.

The random state the script sees is left as a plain run leaves it: the epoch draws one worker
seed from the loader's generator (or torch's) and the sampler draws its own, as a plain
epoch does; each window's loader takes its workers' seeds from a generator of its own,
seeded from that draw. What the workers draw (augmentation) therefore differs from a plain
run, as it does between two runs with other worker counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from ioprobe.loaders.torch import Watched, stateful
from ioprobe.record import RunRecord

# the planner: the settings to try (as DataLoader overrides) after the first window's record
Planner = Callable[[RunRecord], list[dict[str, Any]]]


def unfit(loader: Any, batches: int, trials: int) -> str | None:
    """Why ``loader``'s first epoch cannot hold the trials, or None where it can: windows of
    ``batches`` past each setting's first round, for the loader as it is and ``trials``
    more."""
    if getattr(loader, "num_workers", 0) < 1:
        return "it loads in the main process (num_workers=0)"
    if isinstance(loader.dataset, IterableDataset) or loader.batch_sampler is None:
        return "its dataset is a stream (IterableDataset) or it makes no batches itself"
    if stateful(loader) or getattr(loader, "_iterator", None) is not None:
        return "it keeps its own iteration state (a stateful loader, or a pass already begun)"
    try:
        length = len(loader.batch_sampler)
    except Exception:  # none, or a __len__ that raises (NotImplementedError, OverflowError)
        return "its batch sampler has no length"
    need = (trials + 1) * (batches + 2 * loader.num_workers)
    if length < need:
        return f"its epoch has {length} batches; the trials need about {need}"
    return None


class InRunTrials:
    """The watcher of the loader tuned in one run: ``trials`` holds each window's setting and
    record, ``rest`` watches everything after them; ``note`` says why trials ended early."""

    def __init__(self, loader: Any, batches: int, planner: Planner) -> None:
        self._loader = loader
        self._batches = batches
        self._planner = planner
        self.trials: list[tuple[dict[str, Any], Watched]] = []
        self.note = ""
        # the seed of every window's workers; a loader whose workers persist draws its seed
        # once, at its first epoch (the trials'), so its later epochs draw theirs from here
        self._own = torch.Generator()
        self.rest = Watched(loader, generator=self._own if loader.persistent_workers else None)
        self._first = True
        self.released = False  # its first epoch stopped before a window was measured

    @property
    def record(self) -> RunRecord:
        """The record of the epochs after the trials (the run as the script has it)."""
        return self.rest.run

    run = record

    def __iter__(self) -> Iterator[Any]:
        if not self._first or self.released:
            return iter(self.rest)
        # the draws a plain pass makes as its iterator is made, in its order: the workers'
        # seed, then the sampler's (its first batches go to the workers as they start)
        loader = self._loader
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
        order = [list(b) for b in loader.batch_sampler]
        self._own.manual_seed(seed)
        return self._first_epoch(order)

    def _first_epoch(self, order: list[list[int]]) -> Iterator[Any]:
        self._first = False
        try:
            yield from self._windows(order)
        finally:
            if not self.trials:
                # stopped inside the first window (Lightning's sanity check takes two
                # batches of a validation loader): not this loader's trials, the next
                # loader may hold them; this one is watched as the script has it
                self.released = True

    def _windows(self, order: list[list[int]]) -> Iterator[Any]:
        loader, own = self._loader, self._own
        pending: list[dict[str, Any]] = [{}]
        at = 0
        skipped: list[int] = []  # the windows that did not fit in what was left
        while pending:
            overrides = pending.pop(0)
            size = overrides.get("num_workers", loader.num_workers) + self._batches
            if at + size > len(order):
                skipped.append(size)
                continue
            window = Watched(
                loader, overrides=overrides, batches=order[at : at + size], generator=own
            )
            try:
                yield from window
            finally:  # the loop's break too: the window's workers go with it
                _close(window)
            at += size
            if self.released:  # another loader took the trials over
                break
            self.trials.append((overrides, window))
            if len(self.trials) == 1:
                pending = list(self._planner(window.run))
        if skipped:
            n = len(skipped)
            self.note = (
                f"{n} planned setting{'s' * (n != 1)} not tried: the epoch had "
                f"{len(order) - at} batches left, fewer than {'its' if n == 1 else 'their'} "
                f"window{'s' * (n != 1)} of {', '.join(map(str, skipped))}"
            )
        if at < len(order):
            tail = Watched(loader, batches=order[at:], generator=own)
            try:
                yield from tail
            finally:
                _close(tail)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        own = self.__dict__
        if "_loader" not in own:  # not built yet (a copy being made)
            raise AttributeError(name)
        return getattr(own["_loader"], name)


def _close(window: Watched) -> None:
    """Stop a window's workers now: with the user's ``persistent_workers`` they would wait
    for an epoch that never comes, for the rest of the run."""
    it = getattr(window.sibling, "_iterator", None)
    if it is not None:
        it._shutdown_workers()
        window.sibling._iterator = None

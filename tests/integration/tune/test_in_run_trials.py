"""Trials inside one run (``torch_trials.InRunTrials``), in this process with a planner the
test gives: each window loads its part of the epoch under its setting, the epoch stays whole,
the script's random state is left as a plain epoch leaves it, and what does not fit is said."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from ioprobe.loaders.torch_trials import InRunTrials, unfit
from ioprobe.record import RunRecord
from tests.fixtures.datasets import SkewedDataset


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(100))


def loader(workers: int = 2, samples: int = 16 * 60) -> DataLoader[Any]:
    return DataLoader(
        SkewedDataset(samples, 0.0002, 50, 5.0), batch_size=16, shuffle=True, num_workers=workers
    )


def indices(batch: torch.Tensor) -> list[int]:
    return [int(v) for v in batch.flatten()]


def test_windows_load_the_epoch_in_its_order_and_leave_the_random_state_as_a_plain_epoch() -> None:
    torch.manual_seed(1)
    plain = [indices(b) for b in loader()]
    after_plain = torch.rand(3)

    planned = [{"num_workers": 1}, {"num_workers": 3, "prefetch_factor": 4}, {"num_workers": 2}]
    seen_by_planner: list[RunRecord] = []

    def planner(rec: RunRecord) -> list[dict[str, Any]]:
        seen_by_planner.append(rec)
        return [dict(p) for p in planned]

    torch.manual_seed(1)
    tuned = InRunTrials(loader(), 10, planner)
    got = [indices(b) for b in tuned]
    assert torch.equal(torch.rand(3), after_plain)  # no draw of the script's was taken
    assert got == plain  # every window in order: the epoch as a plain run loads it
    # windows of each setting's first round and 10 batches: 12, 11, 13, 12 of the 60
    assert [len(seen_by_planner)] == [1]
    settings = [(o.get("num_workers", 2), w.run.watch.settings.workers) for o, w in tuned.trials]
    assert [s for s, _ in settings] == [2, 1, 3, 2]
    assert all(a == b for a, b in settings)  # each window's record has its own setting
    assert [sum(e.batches for e in w.run.watch.epochs) for _, w in tuned.trials] == [
        12,
        11,
        13,
        12,
    ]
    assert tuned.trials[2][1].run.watch.settings.prefetch_factor == 4
    assert tuned.note == ""
    # the next epoch is the rest's, with the script's own setting and its own shuffle
    torch.manual_seed(5)
    again = [indices(b) for b in tuned]
    torch.manual_seed(5)
    assert again == [indices(b) for b in loader()]
    assert tuned.record.watch is not None and tuned.record.watch.settings.workers == 2


def test_settings_past_the_epochs_end_are_not_tried_and_the_note_says_so() -> None:
    torch.manual_seed(2)
    planned = [{"num_workers": 1}, {"num_workers": 8}, {"num_workers": 1}, {"num_workers": 9}]
    tuned = InRunTrials(loader(samples=16 * 30), 10, lambda rec: planned)
    got = [indices(b) for b in tuned]
    torch.manual_seed(2)
    assert got == [indices(b) for b in loader(samples=16 * 30)]  # every batch, once
    # 12 + 11 of 30 batches; 8 workers' window (18) is past the 7 left, the next 1 worker's
    # (11) too, and so is 9 workers'
    assert [o.get("num_workers", 2) for o, _ in tuned.trials] == [2, 1]
    assert tuned.note == (
        "3 planned settings not tried: the epoch had 7 batches left, fewer than their "
        "windows of 18, 11, 19"
    )


@pytest.mark.parametrize(
    ("made", "why"),
    [
        (lambda: DataLoader(list(range(64)), batch_size=4), "num_workers=0"),
        (lambda: DataLoader(Stream(), batch_size=4, num_workers=2), "a stream"),
        (lambda: loader(samples=16 * 40), "its epoch has 40 batches; the trials need about 42"),
    ],
)
def test_a_loader_that_cannot_hold_the_trials_is_named_with_why(made: Any, why: str) -> None:
    assert why in (unfit(made(), 10, 2) or "")


def test_a_loader_that_can_hold_them_passes() -> None:
    assert unfit(loader(samples=16 * 42), 10, 2) is None


def test_a_first_epoch_stopped_inside_the_first_window_gives_the_trials_up() -> None:
    # Lightning's sanity check takes two batches of the validation loader and drops it
    torch.manual_seed(3)
    tuned = InRunTrials(loader(), 10, lambda rec: [{"num_workers": 1}])
    for i, _ in enumerate(tuned):
        if i == 1:
            break
    assert tuned.released and tuned.trials == []
    second = [indices(b) for b in tuned]  # watched as the script has it, from now on
    after = torch.rand(1)
    torch.manual_seed(3)
    plain = loader()
    for i, _ in enumerate(plain):
        if i == 1:
            break
    assert second == [indices(b) for b in plain]
    assert torch.equal(torch.rand(1), after)
    assert tuned.record.watch is not None and tuned.record.watch.epochs[-1].batches == 60

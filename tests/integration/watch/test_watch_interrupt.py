"""Ctrl-C in a watched training loop: the KeyboardInterrupt reaches the user as it would
unwatched, and the record of what was measured stays readable, marked incomplete."""

from __future__ import annotations

import signal
import traceback
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe


class CtrlCAtSample(Dataset[torch.Tensor]):
    """Ctrl-C arrives while the loader makes sample ``at``: the loop waits on the loader."""

    def __init__(self, n: int, at: int) -> None:
        self.n = n
        self.at = at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.at:
            signal.raise_signal(signal.SIGINT)
        return torch.tensor([i])


@pytest.fixture(autouse=True)
def python_sigint_handler() -> None:
    # the tests send a real SIGINT to this process: it must raise, not end pytest
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_in_the_loop_body_propagates_unchanged_and_the_record_is_incomplete() -> None:
    loader = ioprobe.watch(DataLoader(list(range(300)), batch_size=10))
    seen = 0
    with pytest.raises(KeyboardInterrupt) as caught:
        try:
            for _batch in loader:
                seen += 1
                if seen == 4:
                    signal.raise_signal(signal.SIGINT)  # during the step, as a user's Ctrl-C
        except KeyboardInterrupt:
            run = loader.run  # read while handling it, as a training script's except does
            raise
    # the exception is the signal's own: raised in the test's frame, not re-raised by ioprobe
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].filename == __file__
    assert (frames[-1].line or "").startswith("signal.raise_signal")
    package = str(Path(ioprobe.__file__).parent)
    assert not any(f.filename.startswith(package) for f in frames)
    assert run.complete is False
    assert run.interrupted == "epoch 1, after 4 batches"
    assert run.watch is not None
    assert run.watch.epochs[0].batches == 4
    assert run.measured_samples_per_s and run.measured_samples_per_s > 0


def test_ctrl_c_inside_a_with_block_marks_the_record_read_after_it() -> None:
    watched = ioprobe.watch(DataLoader(list(range(300)), batch_size=10))
    with pytest.raises(KeyboardInterrupt), watched as loader:
        for i, _batch in enumerate(loader):
            if i == 2:
                signal.raise_signal(signal.SIGINT)
    run = loader.run
    assert run.complete is False
    assert run.interrupted == "epoch 1, after 3 batches"


def test_ctrl_c_while_waiting_for_a_batch_marks_the_record_read_any_time_later() -> None:
    loader = ioprobe.watch(DataLoader(CtrlCAtSample(300, at=55), batch_size=10))
    with pytest.raises(KeyboardInterrupt):
        for _batch in loader:
            pass
    run = loader.run  # outside any except block
    assert run.complete is False
    assert run.watch is not None
    assert run.watch.epochs[0].batches == 5
    assert run.watch.epochs[0].error is not None
    assert run.watch.epochs[0].error.startswith("KeyboardInterrupt")


def test_a_loop_that_runs_to_its_end_or_breaks_is_complete() -> None:
    full = ioprobe.watch(DataLoader(list(range(100)), batch_size=10))
    for _batch in full:
        pass
    early = ioprobe.watch(DataLoader(list(range(100)), batch_size=10))
    for i, _batch in enumerate(early):
        if i == 3:
            break
    for run in (full.run, early.run):
        assert run.complete is True
        assert run.interrupted is None

"""torchdata's StatefulDataLoader watched: a checkpoint taken mid-epoch saves the position
reached and resuming from it gives the batches an unwatched job gets, through
``ioprobe.watch`` and under ``ioprobe run`` alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ioprobe
from ioprobe.record import RunRecord
from tests.support.cli import watched_and_plain

# the test extras install torchdata; a GPU image without it collects this module and skips it
pytest.importorskip("torchdata")
from tests.fixtures import stateful_train

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_watched_checkpoint_saves_the_position_reached_and_resumes_like_unwatched(
    workers: int,
) -> None:
    plain = stateful_train.job(workers)
    watched = stateful_train.job(workers, watch=ioprobe.watch)
    assert plain["position"] == stateful_train.BEFORE
    # the position the watched loader saved was 0 before: resuming replayed other samples
    assert watched == plain


def test_a_state_loaded_before_watching_is_where_the_watched_loader_resumes() -> None:
    first = stateful_train.make(2)
    it = iter(first)
    for _ in range(stateful_train.BEFORE):
        next(it)
    state = first.state_dict()
    plain = stateful_train.make(2)
    plain.load_state_dict(state)
    again = stateful_train.make(2)
    again.load_state_dict(state)  # the job loads its checkpoint, then the loader is watched
    watched = ioprobe.watch(again)
    assert [b.tolist() for b in watched] == [b.tolist() for b in plain]


def test_ioprobe_run_watches_a_stateful_loader_and_the_job_resumes_as_unwatched(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run.json"
    cmd = (sys.executable, "-m", "tests.fixtures.stateful_train", "2")
    proc, plain = watched_and_plain(out, *cmd)
    assert json.loads(proc.stdout) == json.loads(plain.stdout)
    assert "no DataLoader was iterated" not in proc.stderr
    # both loaders were watched: the one checkpointed after 5 batches, and the resumed one
    runs = [RunRecord.load(out), RunRecord.load(tmp_path / "run.loader2.json")]
    batches = sorted(r.watch.epochs[0].batches for r in runs if r.watch)
    assert batches == [stateful_train.BEFORE, stateful_train.SAMPLES // 4 - stateful_train.BEFORE]


@pytest.mark.parametrize("sampler", ["torch", "torchdata"])
def test_a_loader_asked_for_its_state_before_iterating_gives_the_unwatched_batches(
    sampler: str,
) -> None:
    """``state_dict()`` before the first pass begins that pass (Accelerate's prepare() asks
    for it). With torch's own RandomSampler the pass has drawn an order no new pass can draw
    again, so the watched loader iterates that pass and its first epoch's workers time
    nothing; torchdata's sampler keeps its place in the state, and every epoch is timed."""
    from torch.utils.data import RandomSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    def two_epochs(watch: bool) -> tuple[list[list[int]], Any]:
        torch.manual_seed(11)
        data = stateful_train.Numbers()
        order = {"sampler": RandomSampler(data)} if sampler == "torch" else {"shuffle": True}
        loader: Any = StatefulDataLoader(data, batch_size=4, num_workers=2, **order)
        loader.state_dict()
        if watch:
            loader = ioprobe.watch(loader)
        return [b.flatten().tolist() for _ in range(2) for b in loader], loader

    plain, _ = two_epochs(False)
    watched, loader = two_epochs(True)
    assert watched == plain and plain[0] != plain[stateful_train.SAMPLES // 4]
    eps = loader.run.watch.epochs
    assert [e.workers_measured for e in eps] == [sampler != "torch", True]
    assert all(e.batches == stateful_train.SAMPLES // 4 for e in eps)

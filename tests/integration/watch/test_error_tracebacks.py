"""A dataset's error reaches the training loop watched with the traceback it has unwatched:
the same frames, the user's and torch's, with one of the watch's (its iterator's
``__next__``) where the loop takes the batch, and its cause and context as they were."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe

IOPROBE = str(Path(ioprobe.__file__).parent)
# behaviour alone, nothing against the clock: beside the other tests
pytestmark = pytest.mark.shared


class ChainedFailure(Dataset[torch.Tensor]):
    """Sample 5 fails with a ValueError raised from a KeyError."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 5:
            try:
                {}["shard"]
            except KeyError as e:
                raise ValueError(f"sample {i} is corrupt") from e
        return torch.tensor([i])


def _frames(loader: Any) -> tuple[list[tuple[str, str]], BaseException]:
    """The (file, function) of each frame of the error iterating ``loader`` raises, from
    the loop's own down, and the error."""
    it = iter(loader)
    try:
        for _ in it:
            pass
    except ValueError as e:
        # torch's iterator, left to its finalizer, waits 5 s per worker after an error
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        return [(f.filename, f.name) for f in traceback.extract_tb(e.__traceback__)], e
    raise AssertionError("the loader raised nothing")


@pytest.mark.parametrize("workers", [0, 2])
def test_the_error_has_its_unwatched_frames_and_one_of_the_watchs(workers: int) -> None:
    plain, plain_error = _frames(DataLoader(ChainedFailure(), batch_size=4, num_workers=workers))
    watched, error = _frames(
        ioprobe.watch(DataLoader(ChainedFailure(), batch_size=4, num_workers=workers))
    )
    ours = [f for f in watched if f[0].startswith(IOPROBE)]
    assert [name for _, name in ours] == ["__next__"], watched
    assert [f for f in watched if f not in ours] == plain
    # its cause as unwatched (raised in the main process; torch's re-raise of a worker's
    # error has none) and its text (a worker's error carries its traceback as text)
    assert type(error.__cause__) is type(plain_error.__cause__)
    assert isinstance(error.__cause__, KeyError) is (workers == 0)
    assert str(error) == str(plain_error)
    # printed whole, one line names the watch: its iterator's frame
    text = "".join(traceback.format_exception(error))
    assert text.count(IOPROBE) == 1, text


def _names(tb: Any) -> list[str]:
    return [f.name for f in traceback.extract_tb(tb)]


def test_an_error_raised_in_the_watchs_own_frame_keeps_every_frame() -> None:
    from ioprobe.loaders.torch_worker import user_frames

    def wrapper(inner: Any) -> None:  # a frame of the watch's
        inner()

    def ours() -> None:
        raise RuntimeError("the watch's own")

    def theirs() -> None:
        raise RuntimeError("the dataset's")

    for raised, kept in ((theirs, False), (ours, True)):
        try:
            wrapper(raised)
        except RuntimeError as e:
            tb = e.__traceback__
        own = frozenset({wrapper.__code__, ours.__code__})
        names = _names(user_frames(tb, own))
        # where the watch raised, where it raised stays in sight, and the frames to it
        assert ("wrapper" in names) is kept and names[-1] == raised.__name__

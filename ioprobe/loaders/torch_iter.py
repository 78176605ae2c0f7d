"""The iterator a watched DataLoader hands out: PyTorch's own, as seen from outside.

``Watched.__iter__`` makes each pass through ``torch.iterate``, a generator. Under ``ioprobe
run`` that pass is what ``iter(loader)`` returns to the user's script, which may ask it for
its length (a progress bar), its ``_num_yielded``, or whether it is a
``_BaseDataLoaderIter``: ``WatchedIter`` answers those as PyTorch's iterator does.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any

from torch.utils.data.dataloader import _BaseDataLoaderIter

from ioprobe.loaders.torch_worker import user_frames


class Maker:
    """A DataLoader as ``iterate`` sees it, keeping the iterator ``iter()`` made of it
    (``it``); every other attribute is the loader's."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.it: Any = None

    def __iter__(self) -> Any:
        self.it = iter(self.loader)
        return self.it

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class WatchedIter(_BaseDataLoaderIter):
    """A pass over a watched DataLoader, as the loader's own iterator looks from outside:
    a ``_BaseDataLoaderIter`` whose ``len()`` and attributes (``_num_yielded``,
    ``_shutdown_workers``, ``_workers``) are those of PyTorch's iterator once the pass has
    made it (at the first ``next()``), and whose batches come through ``iterate``. A script
    that asks its iterator for its length (a progress bar) runs watched as it does
    unwatched."""

    def __init__(self, batches: Iterator[Any], made: Maker, loader: Any) -> None:
        # not the base's __init__: the pass makes PyTorch's own iterator. Attributes the
        # instance holds are found without __getattr__: one lookup per batch in __next__
        self._ioprobe_batches = batches
        self._ioprobe_next = batches.__next__
        self._ioprobe_made = made
        self._ioprobe_loader = loader

    def __iter__(self) -> WatchedIter:
        return self

    def __next__(self) -> Any:
        try:
            return self._ioprobe_next()
        except StopIteration:
            raise
        except Exception as e:
            error = e
        # the user's error, raised again with the traceback it has unwatched
        try:
            raise error.with_traceback(self._ioprobe_user_traceback(error))
        finally:
            # no cycle through this frame: a worker still inside a slow sample would be
            # killed at exit, leaving multiprocessing's folder behind (as `except` does)
            del error

    def _ioprobe_user_traceback(self, error: Exception) -> TracebackType | None:
        """``error``'s traceback less the pass's and the wrappers' frames, and less this
        iterator's own (raising it again adds that back): one frame of the watch's where
        unwatched there is none. Off the batches' path: only for an error."""
        tb = error.__traceback__
        own = frozenset({self._ioprobe_batches.gi_code, Maker.__iter__.__code__})  # type: ignore[attr-defined]
        return user_frames(tb.tb_next if tb is not None else None, own)

    def __len__(self) -> int:
        it = self._ioprobe_made.it
        return len(it) if it is not None else len(self._ioprobe_loader)

    def __getattr__(self, name: str) -> Any:
        # only names the class and the instance lack: PyTorch's iterator's own state (read
        # without __getattr__ again: an instance half made, unpickled, raises, not recurses)
        it = object.__getattribute__(self, "_ioprobe_made").it
        if it is None:
            raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r} yet")
        return getattr(it, name)

    def close(self) -> None:
        """End the pass (its epoch) now, as a generator's ``close()`` does."""
        self._ioprobe_batches.close()  # type: ignore[attr-defined]

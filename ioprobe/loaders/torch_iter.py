"""The iterator a watched DataLoader hands out: PyTorch's own, as seen from outside.

``Watched.__iter__`` makes each pass through ``torch.iterate``, a generator. Under ``ioprobe
run`` that pass is what ``iter(loader)`` returns to the user's script, which may ask it for
its length (a progress bar), its ``_num_yielded``, or whether it is a
``_BaseDataLoaderIter``: ``WatchedIter`` answers those as PyTorch's iterator does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data.dataloader import _BaseDataLoaderIter


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
        return self._ioprobe_next()

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

"""Which loaders a watcher must iterate itself, and the routing that hands a loader's
iteration to its watcher wherever the iteration is started.

Stateful loaders keep their iteration state (position, RNG, worker snapshots) in their own
iterator, and are known by module and class name so that nothing here imports them. Their
``__iter__`` does not go through DataLoader's, and a watcher must iterate one of them:
otherwise ``state_dict()`` would describe an iterator that never ran, and a resumed job would
replay other samples. ``loaders.torch`` builds its sibling from one.

The routing patches a loader class's own ``__iter__`` (and a stateful one's ``state_dict``
and ``load_state_dict``) once, at class level, and decides per instance: a loader with a
watcher (registered by ``route``, or made on demand where ``watch_every_loader`` was called)
is iterated by it, every other one by the original method. Code that wraps a DataLoader keeps
its own logic around the iteration: Accelerate's prepared loader iterates the DataLoader it
holds, a subclass calls ``super().__iter__()``. ``ioprobe run`` watches every loader this way
(``loaders.run_hook``); ``ioprobe.watch`` of such a wrapping loader registers only the
DataLoader inside it (``loaders.torch``). One registry for both, so a loader is never watched
twice.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

STATEFUL_LOADERS = {"torchdata.stateful_dataloader.stateful_dataloader": "StatefulDataLoader"}
ROUTED = ("state_dict", "load_state_dict")  # a stateful loader's checkpoint methods

# loader -> its watcher, both weakly: a watcher holds its loader, so a strong value would
# keep every loader ever watched alive (with its workers, where they persist); a watcher
# dropped by the script leaves its loader iterating itself again
_routes: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
_make: list[Callable[[Any], Any]] = []  # set by watch_every_loader: a watcher for any loader


def is_stateful(cls: type) -> bool:
    return STATEFUL_LOADERS.get(cls.__module__) == cls.__name__


def route(loader: Any, watcher: Any) -> None:
    """Let ``watcher`` iterate ``loader`` whenever the loader's iteration is started."""
    _routes[loader] = weakref.ref(watcher)


def watch_every_loader(make: Callable[[Any], Any]) -> None:
    """Give every loader with no watcher one made by ``make(loader)`` at its first use."""
    _make[:] = [make]


def watcher_of(loader: Any) -> Any:
    """The watcher that iterates ``loader``, or None where it iterates itself: a watcher's
    own sibling (marked ``_ioprobe_inner``) always does."""
    if getattr(loader, "_ioprobe_inner", False):
        return None
    ref = _routes.get(loader)
    watcher = ref() if ref is not None else None
    if watcher is None and _make:
        watcher = _make[0](loader)  # run_hook keeps it alive until the records are saved
        route(loader, watcher)
    return watcher


def patch_class(cls: type) -> None:
    """Route what ``cls`` itself defines of ``__iter__``, ``state_dict`` and
    ``load_state_dict`` through ``watcher_of``; a second call changes nothing."""
    own = cls.__dict__
    if "__iter__" in own and not hasattr(own["__iter__"], "__ioprobe_original__"):
        cls.__iter__ = _routed_iter(own["__iter__"])  # type: ignore[attr-defined]
    for name in ROUTED:
        if name in own and not hasattr(own[name], "__ioprobe_original__"):
            setattr(cls, name, _routed(name, own[name]))


def _routed_iter(original: Any) -> Any:
    def routed_iter(self: Any) -> Any:
        watcher = watcher_of(self)
        return original(self) if watcher is None else iter(watcher)

    routed_iter.__ioprobe_original__ = original  # type: ignore[attr-defined]
    return routed_iter


def _routed(name: str, original: Any) -> Any:
    def routed(self: Any, *args: Any) -> Any:
        # before the first iteration too: the watcher's sibling is the loader that will run
        watcher = watcher_of(self)
        return original(self, *args) if watcher is None else getattr(watcher, name)(*args)

    routed.__ioprobe_original__ = original  # type: ignore[attr-defined]
    return routed

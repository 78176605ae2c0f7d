"""Imported by the ``sitecustomize`` that ``ioprobe run`` puts on a child's path.

Patches ``DataLoader.__iter__`` as soon as torch's dataloader module is imported (never
importing torch itself), so every loader the unchanged script iterates is watched. At exit,
each process that iterated a loader writes one record per loader into ``IOPROBE_RUN_DIR``,
as measured: ``ioprobe run`` judges them in its own process.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import weakref
from types import ModuleType
from typing import Any

TARGET = "torch.utils.data.dataloader"
_watchers: list[Any] = []


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _patch(module: ModuleType) -> None:
    dl_cls = module.DataLoader
    original = dl_cls.__iter__
    by_loader: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def patched_iter(self: Any) -> Any:
        if getattr(self, "_ioprobe_inner", False):
            return original(self)  # the sibling loader ioprobe iterates on the user's behalf
        watched = by_loader.get(self)
        if watched is None:
            from ioprobe.watch.torch import Watched

            watched = by_loader[self] = Watched(self)
            _watchers.append(watched)
        return iter(watched)

    dl_cls.__iter__ = patched_iter


def _write_records() -> None:
    out = os.environ.get("IOPROBE_RUN_DIR")
    if not out:
        return
    # the script ended on Ctrl-C: Python sets this before the exit hooks run
    interrupted = isinstance(getattr(sys, "last_value", None), KeyboardInterrupt)
    for i, w in enumerate(_watchers):
        try:
            rec = w.run
            if rec.watch is None or not any(e.batches for e in rec.watch.epochs):
                continue
            if interrupted and rec.complete:
                from ioprobe.watch.collector import mark_interrupted

                mark_interrupted(rec)
            rec.save(os.path.join(out, f"loader-{os.getpid()}-{i}.json"))
        except Exception as exc:  # never turn the user's clean exit into a crash
            print(f"ioprobe: could not save the record of loader {i}: {exc}", file=sys.stderr)
    if interrupted:
        _keep_sigint_exit()


def _keep_sigint_exit() -> None:
    """Let the script still end as Ctrl-C ends it, by SIGINT (status 130 in a shell).

    CPython decides that from a flag that every evaluation of a string clears, and saving
    the records evaluates some (a namedtuple made by a module imported here), so the script
    would exit 1. The flag is set again by a string that raises KeyboardInterrupt."""
    with contextlib.suppress(KeyboardInterrupt):
        exec("raise KeyboardInterrupt")


def install() -> None:
    sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(_write_records)

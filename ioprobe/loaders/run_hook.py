"""Imported by the ``sitecustomize`` that ``ioprobe run`` puts on a child's path.

Patches ``DataLoader.__iter__`` as soon as torch's dataloader module is imported (never
importing torch itself), so every loader the unchanged script iterates is watched; and DALI's
PyTorch iterators and ``Pipeline.run`` as soon as their modules are imported
(``loaders.dali.watch_in_place``), so an unchanged DALI script is watched too. At exit,
each process that iterated a loader writes one record per loader into ``IOPROBE_RUN_DIR``,
as measured: ``ioprobe run`` judges them in its own process. With ``IOPROBE_LIVE=1``
(``ioprobe run --live``) each watched loader also draws the live panel (``monitor.live``): the
script owns the terminal's stderr, so its process draws it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ioprobe.loaders.torch_stateful import is_stateful, patch_class, watch_every_loader

TARGET = "torch.utils.data.dataloader"
DALI_ITERATORS = "nvidia.dali.plugin.pytorch"
DALI_PIPELINE = "nvidia.dali.pipeline"
LIVE_ENV = "IOPROBE_LIVE"  # "1": ioprobe run --live
TRIAL_ENV = "IOPROBE_TRIAL"  # a trial of ioprobe tune: its settings and batches, as JSON
_watchers: list[Any] = []
# ioprobe tune --in-run: the settings to try after the first window's record, given by the
# edge that wrote the hook (it judges; nothing here does), and the loaders passed over
_planner: list[Callable[[Any, int], list[dict[str, Any]]]] = []
_passed_over: list[str] = []


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _patch(module: ModuleType) -> None:
    """Watch every DataLoader the script iterates: DataLoader's own ``__iter__``, which
    loaders that wrap one (Accelerate's prepared loader iterates the DataLoader it holds; a
    subclass calls ``super().__iter__()``) reach with their own logic around it intact, and
    the stateful loaders', which do not reach it (they are defined after this module is
    imported: ``__init_subclass__`` patches them as they are created). The routing is
    ``loaders.torch_stateful``'s, which ``ioprobe.watch`` shares."""
    dl_cls = module.DataLoader
    watch_every_loader(_watcher)
    patch_class(dl_cls)
    previous = dl_cls.__dict__.get("__init_subclass__")

    def init_subclass(cls: type, /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(dl_cls, cls).__init_subclass__(**kwargs)
        if is_stateful(cls):
            patch_class(cls)

    dl_cls.__init_subclass__ = classmethod(init_subclass)


def _patch_dali_iterators(module: ModuleType) -> None:
    """Watch DALI's PyTorch iterators (DALIGenericIterator and its subclasses such as
    DALIClassificationIterator, DALIRaggedIterator) where the script makes them."""
    from ioprobe.loaders.dali import watch_in_place
    from ioprobe.monitor.collector import unjudged

    classes = [
        cls
        for name in ("DALIGenericIterator", "DALIRaggedIterator")
        if isinstance(cls := getattr(module, name, None), type)
        and "__init__" in cls.__dict__
        and "__next__" in cls.__dict__
    ]
    watch_in_place(classes, None, _made, unjudged)


def _patch_dali_pipeline(module: ModuleType) -> None:
    """Watch every DALI pipeline the script drives with ``run()``."""
    from ioprobe.loaders.dali import watch_in_place
    from ioprobe.monitor.collector import unjudged

    pipeline = getattr(module, "Pipeline", None)
    if isinstance(pipeline, type):
        watch_in_place([], pipeline, _made, unjudged)
    # DALI shuts its pipelines down at exit, and their threads' CPU time and operator ranges
    # go with them: registered after DALI's handler, this one runs before it
    atexit.register(_end_dali_epochs)


def _end_dali_epochs() -> None:
    """End the epoch each DALI watcher has running while its pipelines are still up."""
    from ioprobe.loaders.dali import WatchedIterator, WatchedPipeline

    for w in _watchers:
        if isinstance(w, WatchedIterator | WatchedPipeline):
            with contextlib.suppress(Exception):  # never turn the user's exit into a crash
                w._end(None)


def _made(watched: Any, saved: Any = None) -> None:
    """A watcher made: saved at exit (``saved`` in its place, where another object holds
    it), drawing the live panel if asked."""
    if not _watchers:
        _mark_made()
    _watchers.append(watched if saved is None else saved)
    if live_requested():
        from ioprobe.monitor.live import attach

        attach(watched._collector)


_PATCHES = {
    TARGET: _patch,
    DALI_ITERATORS: _patch_dali_iterators,
    DALI_PIPELINE: _patch_dali_pipeline,
}


def trial() -> dict[str, Any]:
    """The trial ``ioprobe tune`` asked this process for (``IOPROBE_TRIAL``, JSON): the
    DataLoader settings to use (``overrides``) and the batches to measure (``batches``);
    empty outside a trial or where it does not parse."""
    text = os.environ.get(TRIAL_ENV)
    if not text:
        return {}
    try:
        plan = json.loads(text)
    except ValueError:
        return {}
    return plan if isinstance(plan, dict) else {}


def _watcher(loader: Any) -> Any:
    """A new watcher for ``loader``, saved at exit (and drawing the live panel if asked).
    In a trial of ``ioprobe tune``, a loader with workers runs under the trial's settings
    and stops the script once it has delivered the trial's batches."""
    from ioprobe.loaders.torch import Watched

    plan = trial()
    if plan.get("in_run"):
        return _in_run(loader, plan)
    if plan and getattr(loader, "num_workers", 0) > 0:
        overrides = plan.get("overrides") or {}
        # the trial's batches count from the end of its workers' first round
        first_round = overrides.get("num_workers") or loader.num_workers
        batches = plan.get("batches")
        stop = batches + first_round if isinstance(batches, int) else None
        watched = Watched(loader, overrides=overrides, stop_after=stop)
    else:
        watched = Watched(loader)
    _made(watched)
    return watched


def _in_run(loader: Any, plan: dict[str, Any]) -> Any:
    """Under ``ioprobe tune --in-run``: the first loader whose first epoch can hold the trials
    runs them there (``torch_trials``); every other loader is watched as under ``ioprobe
    run``, and the script runs to its end."""
    from ioprobe.loaders.torch import Watched
    from ioprobe.loaders.torch_trials import InRunTrials, unfit

    batches, trials = plan.get("batches"), plan.get("trials")
    holder = next((w for w in _watchers if isinstance(w, InRunTrials) and not w.released), None)
    # a loader begun after the holder's, before the holder measured its first window, takes
    # the trials over: Lightning's sanity check iterates two batches of the validation loader
    # and keeps that iterator while training begins
    taken = holder is not None and bool(holder.trials)
    if _planner and isinstance(batches, int) and isinstance(trials, int) and not taken:
        why = unfit(loader, batches, trials)
        if why is None:
            if holder is not None:
                holder.released = True
            plan_for = _planner[0]
            tuned = InRunTrials(loader, batches, lambda rec: plan_for(rec, trials))
            _made(tuned.rest, saved=tuned)  # saved at exit as its trials and the rest
            return tuned
        if getattr(loader, "num_workers", 0) > 0:
            _passed_over.append(f"A {type(loader).__name__} held no trials: {why}")
    watched = Watched(loader)
    _made(watched)
    return watched


def _mark_made() -> None:
    """Leave ``made-{pid}`` in the records folder at the first loader: a script that ends
    without Python's exit handlers (``os._exit``, a crash) saves no record, and ``ioprobe
    run`` must not then say that no loader was made. Once per process, never per batch."""
    out = os.environ.get("IOPROBE_RUN_DIR")
    if out:
        # the folder gone, or full: only the message is less exact
        with contextlib.suppress(OSError):
            open(os.path.join(out, f"made-{os.getpid()}"), "x").close()


def _write_records() -> None:
    out = os.environ.get("IOPROBE_RUN_DIR")
    if not out or not os.path.isdir(out):
        # gone: the run that made it is over (this process outlived the script, as a
        # daemon's grandchild does), or the script took it away, which run says itself
        return
    # the script ended on Ctrl-C: Python sets this before the exit hooks run
    interrupted = isinstance(getattr(sys, "last_value", None), KeyboardInterrupt)
    stopped = False  # Ctrl-C while the records were made (a read check): they are kept
    _write_trials(out)
    for i, w in enumerate(_watchers):
        try:
            try:
                rec = w.record  # DALI's watched pipeline has a run(): DALI's own
            except KeyboardInterrupt:  # in the read check: the record as run, unchecked
                stopped = True
                rec = w.record
            if rec.watch is None or not any(e.batches for e in rec.watch.epochs):
                _note_empty(out, i, rec)
                continue
            if interrupted and rec.complete:
                from ioprobe.monitor.collector import mark_interrupted

                mark_interrupted(rec)
            rec.save(os.path.join(out, f"loader-{os.getpid()}-{i}.json"))
        except Exception as exc:  # never turn the user's clean exit into a crash
            print(f"ioprobe: could not save the record of loader {i}: {exc}", file=sys.stderr)
    if interrupted or stopped:
        _keep_sigint_exit()


def _note_empty(out: str, i: int, rec: Any) -> None:
    """Leave ``empty-{pid}-{i}`` where loader ``i`` was iterated and no batch reached the
    script (a worker that died before its first batch was sent): ``ioprobe run`` says so
    with the loader's error, rather than that the script never iterated it."""
    epochs = rec.watch.epochs if rec.watch is not None else []
    if not epochs:
        return
    error = next((e.error for e in epochs if e.error), "")
    with (
        contextlib.suppress(OSError),
        open(os.path.join(out, f"empty-{os.getpid()}-{i}"), "w") as f,
    ):
        f.write(error[:500])


def _write_trials(out: str) -> None:
    """The windows of ``ioprobe tune --in-run``, each as ``trial-{pid}-{k}.json`` (the first
    is the loader as the script has it), and ``trials-{pid}.json``: why trials ended early
    or were never begun."""
    if not trial().get("in_run"):
        return
    # never imported here: it imports torch, which a script that never did must not pay at
    # exit (torch's finalizers then run in a dying interpreter and print "Exception
    # ignored"); where the script made no trials the module was never loaded
    trials_mod = sys.modules.get("ioprobe.loaders.torch_trials")
    notes = list(_passed_over)
    for w in _watchers:
        if trials_mod is not None and isinstance(w, trials_mod.InRunTrials):
            for k, (_overrides, window) in enumerate(w.trials):
                try:
                    window.run.save(os.path.join(out, f"trial-{os.getpid()}-{k}.json"))
                except Exception as exc:  # the other trials are still reported
                    notes.append(f"trial {k + 1}'s record could not be saved: {exc}")
            if w.note:
                notes.append(w.note)
    path = os.path.join(out, f"trials-{os.getpid()}.json")
    with contextlib.suppress(OSError), open(path, "w") as f:
        json.dump({"notes": notes}, f)


def _keep_sigint_exit() -> None:
    """Let the script still end as Ctrl-C ends it, by SIGINT (status 130 in a shell).

    CPython decides that from a flag that every evaluation of a string clears, and saving
    the records evaluates some (a namedtuple made by a module imported here), so the script
    would exit 1. The flag is set again by a string that raises KeyboardInterrupt."""
    with contextlib.suppress(KeyboardInterrupt):
        exec("raise KeyboardInterrupt")


def live_requested() -> bool:
    """Whether ``ioprobe run --live`` asked this process for the live panel."""
    return os.environ.get(LIVE_ENV) == "1"


def install(planner: Callable[[Any, int], list[dict[str, Any]]] | None = None) -> None:
    """Patch the frameworks as the script imports them, and save the records at its exit.
    ``planner(record, trials)``: under ``ioprobe tune --in-run``, the settings to try after
    the first window (the caller's: it judges the record)."""
    if planner is not None:
        _planner[:] = [planner]
    sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(_write_records)

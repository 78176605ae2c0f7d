"""What-if records: a run's pipeline re-modelled with some resources changed.

``whatif(rec, change)`` is what ``ioprobe whatif`` prints and saves: the record's stages under
the change (``ioprobe.analysis.scenario.evaluate``), the new verdict and advice, and the run
it started from. Applied to a what-if record, the changes compose on the original run.
``with_probe`` adds a probe's storage sweep of the same target to a change, the curve a
watched run's storage follows at a new number of readers (``ioprobe whatif --probe``).
"""

from __future__ import annotations

import dataclasses
import posixpath
from urllib.parse import urlsplit

from ioprobe import capacity
from ioprobe.analysis import dali_queue, loader_sim, streams
from ioprobe.analysis.catalog import Catalog
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.scenario import base_of, evaluate, merge, split_base
from ioprobe.analysis.verdict import finalize
from ioprobe.errors import BadInputError
from ioprobe.record import Change, RunRecord, WhatIfData


def whatif(
    rec: RunRecord,
    change: Change,
    catalog: Catalog | None = None,
    probe: RunRecord | None = None,
    probe_name: str | None = None,
) -> RunRecord:
    """A ``whatif`` record: ``rec`` with ``change`` applied, its verdict and recommendations
    recomputed (``catalog``: the storage classes the advice may suggest). ``probe``: a probe
    record of the storage a watched ``rec`` read, whose concurrency sweep its storage
    follows (``with_probe``; ``probe_name``, its file, names it in the assumptions)."""
    if probe is not None:
        change = with_probe(rec, change, probe, probe_name)
    sc = evaluate(rec, change)
    base, before = split_base(rec)
    was = pipeline_model(base.stages)  # the verdict as this version of the model sees it
    judged = dataclasses.replace(
        base, bottleneck=was.bottleneck, predicted_samples_per_s=was.predicted_samples_per_s
    )
    f = sc.findings
    gpu_cap = f.capacities["gpu"]
    out = dataclasses.replace(
        base,
        kind="whatif",
        stages=sc.stages,
        measured_samples_per_s=None,
        gpu_idle_fraction=(1.0 - f.predicted_samples_per_s / gpu_cap) if gpu_cap else None,
        gpu_idle_method="predicted: 1 - delivered / GPU capacity" if gpu_cap else None,
        recommendations=[],
        pipeline=None,
        whatif=WhatIfData(
            **base_of(judged),
            change=merge(before, change),
            deltas=list(sc.deltas),
            assumptions=list(sc.assumptions) + list(f.assumptions),
            unchecked=list(sc.unchecked),
        ),
        notes=list(base.notes),
    )
    done = finalize(out, catalog)
    replay = replayed(rec, change)
    if replay is not None and done.whatif is not None:
        done.predicted_samples_per_s = replay.samples_per_s
        if gpu_cap:
            done.gpu_idle_fraction = max(1.0 - replay.samples_per_s / gpu_cap, 0.0)
        done.whatif.assumptions = [
            "the loader's settings are predicted by replaying the run's logged batches under "
            f"them: {replay.gain:.2f}x the measured rate (the stage model alone: "
            f"{f.predicted_samples_per_s:,.0f} samples/s)",
            *done.whatif.assumptions,
        ]
        done.whatif.unchecked = list(replay.assumptions)
    return done


# The changes the replay of a DataLoader's batches predicts; any other change is the stage
# model's (new hardware moves every stage, which the replay does not model).
LOADER_CHANGES = frozenset({"workers", "prefetch_factor", "in_order"})


def replayed(rec: RunRecord, change: Change) -> loader_sim.Prediction | None:
    """``change`` predicted by ``loader_sim``, when it (with what an earlier what-if changed)
    only sets the DataLoader's workers, prefetch factor or order and the run it started from
    logged batches to replay (by ``dali_queue`` for a DALI pipeline's threads and queue
    depth); None otherwise. An IterableDataset's workers each make their
    own stream: at the run's worker count the replay keeps each batch in its stream, and at
    another, where the streams carry unequal work, the split decides
    (``streams.other_workers``)."""
    base, before = split_base(rec)
    ch = merge(before, change)
    default = Change()
    touched = {
        f.name
        for f in dataclasses.fields(Change)
        if getattr(ch, f.name) != getattr(default, f.name)
    }
    if not touched or touched - LOADER_CHANGES or ch.workers == 0:
        return None
    # a DALI pipeline's threads stand as workers, its queue depth as the prefetch factor
    dali = dali_queue.recorded_setting(base)
    s0 = dali or loader_sim.recorded_setting(base)
    if s0 is None:
        return None
    s = loader_sim.Setting(
        ch.workers if ch.workers is not None else s0.workers,
        ch.prefetch_factor if ch.prefetch_factor is not None else s0.prefetch_factor,
        ch.in_order if ch.in_order is not None else s0.in_order,
    )
    if dali is not None:
        return dali_queue.predict(base, s) if s.in_order else None
    if base.watch is None or not base.watch.settings.iterable:
        return loader_sim.predict(base, s)
    if s.workers == s0.workers:
        return loader_sim.predict(base, s, loader_sim.logged_costs(base))
    return streams.other_workers(base, s) or loader_sim.predict(base, s)


def with_probe(
    rec: RunRecord, change: Change, probe: RunRecord, probe_name: str | None = None
) -> Change:
    """``change`` with the concurrency sweep of ``probe`` as the curve the watched run
    ``rec``'s storage follows (``Change.storage_sweep``): the pass the probe took its storage
    capacity from, cold where it ran. Refused, naming what is wrong, unless ``rec`` is a
    watched run (or a what-if of one), ``probe`` a probe whose sweep moved bytes, and their
    targets, where both name a location, the same storage (``same_storage``)."""
    name = probe_name or "the probe"
    base, _ = split_base(rec)
    if probe.kind != "probe":
        raise BadInputError(
            f"--probe {name}: a {probe.kind} record; --probe takes one from `ioprobe probe` "
            "(its storage sweep)"
        )
    if base.kind != "watch":
        raise BadInputError(
            f"--probe {name}: the run is a {base.kind} record, which follows its own storage "
            "sweep; --probe applies to a watched run (`ioprobe run`, `ioprobe.watch`)"
        )
    st = probe.stages.storage
    p = st.cold or st.warm
    if p is None or not capacity.sweep_points(p.sweep):
        raise BadInputError(
            f"--probe {name}: the probe has no storage sweep that read any bytes; probe the "
            "target again with its storage phase (`ioprobe probe TARGET`)"
        )
    if same_storage(base.dataset.target, probe.dataset.target) is False:
        raise BadInputError(
            f"--probe {name} probed {probe.dataset.target}, but the run read "
            f"{base.dataset.target}: a probe of other storage can't say how this run's "
            "storage scales"
        )
    source = f"{name}, the {p.cache} pass of a probe of {probe.dataset.target}"
    return dataclasses.replace(change, storage_sweep=list(p.sweep), storage_sweep_source=source)


def same_storage(run_target: str, probe_target: str) -> bool | None:
    """Whether a run's dataset target and a probe's name the same storage: the same
    location, or one inside the other (a probe of the dataset's root, a run over one of its
    folders). None where either names no location: a watched dataset is often known by its
    class alone. A DALI run lists its readers' roots, comma-separated: any may match."""
    probed = _location(probe_target)
    read = [loc for t in run_target.split(", ") if (loc := _location(t)) is not None]
    if probed is None or not read:
        return None
    return any(_inside(a, probed) or _inside(probed, a) for a in read)


def _location(target: str) -> tuple[str, str, tuple[str, ...]] | None:
    """``target`` as (scheme, host, path parts): a URL's scheme and host in lower case, a
    local path (or file:// URL) as scheme "file"; None for anything else."""
    t = target.strip()
    if "://" in t:
        u = urlsplit(t)
        # a redacted password still leaves a user name: not part of where the data is
        scheme, host, path = u.scheme.lower(), u.netloc.rsplit("@", 1)[-1].lower(), u.path
        if scheme == "file":
            host = ""
    elif t.startswith("/"):
        scheme, host, path = "file", "", t
    else:
        return None
    parts = tuple(x for x in posixpath.normpath(path or "/").split("/") if x)
    return scheme, host, parts


def _inside(a: tuple[str, str, tuple[str, ...]], b: tuple[str, str, tuple[str, ...]]) -> bool:
    """``a`` is ``b`` or lies under it."""
    return a[:2] == b[:2] and a[2][: len(b[2])] == b[2]


__all__ = ["same_storage", "whatif", "with_probe"]

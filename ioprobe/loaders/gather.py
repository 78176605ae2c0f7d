"""Every rank's record of a watched loader, gathered to rank 0 after training.

Each rank of a job (run under ``torchrun``, ``srun``, Lightning's launcher, or any whose
process group is initialised: ``collect.distributed.rank_now``) that watches its loader with
``ioprobe.watch`` has its own record. ``gather``, called by every rank once its training
ends, sends them all to rank 0 over a gloo group (``collect.group``: a subgroup of the
user's process group where one is initialised, never re-initialising theirs; otherwise a
group of its own from the launcher's rendezvous, destroyed after), and rank 0 merges them.
Nothing is added to the training steps: the one collective runs after them, with a timeout.

This package measures and never judges, so the caller passes the merge:
``gather(loader.run, merge=ioprobe.analysis.ranks.merge_ranks)``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from collections.abc import Callable

from ioprobe.collect.distributed import rank_now
from ioprobe.collect.group import TorchGroup
from ioprobe.errors import BadInputError, RankLostError
from ioprobe.record import RunRecord

__all__ = ["gather"]

# each call's phase has its own name: the group's store keeps the arrival marks of earlier
# gathers (one per loader), and every rank calls gather as many times, in the same order
_calls = itertools.count()


def gather(
    record: RunRecord | None,
    *,
    merge: Callable[[list[RunRecord]], RunRecord],
    timeout_s: float = 60.0,
) -> RunRecord | None:
    """Called by every rank after training with its loader's record (None for a rank whose
    loader delivered nothing): on rank 0, ``merge`` of every rank's record; on the others,
    None. Outside a distributed job (or in a world of one rank) the record comes back as it
    is. A rank that does not arrive within ``timeout_s`` (dead, or stuck) does not hang the
    others: rank 0 returns its own record with a note naming the missing ranks, and each
    rank says on stderr what happened; a failure here never ends the training script."""
    info = rank_now()
    if info is None:
        return record
    phase = f"watch-gather-{next(_calls)}"
    text = record.dumps() if record is not None else None
    try:
        group = TorchGroup(info, timeout_s)
    except (BadInputError, RankLostError) as exc:
        return _alone(record, info.rank, str(exc), getattr(exc, "missing", []))
    try:
        texts = group.gather(phase, text, timeout_s)
    except RankLostError as exc:
        return _alone(record, info.rank, str(exc), exc.missing)
    finally:
        group.close()
    if info.rank != 0:
        return None
    records = [RunRecord.from_json(json.loads(t), f"rank {r}") for r, t in enumerate(texts) if t]
    return merge(records) if records else None


def _alone(record: RunRecord | None, rank: int, why: str, missing: list[int]) -> RunRecord | None:
    print(f"ioprobe: the ranks' records were not gathered: {why}", file=sys.stderr)
    if rank != 0 or record is None:
        return None
    who = f" (missing: {', '.join(map(str, missing))})" if missing else ""
    note = f"not gathered from the other ranks{who}: this rank's figures alone"
    return dataclasses.replace(record, notes=[*record.notes, note])

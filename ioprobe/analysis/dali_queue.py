"""DALI's thread pool and prefetch queue, replayed from the run's own batches.

A DALI pipeline makes its batches one after another: an iteration runs the pipeline's
operators, each spreading the batch's samples over ``num_threads`` threads. It runs ahead of
the consumer by at most ``prefetch_queue_depth`` iterations: DALI's PyTorch iterators copy
each batch out, release its buffer and schedule one more iteration as they hand it over. So
iteration i begins once iteration i - 1 is done and the consumer has taken batch i - depth,
and a consumer whose steps come in bursts (a slow step now and then) is covered by a deeper
queue only where the pipeline is faster than it between the bursts.

``costs`` reads what the replay needs from the consumer's own timeline (the main track, a row
per batch): its step (from taking a batch to asking for the next), its time to take a batch
that was ready (the copy out, read from the batches the queue held when asked), and each
iteration's making time. Where the consumer waited for two batches in a row the pipeline
was busy between their arrivals, so the second one's making time is the time between them;
the others take the median of those (where none waited twice in a row, each takes the
epochs' time per batch as the stage model's loader capacity gives it).

``simulate`` replays them under a queue depth; another thread count scales every making time
by the stage model's loader capacity (storage or CPU, the slower) at the count as run over
its capacity at the new count, so the replay and the stage model agree where nothing varies.
``predict`` states a setting's rate as the measured rate times simulated(setting) /
simulated(as run), as ``loader_sim.predict`` does for a DataLoader; its ``Setting`` carries
the thread count as ``workers`` and the queue depth as ``prefetch_factor``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics

from ioprobe import units
from ioprobe.analysis.loader_sim import NEAR, Prediction, Setting, memory_limit
from ioprobe.analysis.model import MIN_GAIN, PipelineFindings
from ioprobe.analysis.scenario import evaluate, recorded_cores
from ioprobe.errors import BadInputError
from ioprobe.record import Change, Recommendation, RunRecord, Track

# Batches a replay runs: the logged ones cycled until the deepest queue tried has settled
MIN_REPLAY = 600
# Steady rows a record needs before its batches are replayed, and the most it replays (its
# first): a search of every setting stays under a second on a long run's track
MIN_ROWS = 8
MAX_ROWS = 4000
# A batch was waited for where the consumer's time in next() passed its time to take a
# ready batch by this much (and by WAIT_SHARE of the time per batch)
WAIT_FLOOR_S = 0.001
WAIT_SHARE = 0.1
# Where the median making time replays the run as it was within this of its observed rate,
# it stands for the batches whose making was not seen
CALIBRATED = 0.02
# The queue depths a search tries beside the recorded one, and the most threads per core
DEPTHS = (1, 2, 3, 4, 6, 8)
THREADS_PER_CORE = 2
MAX_THREADS = 64


@dataclasses.dataclass(frozen=True)
class DaliCosts:
    """The replay's inputs: per steady batch the pipeline's making time (at the recorded
    thread count) and the consumer's step after it, the consumer's time to take a ready
    batch, and the samples a batch holds."""

    produce: tuple[float, ...]
    steps: tuple[float, ...]
    take: float
    samples_per_batch: float
    waited: int  # batches whose making time was read from two waits in a row
    batch_bytes: float | None = None
    memory_limit: float | None = None


def recorded_setting(rec: RunRecord) -> Setting | None:
    """The watched DALI pipeline's thread count and queue depth; None for a record that is
    not a DALI pipeline's, or one whose settings were not read."""
    w = rec.watch
    if w is None or w.settings.framework != "dali" or rec.dali is None:
        return None
    threads = _int(rec.dali.pipeline.get("num_threads"))
    depth = _int(rec.dali.pipeline.get("prefetch_queue_depth"))
    if threads is None or depth is None or threads < 1 or depth < 1:
        return None  # a per-stage depth ({'cpu_size': 2, 'gpu_size': 2}) is not modelled
    return Setting(threads, depth, True)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# what the replay reads of the main track: a record edited by hand may lack any of them
REPLAYED_COLUMNS = ("start", "end", "stall", "samples")


def _main_track(rec: RunRecord) -> Track | None:
    """The consumer's own timeline, where it holds every column the replay reads."""
    w = rec.watch
    if w is None:
        return None
    track = next((t for t in w.tracks if t.worker is None and "stall" in t.columns), None)
    if track is None or any(name not in track.columns for name in REPLAYED_COLUMNS):
        return None
    return track


def costs(rec: RunRecord) -> DaliCosts | None:
    """The replay's inputs from ``rec``'s main track: each epoch's rows past the batches its
    iterator prefetched (depth + 1), as ``DaliCosts`` says; None where the record is not a
    DALI pipeline's, has no measured rate, or has fewer than MIN_ROWS steady rows."""
    base, track = recorded_setting(rec), _main_track(rec)
    if base is None or track is None or not rec.measured_samples_per_s:
        return None
    col = track.columns
    k = max(track.batches_per_row, 1)
    rows = len(col["start"])
    epoch = col.get("epoch", [0.0] * rows)
    first = [i == 0 or epoch[i] != epoch[i - 1] for i in range(rows)]
    since = _rows_since_epoch_start(first)
    steady = [i for i in range(rows) if since[i] > base.prefetch_factor][:MAX_ROWS]
    if len(steady) < MIN_ROWS:
        return None
    # taking a batch that was ready costs the least time in next() (the copy out): no
    # batch takes less, and any batch the queue held when asked took that (an epoch's first
    # left out: it waits for the pipeline's start)
    take = min(col["stall"][i] / k for i in range(rows) if since[i] >= 1)
    gaps = [(col["end"][i] - col["end"][i - 1]) / k for i in steady]
    floor = take + max(WAIT_FLOOR_S, WAIT_SHARE * statistics.median(gaps))
    waited = [col["stall"][i] / k > floor for i in range(rows)]
    made = {i: g for i, g in zip(steady, gaps, strict=True) if waited[i] and waited[i - 1]}
    samples = sum(col["samples"][i] for i in steady) / (k * len(steady))
    if not samples > 0:  # batches of no samples: nothing to replay a rate from
        return None
    fill = statistics.median(made.values()) if made else _per_batch(rec, base, samples)
    steps = tuple(
        max((col["start"][i + 1] - col["end"][i]) / k, 0.0)
        for i in steady
        if i + 1 < rows and not first[i + 1]
    )
    w = rec.watch
    assert w is not None
    c = DaliCosts(
        produce=tuple(made.get(i, fill) for i in steady),
        steps=steps or (0.0,),
        take=take,
        samples_per_batch=samples,
        waited=len(made),
        batch_bytes=float(w.batch_bytes) if w.batch_bytes else None,
        memory_limit=memory_limit(rec),
    )
    unknown = [n for n, i in enumerate(steady) if i not in made]
    observed = _steady_rate(col, steady, k)
    if not made or not unknown or observed is None:
        return c
    return _calibrated(c, unknown, observed, base.prefetch_factor)


def _steady_rate(col: dict[str, list[float]], steady: list[int], k: int) -> float | None:
    """Samples/s over the steady rows, epoch by epoch: from each run of consecutive steady
    rows, the samples after its first row over the time from its first arrival to its last."""
    samples = span = 0.0
    run: list[int] = []
    for i in [*steady, -1]:
        if run and i != run[-1] + 1:
            samples += sum(col["samples"][j] for j in run[1:])
            span += col["end"][run[-1]] - col["end"][run[0]]
            run = []
        run.append(i)
    return samples / span if span > 0 and samples > 0 else None


def _calibrated(c: DaliCosts, unknown: list[int], observed: float, depth: int) -> DaliCosts:
    """``c`` with one making time for the batches the consumer did not wait for twice in a
    row, chosen so that the run as it was replays to the rate observed (their median's,
    where that comes within CALIBRATED of it): such batches were made while the consumer
    stepped, and the median of the ones that were seen being made overstates how fast they
    were where the slow ones hid in the queue."""

    def filled(f: float) -> DaliCosts:
        produce = list(c.produce)
        for n in unknown:
            produce[n] = f
        return dataclasses.replace(c, produce=tuple(produce))

    if abs(simulate(c, depth) / observed - 1.0) <= CALIBRATED:
        return c
    lo, hi = 0.0, 20 * max(c.produce)
    for _ in range(30):  # the rate falls as the making time grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if simulate(filled(mid), depth) > observed else (lo, mid)
    return filled((lo + hi) / 2)


def _rows_since_epoch_start(first: list[bool]) -> list[int]:
    out, n = [], 0
    for f in first:
        n = 0 if f else n + 1
        out.append(n)
    return out


def _per_batch(rec: RunRecord, base: Setting, samples: float) -> float:
    """The making time of a batch of ``samples`` as the stage model's loader capacity at
    the recorded setting gives it, for a run that never waited on its pipeline twice in a
    row."""
    cap = loader_capacity(rec, base.workers)
    return samples / cap if cap else 0.0


def loader_capacity(rec: RunRecord, threads: int) -> float | None:
    """Samples/s the stage model gives the pipeline's own stages (storage and CPU, the
    slower) with ``threads`` threads; None where it measured neither."""
    try:
        stages = evaluate(rec, Change(workers=threads)).stages
    except BadInputError:
        return None
    caps = [
        c for c in (stages.storage.capacity_samples_per_s, stages.cpu.capacity_samples_per_s) if c
    ]
    return min(caps) if caps else None


def simulate(c: DaliCosts, depth: int, scale: float = 1.0) -> float:
    """Samples/s of the replay with queue ``depth``, each making time times ``scale``: the
    steady rate over the second half of MIN_REPLAY batches (or the logged ones, if more)."""
    n = max(MIN_REPLAY, len(c.produce))
    taken: list[float] = []
    ready = 0.0
    asked = 0.0
    for i in range(n):
        free = taken[i - depth] if i >= depth else 0.0
        ready = max(ready, free) + c.produce[i % len(c.produce)] * scale
        taken.append(max(asked, ready) + c.take)
        asked = taken[-1] + c.steps[i % len(c.steps)]
    half = n // 2
    span = taken[-1] - taken[half]
    return (n - 1 - half) * c.samples_per_batch / span if span > 0 else float("inf")


def predict(rec: RunRecord, s: Setting, c: DaliCosts | None = None) -> Prediction | None:
    """The rate a rerun with ``s`` (threads as ``workers``, queue depth as
    ``prefetch_factor``) delivers: measured x simulated(s) / simulated(as run); None where
    the record has nothing to replay."""
    c = c if c is not None else costs(rec)
    base = recorded_setting(rec)
    if c is None or base is None:
        return None
    return _predicted(rec, c, base, s, _scale(rec, base.workers, s.workers))


def _predicted(
    rec: RunRecord, c: DaliCosts, base: Setting, s: Setting, scale: float | None
) -> Prediction | None:
    measured = rec.measured_samples_per_s
    if scale is None or not measured:
        return None
    was = _rate(c, base.prefetch_factor, 1.0)
    now = _rate(c, s.prefetch_factor, scale)
    if not (0 < was < math.inf and 0 < now < math.inf):  # a timeline that takes no time
        return None
    pred = measured * now / was
    return Prediction(s, pred, pred / measured, now, _assumptions(c, base, s), *_memory(c, s, base))


@functools.lru_cache(maxsize=256)
def _rate(c: DaliCosts, depth: int, scale: float) -> float:
    return simulate(c, depth, scale)


def _scale(rec: RunRecord, was: int, now: int) -> float | None:
    """How much longer a batch takes to make with ``now`` threads than with ``was``."""
    if now == was:
        return 1.0
    a, b = loader_capacity(rec, was), loader_capacity(rec, now)
    return a / b if a and b else None


def _memory(c: DaliCosts, s: Setting, base: Setting) -> tuple[float | None, bool]:
    """What the queue holds (a batch per slot and the one being copied out) and whether a
    deeper queue than the run's fits the memory the host had free."""
    if c.batch_bytes is None:
        return None, True
    need = (s.prefetch_factor + 1) * c.batch_bytes
    was = (base.prefetch_factor + 1) * c.batch_bytes
    return need, c.memory_limit is None or need <= max(c.memory_limit, was)


def _assumptions(c: DaliCosts, base: Setting, s: Setting) -> tuple[str, ...]:
    out = []
    if s.workers != base.workers:
        out.append(
            f"with {s.workers} threads each batch is made as much faster as the stage model's "
            "CPU and storage capacities say, its variation from batch to batch kept"
        )
    if c.waited == 0:
        out.append(
            "the consumer never waited on the pipeline twice in a row, so each batch's "
            "making time is the stages' mean"
        )
    return tuple(out)


def candidates(rec: RunRecord, base: Setting) -> list[Setting]:
    """Thread counts from one to THREADS_PER_CORE per usable core (and one past the
    recorded count), each with every depth in DEPTHS and the recorded one."""
    top = min(max(int(THREADS_PER_CORE * recorded_cores(rec)), base.workers + 1), MAX_THREADS)
    depths = sorted({*DEPTHS, base.prefetch_factor})
    return [Setting(t, d, True) for t in range(1, top + 1) for d in depths]


def search(rec: RunRecord) -> list[Prediction]:
    """Every candidate's prediction, best rate first; empty where nothing is replayed."""
    c, base = costs(rec), recorded_setting(rec)
    if c is None or base is None:
        return []
    tried = candidates(rec, base)
    scales = {t: _scale(rec, base.workers, t) for t in {s.workers for s in tried}}
    out = [p for s in tried if (p := _predicted(rec, c, base, s, scales[s.workers])) is not None]
    return sorted(out, key=lambda p: -p.samples_per_s)


def advice(rec: RunRecord) -> Prediction | None:
    """The setting to advise: among those that fit the host's memory, gain MIN_GAIN and come
    within NEAR of the best rate, the fewest threads, then the fewest changes to the
    pipeline as run, then the shallowest queue; None where nothing does."""
    base = recorded_setting(rec)
    if base is None:
        return None
    tried = search(rec)
    top = max((p.samples_per_s for p in tried if p.fits), default=0.0)
    near = [p for p in tried if p.fits and p.samples_per_s >= NEAR * top and p.gain >= MIN_GAIN]
    if not near:
        return None
    return min(
        near,
        key=lambda p: (p.setting.workers, len(p.setting.changes(base)), p.setting.prefetch_factor),
    )


def changes(s: Setting, base: Setting) -> list[tuple[str, str, str]]:
    """(name, from, to) of each pipeline argument ``s`` changes, as DALI names them."""
    names = {"num_workers": "num_threads", "prefetch_factor": "prefetch_queue_depth"}
    return [(names[n], a, b) for n, a, b in s.changes(base)]


def replay_rate(rec: RunRecord) -> tuple[int, float] | None:
    """The run as it was, replayed: the steady batches replayed and their simulated rate;
    None where nothing is replayed."""
    c, base = costs(rec), recorded_setting(rec)
    if c is None or base is None:
        return None
    return len(c.produce), _rate(c, base.prefetch_factor, 1.0)


def rule(rec: RunRecord, pf: PipelineFindings) -> list[Recommendation]:
    """The DALI pipeline's ``num_threads`` and ``prefetch_queue_depth`` that pay most, found
    by replaying this run's batches (``advice``), with why from the same replay: the time
    the pipeline takes per batch against the usable cores, and the consumer's bursts that a
    deeper queue covers."""
    base, pred, c = recorded_setting(rec), advice(rec), costs(rec)
    if base is None or pred is None or c is None:
        return []
    named = changes(pred.setting, base)
    sets = ", ".join(f"{name}={now}" for name, _, now in named)
    was = ", ".join(was for _, was, _ in named)
    why = "; ".join(_why(rec, c, base, pred.setting))
    seen = replay_rate(rec)
    evidence = (
        f"the run as it was, replayed from {seen[0]:,} batches: "
        f"{units.samples_per_s(seen[1])} samples/s against "
        f"{units.samples_per_s(rec.measured_samples_per_s)} measured"
        if seen is not None
        else ""
    )
    kinds = {"num_threads": "num_workers", "prefetch_queue_depth": "prefetch_factor"}
    return [
        Recommendation(
            kind=kinds[named[0][0]] if len(named) == 1 else "loader_settings",
            text=(
                f"Set {sets} in the DALI pipeline (now {was}): {why}; this run's batches "
                f"replayed under it predict {pred.gain - 1:+.0%}."
            ),
            predicted_samples_per_s=pred.samples_per_s,
            evidence=evidence,
            unchecked=list(pred.assumptions),
            change=pred.setting.change(base),
        )
    ]


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _why(rec: RunRecord, c: DaliCosts, base: Setting, s: Setting) -> list[str]:
    out = []
    make = statistics.median(c.produce)
    if s.workers > base.workers:
        out.append(
            f"it makes a batch in {make * 1e3:.0f} ms with {_threads(base.workers)} and "
            f"{recorded_cores(rec):.3g} cores are usable"
        )
    elif s.workers < base.workers:
        out.append(f"fewer threads make its batches as fast ({make * 1e3:.0f} ms each)")
    if s.prefetch_factor > base.prefetch_factor:
        steps = sorted(c.steps)
        p95, p50 = steps[int(0.95 * (len(steps) - 1))], steps[len(steps) // 2]
        out.append(
            f"the consumer's steps come in bursts ({p95 * 1e3:.0f} ms at p95 against "
            f"{p50 * 1e3:.1f} ms median), and a queue {s.prefetch_factor} batches deep lets "
            "the pipeline run ahead through them"
        )
    return out or ["the replay of its batches rates it best"]


__all__ = ["DaliCosts", "advice", "changes", "costs", "predict", "replay_rate", "rule", "search"]

"""Decode paths: the same images decoded by Pillow, by DALI on the CPU and by DALI on the GPU.

``probe --loader dali`` asks whether DALI would decode the dataset faster than the Pillow
loader the CPU stage measures. Every path decodes the same encoded files, already held in
memory, to 224x224 RGB, so storage is excluded from each alike. The Pillow path is the CPU
stage's best sweep level (measured once, not twice); the DALI paths run a pipeline
``external_source -> decoders.image -> resize`` with as many threads as the most worker
processes Pillow's sweep ran (the usable cores), and their cost is the process's CPU time over
the timed iterations divided by the images decoded, since DALI's own thread pool does the work.

A pipeline can be built before its images are known (``prepare``): the probe builds both
before its first phase, where their seconds are counted as a cost no phase shares, and hands
them the CPU phase's images when the decode paths run. Each path warms up until its rate
levels off (windows of batches no more than 10% faster than the one before), then times at
least ``MIN_TIMED`` batches; the mixed decoder's warm-up may take ``GPU_WARMUP_S`` whatever
the path's share, since nvJPEG's first batches in a process run several times slower than its
steady rate. A warm-up that ends at its time limit before the rate levelled off leaves a
short-run figure, and the path says so (``warmed_up`` False).

DALI is imported inside the functions: the core never imports it at module level.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ioprobe import capacity
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.record import CpuStage, DecodePath, GpuInfo, Stages

PATHS = ("pillow", "dali-cpu", "dali-gpu")
BATCH = 32
# untimed iterations before timing: one pass over every file (which also shows whether DALI
# decodes them all) and at least this many, so allocations and thread start-up are done
MIN_WARMUP = 2
MIN_TIMED = 4  # timed batches at least, whatever the path's time
MIN_TIMED_S = 0.2  # and timed for at least this long after the warm-up
MIN_PATH_S = 0.5  # a path's least time, warm-up and timing, whatever its share
# the warm-up's windows: batches timed together for at least WINDOW_S; the rate has levelled
# off when the last window is no more than LEVEL_GAIN faster per batch than the window half
# the warm-up ago
WINDOW_S = 0.05
LEVEL_GAIN = 0.1
# the mixed decoder warms up for at least GPU_MIN_WARMUP_S and may go on to GPU_WARMUP_S
# whatever the path's share (the CPU path's stops at a third of its time): at budget 10 a
# warm-up capped at a third of its 0.5 s read 5,165 images/s on the H100 where the warmed
# decoder reads 16,560
GPU_MIN_WARMUP_S = 0.5
GPU_WARMUP_S = 1.0
NO_GPU = "no CUDA GPU on this host"
DALI_EXTRA = "pip install 'ioprobe[dali]'"
# DALI's error text repeats these around the one line that says what went wrong
_BOILERPLATE = ("critical error in pipeline", "current pipeline object is no longer valid")

Device = Literal["cpu", "mixed"]


class _Feed:
    """A pipeline's source of encoded batches, given its images once they are known: DALI
    calls it for each batch (building a pipeline never does), cycling over every file in order
    and wrapping round, as Pillow's workers do."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self._next = 0

    def fill(self, payloads: Sequence[bytes], batch: int) -> None:
        import numpy as np

        arrays = [np.frombuffer(p, dtype=np.uint8) for p in payloads]
        n = len(arrays)
        self.batches = [
            [arrays[(b * batch + j) % n] for j in range(batch)] for b in range(math.ceil(n / batch))
        ]
        self._next = 0

    def __call__(self) -> list[Any]:
        out = self.batches[self._next % len(self.batches)]
        self._next += 1
        return out


@dataclass
class Prepared:
    """DALI pipelines built before their images are known (``prepare``), by device: each a
    pipeline with its feed, or why it could not be built; ``seconds`` is what the builds took."""

    threads: int
    batch_size: int
    pipes: dict[str, tuple[Any, _Feed]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def take(self, device: Device, threads: int, batch_size: int) -> tuple[Any, _Feed] | str | None:
        """The pipeline built for ``device`` (handed over: this keeps no reference), the reason
        it could not be built, or None where none was built for these settings."""
        if threads != self.threads or batch_size != self.batch_size:
            self.close()
            return None
        if device in self.errors:
            return self.errors[device]
        return self.pipes.pop(device, None)

    def close(self) -> None:
        """Drop the pipelines not taken: DALI frees a pipeline's threads when it goes."""
        self.pipes.clear()


def prepare(devices: Sequence[Device], threads: int, batch_size: int = BATCH) -> Prepared:
    """Build a pipeline per device before the images are known; a failure is kept as the
    path's reason, never raised. The pipelines wait, idle, until ``measure_paths`` takes them."""
    out = Prepared(threads=threads, batch_size=batch_size)
    began = time.perf_counter()
    for device in devices:
        feed = _Feed()
        try:
            out.pipes[device] = (_build(device, feed, threads, batch_size), feed)
        except Exception as exc:  # DALI missing, no CUDA, a bad argument: the probe goes on
            out.errors[device] = one_line(exc)
    out.seconds = time.perf_counter() - began
    return out


def dali_missing() -> str | None:
    """Why DALI cannot be imported here, as one line, or None when it can."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception as exc:  # a broken install raises more than ImportError (missing libs)
        return one_line(exc)
    return None


def one_line(exc: BaseException) -> str:
    """An exception as one short line: DALI's multi-line errors reduced to their cause."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    name = type(exc).__name__
    cause = _cause(lines) or name
    text = cause if cause.startswith(name) else f"{name}: {cause}"
    return text if len(text) <= 200 else text[:197] + "..."


def _cause(lines: list[str]) -> str | None:
    """The line after DALI's "Encountered:", else the first line that is not boilerplate."""
    for i, ln in enumerate(lines):
        if ln.lower().startswith("encountered:") and i + 1 < len(lines):
            return lines[i + 1]
    useful = [ln for ln in lines if not ln.lower().startswith(_BOILERPLATE)]
    return useful[0] if useful else None


def pillow_path(stage: CpuStage, files: int) -> DecodePath:
    """The Pillow path from the CPU stage's best sweep level: the same measurement, reused."""
    if not stage.sweep:
        return DecodePath(path="pillow", files=files, error="the CPU stage has no measurement")
    best = max(stage.sweep, key=lambda lv: lv.samples_per_s)
    return DecodePath(
        path="pillow",
        samples=best.samples,
        seconds=best.seconds,
        samples_per_s=best.samples_per_s,
        cpu_seconds_per_sample=best.cpu_seconds_per_sample,
        threads=best.workers,
        files=files,
    )


def measure_paths(
    payloads: Sequence[bytes],
    stage: CpuStage,
    gpus: Sequence[GpuInfo],
    budget_s: float,
    *,
    reporter: Reporter | None = None,
    prepared: Prepared | None = None,
) -> list[DecodePath]:
    """Pillow (from ``stage``), DALI on the CPU and DALI's mixed decoder, in that order.

    The DALI paths share ``budget_s``; without a GPU the GPU path is not tried and the CPU
    path gets it all. Pipelines in ``prepared`` are used where they were built for these
    settings (their builds then cost the phase nothing). A path that fails carries its reason
    in ``error``; nothing raises.
    """
    rep = reporter or SilentReporter()
    pillow = pillow_path(stage, len(payloads))
    threads = path_threads(stage)
    out = [pillow]
    # the mixed decoder's warm-up may take GPU_WARMUP_S whatever the share: the CPU path
    # gets half of what is left after it
    share = max((budget_s - GPU_WARMUP_S) / 2, MIN_PATH_S) if gpus else budget_s
    deadline = time.perf_counter() + budget_s
    ready = prepared or Prepared(threads=0, batch_size=0)
    out.append(
        measure_dali(
            "cpu", payloads, threads, share, reporter=rep, built=ready.take("cpu", threads, BATCH)
        )
    )
    if gpus:
        # a pipeline built here takes seconds that its timed iterations do not count: the
        # GPU path gets what the CPU path left, so the phase keeps to its budget
        left = max(deadline - time.perf_counter(), least_path_seconds("mixed"))
        out.append(
            measure_dali(
                "mixed",
                payloads,
                threads,
                left,
                reporter=rep,
                built=ready.take("mixed", threads, BATCH),
            )
        )
    else:
        out.append(DecodePath(path="dali-gpu", threads=threads, files=len(payloads), error=NO_GPU))
    ready.close()
    for p in out:
        rep.result(describe(p))
    return out


def path_threads(stage: CpuStage) -> int:
    """The threads a DALI path runs: every core Pillow's sweep could use, not just its best
    level's (on a busy host a level of fewer workers can win by noise, and DALI must not be
    held to it)."""
    return max((lv.workers for lv in stage.sweep), default=stage.usable_cores or 1)


def least_path_seconds(device: Device) -> float:
    """A path's least time once built: its warm-up (the mixed decoder's may take
    ``GPU_WARMUP_S``) and its timed batches."""
    return MIN_PATH_S + (GPU_WARMUP_S if device == "mixed" else 0.0)


def describe(p: DecodePath) -> str:
    """One progress line for a path."""
    if p.error is not None or p.samples_per_s is None:
        return f"{p.path:>8}: not measured: {p.error}"
    cpu = p.cpu_seconds_per_sample
    cost = f"  {cpu * 1e3:.2f} ms CPU/image" if cpu is not None else ""
    unit = "workers" if p.path == "pillow" else "threads"
    short = (
        f"; short run: {p.timed_batches} batches after a warm-up still speeding up"
        if p.warmed_up is False
        else ""
    )
    return f"{p.path:>8}: {p.samples_per_s:9.1f} images/s{cost}  ({p.threads} {unit}{short})"


def measure_dali(
    device: Device,
    payloads: Sequence[bytes],
    threads: int,
    budget_s: float,
    *,
    reporter: Reporter | None = None,
    batch_size: int = BATCH,
    built: tuple[Any, _Feed] | str | None = None,
) -> DecodePath:
    """Decode ``payloads`` with a DALI pipeline on ``device`` for about ``budget_s`` seconds.

    ``cpu`` runs with ``device_id=None`` (no CUDA needed), ``mixed`` on GPU 0. The rate is
    images over wall time of the timed iterations; the CPU cost is the process's CPU time over
    the same iterations per image. ``built`` is a pipeline ``prepare`` built (or why it could
    not be); without it the pipeline is built here, within ``budget_s``. Any failure becomes
    the path's ``error``.
    """
    name = "dali-cpu" if device == "cpu" else "dali-gpu"
    rep = reporter or SilentReporter()
    path = DecodePath(path=name, threads=threads, files=len(payloads))
    if not payloads:
        path.error = "no images to decode"
        return path
    if isinstance(built, str):
        path.error = built
        return path
    began = time.perf_counter()
    if built is None:
        feed = _Feed()
        try:
            pipe = _build(device, feed, threads, batch_size)
        except Exception as exc:  # DALI missing, no CUDA, a bad argument: the probe goes on
            path.error = one_line(exc)
            return path
    else:
        (pipe, feed), built = built, None  # this frame's last reference is ``pipe``
    feed.fill(payloads, batch_size)
    # building takes seconds on a GPU (the codec library, a CUDA context): the budget is
    # the path's whole time, so what a build here took is not timed again
    left = max(budget_s - (time.perf_counter() - began), least_path_seconds(device))
    gpu = device == "mixed"
    warm_up_s = max(left / 3, GPU_WARMUP_S if gpu else 0.0)
    try:
        _time(pipe, path, math.ceil(len(payloads) / batch_size), left, warm_up_s, gpu, rep)
    except Exception as exc:  # an image DALI cannot decode ends the pipeline
        path.samples, path.seconds, path.timed_batches = 0, 0.0, 0
        path.samples_per_s = path.cpu_seconds_per_sample = path.warmed_up = None
        path.error = f"DALI cannot decode these images: {one_line(exc)}"
    finally:
        del pipe  # frees DALI's thread pool before the end-to-end run starts its own workers
    return path


def _build(device: Device, feed: _Feed, threads: int, batch: int) -> Any:
    """``external_source -> decoders.image -> resize`` on ``device``, built, reading ``feed``."""
    # DALI's stubs are partial: its modules are used untyped
    dali: Any = importlib.import_module("nvidia.dali")
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    pipe = dali.Pipeline(
        batch_size=batch,
        num_threads=threads,
        device_id=0 if device == "mixed" else None,
        prefetch_queue_depth=2,
    )
    with pipe:
        encoded = fn.external_source(source=feed, batch=True, dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(encoded, device=device, output_type=types.RGB)
        pipe.set_outputs(fn.resize(images, resize_x=224, resize_y=224))
    pipe.build()
    return pipe


def _time(
    pipe: Any,
    path: DecodePath,
    per_pass: int,
    budget_s: float,
    warm_up_s: float,
    gpu: bool,
    rep: Reporter,
) -> None:
    """Warm up (for at most ``warm_up_s``; the mixed decoder for at least
    ``GPU_MIN_WARMUP_S``), then time batches until ``budget_s`` from the start has passed,
    and at least ``MIN_TIMED`` of them over ``MIN_TIMED_S``."""
    start = time.perf_counter()
    least_s = GPU_MIN_WARMUP_S if gpu else 0.0
    path.warmup_batches, path.warmed_up = _warm_up(
        pipe, path, max(MIN_WARMUP, per_pass), warm_up_s, rep, least_s
    )
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = max(start + budget_s, t0 + MIN_TIMED_S)
    runs = 0
    out = None
    while runs < MIN_TIMED or time.perf_counter() < deadline:
        out = pipe.run()
        runs += 1
        rep.update((time.perf_counter() - start) / (deadline - start), path.path)
    _sync(out)  # GPU work is queued on one stream: the last batch done means all are
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    path.timed_batches = runs
    path.samples = runs * pipe.max_batch_size
    path.seconds = wall
    path.samples_per_s = path.samples / wall
    path.cpu_seconds_per_sample = cpu / path.samples


def _warm_up(
    pipe: Any,
    path: DecodePath,
    least: int,
    limit_s: float,
    rep: Reporter,
    least_s: float = 0.0,
) -> tuple[int, bool]:
    """Untimed iterations, each waited for: at least ``least`` and for at least ``least_s``,
    then on until the rate levels off, or ``limit_s`` has passed. Iterations are timed in
    windows of ``WINDOW_S``; from the third on, the rate has levelled off when the last window
    is no more than ``LEVEL_GAIN`` faster per batch than the window half the warm-up ago, so
    a rate that climbs slowly still shows its gain. nvJPEG's first batches in a process run several
    times slower than its steady rate (on the H100, a mixed decoder timed after two warm-up
    batches read 1,476 images/s; warmed longer, 15,430), and a probe is always its process's
    first use of it. Returns the batches run and whether the rate had levelled off (at the
    time limit: whether the last comparison showed it)."""
    start = time.perf_counter()
    windows: list[tuple[float, float]] = []  # (its end since the start, seconds per batch)
    window_start, window_runs = start, 0
    runs = 0
    levelled = False  # as the last comparison showed: none yet is no sign of it
    while True:
        _sync(pipe.run())
        runs += 1
        window_runs += 1
        now = time.perf_counter()
        compared = False
        if now - window_start >= WINDOW_S:
            windows.append((now - start, (now - window_start) / window_runs))
            window_start, window_runs = now, 0
            if len(windows) >= 3:
                end, per_batch = windows[-1]
                # the last window that ended by half the warm-up, the first at the least
                ref = max((w for w in windows[:-1] if w[0] <= end / 2), default=windows[0])
                levelled = per_batch * (1 + LEVEL_GAIN) >= ref[1]
                compared = True
        if runs >= least and now - start >= least_s and compared and levelled:
            return runs, True
        # a slow pass over big images must not eat the timed share
        if runs >= least and now - start >= limit_s:
            return runs, levelled
        rep.update((now - start) / limit_s if limit_s > 0 else 1.0, f"{path.path} warm-up")


def _sync(outputs: Any) -> None:
    """Wait for a GPU output to be computed; CPU outputs are ready when ``run`` returns."""
    if outputs is None:
        return
    first = outputs[0]
    if type(first).__name__ == "TensorListGPU":
        first.as_cpu()


# a path's cores busy (CPU per image x its rate) at most this over the usable cores still
# fits: process CPU time ticks coarsely
FIT_TOLERANCE = 1.05


def fastest_fitting_path(cpu: CpuStage) -> DecodePath | None:
    """The fastest decode path measured whose CPU use fits the usable cores, or None when
    that is Pillow (or nothing fits).

    A path fits when the cores it kept busy, its CPU seconds per image times the rate it
    reached, are at most the usable cores; a little over is measurement noise (process CPU
    time ticks coarsely), more is not this host's."""
    usable = cpu.usable_cores or 1
    pillow = next((p for p in cpu.decode_paths if p.path == "pillow"), None)
    best = max((p for p in cpu.decode_paths if _fits(p, usable)), key=_rate, default=None)
    if best is None or best is pillow or _rate(best) <= _rate(pillow):
        return None  # nothing fits, or Pillow is as fast: it stays
    return best


def _rate(p: DecodePath | None) -> float:
    return (p.samples_per_s or 0.0) if p is not None else 0.0


def _fits(p: DecodePath, usable: int) -> bool:
    rate, cost = p.samples_per_s, p.cpu_seconds_per_sample
    if p.error is not None or not rate or not cost:
        return False
    return rate * cost <= usable * FIT_TOLERANCE


def use_fastest_path(stages: Stages) -> str | None:
    """Let the CPU stage stand for the fastest decode path that fits the usable cores, so the
    verdict reflects DALI where DALI is faster; the note that says so, or None (Pillow kept).
    DALI's GPU path also costs the GPU its decode time when the GPU stage has a capacity: the
    two share the device, so their times add."""
    cpu, gpu = stages.cpu, stages.gpu
    best = fastest_fitting_path(cpu)
    if best is None or best.samples_per_s is None:
        return None
    cpu.capacity_samples_per_s = best.samples_per_s
    cpu.cpu_seconds_per_sample = best.cpu_seconds_per_sample
    cpu.loader = best.path
    if best.path == "dali-gpu" and gpu.capacity_samples_per_s:
        gpu.capacity_samples_per_s = capacity.shared_gpu(
            gpu.capacity_samples_per_s, best.samples_per_s
        )
        gpu.method += " + DALI mixed decode as measured"
    pillow = next((p for p in cpu.decode_paths if p.path == "pillow"), None)
    versus = (
        f" vs {pillow.samples_per_s:,.0f} with Pillow"
        if pillow is not None and pillow.samples_per_s
        else ""
    )
    return (
        f"the CPU stage is {best.path}, the fastest decode path measured "
        f"({best.samples_per_s:,.0f} images/s{versus}); its worker-count scaling is Pillow's"
    )


__all__ = [
    "BATCH",
    "DALI_EXTRA",
    "GPU_WARMUP_S",
    "MIN_PATH_S",
    "NO_GPU",
    "PATHS",
    "Prepared",
    "dali_missing",
    "describe",
    "fastest_fitting_path",
    "least_path_seconds",
    "measure_dali",
    "measure_paths",
    "one_line",
    "path_threads",
    "pillow_path",
    "prepare",
    "use_fastest_path",
]

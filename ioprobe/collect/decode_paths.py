"""Decode paths: the same images decoded by Pillow, by DALI on the CPU and by DALI on the GPU.

``probe --loader dali`` asks whether DALI would decode the dataset faster than the Pillow
loader the CPU stage measures. Every path decodes the same encoded files, already held in
memory, to 224x224 RGB, so storage is excluded from each alike. The Pillow path is the CPU
stage's best sweep level (measured once, not twice); the DALI paths run a pipeline
``external_source -> decoders.image -> resize`` with as many threads as the most worker
processes Pillow's sweep ran (the usable cores), and their cost is the process's CPU time over
the timed iterations divided by the images decoded, since DALI's own thread pool does the work.

DALI is imported inside the functions: the core never imports it at module level.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Sequence
from typing import Any, Literal

from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.record import CpuStage, DecodePath, GpuInfo

PATHS = ("pillow", "dali-cpu", "dali-gpu")
BATCH = 32
# untimed iterations before timing: one pass over every file (which also shows whether DALI
# decodes them all) and at least this many, so allocations and thread start-up are done
MIN_WARMUP = 2
MIN_TIMED = 2
NO_GPU = "no CUDA GPU on this host"
DALI_EXTRA = "pip install 'ioprobe[dali]'"
# DALI's error text repeats these around the one line that says what went wrong
_BOILERPLATE = ("critical error in pipeline", "current pipeline object is no longer valid")

Device = Literal["cpu", "mixed"]


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
) -> list[DecodePath]:
    """Pillow (from ``stage``), DALI on the CPU and DALI's mixed decoder, in that order.

    The DALI paths share ``budget_s``; without a GPU the GPU path is not tried and the CPU
    path gets it all. A path that fails carries its reason in ``error``; nothing raises.
    """
    rep = reporter or SilentReporter()
    pillow = pillow_path(stage, len(payloads))
    # every core Pillow's sweep could use, not just its best level's: on a busy host a level
    # of fewer workers can win by noise, and DALI must not be held to it
    threads = max((lv.workers for lv in stage.sweep), default=stage.usable_cores or 1)
    out = [pillow]
    share = budget_s / 2 if gpus else budget_s
    deadline = time.perf_counter() + budget_s
    out.append(measure_dali("cpu", payloads, threads, share, reporter=rep))
    if gpus:
        # building a pipeline takes seconds that its timed iterations do not count: the GPU
        # path gets what the CPU path left, so the phase keeps to its budget
        left = max(deadline - time.perf_counter(), 0.5)
        out.append(measure_dali("mixed", payloads, threads, left, reporter=rep))
    else:
        out.append(DecodePath(path="dali-gpu", threads=threads, files=len(payloads), error=NO_GPU))
    for p in out:
        rep.result(describe(p))
    return out


def describe(p: DecodePath) -> str:
    """One progress line for a path."""
    if p.error is not None or p.samples_per_s is None:
        return f"{p.path:>8}: not measured: {p.error}"
    cpu = p.cpu_seconds_per_sample
    cost = f"  {cpu * 1e3:.2f} ms CPU/image" if cpu is not None else ""
    unit = "workers" if p.path == "pillow" else "threads"
    return f"{p.path:>8}: {p.samples_per_s:9.1f} images/s{cost}  ({p.threads} {unit})"


def measure_dali(
    device: Device,
    payloads: Sequence[bytes],
    threads: int,
    budget_s: float,
    *,
    reporter: Reporter | None = None,
    batch_size: int = BATCH,
) -> DecodePath:
    """Decode ``payloads`` with a DALI pipeline on ``device`` for about ``budget_s`` seconds.

    ``cpu`` runs with ``device_id=None`` (no CUDA needed), ``mixed`` on GPU 0. The rate is
    images over wall time of the timed iterations; the CPU cost is the process's CPU time over
    the same iterations per image. Any failure becomes the path's ``error``.
    """
    name = "dali-cpu" if device == "cpu" else "dali-gpu"
    rep = reporter or SilentReporter()
    path = DecodePath(path=name, threads=threads, files=len(payloads))
    if not payloads:
        path.error = "no images to decode"
        return path
    began = time.perf_counter()
    try:
        pipe = _pipeline(device, payloads, threads, batch_size)
    except Exception as exc:  # DALI missing, no CUDA, a bad argument: the probe goes on
        path.error = one_line(exc)
        return path
    # building takes seconds on a GPU (the codec library, a CUDA context): the budget is
    # the path's whole time, so what the build took is not timed again
    left = max(budget_s - (time.perf_counter() - began), 0.5)
    try:
        _time(pipe, path, math.ceil(len(payloads) / batch_size), left, rep)
    except Exception as exc:  # an image DALI cannot decode ends the pipeline
        path.samples, path.seconds = 0, 0.0
        path.samples_per_s = path.cpu_seconds_per_sample = None
        path.error = f"DALI cannot decode these images: {one_line(exc)}"
    finally:
        del pipe  # frees DALI's thread pool before the end-to-end run starts its own workers
    return path


def _pipeline(device: Device, payloads: Sequence[bytes], threads: int, batch: int) -> Any:
    import numpy as np

    # DALI's stubs are partial: its modules are used untyped
    dali: Any = importlib.import_module("nvidia.dali")
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    arrays = [np.frombuffer(p, dtype=np.uint8) for p in payloads]
    n = len(arrays)
    # batches cycle over every file in order, wrapping round, as Pillow's workers do
    batches = [
        [arrays[(b * batch + j) % n] for j in range(batch)] for b in range(math.ceil(n / batch))
    ]

    pipe = dali.Pipeline(
        batch_size=batch,
        num_threads=threads,
        device_id=0 if device == "mixed" else None,
        prefetch_queue_depth=2,
    )
    with pipe:
        encoded = fn.external_source(source=batches, cycle=True, dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(encoded, device=device, output_type=types.RGB)
        pipe.set_outputs(fn.resize(images, resize_x=224, resize_y=224))
    pipe.build()
    return pipe


def _time(pipe: Any, path: DecodePath, per_pass: int, budget_s: float, rep: Reporter) -> None:
    start = time.perf_counter()
    _warm_up(pipe, path, max(MIN_WARMUP, per_pass), budget_s, rep)
    deadline = start + budget_s
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    runs = 0
    out = None
    while runs < MIN_TIMED or time.perf_counter() < deadline:
        out = pipe.run()
        runs += 1
        rep.update((time.perf_counter() - start) / budget_s, path.path)
    _sync(out)  # GPU work is queued on one stream: the last batch done means all are
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    path.samples = runs * pipe.max_batch_size
    path.seconds = wall
    path.samples_per_s = path.samples / wall
    path.cpu_seconds_per_sample = cpu / path.samples


def _warm_up(pipe: Any, path: DecodePath, least: int, budget_s: float, rep: Reporter) -> None:
    """Untimed iterations: at least ``least``, then on until one is no longer much faster
    than the one before it (1.5x), within a third of the path's time. nvJPEG's first batches in a process
    run several times slower than its steady rate (on the H100, a mixed decoder timed after
    two warm-up batches read 1,476 images/s; warmed longer, 15,430), and a probe is always
    its process's first use of it."""
    start = time.perf_counter()
    previous = math.inf
    runs = 0
    while True:
        t0 = time.perf_counter()
        _sync(pipe.run())
        took = time.perf_counter() - t0
        runs += 1
        steady, previous = took * 1.5 >= previous, took
        # a slow pass over big images must not eat the timed share
        if runs >= least and (steady or time.perf_counter() - start > budget_s / 3):
            return
        rep.update((time.perf_counter() - start) / budget_s, f"{path.path} warm-up")


def _sync(outputs: Any) -> None:
    """Wait for a GPU output to be computed; CPU outputs are ready when ``run`` returns."""
    if outputs is None:
        return
    first = outputs[0]
    if type(first).__name__ == "TensorListGPU":
        first.as_cpu()


__all__ = [
    "BATCH",
    "DALI_EXTRA",
    "NO_GPU",
    "PATHS",
    "dali_missing",
    "describe",
    "measure_dali",
    "measure_paths",
    "one_line",
    "pillow_path",
]

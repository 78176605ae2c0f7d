"""Wrapped vs plain DataLoader throughput, side by side, per ../shared/BENCHMARKS.md.

  python tests/benchmarks/bench_watch.py [--repeats 3] [--batches 300]

Runs the same loader plain and through ioprobe.watch, alternating A B A B A B, and prints the
median throughput loss for (1) 1 ms of CPU per sample and (2) 0.2 ms per sample, batch 32,
2 workers, each also with ``watch(..., live=True)`` drawing its panel (A B C A B C: plain,
watched, watched with the panel, to a terminal console that writes to /dev/null, so the
panel's thread does all its work whatever the benchmark's own stderr is), (3) a real decode
loader (JPEG files read, decoded by Pillow and resized to 224x224,
as tensors), with its minor page faults and system CPU per sample (this process and its
workers), plus the main-process cost per batch of the watcher in microseconds, and that of
the device timeline (CUDA events when a CUDA device is present).
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect.gpu_events import GpuTimeline
from ioprobe.loaders.torch import CudaEvents, DataLoaderAdapter, HostClock
from ioprobe.monitor.collector import MAX_KEPT, BatchStats, WatchCollector
from ioprobe.monitor.reservoir import Reservoir
from ioprobe.record import LoaderSettings
from tests.fixtures.datasets import BurnDataset, JpegFolder


def rate(loader: object, samples: int) -> float:
    t0 = time.perf_counter()
    n = 0
    for batch in loader:  # type: ignore[attr-defined]
        n += len(batch)
    assert n == samples
    return n / (time.perf_counter() - t0)


def compare(
    cpu_s: float, batches: int, repeats: int
) -> tuple[list[float], list[float], list[float]]:
    """Samples/s plain, watched and watched with the live panel, alternating."""
    n = 32 * batches

    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(
            BurnDataset(n, cpu_s), batch_size=32, num_workers=2, persistent_workers=False
        )

    plain, wrapped, live = [], [], []
    rate(make(), n)  # warm-up: imports, page cache, CPU frequency
    for _ in range(repeats):
        plain.append(rate(make(), n))
        wrapped.append(rate(ioprobe.watch(make()), n))
        live.append(rate(ioprobe.watch(make(), live=True), n))
    return plain, wrapped, live


def _panel_to_devnull() -> int:
    """Draw ``live=True``'s panel on a terminal console writing to /dev/null; the frames
    drawn so far."""
    from rich.console import Console

    from ioprobe.monitor import live

    sink = open(os.devnull, "w")  # noqa: SIM115 (open for the process's life)
    live.DISPLAY.console = lambda: Console(file=sink, force_terminal=True, width=80)
    return live.DISPLAY.frames


def _usage() -> tuple[int, float, float]:
    """Minor faults, system CPU seconds and all CPU seconds of this process and its reaped
    workers."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    system = me.ru_stime + kids.ru_stime
    return me.ru_minflt + kids.ru_minflt, system, system + me.ru_utime + kids.ru_utime


def _jpegs(root: Path, n: int, size: tuple[int, int] = (480, 360)) -> list[str]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        # smooth gradients plus noise: compresses like a photo, not like random bytes
        w, h = size
        base = np.linspace(0, 255, w * h * 3).reshape(h, w, 3)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90)
        p = root / f"{i:04d}.jpg"
        p.write_bytes(buf.getvalue())
        paths.append(str(p))
    return paths


def compare_jpeg(
    files: int, repeats: int, size: tuple[int, int] = (480, 360)
) -> tuple[list[float], list[float], list[tuple[float, float, float]]]:
    """Plain vs watched on a JPEG folder: samples/s, and per sample (faults, system ms, CPU
    ms) for each run, plain then watched. With the workers on every core the loader is
    CPU-bound, so the CPU time per sample is the cost itself, far less noisy on a shared host
    than the rate: another process's load slows a run without adding to its CPU time."""
    root = Path(tempfile.mkdtemp(prefix="ioprobe-bench-jpeg-"))
    try:
        paths = _jpegs(root, files, size)

        def make() -> DataLoader[torch.Tensor]:
            return DataLoader(JpegFolder(paths), batch_size=32, num_workers=2)

        plain, wrapped, usage = [], [], []
        rate(make(), files)  # warm-up: imports, page cache
        for _ in range(repeats):
            for out, wrap in ((plain, False), (wrapped, True)):
                f0, s0, c0 = _usage()
                loader = ioprobe.watch(make()) if wrap else make()
                out.append(rate(loader, files))
                f1, s1, c1 = _usage()
                usage.append(((f1 - f0) / files, (s1 - s0) * 1e3 / files, (c1 - c0) * 1e3 / files))
        return plain, wrapped, usage
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compare_short_decode(
    repeats: int, size: tuple[int, int] = (640, 640), batches: int = 30, epochs: int = 2
) -> tuple[list[float], list[float], list[tuple[float, float, float]]]:
    """A short run of a decode loader with large samples: JPEGs decoded whole (no resize: a
    1.2 MB uint8 tensor each at 640x640), batch 16, 2 workers started again every epoch
    (not persistent), ``epochs`` epochs of ``batches`` batches. Plain vs watched, alternated:
    samples/s end to end, and per sample (minor faults, system ms, CPU ms) of the process and
    its workers, as ``compare_jpeg``. Where large buffers are freed and allocated again, a
    change in how long anything holds them shows as faults and system time."""
    files = batches * 16
    root = Path(tempfile.mkdtemp(prefix="ioprobe-bench-jpeg-"))
    try:
        paths = _jpegs(root, files, size)

        def run(wrap: bool) -> float:
            loader: object = DataLoader(
                JpegFolder(paths, resize=False), batch_size=16, num_workers=2
            )
            if wrap:
                loader = ioprobe.watch(loader)  # type: ignore[arg-type]
            t0, n = time.perf_counter(), 0
            for _ in range(epochs):
                for batch in loader:  # type: ignore[attr-defined]
                    n += len(batch)
            assert n == files * epochs
            return n / (time.perf_counter() - t0)

        plain, wrapped = [], []
        used: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        run(False)  # warm-up: imports, page cache
        for r in range(repeats):
            # A B, then B A: a drift over the session (the host's other load, the process's
            # own growth) falls on both alike
            for wrap in (False, True) if r % 2 == 0 else (True, False):
                f0, s0, c0 = _usage()
                (wrapped if wrap else plain).append(run(wrap))
                f1, s1, c1 = _usage()
                n = files * epochs
                used[wrap].append(((f1 - f0) / n, (s1 - s0) * 1e3 / n, (c1 - c0) * 1e3 / n))
        usage = [u for pair in zip(used[False], used[True], strict=True) for u in pair]
        return plain, wrapped, usage
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _print_decode(
    label: str, runs: tuple[list[float], list[float], list[tuple[float, float, float]]]
) -> None:
    plain, wrapped, usage = runs
    losses = [1 - w / p for p, w in zip(plain, wrapped, strict=True)]
    med = statistics.median(losses)
    print(
        f"| {label} | {', '.join(f'{x:,.0f}' for x in plain)} | "
        f"{', '.join(f'{x:,.0f}' for x in wrapped)} | {med:+.1%} | <= 3% "
        f"{'met' if med <= 0.03 else 'MISSED'} |"
    )
    extra = [w[2] / p[2] - 1 for p, w in zip(usage[0::2], usage[1::2], strict=True)]
    print(
        f"\n{label}, per sample (median): minor faults "
        f"{statistics.median(u[0] for u in usage[0::2]):.1f} plain, "
        f"{statistics.median(u[0] for u in usage[1::2]):.1f} watched; system CPU "
        f"{statistics.median(u[1] for u in usage[0::2]):.3f} ms plain, "
        f"{statistics.median(u[1] for u in usage[1::2]):.3f} ms watched; CPU (user + system, "
        f"process and workers) {statistics.median(u[2] for u in usage[0::2]):.3f} ms plain, "
        f"{statistics.median(u[2] for u in usage[1::2]):.3f} ms watched; median extra per pair "
        f"{statistics.median(extra):+.1%} ({', '.join(f'{x:+.1%}' for x in extra)})\n"
    )


def main_process_cost_us() -> tuple[float, float]:
    """The collector's own per-batch work in the main process, timed in isolation: while
    every value is still kept, and deep into a long run (3.2M samples seen), where the
    reservoir replaces about one value per batch."""
    c = WatchCollector(DataLoaderAdapter(LoaderSettings(workers=2), {"num_workers": "2"}), 32, None)
    c.begin_epoch()
    wall = bytes(8 * 32)

    def timed(start: int, batches: int) -> float:
        # built before the clock starts: a worker builds them, the main process receives them
        sent = [
            BatchStats(i % 2, wall, wall, 1000, 4096, 0, 10, 0, 0, 0, i * 1000 + 5)
            for i in range(start, start + batches)
        ]
        t0 = time.perf_counter()
        for i, stats in enumerate(sent, start):
            c.on_batch(i * 1000, i * 1000 + 10, stats)
        return (time.perf_counter() - t0) / batches * 1e6

    early = timed(0, 2000)
    timed(2000, 98_000)  # fill past the limit
    late = timed(100_000, 20_000)
    return early, late


def live_frame_cost_ms(frames: int = 300) -> float:
    """The live panel's CPU per frame (it draws one a second), on its own thread: read the
    collector's sums, take the window's rates and capacities, render and write the frame to
    a terminal console over /dev/null. Median milliseconds of the thread's CPU time."""
    from rich.console import Console
    from rich.live import Live

    from ioprobe.monitor import live

    c = WatchCollector(DataLoaderAdapter(LoaderSettings(workers=2), {"num_workers": "2"}), 32, None)
    c.begin_epoch()
    wall = bytes(8 * 32)
    for i in range(2000):
        c.on_batch(
            i * 1000, i * 1000 + 10, BatchStats(i % 2, wall, wall, 1000, 4096, 0, 10, 0, 0, 0, i)
        )
    feed = live.Feed(c, live.Display())
    with open(os.devnull, "w") as sink:
        console = Console(file=sink, force_terminal=True, width=80)
        view = Live(
            console=console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        view.start()
        feed.frame()
        cpu = []
        for _ in range(frames):
            t0 = time.thread_time()
            view.update(live.panel(feed.frame(), 80), refresh=True)
            cpu.append(time.thread_time() - t0)
        view.stop()
    c.end_epoch(None)
    return statistics.median(cpu) * 1e3


def device_timeline_cost_us(backend: object, batches: int = 20_000) -> float:
    """The device timeline's per-batch work in the main process: the two step-boundary events
    and a copy's pair, recorded, polled and resolved. With the host clock this is ioprobe's
    own Python; with CUDA events it adds the driver's record and query calls."""
    tl = GpuTimeline(backend, Reservoir(MAX_KEPT))  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for i in range(batches):
        tl.before_wait()
        tl.after_wait(i)
        tl.copy_start()
        tl.copy_end(4096, 0)
    tl.end_epoch()
    return (time.perf_counter() - t0) / batches * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument(
        "--jpeg-only", action="store_true", help="run the JPEG folder case alone, then stop"
    )
    ap.add_argument(
        "--jpeg-size", default="480x360", help="the JPEG files' width x height (default 480x360)"
    )
    ap.add_argument(
        "--short-decode-only",
        action="store_true",
        help="run the short large-sample decode case alone (640x640, no resize, 2 epochs of 30 "
        "batches of 16, workers not persistent), then stop",
    )
    args = ap.parse_args()
    if args.short_decode_only:
        print("| case | plain samples/s (runs) | wrapped samples/s (runs) | median loss | goal |")
        print("|---|---|---|---|---|")
        _print_decode(
            "short decode run (640x640 whole, batch 16, 2 workers, 2 x 30 batches)",
            compare_short_decode(args.repeats),
        )
        return
    frames = _panel_to_devnull()
    print("| case | plain samples/s (runs) | wrapped samples/s (runs) | median loss | goal |")
    print("|---|---|---|---|---|")
    for cpu_ms, goal in () if args.jpeg_only else ((1.0, 0.01), (0.2, 0.03)):
        batches = args.batches if cpu_ms >= 1 else args.batches * 3
        plain, wrapped, live = compare(cpu_ms / 1e3, batches, args.repeats)
        for label, runs in (("", wrapped), (", live=True", live)):
            losses = [1 - w / p for p, w in zip(plain, runs, strict=True)]
            med = statistics.median(losses)
            print(
                f"| {cpu_ms:g} ms/sample, batch 32, 2 workers{label} | "
                f"{', '.join(f'{x:,.0f}' for x in plain)} | "
                f"{', '.join(f'{x:,.0f}' for x in runs)} | "
                f"{med:+.1%} | <= {goal:.0%} {'met' if med <= goal else 'MISSED'} |"
            )
    from ioprobe.monitor import live as live_view

    if not args.jpeg_only:
        print(
            f"\nlive panel: {live_view.DISPLAY.frames - frames} frames drawn in the live=True "
            f"runs; {live_frame_cost_ms():.2f} ms of its thread's CPU per frame (one a second)"
        )
    width, height = (int(x) for x in args.jpeg_size.lower().split("x"))
    plain, wrapped, usage = compare_jpeg(args.batches * 4, args.repeats, (width, height))
    losses = [1 - w / p for p, w in zip(plain, wrapped, strict=True)]
    pf = statistics.median(u[0] for u in usage[0::2])
    wf = statistics.median(u[0] for u in usage[1::2])
    ps = statistics.median(u[1] for u in usage[0::2])
    ws = statistics.median(u[1] for u in usage[1::2])
    extra = [w[2] / p[2] - 1 for p, w in zip(usage[0::2], usage[1::2], strict=True)]
    print(
        f"| JPEG folder ({width}x{height}, Pillow decode + resize), batch 32, 2 workers | "
        f"{', '.join(f'{x:,.0f}' for x in plain)} | {', '.join(f'{x:,.0f}' for x in wrapped)} | "
        f"{statistics.median(losses):+.1%} | <= 3% "
        f"{'met' if statistics.median(losses) <= 0.03 else 'MISSED'} |"
    )
    print(
        f"\nJPEG folder, per sample (median): minor faults {pf:.1f} plain, {wf:.1f} watched; "
        f"system CPU {ps:.3f} ms plain, {ws:.3f} ms watched"
    )
    print(
        f"JPEG folder, CPU per sample (user + system, process and workers): "
        f"{statistics.median(u[2] for u in usage[0::2]):.3f} ms plain, "
        f"{statistics.median(u[2] for u in usage[1::2]):.3f} ms watched; "
        f"median extra per pair {statistics.median(extra):+.1%} "
        f"({', '.join(f'{x:+.1%}' for x in extra)})"
    )
    _print_decode(
        "short decode run (640x640 whole, batch 16, 2 workers, 2 x 30 batches)",
        compare_short_decode(args.repeats),
    )
    if args.jpeg_only:
        return
    early, late = main_process_cost_us()
    print(
        f"\nmain-process collector cost per batch of 32: {early:.1f} us (first 2,000 batches), {late:.1f} us (after 100,000)"
    )
    host = statistics.median(device_timeline_cost_us(HostClock()) for _ in range(5))
    print(f"device timeline bookkeeping per batch (host clock, 4 events): {host:.1f} us")
    if torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
        cuda = statistics.median(device_timeline_cost_us(CudaEvents(dev)) for _ in range(5))
        print(f"device timeline per batch with CUDA events (4 events): {cuda:.1f} us")


if __name__ == "__main__":
    main()

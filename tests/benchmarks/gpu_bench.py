"""The GPU side's figures on a real CUDA device, as Markdown, each beside its own truth.

  python tests/benchmarks/gpu_bench.py [--quick] [--sections NAMES | --skip NAMES]

Sections: the device and driver; host-to-device and device-to-host copies by size, pinned and
pageable, ioprobe's probe against a bare torch copy timed with CUDA events in the same run;
the disk-to-GPU path beside the storage pass on the same files; GPU idle of a watched loop
from CUDA events, from NVML and from the host clock against a host-timed truth; the CUDA
events' cost per batch in the watch loop; DALI's mixed decoder against Pillow and DALI on the
CPU where DALI is installed. Needs a CUDA device. ``--sections`` runs only the sections named,
``--skip`` all but those: device, copies, disk, idle, alone, event_cost, sampler, dali. ``make
gpu-check`` runs all but dali in its first step and dali alone in its second.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.collect import pcie
from ioprobe.collect.cuda_copy import TorchCopier, open_copier
from tests.fixtures.bare_copy import bare_rate
from tests.fixtures.datasets import SleepDataset

MIB = 1 << 20
Section = Callable[[bool], list[str]]


def device_section(quick: bool) -> list[str]:
    """The device, driver, CUDA and torch versions, and the link NVML reports under load."""
    lines = ["## Device", ""]
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    driver = "unknown"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = str(pynvml.nvmlSystemGetDriverVersion())
        pynvml.nvmlShutdown()
    except Exception as exc:
        driver = f"NVML unavailable ({exc})"
    lines += [
        f"- device: {props.name}, {props.total_memory / 2**30:.1f} GiB, "
        f"{props.multi_processor_count} SMs",
        f"- driver {driver}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"Python {sys.version.split()[0]}; {os.cpu_count()} CPUs",
    ]
    return [*lines, ""]


def copies_section(quick: bool) -> list[str]:
    """ioprobe's copy rates against a bare torch copy loop, same sizes, alternating rounds.

    Each round runs ioprobe's probe over every size, then the bare loop at each size; the
    table gives each side's median over the rounds, so a moment of host memory traffic
    (which moves pageable rates a lot) falls on both sides alike.
    """
    copier = open_copier()
    assert isinstance(copier, TorchCopier), copier
    sizes = (MIB, 256 * MIB) if quick else pcie.SIZES
    rounds = 1 if quick else 3
    ours: dict[tuple[int, str, str], list[float]] = {}
    bare: dict[tuple[int, str, str], list[float]] = {}
    ratio: dict[tuple[int, str, str], list[float]] = {}
    took, link = 0.0, None
    for _ in range(rounds):
        t0 = time.perf_counter()
        points, link = pcie.measure_copies(
            copier, sizes=sizes, budget_s=60, link_reader=pcie.nvml_link
        )
        took = time.perf_counter() - t0
        for p in points:
            key = (p.size_bytes, p.direction, p.memory)
            truth = bare_rate(p.size_bytes, p.memory == "pinned", p.direction)
            ours.setdefault(key, []).append(p.bytes_per_s)
            bare.setdefault(key, []).append(truth)
            ratio.setdefault(key, []).append(p.bytes_per_s / truth)
    lines = ["## Host-to-device and device-to-host copies", ""]
    if link is not None:
        lines.append(
            f"Link under load: gen {link.gen_current} x{link.width_current} (supports gen "
            f"{link.gen_max} x{link.width_max}), "
            f"{(link.theoretical_bytes_per_s or 0) / 1e9:.1f} GB/s per direction. "
            f"One probe over {len(sizes)} sizes took {took:.1f} s; {rounds} rounds, medians."
        )
        lines.append("")
    lines += [
        "| size | direction | memory | ioprobe GB/s | bare torch GB/s | median ratio |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for key in sorted(ours, key=lambda k: (k[0], k[1] != "h2d", k[2] != "pinned")):
        a, b = statistics.median(ours[key]), statistics.median(bare[key])
        lines.append(
            f"| {_size(key[0])} | {key[1]} | {key[2]} | {a / 1e9:.2f} | {b / 1e9:.2f} | "
            f"{statistics.median(ratio[key]):.3f} |"
        )
    top = max(statistics.median(v) for k, v in ours.items() if k[1:] == ("h2d", "pinned"))
    if link is not None and link.theoretical_bytes_per_s:
        lines.append("")
        lines.append(
            f"Pinned host-to-device peak: {top / 1e9:.1f} GB/s, "
            f"{top / link.theoretical_bytes_per_s:.0%} of the link."
        )
    return [*lines, ""]


def disk_section(quick: bool) -> list[str]:
    """The disk-to-GPU path on files this script writes, warm and cold, beside each half
    alone: single-threaded reads into one buffer, and pinned 8 MiB copies."""
    from ioprobe.collect import disk_to_gpu as d2g
    from ioprobe.collect.dataset import FileEntry
    from ioprobe.collect.storage import evict, resident_fraction

    copier = open_copier()
    assert isinstance(copier, TorchCopier), copier
    n = 64 if quick else 128
    lines = [
        "## Disk to GPU",
        "",
        f"{n} files of 4 MiB written to a temporary folder on this machine's disk.",
        "",
        "| cache | disk→GPU GB/s | reads alone GB/s | pinned copies alone GB/s | read s | copy s | wall s | cuFile |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    copy_rate = bare_rate(d2g.BUFFER, True, "h2d")
    with tempfile.TemporaryDirectory() as tmp:
        entries = []
        for i in range(n):
            p = Path(tmp) / f"{i:03d}.bin"
            p.write_bytes(os.urandom(4 * MIB))
            entries.append(FileEntry(str(p), 4 * MIB))
        os.sync()
        paths = [e.path for e in entries]
        buf = bytearray(4 * MIB)
        for cold in (False, True):
            if cold:
                evict(paths)
                left = resident_fraction(paths)
            t0 = time.perf_counter()
            for e in entries:
                with open(e.path, "rb", buffering=0) as fh:
                    fh.readinto(buf)
            read_rate = n * 4 * MIB / (time.perf_counter() - t0)
            if cold:
                evict(paths)
            path = d2g.measure_path(copier, entries, 60, cold)
            label = path.cache or ("cold" if cold else "warm")
            if cold and left is not None:
                label += f" ({left:.0%} resident after eviction)"
            lines.append(
                f"| {label} | {(path.bytes_per_s or 0) / 1e9:.2f} | {read_rate / 1e9:.2f} | "
                f"{copy_rate / 1e9:.2f} | {path.read_seconds:.3f} | {path.copy_seconds:.3f} | "
                f"{path.seconds:.3f} | {d2g.kvikio_read(copier, entries, 10)[1]} |"
            )
    return [*lines, ""]


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n >> 10} KiB"


def _spin_cycles_per_s() -> float:
    cycles = 50_000_000
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return cycles / (time.perf_counter() - t0)


def idle_section(quick: bool) -> list[str]:
    """GPU idle of a watched loop: CUDA events, NVML and the host clock against the truth.

    One worker makes a batch of 8 in about 28 ms; each step queues a 20 ms kernel and returns
    at once, so the host sees itself blocked in ``next()`` almost all the time while the GPU
    is busy most of it. The truth is 1 - (kernel time / batch period), both host-timed.
    """
    kernel = 0.020
    cycles = int(kernel * _spin_cycles_per_s())
    # the kernel's real duration, host-timed on an idle device
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    kernel_real = (time.perf_counter() - t0) / 5
    lines = [
        "## GPU idle of a watched loop",
        "",
        "| batch period ms | truth idle | CUDA events | NVML (1 - SM util) | host clock (stall share) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for _ in range(1 if quick else 3):
        loader = ioprobe.watch(
            DataLoader(SleepDataset(480, 0.003, 65536), batch_size=8, num_workers=1),
            device="cuda",
        )
        n, start = 0, 0.0
        for _batch in loader:
            torch.cuda._sleep(cycles)
            n += 1
            if n == 1:
                start = time.perf_counter()
        torch.cuda.synchronize()
        period = (time.perf_counter() - start) / (n - 1)
        rec = loader.run
        assert rec.watch is not None
        ep = rec.watch.epochs[0]
        nvml = "-"
        series = rec.gpu_series
        if series is not None:
            util = [u for u in series.columns.get("sm_util", []) if u is not None]
            if util:
                nvml = f"{1 - statistics.mean(util) / 100:.3f}"
        events = "-" if rec.gpu_idle_fraction is None else f"{rec.gpu_idle_fraction:.3f}"
        lines.append(
            f"| {period * 1e3:.1f} | {max(0.0, 1 - kernel_real / period):.3f} | {events} | "
            f"{nvml} | {ep.stall_seconds / ep.seconds:.3f} |"
        )
    return [*lines, ""]


def event_cost_section(quick: bool) -> list[str]:
    """The device timeline's per-batch cost with real CUDA events vs the host clock."""
    from ioprobe.loaders.torch import CudaEvents, HostClock
    from tests.benchmarks.bench_watch import device_timeline_cost_us

    dev = torch.device("cuda", torch.cuda.current_device())
    reps = 3 if quick else 5
    cuda = statistics.median(device_timeline_cost_us(CudaEvents(dev)) for _ in range(reps))
    host = statistics.median(device_timeline_cost_us(HostClock()) for _ in range(reps))
    prims = _event_primitives_us(dev)
    return [
        "## CUDA events' cost in the watch loop",
        "",
        f"Per batch (two step-boundary events and a copy's pair, recorded, polled, resolved; "
        f"median of {reps} runs of 20,000 batches): **{cuda:.1f} µs** with CUDA events, "
        f"{host:.1f} µs with the host clock standing in.",
        "",
        "Where it goes, per call (median of 5 x 2,000 calls): "
        + ", ".join(f"{k} {v:.1f} µs" for k, v in prims.items())
        + ".",
        "",
    ]


def _event_primitives_us(dev: torch.device) -> dict[str, float]:
    """The torch calls one timeline event makes, each timed alone."""
    n = 2000
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    stream = torch.cuda.current_stream(dev)
    for e in evs:
        e.record(stream)
    torch.cuda.synchronize()

    def per_call(fn: Callable[[int], object]) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for i in range(n):
                fn(i)
            runs.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(runs)

    return {
        "current_stream()": per_call(lambda i: torch.cuda.current_stream(dev)),
        "Event()": per_call(lambda i: torch.cuda.Event(enable_timing=True)),
        "record(stream)": per_call(lambda i: evs[i].record(stream)),
        "query()": per_call(lambda i: evs[i].query()),
        "elapsed_time()": per_call(
            lambda i: (
                torch.cuda.synchronize() if i == 0 else None,
                evs[i].elapsed_time(evs[i + 1]),
            )
        ),
    }


def dali_section(quick: bool) -> list[str]:
    """DALI's mixed decoder against Pillow and DALI on the CPU: ``ioprobe probe --loader dali``
    on the built-in sample, as a user runs it, at a short and a long budget: what each path
    reads (and whether its warm-up levelled off), the CPU sweep's one-worker cost beside its
    best level's, the wall time each probe took against its budget, and what the probe said
    before measuring where the budget could not hold."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as exc:
        return ["## DALI decode paths", "", f"Not measured: DALI is not installed ({exc}).", ""]
    lines = [
        "## DALI decode paths",
        "",
        "`ioprobe probe --loader dali --time-budget B` on the built-in sample (2,000 JPEGs), "
        "one fresh process per budget; `said s` is the time the probe gave before measuring "
        "where it said the budget could not hold.",
        "",
        "| budget s | wall s | said s | path | images/s | CPU ms/image | threads | warm-up, timed batches | error |",
        "|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]
    sweeps = []
    statements = []
    for budget in ("10", "20" if quick else "40"):
        data, wall, stderr = _probe_dali(budget)
        said = re.search(r"cannot hold on this host: .*expect about ([0-9.]+) s", stderr)
        if said is not None:
            statements.append(f"budget {budget}: {said[0]}")
        for p in data["stages"]["cpu"]["decode_paths"]:
            warm = (
                f"{p['warmup_batches']}, {p['timed_batches']}"
                + (" (short run)" if p["warmed_up"] is False else "")
                if p["path"] != "pillow"
                else ""
            )
            lines.append(
                f"| {budget} | {wall:.1f} | {said[1] if said else '-'} | {p['path']} | "
                f"{p['samples_per_s'] or 0:,.0f} | "
                f"{(p['cpu_seconds_per_sample'] or 0) * 1e3:.2f} | {p['threads']} | {warm} | "
                f"{p['error'] or ''} |"
            )
        sweep = data["stages"]["cpu"]["sweep"]
        sweeps.append(
            f"budget {budget}: CPU sweep "
            + ", ".join(
                f"{lv['workers']} workers {lv['cpu_seconds_per_sample'] * 1e3:.2f} ms/image"
                for lv in sweep
            )
        )
    return [*lines, "", *(f"- {s}" for s in sweeps + statements), ""]


def _probe_dali(budget: str) -> tuple[dict[str, Any], float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dali.json"
        cmd = [sys.executable, "-m", "ioprobe", "probe", "--loader", "dali", "-q"]
        t0 = time.perf_counter()
        r = subprocess.run(
            [*cmd, "--time-budget", budget, "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"probe --loader dali exited {r.returncode}: {r.stderr[-500:]}")
        data: dict[str, Any] = json.loads(out.read_text())
    return data, wall, r.stderr


def alone_section(quick: bool) -> list[str]:
    """ioprobe.gpu_alone on a step that fills the GPU and one that leaves it nearly idle,
    each step time beside the host-timed truth (synchronised loop)."""
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(64, 64, device="cuda")

    def heavy(x: torch.Tensor) -> object:
        return x @ big

    def tiny(x: torch.Tensor) -> object:
        for _ in range(20):
            x = torch.tanh(x @ small)
        return x

    lines = [
        "## The GPU alone (`ioprobe.gpu_alone`)",
        "",
        "| step | batch | ioprobe ms/step | host-timed ms/step | samples/s | SM active | read by |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    cases = (
        ("8192² bf16 matmul", heavy, torch.randn(8192, 8192, dtype=torch.bfloat16)),
        ("20 x (32x64 @ 64x64, tanh)", tiny, torch.randn(32, 64)),
    )
    for name, step, batch in cases:
        alone = ioprobe.gpu_alone(step, batch, seconds=1.0)
        on = batch.cuda()
        for _ in range(3):
            step(on)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            step(on)
        torch.cuda.synchronize()
        truth = (time.perf_counter() - t0) / 50
        sm = "-" if alone.sm_active is None else f"{alone.sm_active:.0%}"
        lines.append(
            f"| {name} | {alone.batch_size} | {(alone.step_seconds or 0) * 1e3:.3f} | "
            f"{truth * 1e3:.3f} | {alone.samples_per_s or 0:,.0f} | {sm} | "
            f"{alone.sm_method or alone.note} |"
        )
    return [*lines, ""]


def sampler_section(quick: bool) -> list[str]:
    """The NVML sampler's own cost at 10 Hz (tests/benchmarks/bench_nvml_sampler.py)."""
    from tests.benchmarks.bench_nvml_sampler import measure

    lines = measure(3.0 if quick else 10.0, 10.0)
    return ["## NVML sampler cost", "", *(f"- {line}" for line in lines), ""]


SECTIONS: list[Section] = [
    device_section,
    copies_section,
    disk_section,
    idle_section,
    alone_section,
    event_cost_section,
    sampler_section,
    dali_section,
]


def section_name(section: Section) -> str:
    return section.__name__.removesuffix("_section")


def pick(sections: str | None, skip: str | None) -> list[Section]:
    """The sections named in ``sections`` (all when None), less those named in ``skip``, in
    their usual order; an unknown name is a ValueError."""
    names = [section_name(s) for s in SECTIONS]
    chosen = set(names)
    for arg, keep in ((sections, True), (skip, False)):
        if arg is None:
            continue
        given = {n.strip() for n in arg.split(",") if n.strip()}
        unknown = sorted(given - set(names))
        if unknown:
            raise ValueError(f"no section {', '.join(unknown)}; the sections: {', '.join(names)}")
        chosen = chosen & given if keep else chosen - given
    return [s for s in SECTIONS if section_name(s) in chosen]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--sections", metavar="NAMES", help="only these sections, comma-separated")
    ap.add_argument("--skip", metavar="NAMES", help="every section but these, comma-separated")
    args = ap.parse_args()
    try:
        chosen = pick(args.sections, args.skip)
    except ValueError as exc:
        print(f"gpu_bench: {exc}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA device", file=sys.stderr)
        return 2
    out: list[str] = []
    failed = 0
    for section in chosen:
        t0 = time.perf_counter()
        try:
            lines = section(args.quick)
        except Exception as exc:  # one broken section must not hide the others' figures
            failed += 1
            lines = [f"## {section.__name__}", "", f"FAILED: {type(exc).__name__}: {exc}", ""]
        lines.append(f"_({section.__name__}: {time.perf_counter() - t0:.1f} s)_")
        lines.append("")
        print("\n".join(lines), flush=True)
        out += lines
    if args.out:
        Path(args.out).write_text("\n".join(out) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Storage reads vs fio: ioprobe's read throughput against fio's on the same files.

Usage::

    python tests/benchmarks/bench_storage.py [--workdir DIR] [--repeats 3] [--out FILE.md]

(``make bench`` runs it with the defaults.) The script

1. installs fio with apt-get if it is missing;
2. builds a scratch data set in a temporary directory under DIR (default: the system temp
   directory), removed at exit, on Ctrl-C too: 1,500 files of 128 KiB of random bytes in
   ``small/p0..p3`` and one 2 GiB file ``big.bin``, each fsync-ed (dirty pages can't be
   evicted), and for fio's small-file jobs ``links/jJ/dK``: hard links to the same files, a
   folder per job for each job count J (the same inodes, so the same page cache);
3. per comparison, runs fio's job sweep and ``ioprobe probe`` alternately (``--repeats``
   pairs) and takes the median of the per-pair ratios ioprobe / fio's best: the machines these
   run on are shared and noisy, so absolute MB/s drift between runs while a ratio from
   back-to-back runs holds still. fio's side of a pair is its best over 1, 4, 16 and 32 jobs
   (``FIO_JOBS``), as ioprobe's is its best sweep level: for the big file each job streams its
   own contiguous region (``size`` = ``offset_increment`` = file size / jobs), for the small
   files each job reads its share of them. Before each timed cold run the script reads the
   files once, untimed, in order (see ``settle``), so no run inherits the state the previous
   one left on the disk's host side;
4. prints a markdown report (table, commands, date, machine) and writes it to ``--out``.

Cold reads (evicted before every pass) are the ranked comparisons, goal ratio >= 0.95. Warm
(page-cached) figures are reported beside them but not ranked: fio keeps a file open across
its I/Os and reaches memcpy speed, a loader opens and closes each file.

Each pair also runs a reference fio: the job count that won the sweep, again, with
``iomem_align=4096``. fio's default buffer comes from plain malloc, which puts a 1 MiB buffer
16 bytes into a page; on some CPUs the kernel's copy to user space is much slower into such a
destination (measured on an AMD EPYC: 2.2-2.6 GB/s instead of 9.6-11 GB/s from the page cache
when the address modulo 64 is 8, 16 or 24), and that caps fio's warm single-file figure. The
ranked ratio is the protocol's (fio as it comes); the reference shows how much of it is fio's
buffer. ``--no-reference`` skips it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import mmap
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SMALL_DIRS = 4
SMALL_PER_DIR = 375
SMALL_SIZE = 128 * 1024
BIG_SIZE = 2 * 1024**3
WRITE_CHUNK = 8 * 1024 * 1024
COLD_GOAL = 0.95
ALIGN = "iomem_align=4096"
RUN_TIMEOUT_S = 600
FIO_JOBS = (1, 4, 16, 32)  # fio's sweep: its best is what ioprobe's best level is held to

SMALL_JOB_GLOBAL = """\
[global]
rw=read
bs=128k
ioengine=psync
invalidate={invalidate}
thread
group_reporting
"""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- setup


def ensure_fio() -> str:
    """The fio binary, installed from the Debian package when it is missing."""
    found = shutil.which("fio")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        sys.exit("fio is not installed and there is no apt-get to install it with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "fio"]
    log("fio not found: apt-get install -y fio")
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=False).returncode:
        log("install failed: apt-get update, then install again")
        subprocess.run([apt, "update"], env=env, stdout=subprocess.DEVNULL, check=True)
        subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=True)
    found = shutil.which("fio")
    if found is None:
        sys.exit("apt-get installed fio but it is not on PATH")
    return found


def ioprobe_command() -> list[str]:
    """The ioprobe CLI next to this interpreter, else ``python -m ioprobe``."""
    exe = Path(sys.executable).parent / "ioprobe"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "ioprobe"]


def _write_random(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left:
            n = min(WRITE_CHUNK, left)
            view = memoryview(os.urandom(n))
            while view:
                view = view[os.write(fd, view) :]
            left -= n
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build_data(root: Path) -> tuple[Path, Path]:
    small = root / "small"
    t0 = time.perf_counter()
    for d in range(SMALL_DIRS):
        folder = small / f"p{d}"
        folder.mkdir(parents=True)
        for i in range(SMALL_PER_DIR):
            _write_random(folder / f"f{i:04d}.bin", SMALL_SIZE)
        _fsync_dir(folder)
    _fsync_dir(small)
    log(
        f"wrote {SMALL_DIRS * SMALL_PER_DIR} x {SMALL_SIZE // 1024} KiB files "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    link_small_files(sorted(small.glob("p*/*")), root / "links")
    t0 = time.perf_counter()
    big = root / "big.bin"
    _write_random(big, BIG_SIZE)
    _fsync_dir(root)
    log(f"wrote {BIG_SIZE >> 20} MiB big.bin in {time.perf_counter() - t0:.1f} s")
    return small, big


def link_small_files(files: Sequence[Path], links: Path) -> None:
    """A folder per fio job for each job count: ``links/jJ/dK`` holds hard links to files
    K, K+J, K+2J, ... (the same inodes: evicting or reading a link is the file itself)."""
    for jobs in FIO_JOBS:
        for k in range(jobs):
            folder = links / f"j{jobs}" / f"d{k}"
            folder.mkdir(parents=True)
            for f in files[k::jobs]:
                os.link(f, folder / f"{f.parent.name}-{f.name}")


def small_job(links: Path | str, jobs: int, invalidate: int, aligned: bool) -> str:
    """fio's small-file job at ``jobs`` jobs: each reads the files of its own folder, each
    file in one 128 KiB request."""
    text = SMALL_JOB_GLOBAL.format(invalidate=invalidate)
    if aligned:
        text += ALIGN + "\n"
    return text + "".join(f"[j{k}]\nopendir={links}/j{jobs}/d{k}\n" for k in range(jobs))


def big_job(
    fio: str, big: Path | str, size: int, jobs: int, invalidate: int, aligned: bool
) -> list[str]:
    """fio's large-file job at ``jobs`` jobs: each streams its own contiguous 1/``jobs`` of
    the file in 1 MiB requests, through the page cache."""
    share = size // jobs
    cmd = [
        fio,
        "--name=b",
        f"--filename={big}",
        "--rw=read",
        "--bs=1M",
        "--ioengine=psync",
        "--direct=0",
        f"--invalidate={invalidate}",
        f"--numjobs={jobs}",
        f"--size={share}",
        f"--offset_increment={share}",
        "--thread",
        "--group_reporting",
    ]
    return [*cmd, f"--{ALIGN}"] if aligned else cmd


# --------------------------------------------------------------------------- runs


@dataclass
class IoprobeResult:
    bytes_per_s: float
    best_concurrency: int | None
    sweep: list[dict[str, Any]]
    pattern: str | None = None


@dataclass
class Pair:
    fio_sweep: dict[int, float]  # jobs -> bytes/s
    ioprobe: IoprobeResult
    fio_ref_bps: float | None = None  # the best job count again, with a page-aligned buffer

    @property
    def fio_jobs(self) -> int:
        """The job count of fio's best run."""
        return max(self.fio_sweep, key=lambda j: self.fio_sweep[j])

    @property
    def fio_bps(self) -> float:
        return self.fio_sweep[self.fio_jobs]

    @property
    def ratio(self) -> float:
        return self.ioprobe.bytes_per_s / self.fio_bps

    @property
    def ref_ratio(self) -> float | None:
        return self.ioprobe.bytes_per_s / self.fio_ref_bps if self.fio_ref_bps else None


@dataclass
class Comparison:
    key: str
    title: str
    cache: str  # "cold" or "warm"
    fio_cmds: dict[int, list[str]]  # jobs -> the fio command of that sweep level
    fio_ref_cmds: dict[int, list[str]]  # the same jobs with a page-aligned buffer
    ioprobe_cmd: list[str]
    files: list[Path]  # what both read: the settle pass reads it too
    pairs: list[Pair] = field(default_factory=list)

    @property
    def warm(self) -> bool:
        return self.cache == "warm"

    @property
    def goal(self) -> float | None:
        return None if self.warm else COLD_GOAL

    @property
    def median_ratio(self) -> float:
        return statistics.median(p.ratio for p in self.pairs)

    @property
    def median_ref_ratio(self) -> float | None:
        refs = [r for p in self.pairs if (r := p.ref_ratio) is not None]
        return statistics.median(refs) if refs else None


def _run(cmd: Sequence[str]) -> None:
    proc = subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(cmd)} exited {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )


def parse_fio(text: str) -> float:
    """``jobs[0].read.bw_bytes`` of fio's JSON output; the file may start with notices."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in fio's output")
    return float(json.loads(text[start:])["jobs"][0]["read"]["bw_bytes"])


def run_fio(cmd: list[str], out: Path, warm_up: bool) -> float:
    if warm_up:  # untimed pass that brings the files into the page cache
        _run([*cmd, "--output-format=json", f"--output={out}"])
    out.unlink(missing_ok=True)
    _run([*cmd, "--output-format=json", f"--output={out}"])
    return parse_fio(out.read_text())


def run_ioprobe(cmd: list[str], out: Path, cache: str) -> IoprobeResult:
    out.unlink(missing_ok=True)
    _run([*cmd, "--json", str(out)])
    stage = json.loads(out.read_text())["stages"]["storage"][cache]
    return IoprobeResult(
        bytes_per_s=float(stage["read_bytes_per_s"]),
        best_concurrency=stage.get("best_concurrency"),
        sweep=list(stage.get("sweep") or []),
        pattern=stage.get("pattern"),
    )


def settle(files: Sequence[Path]) -> None:
    """Evict ``files``, read them once in order, untimed, and evict them again.

    On a virtio disk the host keeps state between passes: a sequential cold read right after
    ioprobe's shuffled, many-threaded pass over big.bin ran at 0.7-1.1 GB/s instead of
    mostly 2-3.7 GB/s (the same 4 MiB requests took 9 ms each instead of 3.6 ms), still 20 s later,
    and one sequential pass cleared it. Every timed cold run follows this pass, so neither tool
    inherits the other's after-effects.
    """
    buf = mmap.mmap(-1, WRITE_CHUNK)  # page-aligned
    view = memoryview(buf)
    try:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                while os.readv(fd, [view]):
                    pass
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    finally:
        view.release()
        buf.close()


def run_comparison(comp: Comparison, repeats: int, scratch: Path, reference: bool) -> None:
    """``repeats`` pairs: fio's job sweep, ioprobe (and the reference fio after them).

    Cold runs each follow an untimed settle pass; warm fio runs follow an untimed warm-up run
    (ioprobe ``--warm`` warms the cache itself).
    """

    def prepare() -> None:
        if not comp.warm:
            settle(comp.files)

    def fio(cmd: list[str], name: str) -> float:
        prepare()
        return run_fio(cmd, scratch / f"{name}.json", comp.warm)

    for i in range(repeats):
        sweep = {j: fio(cmd, f"fio-{comp.key}-{i}-j{j}") for j, cmd in comp.fio_cmds.items()}
        prepare()
        res = run_ioprobe(comp.ioprobe_cmd, scratch / f"ioprobe-{comp.key}-{i}.json", comp.cache)
        pair = Pair(sweep, res)
        if reference:
            pair.fio_ref_bps = fio(comp.fio_ref_cmds[pair.fio_jobs], f"fio-ref-{comp.key}-{i}")
        comp.pairs.append(pair)
        ref = pair.fio_ref_bps
        extra = f", aligned fio {ref / 1e6:.0f} MB/s" if ref else ""
        log(
            f"{comp.key} {i + 1}/{repeats}: fio {_sweep_text(sweep)} MB/s, "
            f"ioprobe {res.bytes_per_s / 1e6:.0f} MB/s at {res.best_concurrency} threads, "
            f"ratio {pair.ratio:.2f}{extra}"
        )


def _sweep_text(sweep: dict[int, float]) -> str:
    return " ".join(f"{j}:{bps / 1e6:,.0f}" for j, bps in sweep.items())


# --------------------------------------------------------------------------- machine


def machine_facts(ioprobe: list[str], path: Path) -> dict[str, Any]:
    facts: dict[str, Any] = {"nproc": os.cpu_count(), "kernel": platform.release()}
    proc = subprocess.run(
        [*ioprobe, "env", "--json", "-", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    host: dict[str, Any] = {}
    if proc.returncode == 0:
        with contextlib.suppress(ValueError, KeyError):
            host = json.loads(proc.stdout)["host"]
    fs = host.get("filesystem") or {}
    facts.update(
        cpu=host.get("cpu_model"),
        memory_bytes=host.get("memory_bytes"),
        device=fs.get("device"),
        device_class=fs.get("device_class"),
        fs_type=fs.get("fs_type"),
    )
    return facts


def tool_versions(fio: str, ioprobe: list[str]) -> str:
    out = []
    for cmd in ([fio, "--version"], [*ioprobe, "--version"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        out.append(proc.stdout.strip() if proc.returncode == 0 else f"{cmd[0]} (version unknown)")
    return ", ".join(out)


# --------------------------------------------------------------------------- report


def _mbs(bps: float) -> str:
    return f"{bps / 1e6:,.0f}"


def _sweep_cell(sweep: list[dict[str, Any]]) -> str:
    return " ".join(
        f"{p.get('concurrency')}:{(p.get('read_bytes_per_s') or 0) / 1e6:,.0f}" for p in sweep
    )


def _resident_cell(sweep: list[dict[str, Any]]) -> str:
    vals = [
        float(p["resident_fraction_before"])
        for p in sweep
        if p.get("resident_fraction_before") is not None
    ]
    return f"{max(vals):.1%}" if vals else "n/a"


def _machine_line(facts: dict[str, Any]) -> str:
    parts = [f"{facts.get('nproc')} cores ({facts.get('cpu') or 'CPU model unknown'})"]
    if facts.get("memory_bytes"):
        parts.append(f"{facts['memory_bytes'] / 2**30:.1f} GiB memory")
    if facts.get("device"):
        parts.append(
            f"disk `{facts['device']}` (device class {facts.get('device_class')}, "
            f"{facts.get('fs_type')})"
        )
    parts.append(f"Linux {facts.get('kernel')}")
    return ", ".join(parts)


def render(
    comps: list[Comparison],
    *,
    date: str,
    elapsed_s: float,
    facts: dict[str, Any],
    versions: str,
    invocation: str,
    repeats: int,
    time_budget: float,
    reference: bool,
) -> str:
    lines: list[str] = []
    add = lines.append
    add(
        f"Measured {date}: {repeats} pairs per comparison, fio's job sweep and ioprobe "
        f"alternating; the script took {elapsed_s / 60:.1f} min."
    )
    add(f"Machine: {_machine_line(facts)}. Tools: {versions}.")
    add(f"Made by: `{invocation}`.")
    add("")
    head = [
        "Comparison",
        "fio best MB/s",
        "fio best jobs",
        "ioprobe MB/s",
        "ratio",
        "median ratio",
        "ioprobe best threads",
        "goal",
    ]
    if reference:
        head += [f"fio best jobs, `{ALIGN}`, MB/s", "median ratio vs it"]
    add("| " + " | ".join(head) + " |")
    add("|" + "---|" * len(head))
    for c in comps:
        med = c.median_ratio
        if c.goal is None:
            goal = "not ranked (warm)"
        else:
            goal = f">= {c.goal:.2f}: **{'met' if med >= c.goal else 'missed'}**"
        row = [
            c.title,
            " / ".join(_mbs(p.fio_bps) for p in c.pairs),
            " / ".join(str(p.fio_jobs) for p in c.pairs),
            " / ".join(_mbs(p.ioprobe.bytes_per_s) for p in c.pairs),
            " / ".join(f"{p.ratio:.2f}" for p in c.pairs),
            f"**{med:.2f}**",
            " / ".join(str(p.ioprobe.best_concurrency) for p in c.pairs),
            goal,
        ]
        if reference:
            ref_med = c.median_ref_ratio
            row += [
                " / ".join(_mbs(p.fio_ref_bps or 0.0) for p in c.pairs),
                f"{ref_med:.2f}" if ref_med is not None else "n/a",
            ]
        add("| " + " | ".join(row) + " |")
    add("")
    add("Per-pair values are separated by `/`, in run order. MB = 10^6 bytes; ratio =")
    add("ioprobe / fio's best. Both sweeps per run (fio jobs:MB/s, ioprobe threads:MB/s),")
    add("ioprobe's read pattern, and the largest page-cache residency its mincore check found")
    add("before a cold level:")
    add("")
    add("| Comparison | pair | fio sweep | ioprobe sweep | pattern | resident before |")
    add("|---|---|---|---|---|---|")
    for c in comps:
        for i, p in enumerate(c.pairs, 1):
            res = "n/a (warm)" if c.warm else _resident_cell(p.ioprobe.sweep)
            add(
                f"| {c.title} | {i} | {_sweep_text(p.fio_sweep)} | "
                f"{_sweep_cell(p.ioprobe.sweep)} | {p.ioprobe.pattern or 'n/a'} | {res} |"
            )
    add("")
    add(
        f"Data: {SMALL_DIRS * SMALL_PER_DIR:,} files of {SMALL_SIZE // 1024} KiB of random bytes "
        f"in `DATA/small/p0..p{SMALL_DIRS - 1}` and one {BIG_SIZE >> 30} GiB file "
        "`DATA/big.bin`, written and fsync-ed by the script in a scratch directory (DATA); "
        "`DATA/links/jJ/dK` hold hard links to the small files, file K, K+J, K+2J, ... for "
        f"fio's job K of J (J in {', '.join(map(str, FIO_JOBS))})."
    )
    add("Commands, per pair in this order (fio also gets `--output-format=json --output=FILE`,")
    add(f"ioprobe `--json FILE`; `--time-budget {time_budget:g}` lets ioprobe's sweep finish,")
    add("the CPU stage it runs afterwards is not compared; each cold run follows an untimed")
    add("settle pass: evict, read the files once in order, evict; each warm fio run follows an")
    add("untimed run of itself; the reference reruns fio's best job count of the pair):")
    add("")
    add("```")
    for c in comps:
        add(f"# {c.title}")
        for cmd in c.fio_cmds.values():
            add(shlex.join(cmd))
        add(shlex.join(c.ioprobe_cmd))
        if reference:
            best = next(iter(c.fio_ref_cmds.values()))
            add(f"{shlex.join(best)}   # reference, at the pair's best job count")
    add("```")
    add("")
    add("`small-cold-j4.fio` (`-j1`, `-j16`, `-j32` have one `[jK]` section per job, reading")
    add("`DATA/links/jJ/dK`; `small-warm-*` have `invalidate=0`; the `-aligned` variants add")
    add(f"`{ALIGN}` to `[global]`):")
    add("")
    add("```ini")
    add(small_job("DATA/links", 4, 1, aligned=False).rstrip("\n"))
    add("```")
    return "\n".join(lines) + "\n"


def _portable(cmd: list[str], root: Path, ioprobe: list[str], fio: str) -> list[str]:
    """``cmd`` as it reads with DATA standing for the scratch directory."""
    if cmd[: len(ioprobe)] == ioprobe:
        cmd = ["ioprobe", *cmd[len(ioprobe) :]]
    elif cmd and cmd[0] == fio:
        cmd = ["fio", *cmd[1:]]
    return [a.replace(str(root), "DATA") for a in cmd]


# --------------------------------------------------------------------------- main


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def build_comparisons(
    root: Path,
    small: Path,
    big: Path,
    fio: str,
    ioprobe: list[str],
    time_budget: float,
    warm: bool,
) -> list[Comparison]:
    links = root / "links"

    def small_fio(cache: str, aligned: bool) -> dict[int, list[str]]:
        cmds = {}
        for jobs in FIO_JOBS:
            path = root / f"small-{cache}-j{jobs}{'-aligned' if aligned else ''}.fio"
            path.write_text(small_job(links, jobs, 1 if cache == "cold" else 0, aligned))
            cmds[jobs] = [fio, str(path)]
        return cmds

    def big_fio(cache: str, aligned: bool) -> dict[int, list[str]]:
        inv = 1 if cache == "cold" else 0
        return {j: big_job(fio, big, BIG_SIZE, j, inv, aligned) for j in FIO_JOBS}

    def probe(target: Path, cache: str) -> list[str]:
        return [
            *ioprobe,
            "probe",
            str(target),
            f"--{cache}",
            "--loader",
            "raw",
            "--time-budget",
            f"{time_budget:g}",
            "-q",
        ]

    small_files = sorted(small.glob("p*/*"))
    comps = []
    for cache in ("cold", "warm") if warm else ("cold",):
        comps.append(
            Comparison(
                f"small-{cache}",
                f"(a) 1,500 x 128 KiB, {cache}",
                cache,
                small_fio(cache, False),
                small_fio(cache, True),
                probe(small, cache),
                small_files,
            )
        )
        comps.append(
            Comparison(
                f"big-{cache}",
                f"(b) 2 GiB file, {cache}",
                cache,
                big_fio(cache, False),
                big_fio(cache, True),
                probe(big, cache),
                [big],
            )
        )
    return comps


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--workdir", help="parent of the scratch directory (default: system temp)")
    ap.add_argument("--repeats", type=int, default=3, help="fio/ioprobe pairs per comparison")
    ap.add_argument("--out", help="also write the markdown report to this file")
    ap.add_argument("--time-budget", type=float, default=30.0, help="ioprobe --time-budget, s")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm (page-cached) figures")
    ap.add_argument(
        "--no-reference", action="store_true", help=f"skip the reference fio with {ALIGN}"
    )
    raw_args = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw_args)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    reference = not args.no_reference

    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with `&`
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    fio = ensure_fio()
    ioprobe = ioprobe_command()
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="ioprobe-bench-", dir=args.workdir))
    try:
        log(f"scratch directory {root}")
        small, big = build_data(root)
        scratch = root / "results"
        scratch.mkdir()
        comps = build_comparisons(
            root, small, big, fio, ioprobe, args.time_budget, warm=not args.no_warm
        )
        for comp in comps:
            log(f"{comp.title}: {args.repeats} pairs")
            run_comparison(comp, args.repeats, scratch, reference)
        facts = machine_facts(ioprobe, root)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
        log(f"removed {root}")

    for comp in comps:
        comp.fio_cmds = {j: _portable(c, root, ioprobe, fio) for j, c in comp.fio_cmds.items()}
        # the report shows the reference at one job count: the one most pairs ran it at
        best = statistics.mode(p.fio_jobs for p in comp.pairs)
        comp.fio_ref_cmds = {best: _portable(comp.fio_ref_cmds[best], root, ioprobe, fio)}
        comp.ioprobe_cmd = _portable(comp.ioprobe_cmd, root, ioprobe, fio)
    report = render(
        comps,
        date=date,
        elapsed_s=time.perf_counter() - started,
        facts=facts,
        versions=tool_versions(fio, ioprobe),
        invocation=shlex.join(["python", "tests/benchmarks/bench_storage.py", *raw_args]),
        repeats=args.repeats,
        time_budget=args.time_budget,
        reference=reference,
    )
    sys.stdout.write(report)
    if args.out:
        Path(args.out).write_text(report)
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Storage reads vs fio: ioprobe's read throughput against fio's on the same files.

Usage::

    python tests/benchmarks/bench_storage.py [--workdir DIR] [--repeats 3] [--out FILE.md]

(``make bench`` runs it with the defaults.) The script

1. installs fio with apt-get if it is missing;
2. builds a scratch data set in a temporary directory under DIR (default: the system temp
   directory), removed at exit, on Ctrl-C too: 1,500 files of 128 KiB of random bytes in
   ``small/p0..p3`` and one 2 GiB file ``big.bin``, each fsync-ed (dirty pages can't be evicted);
3. per comparison, runs fio and ``ioprobe probe`` alternately, A B A B A B (``--repeats``
   pairs), and takes the median of the per-pair ratios ioprobe / fio: the machines these run on
   are shared and noisy, so absolute MB/s drift between runs while a ratio from back-to-back
   runs holds still;
4. prints a markdown report (tables, commands, date, machine) and writes it to ``--out``.

Cold reads (evicted before every pass) are the ranked comparisons, goal ratio >= 0.95. Warm
(page-cached) figures are reported beside them but not ranked: fio keeps a file open across its
I/Os and reaches memcpy speed, a loader opens and closes each file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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
RUN_TIMEOUT_S = 600

SMALL_JOB = """\
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
    log("fio not found: apt-get install -y fio")
    install = [apt, "install", "-y", "fio"]
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=False).returncode != 0:
        log("install failed: apt-get update, then install again")
        subprocess.run([apt, "update"], env=env, stdout=subprocess.DEVNULL, check=True)
        subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=True)
    found = shutil.which("fio")
    if found is None:
        sys.exit("apt-get install fio succeeded but fio is not on PATH")
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
    t0 = time.perf_counter()
    big = root / "big.bin"
    _write_random(big, BIG_SIZE)
    _fsync_dir(root)
    log(f"wrote {BIG_SIZE >> 20} MiB big.bin in {time.perf_counter() - t0:.1f} s")
    return small, big


# --------------------------------------------------------------------------- runs


@dataclass
class IoprobeResult:
    bytes_per_s: float
    best_concurrency: int | None
    sweep: list[dict[str, Any]]


@dataclass
class Pair:
    fio_bps: float
    ioprobe: IoprobeResult

    @property
    def ratio(self) -> float:
        return self.ioprobe.bytes_per_s / self.fio_bps if self.fio_bps else float("nan")


@dataclass
class Comparison:
    key: str
    title: str
    cache: str  # "cold" or "warm"
    fio_cmd: list[str]
    ioprobe_cmd: list[str]
    fio_warmup: list[str] | None = None
    pairs: list[Pair] = field(default_factory=list)

    @property
    def goal(self) -> float | None:
        return COLD_GOAL if self.cache == "cold" else None

    @property
    def median_ratio(self) -> float:
        return statistics.median(p.ratio for p in self.pairs)


def _run(cmd: Sequence[str]) -> None:
    proc = subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )


def parse_fio(text: str) -> float:
    """``jobs[0].read.bw_bytes`` of fio's JSON output; the file may start with notices."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in fio's output")
    doc = json.loads(text[start:])
    return float(doc["jobs"][0]["read"]["bw_bytes"])


def run_fio(cmd: list[str], out: Path) -> float:
    out.unlink(missing_ok=True)
    _run([*cmd, "--output-format=json", f"--output={out}"])
    return parse_fio(out.read_text())


def run_ioprobe(cmd: list[str], out: Path, cache: str) -> IoprobeResult:
    out.unlink(missing_ok=True)
    _run([*cmd, "--json", str(out)])
    doc = json.loads(out.read_text())
    stage = doc["stages"]["storage"][cache]
    return IoprobeResult(
        bytes_per_s=float(stage["read_bytes_per_s"]),
        best_concurrency=stage.get("best_concurrency"),
        sweep=list(stage.get("sweep") or []),
    )


def run_comparison(comp: Comparison, repeats: int, scratch: Path) -> None:
    for i in range(repeats):
        if comp.fio_warmup is not None:
            _run([*comp.fio_warmup, "--output-format=json", f"--output={scratch / 'warmup.json'}"])
        fio_bps = run_fio(comp.fio_cmd, scratch / f"fio-{comp.key}-{i}.json")
        res = run_ioprobe(comp.ioprobe_cmd, scratch / f"ioprobe-{comp.key}-{i}.json", comp.cache)
        pair = Pair(fio_bps, res)
        comp.pairs.append(pair)
        log(
            f"{comp.key} pair {i + 1}/{repeats}: fio {fio_bps / 1e6:8.1f} MB/s  "
            f"ioprobe {res.bytes_per_s / 1e6:8.1f} MB/s  ratio {pair.ratio:.3f}  "
            f"(best at {res.best_concurrency} threads)"
        )


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
    if proc.returncode == 0:
        try:
            host = json.loads(proc.stdout)["host"]
        except (ValueError, KeyError):
            host = {}
        fs = host.get("filesystem") or {}
        facts.update(
            cpu=host.get("cpu_model"),
            usable_cores=host.get("usable_cores"),
            memory_bytes=host.get("memory_bytes"),
            device=fs.get("device"),
            device_class=fs.get("device_class"),
            fs_type=fs.get("fs_type"),
            disk_model=fs.get("model"),
        )
    return facts


def tool_versions(fio: str, ioprobe: list[str]) -> tuple[str, str]:
    fio_v = subprocess.run([fio, "--version"], capture_output=True, text=True, check=False)
    io_v = subprocess.run(
        [*ioprobe, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    return (
        fio_v.stdout.strip() or "fio (unknown version)",
        (io_v.stdout.strip() or "ioprobe (unknown version)") if io_v.returncode == 0 else "ioprobe",
    )


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


def _machine_line(facts: dict[str, Any], versions: tuple[str, str]) -> str:
    parts = [f"{facts.get('nproc')} cores ({facts.get('cpu') or 'CPU model unknown'})"]
    if facts.get("memory_bytes"):
        parts.append(f"{facts['memory_bytes'] / 2**30:.1f} GiB memory")
    if facts.get("device"):
        parts.append(
            f"disk `{facts['device']}`, class {facts.get('device_class')}, {facts.get('fs_type')}"
        )
    parts.append(f"Linux {facts.get('kernel')}")
    return ", ".join(parts) + f"; {versions[0]}, {versions[1]}"


def render(
    comps: list[Comparison],
    *,
    date: str,
    elapsed_s: float,
    facts: dict[str, Any],
    versions: tuple[str, str],
    data_note: str,
    job_file: str,
    repeats: int,
    time_budget: float,
) -> str:
    lines: list[str] = []
    add = lines.append
    add(
        f"Measured {date}, {repeats} pairs per comparison (fio then ioprobe, alternating), "
        f"script wall time {elapsed_s / 60:.1f} min."
    )
    add(f"Machine: {_machine_line(facts, versions)}.")
    add("")
    add(
        "| Comparison | fio MB/s per pair | ioprobe MB/s per pair | ratio per pair | median ratio | ioprobe best threads | goal |"
    )
    add("|---|---|---|---|---|---|---|")
    for c in comps:
        fio = " / ".join(_mbs(p.fio_bps) for p in c.pairs)
        iop = " / ".join(_mbs(p.ioprobe.bytes_per_s) for p in c.pairs)
        rat = " / ".join(f"{p.ratio:.2f}" for p in c.pairs)
        conc = " / ".join(str(p.ioprobe.best_concurrency) for p in c.pairs)
        med = c.median_ratio
        if c.goal is None:
            goal = "not ranked (warm)"
        else:
            goal = f">= {c.goal:.2f}: {'met' if med >= c.goal else 'missed'}"
        add(f"| {c.title} | {fio} | {iop} | {rat} | **{med:.2f}** | {conc} | {goal} |")
    add("")
    add("ioprobe's concurrency sweep per run (threads: MB/s) and the largest page-cache")
    add("residency its mincore check found before a cold level:")
    add("")
    add("| Comparison | pair | sweep | resident before |")
    add("|---|---|---|---|")
    for c in comps:
        for i, p in enumerate(c.pairs, 1):
            res = _resident_cell(p.ioprobe.sweep) if c.cache == "cold" else "n/a (warm)"
            add(f"| {c.title} | {i} | {_sweep_cell(p.ioprobe.sweep)} | {res} |")
    add("")
    add(f"Data: {data_note}. MB = 10^6 bytes. Ratio = ioprobe / fio.")
    add("")
    add("Commands (DATA is the scratch directory; ioprobe also gets `--json FILE`, fio")
    add(f"`--output-format=json --output=FILE`; ioprobe's `--time-budget {time_budget:g}` lets its")
    add("sweep finish, the CPU stage it runs afterwards is not compared):")
    add("")
    add("```")
    for c in comps:
        add(f"# {c.title}")
        if c.fio_warmup is not None:
            add(f"{shlex.join(c.fio_warmup)}   # warm-up, untimed")
        add(shlex.join(c.fio_cmd))
        add(shlex.join(c.ioprobe_cmd))
    add("```")
    add("")
    add("`small-cold.fio` (`small-warm.fio` is the same with `invalidate=0`):")
    add("")
    add("```ini")
    add(job_file.rstrip("\n"))
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", help="parent of the scratch directory (default: system temp)")
    ap.add_argument("--repeats", type=int, default=3, help="fio/ioprobe pairs per comparison")
    ap.add_argument("--out", help="also write the markdown report to this file")
    ap.add_argument(
        "--time-budget", type=float, default=30.0, help="ioprobe --time-budget (s), default 30"
    )
    ap.add_argument("--no-warm", action="store_true", help="skip the warm (page-cached) figures")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    fio = ensure_fio()
    ioprobe = ioprobe_command()
    parent = args.workdir
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="ioprobe-bench-", dir=parent))
    try:
        log(f"scratch directory {root}")
        small, big = build_data(root)
        scratch = root / "results"
        scratch.mkdir()
        jobs: dict[str, Path] = {}
        for cache, inv in (("cold", 1), ("warm", 0)):
            text = SMALL_JOB.format(invalidate=inv) + "".join(
                f"[j{d}]\nopendir={small / f'p{d}'}\n" for d in range(SMALL_DIRS)
            )
            jobs[cache] = root / f"small-{cache}.fio"
            jobs[cache].write_text(text)
        job_file_shown = SMALL_JOB.format(invalidate=1) + "".join(
            f"[j{d}]\nopendir=DATA/small/p{d}\n" for d in range(SMALL_DIRS)
        )

        def big_fio(invalidate: int) -> list[str]:
            return [
                fio,
                "--name=b",
                f"--filename={big}",
                "--rw=read",
                "--bs=1M",
                "--ioengine=psync",
                f"--invalidate={invalidate}",
            ]

        def probe(target: Path, cache: str) -> list[str]:
            return [
                *ioprobe,
                "probe",
                str(target),
                f"--{cache}",
                "--loader",
                "raw",
                "--time-budget",
                f"{args.time_budget:g}",
                "-q",
            ]

        comps = [
            Comparison(
                "small-cold",
                "(a) 1,500 x 128 KiB, cold",
                "cold",
                [fio, str(jobs["cold"])],
                probe(small, "cold"),
            ),
            Comparison(
                "big-cold",
                "(b) 2 GiB file, cold",
                "cold",
                big_fio(1),
                probe(big, "cold"),
            ),
        ]
        if not args.no_warm:
            comps += [
                Comparison(
                    "small-warm",
                    "(a) 1,500 x 128 KiB, warm",
                    "warm",
                    [fio, str(jobs["warm"])],
                    probe(small, "warm"),
                    fio_warmup=[fio, str(jobs["warm"])],
                ),
                Comparison(
                    "big-warm",
                    "(b) 2 GiB file, warm",
                    "warm",
                    big_fio(0),
                    probe(big, "warm"),
                    fio_warmup=big_fio(0),
                ),
            ]
        for comp in comps:
            log(f"{comp.title}: {args.repeats} pairs")
            run_comparison(comp, args.repeats, scratch)

        facts = machine_facts(ioprobe, root)
        versions = tool_versions(fio, ioprobe)
        for comp in comps:
            comp.fio_cmd = _portable(comp.fio_cmd, root, ioprobe, fio)
            comp.ioprobe_cmd = _portable(comp.ioprobe_cmd, root, ioprobe, fio)
            if comp.fio_warmup is not None:
                comp.fio_warmup = _portable(comp.fio_warmup, root, ioprobe, fio)
        report = render(
            comps,
            date=date,
            elapsed_s=time.perf_counter() - started,
            facts=facts,
            versions=versions,
            data_note=(
                f"{SMALL_DIRS * SMALL_PER_DIR:,} files of {SMALL_SIZE // 1024} KiB of random "
                f"bytes in DATA/small/p0..p{SMALL_DIRS - 1}, one {BIG_SIZE >> 30} GiB file "
                "DATA/big.bin, written and fsync-ed by the script"
            ),
            job_file=job_file_shown,
            repeats=args.repeats,
            time_budget=args.time_budget,
        )
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
        log(f"removed {root}")

    sys.stdout.write(report)
    if args.out:
        Path(args.out).write_text(report)
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

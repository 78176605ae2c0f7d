"""The device limit vs fio: ioprobe's direct-read sweep against ``fio --ioengine=io_uring
--direct=1`` on the same files, each side at its best over queue depths 1-64.

For each data set, (a) one 1 GiB file and (b) 1,500 files of 128 KiB, and each block size the
pass reads there (4 KiB, and 1 MiB or 128 KiB: ``device_limit.blocks_for``), a pair is one fio
sweep (``--rw=randread`` at iodepth 1, 2, 4, ... 64, ``--runtime`` per depth) and one
``device_limit.measure_device`` sweep of the same files with the same time per depth,
interleaved depth by depth, the side that goes first alternating by pair.
The ranked figure is ioprobe's best over fio's best, per pair; the median over the pairs.
Goal: within 5% (0.95-1.05).

    python tests/benchmarks/bench_device_limit.py [--workdir DIR] [--pairs 3] [--seconds 1]

fio comes from the Debian package (``apt-get install -y fio``, done here where it is
missing). The data are written into a temporary directory under --workdir (a real disk:
tmpfs refuses O_DIRECT), removed at the end, on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.device_limit import DEPTHS, blocks_for, measure_device


def _fio(where: str, block: int, depth: int, seconds: float) -> float:
    """fio's bytes/s at one depth: one file by name, a folder of them with --opendir."""
    out = subprocess.run(
        [
            "fio",
            "--name=dl",
            where,
            "--rw=randread",
            f"--bs={block}",
            "--ioengine=io_uring",
            "--direct=1",
            f"--iodepth={depth}",
            "--file_service_type=random",
            f"--runtime={seconds:g}",
            "--time_based",
            "--output-format=json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(out[out.index("{") :])["jobs"][0]["read"]["bw_bytes"])


def _ioprobe(files: list[Path], block: int, depth: int, seconds: float) -> tuple[float, str]:
    entries = [FileEntry(str(f), f.stat().st_size) for f in files]
    dev = measure_device(entries, seconds, blocks=[block], depths=[depth], plateau=False)
    return dev.sweep[0].read_bytes_per_s, dev.engine


def _pair(
    files: list[Path], block: int, seconds: float, flip: bool
) -> tuple[tuple[float, int], tuple[float, int], str]:
    """One sweep of each side, interleaved depth by depth (the first to run alternating by
    pair): this virtio disk's rate drifts by tens of percent within seconds, and two sweeps
    run one after the other would compare two moments, not two readers."""
    where = f"--filename={files[0]}" if len(files) == 1 else f"--opendir={files[0].parent}"
    fio_best, io_best, engine = (0.0, 0), (0.0, 0), ""
    for depth in DEPTHS:
        sides = ["fio", "io"] if flip else ["io", "fio"]
        for side in sides:
            if side == "fio":
                fio_best = max(fio_best, (_fio(where, block, depth, seconds), depth))
            else:
                rate, engine = _ioprobe(files, block, depth, seconds)
                io_best = max(io_best, (rate, depth))
    return fio_best, io_best, engine


def _write(work: Path) -> dict[str, list[Path]]:
    big = work / "big.bin"
    with open(big, "wb") as fh:
        for _ in range(1024):
            fh.write(os.urandom(1 << 20))
    small = work / "small"
    small.mkdir()
    for i in range(1500):
        (small / f"f{i:04d}.bin").write_bytes(os.urandom(128 * 1024))
    os.sync()
    return {"1 GiB file": [big], "1,500 x 128 KiB": sorted(small.iterdir())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=os.getcwd())
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="per depth, each side")
    args = ap.parse_args()
    if shutil.which("fio") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], check=True)
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout
    work = Path(tempfile.mkdtemp(prefix="ioprobe-bench-dl-", dir=args.workdir))
    began = time.monotonic()
    try:
        sets = _write(work)
        print(f"fio {fio_version.strip()}, {args.pairs} pairs, {args.seconds:g} s per depth")
        print()
        print(
            "| data | block | fio best (depth) | ioprobe best (depth) | ratio per pair | median |"
        )
        print("|---|---|---|---|---|---:|")
        for name, files in sets.items():
            for block in blocks_for([f.stat().st_size for f in files]):
                ratios, fio_runs, io_runs = [], [], []
                for k in range(args.pairs):
                    (fio_rate, fio_depth), (io_rate, io_depth), engine = _pair(
                        files, block, args.seconds, flip=k % 2 == 1
                    )
                    ratios.append(io_rate / fio_rate)
                    fio_runs.append(f"{fio_rate / 1e6:,.0f} MB/s ({fio_depth})")
                    io_runs.append(f"{io_rate / 1e6:,.0f} MB/s ({io_depth}, {engine})")
                print(
                    f"| {name} | {block // 1024} KiB | {'; '.join(fio_runs)} | "
                    f"{'; '.join(io_runs)} | {', '.join(f'{r:.3f}' for r in ratios)} | "
                    f"{statistics.median(ratios):.3f} |",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntook {(time.monotonic() - began) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

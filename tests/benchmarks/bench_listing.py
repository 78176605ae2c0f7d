"""Listing a huge tree: the probe's listing time, peak memory and file count on trees of N
files (1-byte files, 1,000 to a folder, folders 100 to a parent), against the truth built.

    python tests/benchmarks/bench_listing.py --files 5000000 [--workdir DIR] [--budget S ...]
        [--src DIR ...]

Each ``--src`` (a checkout of ioprobe; default this one) at each ``--budget`` runs on the
same tree, one after the other, each ``ioprobe probe TREE --time-budget B --cold --loader raw --json F`` in a
process of its own whose peak RSS is read from ``wait4``. The tree is written under
--workdir and removed at the end (on Ctrl-C too); writing 5 million files takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PER_FOLDER = 1000
FOLDERS_PER_PARENT = 100


def _write(root: Path, files: int) -> None:
    made = 0
    parent = folder = 0
    while made < files:
        d = root / f"p{parent:04d}" / f"d{folder:03d}"
        d.mkdir(parents=True)
        n = min(PER_FOLDER, files - made)
        fd = os.open(d, os.O_RDONLY)
        try:
            for i in range(n):
                # relative to the folder's descriptor: no path lookup per file
                f = os.open(f"f{i:04d}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(f, b"x")
                os.close(f)
        finally:
            os.close(fd)
        made += n
        folder += 1
        if folder == FOLDERS_PER_PARENT:
            parent, folder = parent + 1, 0
        if made % 500_000 < PER_FOLDER:
            print(f"  written {made:,}", file=sys.stderr, flush=True)


def _probe(src: Path, tree: Path, budget: float, out: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "ioprobe", "probe", str(tree), "--time-budget", f"{budget:g}"]
    cmd += ["--cold", "--loader", "raw", "-q", "--json", str(out)]
    t0 = time.monotonic()
    # run from the tree's parent: ``python -m`` puts the working directory first on the path,
    # which would import the checkout the benchmark runs from instead of ``src``
    proc = subprocess.Popen(
        cmd, env=env, cwd=tree.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.monotonic() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    result: dict[str, object] = {"took_s": took, "rss_mb": usage.ru_maxrss / 1024}
    result["rc"] = os.waitstatus_to_exitcode(status)
    if result["rc"] != 0:
        result["error"] = err.strip().splitlines()[-1:] or [""]
        return result
    rec = json.loads(out.read_text())
    ds = rec["dataset"]
    result |= {k: ds.get(k) for k in ("files", "files_listed", "files_error", "files_at_least")}
    result["listing_truncated"] = ds.get("listing_truncated")
    result["sizes_estimated"] = ds.get("sizes_estimated")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=5_000_000)
    ap.add_argument("--workdir", default=str(REPO.parent))
    ap.add_argument("--budget", type=float, action="append", help="seconds (default 60)")
    ap.add_argument("--src", action="append", help="an ioprobe checkout (default: this one)")
    ap.add_argument(
        "--tree", help="a tree this benchmark wrote before (kept), of --files files: reused"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ioprobe-bench-listing-", dir=args.workdir))
    try:
        tree = Path(args.tree) if args.tree else work / "tree"
        if not args.tree:
            t0 = time.monotonic()
            _write(tree, args.files)
            print(f"{args.files:,} files written in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        print(
            f"| checkout | budget | files (truth {args.files:,}) | listed | error | took | peak RSS |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        runs = [(src, b) for src in args.src or [str(REPO)] for b in args.budget or [60.0]]
        for src, budget in runs:
            r = _probe(Path(src), tree, budget, work / "run.json")
            if r["rc"] != 0:
                print(f"| {src} | {budget:g} s | rc {r['rc']}: {r['error']} | | | {r['took_s']:.1f} s | "
                      f"{r['rss_mb']:.0f} MB |", flush=True)  # fmt: skip
                continue
            files = int(str(r["files"]))
            err = r["files_error"]
            rel = f"± {int(str(err)) / files:.1%}" if err is not None else "-"
            listed = f"{r['files_listed']:,}" if r["files_listed"] is not None else "all"
            print(
                f"| {src} | {budget:g} s | {files:,} ({files / args.files - 1:+.1%}) | {listed} | {rel} | "
                f"{r['took_s']:.1f} s | {r['rss_mb']:.0f} MB |",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

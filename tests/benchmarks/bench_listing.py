"""Listing a huge tree or bucket: the probe's listing time, peak memory and file count on
trees of N files (1-byte files, 1,000 to a folder, folders 100 to a parent), or with
``--bucket`` on a moto S3 bucket of N keys (500 to 1,500 to a folder) on 127.0.0.1, against the
truth built.

    python tests/benchmarks/bench_listing.py --files 5000000 [--workdir DIR] [--budget S ...]
        [--src DIR ...] [--bucket]

Each ``--src`` (a checkout of ioprobe; default this one) at each ``--budget`` runs on the
same tree, one after the other, each ``ioprobe probe TREE --time-budget B --cold --loader raw --json F`` in a
process of its own whose peak RSS is read from ``wait4``. The tree is written under
--workdir and removed at the end (on Ctrl-C too); writing 5 million files takes minutes.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _probe(
    src: Path, target: str, cwd: Path, budget: float, out: Path, env: dict[str, str]
) -> dict[str, object]:
    env = {**os.environ, **env, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "ioprobe", "probe", target, "--time-budget", f"{budget:g}"]
    cmd += ["--cold", "--loader", "raw", "-q", "--json", str(out)]
    t0 = time.monotonic()
    # run from outside the checkout: ``python -m`` puts the working directory first on the
    # path, which would import the checkout the benchmark runs from instead of ``src``
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
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
    ap.add_argument("--bucket", action="store_true", help="a moto S3 bucket, not a tree")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ioprobe-bench-listing-", dir=args.workdir))
    stack = contextlib.ExitStack()
    try:
        env: dict[str, str] = {}
        if args.bucket:
            target, env = _bucket(stack, args.files)
        else:
            tree = Path(args.tree) if args.tree else work / "tree"
            target = str(tree)
            if not args.tree:
                t0 = time.monotonic()
                _write(tree, args.files)
                took = time.monotonic() - t0
                print(f"{args.files:,} files written in {took:.0f} s", file=sys.stderr)
        print(
            f"| checkout | budget | files (truth {args.files:,}) | listed | error | took | peak RSS |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        runs = [(src, b) for src in args.src or [str(REPO)] for b in args.budget or [60.0]]
        for src, budget in runs:
            r = _probe(Path(src), target, work, budget, work / "run.json", env)
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
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


_SERVE = """
import random, sys
sys.path.insert(0, sys.argv[1])
from tests.support.servers import S3Server

def keys(n):
    rng, folder, made = random.Random(0), 0, 0
    while made < n:
        size = min(rng.randrange(500, 1500), n - made)  # folders of uneven size
        yield from (f"d{folder:05d}/f{made + i:08d}" for i in range(size))
        folder, made = folder + 1, made + size

with S3Server() as s3:
    s3.put_many("big", keys(int(sys.argv[2])))
    print(s3.endpoint_url, flush=True)
    sys.stdin.read()  # until the benchmark closes it
"""


def _bucket(stack: contextlib.ExitStack, keys: int) -> tuple[str, dict[str, str]]:
    """A moto bucket of ``keys`` 1-byte objects, 500 to 1,500 to a folder, served by a process of
    its own (a probe forked from a process holding the bucket would count its memory in its
    peak RSS) for as long as ``stack`` is open: the target and the environment that
    reaches it."""
    sys.path.insert(0, str(REPO))
    from tests.support.servers import S3Server

    t0 = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(REPO), str(keys)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    stack.callback(server.wait, 30)
    stack.callback(server.stdin.close)  # type: ignore[union-attr]
    endpoint = server.stdout.readline().strip()  # type: ignore[union-attr]
    print(f"{keys:,} keys put in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    reach = S3Server()
    reach._endpoint = endpoint  # the variables that reach the other process's server
    return "s3://big", reach.env()


if __name__ == "__main__":
    sys.exit(main())

"""The distributed probe against a truth it cannot see: two torchrun ranks on 127.0.0.1 read
an HTTP server throttled to RATE bytes/s in total (the aggregate must find RATE at every
client count) and a local directory (the aggregate over the shared span must match the
ranks' own rates summed, which it does only when the barrier started them together).

    .venv/bin/python -m tests.benchmarks.bench_distributed [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.servers import ThrottledHTTPServer, make_files

REPO = Path(__file__).resolve().parents[2]
RATE = 4_000_000


def _probe(target: str, out: Path, budget: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["-m", "ioprobe", "probe", target, "--loader", "raw", "-q"]
    cmd += ["--time-budget", str(budget), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-4000:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_files(root / "http", 200, 100_000, seed=1, subdirs=2)
        make_files(root / "local", 2000, 128_000, seed=2, subdirs=4)
        http: list[tuple[float, float]] = []
        local: list[float] = []
        for _ in range(args.repeats):
            with ThrottledHTTPServer(root / "http", rate_bytes_per_s=RATE) as srv:
                rec = _probe(srv.url, root / "h.json", 16)
            one, two = rec["distributed"]["curve"]
            http.append((one["read_bytes_per_s"] / RATE, two["read_bytes_per_s"] / RATE))
            rec = _probe(str(root / "local"), root / "l.json", 10)
            both = rec["distributed"]["curve"][-1]
            local.append(both["read_bytes_per_s"] / both["rank_sum_bytes_per_s"])
        for i, ((a, b), c) in enumerate(zip(http, local, strict=True)):
            print(
                f"run {i + 1}: http 1 client {a:.3f}x R, 2 clients {b:.3f}x R; local aggregate/rank sum {c:.3f}"
            )
        print(
            f"median: http 1 client {statistics.median(a for a, _ in http):.3f}x R, "
            f"2 clients {statistics.median(b for _, b in http):.3f}x R; "
            f"local aggregate/rank sum {statistics.median(local):.3f}"
        )


if __name__ == "__main__":
    main()

"""What watching a DALI iterator costs: plain vs watched, side by side, in fresh processes.

    python tests/benchmarks/bench_dali.py [--repeats 5] [--root IMAGE_FOLDER]

Two pipelines over the same JPEGs (the built-in sample unless --root): ``decode`` (read,
decode, resize to 224: CPU-bound, a few ms per image) and ``read`` (the file reader alone: tens
of thousands of samples/s, so per-batch and per-range costs show). Each run is a new process:
"plain" runs with IOPROBE_NVTX=0 and no watch, "watched" with the NVTX injection library and
``ioprobe.watch``. Runs alternate, and the result is the median of watched/plain rate ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
watched = sys.argv[1] == "watched"
if watched:
    import ioprobe
    ioprobe.time_dali_operators()
from nvidia.dali import fn, pipeline_def
from nvidia.dali.plugin.pytorch import DALIGenericIterator

@pipeline_def(batch_size=32, num_threads=2, device_id=None)
def pipe(root, decode):
    jpegs, labels = fn.readers.file(file_root=root, name="Reader")
    if decode:
        return fn.resize(fn.decoders.image(jpegs, device="cpu"), resize_x=224, resize_y=224), labels
    return fn.shapes(jpegs), labels  # encoded files differ in length: hand over their sizes

it = DALIGenericIterator(pipe(sys.argv[2], sys.argv[3] == "decode"), ["x", "y"],
                         reader_name="Reader", auto_reset=True)
if watched:
    it = ioprobe.watch(it)
epochs = int(sys.argv[4])
for b in it:  # warm-up epoch: pools, page cache
    pass
n, t = 0, time.perf_counter()
for _ in range(epochs):
    for b in it:
        n += b[0]["y"].shape[0]
rate = n / (time.perf_counter() - t)
timing = it.run.dali.timing if watched else "off"
print(json.dumps({"rate": rate, "timing": timing}))
"""


def one(kind: str, root: str, pipeline: str, epochs: int) -> dict[str, object]:
    env = dict(os.environ)
    if kind == "plain":
        env["IOPROBE_NVTX"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, root, pipeline, str(epochs)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--root")
    args = ap.parse_args()
    if args.root:
        root = args.root
    else:
        from ioprobe.collect.sample_data import ensure_sample

        root = str(ensure_sample())
    for pipeline, epochs in (("decode", 1), ("read", 10)):
        ratios, plain, watched = [], [], []
        for _ in range(args.repeats):
            a = one("plain", root, pipeline, epochs)
            b = one("watched", root, pipeline, epochs)
            assert b["timing"] == "nvtx", b
            plain.append(float(a["rate"]))  # type: ignore[arg-type]
            watched.append(float(b["rate"]))  # type: ignore[arg-type]
            ratios.append(watched[-1] / plain[-1])
        print(
            f"{pipeline:6s} plain median {statistics.median(plain):10,.0f} samples/s  "
            f"watched median {statistics.median(watched):10,.0f}  "
            f"watched/plain median {statistics.median(ratios):.3f} "
            f"(runs: {', '.join(f'{r:.3f}' for r in ratios)})"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()

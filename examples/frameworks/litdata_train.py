"""litdata: samples written into chunk files by litdata's own optimize(), streamed back by its
StreamingDataset (an IterableDataset) through a torch DataLoader whose two workers split the
chunks between them.

  python examples/frameworks/litdata_train.py
  ioprobe run --json /tmp/litdata.json -- python examples/frameworks/litdata_train.py
  python examples/frameworks/litdata_train.py --watch   # ioprobe.watch on the loader
  python examples/frameworks/litdata_train.py --burn-ms 5   # each sample burns 5 ms of CPU
  python examples/frameworks/litdata_train.py --streaming-loader   # litdata's StreamingDataLoader

litdata 0.2.76 reads the chunks of a local directory in place through memory maps (with
LITDATA_POSIX_FAST=0 too, but then one chunk at a time, unmapped once read). optimize() sets the
process's multiprocessing start method to spawn, so the DataLoader's workers are spawned.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

try:
    import litdata
except ImportError:
    print("litdata_train.py needs litdata: pip install litdata", file=sys.stderr)
    sys.exit(2)

SAMPLES = 1024


def make_sample(i: int) -> dict[str, Any]:
    # optimize() may call this in any order: each sample's values come from its own index.
    x = np.random.default_rng(i).standard_normal(4096, dtype=np.float32)
    return {"x": x, "y": i % 4}


class Burn:
    """A decode step that costs `ms` of CPU per sample, spent in the worker that loads it. A
    class, not a closure: optimize() sets the start method to spawn for the whole process, so
    the DataLoader's workers are spawned too and the dataset must pickle."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        end = time.thread_time() + self.ms / 1000
        while time.thread_time() < end:
            pass
        return sample


def main(watch: bool, burn_ms: float, streaming_loader: bool = False) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-litdata-"))
    try:
        out = root / "optimized"
        litdata.optimize(
            fn=make_sample,
            inputs=list(range(SAMPLES)),
            output_dir=str(out),
            chunk_size=64,
            num_workers=1,
            verbose=False,
        )
        torch.manual_seed(0)
        ds = litdata.StreamingDataset(
            str(out),
            cache_dir=str(root / "cache"),
            shuffle=True,
            transform=Burn(burn_ms) if burn_ms else None,
        )
        # StreamingDataLoader is a DataLoader subclass with its own __iter__ (it sets the
        # dataset's epoch, so a shuffled dataset reshuffles each epoch)
        make = litdata.StreamingDataLoader if streaming_loader else DataLoader
        loader: Any = make(ds, batch_size=32, num_workers=2)
        if watch:
            import ioprobe

            loader = ioprobe.watch(loader)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            batches = 0
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
            print(f"epoch {epoch}: {batches} batches, loss {loss.item():.4f}")
        if watch:
            loader.run.save("litdata_watch.json")
            print("record: litdata_watch.json")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", action="store_true", help="ioprobe.watch(loader)")
    parser.add_argument("--burn-ms", type=float, default=0.0, help="CPU ms burnt per sample")
    parser.add_argument(
        "--streaming-loader", action="store_true", help="litdata's StreamingDataLoader"
    )
    args = parser.parse_args()
    main(args.watch, args.burn_ms, args.streaming_loader)

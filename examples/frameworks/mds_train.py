"""mosaicml-streaming (MDS): samples written into shard files by its own MDSWriter, streamed
back by its StreamingDataset (an IterableDataset) through a torch DataLoader whose two workers
split the shards between them.

  python examples/frameworks/mds_train.py
  ioprobe run --json /tmp/mds.json -- python examples/frameworks/mds_train.py
  python examples/frameworks/mds_train.py --watch   # ioprobe.watch on the loader
  python examples/frameworks/mds_train.py --burn-ms 5   # each sample burns 5 ms of CPU

mosaicml-streaming 0.13.0 imports transformers and torchvision at `import streaming`: it needs
a torchvision that loads beside the installed torch.
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
    from streaming import MDSWriter, StreamingDataset
except (ImportError, RuntimeError) as e:
    # RuntimeError: a torchvision built for another torch fails as `import streaming` loads it
    print(f"mds_train.py needs mosaicml-streaming, which failed to import: {e}", file=sys.stderr)
    sys.exit(2)

SAMPLES = 1024


def write_shards(root: Path) -> None:
    rng = np.random.default_rng(0)
    columns = {"x": "ndarray:float32:4096", "y": "int"}
    # a 1 MiB limit puts 63 samples of 16 kB in a shard, as the other chunked examples do
    with MDSWriter(out=str(root), columns=columns, size_limit=1 << 20) as out:
        for i in range(SAMPLES):
            out.write({"x": rng.standard_normal(4096, dtype=np.float32), "y": i % 4})


class Burning(StreamingDataset):
    """A StreamingDataset whose every sample costs `burn_ms` of CPU in the worker loading it,
    like a decode step."""

    def __init__(self, burn_ms: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.burn_ms = burn_ms

    def __getitem__(self, i: int) -> Any:
        sample = super().__getitem__(i)
        end = time.thread_time() + self.burn_ms / 1000
        while time.thread_time() < end:
            pass
        return sample


def main(watch: bool, burn_ms: float) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-mds-"))
    try:
        write_shards(root / "mds")
        torch.manual_seed(0)
        ds = Burning(burn_ms, local=str(root / "mds"), batch_size=32, shuffle=True)
        loader: Any = DataLoader(ds, batch_size=32, num_workers=2)
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
            loader.run.save("mds_watch.json")
            print("record: mds_watch.json")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", action="store_true", help="ioprobe.watch(loader)")
    parser.add_argument("--burn-ms", type=float, default=0.0, help="CPU ms burnt per sample")
    args = parser.parse_args()
    main(args.watch, args.burn_ms)

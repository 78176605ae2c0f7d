"""WebDataset: samples packed into tar shards, streamed by an IterableDataset that the
DataLoader's workers split shard by shard.

  python examples/frameworks/webdataset_train.py
  ioprobe run --json /tmp/wds.json -- python examples/frameworks/webdataset_train.py
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from torch.utils.data import DataLoader


def write_shards(root: Path, shards: int = 4, per_shard: int = 128) -> list[str]:
    rng = np.random.default_rng(0)
    urls = []
    for s in range(shards):
        url = str(root / f"shard-{s:03d}.tar")
        with wds.TarWriter(url) as sink:
            for i in range(per_shard):
                buf = io.BytesIO()
                np.save(buf, rng.standard_normal(4096, dtype=np.float32))
                key = s * per_shard + i
                sink.write({"__key__": f"{key:06d}", "npy": buf.getvalue(), "cls": key % 4})
        urls.append(url)
    return urls


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-wds-"))
    try:
        urls = write_shards(root)
        torch.manual_seed(0)
        ds = wds.WebDataset(urls, shardshuffle=False).decode().to_tuple("npy", "cls")
        loader = DataLoader(ds, batch_size=32, num_workers=2)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            batches = 0
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
            print(f"epoch {epoch}: {batches} batches, loss {loss.item():.4f}")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()

"""A chunked streaming format, written here in a few lines: samples packed 64 to a chunk file
with an index, an IterableDataset that hands whole chunks to workers, reads each chunk in
one go and yields its samples shuffled (the pattern of MDS and litdata shards).

  python examples/frameworks/chunked_stream_train.py
  ioprobe run --json /tmp/chunked.json -- python examples/frameworks/chunked_stream_train.py
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

PER_CHUNK = 64


def write_chunks(root: Path, n: int = 512) -> None:
    rng = np.random.default_rng(0)
    names = []
    for c in range(n // PER_CHUNK):
        x = rng.standard_normal((PER_CHUNK, 4096), dtype=np.float32)
        y = np.arange(c * PER_CHUNK, (c + 1) * PER_CHUNK) % 4
        name = f"chunk-{c:05d}.npz"
        np.savez(root / name, x=x, y=y)
        names.append(name)
    (root / "index.json").write_text(json.dumps({"chunks": names, "per_chunk": PER_CHUNK}))


class Chunks(IterableDataset[tuple[torch.Tensor, int]]):
    def __init__(self, root: Path, seed: int = 0) -> None:
        self.root = root
        self.chunks = json.loads((root / "index.json").read_text())["chunks"]
        self.seed = seed
        self.epoch = 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = np.random.default_rng((self.seed, self.epoch, wid))
        for name in self.chunks[wid::nw]:  # each worker streams its own chunks
            with np.load(io.BytesIO((self.root / name).read_bytes())) as chunk:
                x, y = chunk["x"], chunk["y"]
            for i in rng.permutation(PER_CHUNK):
                yield torch.from_numpy(x[i]), int(y[i])


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-chunked-"))
    try:
        write_chunks(root)
        torch.manual_seed(0)
        ds = Chunks(root)
        loader = DataLoader(ds, batch_size=32, num_workers=2)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            ds.epoch = epoch  # workers copy the dataset at each epoch's start
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

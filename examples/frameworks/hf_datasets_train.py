"""Hugging Face datasets: a map-style Dataset saved to disk and memory-mapped back (Arrow), or
with --streaming an IterableDataset over Parquet shards, each read by a DataLoader.

  python examples/frameworks/hf_datasets_train.py [--streaming]
  ioprobe run --json /tmp/hf.json -- python examples/frameworks/hf_datasets_train.py [--streaming]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # everything here is local files

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader


def build(root: Path, streaming: bool) -> torch.utils.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 4096), dtype=np.float32)
    table = datasets.Dataset.from_dict({"x": list(x), "y": [i % 4 for i in range(512)]})
    if streaming:  # 4 Parquet shards: DataLoader workers split the shards between them
        for k in range(4):
            table.shard(4, k, contiguous=True).to_parquet(str(root / f"part-{k}.parquet"))
        files = sorted(str(p) for p in root.glob("*.parquet"))
        stream = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        return stream.with_format("torch")
    table.save_to_disk(str(root / "arrow"))
    return datasets.load_from_disk(str(root / "arrow")).with_format("torch")


def main(streaming: bool) -> None:
    datasets.disable_progress_bars()
    root = Path(tempfile.mkdtemp(prefix="fw-hf-"))
    try:
        torch.manual_seed(0)
        ds = build(root, streaming)
        shuffle = None if streaming else True  # an iterable dataset keeps its own order
        loader = DataLoader(ds, batch_size=32, shuffle=shuffle, num_workers=2)
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
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main("--streaming" in sys.argv[1:])

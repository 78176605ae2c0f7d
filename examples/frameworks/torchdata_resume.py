"""torchdata: a StatefulDataLoader checkpointed mid-epoch and resumed in a new loader, which
must deliver the batches the first one had not reached yet.

  python examples/frameworks/torchdata_resume.py
  ioprobe run --json /tmp/torchdata.json -- python examples/frameworks/torchdata_resume.py
  python examples/frameworks/torchdata_resume.py --watch   # ioprobe.watch on both loaders
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


class NpyFiles(Dataset[tuple[torch.Tensor, int]]):
    """One file per sample, read from disk on every access; the label is the sample's index."""

    def __init__(self, root: Path) -> None:
        self.paths = sorted(root.glob("*.npy"))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.load(self.paths[i])), i


def loader_for(root: Path, watch: bool) -> Any:
    gen = torch.Generator().manual_seed(0)
    loader = StatefulDataLoader(
        NpyFiles(root), batch_size=32, shuffle=True, num_workers=2, generator=gen
    )
    if watch:
        import ioprobe

        return ioprobe.watch(loader)
    return loader


def main(watch: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-torchdata-"))
    try:
        rng = np.random.default_rng(0)
        for i in range(512):
            np.save(root / f"{i:05d}.npy", rng.standard_normal(4096, dtype=np.float32))
        first = loader_for(root, watch)
        for n, (_x, idx) in enumerate(first):
            if n == 5:  # a checkpoint after 5 batches, then the job "dies"
                state = first.state_dict()
                print(f"checkpoint after 5 batches; batch 5 starts with samples {idx[:4].tolist()}")
                break
        resumed = loader_for(root, watch)
        resumed.load_state_dict(state)
        seen = [idx for _x, idx in resumed]
        print(f"resumed: {len(seen)} batches, the first starts with {seen[0][:4].tolist()}")
        print(f"samples after the checkpoint: {sum(len(i) for i in seen)}")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main("--watch" in sys.argv[1:])

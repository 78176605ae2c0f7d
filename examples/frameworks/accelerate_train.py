"""Accelerate: prepare() wraps the DataLoader in a DataLoaderShard that moves each batch to the
accelerator's device; gradients are accumulated over 3 batches.

  python examples/frameworks/accelerate_train.py
  ioprobe run --json /tmp/accelerate.json -- python examples/frameworks/accelerate_train.py
  python examples/frameworks/accelerate_train.py --watch   # ioprobe.watch on the prepared loader

ioprobe.watch(prepared loader) keeps the DataLoaderShard's own __iter__ (device placement, the
end of the loader that forces the last accumulated step) and watches the DataLoader inside it;
watch after prepare(), which passes anything that is not a DataLoader through unprepared.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, Dataset


class NpyFiles(Dataset[tuple[torch.Tensor, int]]):
    """One file per sample, read from disk on every access."""

    def __init__(self, root: Path) -> None:
        self.paths = sorted(root.glob("*.npy"))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.load(self.paths[i])), i % 4


def main(watch: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-accelerate-"))
    try:
        rng = np.random.default_rng(0)
        for i in range(512):
            np.save(root / f"{i:05d}.npy", rng.standard_normal(4096, dtype=np.float32))
        set_seed(0)
        accelerator = Accelerator(gradient_accumulation_steps=3)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(NpyFiles(root), batch_size=32, shuffle=True, num_workers=2)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        if watch:
            import ioprobe

            loader = ioprobe.watch(loader)
        for epoch in range(2):
            batches = syncs = 0
            for x, y in loader:
                with accelerator.accumulate(model):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    accelerator.backward(loss)
                    opt.step()
                    opt.zero_grad()
                batches += 1
                syncs += accelerator.sync_gradients
            print(
                f"epoch {epoch}: {batches} batches on {x.device}, {syncs} optimizer steps, "
                f"loss {loss.item():.4f}"
            )
        if watch:
            loader.run.save("accelerate_watch.json")
            print("record: accelerate_watch.json")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main("--watch" in sys.argv[1:])

"""Lightning: a Trainer fits a small model on .npy files read by a DataLoader it is given.

python examples/frameworks/lightning_train.py
ioprobe run --json /tmp/lightning.json -- python examples/frameworks/lightning_train.py
python examples/frameworks/lightning_train.py --watch   # ioprobe.watch on the loader instead
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class NpyFiles(Dataset[tuple[torch.Tensor, int]]):
    """One file per sample, read from disk on every access."""

    def __init__(self, root: Path) -> None:
        self.paths = sorted(root.glob("*.npy"))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.load(self.paths[i])), i % 4


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4096, 4)
        self.batches = 0

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        self.batches += 1
        self.last_loss = torch.nn.functional.cross_entropy(self.net(x), y)
        return self.last_loss

    def on_train_epoch_end(self) -> None:
        print(f"epoch {self.current_epoch}: {self.batches} batches, loss {self.last_loss:.4f}")
        self.batches = 0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(watch: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-lightning-"))
    try:
        rng = np.random.default_rng(0)
        for i in range(512):
            np.save(root / f"{i:05d}.npy", rng.standard_normal(4096, dtype=np.float32))
        L.seed_everything(0, verbose=False)
        loader: object = DataLoader(NpyFiles(root), batch_size=32, shuffle=True, num_workers=2)
        if watch:
            import ioprobe

            loader = ioprobe.watch(loader)
        trainer = L.Trainer(
            max_epochs=2,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Model(), loader)
        if watch:
            loader.run.save("lightning_watch.json")
            print("record: lightning_watch.json")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main("--watch" in sys.argv[1:])

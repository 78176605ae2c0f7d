"""A small training loop watched by ioprobe: one added line, then the verdict.

.venv/bin/python examples/watch_dataloader.py
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.render.terminal import render


class JpegDataset(Dataset[tuple[torch.Tensor, int]]):
    """In-memory JPEGs decoded and resized per sample, as an ImageNet loader does."""

    def __init__(self, n: int = 512) -> None:
        rng = np.random.default_rng(0)
        self.blobs = []
        for _ in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(buf, "JPEG")
            self.blobs.append(buf.getvalue())

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB").resize((224, 224))
        return torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float() / 255, i % 10


def main() -> None:
    # on a GPU the batches are moved for you, their copies and the GPU's idle time timed
    # with CUDA events; without one everything stays on the CPU
    device = "cuda" if torch.cuda.is_available() else None
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 224 * 224, 10))
    model.to(device or "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        JpegDataset(), batch_size=32, shuffle=True, num_workers=2, pin_memory=device is not None
    )
    loader = ioprobe.watch(loader, device=device)  # the one line
    for _epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    if device is not None:
        # how much of the GPU a step fills with its data already there: a forward pass on
        # the last batch, so the model is left as trained (feeds the MPS/MIG advice)
        with torch.no_grad():
            loader.measure_gpu_alone(model, x)
    loader.run.save("watch_run.json")
    print(render(loader.run, findings(loader.run)), end="")
    print("record written to watch_run.json; re-render it with: ioprobe report watch_run.json")


if __name__ == "__main__":
    main()

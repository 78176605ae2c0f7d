"""A real Lightning Trainer fed by a watched DataLoader (``ioprobe.watch`` in the script, and
``ioprobe run`` around an unchanged one) trains as unwatched: the same batches in
``training_step``, the same checkpoint, exit code 0, and one recorded epoch per training
epoch. Run as a module (``python -m tests.integration.watch.test_lightning_real OUT [--watch]``),
this file is the training script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli

# the dev extras install lightning; an image without it collects this module and skips it
L = pytest.importorskip("lightning")

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]

SAMPLES, BATCH, EPOCHS = 40, 4, 3
BATCHES = SAMPLES // BATCH


class Numbered(Dataset[tuple[torch.Tensor, int]]):
    """Sample i is eight copies of i: a batch says which samples it holds."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((8,), float(i)), i % 4


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 4)
        self.seen: list[list[float]] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        self.seen.append(x[:, 0].tolist())
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def fit(checkpoint: Path, watch: bool) -> tuple[list[list[float]], Any]:
    """Train for EPOCHS epochs, save the checkpoint; the batches training_step saw, and the
    loader the Trainer was given."""
    L.seed_everything(0, verbose=False)
    loader: Any = DataLoader(
        Numbered(),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(5),
    )
    if watch:
        loader = ioprobe.watch(loader)
    model = Tiny()
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer.fit(model, loader)
    trainer.save_checkpoint(checkpoint)
    return model.seen, loader


def assert_same_checkpoint(a: Path, b: Path) -> None:
    ca = torch.load(a, weights_only=False)
    cb = torch.load(b, weights_only=False)
    assert (ca["epoch"], ca["global_step"]) == (cb["epoch"], cb["global_step"])
    assert ca["global_step"] == EPOCHS * BATCHES
    assert ca["state_dict"].keys() == cb["state_dict"].keys()
    assert all(torch.equal(ca["state_dict"][k], cb["state_dict"][k]) for k in ca["state_dict"])
    # the optimizer's state too (SGD keeps none but its step settings)
    assert ca["optimizer_states"] == cb["optimizer_states"]


def assert_shuffled_epochs(seen: list[list[float]]) -> None:
    assert len(seen) == EPOCHS * BATCHES
    for e in range(EPOCHS):
        epoch = seen[e * BATCHES : (e + 1) * BATCHES]
        assert sorted(v for b in epoch for v in b) == list(range(SAMPLES))
    assert seen[:BATCHES] != seen[BATCHES : 2 * BATCHES]


def test_a_trainer_given_a_watched_loader_trains_as_unwatched(tmp_path: Path) -> None:
    plain, _ = fit(tmp_path / "plain.ckpt", watch=False)
    seen, loader = fit(tmp_path / "watched.ckpt", watch=True)
    assert_shuffled_epochs(plain)
    assert seen == plain
    assert_same_checkpoint(tmp_path / "watched.ckpt", tmp_path / "plain.ckpt")
    rec = loader.run
    assert rec.watch is not None
    # Lightning calls iter() once to check the loader: that made an empty first epoch before
    assert [(e.samples, e.batches) for e in rec.watch.epochs] == [(SAMPLES, BATCHES)] * EPOCHS
    assert all(e.error is None for e in rec.watch.epochs)


def test_ioprobe_run_around_a_trainer_trains_as_unwatched_and_records_each_epoch(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = (sys.executable, "-m", "tests.integration.watch.test_lightning_real")
    plain = subprocess.run(
        [*script, str(tmp_path / "plain.ckpt")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "run.json"
    watched = run_cli("run", "--json", str(out), "--", *script, str(tmp_path / "watched.ckpt"))
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout) == json.loads(plain.stdout)
    assert_shuffled_epochs(json.loads(plain.stdout))
    assert_same_checkpoint(tmp_path / "watched.ckpt", tmp_path / "plain.ckpt")
    rec = RunRecord.load(out)
    assert rec.watch is not None
    assert [(e.samples, e.batches) for e in rec.watch.epochs] == [(SAMPLES, BATCHES)] * EPOCHS
    assert not (tmp_path / "run.loader2.json").exists()  # one loader, one record


if __name__ == "__main__":
    batches, _ = fit(Path(sys.argv[1]), watch="--watch" in sys.argv[2:])
    print(json.dumps(batches))

"""``ioprobe.watch`` on Accelerate's prepared loader, against the real library: the job gets
the batches, optimizer steps, weights and checkpoints it gets unwatched, and the DataLoader
inside the prepared loader is the one measured."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.errors import BadInputError
from ioprobe.render.facts import verdict
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import render as render_markdown

# the dev extras install accelerate; an image without it collects this module and skips it
pytest.importorskip("accelerate")
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DataLoaderConfiguration, set_seed

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]

SAMPLES, BATCH, ACCUMULATE = 40, 4, 3
BATCHES = SAMPLES // BATCH  # 10 per epoch
# 3 full accumulation rounds, then the loader's end forces a 4th step on the last batch
STEPS_PER_EPOCH = 4


class Numbered(Dataset[tuple[torch.Tensor, int]]):
    """Sample i is eight copies of i: a batch says which samples it holds."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((8,), float(i)), i % 4


def prepare(
    workers: int = 2, persistent: bool = False, **config: Any
) -> tuple[Accelerator, Any, Any, Any]:
    """A fresh Accelerator (its state is process-wide: reset, so each job starts alike) with
    a model, an optimizer and a shuffled loader prepared."""
    AcceleratorState._reset_state(True)
    set_seed(0)
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=ACCUMULATE,
        dataloader_config=DataLoaderConfiguration(**config),
    )
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(
        Numbered(),
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=persistent,
    )
    model, opt, loader = accelerator.prepare(model, opt, loader)
    return accelerator, model, opt, loader


@dataclass
class Trained:
    batches: list[torch.Tensor] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # optimizer steps per epoch
    weights: list[torch.Tensor] = field(default_factory=list)
    loader: Any = None


def train(watch: bool, epochs: int = 2) -> Trained:
    accelerator, model, opt, prepared = prepare()
    loader = ioprobe.watch(prepared) if watch else prepared
    out = Trained(loader=loader)
    for _ in range(epochs):
        steps = 0
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            out.batches.append(x.clone())
            steps += accelerator.sync_gradients
        out.steps.append(steps)
    out.weights = [p.detach().clone() for p in model.parameters()]
    return out


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_watched_prepared_loader_trains_as_unwatched_with_gradient_accumulation() -> None:
    plain = train(watch=False)
    watched = train(watch=True)
    assert plain.steps == [STEPS_PER_EPOCH] * 2
    # a watched copy of the inner DataLoader made 3 steps an epoch: the end of the loader,
    # which forces the last accumulated step, was never signalled
    assert watched.steps == plain.steps
    assert same(watched.batches, plain.batches)
    assert same(watched.weights, plain.weights)
    # each epoch is a permutation of the data set, and the two differ
    firsts = [
        sorted(int(v) for b in watched.batches[e * BATCHES : (e + 1) * BATCHES] for v in b[:, 0])
        for e in (0, 1)
    ]
    assert firsts == [list(range(SAMPLES))] * 2
    assert not torch.equal(watched.batches[0], watched.batches[BATCHES])

    loader, prepared = watched.loader, plain.loader
    assert (len(loader), loader.total_batch_size, loader.device) == (
        len(prepared),
        prepared.total_batch_size,
        prepared.device,
    )
    assert loader.end_of_dataloader and loader.iteration == prepared.iteration == 2
    rec = loader.run
    assert rec.watch is not None
    assert [(e.samples, e.batches) for e in rec.watch.epochs] == [(SAMPLES, BATCHES)] * 2
    assert rec.watch.settings.workers == 2 and rec.watch.settings.batch_size == BATCH


def test_skip_first_batches_resumes_at_the_same_batch_when_watched() -> None:
    def rest(watch: bool) -> tuple[list[torch.Tensor], Any]:
        accelerator, _, _, prepared = prepare()
        skipped = accelerator.skip_first_batches(prepared, 4)
        loader = ioprobe.watch(skipped) if watch else skipped
        return [x.clone() for x, _ in loader], loader

    plain, _ = rest(False)
    watched, loader = rest(True)
    assert len(plain) == BATCHES - 4
    assert same(watched, plain)
    rec = loader.run
    assert rec.watch is not None
    assert [(e.samples, e.batches) for e in rec.watch.epochs] == [(SAMPLES - 4 * BATCH, 6)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_prepared_loader_checkpoints_the_position_reached_and_resumes_as_unwatched(
    workers: int,
) -> None:
    def job(watch: bool, state: Any = None) -> tuple[list[torch.Tensor], Any, list[torch.Tensor]]:
        """Five batches and a checkpoint, then a new loader resumed from ``state`` (or from
        that checkpoint) to the epoch's end."""
        config = {"use_stateful_dataloader": True, "use_seedable_sampler": True}
        _, _, _, prepared = prepare(workers, **config)
        loader = ioprobe.watch(prepared) if watch else prepared
        first = []
        for x, _ in loader:
            first.append(x.clone())
            if len(first) == 5:
                break
        saved = loader.state_dict()
        _, _, _, again = prepare(workers, **config)
        resumed = ioprobe.watch(again) if watch else again
        resumed.load_state_dict(saved if state is None else state)
        return first, saved, [x.clone() for x, _ in resumed]

    plain_first, plain_state, plain_rest = job(False)
    first, state, rest = job(True)
    # the watched loader saved 0 batches yielded before: resuming replayed other samples
    yielded = state["_snapshot"]["_snapshot_step"] if workers else state["_num_yielded"]
    assert yielded == 5
    assert state == plain_state  # the worker seed included
    assert same(first, plain_first)
    assert same(rest, plain_rest) and len(rest) == BATCHES - 5
    _, _, from_plain = job(True, plain_state)
    assert same(from_plain, plain_rest)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_stateful_prepared_loader_whose_first_pass_began_in_prepare_trains_as_unwatched(
    persistent: bool,
) -> None:
    """With workers and a shuffled sampler that keeps no state, the pass Accelerate began in
    prepare() has drawn an order no new pass can draw again: the watched loader iterates that
    very pass, so every epoch is the same as unwatched, and its record says which epochs'
    workers timed nothing (they were started before the watch) and measures the rest."""

    def epochs(watch: bool) -> tuple[list[torch.Tensor], Any]:
        _, _, _, prepared = prepare(2, persistent, use_stateful_dataloader=True)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            loader = ioprobe.watch(prepared) if watch else prepared
        ours = [w for w in seen if "ioprobe" in str(w.message)]
        # said up front only where no epoch will be timed
        assert len(ours) == (watch and persistent)
        if ours:
            assert "persist" in str(ours[0].message) and ours[0].filename == __file__
        return [x.clone() for _ in range(2) for x, _ in loader], loader

    plain, _ = epochs(False)
    watched, loader = epochs(True)
    assert len(plain) == 2 * BATCHES
    assert same(watched, plain)
    assert not torch.equal(plain[0], plain[BATCHES])  # two epochs, two orders

    rec = loader.run
    assert rec.watch is not None
    eps = rec.watch.epochs
    assert [(e.batches, e.samples) for e in eps] == [(BATCHES, SAMPLES)] * 2
    assert [e.workers_measured for e in eps] == [False, persistent is False]
    assert eps[0].sample_cpu_seconds == 0 and eps[0].stall_seconds > 0
    note = next(n for n in rec.notes if "started before it was watched" in n)
    if persistent:  # the same workers serve every pass: none of them timed anything
        assert note.startswith("epoch 0, 1:") and "not measured" in note
        assert rec.stages.cpu.capacity_samples_per_s is None
        # the GPU stage alone must not name itself the bottleneck of a waiting GPU
        assert rec.predicted_samples_per_s == 0 and rec.recommendations == []
        assert verdict(rec, findings(rec)).startswith("no verdict: the loader's side")
        # nor may a report say there is nothing to change
        text = render_markdown(rec, findings(rec)) + render_html(rec, findings(rec))
        assert "to change" not in text and "no verdict" in text
    else:
        assert note.startswith("epoch 0:") and "from the other epochs" in note
        assert eps[1].sample_cpu_seconds > 0
        assert rec.stages.cpu.cpu_seconds_per_sample == pytest.approx(
            (eps[1].sample_cpu_seconds + (eps[1].collate_cpu_seconds or 0.0)) / SAMPLES
        )
        assert rec.predicted_samples_per_s > 0


def test_a_loader_holding_no_dataloader_is_refused_in_one_line() -> None:
    class Pretends:
        """Says it is a DataLoader, as Accelerate's adapters do, but iterates a list."""

        @property
        def __class__(self) -> type:  # type: ignore[override]
            return DataLoader

        def __iter__(self) -> Any:
            return iter([torch.zeros(2)])

    with pytest.raises(
        BadInputError, match=r"Pretends iterates through its own __iter__ and holds no DataLoader"
    ):
        ioprobe.watch(Pretends())

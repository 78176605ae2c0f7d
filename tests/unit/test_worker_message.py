"""What a DataLoader worker sends back with each batch arrives whole and typed."""

from __future__ import annotations

import pickle

import torch

from ioprobe.watch.collector import BatchStats
from ioprobe.watch.worker import Stamped


def test_a_stamped_batch_crosses_a_pickle_with_its_named_stats() -> None:
    wall = bytes(range(16))
    stats = BatchStats(3, wall, wall[::-1], 11, 4096, 512, 7, 100, 2000, 300, 123456789)
    sent = Stamped(torch.arange(6).reshape(2, 3), stats)
    got = pickle.loads(pickle.dumps(sent, protocol=5))
    assert isinstance(got.stats, BatchStats)
    assert got.stats == stats and got.stats.done_ns == 123456789
    assert torch.equal(got.batch, sent.batch)

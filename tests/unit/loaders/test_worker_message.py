"""What a DataLoader worker sends back with each batch arrives whole and typed."""

from __future__ import annotations

import pickle

import torch

from ioprobe.loaders.torch_worker import Stamped
from ioprobe.monitor.collector import BatchStats


def test_a_stamped_batch_crosses_a_pickle_with_its_named_stats() -> None:
    wall = bytes(range(16))
    stats = BatchStats(3, wall, wall[::-1], 11, 4096, 512, 7, 100, 2000, 300, 123456789)
    sent = Stamped(torch.arange(6).reshape(2, 3), stats)
    got = pickle.loads(pickle.dumps(sent, protocol=5))
    assert isinstance(got.stats, BatchStats)
    assert got.stats == stats and got.stats.done_ns == 123456789
    assert torch.equal(got.batch, sent.batch)


def test_the_collector_unpacks_each_field_into_a_local_of_its_name() -> None:
    # on_batch unpacks the message by position (one operation on the hot path); naming each
    # local as its field makes a reordered or added field fail here, not skew a figure
    import ast
    import inspect
    import textwrap

    from ioprobe.monitor.collector import WatchCollector

    tree = ast.parse(textwrap.dedent(inspect.getsource(WatchCollector.on_batch)))
    (unpack,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Name)
        and n.value.id == "stats"
        and isinstance(n.targets[0], ast.Tuple)
    ]
    target = unpack.targets[0]
    assert isinstance(target, ast.Tuple)
    names = [e.id for e in target.elts if isinstance(e, ast.Name)]
    assert names == list(BatchStats._fields)

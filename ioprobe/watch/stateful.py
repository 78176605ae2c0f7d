"""DataLoader classes that keep their iteration state (position, RNG, worker snapshots) in
their own iterator, known by module and class name so that nothing here imports them.

Their ``__iter__`` does not go through DataLoader's, and a watcher must iterate one of them:
otherwise ``state_dict()`` would describe an iterator that never ran, and a resumed job would
replay other samples. ``watch.torch`` builds its sibling from one, ``watch.run_hook`` patches
their methods as they are created.
"""

from __future__ import annotations

STATEFUL_LOADERS = {"torchdata.stateful_dataloader.stateful_dataloader": "StatefulDataLoader"}


def is_stateful(cls: type) -> bool:
    return STATEFUL_LOADERS.get(cls.__module__) == cls.__name__

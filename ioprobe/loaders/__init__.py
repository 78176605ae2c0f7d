"""What wraps each kind of loader, and what users import into their own datasets.

The wrappers (above ``ioprobe.monitor``, which they fill): ``torch`` (a DataLoader, in the
main process), ``torch_worker`` (what runs in each DataLoader worker), ``torch_stateful``
(loaders that wrap a DataLoader in their own ``__iter__``), ``torch_trials`` (``ioprobe
tune --in-run``'s windows of one epoch), ``dali`` (DALI iterators and pipelines), ``api``
(``watch``, ``to_device``, ``gpu_alone``: the adapter that accepts a loader), ``run_hook``
(the ``ioprobe run`` hook in the script's process) and ``gather`` (every rank's record sent
to rank 0).

On the ground floor, importing nothing of ours: ``files``, a metered opener for local paths
and fsspec URLs whose reads a watched loader counts as storage, and ``sockets``, the bytes a
loading process receives over Python's sockets.

Importing this package imports nothing: each module is imported where it is used.
"""

"""What a DataLoader worker sends back with each batch (``BatchStats``), in a module of its
own that imports nothing but the standard library: the collector (every framework's, DALI's
too, where torch may be missing) reads it, and a spawned worker imports it with the worker
side (``loaders.torch_worker``) at every epoch's start, where each import is paid again.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple


class BatchStats(NamedTuple):
    """What a worker measured while it made one batch, sent back with the batch itself (so
    measuring costs no extra IPC). Times in nanoseconds; byte counts since its last batch."""

    worker: int  # the worker's id; -1 when the main process loads (num_workers=0)
    wall: bytes  # array("q") of each sample's wall time, as bytes
    cpu: bytes  # array("q") of each sample's thread CPU time, as bytes
    collate_ns: int
    read_chars: int  # the worker's rchar: bytes passed to read() and pread()
    read_bytes: int  # bytes the worker caused to be fetched from storage
    runqueue_ns: int  # time runnable but waiting for a core
    metered_bytes: int  # read through ioprobe.loaders.files
    metered_ns: int  # opens and reads through it
    metered_open_ns: int  # opens alone
    # CLOCK_MONOTONIC when collate finished: one clock for every process on the host, so the
    # main process can place this worker's batch on its own timeline
    done_ns: int
    indices: bytes = b""  # array("q") of each sample's dataset index (-1: none)
    sample_bytes: bytes = b""  # array("q") of each sample's metered bytes
    started_ns: int = 0  # with a worker's first batch: when it began its first sample
    # at a worker's 1st, 2nd, 4th ... batch: array("q") of (device, inode, bytes, folder_tag)
    # per data file mapped into it (worker.mapped_data_files), as bytes
    mapped: bytes = b""
    # NUL-separated "directory/*ending" of data files the worker unmapped: a reader that
    # maps its files in turn (worker._mapped)
    turned: bytes = b""
    collate_cpu_ns: int = 0  # the collate's thread CPU time (``collate_ns`` is its wall)
    # the watch's own work in this worker after its previous batch's collate (reading the
    # counters, listing mapped files, packing this message), timed there: what watching
    # cost the worker beyond the user's code
    overhead_ns: int = 0
    # the worker process's CPU time (every thread: the queue's feeder pickling the previous
    # batch too) since its previous batch's collate ended; 0 for its first batch, whose
    # interval holds its start-up
    process_cpu_ns: int = 0
    # bytes received over Python's sockets (loaders.sockets): a dataset's reads from the
    # network, which read_chars leaves out
    socket_bytes: int = 0
    # with a spawned worker's first batch: what importing the watch's worker module cost it
    # (``loaders.torch_worker``); 0 in a forked worker and after its first batch
    import_ns: int = 0


MAPPED_FIELDS = 4  # a mapped file in BatchStats.mapped: device, inode, bytes, folder_tag


def folder_tag(folder: bytes) -> int:
    """A directory's tag in a mapped-files listing (``BatchStats.mapped``): its path's CRC-32,
    the same in every worker whatever the start method (``hash()`` is seeded per process), so
    the collector can tell which files a directory it lists again held."""
    return zlib.crc32(folder)


__all__ = ["MAPPED_FIELDS", "BatchStats", "folder_tag"]

"""Metered file access for datasets: open local paths or any fsspec URL and count what is read.

Reads over sockets (HTTP, S3) never show in a process's I/O counters, so a watched loader sees
their time but not their bytes. Datasets that open their files through this module give the
storage stage real numbers instead::

    from ioprobe.loaders import files

    def __getitem__(self, i):
        with files.open(self.urls[i]) as fh:      # or: data = files.read_bytes(url)
            return decode(fh.read())

Counting is two integer additions per read call, in this process only; ``ioprobe.watch``
collects the totals once per batch. Without a watcher the counts are simply never read.
"""

from __future__ import annotations

import builtins
import os
import time
from types import TracebackType
from typing import Any

_bytes = [0]
_ns = [0]  # opens and reads: all the time spent on storage
_open_ns = [0]  # opens alone: the per-request latency (a metadata lookup, an HTTP HEAD)
# the bytes read since the last take(), for a reader that attributes them to each sample:
# the one list, so reading it costs an index, not a call
BYTES = _bytes


def _after_fork() -> None:
    _bytes[0] = 0
    _ns[0] = 0
    _open_ns[0] = 0


os.register_at_fork(after_in_child=_after_fork)


def take() -> tuple[int, int, int]:
    """Bytes, nanoseconds of opens and reads, and nanoseconds of opens alone, metered since
    the last call in this process."""
    b, n, o = _bytes[0], _ns[0], _open_ns[0]
    _bytes[0] = 0
    _ns[0] = 0
    _open_ns[0] = 0
    return b, n, o


class MeteredFile:
    """A read-only file object that counts bytes and time of every read."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def read(self, size: int = -1) -> bytes:
        t0 = time.perf_counter_ns()
        data: bytes = self._fh.read(size)
        _ns[0] += time.perf_counter_ns() - t0
        _bytes[0] += len(data)
        return data

    def readinto(self, buf: Any) -> int:
        t0 = time.perf_counter_ns()
        n: int = self._fh.readinto(buf)
        _ns[0] += time.perf_counter_ns() - t0
        _bytes[0] += n or 0
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._fh.seek(offset, whence))

    def tell(self) -> int:
        return int(self._fh.tell())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> MeteredFile:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def open(urlpath: str, mode: str = "rb", **storage_options: Any) -> MeteredFile:
    """Open a local path or fsspec URL for reading; only binary read modes are allowed."""
    if mode != "rb":
        raise ValueError(f"ioprobe.loaders.files.open is read-only: mode {mode!r}")
    t0 = time.perf_counter_ns()
    path = os.fspath(urlpath)
    if not storage_options and (
        isinstance(path, bytes) or "://" not in path or os.path.lexists(path)
    ):
        # a local path (one that exists, "://" in it or not: runs/http://h/x.bin) needs no
        # fsspec, whose import (about 30 ms of CPU) a worker forked from a parent that
        # never imported it paid on its first sample, each epoch; the file is handed back
        # open, inside the metered wrapper
        fh: Any = builtins.open(path, "rb")  # noqa: SIM115
    else:
        # imported at the first open, not with the module: a watched DataLoader's spawned
        # workers import this module to unpickle the dataset wrapper, and fsspec takes
        # about 0.1 s to import, paid at every epoch's start by workers that never open a
        # file here
        import fsspec

        fh = fsspec.open(urlpath, "rb", **storage_options).open()
    took = time.perf_counter_ns() - t0
    _ns[0] += took
    _open_ns[0] += took
    return MeteredFile(fh)


def read_bytes(urlpath: str, **storage_options: Any) -> bytes:
    """The whole file, metered."""
    with open(urlpath, **storage_options) as fh:
        return fh.read()

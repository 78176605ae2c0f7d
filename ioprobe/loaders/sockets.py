"""Bytes a loading process receives over sockets: what a dataset reads from the network.

A process's I/O counters (``/proc/self/io``'s ``rchar``) count what ``read()`` returns, but
Python's sockets receive with ``recv()``, which they leave out: a dataset that fetches its
files over HTTP or from an object store (``fsspec.open(url)``, s3fs, gcsfs, ``HfFileSystem``,
boto3, requests, urllib) shows its time but not its bytes. ``install()`` counts them where
every such client passes, in the one process it runs in (a loader's worker): the receiving
methods of Python's socket class, and the reads of a TLS socket (``ssl.SSLSocket.read``, which
its ``recv`` and ``recv_into`` go through). asyncio's transports (aiohttp, under fsspec's
HTTP, s3fs and gcsfs) receive with the same methods, TLS or not.

Not counted: clients that receive in C without Python's socket methods (uvloop's transports,
pycurl, gRPC's core, a CRT-based S3 client), which then read as "bytes not seen".

Counting is one call and one integer addition per receive, not per byte, in the processes
that call ``install()``; ``RECEIVED[0]`` is the running total, read by index.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Any

RECEIVED = [0]  # bytes received over sockets since install() in this process
# the originals, by (class, method name): install() is idempotent and uninstall() exact
_ORIGINAL: dict[tuple[type, str], Callable[..., Any]] = {}


def _count_len(method: Callable[..., Any]) -> Callable[..., Any]:
    """recv, and a TLS read without a buffer: return the bytes."""

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        data = method(self, *args, **kwargs)
        RECEIVED[0] += len(data) if type(data) is bytes else data
        return data

    return counted


def _count_int(method: Callable[..., Any]) -> Callable[..., Any]:
    """recv_into: returns how many bytes it put in the buffer."""

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        n = method(self, *args, **kwargs)
        RECEIVED[0] += n
        return n

    return counted


def _count_first_len(method: Callable[..., Any]) -> Callable[..., Any]:
    """recvfrom and recvmsg: the bytes come first in the tuple."""

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        RECEIVED[0] += len(out[0])
        return out

    return counted


def _count_first_int(method: Callable[..., Any]) -> Callable[..., Any]:
    """recvfrom_into and recvmsg_into: the count comes first in the tuple."""

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        RECEIVED[0] += out[0]
        return out

    return counted


_SOCKET_METHODS = (
    ("recv", _count_len),
    ("recv_into", _count_int),
    ("recvfrom", _count_first_len),
    ("recvfrom_into", _count_first_int),
    ("recvmsg", _count_first_len),
    ("recvmsg_into", _count_first_int),
)


def _wrap(cls: type, name: str, counter: Callable[..., Any]) -> None:
    if (cls, name) in _ORIGINAL or not hasattr(cls, name):
        return
    original = getattr(cls, name)
    _ORIGINAL[cls, name] = original
    setattr(cls, name, counter(original))


def install() -> None:
    """Count every byte this process receives through Python's sockets from now on; TLS
    sockets too once ``ssl`` is imported (``install`` again after that: a worker calls it at
    each batch, a dictionary lookup once done)."""
    for name, counter in _SOCKET_METHODS:
        _wrap(socket.socket, name, counter)
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        # a TLS socket's recv and recv_into call its read, which returns the plaintext; the
        # plain socket methods it inherits are not used once the handshake is done
        _wrap(ssl.SSLSocket, "read", _count_len)


def installed() -> bool:
    """Whether every receive is counted: the plain sockets', and TLS reads where ``ssl`` is
    imported (it may have been since ``install`` last ran)."""
    if (socket.socket, "recv_into") not in _ORIGINAL:
        return False
    ssl = sys.modules.get("ssl")
    return ssl is None or (ssl.SSLSocket, "read") in _ORIGINAL


def uninstall() -> None:
    """Put the original methods back (tests; a process that stops watching)."""
    for (cls, name), original in _ORIGINAL.items():
        setattr(cls, name, original)
    _ORIGINAL.clear()


__all__ = ["RECEIVED", "install", "installed", "uninstall"]

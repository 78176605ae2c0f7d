"""Ranged reads of remote files that never take more bytes than they asked for.

fsspec's ``cat_file(path, start, end)`` over HTTP sends a Range header and then reads the
whole response body: a server that ignores Range and streams without end (or sends a file far
larger than it listed) grows the reader's memory to gigabytes before any deadline can abandon
it. ``cat_range`` reads an HTTP(S) response as a stream and stops at ``end`` bytes from the
file's start (the range itself where the server honoured it, with 206), then drops the
connection. Other backends (S3, GCS) honour ranges in their own clients and go through
``cat_file`` as they are.
"""

from __future__ import annotations

from typing import Any

CHUNK = 1 << 20  # bytes per read from the response stream


def cat_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` (exclusive) of ``path``: at most ``end - start`` bytes,
    and never more than ``end`` read from the network, whatever the server sends."""
    if end <= start:
        return b""
    if not _is_http(fs):
        return bytes(fs.cat_file(path, start=start, end=end))
    from fsspec.asyn import sync

    data: bytes = sync(fs.loop, _http_range, fs, path, start, end)
    return data


def _is_http(fs: Any) -> bool:
    try:
        from fsspec.implementations.http import HTTPFileSystem
    except ImportError:  # pragma: no cover - aiohttp missing: no HTTP filesystem either
        return False
    return isinstance(fs, HTTPFileSystem)


async def _http_range(fs: Any, url: str, start: int, end: int) -> bytes:
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        fs._raise_not_found_for_status(r, url)  # 404 as FileNotFoundError, others raised
        # 206: the range itself; anything else: the file from its start, of which the range
        # is bytes start..end, so no more than ``end`` are read
        skip, limit = (0, end - start) if r.status == 206 else (start, end)
        got: list[bytes] = []
        n = 0
        while n < limit:
            chunk = await r.content.read(min(CHUNK, limit - n))
            if not chunk:
                break
            got.append(chunk)
            n += len(chunk)
        r.close()  # the rest of an endless body is never read: the connection is dropped
    return b"".join(got)[skip:limit]


__all__ = ["cat_range"]

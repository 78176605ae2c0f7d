"""Reads that failed, counted by cause: a file that vanished is not a server that refused.

A probe skips a file it cannot read and goes on; ``ReadFailures`` counts each such file once,
by the cause of its first failure, for the record's ``dataset.read_errors``. Causes are short
keys: ``not_found``, ``permission_denied``, ``is_a_directory``, ``timeout``, ``connection``,
``tls_certificate`` (the server's certificate is not trusted: self-signed, expired, another
name), ``tls``, ``redirect_loop`` (redirects past the client's limit), ``short_response``
(the server sent fewer bytes than it announced), ``malformed_response`` (a response that is
not valid HTTP: a negative Content-Length, a header that cannot be read), ``http_<status>`` (a remote object answered with an error
status), an errno name (``EIO``), or ``other``. Only failures touch this module, never a read
that succeeds.

A library's exception is read with what caused it: fsspec reports any failed HTTP listing as
FileNotFoundError, raised from the TLS error that was the real cause, and aiohttp turns a body
shorter than its Content-Length into an error carrying status 400, a status the server never
sent.
"""

from __future__ import annotations

import errno
import ssl
import threading
from collections import Counter
from collections.abc import Iterator

_CONNECTION_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
}


class ShortRead(Exception):
    """A remote read that ended before the bytes the listing gave the file: the server's
    size (a HEAD's Content-Length, a listing's) overstates what it sends."""


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it (``__cause__``, else ``__context__``), first to last."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def kinds(exc: BaseException) -> set[str]:
    """The names of ``exc``'s classes, its bases included: a library's errors are matched by
    name where the library is optional."""
    return {k.__name__ for k in type(exc).__mro__}


def transport_cause(exc: BaseException) -> str | None:
    """``tls_certificate``, ``tls``, ``short_response``, ``malformed_response`` or
    ``redirect_loop`` where one of these is anywhere in ``exc``'s chain, whatever the
    outermost exception claims; else None."""
    malformed = False
    for e in chain(exc):
        if isinstance(e, ShortRead):
            return "short_response"
        if isinstance(e, ssl.SSLCertVerificationError):
            return "tls_certificate"
        if isinstance(e, ssl.SSLError):
            return "tls"
        # aiohttp's errors in a body (ContentLengthError, TransferEncodingError) and the
        # ClientPayloadError that wraps them; any other of its parser's errors (a header it
        # cannot read, a status line that is not HTTP) is a malformed response, which aiohttp
        # reports with a status 400 the server never sent. Matched by name: aiohttp is optional
        names = kinds(e)
        if names & {"PayloadEncodingError", "ClientPayloadError"}:
            return "short_response"
        malformed |= "HttpProcessingError" in names
        if "TooManyRedirects" in names:  # aiohttp's, past its ten redirects
            return "redirect_loop"
    return "malformed_response" if malformed else None


def cause(exc: BaseException) -> str:
    """The cause key of a failed read, from the exception any backend raised."""
    transport = transport_cause(exc)
    if transport is not None:
        return transport
    named = _os_cause(exc)
    if named is not None:
        return named
    status = http_status(exc)
    if status is not None:
        return f"http_{status}"
    if "connect" in type(exc).__name__.lower():  # aiohttp's and botocore's connection errors
        return "connection"
    return "other"


def _os_cause(exc: BaseException) -> str | None:
    # fsspec backends map 404 to FileNotFoundError and s3fs maps 403 to PermissionError
    for kind, key in (
        (FileNotFoundError, "not_found"),
        (PermissionError, "permission_denied"),
        (IsADirectoryError, "is_a_directory"),
        (TimeoutError, "timeout"),  # asyncio's, aiohttp's and fsspec's timeouts too
        (ConnectionError, "connection"),
    ):
        if isinstance(exc, kind):
            return key
    if isinstance(exc, OSError) and exc.errno:
        if exc.errno in _CONNECTION_ERRNOS:
            return "connection"
        return errno.errorcode.get(exc.errno)
    return None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error response carried: aiohttp's ``status``, botocore's
    ``response["ResponseMetadata"]["HTTPStatusCode"]``."""
    status = getattr(exc, "status", None)
    if not isinstance(status, int):
        response = getattr(exc, "response", None)
        meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
        status = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
    return status if isinstance(status, int) and 400 <= status < 600 else None


def label(key: str) -> str:
    """A cause key as the error messages write it: ``http_403`` is "HTTP 403"."""
    if key.startswith("http_"):
        return "HTTP " + key.removeprefix("http_")
    return _LABELS.get(key, key.replace("_", " "))


_LABELS = {
    "tls_certificate": "TLS certificate not trusted",
    "tls": "TLS error",
    "short_response": "response shorter than announced",
    "malformed_response": "response not valid HTTP",
    "redirect_loop": "redirected over and over (a redirect loop)",
}


class ReadFailures:
    """The files that failed to read, each once, by the cause of its first failure.

    Shared by reader threads: ``add`` takes a lock, which is paid only by a read that failed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, str] = {}
        self.example: str | None = None  # the first failure's path and message

    def add(self, path: str, key: str, text: str | None = None) -> None:
        with self._lock:
            self._by_path.setdefault(path, key)
            if self.example is None:
                self.example = f"{path}: {text or label(key)}"

    def add_exception(self, path: str, exc: BaseException) -> None:
        self.add(path, cause(exc), " ".join(str(exc).split())[:200] or type(exc).__name__)

    def __len__(self) -> int:
        return len(self._by_path)

    def __contains__(self, path: object) -> bool:
        return path in self._by_path

    def counts(self) -> dict[str, int]:
        """Files by cause, for the record."""
        with self._lock:
            return dict(Counter(self._by_path.values()))

    def only(self, key: str) -> bool:
        """Whether there are failures and every one has cause ``key``."""
        counts = self.counts()
        return bool(counts) and set(counts) == {key}

    def summary(self) -> str:
        """The failures for an error message: "40 files: 38 HTTP 403, 2 timeout"."""
        parts = ", ".join(f"{n} {label(k)}" for k, n in sorted(self.counts().items()))
        return f"{len(self)} file{'s' if len(self) != 1 else ''}: {parts}"

"""Real loopback servers for tests: a throttled HTTP file server and a moto S3 server.

Both bind 127.0.0.1 only, on ports the kernel picks, so parallel test runs never collide.
"""

from __future__ import annotations

import contextlib
import functools
import html
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from moto.moto_server.werkzeug_app import MotoRequestHandler

__all__ = ["S3Server", "ThrottledHTTPServer", "make_files"]

# Small enough that the shared schedule interleaves concurrent clients finely, large enough
# that per-chunk overhead (a lock, a sleep, a send) stays far below the rates tests use.
CHUNK_SIZE = 16 * 1024

# How far behind its schedule a response may fall and still catch up by sending without
# sleeping. It bounds the burst a stalled response can make up for (CATCH_UP_S * rate bytes).
CATCH_UP_S = 0.05

_RANGE_RE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


class _RangeNotSatisfiable(Exception):
    pass


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Return the inclusive (first, last) byte span the header asks for, or None for all.

    Malformed and multi-range headers are ignored (RFC 9110 lets a server answer those with
    the whole representation), which keeps this server simple and clients still correct.
    """
    if not header:
        return None
    match = _RANGE_RE.match(header)
    if match is None:
        return None
    first_s, last_s = match.groups()
    if not first_s and not last_s:
        return None
    if not first_s:
        suffix = int(last_s)
        if suffix == 0 or size == 0:
            raise _RangeNotSatisfiable
        return max(0, size - suffix), size - 1
    first = int(first_s)
    if last_s and int(last_s) < first:
        return None
    if first >= size:
        raise _RangeNotSatisfiable
    last = min(int(last_s), size - 1) if last_s else size - 1
    return first, last


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and the first body chunk go out as separate small writes; with Nagle on, the
    # second can wait for the client's delayed ACK and add ~40 ms to every response.
    disable_nagle_algorithm = True
    server: ThrottledHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        srv = self.server
        srv._count_request()
        delay = srv.request_delay()
        if delay > 0:
            time.sleep(delay)
        url_path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = srv._resolve(url_path)
        if target is None:
            self._send_empty(HTTPStatus.NOT_FOUND)
        elif target.is_dir():
            self._send_index(target, send_body)
        else:
            self._send_file(target, send_body)

    def _send_empty(self, status: HTTPStatus, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_index(self, directory: Path, send_body: bool) -> None:
        lines = ["<!DOCTYPE html>", "<html><body><ul>"]
        for entry in sorted(directory.iterdir(), key=lambda p: p.name):
            slash = "/" if entry.is_dir() else ""
            href = urllib.parse.quote(entry.name) + slash
            lines.append(f'<li><a href="{href}">{html.escape(entry.name)}{slash}</a></li>')
        lines.append("</ul></body></html>")
        body = "\n".join(lines).encode("utf-8")
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            # Listings bypass the throttle and the counter: a tree walk must not eat into the
            # bandwidth a test is measuring, and bytes_sent must equal file payload bytes.
            self.wfile.write(body)

    def _send_file(self, path: Path, send_body: bool) -> None:
        try:
            f = path.open("rb")
        except OSError:
            self._send_empty(HTTPStatus.NOT_FOUND)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            try:
                # a server without byte ranges answers every GET with the whole file
                header = self.headers.get("Range") if self.server.ranges else None
                span = _parse_range(header, size)
            except _RangeNotSatisfiable:
                self._send_empty(
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    {"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"},
                )
                return
            if span is None:
                first, length = 0, size
                self.send_response(HTTPStatus.OK)
            else:
                first, length = span[0], span[1] - span[0] + 1
                self.send_response(HTTPStatus.PARTIAL_CONTENT)
                self.send_header("Content-Range", f"bytes {span[0]}-{span[1]}/{size}")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            if self.server.ranges:
                self.send_header("Accept-Ranges", "bytes")
            self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
            self.end_headers()
            if not send_body:
                return
            f.seek(first)
            remaining = length
            while remaining > 0:
                chunk = f.read(min(CHUNK_SIZE, remaining))
                if not chunk:
                    # The file shrank under us; the declared length can no longer be honoured.
                    self.close_connection = True
                    return
                self.server._throttle(len(chunk), mid_response=remaining < length)
                # Counted before the write: a client can have the last byte and the test can
                # read bytes_sent before this thread runs again, so counting after races.
                self.server._count_bytes(len(chunk))
                try:
                    self.wfile.write(chunk)
                except OSError:
                    self.server._count_bytes(-len(chunk))
                    raise
                remaining -= len(chunk)


class ThrottledHTTPServer(ThreadingHTTPServer):
    """HTTP/1.1 file server on 127.0.0.1 (or ``host``) with one bandwidth limit shared by all
    connections.

    ``bytes_sent`` counts file payload bytes actually written (directory listings excluded),
    ``requests`` counts every GET and HEAD, ``connections`` counts accepted TCP connections.

    ``ranges=False`` makes it a server that ignores ``Range`` (Python's own ``http.server``
    is one): every GET of a file is answered 200 with the whole file.

    Every request is answered ``latency_s`` late. ``slow_window=(t0, t1)`` with
    ``slow_latency_s`` adds a slow spell: a request that arrives from ``t0`` to ``t1`` seconds
    after ``start_slow_clock()`` (which the test calls at the moment it chooses) waits
    ``slow_latency_s`` more. Off by default, and until the clock is started; the clock is
    read and set under a lock, so any thread may start it while handlers read it.
    """

    daemon_threads = True
    # The stdlib default backlog of 5 makes the kernel drop SYNs when dozens of clients
    # connect at once, which shows up as connection resets in tests rather than slowness.
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(
        self,
        root: str | Path,
        rate_bytes_per_s: float | None = None,
        latency_s: float = 0.0,
        slow_window: tuple[float, float] | None = None,
        slow_latency_s: float = 0.0,
        ranges: bool = True,
        host: str = "127.0.0.1",
    ) -> None:
        if rate_bytes_per_s is not None and rate_bytes_per_s <= 0:
            raise ValueError(f"rate_bytes_per_s must be positive, got {rate_bytes_per_s}")
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if slow_window is not None and not 0 <= slow_window[0] < slow_window[1]:
            raise ValueError(f"slow_window must be (t0, t1) with 0 <= t0 < t1, got {slow_window}")
        if slow_latency_s < 0:
            raise ValueError(f"slow_latency_s must be >= 0, got {slow_latency_s}")
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(str(self.root))
        self.rate_bytes_per_s = rate_bytes_per_s
        self.latency_s = latency_s
        self.slow_window = slow_window
        self.slow_latency_s = slow_latency_s
        self.ranges = ranges
        self._slow_lock = threading.Lock()
        self._slow_origin: float | None = None  # monotonic seconds at start_slow_clock()
        self._schedule_lock = threading.Lock()
        self._next_free = 0.0
        self._stats_lock = threading.Lock()
        self._bytes_sent = 0
        self._requests = 0
        self._connections_accepted = 0
        # the schedule's first payload slot and the end of its last one (monotonic seconds)
        self._first_slot: float | None = None
        self._last_slot_end = 0.0
        self._conn_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self.host = host
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        super().__init__((host, 0), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def bytes_sent(self) -> int:
        with self._stats_lock:
            return self._bytes_sent

    @property
    def requests(self) -> int:
        with self._stats_lock:
            return self._requests

    @property
    def achieved_rate(self) -> float | None:
        """Payload bytes over the span from the first chunk's slot to the end of the last one:
        the rate the server really delivered, at most ``rate_bytes_per_s``. On a loaded host
        (a CI machine) it can be less, because the server's threads ran late or because its
        clients asked late: a lower bound on what the server could deliver."""
        with self._schedule_lock:
            first, last = self._first_slot, self._last_slot_end
        if first is None or last <= first:
            return None
        return self.bytes_sent / (last - first)

    @property
    def connections(self) -> int:
        """TCP connections accepted so far; with keep-alive this stays below ``requests``."""
        with self._stats_lock:
            return self._connections_accepted

    def start_slow_clock(self) -> float:
        """Start the clock ``slow_window`` counts from, now; returns that moment
        (``time.monotonic()``)."""
        now = time.monotonic()
        with self._slow_lock:
            self._slow_origin = now
        return now

    def request_delay(self) -> float:
        """How late a request arriving now is answered: ``latency_s``, plus ``slow_latency_s``
        inside the slow window."""
        with self._slow_lock:
            origin = self._slow_origin
        window = self.slow_window
        if window is None or origin is None:
            return self.latency_s
        since = time.monotonic() - origin
        slow = window[0] <= since < window[1]
        return self.latency_s + (self.slow_latency_s if slow else 0.0)

    def reset_counters(self) -> None:
        with self._stats_lock:
            self._bytes_sent = 0
            self._requests = 0
            self._connections_accepted = 0
        with self._schedule_lock:
            self._first_slot = None
            self._last_slot_end = 0.0

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ThrottledHTTPServer:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        # Idle keep-alive connections would otherwise park their handler threads in a read
        # forever; shutting the sockets down makes those threads exit now.
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- socketserver hooks -------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            self._connections.add(request)
        with self._stats_lock:
            self._connections_accepted += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conn_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        # Clients that hang up mid-body (cancelled reads, timeouts, stop()) are normal in
        # tests of a pipeline; only real server bugs deserve a traceback.
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    # --- used by the handler --------------------------------------------------------------

    def _resolve(self, url_path: str) -> Path | None:
        if "\x00" in url_path:
            return None
        candidate = (self.root / url_path.lstrip("/")).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            return None
        if not candidate.exists():
            return None
        return candidate

    def _throttle(self, nbytes: int, mid_response: bool) -> None:
        rate = self.rate_bytes_per_s
        if rate is None:
            return
        # One timeline for the whole server: each chunk books the next free slot of
        # nbytes/rate seconds, so N connections share the rate instead of multiplying it.
        with self._schedule_lock:
            now = time.monotonic()
            late = now - self._next_free
            if mid_response and 0 < late <= CATCH_UP_S:
                # Oversleeping and the send itself make every chunk start a little after its
                # slot; without catching up, a lone client loses ~7% of the rate to that.
                start = self._next_free
            else:
                # Gaps between responses (request round trips, latency_s) and real idle time
                # are not banked, as on a real link, so they never turn into bursts.
                start = max(now, self._next_free)
            end = start + nbytes / rate
            self._next_free = end
            if self._first_slot is None:
                self._first_slot = start
            self._last_slot_end = end
        delay = end - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _count_bytes(self, nbytes: int) -> None:
        with self._stats_lock:
            self._bytes_sent += nbytes

    def _count_request(self) -> None:
        with self._stats_lock:
            self._requests += 1


@functools.cache
def _quiet_moto_handler() -> type[MotoRequestHandler]:
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietMotoRequestHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass

    return QuietMotoRequestHandler


class S3Server:
    """A moto S3 endpoint on 127.0.0.1 for code that talks to S3 through boto3 or s3fs.

    moto keeps its state in process-wide backends: every S3Server (and any ``mock_aws``)
    in the same process sees the same buckets.
    """

    ACCESS_KEY = "testing"
    SECRET_KEY = "testing"
    REGION = "us-east-1"

    def __init__(self) -> None:
        self._server: Any = None
        self._endpoint: str | None = None

    @property
    def endpoint_url(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("S3Server is not started")
        return self._endpoint

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("S3Server already started")
        from moto.server import ThreadedMotoServer

        # moto binds in its thread (werkzeug make_server) before start() returns, so port 0
        # is safe and get_host_and_port() reports the real port; probing for a free port
        # first would race with other processes.
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        # werkzeug logs every request to stderr through its own handler; the handler class
        # is looked up per connection, so swapping it now silences all requests.
        wsgi = server._server
        assert wsgi is not None
        wsgi.RequestHandlerClass = _quiet_moto_handler()
        self._server = server
        self._endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self._endpoint = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """Environment for a subprocess whose boto3/s3fs clients must reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            # A parent shell may opt out of endpoint variables; that would send us to AWS.
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false",
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
            "AWS_DEFAULT_REGION": self.REGION,
            "AWS_REGION": self.REGION,
            # Keep a developer's real ~/.aws files and the EC2 metadata probe out of tests.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            # A configured HTTP proxy would otherwise intercept loopback requests.
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
            region_name=self.REGION,
        )

    def upload_tree(self, bucket: str, local_dir: Path, prefix: str = "") -> list[str]:
        """Create ``bucket`` if needed and upload every file under ``local_dir``.

        Returns the object keys, sorted: ``prefix/relative/posix/path``.
        """
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        local_dir = Path(local_dir)
        base = prefix.strip("/")
        keys = []
        for path in sorted(_iter_files(local_dir)):
            rel = path.relative_to(local_dir).as_posix()
            key = f"{base}/{rel}" if base else rel
            client.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys

    def put_many(self, bucket: str, keys: Iterable[str], body: bytes = b"x") -> int:
        """Create ``bucket`` and put ``body`` at each of ``keys`` straight into moto's
        in-process backend: 10^5 objects in seconds, where as many PUT requests take
        minutes. Only for a server in this process (moto's state is process-wide)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.exceptions import BucketAlreadyExists
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        with contextlib.suppress(BucketAlreadyExists):  # made by an earlier test
            backend.create_bucket(bucket, self.REGION)
        n = 0
        for key in keys:
            backend.put_object(bucket, key, body)
            n += 1
        return n


class ListingProxy(ThreadingHTTPServer):
    """An S3 endpoint on 127.0.0.1 in front of ``upstream`` (an S3Server's URL) that misbehaves
    on ListObjectsV2 as a faulty or overloaded store does: each list request answered
    ``list_delay_s`` late; from the ``stall_from``-th list request on (1 is the first) none
    answered until the proxy stops; ``drop_token`` strips NextContinuationToken from pages
    that say more follow. Every other request passes through. ``lists`` counts list requests."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        upstream: str,
        list_delay_s: float = 0.0,
        stall_from: int | None = None,
        drop_token: bool = False,
    ) -> None:
        host, port = upstream.rsplit("//", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.list_delay_s, self.stall_from, self.drop_token = list_delay_s, stall_from, drop_token
        self.lists = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__(("127.0.0.1", 0), _ListingProxyHandler)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a stalled page closes its end: expected here

    def __enter__(self) -> Self:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


class _ListingProxyHandler(BaseHTTPRequestHandler):
    server: ListingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET")

    def do_HEAD(self) -> None:
        self._forward("HEAD")

    def _forward(self, method: str) -> None:
        import http.client

        proxy = self.server
        if "list-type=2" in self.path:
            with proxy.lock:
                proxy.lists += 1
                n = proxy.lists
            if proxy.stall_from is not None and n >= proxy.stall_from:
                proxy.stopping.wait()  # never answered while the proxy runs
                return
            time.sleep(proxy.list_delay_s)
        conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        conn.request(method, self.path, headers=headers)
        answer = conn.getresponse()
        body = answer.read()
        if "list-type=2" in self.path and proxy.drop_token:
            body = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", body)
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)
        conn.close()


def _iter_files(directory: Path) -> Iterator[Path]:
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            yield Path(dirpath) / name


def make_files(dir: Path, count: int, size: int, seed: int = 0, subdirs: int = 1) -> list[Path]:
    """Write ``count`` files of ``size`` random bytes as ``dir/p{i % subdirs}/f{i:05d}.bin``.

    Each file's bytes depend only on (seed, i), so a file is identical whatever ``count`` is.
    """
    if subdirs < 1:
        raise ValueError(f"subdirs must be >= 1, got {subdirs}")
    dir = Path(dir)
    paths = []
    for i in range(count):
        path = dir / f"p{i % subdirs}" / f"f{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(f"{seed}:{i}").randbytes(size))
        paths.append(path)
    return paths


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost that no one signed, and its key, written
    under ``folder``: what a TLS server on 127.0.0.1 presents in the tests."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path

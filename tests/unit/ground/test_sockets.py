"""loaders.sockets counts every byte received through Python's sockets, plain and TLS, once:
the bytes a dataset reads from the network, which the I/O counters leave out."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.loaders import sockets
from tests.support.servers import self_signed_cert

PAYLOAD = 1_000_000


@pytest.fixture
def counting() -> Iterator[None]:
    sockets.uninstall()
    sockets.install()
    try:
        yield
    finally:
        sockets.uninstall()


def _pair_sending(n: int) -> socket.socket:
    a, b = socket.socketpair()

    def send() -> None:
        with a:
            a.sendall(b"x" * n)

    threading.Thread(target=send, daemon=True).start()
    return b


def test_every_receiving_method_counts_what_it_received(counting: None) -> None:
    def recv(s: socket.socket) -> int:
        return len(s.recv(65536))

    def recv_into(s: socket.socket) -> int:
        return s.recv_into(bytearray(65536))

    def recvfrom(s: socket.socket) -> int:
        return len(s.recvfrom(65536)[0])

    def recvfrom_into(s: socket.socket) -> int:
        return s.recvfrom_into(bytearray(65536))[0]

    def recvmsg(s: socket.socket) -> int:
        return len(s.recvmsg(65536)[0])

    def recvmsg_into(s: socket.socket) -> int:
        return s.recvmsg_into([bytearray(65536)])[0]

    def makefile(s: socket.socket) -> int:  # http.client reads through it (buffered: whole)
        with s.makefile("rb") as f:
            return len(f.read(PAYLOAD))

    for method in (recv, recv_into, recvfrom, recvfrom_into, recvmsg, recvmsg_into, makefile):
        b = _pair_sending(PAYLOAD)
        before, got = sockets.RECEIVED[0], 0
        with b:
            while got < PAYLOAD:
                n = method(b)
                assert n > 0, method.__name__
                got += n
        assert sockets.RECEIVED[0] - before == PAYLOAD, method.__name__


def test_install_twice_counts_once_and_uninstall_restores_the_methods() -> None:
    original = socket.socket.recv
    sockets.uninstall()
    sockets.install()
    sockets.install()
    try:
        b = _pair_sending(10_000)
        before, got = sockets.RECEIVED[0], 0
        with b:
            while got < 10_000:
                got += len(b.recv(4096))
        assert sockets.RECEIVED[0] - before == 10_000
    finally:
        sockets.uninstall()
    assert socket.socket.recv is original


def test_a_tls_socket_counts_its_plaintext_once(counting: None, tmp_path: Path) -> None:
    # a TLS socket's recv goes through its read; the plain socket's methods it inherits are
    # not used after the handshake, so the plaintext counts once (the handshake's records
    # are read by the TLS library itself, in C)
    assert sockets.installed()
    server_ctx, client_ctx = _tls_contexts(tmp_path)
    a, b = socket.socketpair()
    done = threading.Event()

    def serve() -> None:
        with server_ctx.wrap_socket(a, server_side=True) as s:
            s.sendall(b"y" * PAYLOAD)
            done.wait(10)

    threading.Thread(target=serve, daemon=True).start()
    with client_ctx.wrap_socket(b, server_hostname="localhost") as c:
        before, got = sockets.RECEIVED[0], 0
        while got < PAYLOAD:
            got += len(c.recv(65536)) if got % 2 else c.recv_into(bytearray(65536))
        done.set()
    assert sockets.RECEIVED[0] - before == PAYLOAD


def _tls_contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = self_signed_cert(folder)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))

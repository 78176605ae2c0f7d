"""What counting received bytes (``ioprobe.loaders.sockets``) costs a receive: a socket pair in
this process, a thread sending, the main thread receiving ``--mb`` megabytes in ``--chunk``-byte
receives, with and without the counters installed, alternated.

  python tests/benchmarks/bench_sockets.py [--mb 200] [--chunk 65536] [--repeats 7]

Prints the median nanoseconds per receive each way and their difference.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.loaders import sockets


def _once(total: int, chunk: int) -> tuple[float, int]:
    a, b = socket.socketpair()
    payload = b"x" * (1 << 20)

    def send() -> None:
        left = total
        with a:
            while left > 0:
                n = min(left, len(payload))
                a.sendall(payload[:n])
                left -= n

    t = threading.Thread(target=send)
    buf = bytearray(chunk)
    got = calls = 0
    t.start()
    t0 = time.perf_counter_ns()
    with b:
        while got < total:
            got += b.recv_into(buf, chunk)
            calls += 1
    elapsed = time.perf_counter_ns() - t0
    t.join()
    return elapsed / calls, calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    total = args.mb << 20
    plain, counted = [], []
    for _ in range(args.repeats):
        sockets.uninstall()
        plain.append(_once(total, args.chunk)[0])
        sockets.install()
        before = sockets.RECEIVED[0]
        ns, _ = _once(total, args.chunk)
        assert sockets.RECEIVED[0] - before == total
        counted.append(ns)
    sockets.uninstall()
    p, c = statistics.median(plain), statistics.median(counted)
    print(
        f"{args.chunk}-byte receives, {args.mb} MB, median of {args.repeats}: "
        f"{p:,.0f} ns plain, {c:,.0f} ns counted, {c - p:+,.0f} ns per receive"
    )


if __name__ == "__main__":
    main()

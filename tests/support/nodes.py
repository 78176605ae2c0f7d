"""Two "nodes" on this machine, for the distributed probe and watch across nodes.

Each node is a network namespace of its own, with its own host name (a UTS namespace per
process started in it) and one network interface, the end of a veth pair whose other end
sits on a bridge in this machine's namespace. The bridge has an address too: a server
started here on it (``HOST``) is the shared storage both nodes reach over their links, and
each node reaches the other over the bridge (a c10d rendezvous at node 0's address). A node's
link can be capped with ``tc`` (a token bucket on the bridge's side of its veth: what the
node receives), as a node's NIC caps what it reads.

It needs root (namespaces, links, qdiscs) and the ``ip``, ``tc`` and ``unshare`` tools;
``why_not()`` says what is missing, and the tests that need it are skipped with that reason,
never counted as passed. Everything it makes is named with this process's id and removed
on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

SUBNET = "10.77"


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def why_not() -> str | None:
    """Why two nodes cannot be made here, or None where they can."""
    if os.geteuid() != 0:
        return "network namespaces need root; this process is not"
    missing = [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    probe = f"iopchk{os.getpid()}"
    made = _sh("ip", "netns", "add", probe)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _sh("ip", "netns", "del", probe)
    return None


class TwoNodes:
    """Nodes 0 and 1 at ``address(i)``, named ``name(i)``, the bridge at ``HOST``; ``caps``
    (node -> bytes/s) caps what a node receives."""

    def __init__(
        self, caps: dict[int, float] | None = None, names: Sequence[str] = ("node-a", "node-b")
    ) -> None:
        tag = os.getpid() % 100_000
        self.names = list(names)
        self.caps = dict(caps or {})
        self.bridge = f"iopbr{tag}"
        self.netns = [f"iop{tag}n{i}" for i in range(2)]
        self.links = [f"iop{tag}v{i}" for i in range(2)]
        # a /24 of its own per process, so two runs side by side do not meet
        self.net = f"{SUBNET}.{tag % 250}"

    @property
    def host(self) -> str:
        """The bridge's address: where a server of this machine's is reached from the nodes."""
        return f"{self.net}.1"

    def address(self, node: int) -> str:
        return f"{self.net}.{10 + node}"

    def name(self, node: int) -> str:
        return self.names[node]

    def __enter__(self) -> Self:
        try:
            self._up()
        except BaseException:
            self._down()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._down()

    def _run(self, *argv: str) -> None:
        done = _sh(*argv)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")

    def _up(self) -> None:
        # each node's /etc/hosts (``ip netns exec`` mounts /etc/netns/NS/ over /etc): its
        # launcher resolves its own name and the other's, as a cluster's DNS would
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{self.address(i)} {self.name(i)}\n" for i in range(2)
        )
        for ns in self.netns:
            Path("/etc/netns", ns).mkdir(parents=True, exist_ok=True)
            Path("/etc/netns", ns, "hosts").write_text(hosts)
        self._run("ip", "link", "add", self.bridge, "type", "bridge")
        self._run("ip", "addr", "add", f"{self.host}/24", "dev", self.bridge)
        self._run("ip", "link", "set", self.bridge, "up")
        for i, (ns, link) in enumerate(zip(self.netns, self.links, strict=True)):
            self._run("ip", "netns", "add", ns)
            self._run(
                "ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns
            )
            self._run("ip", "link", "set", link, "master", self.bridge)
            self._run("ip", "link", "set", link, "up")
            self._run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            self._run("ip", "-n", ns, "link", "set", "eth0", "up")
            self._run("ip", "-n", ns, "link", "set", "lo", "up")
            if i in self.caps:
                bits = int(self.caps[i] * 8)
                # a bucket of 64 kB: a cap that holds from the first tenth of a second
                self._run(
                    "tc", "qdisc", "add", "dev", link, "root", "tbf", "rate", f"{bits}bit",
                    "burst", "64kb", "latency", "200ms",
                )  # fmt: skip

    def _down(self) -> None:
        for ns in self.netns:
            _sh("ip", "netns", "del", ns)  # takes its end of the veth, and so the pair
            shutil.rmtree(Path("/etc/netns", ns), ignore_errors=True)
        for link in self.links:
            _sh("ip", "link", "del", link)
        _sh("ip", "link", "del", self.bridge)

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run on ``node``: in its network namespace, under its host name."""
        return [
            "ip", "netns", "exec", self.netns[node], "unshare", "--uts", "sh", "-c",
            f'hostname {self.name(node)} && exec "$@"', "sh", *argv,
        ]  # fmt: skip

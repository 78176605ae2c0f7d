"""The distributed probe across two real nodes on this machine (``tests/support/nodes.py``):
two torchrun agents, each in a network namespace of its own with its own host name, joined
by a c10d rendezvous over a bridge, reading a dataset served on that bridge through links
capped with ``tc`` (a node's NIC). Where namespaces are not permitted (not root, no ``ip``
or ``tc``) the tests are skipped with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import nodes
from tests.support.cli import REPO, run_cli
from tests.support.servers import ThrottledHTTPServer, make_files

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(nodes.why_not() is not None, reason=f"two nodes: {nodes.why_not()}"),
]

CAPS = {0: 12e6, 1: 6e6}  # bytes/s each node's link receives


def probe_two_nodes(tmp_path: Path, caps: dict[int, float]) -> tuple[dict[str, Any], Path]:
    root = tmp_path / "data"
    make_files(root, 300, 128_000, seed=3, subdirs=2)
    out = tmp_path / "run.json"
    with nodes.TwoNodes(caps) as two, ThrottledHTTPServer(root, host=two.host) as server:
        port = 29_000 + os.getpid() % 1_000
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
        agents = []
        for i in range(2):
            argv = [
                sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{two.address(0)}:{port}", "--rdzv-id", "two",
                "--local-addr", two.address(i), "-m", "ioprobe", "probe", server.url,
                "--loader", "raw", "--time-budget", "8", "--json", str(out),
            ]  # fmt: skip
            agents.append(
                subprocess.Popen(
                    two.command(i, argv),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                    cwd=REPO,
                )
            )
        done = [a.communicate(timeout=240) for a in agents]
    for a, (_, err) in zip(agents, done, strict=True):
        assert a.returncode == 0, err[-3000:]
    data: dict[str, Any] = json.loads(out.read_text())
    return data, out


def test_each_node_reads_at_its_links_cap_and_the_sizing_takes_a_nodes_rate(
    tmp_path: Path,
) -> None:
    rec, path = probe_two_nodes(tmp_path, CAPS)
    dist = rec["distributed"]
    assert dist["nodes"] == 2 and dist["world_size"] == 2
    assert dist["hosts"] == ["node-a", "node-b"]
    by_host = {r["host"]: r for r in dist["ranks"]}
    assert set(by_host) == {"node-a", "node-b"}
    # payload under the link's cap: TCP and IP headers take about 3% of it
    for i, host in enumerate(("node-a", "node-b")):
        rate = by_host[host]["read_bytes_per_s"]
        assert 0.85 * CAPS[i] <= rate <= 1.02 * CAPS[i], (host, rate)
    # one node's read rate, as the sizing across nodes takes it: the best node's link
    sized = run_cli("size", str(path), "--gpus", "1", "--nodes", "4", "--gpu-samples-per-s", "200")
    assert sized.returncode == 0, sized.stderr
    text = " ".join(sized.stdout.split())
    assert "one node reads 11" in text or "one node reads 10" in text, text

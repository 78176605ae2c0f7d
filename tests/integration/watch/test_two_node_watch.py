"""A data-parallel job watched across two real nodes on this machine
(``tests/support/nodes.py``): two torchrun agents, each in a network namespace of its own
with its own host name, a c10d rendezvous and gloo over a bridge, every rank reading its
samples over HTTP from a server on that bridge. One node's link is capped with ``tc``: its
rank's loader reads at the cap and holds back the job, and the record ``gather`` brings to
rank 0 names it, its node and its cause. Skipped, with the reason, where namespaces are not
permitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread
from ioprobe.record import RunRecord
from tests.support import nodes
from tests.support.cli import REPO
from tests.support.servers import ThrottledHTTPServer, make_files

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(nodes.why_not() is not None, reason=f"two nodes: {nodes.why_not()}"),
]

CAP = 2e6  # bytes/s node 1's link receives; node 0's is not capped
FILES, SIZE, BATCH, COMPUTE_MS = 120, 128_000, 4, 20.0


def test_the_rank_on_the_capped_node_is_the_jobs_straggler_with_storage_its_cause(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    make_files(root, FILES, SIZE, seed=5)
    out = tmp_path / "job.json"
    with nodes.TwoNodes({1: CAP}) as two, ThrottledHTTPServer(root, host=two.host) as server:
        port = 29_500 + os.getpid() % 1_000
        env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "eth0"}
        agents = []
        for i in range(2):
            argv = [
                sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{two.address(0)}:{port}", "--rdzv-id", "watch",
                "--local-addr", two.address(i), "tests/fixtures/two_node_train.py",
                f"{server.url}/p0", str(FILES), str(BATCH), str(COMPUTE_MS), str(out),
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
    said = sorted(line for o, _ in done for line in o.splitlines() if line.startswith("rank "))
    # every rank read its whole share: the watch changed nothing it trained on
    total = FILES * SIZE
    assert said == [f"rank 0 on node-a: {total} bytes", f"rank 1 on node-b: {total} bytes"]
    rec = RunRecord.load(out)
    dist = rec.distributed
    assert dist is not None and dist.hosts == ["node-a", "node-b"]
    by_rank = {f.rank: f for f in dist.ranks}
    assert by_rank[0].host == "node-a" and by_rank[1].host == "node-b"
    spread = rank_spread(rec)
    assert spread is not None
    assert [(s.rank, s.host, s.cause) for s in spread.stragglers] == [(1, "node-b", "storage")]
    slow = by_rank[1]
    # the capped rank's loader delivers what its link lets through (headers take about 3%)
    assert slow.samples_per_s is not None
    assert 0.8 * CAP <= slow.samples_per_s * SIZE <= 1.02 * CAP, slow.samples_per_s * SIZE
    assert slow.bottleneck == "storage"

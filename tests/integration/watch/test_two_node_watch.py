"""A data-parallel job watched across two real nodes on this machine
(``tests/support/nodes.py``): two torchrun agents, each in a network namespace of its own
with its own host name, a c10d rendezvous and gloo over a bridge, every rank reading its
samples over HTTP from a server on that bridge. One node's link is capped with ``tc``: its
ranks' loaders read at the cap and hold back the job, and the record ``gather`` brings to
rank 0 names them, their node and the cause (storage for one rank there; the node itself
where two ranks there both stall). Skipped, with the reason, where namespaces are not
permitted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ioprobe.analysis.ranks import rank_spread, rank_verdict
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


def _agent(
    two: nodes.TwoNodes,
    node: int,
    port: int,
    url: str,
    out: str,
    head: list[str],
    tmp: Path,
    per_node: int = 1,
) -> subprocess.Popen[str]:
    """Node ``node``'s torchrun agent of the job (``per_node`` ranks, each with batches of
    ``BATCH // per_node``: as many steps whatever the ranks), behind ``head`` (``ioprobe run
    ...``), with a TMPDIR of its own."""
    argv = [
        *head, sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
        "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{two.address(0)}:{port}", "--rdzv-id", "watch",
        "--local-addr", two.address(node), "tests/fixtures/two_node_train.py",
        url, str(FILES), str(BATCH // per_node), str(COMPUTE_MS), out,
    ]  # fmt: skip
    temp = tmp / f"tmp{node}"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "eth0", "TMPDIR": str(temp)}
    return subprocess.Popen(
        two.command(node, argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


# one rank per node (9 s) runs in `make validate`: two per node takes the same path and more
@pytest.mark.parametrize(
    ("per_node", "cause"), [pytest.param(1, "storage", marks=pytest.mark.long), (2, "node")]
)
def test_the_ranks_on_the_capped_node_are_the_jobs_stragglers_with_their_cause(
    tmp_path: Path, per_node: int, cause: str
) -> None:
    # one rank on the capped node is a storage-bound straggler; with two ranks there both
    # read slowly against the other node's, so the cause is their node
    root = tmp_path / "data"
    make_files(root, FILES, SIZE, seed=5)
    out = tmp_path / "job.json"
    with nodes.TwoNodes({1: CAP}) as two, ThrottledHTTPServer(root, host=two.host) as server:
        port = 29_500 + os.getpid() % 1_000 + 2 * per_node
        url = f"{server.url}/p0"
        agents = [_agent(two, i, port, url, str(out), [], tmp_path, per_node) for i in range(2)]
        done = [a.communicate(timeout=240) for a in agents]
    for a, (_, err) in zip(agents, done, strict=True):
        assert a.returncode == 0, err[-3000:]
    said = sorted(line for o, _ in done for line in o.splitlines() if line.startswith("rank "))
    # every rank read its share, and together the job read every file once: the watch
    # changed nothing it trained on (each rank prints the job's all-reduced total)
    total = FILES * SIZE
    world = 2 * per_node
    assert len(said) == world and all(line.endswith(f": {total} bytes") for line in said), said
    rec = RunRecord.load(out)
    dist = rec.distributed
    assert dist is not None and dist.hosts == ["node-a", "node-b"]
    capped = sorted(f.rank for f in dist.ranks if f.host == "node-b")
    assert len(capped) == per_node and len(dist.ranks) == world
    spread = rank_spread(rec)
    assert spread is not None
    # the slower rank on the capped node waits on its loader; a mate there may wait in the
    # all-reduce for it instead, reading as slowly: the stragglers are the node's, named so
    found = sorted((s.rank, s.host, s.cause) for s in spread.stragglers)
    assert found and all(f in [(r, "node-b", cause) for r in capped] for f in found), found
    slow = [f for f in dist.ranks if f.host == "node-b"]
    # the capped node's loaders together deliver what its link lets through (headers take
    # about 3%), each storage-bound
    assert all(f.samples_per_s is not None for f in slow)
    through = sum(f.samples_per_s or 0.0 for f in slow) * SIZE
    assert 0.8 * CAP <= through <= 1.02 * CAP, through
    # a straggler storage-bound by its own verdict: the one that waited longest on its
    # loader (named alone, or among its node's). A mate that waits in the all-reduce has
    # that wait in its step, as long as its reads, and its verdict may tip either way, named
    # with its node or not (once in five fresh runs: [(2, 'storage'), (3, 'gpu')])
    named = {r for r, _, _ in found}
    verdicts = [(f.rank, f.bottleneck) for f in slow]
    waited = max((f for f in slow if f.rank in named), key=lambda f: f.stall_fraction or 0.0)
    assert waited.bottleneck == "storage", verdicts
    if cause == "storage":
        assert all(b == "storage" for r, b in verdicts if r in named), verdicts
    assert all(b in ("storage", "gpu") for _, b in verdicts), verdicts
    # the table shows such a mate waiting on the stragglers, not on its own GPU
    shown = [rank_verdict(f, spread) for f in slow if f.rank not in named]
    assert all(v == "storage" or v.startswith("waits on rank") for v in shown), shown


def test_a_node_killed_mid_run_leaves_the_other_nodes_record_saying_how_its_job_ended(
    tmp_path: Path,
) -> None:
    # every process of node 1 is killed mid-run: node 0's rank fails in its next all_reduce,
    # its torchrun exits 1, and ioprobe run on node 0 exits as it did, with the record of
    # what its rank measured before, saying so
    root = tmp_path / "data"
    make_files(root, FILES, SIZE, seed=5)
    with nodes.TwoNodes({1: CAP / 2}) as two, ThrottledHTTPServer(root, host=two.host) as server:
        port = 29_500 + os.getpid() % 1_000 + 1
        url = f"{server.url}/p0"
        heads = [
            [
                sys.executable,
                "-m",
                "ioprobe",
                "run",
                "--json",
                str(tmp_path / f"node{i}.json"),
                "--",
            ]
            for i in range(2)
        ]
        agents = [_agent(two, i, port, url, "-", heads[i], tmp_path) for i in range(2)]
        first = agents[0]
        assert first.stdout is not None
        deadline = time.monotonic() + 120
        line = ""
        while not line.startswith("step 2") and time.monotonic() < deadline:
            line = first.stdout.readline()
            assert line, first.stderr.read() if first.stderr else ""
        pids = subprocess.run(
            ["ip", "netns", "pids", two.netns[1]], capture_output=True, text=True, check=True
        ).stdout.split()
        for pid in pids:  # the node goes: its ioprobe, its agent, its rank, its workers
            os.kill(int(pid), signal.SIGKILL)
        _, err = first.communicate(timeout=120)
        agents[1].wait(timeout=30)
    assert first.returncode == 1, err[-3000:]
    assert "RuntimeError" in err and "all_reduce" in err  # the rank's own error, passed through
    rec = RunRecord.load(tmp_path / "node0.json")
    assert rec.watch is not None and rec.watch.rank is not None
    assert (rec.watch.rank.rank, rec.watch.rank.world_size, rec.watch.rank.nodes) == (0, 2, 2)
    batches = sum(e.batches for e in rec.watch.epochs)
    assert 3 <= batches < FILES // 2 // BATCH
    assert any("exited with code 1" in n for n in rec.notes), rec.notes
    assert "exited with code 1" in err  # the summary says it too
    assert not (tmp_path / "node1.json").exists()
    # ioprobe's temporary folder went (torchrun leaves its torchelastic_* of a failed job,
    # unwatched too)
    left = [p.name for p in (tmp_path / "tmp0").iterdir() if not p.name.startswith("torchelastic_")]
    assert left == []

"""The distributed probe's pure parts: the curve's levels, which ranks join it first, a
level's aggregate from each client's reads, and where the ranks meet."""

from __future__ import annotations

import threading
import time

import pytest

from ioprobe.collect.distributed_probe import _Level, aggregate, client_counts, client_order
from ioprobe.collect.group import (
    SLURM_PORT_BASE,
    _first_line,
    _in_use,
    _NoAnswer,
    _within,
    rendezvous,
)
from ioprobe.errors import BadInputError
from ioprobe.record import RankInfo


def _level(rank: int, mb: float, start: float, seconds: float) -> _Level:
    return _Level(
        rank=rank,
        bytes=int(mb * 1e6),
        items=10,
        seconds=seconds,
        started=start,
        ended=start + seconds,
        p50_ms=1.0,
        p99_ms=float(rank + 2),
        errors=0,
    )


@pytest.mark.parametrize(
    ("world", "counts"),
    [(2, [1, 2]), (3, [1, 2, 3]), (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12])],
)
def test_the_curve_doubles_its_clients_and_ends_with_the_whole_world(
    world: int, counts: list[int]
) -> None:
    assert client_counts(world) == counts


def test_clients_fill_every_node_once_before_any_node_twice() -> None:
    # ranks 0-3 on node 0, 4-7 on node 1, as torchrun numbers them
    nodes = [0, 0, 0, 0, 1, 1, 1, 1]
    local = [0, 1, 2, 3, 0, 1, 2, 3]
    order = client_order(nodes, local)
    assert order[:2] == [0, 4]  # two clients: one per node
    assert order[:4] == [0, 4, 1, 5]
    assert sorted(order) == list(range(8))


def test_clients_reading_together_aggregate_over_their_shared_span() -> None:
    # two clients of 100 MB/s each, started 10 ms apart: together 200 MB/s over 1.01 s
    point = aggregate(2, 1, [_level(0, 100, 10.0, 1.0), _level(1, 100, 10.01, 1.0)])
    assert point.read_bytes_per_s == pytest.approx(200e6 / 1.01)
    assert point.rank_sum_bytes_per_s == pytest.approx(200e6)
    assert point.per_client_bytes_per_s == pytest.approx(100e6 / 1.01)
    assert point.latency_p99_ms == 3.0  # the worst client's
    assert point.ranks == [0, 1]


def test_clients_that_did_not_overlap_read_less_together_than_their_sum() -> None:
    # one after the other: the span doubles and the aggregate shows it, the sum does not
    point = aggregate(2, 2, [_level(0, 100, 0.0, 1.0), _level(1, 100, 1.0, 1.0)])
    assert point.read_bytes_per_s == pytest.approx(100e6)
    assert point.rank_sum_bytes_per_s == pytest.approx(200e6)


def test_clock_skew_never_makes_a_span_shorter_than_one_clients_reads() -> None:
    # the second host's clock runs 5 s behind: its reads seem to end before the first began
    point = aggregate(2, 2, [_level(0, 100, 100.0, 1.0), _level(1, 100, 90.0, 1.0)])
    assert point.seconds >= 1.0
    assert point.read_bytes_per_s <= 200e6


def test_torchrun_ranks_meet_at_the_master_address() -> None:
    info = RankInfo(launcher="torchrun", rank=1, world_size=2)
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert rendezvous(info, env) == "tcp://10.0.0.1:29500"


def test_srun_ranks_meet_at_the_first_node_on_a_port_from_the_job_id() -> None:
    info = RankInfo(launcher="slurm", rank=3, world_size=8, node_names=["gpu07", "gpu08"])
    url = rendezvous(info, {"SLURM_JOB_ID": "123456"})
    assert url == f"tcp://gpu07:{SLURM_PORT_BASE + 123456 % 10_000}"
    # two jobs sharing a node meet on different ports
    assert url != rendezvous(info, {"SLURM_JOB_ID": "123457"})


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"MASTER_PORT": "29500"}, "MASTER_ADDR not set"),
        ({"MASTER_ADDR": "h"}, "MASTER_PORT not set"),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "http"}, "expected a port number"),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "expected a port number"),
    ],
)
def test_a_rendezvous_that_cannot_be_reached_is_named(env: dict[str, str], said: str) -> None:
    with pytest.raises(BadInputError, match=said):
        rendezvous(RankInfo(launcher="torchrun", rank=0, world_size=2), env)


def test_a_gloo_error_keeps_its_first_sentence_without_the_source_file() -> None:
    exc = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:2999. This is typically caused by a remote worker crashing. GLHF!"
    )
    assert _first_line(exc) == "Connection closed by peer [127.0.0.1]:2999"


def test_the_rendezvous_watchdog_gives_up_on_a_call_that_never_returns() -> None:
    """torch's store client waits for ever on a listener that never speaks: the group's
    start is waited for at most its deadline, and a call's own error still comes through."""
    gate = threading.Event()
    start = time.monotonic()
    with pytest.raises(_NoAnswer):
        _within(0.3, gate.wait)
    assert 0.3 <= time.monotonic() - start < 2.0
    gate.set()

    def fails() -> None:
        raise RuntimeError("connection closed by peer")

    with pytest.raises(RuntimeError, match="closed by peer"):
        _within(5.0, fails)
    got: list[int] = []
    _within(5.0, lambda: got.append(1))
    assert got == [1]


def test_a_store_that_cannot_listen_is_told_apart_from_a_timeout() -> None:
    assert _in_use(RuntimeError("The server socket has failed to listen on any local network"))
    assert _in_use(OSError("[Errno 98] Address already in use"))
    assert not _in_use(RuntimeError("The client socket has timed out after 3000ms"))

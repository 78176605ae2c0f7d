"""The cluster from a distributed record: where the clients curve saturates, what each node
holds, the figures a sizing across nodes starts from, and the ranks a short table lists.
Every curve here is built by hand, so the knee, the peak and the gains are known."""

from __future__ import annotations

import re

import pytest

from ioprobe.analysis.cluster import (
    MAX_RANK_ROWS,
    cluster_figures,
    per_node,
    rank_table,
    saturation,
)
from ioprobe.record import (
    ClientsPoint,
    CpuStage,
    DatasetProfile,
    Distributed,
    HostInfo,
    RankFigures,
    RunRecord,
    Stages,
    StorageStage,
)

GB = 1e9


def curve(points: list[tuple[int, float]], hosts: int = 2) -> list[ClientsPoint]:
    """(clients, aggregate bytes/s) points, clients spread over ``hosts`` nodes first, as the
    distributed probe places them."""
    return [
        ClientsPoint(
            clients=k,
            nodes=min(k, hosts),
            read_bytes_per_s=v,
            per_client_bytes_per_s=v / k,
            rank_sum_bytes_per_s=v,
            seconds=1.0,
            ranks=list(range(k)),
        )
        for k, v in points
    ]


def probe_record(
    points: list[tuple[int, float]],
    *,
    hosts: int = 2,
    ranks_per_host: int = 4,
    rank_read: float = 250e6,
    rank_cpu: float = 1500.0,
) -> RunRecord:
    """A distributed probe: ``ranks_per_host`` ranks on each of ``hosts`` hosts (rank r on
    host r % hosts), each reading ``rank_read`` bytes/s and decoding ``rank_cpu`` samples/s
    on 4 cores, and the clients curve ``points``."""
    world = hosts * ranks_per_host
    names = [f"node{i}" for i in range(hosts)]
    ranks = [
        RankFigures(
            rank=r,
            host=names[r % hosts],
            node=r % hosts,
            local_rank=r // hosts,
            read_bytes_per_s=rank_read,
            files_per_s=rank_read / 100e3,
            latency_p99_ms=12.0,
            cpu_samples_per_s=rank_cpu,
            cpu_seconds_per_sample=4 / rank_cpu,
            usable_cores=4,
        )
        for r in range(world)
    ]
    world_read = points[-1][1]
    return RunRecord(
        kind="probe",
        host=HostInfo(hostname=names[0]),
        # as the distributed probe fills them: storage every rank reading, CPU summed
        stages=Stages(
            storage=StorageStage(
                capacity_samples_per_s=world_read / 100e3, read_bytes_per_s=world_read
            ),
            cpu=CpuStage(
                capacity_samples_per_s=rank_cpu * world,
                cpu_seconds_per_sample=4 / rank_cpu,
                usable_cores=4 * world,
            ),
        ),
        dataset=DatasetProfile(
            target="/shared/train", files=10_000, bytes=10**9, sample_bytes_mean=100e3
        ),
        distributed=Distributed(
            launcher="torchrun",
            world_size=world,
            nodes=hosts,
            hosts=names,
            ranks=ranks,
            curve=curve(points, hosts),
            threads_per_rank=4,
        ),
    )


SATURATING = [(1, 0.6 * GB), (2, 1.2 * GB), (4, 1.9 * GB), (8, 2.0 * GB)]
SCALING = [(1, 0.6 * GB), (2, 1.2 * GB), (4, 2.2 * GB), (8, 3.2 * GB)]


def test_a_flattening_curve_saturates_at_the_fewest_clients_reading_90_percent_of_the_peak() -> (
    None
):
    s = saturation(probe_record(SATURATING))
    assert s is not None
    # 90% of the 2.0 GB/s peak is 1.8: 4 clients read 1.9, 2 read 1.2
    assert s.knee_clients == 4 and s.peak_clients == 8
    assert s.peak_bytes_per_s == 2.0 * GB
    assert s.one_client_bytes_per_s == 0.6 * GB
    assert s.saturated
    assert s.last_gain == pytest.approx(2.0 / 1.9 - 1)
    assert s.text == (
        "the shared storage saturates at 4 clients, 2 GB/s; one client alone reads 600 MB/s"
    )


def test_a_curve_still_rising_at_its_last_doubling_is_still_scaling() -> None:
    s = saturation(probe_record(SCALING))
    assert s is not None
    # 90% of 3.2 is 2.88: only the largest count reaches it
    assert s.knee_clients == 8 and not s.saturated
    assert s.last_gain == pytest.approx(3.2 / 2.2 - 1)
    assert s.text.startswith(
        "still scaling at 8 clients: 3.2 GB/s, +45% from 4; more clients would read more"
    )


def test_a_curve_that_falls_past_its_peak_is_saturated_and_says_the_drop() -> None:
    s = saturation(probe_record([(1, 1.0 * GB), (2, 2.0 * GB), (4, 1.5 * GB)]))
    assert s is not None
    assert s.saturated and s.knee_clients == 2 and s.peak_clients == 2
    assert "4 clients read less, 1.5 GB/s" in s.text


def test_a_curve_measured_on_one_node_warns_the_limit_may_be_the_nodes() -> None:
    s = saturation(probe_record(SATURATING, hosts=1, ranks_per_host=8))
    assert s is not None and s.one_node
    assert "every client ran on one node" in s.text


def test_no_saturation_without_two_client_counts() -> None:
    assert saturation(probe_record([(2, 1.0 * GB)])) is None
    plain = probe_record(SATURATING)
    plain.distributed = None
    assert saturation(plain) is None and per_node(plain) == [] and cluster_figures(plain) is None


def test_per_node_sums_each_hosts_ranks() -> None:
    rec = probe_record(SATURATING, rank_read=200e6, rank_cpu=1000.0)
    assert rec.distributed is not None
    rec.distributed.ranks[3].cpu_samples_per_s = 400.0  # rank 3 sits on node1
    nodes = per_node(rec)
    assert [(n.host, n.ranks) for n in nodes] == [("node0", 4), ("node1", 4)]
    assert nodes[0].read_bytes_per_s == pytest.approx(800e6)
    assert nodes[0].cpu_samples_per_s == pytest.approx(4000.0)
    assert nodes[1].cpu_samples_per_s == pytest.approx(3400.0)
    assert nodes[0].cores == 16


def test_cluster_figures_take_the_peak_the_best_per_node_share_and_the_slowest_nodes_cpu() -> None:
    rec = probe_record(SATURATING)
    assert rec.distributed is not None
    rec.distributed.ranks[1].cpu_samples_per_s = 500.0  # node1: 3 x 1500 + 500
    f = cluster_figures(rec)
    assert f is not None
    assert f.aggregate_bytes_per_s == 2.0 * GB
    # per node: 0.6 (1 client, 1 node), 1.2/2, 1.9/2, 2.0/2: one node reached 1.0 GB/s
    assert f.node_bytes_per_s == pytest.approx(1.0 * GB)
    assert f.node_cpu_samples_per_s == pytest.approx(5000.0)
    assert f.node_cores == 16 and f.ranks_per_node == 4 and f.hosts == 2
    assert f.clients == 8 and f.saturated


def test_a_small_world_lists_every_rank() -> None:
    t = rank_table(probe_record(SATURATING))
    assert t is not None and t.kind == "probe"
    assert [r.rank for r in t.shown] == list(range(8)) and t.rest is None


def test_a_large_probe_lists_rank_0_and_its_slowest_readers_and_summarises_the_rest() -> None:
    rec = probe_record(SATURATING, hosts=8, ranks_per_host=8)  # 64 ranks
    assert rec.distributed is not None
    for r in rec.distributed.ranks:
        r.read_bytes_per_s = 100e6 + r.rank * 1e6  # the lowest ranks read slowest
    rec.distributed.ranks[50].read_bytes_per_s = 10e6
    t = rank_table(rec)
    assert t is not None and len(t.shown) == MAX_RANK_ROWS
    shown = [r.rank for r in t.shown]
    assert shown == sorted(shown) and 0 in shown and 50 in shown
    assert shown == [0, *range(1, 15), 50]
    assert t.rest is not None and t.rest.ranks == 64 - MAX_RANK_ROWS
    assert t.rest.low == pytest.approx(115e6) and t.rest.high == pytest.approx(163e6)


def test_a_large_watch_lists_its_stragglers_and_most_stalled_ranks() -> None:
    ranks = [
        RankFigures(rank=r, host=f"h{r // 8}", node=r // 8, stall_fraction=0.02 + r * 0.001)
        for r in range(40)
    ]
    ranks[7].stall_fraction = 0.01  # named a straggler by the caller, shown whatever its stall
    rec = RunRecord(
        kind="watch",
        host=HostInfo(),
        dataset=DatasetProfile(target="t"),
        distributed=Distributed(launcher="torchrun", world_size=40, nodes=5, ranks=ranks),
    )
    t = rank_table(rec, stragglers=[7])
    assert t is not None and t.kind == "watch" and t.stragglers == [7]
    shown = [r.rank for r in t.shown]
    assert shown == [7, *range(25, 40)]
    assert t.rest is not None and t.rest.figure == "stall" and t.rest.ranks == 24
    assert t.rest.high == pytest.approx(0.02 + 24 * 0.001)


# -- the reports: terminal (pinned byte for byte), Markdown, HTML, trace ----------------------


def watch_cluster_record() -> RunRecord:
    """A watched DDP job of 4 ranks on 2 hosts, merged: rank 3's samples cost 3.1x the CPU of
    the others' and it stalls 41% of its time where they stall 4-6%; the slowest rank's data
    cost the job 11.5 s, 38% of its time."""
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import watch_record

    rec = finalize(watch_record(cpu_s=0.01, workers=2, storage=900.0, gpu=350.0, cores=8))
    rec.dataset.target = "train/"
    ranks = []
    for k in range(4):
        slow = k == 3
        ranks.append(
            RankFigures(
                rank=k,
                host=f"gpu{k // 2}",
                node=k // 2,
                local_rank=k % 2,
                samples=6400,
                wall_seconds=30.0,
                samples_per_s=150.0 if slow else 213.0,
                stall_fraction=0.41 if slow else 0.04 + 0.01 * k,
                step_ms=430.0 if slow else 300.0,
                ready_ms_p50=2.0,
                ready_ms_p95=8.0,
                ready_ms_p99=190.0 if slow else 15.0,
                worker_batch_ms_p50={"0": 610.0, "1": 590.0},
                cpu_seconds_per_sample=0.031 if slow else 0.01,
                usable_cores=8,
                bottleneck="cpu" if slow else "gpu",
            )
        )
    rec.distributed = Distributed(
        launcher="torchrun",
        world_size=4,
        nodes=2,
        hosts=["gpu0", "gpu1"],
        ranks=ranks,
        exposed_wait_seconds=11.5,
        exposed_fraction=0.38,
        steps_aligned=96,
    )
    return rec


def probe_cluster_record() -> RunRecord:
    from ioprobe.analysis import finalize

    rec = probe_record(SATURATING)
    rec.stages.storage.basis = "cold: all 8 ranks on 2 nodes reading at once"
    return finalize(rec)


def test_probe_cluster_summary_golden() -> None:
    from tests.unit.render.test_render_golden import check, shown, text

    got = text(shown(probe_cluster_record()))
    check("cluster_probe.txt", got)
    assert "The shared storage saturates at 4 clients, 2 GB/s" in got


def test_watch_cluster_summary_golden() -> None:
    from tests.unit.render.test_render_golden import check, shown, text

    got = text(shown(watch_cluster_record()))
    check("cluster_watch.txt", got)
    assert "Rank 3 (gpu1) stalls 41%" in got


def test_a_large_world_lists_sixteen_ranks_and_summarises_the_rest_in_every_short_view() -> None:
    from ioprobe.analysis.report import findings
    from ioprobe.render.markdown import render as render_markdown
    from tests.unit.render.test_render_golden import shown, text

    rec = probe_record(SATURATING, hosts=8, ranks_per_host=8)
    assert rec.distributed is not None
    for r in rec.distributed.ranks:
        r.read_bytes_per_s = 100e6 + r.rank * 1e6
    terminal = text(shown(rec), width=120)
    rows = [
        cells
        for cells in (line.split() for line in terminal.splitlines())
        if len(cells) > 1 and cells[0].isdigit() and cells[1].startswith("node")
    ]
    assert len(rows) == MAX_RANK_ROWS
    assert "48 more ranks: read 116 MB/s to 163 MB/s (median 140 MB/s)" in terminal
    md = render_markdown(rec, findings(rec))
    assert len(re.findall(r"^\| \d+ \| node", md, re.M)) == MAX_RANK_ROWS
    assert "48 more ranks" in md


def test_html_lists_every_rank_draws_the_curve_and_stays_deterministic() -> None:
    from ioprobe.analysis.report import findings
    from ioprobe.render.html import render as render_html

    rec = probe_cluster_record()
    page = render_html(rec, findings(rec))
    assert page == render_html(rec, findings(rec))
    section = page[page.index('<div id="ranks">') :]
    section = section[: section.index("</table>")]
    assert section.count("<tr>") == 1 + 8  # the heading and a row per rank
    assert 'aria-label="MB/s vs clients reading at once"' in page
    assert 'aria-label="read MB/s by rank"' in page

    watch = watch_cluster_record()
    page = render_html(watch, findings(watch))
    assert page.count("<tr class=straggler>") == 1
    assert 'aria-label="stall % by rank"' in page
    assert "Rank 3 (gpu1) stalls 41%" in page


def test_html_escapes_a_hostile_host_name() -> None:
    from ioprobe.analysis.report import findings
    from ioprobe.render.html import render as render_html

    rec = probe_cluster_record()
    assert rec.distributed is not None
    rec.distributed.ranks[1].host = "<img src=x onerror=alert(1)>"
    page = render_html(rec, findings(rec))
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_trace_has_a_process_per_rank_with_its_figures() -> None:
    import json

    from ioprobe.analysis.report import findings
    from ioprobe.render.trace import RANK_PID
    from ioprobe.render.trace import render as render_trace

    rec = probe_cluster_record()
    events = json.loads(render_trace(rec, findings(rec)))["traceEvents"]
    names = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert {names[RANK_PID + r] for r in range(8)} == {f"rank {r} (node{r % 2})" for r in range(8)}
    # rank 3 read in the levels of 4 and 8 clients (ranks 0..k-1 read with k clients)
    mine = [ev for ev in events if ev["pid"] == RANK_PID + 3 and ev["ph"] == "X"]
    assert [ev["name"] for ev in mine] == ["4 clients reading", "8 clients reading"]
    assert mine[-1]["args"]["read_mb_per_s"] == 250.0
    # each level took a second: 4 clients read from 2 s, 8 from 3 s
    assert [ev["ts"] for ev in mine] == [2e6, 3e6]

    watch = watch_cluster_record()
    events = json.loads(render_trace(watch, findings(watch)))["traceEvents"]
    slow = [ev for ev in events if ev["pid"] == RANK_PID + 3]
    assert any(ev["name"] == "rank 3: straggler (cpu)" for ev in slow)
    stall = [ev["args"]["stall %"] for ev in slow if ev["ph"] == "C"]
    assert stall == [41.0, 41.0]


def test_a_probe_across_nodes_speaks_of_cores_per_node_not_one_machine() -> None:
    from ioprobe.analysis import finalize
    from ioprobe.analysis.scenario import node_cores
    from ioprobe.render.facts import stage_detail

    rec = probe_record(SATURATING)
    # node1 loses two of its ranks: 4 ranks of 4 cores on node0, 2 on node1
    assert rec.distributed is not None
    rec.distributed.ranks = [r for r in rec.distributed.ranks if r.rank not in (5, 7)]
    rec.stages.cpu.usable_cores = 24
    assert node_cores(rec) == [16.0, 8.0]
    judged = finalize(rec)
    more = next(r for r in judged.recommendations if r.kind == "more_cpu")
    assert "cores (" in more.text and " per node) of loader workers" in more.text
    assert "the 2 nodes give 16, 8" in more.text and "this machine" not in more.text
    assert stage_detail(judged, "cpu").endswith("24 usable cores (per node 16, 8)")
    # one machine's probe keeps its own words
    alone = probe_record(SATURATING)
    alone.distributed = None
    assert node_cores(alone) == []
    assert "this machine gives 32" in next(
        r.text for r in finalize(alone).recommendations if r.kind == "more_cpu"
    )

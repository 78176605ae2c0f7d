"""Sizing across nodes from a distributed probe: how many nodes of G GPUs the measured shared
storage feeds and what binds the next one, checked against hand computation on records whose
curve and per-node figures the test sets.

The standard record: 2 nodes of 4 ranks, samples of 100 kB, a clients curve that saturates at
2.0 GB/s (20,000 samples/s for every node together; one node reached 1.0 GB/s, 10,000
samples/s) and each rank decoding 1,500 samples/s (6,000 per node).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ioprobe.analysis.catalog import load_catalog
from ioprobe.analysis.cluster import cluster_figures
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.size import MEASURED, nodes_fed, ordinal, size, stages_for
from ioprobe.record import RunRecord, SizeInputs, StorageClassInfo
from tests.support.cli import run_cli
from tests.unit.analysis.test_cluster import GB, SATURATING, SCALING, probe_record

R = 500.0  # samples/s one GPU trains on


def inputs(**kw: object) -> SizeInputs:
    base = SizeInputs(sample_bytes=100e3, gpu_samples_per_s=R, node_cpu_samples_per_s=6000.0)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def sized(rec: RunRecord, inp: SizeInputs, gpus: list[int]) -> RunRecord:
    return size(inp, [load_catalog()["nfs-25gbe"]], gpus, rec, gpus)


def measured(out: RunRecord) -> StorageClassInfo:
    assert out.sizing is not None
    return next(c for c in out.sizing.storage if c.name == MEASURED)


def test_eight_gpu_nodes_fed_until_the_shared_aggregate_runs_out() -> None:
    # 90% of 8 GPUs x 500 = 3,600 samples/s per node; 20,000 / 3,600 = 5.6: 5 nodes, and
    # with a 6th every node gets 20,000 / 6 = 3,333 of its 4,000 (83%)
    out = sized(probe_record(SATURATING), inputs(), [8])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    assert (fit.gpus, fit.nodes, fit.next_bound) == (8, 5, "storage")
    assert fit.next_utilization == pytest.approx(20_000 / 24_000)
    assert fit.text == "This storage feeds 5 nodes of 8 GPUs at 90%; the 6th is storage-bound."
    assert out.recommendations[0].kind == "nodes" and out.recommendations[0].text == fit.text
    # the grid's measured row agrees: one node of 8 GPUs is fed in full
    row = next(r for r in out.sizing.rows if r.storage == MEASURED)
    assert row.gpu_utilization == 1.0


def test_the_gpu_count_defaults_to_the_ranks_the_probe_ran_per_node() -> None:
    # 4 GPUs per node: 90% of 2,000 is 1,800; 20,000 / 1,800 = 11.1
    out = size(inputs(), [load_catalog()["nfs-25gbe"]], [1, 2, 4, 8], probe_record(SATURATING))
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    assert (fit.gpus, fit.nodes) == (4, 11)
    assert "the 12th is storage-bound" in fit.text


def test_nodes_asked_beyond_what_the_storage_feeds_are_named_with_their_utilisation() -> None:
    out = sized(probe_record(SATURATING), inputs(nodes=8), [8])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    # 8 nodes x 8 GPUs x 500 = 32,000 wanted, 20,000 read
    assert fit.asked_nodes == 8 and fit.asked_utilization == pytest.approx(20_000 / 32_000)
    assert fit.asked_bound == "storage"
    assert "8 nodes would run at 62%, storage-bound." in fit.text
    within = sized(probe_record(SATURATING), inputs(nodes=3), [8]).sizing
    assert within is not None and within.cluster is not None
    assert "3 nodes run at 100%." in within.cluster.fits[0].text


def test_a_node_whose_cores_cannot_feed_its_gpus_feeds_no_node_and_says_cpu() -> None:
    # 16 GPUs: 90% of 8,000 is 7,200, and a node's ranks decode 6,000 (75%)
    out = sized(probe_record(SATURATING), inputs(), [16])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    assert (fit.nodes, fit.next_bound) == (0, "cpu")
    assert fit.next_utilization == pytest.approx(0.75)
    assert "feeds no node of 16 GPUs at 90%" in fit.text
    assert "its ranks decode 6,000 samples/s; 16 GPUs at 90% need 7,200" in fit.text


def test_a_slow_nic_binds_within_the_node() -> None:
    # a 300 MB/s NIC carries 3,000 samples/s: 8 GPUs at 90% want 3,600
    out = sized(probe_record(SATURATING), inputs(nic_bytes_per_s=300e6), [8])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    assert (fit.nodes, fit.next_bound) == (0, "storage")
    assert "its NIC carries 300 MB/s; the GPUs need 360 MB/s" in fit.text


def test_one_nodes_own_read_rate_caps_each_node() -> None:
    # per node 1.0 GB/s = 10,000 samples/s: 24 GPUs at 90% want 10,800 though the CPU would
    # keep up (given 20,000 per node)
    out = sized(probe_record(SATURATING), inputs(node_cpu_samples_per_s=20_000.0), [24])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    assert (fit.nodes, fit.next_bound) == (0, "storage")
    assert "one node reads 1 GB/s; the GPUs need 1.08 GB/s" in fit.text
    # the grid's row for 3 nodes: each capped at 1.0 GB/s, together at 2.0
    row_inp = inputs(nodes=3)
    storage = stages_for(measured(out), 1, row_inp).storage.capacity_samples_per_s
    assert storage == pytest.approx(20_000.0)
    row_inp = inputs(nodes=1)
    storage = stages_for(measured(out), 1, row_inp).storage.capacity_samples_per_s
    assert storage == pytest.approx(10_000.0)


def test_a_curve_still_scaling_makes_the_count_a_lower_bound() -> None:
    out = sized(probe_record(SCALING), inputs(), [8])
    assert out.sizing is not None and out.sizing.cluster is not None
    c = out.sizing.cluster
    assert not c.saturated and c.aggregate_bytes_per_s == 3.2 * GB
    # 32,000 / 3,600 = 8.9
    assert c.fits[0].nodes == 8
    assert "still scaling at 8 clients" in c.fits[0].text and "lower bound" in c.fits[0].text


def test_a_curve_from_one_node_makes_more_nodes_a_lower_bound() -> None:
    out = sized(probe_record(SATURATING, hosts=1, ranks_per_host=8), inputs(), [8])
    assert out.sizing is not None and out.sizing.cluster is not None
    (fit,) = out.sizing.cluster.fits
    # the curve cannot tell the node's limit from the storage's: the 2.0 GB/s one node
    # read is taken as all the nodes get together, 20,000 / 3,600 = 5.6
    assert fit.nodes == 5
    assert "Every client ran on one node" in fit.text and "lower bound" in fit.text


@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 12, 16])
def test_nodes_fed_agrees_with_the_model_at_n_and_n_plus_1(gpus: int) -> None:
    rec = probe_record(SATURATING)
    inp = inputs()
    out = sized(rec, inp, [gpus])
    cls = measured(out)
    n = nodes_fed(cls, gpus, inp)

    def util(k: int) -> float:
        return (
            pipeline_model(stages_for(cls, gpus, dataclasses.replace(inp, nodes=k))).gpu_utilization
            or 0.0
        )

    assert n == 0 or util(n) >= 0.9 - 1e-12
    assert util(n + 1) < 0.9


def test_a_single_node_record_keeps_todays_sizing_and_says_the_aggregate_is_assumed() -> None:
    rec = probe_record(SATURATING)
    rec.distributed = None
    inp = inputs(node_cpu_samples_per_s=None, nodes=4)
    cat = load_catalog()
    classes = [cat["nfs-25gbe"], cat["nvme-gen4"]]
    from_record = size(inp, classes, [1, 8], rec)
    from_numbers = size(inp, classes, [1, 8])
    assert from_record.sizing is not None and from_numbers.sizing is not None
    assert from_record.sizing.rows == from_numbers.sizing.rows
    assert from_record.sizing.cluster is None
    assert any("assumed, not measured" in a for a in from_record.sizing.assumptions)
    assert not any("assumed, not measured" in a for a in from_numbers.sizing.assumptions)


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 7, 11, 12, 13, 21, 22, 103, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "7th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "103rd",
        "111th",
    ]


def test_size_of_a_distributed_probe_from_the_command_line(tmp_path: Path) -> None:
    rec = probe_record(SATURATING)
    run = tmp_path / "cluster.json"
    rec.save(run)
    out = tmp_path / "size.json"
    proc = run_cli(
        "size",
        str(run),
        "--gpu-samples-per-s",
        "500",
        "--gpus",
        "8",
        "--nodes",
        "8",
        "--storage",
        "nfs-25gbe",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "This storage feeds 5 nodes of 8 GPUs at 90%; the 6th is storage-bound." in text
    assert "8 nodes would run at 62%, storage-bound." in text
    data = json.loads(out.read_text())
    sizing = data["sizing"]
    assert sizing["cluster"]["fits"][0]["nodes"] == 5
    # a node is what the sizing repeats: its cores and its CPU, not the job's sums
    assert sizing["inputs"]["cores"] == 16
    assert sizing["inputs"]["node_cpu_samples_per_s"] == 6000.0
    assert cluster_figures(rec) is not None

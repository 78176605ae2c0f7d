"""Sizing in MLPerf Storage's units, density guidance, published reference points and
prices: each against figures worked by hand, and the units against `whatif` on a run."""

from __future__ import annotations

import math
import re
import tomllib
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ioprobe.analysis.catalog import load_catalog, read_rate, resolve_storage
from ioprobe.analysis.cost import parse_costs
from ioprobe.analysis.density import density_guide
from ioprobe.analysis.mlperf import parse_references, place, shipped_references
from ioprobe.analysis.size import MAX_GPUS, class_units, size
from ioprobe.analysis.whatif import whatif
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Change,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    ProbeSettings,
    RunRecord,
    SizeInputs,
    Stages,
    StorageClassInfo,
    StoragePass,
    StorageStage,
)

MIB = 1 << 20


def given_rate(text: str) -> StorageClassInfo:
    return resolve_storage(text, {})


# -- MLPerf Storage units ---------------------------------------------------------------------


def test_storage_alone_keeps_8_accelerators_of_110_kb_at_2000_mb_s() -> None:
    # 2000e6 / 110e3 = 18,182 samples/s: 8 accelerators at 2,500 each are fed 90.9%
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    u = class_units(given_rate("2000MB/s"), inp)
    assert (u.accelerators, u.storage_accelerators, u.binds) == (8, 8, "storage")
    assert u.au == pytest.approx(2000e6 / 110e3 / 20000, rel=1e-9)
    assert u.samples_per_s == pytest.approx(2000e6 / 110e3, rel=1e-9)
    assert u.mib_per_s == pytest.approx(2000e6 / MIB, rel=1e-9)


def test_host_cpu_binds_before_storage_and_is_named() -> None:
    # 40 cores / 4 ms = 10,000 samples/s: 4 accelerators (100%), 5 would be 80%
    inp = SizeInputs(
        sample_bytes=110e3, gpu_samples_per_s=2500.0, cpu_seconds_per_sample=0.004, cores=40
    )
    u = class_units(given_rate("2000MB/s"), inp)
    assert (u.accelerators, u.storage_accelerators, u.binds) == (4, 8, "cpu")
    assert u.cores_per_node == pytest.approx(4 * 2500 * 0.004)
    assert u.mib_per_s == pytest.approx(10_000 * 110e3 / MIB)


def test_host_nic_binds_before_storage_and_is_named() -> None:
    # a 1 GB/s NIC carries 9,091 samples/s: 4 accelerators at 90.9%
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0, nic_bytes_per_s=1e9)
    u = class_units(given_rate("2000MB/s"), inp)
    assert (u.accelerators, u.storage_accelerators, u.binds) == (4, 8, "nic")
    assert u.node_bytes_per_s == pytest.approx(1e9)


def test_accelerators_count_every_node() -> None:
    # local NVMe is one per node: 3 nodes keep three times one node's accelerators
    gen4 = load_catalog()["nvme-gen4"]
    one = class_units(gen4, SizeInputs(sample_bytes=1e6, gpu_samples_per_s=500.0))
    three = class_units(gen4, SizeInputs(sample_bytes=1e6, gpu_samples_per_s=500.0, nodes=3))
    assert three.accelerators == 3 * one.accelerators > 0
    assert three.samples_per_s == pytest.approx(3 * one.samples_per_s)


def run_record(
    size_b: float, per_gpu: float, cpu_s: float, cores: int, in_flight: int
) -> RunRecord:
    """A probe of one GPU: storage read at ``in_flight`` reads, CPU at ``cores`` cores of
    ``cpu_s`` a sample, a GPU stage of ``per_gpu`` samples/s."""
    return RunRecord(
        kind="probe",
        host=HostInfo(usable_cores=cores),
        dataset=DatasetProfile(
            target="t", files=1000, bytes=int(1000 * size_b), sample_bytes_mean=size_b
        ),
        stages=Stages(
            storage=StorageStage(
                capacity_samples_per_s=1e9 / size_b,
                read_bytes_per_s=1e9,
                cold=StoragePass(cache="cold", best_concurrency=in_flight, read_bytes_per_s=1e9),
            ),
            cpu=CpuStage(
                capacity_samples_per_s=cores / cpu_s,
                cpu_seconds_per_sample=cpu_s,
                usable_cores=cores,
            ),
            gpu=GpuStage(capacity_samples_per_s=per_gpu, method="given"),
        ),
        settings=ProbeSettings(gpus=1, workers=cores),
    )


def _whatif_util(rec: RunRecord, cls: StorageClassInfo, gpus: int) -> tuple[float, float]:
    w = whatif(rec, Change(storage=cls, gpus=gpus), catalog={})
    assert w.gpu_idle_fraction is not None
    return 1.0 - w.gpu_idle_fraction, w.predicted_samples_per_s


@settings(max_examples=40, deadline=None)
@given(
    size_b=st.floats(4e3, 64e6),
    per_gpu=st.floats(5.0, 2e4),
    cpu_ms=st.floats(0.05, 50.0),
    cores=st.integers(1, 128),
    in_flight=st.integers(1, 128),
    cls_name=st.sampled_from([*load_catalog(), "3GB/s"]),
)
def test_units_agree_with_whatif_for_the_same_configuration(
    size_b: float, per_gpu: float, cpu_ms: float, cores: int, in_flight: int, cls_name: str
) -> None:
    """The accelerators a class keeps in MLPerf units are exactly where `whatif` on the same
    run, with that class and that many GPUs, stays at the target and one more falls below;
    the samples/s and MiB/s are what `whatif` predicts there."""
    rec = run_record(size_b, per_gpu, cpu_ms / 1e3, cores, in_flight)
    cls = load_catalog().get(cls_name) or given_rate(cls_name)
    inp = SizeInputs(
        sample_bytes=size_b,
        gpu_samples_per_s=per_gpu,
        cpu_seconds_per_sample=cpu_ms / 1e3,
        cores=float(cores),
        in_flight=in_flight,
    )
    u = size(inp, [cls], [1]).sizing.units[0]  # type: ignore[union-attr]
    n = u.accelerators
    if n:
        util, predicted = _whatif_util(rec, cls, n)
        assert util >= 0.9 - 1e-9
        assert u.samples_per_s == pytest.approx(predicted, rel=1e-9)
        assert u.mib_per_s == pytest.approx(predicted * size_b / MIB, rel=1e-9)
    if n < MAX_GPUS:
        assert _whatif_util(rec, cls, n + 1)[0] < 0.9


# -- density --------------------------------------------------------------------------------


def test_small_samples_are_request_bound_on_a_disk_and_an_object_store() -> None:
    cat = load_catalog()
    g = density_guide(
        SizeInputs(sample_bytes=16e3, gpu_samples_per_s=1000.0), list(cat.values()), 8
    )
    rows = {r.storage: r for r in g.rows}
    assert g.density == "low"
    # the disk: 168 IOPS x 16 kB, a thousandth of its 285 MB/s
    assert rows["hdd"].limit == "iops"
    hdd = cat["hdd"]
    assert rows["hdd"].bytes_per_s == pytest.approx(read_rate(hdd, 16e3, 64))
    assert rows["hdd"].share_of_bandwidth < 0.02
    # an object store: 64 connections of 30 ms each, far below 64 x 85 MB/s
    assert rows["object-storage"].limit == "latency"
    assert rows["object-storage"].share_of_bandwidth < 0.01
    assert rows["nvme-gen4"].share_of_bandwidth > rows["hdd"].share_of_bandwidth
    assert g.target_bytes_per_s == pytest.approx(1000 * 0.9 * 16e3)
    # the contrast is a large sample, where every local device reaches its bandwidth
    assert g.contrast_bytes >= 1 << 20
    assert all(r.limit == "bandwidth" for r in g.contrast_rows if r.storage != "object-storage")


def test_large_samples_are_bandwidth_bound_and_contrast_with_small_ones() -> None:
    g = density_guide(
        SizeInputs(sample_bytes=140e6, gpu_samples_per_s=3.0), list(load_catalog().values()), 8
    )
    assert g.density == "high"
    assert all(r.limit == "bandwidth" and r.share_of_bandwidth > 0.9 for r in g.rows)
    assert g.contrast_bytes < 1 << 20
    assert any(r.limit != "bandwidth" for r in g.contrast_rows)


# -- reference points -----------------------------------------------------------------------


def test_shipped_references_are_cited_and_each_accelerator_reads_what_its_workload_asks() -> None:
    refs = shipped_references()
    assert {r.workload for r in refs} >= {"unet3d", "resnet50", "cosmoflow", "retinanet"}
    assert {(r.version, r.accelerator) for r in refs} >= {("v1.0", "H100"), ("v3.0", "B200")}
    text = resources.files("ioprobe").joinpath("data/mlperf_storage.toml").read_text("utf-8")
    workloads = tomllib.loads(text)["workloads"]
    for r in refs:
        assert r.source.startswith("https://")
        assert r.accelerators > 0 and r.sample_bytes > 0
        # every result holds its workload's AU, so each simulated accelerator reads about
        # batch x record length / step x AU of its type's config: a figure converted wrong
        # (MiB/s left as GB/s, a digit lost) or put under the wrong workload or type is off
        w = workloads[r.workload]
        step = w[f"compute_s_{r.accelerator.lower()}"]
        need = w["batch_size"] * w["sample_bytes"] / step * w["au_threshold"]
        assert r.bytes_per_s / r.accelerators == pytest.approx(need, rel=0.12), r.system


def test_a_node_need_is_placed_beside_the_nearest_workload_first() -> None:
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    placed = place(inp, shipped_references(), 8)
    # 8 x 2,500 x 0.9 x 110 kB = 1.98 GB/s a node
    assert placed.node_bytes_per_s == pytest.approx(1.98e9)
    assert placed.points[0].workload == "resnet50"
    for p in placed.points:
        assert p.nodes_fed == pytest.approx(p.bytes_per_s / 1.98e9)
    big = place(SizeInputs(sample_bytes=140e6, gpu_samples_per_s=3.0), shipped_references(), 8)
    assert big.points[0].workload == "unet3d"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("results = [", "not valid TOML"),
        ("x = 1", "expected [[results]]"),
        ('[[results]]\nsystem = "s"', "results[0].version"),
        (
            '[[results]]\nsystem="s"\nversion="v1"\ndivision="closed"\nworkload="w"\n'
            'accelerator="H100"\naccelerators=0\nGBps=1.0\nsource="u"',
            "results[0].accelerators",
        ),
    ],
)
def test_a_broken_reference_file_is_one_clear_error(text: str, what: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(what)):
        parse_references(text, "refs.toml")


# -- prices ---------------------------------------------------------------------------------

PRICES = 'currency = "USD"\ngpu = 30000\ncore = 100\n[storage]\n'


def test_a_configuration_costs_its_gpus_cores_and_storage() -> None:
    costs = parse_costs(PRICES + '"2000MB/s" = 5000\n', "p.toml")
    inp = SizeInputs(
        sample_bytes=110e3,
        gpu_samples_per_s=2500.0,
        cpu_seconds_per_sample=0.004,
        cores=64,
        nodes=2,
    )
    rec = size(inp, [given_rate("2000MB/s")], [4], costs=costs)
    assert rec.sizing is not None
    row = rec.sizing.rows[0]
    # 4 GPUs x 2 nodes, 40 cores each (4 x 2,500 x 4 ms) x 2 nodes, and a plain rate is shared
    assert row.cost == pytest.approx(8 * 30000 + 40 * 2 * 100 + 5000)
    assert row.cost_per_sample_per_s == pytest.approx(row.cost / row.predicted_samples_per_s)


def test_cheapest_balanced_is_the_cheapest_by_price_not_by_tier() -> None:
    cat = load_catalog()
    classes = [cat["nvme-gen3"], cat["nvme-gen5"]]
    inp = SizeInputs(sample_bytes=1e6, gpu_samples_per_s=300.0)
    by_tier = size(inp, classes, [8])
    assert by_tier.sizing is not None and by_tier.sizing.cheapest is not None
    assert by_tier.sizing.cheapest.storage == "nvme-gen3"
    # the same two classes, gen3 priced above gen5: the cheapest is gen5
    costs = parse_costs(PRICES + "nvme-gen3 = 9000\nnvme-gen5 = 2000\n", "p.toml")
    priced = size(inp, classes, [8], costs=costs)
    assert priced.sizing is not None and priced.sizing.cheapest is not None
    assert priced.sizing.cheapest.storage == "nvme-gen5"
    assert priced.sizing.cheapest.cost == pytest.approx(8 * 30000 + 2000)
    assert (
        "240,000" not in priced.sizing.cheapest.text
        and "242,000 USD" in priced.sizing.cheapest.text
    )


def test_an_unpriced_class_is_left_out_of_the_cheapest() -> None:
    cat = load_catalog()
    costs = parse_costs(PRICES + "nvme-gen5 = 2000\n", "p.toml")
    rec = size(
        SizeInputs(sample_bytes=1e6, gpu_samples_per_s=300.0),
        [cat["nvme-gen3"], cat["nvme-gen5"]],
        [8],
        costs=costs,
    )
    assert rec.sizing is not None and rec.sizing.cheapest is not None
    assert rec.sizing.cheapest.storage == "nvme-gen5"
    assert {r.storage: r.cost for r in rec.sizing.rows}["nvme-gen3"] is None


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("gpu = -1", "gpu must be a price"),
        ("gpu = nan", "gpu must be a price"),
        ("core = inf", "core must be a price"),
        ("gpus = 3", "unknown keys gpus"),
        ("storage = 3", "storage must be a table"),
        ("[storage]\nnvme-gen4 = true", "storage.nvme-gen4 must be a price"),
        ("currency = 3", "currency must be a string"),
        ("gpu = ", "not valid TOML"),
    ],
)
def test_a_bad_price_file_is_one_clear_error(text: str, what: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(what)):
        parse_costs(text, "p.toml")


def test_units_price_the_accelerators_each_class_keeps() -> None:
    costs = parse_costs(PRICES + '"2000MB/s" = 5000\n', "p.toml")
    rec = size(
        SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0),
        [given_rate("2000MB/s")],
        [1],
        costs=costs,
    )
    assert rec.sizing is not None
    u = rec.sizing.units[0]
    assert u.accelerators == 8
    assert u.cost == pytest.approx(8 * 30000 + 5000)
    assert u.cost_per_sample_per_s == pytest.approx(u.cost / u.samples_per_s)
    assert math.isclose(u.samples_per_s, 2000e6 / 110e3, rel_tol=1e-9)

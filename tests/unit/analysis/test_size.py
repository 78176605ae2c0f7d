"""Sizing: the analytic case, agreement with the model row by row, and multi-node limits."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ioprobe.analysis.catalog import load_catalog, resolve_storage
from ioprobe.analysis.model import pipeline_model
from ioprobe.analysis.size import MAX_GPUS, gpus_supported, size, stages_for
from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord, SizeInputs, StorageClassInfo


def given_rate(text: str) -> StorageClassInfo:
    return resolve_storage(text, {})


def test_analytic_case_2000_mb_s_110_kb_2500_per_gpu_keeps_8_gpus_at_90_percent() -> None:
    # 2000e6 / 110e3 = 18,182 samples/s; 8 GPUs want 20,000 (91% fed), 9 want 22,500 (81%)
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    rec = size(inp, [given_rate("2000MB/s")], [1, 2, 4, 8, 16])
    assert rec.kind == "size"
    assert rec.gpus_supported == {"2000MB/s": 8}
    assert rec.sizing is not None
    by_gpus = {r.gpus: r for r in rec.sizing.rows}
    assert by_gpus[8].gpu_utilization == pytest.approx(18181.8 / 20000, rel=1e-4)
    assert by_gpus[4].gpu_utilization == 1.0 and by_gpus[4].bottleneck == "gpu"
    assert by_gpus[16].bottleneck == "storage"
    assert rec.sizing.cheapest is not None and rec.sizing.cheapest.gpus == 8
    assert "No class keeps 16 GPUs" in rec.sizing.cheapest.text
    assert "2000MB/s with 8 GPUs per node" in rec.sizing.cheapest.text
    assert "storage binds beyond that" in rec.sizing.cheapest.text


def test_cpu_binds_when_cores_are_short_and_cores_needed_is_reported() -> None:
    inp = SizeInputs(
        sample_bytes=110e3, gpu_samples_per_s=2500.0, cpu_seconds_per_sample=0.004, cores=16
    )
    rec = size(inp, [given_rate("100GB/s")], [1, 2, 4])
    assert rec.sizing is not None
    rows = {r.gpus: r for r in rec.sizing.rows}
    # 16 cores / 4 ms = 4,000 samples/s: one GPU fed, two are not
    assert rows[1].bottleneck == "gpu"
    assert rows[2].bottleneck == "cpu" and rows[2].gpu_utilization == pytest.approx(0.8)
    assert rows[4].cores_needed == pytest.approx(40.0)
    assert rec.gpus_supported == {"100GB/s": 1}


def test_static_and_lru_cache_needed_to_close_a_storage_gap() -> None:
    inp = SizeInputs(sample_bytes=1e6, gpu_samples_per_s=1000.0, dataset_bytes=1e12)
    rec = size(inp, [given_rate("500MB/s")], [1])
    assert rec.sizing is not None
    (row,) = rec.sizing.rows
    # storage gives 500/s of 1000: half the reads must hit
    assert row.cache_bytes_static == pytest.approx(0.5e12)
    assert row.cache_bytes_lru is not None and row.cache_bytes_lru > row.cache_bytes_static


def test_multi_node_local_storage_adds_up_a_shared_filer_does_not() -> None:
    cat = load_catalog()
    one = SizeInputs(sample_bytes=1e6, gpu_samples_per_s=500.0)
    four = dataclasses.replace(one, nodes=4)
    nvme, nfs = cat["nvme-gen4"], cat["nfs-25gbe"]
    rows = {
        (cls.name, inp.nodes): size(inp, [cls], [1]).sizing.rows[0].storage_samples_per_s  # type: ignore[union-attr]
        for cls in (nvme, nfs)
        for inp in (one, four)
    }
    assert rows[("nvme-gen4", 4)] == pytest.approx(4 * rows[("nvme-gen4", 1)])
    assert rows[("nfs-25gbe", 4)] == pytest.approx(rows[("nfs-25gbe", 1)], rel=0.01)
    # a per-node NIC caps what each node pulls from a network store
    slow_nic = dataclasses.replace(four, nic_bytes_per_s=100e6)
    capped = size(slow_nic, [nfs], [1]).sizing.rows[0].storage_samples_per_s  # type: ignore[union-attr]
    assert capped == pytest.approx(4 * 100e6 / 1e6)


def test_bad_inputs_are_clear_errors() -> None:
    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    with pytest.raises(BadInputError, match="at least 1"):
        size(inp, [given_rate("1GB/s")], [0])
    with pytest.raises(BadInputError, match="target-utilization"):
        size(dataclasses.replace(inp, target_utilization=1.5), [given_rate("1GB/s")], [1])


inputs = st.builds(
    SizeInputs,
    sample_bytes=st.floats(1e3, 64e6),
    gpu_samples_per_s=st.floats(1.0, 1e5),
    cpu_seconds_per_sample=st.one_of(st.none(), st.floats(1e-5, 0.1)),
    cores=st.one_of(st.none(), st.floats(1, 256)),
    nodes=st.integers(1, 8),
    target_utilization=st.floats(0.05, 1.0),
    in_flight=st.integers(1, 256),
)


@given(inputs, st.lists(st.integers(1, 128), min_size=1, max_size=5, unique=True))
def test_size_agrees_with_the_model_row_by_row(inp: SizeInputs, gpus: list[int]) -> None:
    classes = [*load_catalog().values(), given_rate("3GB/s")]
    rec = size(inp, classes, sorted(gpus))
    assert rec.sizing is not None
    for row in rec.sizing.rows:
        cls = next(c for c in classes if c.name == row.storage)
        f = pipeline_model(stages_for(cls, row.gpus, inp))
        assert row.predicted_samples_per_s == f.predicted_samples_per_s
        assert row.bottleneck == f.bottleneck
        assert 0.0 <= row.gpu_utilization <= 1.0
    assert rec.gpus_supported is not None
    for cls in classes:
        n = rec.gpus_supported[cls.name]
        assert n == 0 or _util(cls, n, inp) >= inp.target_utilization - 1e-12
        assert n == MAX_GPUS or _util(cls, n + 1, inp) < inp.target_utilization
        assert n == gpus_supported(cls, inp)


def _util(cls: StorageClassInfo, gpus: int, inp: SizeInputs) -> float:
    return pipeline_model(stages_for(cls, gpus, inp)).gpu_utilization or 0.0


def test_size_record_round_trips_and_has_the_contract_keys() -> None:
    from tests.support.contract import CONTRACT_KEYS

    inp = SizeInputs(sample_bytes=110e3, gpu_samples_per_s=2500.0)
    rec = size(inp, list(load_catalog().values()), [1, 8])
    data = rec.to_json()
    assert CONTRACT_KEYS | {"gpus_supported"} <= data.keys()
    assert RunRecord.from_json(data) == rec

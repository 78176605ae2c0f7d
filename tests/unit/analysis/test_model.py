from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ioprobe.analysis import finalize, pipeline_model
from ioprobe.analysis.recommend import NEEDS_HARDWARE, needs_hardware
from ioprobe.record import (
    CpuStage,
    DatasetProfile,
    GpuInfo,
    GpuStage,
    HostInfo,
    PcieStage,
    RunRecord,
    Stages,
    StoragePass,
    StorageStage,
)

caps = st.one_of(st.none(), st.floats(min_value=0.1, max_value=1e7))


def stages(
    storage: float | None, cpu: float | None, pcie: float | None, gpu: float | None
) -> Stages:
    return Stages(
        storage=StorageStage(capacity_samples_per_s=storage),
        cpu=CpuStage(
            capacity_samples_per_s=cpu, cpu_seconds_per_sample=0.002, usable_cores=2, loader="image"
        ),
        pcie=PcieStage(capacity_samples_per_s=pcie),
        gpu=GpuStage(capacity_samples_per_s=gpu),
    )


@given(st.floats(0.1, 1e7), caps, caps, caps)
def test_bottleneck_is_the_smallest_measured_capacity(
    s: float, c: float | None, p: float | None, g: float | None
) -> None:
    f = pipeline_model(stages(s, c, p, g))
    measured = [v for v in (s, c, p, g) if v is not None]
    assert f.predicted_samples_per_s == min(measured)
    assert f.capacities[f.bottleneck] == min(measured)
    if g is not None:
        assert f.gpu_utilization is not None and 0.0 <= f.gpu_utilization <= 1.0
    assert all(h >= 0 for h in f.headroom.values())


def test_unmeasured_stages_are_named_in_the_assumptions() -> None:
    f = pipeline_model(stages(100.0, 50.0, None, None))
    assert f.bottleneck == "cpu"
    assert any("pcie, gpu" in a for a in f.assumptions)


def record(storage: float, cpu: float, gpu: float | None) -> RunRecord:
    """A probe on 2 cores at 2 ms of CPU per sample (1,000 samples/s at most), with the CPU
    capacity given separately so a test can make it the bottleneck."""
    st_ = stages(storage, cpu, None, gpu)
    st_.storage.cold = StoragePass(cache="cold", read_bytes_per_s=storage * 1e5, best_concurrency=4)
    st_.storage.warm = StoragePass(cache="warm", read_bytes_per_s=storage * 1e6, best_concurrency=2)
    return RunRecord(
        kind="probe",
        host=HostInfo(memory_available_bytes=10**10, usable_cores=2),
        dataset=DatasetProfile(
            target="t", files=100, bytes=10**7, sample_bytes_mean=1e5, density="low"
        ),
        stages=st_,
    )


def test_every_kind_of_bottleneck_gets_a_recommendation_with_a_prediction() -> None:
    storage_bound = finalize(record(10.0, 100.0, None))
    assert storage_bound.bottleneck == "storage"
    kinds = {r.kind for r in storage_bound.recommendations}
    assert {"cache_in_ram", "faster_storage"} <= kinds
    cache = next(r for r in storage_bound.recommendations if r.kind == "cache_in_ram")
    assert cache.predicted_samples_per_s == 100.0  # up to the next limit, the CPU

    cpu_bound = finalize(record(10000.0, 500.0, 4000.0))
    assert cpu_bound.bottleneck == "cpu"
    more = next(r for r in cpu_bound.recommendations if r.kind == "more_cpu")
    assert "about 8 cores" in more.text  # 4,000 samples/s x 2 ms
    assert more.predicted_samples_per_s == 2000.0  # 4x the cores, 4x the rate
    assert any(r.kind == "gpu_decode" for r in cpu_bound.recommendations)

    gpu_bound = finalize(record(1000.0, 500.0, 50.0))
    assert gpu_bound.bottleneck == "gpu"
    assert [r.kind for r in gpu_bound.recommendations] == ["balanced"]
    assert all(r.predicted_samples_per_s is not None for r in cpu_bound.recommendations)


def test_recommendations_are_ranked_by_gain_what_needs_no_new_hardware_first() -> None:
    rec = finalize(record(10.0, 100.0, None))
    kinds = [r.kind for r in rec.recommendations]
    hardware = [k in NEEDS_HARDWARE for k in kinds]
    assert True in hardware and False in hardware, kinds  # the case holds both
    # every change the user can make today comes before every one that needs new hardware
    assert hardware == sorted(hardware), kinds
    for group in (False, True):
        predicted = [
            r.predicted_samples_per_s
            for r in rec.recommendations
            if (r.kind in NEEDS_HARDWARE) == group
        ]
        known = [p for p in predicted if p is not None]
        assert known == sorted(known, reverse=True)
        assert predicted[: len(known)] == known  # unpredicted advice last in its group


def test_gpu_decode_needs_hardware_on_a_host_without_a_gpu() -> None:
    # CPU-bound on images: more cores and GPU decode both pay; without a GPU here (the probe
    # run away from the training machine) GPU decode is no change the user can make today
    bare = finalize(record(10000.0, 500.0, 4000.0))
    kinds = [r.kind for r in bare.recommendations]
    assert "gpu_decode" in kinds and "gpu_decode" in needs_hardware(bare)
    today = [k for k in kinds if k not in needs_hardware(bare)]
    assert kinds[: len(today)] == today, kinds
    gpu = record(10000.0, 500.0, 4000.0)
    gpu.host.gpus = [GpuInfo(index=0, name="NVIDIA H100")]
    assert "gpu_decode" not in needs_hardware(finalize(gpu))


def test_a_stage_within_ten_percent_of_the_bottleneck_makes_the_verdict_a_close_call() -> None:
    from ioprobe.analysis.report import findings
    from ioprobe.render.facts import verdict

    close = finalize(record(1000.0, 920.0, 5000.0))  # storage 8.7% above the CPU
    f = findings(close)
    assert f.close_call is not None and f.close_call.stage == "storage"
    assert round(f.close_call.gap, 3) == 0.087
    line = verdict(close, f)
    assert line.startswith("cpu-bound: the pipeline can deliver 920 samples/s")
    assert "A close call: storage is within 9% (1,000 samples/s)" in line
    assert "raising cpu alone gains at most that" in line
    clear = finalize(record(1000.0, 900.0, 5000.0))  # 11% apart: no doubt worth a word
    assert findings(clear).close_call is None
    assert "close call" not in verdict(clear, findings(clear))
    alone = finalize(record(1000.0, 920.0, None))
    assert findings(alone).close_call is not None  # the GPU unmeasured: the rest still count

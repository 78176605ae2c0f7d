"""What-if on synthetic records: each scaling law, composition, and the monotonicity the model
promises (more of any resource never predicts less)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ioprobe.analysis.cache import cache_for_hit_rate, lru_hit_rate, steady_hit_rate
from ioprobe.analysis.catalog import load_catalog, read_rate, resolve_storage
from ioprobe.analysis.scenario import (
    GPU_DECODE_CPU_FRACTION,
    GPU_DECODE_IMAGES_PER_S,
    PCIE_EFFICIENCY,
    evaluate,
    parse_pcie,
    resources,
)
from ioprobe.analysis.whatif import same_storage, whatif, with_probe
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Change,
    CpuLevel,
    CpuStage,
    DatasetProfile,
    GpuStage,
    HostInfo,
    ReadScaling,
    RunRecord,
    Stages,
    StoragePass,
    StorageStage,
    SweepPoint,
    WatchData,
    WatchEpoch,
)

SIZE = 100_000.0


def watch_record(
    *,
    cpu_s: float = 0.01,
    workers: int = 1,
    main_cpu: float = 0.0,
    storage: float | None = 500.0,
    gpu: float | None = 1000.0,
    cores: int = 8,
) -> RunRecord:
    """A watched run: ``workers`` workers at ``cpu_s`` CPU per sample on ``cores`` cores."""
    lanes = max(workers, 1)
    eff = min(lanes, cores - (main_cpu if workers else 0.0))
    return RunRecord(
        kind="watch",
        host=HostInfo(usable_cores=cores, memory_available_bytes=64 * 10**9),
        dataset=DatasetProfile(target="t", files=10_000, bytes=10**9, sample_bytes_mean=SIZE),
        stages=Stages(
            storage=StorageStage(capacity_samples_per_s=storage),
            cpu=CpuStage(
                capacity_samples_per_s=eff / cpu_s, cpu_seconds_per_sample=cpu_s, usable_cores=cores
            ),
            gpu=GpuStage(capacity_samples_per_s=gpu),
        ),
        watch=WatchData(
            loader={"num_workers": str(workers), "prefetch_factor": "2"},
            epochs=[WatchEpoch(index=0, seconds=10.0, main_cpu_seconds=main_cpu * 10.0)],
        ),
    )


def probe_record() -> RunRecord:
    """A probe with a measured CPU curve (1, 2, 4 workers) and a storage sweep (1..8)."""
    sweep = [
        SweepPoint(
            concurrency=c, bytes=0, items=0, seconds=1.0, read_bytes_per_s=r, files_per_s=r / SIZE
        )
        for c, r in [(1, 100e6), (2, 180e6), (4, 300e6), (8, 320e6)]
    ]
    levels = [
        CpuLevel(
            workers=w,
            samples=0,
            seconds=1.0,
            samples_per_s=s,
            cpu_seconds_per_sample=0.01,
            efficiency=s / (w * 100),
        )
        for w, s in [(1, 100.0), (2, 190.0), (4, 340.0)]
    ]
    return RunRecord(
        kind="probe",
        host=HostInfo(usable_cores=4, memory_available_bytes=64 * 10**9),
        dataset=DatasetProfile(target="t", files=10_000, bytes=10**9, sample_bytes_mean=SIZE),
        stages=Stages(
            storage=StorageStage(
                capacity_samples_per_s=320e6 / SIZE,
                read_bytes_per_s=320e6,
                basis="cold: ...",
                cold=StoragePass(
                    cache="cold", sweep=sweep, best_concurrency=8, read_bytes_per_s=320e6
                ),
                warm=StoragePass(cache="warm", best_concurrency=4, read_bytes_per_s=3200e6),
            ),
            cpu=CpuStage(
                capacity_samples_per_s=340.0,
                cpu_seconds_per_sample=0.01,
                usable_cores=4,
                sweep=levels,
                loader="image",
            ),
            gpu=GpuStage(capacity_samples_per_s=2000.0, method="given"),
        ),
    )


def test_an_empty_change_reproduces_the_record() -> None:
    for rec in (watch_record(), watch_record(workers=3, main_cpu=0.5), probe_record()):
        sc = evaluate(rec, Change())
        assert sc.stages.capacities() == rec.stages.capacities()
        assert sc.deltas == ()


def test_watched_cpu_scales_linearly_up_to_the_cores_the_training_loop_leaves() -> None:
    rec = watch_record(cpu_s=0.01, workers=1, main_cpu=0.5, storage=None, gpu=None, cores=4)
    assert rec.stages.cpu.capacity_samples_per_s == pytest.approx(100.0)
    caps = {
        w: evaluate(rec, Change(workers=w)).stages.cpu.capacity_samples_per_s for w in (2, 3, 8)
    }
    assert caps[2] == pytest.approx(200.0)
    assert caps[3] == pytest.approx(300.0)
    assert caps[8] == pytest.approx(350.0)  # 4 cores less the loop's 0.5


def test_probe_cpu_follows_the_measured_curve_and_carries_the_last_efficiency_on() -> None:
    rec = probe_record()
    cpu = lambda ch: evaluate(rec, ch).stages.cpu.capacity_samples_per_s  # noqa: E731
    assert cpu(Change(workers=2)) == pytest.approx(190.0)
    assert cpu(Change(workers=3)) == pytest.approx(265.0)  # halfway between 2 and 4
    assert cpu(Change(workers=16)) == pytest.approx(340.0)  # only 4 cores
    assert cpu(Change(cores=8)) == pytest.approx(680.0)  # 8 workers at 4 workers' efficiency


def test_probe_storage_follows_its_sweep_and_saturates_past_it() -> None:
    rec = probe_record()
    st_ = lambda w: evaluate(rec, Change(workers=w)).stages.storage.capacity_samples_per_s  # noqa: E731
    assert st_(2) == pytest.approx(1800.0)
    assert st_(6) == pytest.approx(3100.0)
    assert st_(64) == pytest.approx(3200.0)


def test_storage_rate_replaces_the_measured_one_at_the_sample_size() -> None:
    rec = watch_record(storage=50.0)
    sc = evaluate(rec, Change(storage=resolve_storage("2000MB/s", {})))
    assert sc.stages.storage.capacity_samples_per_s == pytest.approx(2000e6 / SIZE)
    assert sc.findings.bottleneck != "storage"


def test_unknown_storage_class_names_the_known_ones() -> None:
    with pytest.raises(BadInputError, match="nvme-gen4"):
        resolve_storage("floppy", load_catalog())


def test_a_storage_class_needs_bytes_per_sample() -> None:
    rec = watch_record()
    rec.dataset.sample_bytes_mean = 0.0
    with pytest.raises(BadInputError, match="bytes per sample"):
        evaluate(rec, Change(storage=resolve_storage("1GB/s", {})))


def test_cache_mixes_cached_and_uncached_reads_by_the_hit_rate() -> None:
    rec = probe_record()  # cold 3,200/s, warm 32,000/s, dataset 1 GB
    half = evaluate(rec, Change(cache_bytes=0.5e9, cache_order="static"))
    expect = 1 / (0.5 / 3200 + 0.5 / 32000)
    assert half.stages.storage.capacity_samples_per_s == pytest.approx(expect)
    shuffled = evaluate(rec, Change(cache_bytes=0.5e9))
    h = 0.5 + 0.5 * math.log(0.5)  # about 0.153
    assert shuffled.stages.storage.capacity_samples_per_s == pytest.approx(
        1 / ((1 - h) / 3200 + h / 32000)
    )
    # a watched loader with shuffle=False reads sequentially: an LRU smaller than the data thrashes
    seq = watch_record(storage=1000.0)
    assert seq.watch is not None
    seq.watch.settings.sampler = "SequentialSampler"
    thrash = evaluate(seq, Change(cache_bytes=0.9e9)).stages.storage.capacity_samples_per_s
    assert thrash == pytest.approx(1000.0)
    seq.watch.settings.sampler = "RandomSampler"
    helped = evaluate(seq, Change(cache_bytes=0.9e9)).stages.storage.capacity_samples_per_s
    assert helped is not None and helped > 1000.0
    fits = evaluate(rec, Change(cache_bytes=2e9))
    assert fits.stages.storage.capacity_samples_per_s == pytest.approx(32000.0)


def test_shuffled_lru_closed_form_matches_simulation() -> None:
    import random

    n, cap = 2000, 1000
    rng = random.Random(1)
    order: list[int] = []
    for _ in range(6):
        epoch = list(range(n))
        rng.shuffle(epoch)
        order += epoch
    simulated = lru_hit_rate(order, cap, skip=n)
    assert simulated == pytest.approx(steady_hit_rate(cap, n, "shuffled"), abs=0.01)
    assert cache_for_hit_rate(steady_hit_rate(cap, n, "shuffled"), n, "shuffled") == pytest.approx(
        cap
    )
    assert (
        lru_hit_rate(list(range(n)) * 3, cap, skip=n)
        == 0.0
        == steady_hit_rate(cap, n, "sequential")
    )


def test_gpus_scale_gpu_and_pcie_but_share_storage() -> None:
    rec = watch_record(workers=2, cores=64, storage=5000.0)
    sc = evaluate(rec, Change(gpus=4))
    assert sc.stages.gpu.capacity_samples_per_s == pytest.approx(4000.0)
    # each GPU process brings its workers: 8 reads in flight instead of 2
    assert sc.stages.storage.capacity_samples_per_s == pytest.approx(20000.0)


def test_gpu_decode_moves_cost_from_cpu_to_gpu() -> None:
    rec = probe_record()
    sc = evaluate(rec, Change(gpu_decode=True))
    assert sc.stages.cpu.capacity_samples_per_s == pytest.approx(340.0 / GPU_DECODE_CPU_FRACTION)
    expect_gpu = 1 / (1 / 2000 + 1 / GPU_DECODE_IMAGES_PER_S)
    assert sc.stages.gpu.capacity_samples_per_s == pytest.approx(expect_gpu)


def test_pcie_link_rate_per_gpu() -> None:
    assert parse_pcie("gen4x16") == pytest.approx(16 * 1.969e9 * PCIE_EFFICIENCY)
    rec = watch_record()
    sc = evaluate(rec, Change(pcie="Gen3x8", gpus=2))
    assert sc.stages.pcie.capacity_samples_per_s == pytest.approx(
        2 * 8 * 0.985e9 * PCIE_EFFICIENCY / SIZE
    )
    with pytest.raises(BadInputError, match="gen4x16"):
        parse_pcie("pcie4")


def test_whatif_record_composes_changes_on_the_original_run() -> None:
    rec = watch_record(cpu_s=0.01, workers=1, storage=None, gpu=None, cores=8)
    once = whatif(rec, Change(workers=4))
    twice = whatif(once, Change(cores=2))
    assert once.kind == twice.kind == "whatif"
    assert twice.whatif is not None and twice.whatif.change.workers == 4
    assert twice.whatif.base_kind == "watch"
    assert twice.stages.cpu.capacity_samples_per_s == pytest.approx(200.0)
    assert twice.whatif.base_stages.cpu.capacity_samples_per_s == pytest.approx(100.0)
    loaded = RunRecord.from_json(twice.to_json())
    assert loaded == twice


def test_loading_in_the_main_process_shares_its_core_with_the_training_loop() -> None:
    # the run had workers, so its 0.3 cores of main-process CPU are the loop alone
    rec = watch_record(cpu_s=0.01, workers=2, main_cpu=0.3, storage=None, gpu=None, cores=8)
    none = evaluate(rec, Change(workers=0)).predicted_samples_per_s
    one = evaluate(rec, Change(workers=1)).predicted_samples_per_s
    assert none == pytest.approx((1 - 0.3) / 0.01)
    assert one == pytest.approx(1 / 0.01)
    seven = evaluate(rec, Change(workers=0, gpus=7)).predicted_samples_per_s
    assert seven <= evaluate(rec, Change(workers=1, gpus=7)).predicted_samples_per_s


def test_another_gpu_process_takes_its_training_loops_cpu_from_the_loaders() -> None:
    rec = watch_record(cpu_s=0.01, workers=2, main_cpu=0.3, storage=None, gpu=1000.0, cores=8)
    four = evaluate(rec, Change(gpus=4)).predicted_samples_per_s
    five = evaluate(rec, Change(gpus=5)).predicted_samples_per_s
    assert four == pytest.approx((8 - 4 * 0.3) / 0.01)
    assert five == pytest.approx((8 - 5 * 0.3) / 0.01)
    assert five < four


def test_whatif_predicts_idle_from_the_gpu_capacity() -> None:
    rec = watch_record(cpu_s=0.01, workers=1, storage=None, gpu=400.0)
    out = whatif(rec, Change(workers=2))
    assert out.predicted_samples_per_s == pytest.approx(200.0)
    assert out.gpu_idle_fraction == pytest.approx(0.5)
    assert out.measured_samples_per_s is None


some_changes = st.fixed_dictionaries(
    {
        "workers": st.one_of(st.none(), st.integers(0, 64)),
        "cores": st.one_of(st.none(), st.integers(1, 128)),
        "gpus": st.one_of(st.none(), st.integers(1, 16)),
        "cache": st.one_of(st.none(), st.floats(0, 4e9)),
    }
)


def _change(d: dict[str, float | int | None]) -> Change:
    return Change(
        workers=d["workers"],  # type: ignore[arg-type]
        cores=d["cores"],  # type: ignore[arg-type]
        gpus=d["gpus"],  # type: ignore[arg-type]
        cache_bytes=d["cache"],
    )


@given(some_changes, st.sampled_from(["workers", "cores", "gpus", "cache"]), st.integers(1, 16))
def test_adding_a_resource_never_predicts_less(
    d: dict[str, float | int | None], which: str, more: int
) -> None:
    # A GPU is not free CPU-wise: each GPU process runs a training loop that takes cores from
    # the loaders (0.3 here), so on a CPU-bound host another GPU may predict less. That is
    # the model being right; the property holds for GPUs when the loop costs no CPU.
    loop_cpu = 0.0 if which == "gpus" else 0.3
    for rec in (probe_record(), watch_record(workers=2, main_cpu=loop_cpu)):
        before = evaluate(rec, _change(d)).predicted_samples_per_s
        bigger = dict(d)
        if which == "cache":
            bigger["cache"] = (d["cache"] or 0.0) + more * 1e8
        else:
            w, g, c = resources(rec, _change(d))
            bigger[which] = int({"workers": w, "cores": c, "gpus": g}[which]) + more
        after = evaluate(rec, _change(bigger)).predicted_samples_per_s
        assert after >= before * (1 - 1e-9)


@given(some_changes)
def test_bottleneck_is_the_argmin_and_utilisation_in_range(
    d: dict[str, float | int | None],
) -> None:
    sc = evaluate(probe_record(), _change(d))
    caps = {k: v for k, v in sc.stages.capacities().items() if v is not None}
    assert caps[sc.findings.bottleneck] == min(caps.values())
    u = sc.findings.gpu_utilization
    assert u is not None and 0.0 <= u <= 1.0


@given(st.floats(1.0, 64e6), st.integers(1, 256))
def test_a_class_never_beats_its_bandwidth_and_more_reads_in_flight_never_hurt(
    size: float, q: int
) -> None:
    for cls in load_catalog().values():
        r = read_rate(cls, size, q)
        assert r > 0 and math.isfinite(r)
        if cls.scope != "object":
            assert r <= cls.seq_read_bytes_per_s * (1 + 1e-9)
        assert read_rate(cls, size, q + 1) >= r * (1 - 1e-9)


# -- a watched run's storage along a probe's sweep (whatif --probe) -------------------------

URL = "http://data.example:8000/train"


def _sweep(rates: list[tuple[int, float]]) -> list[SweepPoint]:
    return [
        SweepPoint(
            concurrency=c, bytes=0, items=0, seconds=1.0, read_bytes_per_s=r, files_per_s=r / SIZE
        )
        for c, r in rates
    ]


def storage_probe(rates: list[tuple[int, float]], target: str = URL + "/") -> RunRecord:
    """A probe of ``target`` whose cold sweep read ``rates`` (reads in flight, bytes/s)."""
    rec = probe_record()
    rec.dataset.target = target
    assert rec.stages.storage.cold is not None
    rec.stages.storage.cold.sweep = _sweep(rates)
    return rec


def watched_remote(
    mean: float | None = 1.6, exponent: float | None = None, storage: float = 40.0
) -> RunRecord:
    """2 workers reading ``URL`` at ``storage`` samples/s, with ``mean`` reads in flight on
    average (no read_scaling when None) and the run's own exponent."""
    rec = watch_record(workers=2, storage=storage, gpu=None)
    rec.dataset.target = URL
    assert rec.watch is not None
    if mean is not None:
        rec.watch.read_scaling = ReadScaling(
            exponent=exponent,
            limit="undetermined: reads in flight spanned 1.1x" if exponent is None else "bandwidth",
            reads_in_flight_mean=mean,
            reads_in_flight_max=2.0,
            samples=400,
        )
    return rec


# a server capped at 2 MB/s: one reader reaches half of it, two nearly all, more add nothing
CAPPED = [(1, 1.0e6), (2, 1.8e6), (4, 2.0e6), (8, 2.0e6)]


def _storage_with_probe(rec: RunRecord, probe: RunRecord, workers: int) -> float:
    cap = evaluate(rec, with_probe(rec, Change(workers=workers), probe, "p.json"))
    out = cap.stages.storage.capacity_samples_per_s
    assert out is not None
    return out


def test_probe_sweep_puts_storage_at_the_cap_the_sweep_measured_for_every_new_worker() -> None:
    # by construction: 2 workers reading 100 kB samples with 1.6 reads in flight on average
    # share T(1.6) = 1.0 + 0.6 * 0.8 = 1.48 MB/s, so each read takes 1.6 * 100 kB / 1.48 MB/s
    # and the run's capacity (2 lanes / time per read) is 18.5/s. With 4 workers reading,
    # the server gives its cap, 2.0 MB/s: 20 samples/s.
    probe = storage_probe(CAPPED)
    read_s = 1.6 * SIZE / 1.48e6
    run_cap = 2 / read_s
    truth = 2.0e6 / SIZE
    measured = watched_remote(mean=1.6, storage=run_cap)
    assert _storage_with_probe(measured, probe, 4) == pytest.approx(truth)
    # without read_scaling, the reads in flight are found where the sweep's time per read is
    # the run's: the same 1.6, the same answer
    inferred = watched_remote(mean=None, storage=run_cap)
    assert _storage_with_probe(inferred, probe, 4) == pytest.approx(truth)
    out = whatif(inferred, Change(workers=4), probe=probe, probe_name="p.json")
    assert out.whatif is not None
    assert any("1.6 reads in flight" in a for a in out.whatif.assumptions)
    # and without the probe, the same run predicts linearly: twice its storage, 85% high
    linear = evaluate(inferred, Change(workers=4)).stages.storage.capacity_samples_per_s
    assert linear == pytest.approx(2 * run_cap)


def test_a_run_faster_than_the_probes_single_reader_scales_from_its_lanes() -> None:
    # 40/s over 2 lanes is 50 ms per read, faster than the sweep's one reader (100 ms): the
    # curve can't place the run, which is taken to have read with both lanes
    rec = watched_remote(mean=None, storage=40.0)
    assert _storage_with_probe(rec, storage_probe(CAPPED), 4) == pytest.approx(40.0 * 2.0e6 / 1.8e6)


def test_workers_that_compute_between_reads_fill_a_shared_cap_only_when_there_are_more() -> None:
    # by construction: a server shares 2 MB/s among its reads (flat curve: 50 ms for a 100 kB
    # read alone); each worker reads a sample, then computes it for 30 ms. One worker alone
    # takes 50 + 30 ms a sample: 12.5/s, exactly. Two keep the server busy only part of the
    # time (17.98/s, 1.6 reads in flight); four fill it: the cap, 20/s. The run's reads in
    # flight alone (1.6 of 2 lanes) said "capped already": T(4) / T(2) = 1, 17.98/s.
    flat = storage_probe([(1, 2e6), (2, 2e6), (4, 2e6), (8, 2e6)])
    compute, read = 0.030, 0.050 * (1 + 0.050 / 0.080)  # the second worker's read sees 1.625
    run_cap = 2 / (read + compute)
    rec = watched_remote(mean=None, storage=run_cap)
    assert rec.watch is not None
    rec.watch.epochs = [
        WatchEpoch(index=0, samples=400, seconds=22.0, sample_cpu_seconds=400 * compute)
    ]
    assert _storage_with_probe(rec, flat, 1) == pytest.approx(12.5)
    assert _storage_with_probe(rec, flat, 4) == pytest.approx(20.0, rel=0.01)
    out = whatif(rec, Change(workers=4), probe=flat, probe_name="p.json")
    assert out.whatif is not None
    said = " ".join(out.whatif.assumptions)
    assert "1.6 reads in flight" in said and "30.0 ms per sample between reads" in said


def test_probe_sweep_of_a_latency_limit_predicts_linear_scaling() -> None:
    linear = [(1, 1e6), (2, 2e6), (4, 4e6), (8, 8e6)]
    rec = watched_remote(mean=1.6)
    assert _storage_with_probe(rec, storage_probe(linear), 4) == pytest.approx(80.0)
    assert _storage_with_probe(rec, storage_probe(linear), 1) == pytest.approx(20.0)


def test_past_the_probes_last_level_storage_is_flat_and_the_whatif_says_so() -> None:
    rec, probe = watched_remote(mean=None), storage_probe([(1, 1e6), (2, 2e6), (4, 4e6)])
    assert _storage_with_probe(rec, probe, 16) == pytest.approx(40.0 * 4e6 / 2e6)
    out = whatif(rec, Change(workers=16), probe=probe, probe_name="p.json")
    assert out.whatif is not None
    said = " ".join(out.whatif.assumptions)
    assert "p.json" in said and URL in said and "3 levels" in said
    assert "saturated" in said
    assert "along the probe's sweep" in {d.stage: d.why for d in out.whatif.deltas}["storage"]


def test_when_the_runs_own_exponent_disagrees_the_probes_sweep_wins_and_both_are_stated() -> None:
    # the run fitted a latency limit (exponent 1: its capacity needed no all-lanes correction);
    # the probe saw a flat bandwidth cap
    flat = storage_probe([(1, 2e6), (2, 2e6), (4, 2e6)])
    rec = watched_remote(mean=1.6, exponent=1.0)
    assert _storage_with_probe(rec, flat, 4) == pytest.approx(40.0 * 0.8)
    out = whatif(rec, Change(workers=4), probe=flat, probe_name="p.json")
    assert out.whatif is not None
    said = " ".join(out.whatif.assumptions)
    assert "** 1.00" in said and "** 0.00" in said and "the sweep" in said
    # a run that fitted the cap itself (exponent 0) already put its capacity at every lane
    # reading, 40 * 0.8 ** 1; the flat probe agrees and keeps it, and says nothing more
    agree = watched_remote(mean=1.6, exponent=0.0, storage=32.0)
    assert _storage_with_probe(agree, flat, 4) == pytest.approx(32.0)
    out = whatif(agree, Change(workers=4), probe=flat, probe_name="p.json")
    assert out.whatif is not None
    assert not any("own reads" in a for a in out.whatif.assumptions)


def test_probe_sweep_leaves_an_unchanged_worker_count_and_a_new_storage_class_alone() -> None:
    rec, probe = watched_remote(), storage_probe(CAPPED)
    same = evaluate(rec, with_probe(rec, Change(workers=2), probe))
    assert same.stages.capacities() == rec.stages.capacities()
    cls = resolve_storage("100MB/s", {})
    with_class = evaluate(rec, with_probe(rec, Change(workers=4, storage=cls), probe))
    assert with_class.stages.storage.capacity_samples_per_s == pytest.approx(100e6 / SIZE)
    assert any("sweep is not used" in a for a in with_class.assumptions)


def test_whatif_record_keeps_the_probes_sweep_through_json_and_a_further_change() -> None:
    rec, probe = watched_remote(), storage_probe(CAPPED)
    once = whatif(rec, Change(workers=4), probe=probe, probe_name="p.json")
    assert once.whatif is not None
    assert once.whatif.change.storage_sweep == probe.stages.storage.cold.sweep  # type: ignore[union-attr]
    assert once.whatif.change.storage_sweep_source is not None
    assert "p.json" in once.whatif.change.storage_sweep_source
    loaded = RunRecord.from_json(once.to_json())
    assert loaded == once
    twice = whatif(loaded, Change(workers=8))
    assert twice.stages.storage.capacity_samples_per_s == pytest.approx(40.0 * 0.8 * 2.0e6 / 1.48e6)


def test_probe_must_be_a_probe_with_a_sweep_and_the_run_a_watched_one() -> None:
    rec, probe = watched_remote(), storage_probe(CAPPED)
    with pytest.raises(BadInputError, match=r"p\.json: a watch record.*ioprobe probe"):
        with_probe(rec, Change(workers=4), rec, "p.json")
    with pytest.raises(BadInputError, match=r"the run is a probe record.*watched run"):
        with_probe(probe, Change(workers=4), probe, "p.json")
    bare = storage_probe([(1, 0.0)])
    with pytest.raises(BadInputError, match="no storage sweep"):
        with_probe(rec, Change(workers=4), bare, "p.json")


def test_a_probe_of_other_storage_is_refused_naming_both_targets() -> None:
    rec = watched_remote()
    other = storage_probe(CAPPED, target="http://other.example:8000/train")
    with pytest.raises(BadInputError, match=r"other\.example.*data\.example"):
        with_probe(rec, Change(workers=4), other, "p.json")


@pytest.mark.parametrize(
    ("run", "probe", "same"),
    [
        ("http://Data.Example:8000/train", "http://data.example:8000/train/", True),
        ("http://data.example:8000/train/cls1", "http://data.example:8000/train", True),
        ("http://data.example:8000/train", "http://data.example:9000/train", False),
        ("https://user:***@data.example/train", "https://data.example/train", True),
        ("s3://bucket/train", "s3://bucket/val", False),
        ("/data/train/", "file:///data/train", True),
        ("/data/train", "/data/training", False),
        ("/data/a, /data/b", "/data/b", True),
        ("MeteredHttpDecodeDataset", "http://data.example:8000/train", None),
    ],
)
def test_targets_name_the_same_storage_by_location(run: str, probe: str, same: bool | None) -> None:
    assert same_storage(run, probe) is same


def test_the_change_line_names_the_probe_a_what_if_followed() -> None:
    from ioprobe.record import SweepPoint
    from ioprobe.render.format import change_flags

    ch = Change(
        workers=4,
        storage_sweep=[SweepPoint(1, 10, 1, 1.0, 10.0, 1.0)],
        storage_sweep_source="probe.json, the cold pass of a probe of http://h/data",
    )
    assert change_flags(ch) == "--workers 4  --probe probe.json"
    assert change_flags(Change(workers=4)) == "--workers 4"


def _litdata_run(cache_limit: int, *, chunks_ahead: int = 2) -> RunRecord:
    """A watched litdata run, storage-bound at 279 samples/s with 2 workers on 2 cores, its
    128 chunks of 131,240 bytes mapped from a cache of ``cache_limit`` bytes."""
    import dataclasses

    from ioprobe.record import LoaderSettings

    rec = watch_record(workers=2, storage=279.0, cpu_s=0.0003, cores=2)
    assert rec.watch is not None
    rec.watch.settings = dataclasses.replace(
        LoaderSettings(), workers=2, cache_limit_bytes=cache_limit, chunks_ahead=chunks_ahead
    )
    rec.watch.bytes_seen = "mmap"
    rec.watch.mapped_bytes, rec.watch.mapped_files = 128 * 131_240, 128
    return rec


def test_more_workers_than_a_streaming_formats_cache_holds_keep_storage_at_the_runs_rate() -> None:
    """Each worker holds the chunk it reads and 2 downloaded ahead: 3 workers need 1.18 MB of
    a 1 MB cache, and wait for room (measured: 2 workers 272-279 samples/s, 3 workers 175)."""
    three = whatif(_litdata_run(1_000_000), Change(workers=3))
    assert three.stages.storage.capacity_samples_per_s == pytest.approx(279.0)
    assert three.whatif is not None
    (why,) = [a for a in three.whatif.assumptions if "max_cache_size" in a]
    assert "3 workers x 3 chunks of 131 kB" in why and "ahead: 1.18 MB" in why
    assert "cache (1 MB, " in why
    # room for them: more readers read faster, as the run's rule says
    roomy = whatif(_litdata_run(8_000_000), Change(workers=3))
    assert roomy.stages.storage.capacity_samples_per_s == pytest.approx(279.0 * 1.5)
    assert roomy.whatif is not None
    assert not any("max_cache_size" in a for a in roomy.whatif.assumptions)
    unsized = whatif(_litdata_run(0), Change(workers=3))  # a share of the disk: not known
    assert unsized.stages.storage.capacity_samples_per_s == pytest.approx(279.0 * 1.5)


def test_worker_advice_is_not_given_where_the_formats_cache_cannot_hold_more_workers() -> None:
    from ioprobe.analysis import finalize

    tight = [r.kind for r in finalize(_litdata_run(1_000_000)).recommendations]
    roomy = [r.kind for r in finalize(_litdata_run(8_000_000)).recommendations]
    assert "num_workers" in roomy and "num_workers" not in tight, (roomy, tight)

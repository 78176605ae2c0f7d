"""Each recommendation rule on a record built to trigger it, with the predicted rate checked
against what the what-if gives for the same change."""

from __future__ import annotations

import re

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.catalog import load_catalog
from ioprobe.analysis.recommend import needs_hardware
from ioprobe.analysis.scenario import dataset_bytes, evaluate
from ioprobe.record import Change, Distribution, FilesystemInfo, PcieStage, RunRecord
from tests.unit.analysis.test_whatif import probe_record, watch_record


def kinds(rec: RunRecord) -> list[str]:
    return [r.kind for r in rec.recommendations]


def rec_of(rec: RunRecord, kind: str) -> tuple[str, float | None]:
    r = next(r for r in rec.recommendations if r.kind == kind)
    return r.text, r.predicted_samples_per_s


def test_cpu_bound_watch_gets_the_worker_count_that_reaches_the_next_stage() -> None:
    # 10 ms/sample, 1 worker: 100/s; the GPU takes 350/s and 8 cores are free
    rec = finalize(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=8))
    assert rec.bottleneck == "cpu"
    text, pred = rec_of(rec, "num_workers")
    assert "from 1 to 4" in text  # 3 workers give 300/s, 4 give 350 (GPU-bound): no more
    assert text.endswith("more workers than that add nothing.")
    assert pred == pytest.approx(350.0)
    assert pred == evaluate(rec, Change(workers=4)).predicted_samples_per_s


def test_no_worker_advice_when_more_workers_buy_nothing() -> None:
    rec = finalize(watch_record(cpu_s=0.01, workers=8, storage=None, gpu=2000.0, cores=8))
    assert rec.bottleneck == "cpu"
    assert "num_workers" not in kinds(rec)
    assert "more_cpu" in kinds(rec)  # 2,000/s x 10 ms = 20 cores
    text, pred = rec_of(rec, "more_cpu")
    assert "about 20 cores" in text and pred == pytest.approx(2000.0)


def test_spiky_stalls_below_the_model_rate_suggest_prefetch_factor() -> None:
    rec = watch_record(cpu_s=0.001, workers=2, storage=None, gpu=400.0, cores=8)
    assert rec.watch is not None
    rec.measured_samples_per_s = 250.0  # the model says 400: stragglers stall the queue
    rec.watch.epochs[0].batches = 500
    rec.watch.stall_ms = Distribution(count=100, values=[0.1] * 90 + [120.0] * 10)
    rec.watch.step_ms = Distribution(count=100, values=[20.0] * 100)
    out = finalize(rec)
    text, pred = rec_of(out, "prefetch_factor")
    # p95 stall 120 ms / 20 ms step = 6 batches over 2 workers: 3 more per worker
    assert "from 2 to 5" in text and "10 batches are queued" in text
    assert pred == pytest.approx(400.0)
    rec.measured_samples_per_s = 390.0  # close to the model: nothing to absorb
    assert "prefetch_factor" not in kinds(finalize(rec))


def test_no_prefetch_depth_as_deep_as_the_epoch() -> None:
    # an epoch of 125 batches whose stalls last 5,924 steps: no queue absorbs that, and the
    # advice once asked for prefetch_factor 1481 (5,924 batches queued)
    rec = watch_record(cpu_s=0.001, workers=4, storage=None, gpu=400.0, cores=8)
    assert rec.watch is not None
    rec.measured_samples_per_s = 250.0
    rec.watch.epochs[0].batches = 125
    rec.watch.stall_ms = Distribution(count=100, values=[0.1] * 90 + [592.4] * 10)
    rec.watch.step_ms = Distribution(count=100, values=[0.1] * 100)
    assert "prefetch_factor" not in kinds(finalize(rec))
    rec.watch.step_ms = Distribution(count=100, values=[20.0] * 100)  # 30 steps: a queue's
    text, _ = rec_of(finalize(rec), "prefetch_factor")
    assert "from 2 to 10 so 40 batches are queued" in text


def test_mostly_idle_gpu_suggests_sharing_it() -> None:
    rec = watch_record(cpu_s=0.001, workers=4, storage=None, gpu=500.0, cores=16)
    rec.stages.gpu.busy_fraction = 0.3
    rec.stages.gpu.busy_method = "nvml utilization"
    out = finalize(rec)
    assert out.bottleneck == "gpu"
    text, pred = rec_of(out, "share_gpu")
    assert "run 3 jobs per GPU" in text
    assert pred == pytest.approx(1500.0)  # 3 jobs at 500/s; 16 cores at 1 ms feed 16,000/s
    assert kinds(out)[0] == "share_gpu"  # ranked above "balanced"
    rec.stages.gpu.busy_fraction = 0.8
    assert "share_gpu" not in kinds(finalize(rec))


def test_pcie_bound_suggests_pinned_memory() -> None:
    rec = watch_record(cpu_s=0.001, workers=4, storage=None, gpu=5000.0, cores=16)
    rec.stages.pcie = PcieStage(capacity_samples_per_s=1000.0, method="cuda events, pageable")
    out = finalize(rec)
    assert out.bottleneck == "pcie"
    _, pred = rec_of(out, "pin_memory")
    assert pred == pytest.approx(2000.0)


def test_storage_bound_on_small_files_gets_sharding_cache_and_faster_storage() -> None:
    rec = probe_record()
    rec.dataset.density = "low"
    rec.dataset.sample_bytes_mean = 20_000.0
    rec.host.filesystem = FilesystemInfo(path="/d", device_class="hdd")
    for p in (rec.stages.storage.cold, rec.stages.storage.warm):
        assert p is not None
    rec.stages.storage.capacity_samples_per_s = 30.0  # an HDD seeking for 20 kB files
    rec.stages.storage.cold.sweep = []  # type: ignore[union-attr]
    out = finalize(rec)
    assert out.bottleneck == "storage"
    got = kinds(out)
    assert {"shard_small_files", "cache_in_ram", "faster_storage"} <= set(got)
    text, pred = rec_of(out, "faster_storage")
    cls = next(c for c in load_catalog().values() if c.name in text)
    assert pred == evaluate(rec, Change(storage=cls)).predicted_samples_per_s
    assert "GPUs like this one" in text
    shard_text, shard_pred = rec_of(out, "shard_small_files")
    assert "hdd" in shard_text and shard_pred is not None and shard_pred > 30.0


def test_every_recommendation_predicts_and_ranking_is_by_prediction() -> None:
    for rec in (
        watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=8),
        watch_record(cpu_s=0.001, workers=2, storage=40.0, gpu=400.0, cores=8),
        probe_record(),
    ):
        out = finalize(rec)
        preds = [r.predicted_samples_per_s for r in out.recommendations]
        assert preds and all(p is not None for p in preds), kinds(out)
        lacking = needs_hardware(out)  # GPU decode too, on these hosts without a GPU
        for group in (False, True):  # what needs no new hardware first, each by prediction
            mine = [
                r.predicted_samples_per_s
                for r in out.recommendations
                if (r.kind in lacking) == group
            ]
            assert mine == sorted(mine, reverse=True)  # type: ignore[type-var]
        hardware = [r.kind in lacking for r in out.recommendations]
        assert hardware == sorted(hardware)


def _storage_bound_probe() -> RunRecord:
    rec = probe_record()
    rec.dataset.density = "low"
    rec.dataset.sample_bytes_mean = 20_000.0
    rec.stages.storage.capacity_samples_per_s = 30.0
    return rec


def test_page_cache_advice_only_where_reads_go_through_the_page_cache() -> None:
    local = finalize(_storage_bound_probe())
    assert "cache_in_ram" in kinds(local) and "local_cache" not in kinds(local)
    remote = _storage_bound_probe()
    remote.dataset.remote = True  # an fsspec URL: the page cache never sees these reads
    out = finalize(remote)
    assert "cache_in_ram" not in kinds(out)
    text, pred = rec_of(out, "local_cache")
    assert "simplecache::" in text and "page cache never sees" in text
    assert (
        pred == evaluate(remote, Change(cache_bytes=dataset_bytes(remote))).predicted_samples_per_s
    )


def test_a_watched_run_gets_page_cache_advice_only_with_file_reads_in_steady_state() -> None:
    rec = watch_record(cpu_s=0.001, workers=2, storage=40.0, gpu=400.0, cores=8)
    assert rec.watch is not None
    rec.dataset.sample_bytes_mean = 100_000.0
    rec.dataset.files = 1000
    ep = rec.watch.epochs[0]
    ep.samples, ep.startup_samples, ep.startup_seconds = 400, 16, 0.5
    # workers read 2 MB of modules in their first batches and nothing after (sockets)
    ep.read_chars = ep.startup_read_chars = 2 << 20
    out = finalize(rec)
    assert out.bottleneck == "storage"
    assert not {"cache_in_ram", "local_cache"} & set(kinds(out))
    ep.read_chars += 384 * 100_000  # 100 kB per steady sample through read(): local files
    assert "cache_in_ram" in kinds(finalize(rec))


def test_worker_advice_beyond_the_cores_does_not_say_the_cores_limit() -> None:
    # blocked on reads: 4 workers on 2 cores help, and the reason must say why
    rec = finalize(watch_record(cpu_s=0.001, workers=1, storage=40.0, gpu=400.0, cores=2))
    text, _ = rec_of(rec, "num_workers")
    assert "from 1 to 4" in text and "keep the 2 usable cores busy" in text
    assert "cores are usable" not in text
    # 4 is the most tried (twice the cores) and 5 would add more: not "add nothing"
    assert evaluate(rec, Change(workers=5)).predicted_samples_per_s > 1.02 * (
        evaluate(rec, Change(workers=4)).predicted_samples_per_s
    )
    assert "4 is the most tried (twice the cores) and the rate still rises there" in text
    assert "add nothing" not in text
    # CPU-bound within the cores: the CPU cost is the reason
    rec = finalize(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=2))
    text, _ = rec_of(rec, "num_workers")
    assert "from 1 to 2" in text and "10.0 ms of CPU and 2 cores are usable" in text


def test_no_shard_advice_without_a_known_sample_size() -> None:
    rec = _storage_bound_probe()
    rec.dataset.sample_bytes_mean = 0.0  # unmetered reads: the size is unknown, not zero
    assert "shard_small_files" not in kinds(finalize(rec))


def test_a_streaming_dataset_from_object_storage_is_advised_its_own_cache() -> None:
    # litdata from S3: its chunks are downloaded to a local cache and mapped from there, so
    # the record saw mapped files, which look local; only the dataset's source says remote
    rec = watch_record(cpu_s=0.001, workers=2, storage=40.0, gpu=400.0, cores=8)
    assert rec.watch is not None
    rec.dataset.sample_bytes_mean, rec.dataset.files = 16_404.0, 1024
    rec.watch.bytes_seen = "mmap"
    assert "cache_in_ram" in kinds(finalize(rec))  # local chunks: the page cache keeps them
    rec.watch.settings.source = "s3://bucket/train"
    rec.dataset.remote = True
    out = finalize(rec)
    assert "cache_in_ram" not in kinds(out)
    text, pred = rec_of(out, "local_cache")
    assert "max_cache_size" in text and "simplecache::" not in text
    assert "(16.8 MB)" in text  # 1,024 x 16,404 B: not "0.0 GB"
    assert pred == evaluate(rec, Change(cache_bytes=dataset_bytes(rec))).predicted_samples_per_s


def test_storage_that_feeds_less_than_one_gpu_says_how_busy_it_keeps_one() -> None:
    # a step that takes no time (a CPU-only run): no storage class feeds a whole GPU at 90%
    rec = watch_record(cpu_s=0.0001, workers=8, storage=40.0, gpu=1_000_000.0, cores=64)
    rec.dataset.sample_bytes_mean, rec.dataset.files = 16_404.0, 1024
    out = finalize(rec)
    text, _ = rec_of(out, "faster_storage")
    busy = re.search(r"keep a GPU like this one (\d+)% busy", text)
    assert busy is not None and "0 GPUs" not in text, text
    cls = next(c for c in load_catalog().values() if f"to {c.name} (" in text)
    storage = evaluate(rec, Change(storage=cls)).stages.storage.capacity_samples_per_s
    assert storage is not None
    assert int(busy[1]) == round(100 * storage / 1_000_000.0)

"""Decode paths: what-if and recommendations from measured Pillow / DALI paths on hand-built
records, the probe's choice of the path its CPU stage stands for, and the DALI measurement
itself on a few small JPEGs (CPU only: device_id=None)."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image

from ioprobe.analysis import finalize
from ioprobe.analysis.decode_paths import current_path, decodes_on_gpu
from ioprobe.analysis.report import findings
from ioprobe.analysis.scenario import (
    GPU_DECODE_CPU_FRACTION,
    GPU_DECODE_IMAGES_PER_S,
    evaluate,
)
from ioprobe.analysis.whatif import whatif
from ioprobe.collect.decode_paths import (
    NO_GPU,
    _warm_up,
    measure_dali,
    measure_paths,
    one_line,
    pillow_path,
    use_fastest_path,
)
from ioprobe.collect.progress import SilentReporter
from ioprobe.errors import BadInputError
from ioprobe.record import (
    Change,
    CpuStage,
    DaliData,
    DaliOperator,
    DecodePath,
    GpuInfo,
    GpuStage,
    LoaderSettings,
    RunRecord,
    Stages,
)
from ioprobe.render.facts import decode_facts as facts
from tests.unit.analysis.test_recommend import kinds, rec_of
from tests.unit.analysis.test_whatif import probe_record, watch_record

# probe_record's CPU stage: 340 images/s at 4 workers, the best level of its sweep
PILLOW = DecodePath(
    path="pillow",
    samples=340,
    seconds=1.0,
    samples_per_s=340.0,
    cpu_seconds_per_sample=0.0115,
    threads=4,
    files=64,
)


def with_paths(*paths: DecodePath) -> RunRecord:
    rec = probe_record()
    rec.stages.cpu.decode_paths = [PILLOW, *paths]
    return rec


def dali_cpu(rate: float = 500.0, cpu: float = 0.0078) -> DecodePath:
    return DecodePath(
        path="dali-cpu",
        samples=int(rate),
        seconds=1.0,
        samples_per_s=rate,
        cpu_seconds_per_sample=cpu,
        threads=4,
        files=64,
    )


def dali_gpu(rate: float = 1200.0, cpu: float = 0.002) -> DecodePath:
    return DecodePath(
        path="dali-gpu",
        samples=int(rate),
        seconds=1.0,
        samples_per_s=rate,
        cpu_seconds_per_sample=cpu,
        threads=4,
        files=64,
    )


def no_gpu() -> DecodePath:
    return DecodePath(path="dali-gpu", threads=4, files=64, error=NO_GPU)


# -- what-if ----------------------------------------------------------------------------------


def test_gpu_decode_uses_the_measured_dali_gpu_path() -> None:
    rec = with_paths(dali_cpu(), dali_gpu(rate=1200.0, cpu=0.002))
    sc = evaluate(rec, Change(gpu_decode=True))
    fraction = 0.002 / PILLOW.cpu_seconds_per_sample  # type: ignore[operator]
    assert sc.stages.cpu.capacity_samples_per_s == pytest.approx(340.0 / fraction)
    assert sc.stages.gpu.capacity_samples_per_s == pytest.approx(1 / (1 / 2000 + 1 / 1200))
    assert sc.stages.cpu.cpu_seconds_per_sample == pytest.approx(0.01 * fraction)
    assumed = evaluate(probe_record(), Change(gpu_decode=True))
    assert assumed.stages.cpu.capacity_samples_per_s == pytest.approx(
        340.0 / GPU_DECODE_CPU_FRACTION
    )
    assert sc.stages.cpu.capacity_samples_per_s != pytest.approx(
        assumed.stages.cpu.capacity_samples_per_s
    )
    assert sc.predicted_samples_per_s != pytest.approx(assumed.predicted_samples_per_s)
    assert any("measured by the probe" in a for a in sc.assumptions)
    assert not any("assumed" in a for a in sc.assumptions)
    assert any(f"1/{GPU_DECODE_IMAGES_PER_S:.0f} s" in a for a in assumed.assumptions)


def test_gpu_decode_keeps_the_assumptions_when_the_gpu_path_failed() -> None:
    rec = with_paths(dali_cpu(), no_gpu())
    sc = evaluate(rec, Change(gpu_decode=True))
    assert sc.stages.cpu.capacity_samples_per_s == pytest.approx(340.0 / GPU_DECODE_CPU_FRACTION)
    assert any("assumed" in a for a in sc.assumptions)


def test_gpu_decode_changes_nothing_when_decode_is_already_on_the_gpu() -> None:
    rec = with_paths(dali_gpu())
    rec.stages.cpu.loader = "dali-gpu"
    sc = evaluate(rec, Change(gpu_decode=True))
    assert sc.stages.capacities() == rec.stages.capacities()
    assert any("already decodes on the GPU" in a for a in sc.assumptions)


def test_decode_path_change_scales_the_cpu_stage_by_the_measured_rates() -> None:
    rec = with_paths(dali_cpu(rate=500.0, cpu=0.0078), no_gpu())
    sc = evaluate(rec, Change(decode="dali-cpu"))
    assert sc.stages.cpu.capacity_samples_per_s == pytest.approx(500.0)
    assert sc.stages.cpu.cpu_seconds_per_sample == pytest.approx(0.01 * 0.0078 / 0.0115)
    assert sc.stages.cpu.loader == "dali-cpu"
    # more workers still follow the measured curve, on top of the new path's rate
    more = evaluate(rec, Change(decode="dali-cpu", cores=8))
    assert more.stages.cpu.capacity_samples_per_s > 500.0
    back = whatif(whatif(rec, Change(decode="dali-cpu")), Change(decode="pillow"))
    assert back.stages.cpu.capacity_samples_per_s == pytest.approx(340.0)
    with pytest.raises(BadInputError, match="probe --loader dali"):
        evaluate(probe_record(), Change(decode="dali-cpu"))


# -- recommendations -----------------------------------------------------------------------------


def test_a_faster_measured_cpu_path_is_recommended_with_its_what_if() -> None:
    rec = finalize(with_paths(dali_cpu(rate=500.0), no_gpu()))
    assert rec.bottleneck == "cpu"
    text, pred = rec_of(rec, "decode_path")
    assert text.startswith("Decode with DALI on the CPU: 500 images/s vs 340 with Pillow")
    assert "same cores" in text
    assert pred == pytest.approx(evaluate(rec, Change(decode="dali-cpu")).predicted_samples_per_s)
    assert pred == pytest.approx(500.0)
    # the GPU path could not be measured here: its advice says so and keeps the assumption
    gpu_text, _ = rec_of(rec, "gpu_decode")
    assert NO_GPU in gpu_text


def test_no_decode_advice_when_the_path_in_use_is_the_fastest() -> None:
    rec = with_paths(dali_cpu(rate=300.0), no_gpu())
    assert "decode_path" not in kinds(finalize(rec))
    rec = with_paths(dali_cpu(rate=500.0), no_gpu())
    rec.stages.cpu.loader = "dali-cpu"
    rec.stages.cpu.capacity_samples_per_s = 500.0
    assert current_path(rec) == "dali-cpu"
    assert "decode_path" not in kinds(finalize(rec))


def test_gpu_decode_advice_uses_the_measured_rate() -> None:
    rec = finalize(with_paths(dali_cpu(rate=300.0), dali_gpu(rate=1200.0)))
    text, pred = rec_of(rec, "gpu_decode")
    assert (
        "mixed" in text and "The probe measured 1,200 images/s with it vs 340 with Pillow" in text
    )
    assert pred == pytest.approx(evaluate(rec, Change(gpu_decode=True)).predicted_samples_per_s)
    assert "decode_path" not in kinds(rec)  # DALI on the CPU is slower than Pillow here


def dali_watch(decoder_device: str) -> RunRecord:
    rec = watch_record(cpu_s=0.01, workers=2, storage=None, gpu=2000.0, cores=8)
    assert rec.watch is not None
    rec.watch.loader.update(framework="dali", num_threads="2", num_workers="2")
    rec.watch.settings = LoaderSettings.parse(rec.watch.loader)
    rec.dataset.formats = {"jpeg": 64}
    rec.dali = DaliData(
        operators=[
            DaliOperator(
                name="decoders__Image",
                device=decoder_device,
                stage="cpu",
                calls=10,
                wall_seconds=1.0,
                cpu_seconds=1.0,
            )
        ]
    )
    return rec


def test_no_gpu_decode_advice_for_a_dali_pipeline_that_decodes_on_the_gpu() -> None:
    on_gpu = dali_watch("mixed")
    assert decodes_on_gpu(on_gpu)
    assert "gpu_decode" not in kinds(finalize(on_gpu))
    on_cpu = finalize(dali_watch("cpu"))
    text, _ = rec_of(on_cpu, "gpu_decode")
    assert "device='mixed'" in text


def test_dali_thread_advice_names_num_threads() -> None:
    rec = finalize(dali_watch("cpu"))
    text, _ = rec_of(rec, "num_workers")
    assert text.startswith("Raise the DALI pipeline's num_threads from 2 to ")
    assert "num_workers" not in text and "more threads than that" in text
    torch = finalize(watch_record(cpu_s=0.01, workers=1, storage=None, gpu=350.0, cores=8))
    assert rec_of(torch, "num_workers")[0].startswith("Raise num_workers from 1 to 4")


def test_facts_compare_every_path_with_pillow() -> None:
    rec = with_paths(dali_cpu(rate=510.0, cpu=0.0078), no_gpu())
    lines = dict(facts(rec, findings(rec)))
    assert lines["decode pillow"] == "340 images/s, 11.50 ms CPU/image, 4 workers, 64 files"
    assert lines["decode dali-cpu"] == (
        "510 images/s (1.50x Pillow), 7.80 ms CPU/image, 4 threads, 64 files"
    )
    assert lines["decode dali-gpu"] == f"not measured: {NO_GPU}"
    assert lines["decode in use"].startswith("Pillow")
    rec = probe_record()
    assert facts(rec, findings(rec)) == []


# -- the probe's choice of path ----------------------------------------------------------------


def choose(
    paths: list[DecodePath], gpu: float | None = None, cores: int = 4
) -> tuple[Stages, str | None]:
    stages = Stages(
        cpu=CpuStage(
            capacity_samples_per_s=340.0,
            cpu_seconds_per_sample=0.01,
            usable_cores=cores,
            loader="image",
            decode_paths=paths,
        ),
        gpu=GpuStage(capacity_samples_per_s=gpu, method="given"),
    )
    return stages, use_fastest_path(stages)


def test_the_cpu_stage_takes_the_fastest_path_that_fits_the_cores() -> None:
    stages, note = choose([PILLOW, dali_cpu(rate=500.0, cpu=0.0078), no_gpu()])
    cpu = stages.cpu
    assert (cpu.loader, cpu.capacity_samples_per_s, cpu.cpu_seconds_per_sample) == (
        "dali-cpu",
        500.0,
        0.0078,
    )
    assert note is not None and "dali-cpu" in note and "vs 340 with Pillow" in note
    # 900/s at 8 ms CPU each needs 7.2 cores: not this 4-core host's
    stages, note = choose([PILLOW, dali_cpu(rate=900.0, cpu=0.008), no_gpu()])
    assert (stages.cpu.loader, stages.cpu.capacity_samples_per_s, note) == ("image", 340.0, None)
    stages, note = choose([PILLOW, dali_cpu(rate=300.0), no_gpu()])
    assert (stages.cpu.loader, note) == ("image", None)


def test_the_gpu_path_also_costs_the_gpu_its_decode_time() -> None:
    stages, _ = choose([PILLOW, dali_cpu(rate=500.0), dali_gpu(rate=1200.0)], gpu=2000.0)
    assert stages.cpu.loader == "dali-gpu"
    assert stages.gpu.capacity_samples_per_s == pytest.approx(1 / (1 / 2000 + 1 / 1200))


# -- measuring with DALI (CPU only) ------------------------------------------------------------


def jpegs(n: int, size: tuple[int, int] = (96, 128)) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(buf, "JPEG")
        out.append(buf.getvalue())
    return out


def test_pillow_path_is_the_cpu_stages_best_level() -> None:
    p = pillow_path(probe_record().stages.cpu, 64)
    assert (p.samples_per_s, p.threads, p.files, p.error) == (340.0, 4, 64, None)
    assert pillow_path(CpuStage(), 3).error is not None


def test_dali_on_the_cpu_decodes_every_image_within_its_budget() -> None:
    pytest.importorskip("nvidia.dali")
    payloads = jpegs(10)
    path = measure_dali("cpu", payloads, 2, 0.6, batch_size=4)
    assert path.error is None, path.error
    assert path.files == 10 and path.threads == 2
    assert path.samples >= 2 * 4 and path.samples % 4 == 0
    assert path.samples_per_s == pytest.approx(path.samples / path.seconds)
    assert path.seconds < 1.5
    assert path.cpu_seconds_per_sample is not None and path.cpu_seconds_per_sample > 0
    # the process cannot use more than the machine's cores for the time it ran
    assert path.samples_per_s * path.cpu_seconds_per_sample <= (len(_cores()) + 0.5)


def _cores() -> set[int]:
    import os

    return os.sched_getaffinity(0)


def test_an_image_dali_cannot_decode_is_an_error_not_a_crash() -> None:
    pytest.importorskip("nvidia.dali")
    path = measure_dali("cpu", [*jpegs(3), b"GIF89a" + bytes(64)], 2, 0.3, batch_size=4)
    assert path.error is not None and path.error.startswith("DALI cannot decode these images")
    assert "\n" not in path.error and path.samples_per_s is None


def test_without_a_gpu_the_gpu_path_is_not_tried() -> None:
    pytest.importorskip("nvidia.dali")
    stage = probe_record().stages.cpu
    stage.sweep = stage.sweep[:2]  # best level: 2 workers
    out = measure_paths(jpegs(4), stage, [], 0.4)
    assert [p.path for p in out] == ["pillow", "dali-cpu", "dali-gpu"]
    assert out[1].threads == 2 and out[1].error is None
    assert out[2].error == NO_GPU
    # with a GPU listed but no CUDA to run it on, the failure is the path's error
    fake = measure_paths(jpegs(4), stage, [GpuInfo(index=0, name="fake")], 0.4)
    assert fake[2].error is not None and fake[2].samples_per_s is None


def test_dali_errors_shrink_to_their_cause() -> None:
    text = (
        "Critical error in pipeline:\nError in CPU operator `nvidia.dali.fn.decoders.image`,\n"
        "which was used...\n\nencountered:\n\nnvImageCodec failure: '#4'\n"
        "Current pipeline object is no longer valid."
    )
    assert one_line(RuntimeError(text)) == "RuntimeError: nvImageCodec failure: '#4'"
    assert one_line(ImportError("No module named 'nvidia'")).startswith("ImportError: No module")


class _SlowStartPipe:
    """A pipeline whose iterations run slow and then settle, as nvJPEG's first ones do: the
    ``k``-th takes ``seconds[k]`` (the last figure from then on)."""

    max_batch_size = 4

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds
        self.runs = 0

    def run(self) -> None:
        time.sleep(self.seconds[min(self.runs, len(self.seconds) - 1)])
        self.runs += 1


@pytest.mark.serial  # the truth is the clock: slept batches
def test_warm_up_runs_on_until_the_rate_levels_off() -> None:
    pipe = _SlowStartPipe([0.32, 0.08, 0.02, 0.005])
    runs, levelled = _warm_up(pipe, DecodePath(path="dali-gpu"), 2, 30.0, SilentReporter())
    assert levelled and runs == pipe.runs
    # 0.42 s to the first 5 ms batch; levelled once the window half the warm-up ago ran at
    # 5 ms a batch too, at about 0.85 s
    assert 60 <= runs <= 120, runs


@pytest.mark.serial  # the truth is the clock: slept batches
def test_a_rate_that_climbs_slowly_is_not_taken_for_a_level_one() -> None:
    # 3% faster every batch for 60 batches: a pair of batches never differs by 10%, a window
    # twice as long as the one before does
    pipe = _SlowStartPipe([0.02 * 0.97**k for k in range(60)] + [0.02 * 0.97**60])
    runs, levelled = _warm_up(pipe, DecodePath(path="dali-gpu"), 2, 30.0, SilentReporter())
    assert levelled and runs > 60, runs


@pytest.mark.serial  # the truth is the clock: slept batches
def test_the_mixed_decoders_warm_up_is_not_fooled_by_a_slow_start_that_holds() -> None:
    # 0.4 s of slow batches at one rate, then the steady rate: without a least time the
    # first windows look levelled off
    pipe = _SlowStartPipe([0.1] * 4 + [0.005])
    runs, levelled = _warm_up(pipe, DecodePath(path="dali-gpu"), 2, 0.9, SilentReporter())
    assert (runs, levelled) == (3, True)  # fooled: levelled at 3 slow batches
    pipe = _SlowStartPipe([0.1] * 4 + [0.005])
    runs, levelled = _warm_up(pipe, DecodePath(path="dali-gpu"), 2, 1.5, SilentReporter(), 0.5)
    # the steady rate from 0.4 s: seen levelled off once the window half the warm-up ago
    # was at it too, at about 0.9 s
    assert levelled and runs > 4 + 60, runs


@pytest.mark.serial  # the truth is the clock: slept batches
def test_warm_up_stops_at_its_time_limit_and_says_the_rate_was_still_rising() -> None:
    pipe = _SlowStartPipe([0.32, 0.08, 0.02, 0.005])
    runs, levelled = _warm_up(pipe, DecodePath(path="dali-gpu"), 2, 0.3, SilentReporter())
    assert (runs, levelled) == (2, False)  # 0.4 s spent after two: past its 0.3 s


class _Fed(_SlowStartPipe):
    """A slow-start pipeline that takes its batches from a feed, as DALI's external source."""

    def __init__(self, seconds: list[float], feed: object) -> None:
        super().__init__(seconds)
        self.feed = feed

    def run(self) -> None:
        assert callable(self.feed)
        assert len(self.feed()) == self.max_batch_size
        super().run()


@pytest.mark.parametrize(("device", "warmed"), [("mixed", True), ("cpu", False)])
def test_the_mixed_decoder_warms_up_whatever_its_share(device: str, warmed: bool) -> None:
    """The mixed decoder's warm-up may take GPU_WARMUP_S whatever the path's time; the CPU
    path's stops at a third of it and its figure is marked a short run."""
    from ioprobe.collect.decode_paths import GPU_WARMUP_S, Prepared, _Feed

    # faster with every batch for 0.33 s, then steady: past a third of any short share,
    # within GPU_WARMUP_S
    feed = _Feed()
    pipe = _Fed([0.1, 0.07, 0.05, 0.035, 0.025, 0.018, 0.012, 0.008, 0.005], feed)
    ready = Prepared(threads=2, batch_size=4, pipes={device: (pipe, feed)})
    path = measure_dali(
        device,  # type: ignore[arg-type]
        jpegs(8),
        2,
        0.1,
        batch_size=4,
        built=ready.take(device, 2, 4),  # type: ignore[arg-type]
    )
    assert path.error is None, path.error
    assert path.warmed_up is warmed
    assert path.timed_batches >= 4 and path.samples == 4 * path.timed_batches
    assert path.warmup_batches == pipe.runs - path.timed_batches
    if warmed:
        assert path.seconds < GPU_WARMUP_S
        # timed at the steady 5 ms a batch
        assert path.samples_per_s == pytest.approx(4 / 0.005, rel=0.3)
    else:
        assert "short run" in facts_line(path)
    assert ready.pipes == {}  # handed over: the probe keeps no reference to it


def facts_line(p: DecodePath) -> str:
    rec = with_paths(p)
    rows = dict(facts(rec, findings(rec)))
    return rows[f"decode {p.path}"]


def test_a_prepared_pipeline_for_other_settings_is_not_used() -> None:
    from ioprobe.collect.decode_paths import Prepared, _Feed

    feed = _Feed()
    ready = Prepared(threads=2, batch_size=32, pipes={"cpu": (object(), feed)})
    assert ready.take("cpu", 4, 32) is None  # a pipeline of 2 threads where 4 are wanted
    assert ready.pipes == {}
    failed = Prepared(threads=2, batch_size=32, errors={"mixed": "RuntimeError: no CUDA"})
    assert failed.take("mixed", 2, 32) == "RuntimeError: no CUDA"
    path = measure_dali("mixed", jpegs(2), 2, 0.5, built=failed.take("mixed", 2, 32))
    assert path.error == "RuntimeError: no CUDA" and path.samples_per_s is None


def test_pipelines_built_before_their_images_are_known_decode_them() -> None:
    pytest.importorskip("nvidia.dali")
    from ioprobe.collect.decode_paths import prepare

    ready = prepare(["cpu"], 2, batch_size=4)
    assert ready.errors == {} and list(ready.pipes) == ["cpu"] and ready.seconds > 0
    path = measure_dali("cpu", jpegs(10), 2, 0.6, batch_size=4, built=ready.take("cpu", 2, 4))
    assert path.error is None, path.error
    assert path.samples >= 8 and path.timed_batches == path.samples // 4
    assert path.warmup_batches >= 3  # a pass over the 10 files, in batches of 4
    assert path.warmed_up is not None

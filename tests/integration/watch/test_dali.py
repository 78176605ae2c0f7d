"""ioprobe.watch on real DALI CPU pipelines (device_id=None), against work of known cost."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# make gpu-check runs where DALI may not be installed: a skip, not a collection error
pytest.importorskip("nvidia.dali")

import nvtx
from nvidia.dali.plugin.base_iterator import LastBatchPolicy
from nvidia.dali.plugin.pytorch import (
    DALIClassificationIterator,
    DALIGenericIterator,
)

import ioprobe
from ioprobe.collect import nvtx as nvtx_mod
from ioprobe.record import RunRecord
from tests.fixtures.dali_pipes import (
    BurningSource,
    burn,
    decode_resize,
    external,
    make_jpegs,
)

# per-operator timing is asked for before the first pipeline of this process is built
ioprobe.time_dali_operators()

pytestmark = [
    pytest.mark.slow,
    # size= without reader_name is what an external_source pipeline has to use
    pytest.mark.filterwarnings("ignore:Please set .reader_name.:Warning"),
]

BATCH = 8


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_jpegs(tmp_path_factory.mktemp("jpegs"), 44)


def iterator(root: Path, policy: Any = LastBatchPolicy.PARTIAL, **kw: Any) -> Any:
    pipe = decode_resize(str(root), batch_size=BATCH, num_threads=2, **kw)
    return DALIGenericIterator(
        pipe, ["image", "label"], reader_name="Reader", last_batch_policy=policy
    )


def consume(it: Any, epochs: int, sleep_s: float = 0.0) -> list[list[Any]]:
    out: list[list[Any]] = []
    for _ in range(epochs):
        batches = []
        for b in it:
            batches.append((b[0]["image"].numpy().copy(), b[0]["label"].numpy().copy()))
            if sleep_s:
                time.sleep(sleep_s)
        out.append(batches)
        it.reset()
    return out


def test_the_injection_library_times_dalis_ranges_of_known_cpu_and_wall_time() -> None:
    # named as DALI names its own: the library times those alone; a range of any other name
    # (DALI's executor bookkeeping, a script's own) keeps its place on the stack, untimed
    with nvtx.annotate("[DALI][ioprobe test] load the library"):
        pass
    assert nvtx_mod.status() is None, nvtx_mod.status()
    before = nvtx_mod.snapshot()
    assert before is not None
    for _ in range(3):
        with nvtx.annotate("[DALI][ioprobe test] 40 ms CPU then 30 ms asleep"):
            with nvtx.annotate("ioprobe test: a range of another name, nested"):
                burn(0.040)
            time.sleep(0.030)
    after = nvtx_mod.snapshot()
    assert after is not None
    ran = nvtx_mod.diff(after, before)
    got = ran["[DALI][ioprobe test] 40 ms CPU then 30 ms asleep"]
    assert got.count == 3
    assert got.cpu_ns / 3 == pytest.approx(40e6, rel=0.1)
    assert got.wall_ns / 3 == pytest.approx(70e6, rel=0.15)
    assert not [k for k in ran if not k.startswith("[DALI]")], ran
    # what a watched loader reads at every epoch's start and end is one array that holds no
    # Python object: one object toward the garbage collector's next full collection, where
    # a name and a RangeTotals per range were about 250
    flat = nvtx_mod.totals()
    assert flat is not None and gc.get_referents(flat) == [array]  # its type alone
    assert nvtx_mod.named(flat) == nvtx_mod.snapshot()


def test_decode_heavy_pipeline_with_a_fast_consumer_reads_as_cpu_bound(jpegs: Path) -> None:
    it = ioprobe.watch(iterator(jpegs))
    consume(it, 3)
    rec = it.run
    assert rec.dali is not None and rec.dali.timing == "nvtx"
    assert rec.bottleneck == "cpu"
    caps = rec.stages.capacities()
    assert rec.measured_samples_per_s is not None
    # the CPU stage is what delivered: its capacity is the delivered rate, give or take
    assert caps["cpu"] == pytest.approx(rec.measured_samples_per_s, rel=0.3)
    assert caps["storage"] is not None and caps["storage"] > 5 * caps["cpu"]  # warm local files


def test_the_same_pipeline_with_a_slow_consumer_reads_as_gpu_bound(jpegs: Path) -> None:
    step = 0.25
    it = ioprobe.watch(iterator(jpegs))
    consume(it, 2, sleep_s=step)
    rec = it.run
    assert rec.bottleneck == "gpu"
    assert rec.stages.gpu.capacity_samples_per_s == pytest.approx(BATCH / step, rel=0.1)
    assert rec.gpu_idle_fraction is not None and rec.gpu_idle_fraction < 0.1


def test_decoder_and_resize_dominate_and_operators_add_up_to_the_threads_cpu(
    jpegs: Path,
) -> None:
    it = ioprobe.watch(iterator(jpegs))
    consume(it, 3)
    d = it.run.dali
    assert d is not None
    ops = {o.name: o for o in d.operators}
    assert {"decoders.image", "Resize", "readers.file"} <= set(ops)
    total = sum(o.cpu_seconds for o in d.operators)
    heavy = ops["decoders.image"].cpu_seconds + ops["Resize"].cpu_seconds
    assert heavy > 0.9 * total
    assert ops["readers.file"].stage == "storage" and ops["decoders.image"].stage == "cpu"
    # every DALI thread's CPU time is some operator's: the two views agree
    threads = sum(d.threads.values())
    assert total == pytest.approx(threads, rel=0.15)
    # the reader fetched every file of every epoch, less what it read ahead before the watch
    assert d.reads >= 44 * 3 - 3 * BATCH


@pytest.mark.parametrize(
    "policy", [LastBatchPolicy.PARTIAL, LastBatchPolicy.DROP, LastBatchPolicy.FILL]
)
def test_iterator_batches_len_and_last_batch_policy_are_unchanged(jpegs: Path, policy: Any) -> None:
    plain = iterator(jpegs, policy)
    watched = ioprobe.watch(iterator(jpegs, policy))
    assert len(watched) == len(plain) and watched.size == plain.size
    a, b = consume(plain, 2), consume(watched, 2)
    assert [len(e) for e in a] == [len(e) for e in b]
    for ea, eb in zip(a, b, strict=True):
        for (ia, la), (ib, lb) in zip(ea, eb, strict=True):
            assert np.array_equal(ia, ib) and np.array_equal(la, lb)
    rec = watched.run
    assert [e.batches for e in rec.watch.epochs] == [len(e) for e in b]  # type: ignore[union-attr]
    assert [e.samples for e in rec.watch.epochs] == [  # type: ignore[union-attr]
        sum(len(x[1]) for x in e) for e in b
    ]
    assert rec.watch is not None and rec.watch.loader["last_batch_policy"] == policy.name


def test_classification_iterator_with_auto_reset_and_next_calls(jpegs: Path) -> None:
    def drive(it: Any) -> list[list[int]]:
        # next() without a for loop, then for loops: the mix DALI users write
        seen = [[int(next(it)[0]["label"].shape[0]) for _ in range(3)]]
        seen[0] += [int(b[0]["label"].shape[0]) for b in it]
        seen.append([int(b[0]["label"].shape[0]) for b in it])  # auto_reset: a new epoch
        return seen

    def make() -> Any:
        pipe = decode_resize(str(jpegs), batch_size=BATCH, num_threads=2)
        return DALIClassificationIterator(pipe, reader_name="Reader", auto_reset=True)

    plain, watched = make(), ioprobe.watch(make())
    expected = drive(plain)
    assert drive(watched) == expected
    epochs = watched.run.watch.epochs  # type: ignore[union-attr]
    assert [e.batches for e in epochs] == [len(e) for e in expected]


def test_pipeline_run_is_watched_and_outputs_are_identical(jpegs: Path) -> None:
    plain = decode_resize(str(jpegs), batch_size=BATCH, num_threads=2)
    with ioprobe.watch(decode_resize(str(jpegs), batch_size=BATCH, num_threads=2)) as watched:
        for _ in range(4):
            (ia, la), (ib, lb) = plain.run(), watched.run()
            assert np.array_equal(np.array(la.as_tensor()), np.array(lb.as_tensor()))
            assert all(np.array_equal(np.array(ia[i]), np.array(ib[i])) for i in range(len(ia)))
    rec: RunRecord = watched.record
    assert rec.kind == "watch" and rec.watch is not None
    assert rec.watch.epochs[0].batches == 4 and rec.watch.epochs[0].samples == 4 * BATCH
    assert rec.dali is not None and rec.dali.pipeline["wrapper"] == "pipeline"


def test_external_source_callable_cost_is_the_consumers_cpu(tmp_path: Path) -> None:
    ms, n = 3.0, 64
    pipe = external(BurningSource(ms, n), False, batch_size=BATCH, num_threads=2)
    it = ioprobe.watch(DALIGenericIterator(pipe, ["x"], size=n))
    got = [int(v) for b in it for v in b[0]["x"].numpy().ravel()]
    assert got == list(range(n))
    d = it.run.dali
    assert d is not None
    # the callable runs on the thread that asks for batches; the iterator fetched its first
    # batches (prefetch_queue_depth, 2) before it was watched, and fetches ahead after
    assert d.consumer_cpu_seconds >= 0.8 * (n - 2 * BATCH) * ms / 1e3
    assert d.consumer_cpu_seconds <= (n + 3 * BATCH) * ms / 1e3 * 1.3 + 0.05


def test_parallel_external_source_workers_cpu_is_counted(tmp_path: Path) -> None:
    ms, n = 4.0, 64
    pipe = external(
        BurningSource(ms, n),
        True,
        batch_size=BATCH,
        num_threads=2,
        py_num_workers=2,
        py_start_method="fork",
    )
    it = ioprobe.watch(DALIGenericIterator(pipe, ["x"], size=n))
    got = sorted(int(v) for b in it for v in b[0]["x"].numpy().ravel())
    assert got == list(range(n))
    d = it.run.dali
    assert d is not None
    # workers started on the first batches before the watch; CPU times tick at 10 ms
    assert d.worker_cpu_seconds >= 0.7 * (n - 2 * BATCH) * ms / 1e3
    assert d.worker_cpu_seconds <= 1.3 * (n + 4 * BATCH) * ms / 1e3 + 0.02
    cpu_per_sample = it.run.stages.cpu.cpu_seconds_per_sample
    assert cpu_per_sample is not None and cpu_per_sample >= 0.5 * ms / 1e3


def test_without_the_injection_library_thread_cpu_still_names_the_cpu_stage(
    jpegs: Path, tmp_path: Path
) -> None:
    script = tmp_path / "fallback.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import ioprobe
            from tests.integration.watch.test_dali import consume, iterator
            from pathlib import Path
            it = ioprobe.watch(iterator(Path({str(jpegs)!r})))
            consume(it, 3)
            it.run.save({str(tmp_path / "r.json")!r})
            """
        )
    )
    root = Path(__file__).parents[3]
    env = {"IOPROBE_NVTX": "0", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, str(script)], check=True, env=env, cwd=root)
    rec = RunRecord.load(tmp_path / "r.json")
    assert rec.dali is not None and rec.dali.timing == "thread cpu"
    assert rec.dali.timing_note and "IOPROBE_NVTX=0" in rec.dali.timing_note
    assert rec.bottleneck == "cpu"
    assert rec.dali.operators == []
    assert sum(rec.dali.threads.values()) > 0


def test_report_cli_renders_a_saved_dali_record_with_its_operators(
    jpegs: Path, tmp_path: Path
) -> None:
    it = ioprobe.watch(iterator(jpegs))
    consume(it, 2)
    it.run.save(tmp_path / "run.json")
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ioprobe",
            "report",
            str(tmp_path / "run.json"),
            "-o",
            str(html),
            "-o",
            str(md),
        ],
        capture_output=True,
        text=True,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    assert '<table id="operators">' in page and "<td>decoders.image</td>" in page
    text = md.read_text()
    assert "| decoders.image | cpu | cpu |" in text and "operator timing" in text
    loaded = RunRecord.load(tmp_path / "run.json")
    assert loaded.dali is not None and loaded.dali.operators == it.run.dali.operators  # type: ignore[union-attr]
    assert loaded.dataset.files == 44 and loaded.dataset.target == str(jpegs)


def test_legacy_executor_operators_by_type_and_memory_per_operator(jpegs: Path) -> None:
    it = ioprobe.watch(iterator(jpegs, exec_dynamic=False, enable_memory_stats=True))
    consume(it, 1)
    d = it.run.dali
    assert d is not None and d.pipeline["exec_dynamic"] == "False"
    assert {"decoders.image", "Resize", "readers.file"} <= {o.name for o in d.operators}
    # executor_statistics(): reserved bytes per output; decoded images outweigh resized ones
    decoded = next(v for k, v in d.memory.items() if "Image" in k)
    resized = next(v for k, v in d.memory.items() if k.endswith("Resize_1"))
    assert decoded[0] > resized[0] > 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
def test_mixed_decoder_ranges_are_timed_as_gpu_preprocessing(jpegs: Path) -> None:
    pipe = decode_resize(str(jpegs), batch_size=BATCH, num_threads=2, device_id=0, decoder="mixed")
    it = ioprobe.watch(
        DALIGenericIterator(
            pipe,
            ["image", "label"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
        )
    )
    images = 0
    for _ in range(2):
        for b in it:
            assert b[0]["image"].is_cuda  # decoded on the GPU, handed over there
            images += b[0]["image"].shape[0]
        it.reset()
    assert images == 2 * 44
    rec = it.run
    assert rec.dali is not None
    mixed = [op for op in rec.dali.operators if op.device == "mixed"]
    assert mixed and all(op.calls > 0 for op in mixed), rec.dali.operators
    assert any(op.stage == "gpu" for op in mixed)
    assert rec.stages.gpu.preprocess_seconds is not None and rec.stages.gpu.preprocess_seconds > 0

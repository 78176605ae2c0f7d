"""ioprobe.watch on real DataLoader workers, against datasets and consumers of known cost."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from ioprobe.errors import BadInputError
from ioprobe.monitor import collector as watch_mod
from ioprobe.record import RunRecord
from tests.fixtures.datasets import (
    BurnDataset,
    FailingDataset,
    HttpDataset,
    LazyImportDataset,
    MeteredHttpDataset,
    RangeIterable,
    SleepDataset,
    UpfrontDataset,
)
from tests.support.cli import REPO
from tests.support.servers import ThrottledHTTPServer, make_files

pytestmark = pytest.mark.slow


def consume(loader: object, sleep_s: float = 0.0) -> list[torch.Tensor]:
    out = []
    for batch in loader:  # type: ignore[attr-defined]
        out.append(batch)
        if sleep_s:
            time.sleep(sleep_s)
    return out


def _error_text(loader: Any) -> str:
    it = iter(loader)
    try:
        for _ in it:
            pass
    except Exception as e:
        text = f"{type(e).__name__}: {e}"
    else:
        raise AssertionError("the loader raised nothing")
    # left to its finalizer, torch's iterator waits 5 s for each worker after a worker's
    # error (a plain loader's as well): ended here, at once
    it._shutdown_workers()
    return text


def test_same_batches_in_the_same_order_as_the_plain_loader() -> None:
    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(
            BurnDataset(200, 0.0),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            generator=torch.Generator().manual_seed(7),
        )

    plain = consume(make())
    watched = ioprobe.watch(make())
    got = consume(watched)
    assert [b.tolist() for b in got] == [b.tolist() for b in plain]
    assert len(watched) == len(make()) == 13
    assert watched.batch_size == 16
    assert watched.run.kind == "watch"
    assert watched.run.watch is not None
    assert watched.run.watch.epochs[0].samples == 200


def test_known_cpu_cost_per_sample_is_measured_and_cpu_is_the_bottleneck() -> None:
    loader = ioprobe.watch(DataLoader(BurnDataset(240, 0.005), batch_size=8, num_workers=2))
    consume(loader)
    run = loader.run
    assert run.stages.cpu.cpu_seconds_per_sample == pytest.approx(0.005, rel=0.10)
    assert run.bottleneck == "cpu"
    assert run.gpu_idle_fraction is not None and run.gpu_idle_fraction > 0.5


def test_slow_consumer_makes_the_gpu_the_bottleneck() -> None:
    loader = ioprobe.watch(DataLoader(BurnDataset(320, 0.0), batch_size=16, num_workers=2))
    consume(loader, sleep_s=0.040)
    run = loader.run
    assert run.bottleneck == "gpu"
    assert run.stages.gpu.capacity_samples_per_s == pytest.approx(16 / 0.040, rel=0.10)
    # near 0: a starved consumer would sit near 1; the margin absorbs a loaded 2-core machine
    assert run.gpu_idle_fraction is not None and run.gpu_idle_fraction < 0.15


RATE, SIZE = 2_000_000, 50_000


def watch_http_files(tmp_path: Path, dataset_cls: type[HttpDataset]) -> tuple[RunRecord, float]:
    """60 files of SIZE bytes behind a server throttled to RATE, read by a watched loader;
    the record, and the rate the server delivered over its busy span."""
    make_files(tmp_path, 60, SIZE)
    with ThrottledHTTPServer(tmp_path, rate_bytes_per_s=RATE) as srv:
        urls = [srv.url + f"p0/f{i:05d}.bin" for i in range(60)]
        loader = ioprobe.watch(DataLoader(dataset_cls(urls), batch_size=4, num_workers=2))
        consume(loader)
        delivered = srv.achieved_rate
    assert delivered is not None
    return loader.run, delivered


def assert_storage_rate(run: RunRecord, delivered: float) -> None:
    """Storage's capacity lies between what the server delivered and its throttle, each with
    the 20% these tests allow. On a quiet host the two agree (RATE). A loaded one (CI: two
    cores, other jobs) makes the server deliver less in two ways: its own threads run late,
    and its capacity really drops; or the readers run late and it idles, and it does not."""
    cap = run.stages.storage.capacity_samples_per_s
    low, high = 0.8 * min(delivered, RATE) / SIZE, 1.2 * RATE / SIZE
    assert cap is not None and low <= cap <= high, (
        f"server delivered {delivered / 1e6:.2f} MB/s ({delivered / SIZE:.1f} files/s), "
        f"throttled to {RATE / SIZE:.0f} files/s; record: storage {cap} files/s, measured "
        f"{run.measured_samples_per_s} samples/s"
    )


def test_reads_from_a_throttled_server_make_storage_the_bottleneck(tmp_path: Path) -> None:
    run, delivered = watch_http_files(tmp_path, HttpDataset)
    assert run.bottleneck == "storage"
    assert_storage_rate(run, delivered)
    assert run.watch is not None
    # urllib's reads arrive over sockets, which the I/O counters leave out: they are counted
    # where they are received, so the storage stage has the server's rate in bytes too
    assert run.watch.bytes_seen == "socket"
    assert run.dataset.sample_bytes_mean == pytest.approx(SIZE, rel=0.02)
    rate = run.stages.storage.read_bytes_per_s
    assert rate is not None and 0.8 * min(delivered, RATE) <= rate <= 1.2 * RATE


def test_reads_through_the_metered_opener_give_storage_real_bytes(tmp_path: Path) -> None:
    run, delivered = watch_http_files(tmp_path, MeteredHttpDataset)
    assert run.watch is not None and run.watch.storage_metered
    assert run.dataset.bytes == 60 * SIZE
    assert run.bottleneck == "storage"
    assert run.stages.storage.basis == "metered reads through ioprobe.loaders.files"
    assert_storage_rate(run, delivered)
    # the bytes are the dataset's own, so bytes/s is the capacity at the files' size
    cap, bps = run.stages.storage.capacity_samples_per_s, run.stages.storage.read_bytes_per_s
    assert cap is not None and bps == pytest.approx(cap * SIZE, rel=1e-9)


def test_bytes_a_workers_first_samples_import_are_not_dataset_reads(tmp_path: Path) -> None:
    # each worker imports a 2 MB module in its first sample, and reads nothing after: spread
    # over 128 samples, 31 KiB each, as a lazily imported HTTP client made it look
    module = tmp_path / "lazy_module.py"
    module.write_text(f"DATA = {'x' * (2 << 20)!r}\n")
    log = tmp_path / "imported.log"
    loader = ioprobe.watch(
        DataLoader(
            LazyImportDataset(128, str(module), str(log)),
            batch_size=8,
            num_workers=2,
            multiprocessing_context="spawn",
        )
    )
    consume(loader)
    run = loader.run
    assert run.watch is not None
    assert len(log.read_text().split()) == 2  # each worker imported it
    # the module's bytes are the interpreter's: not in the workers' reads at all
    assert sum(e.read_chars for e in run.watch.epochs) < 2 << 20
    assert not run.watch.storage_metered
    assert run.dataset.sample_bytes_mean == 0


def test_a_data_file_read_whole_in_a_workers_first_sample_is_the_datasets(
    tmp_path: Path,
) -> None:
    """The same pattern with data instead of a module: each worker reads its 2 MB shard at
    its first sample (a stream reading its file up front), and nothing after."""
    shard = tmp_path / "shard.bin"
    shard.write_bytes(os.urandom(2 << 20))
    loader = ioprobe.watch(DataLoader(UpfrontDataset(128, str(shard)), batch_size=8, num_workers=2))
    consume(loader)
    run = loader.run
    assert run.watch is not None and run.watch.bytes_seen == "read"
    # 2 workers x 2 MiB over 128 samples
    assert run.dataset.sample_bytes_mean == pytest.approx(2 * (2 << 20) / 128, rel=0.05)


def test_iterable_dataset_and_several_epochs_are_segments() -> None:
    loader = ioprobe.watch(DataLoader(RangeIterable(100), batch_size=10, num_workers=2))
    for _ in range(3):
        got = consume(loader)
        assert sorted(int(x) for b in got for x in b) == list(range(100))
    run = loader.run
    assert run.watch is not None
    assert [e.samples for e in run.watch.epochs] == [100, 100, 100]
    assert {w.worker for w in run.watch.workers} == {0, 1}


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_every_start_method(method: str) -> None:
    loader = ioprobe.watch(
        DataLoader(
            BurnDataset(64, 0.001),
            batch_size=8,
            num_workers=2,
            multiprocessing_context=method,
            persistent_workers=True,
            pin_memory=False,
            prefetch_factor=3,
        )
    )
    consume(loader)
    consume(loader)
    run = loader.run
    assert run.watch is not None
    assert run.watch.loader["start_method"] == method
    assert [e.samples for e in run.watch.epochs] == [64, 64]
    assert run.stages.cpu.cpu_seconds_per_sample == pytest.approx(0.001, rel=0.3)


def test_main_process_loading_with_no_workers() -> None:
    loader = ioprobe.watch(DataLoader(BurnDataset(40, 0.002), batch_size=4))
    consume(loader)
    run = loader.run
    assert run.watch is not None
    assert [w.worker for w in run.watch.workers] == [-1]
    assert run.stages.cpu.cpu_seconds_per_sample == pytest.approx(0.002, rel=0.15)


def test_dataset_exception_reaches_the_caller_and_a_partial_record_remains() -> None:
    loader = ioprobe.watch(
        DataLoader(FailingDataset(100, fail_at=57), batch_size=10, num_workers=2)
    )
    text = _error_text(loader)
    assert text.startswith("KeyError") and "sample 57 is corrupt" in text
    run = loader.run
    assert run.watch is not None
    ep = run.watch.epochs[0]
    assert ep.error is not None and "KeyError" in ep.error
    assert 0 < ep.samples < 100


class _StreamFailsAt(RangeIterable):
    def __iter__(self) -> Any:
        for t in super().__iter__():
            if int(t) == 9:
                raise ValueError("record 9 is truncated")
            yield t


class _BatchFailsAt(FailingDataset):
    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        return [self[i] for i in indices]


def _collate_fails(samples: list[torch.Tensor]) -> torch.Tensor:
    if int(samples[0]) == 8:
        raise RuntimeError("cannot stack batch 8")
    return torch.stack(samples)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoader(FailingDataset(32, fail_at=13), batch_size=4, num_workers=2),
        lambda: DataLoader(_BatchFailsAt(32, fail_at=13), batch_size=4, num_workers=2),
        lambda: DataLoader(_StreamFailsAt(32), batch_size=4, num_workers=2),
        lambda: DataLoader(
            FailingDataset(32, fail_at=-1), batch_size=4, num_workers=2, collate_fn=_collate_fails
        ),
    ],
    ids=["sample", "batch-fetch", "stream", "collate"],
)
def test_a_workers_error_reads_as_unwatched_with_no_frame_of_the_watch(
    make: Callable[[], DataLoader[Any]],
) -> None:
    # torch puts the worker's formatted traceback in the error the script catches (and may
    # print or log): the wrappers' frames in it made a watched script's output differ
    plain = _error_text(make())
    watched = _error_text(ioprobe.watch(make()))
    assert "worker process" in plain and "Traceback" in plain
    assert watched == plain
    assert "ioprobe" not in watched


def test_breaking_out_early_is_not_an_error_and_context_manager_finalises(tmp_path: Path) -> None:
    with ioprobe.watch(DataLoader(BurnDataset(100, 0.0), batch_size=10, num_workers=1)) as loader:
        for i, _ in enumerate(loader):
            if i == 3:
                break
    run = loader.run
    assert run.watch is not None
    assert run.watch.epochs[0].error is None
    assert run.watch.epochs[0].batches == 4
    run.save(tmp_path / "run.json")
    assert RunRecord.load(tmp_path / "run.json") == run


def test_memory_stays_bounded_past_the_exact_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_mod, "MAX_KEPT", 50)
    loader = ioprobe.watch(DataLoader(BurnDataset(2000, 0.0), batch_size=2))
    consume(loader)
    run = loader.run
    assert run.watch is not None
    assert run.watch.step_ms.count == 999
    assert len(run.watch.step_ms.values) == 50
    assert not run.watch.step_ms.exact
    assert run.watch.sample_ms.count == 2000 and len(run.watch.sample_ms.values) == 50


def test_watching_something_else_is_a_clear_error() -> None:
    with pytest.raises(BadInputError, match="cannot watch a list"):
        ioprobe.watch([1, 2, 3])


def test_a_new_pass_begun_before_the_last_iterator_is_dropped_ends_the_old_epoch_only() -> None:
    # Lightning's fit loop takes len(loader) batches without reaching StopIteration, asks for
    # the next epoch's iterator, and the old one is closed later: the late close must not end
    # the new epoch, and the watched loader must hand out the same batches as the plain one
    def loader() -> DataLoader[torch.Tensor]:
        return DataLoader(SleepDataset(48, 0.0, 16), batch_size=8, num_workers=1)

    plain = loader()
    expected = [b.clone() for _ in range(2) for b in plain]
    watched = ioprobe.watch(loader())
    got = []
    first = iter(watched)
    for _ in range(len(watched)):
        got.append(next(first))
    second = iter(watched)
    del first
    gc.collect()  # the old generator closes now, after the new pass began
    got += [b.clone() for b in second]
    assert len(got) == len(expected) and all(
        torch.equal(a, b) for a, b in zip(got, expected, strict=True)
    )
    rec = watched.run
    assert [e.batches for e in rec.watch.epochs] == [6, 6]
    assert all(e.error is None for e in rec.watch.epochs)


def test_an_iterator_never_advanced_is_no_epoch() -> None:
    # Lightning calls iter() once on a loader it was given as an iterable, to check it is
    # one, and iterates a second iterator: the record had an empty first epoch
    watched = ioprobe.watch(DataLoader(BurnDataset(32, 0.0), batch_size=8))
    iter(watched)
    consume(watched)
    assert watched.run.watch is not None
    assert [(e.samples, e.batches) for e in watched.run.watch.epochs] == [(32, 4)]


def test_watch_keeps_the_own_iter_of_a_loader_that_wraps_dataloaders() -> None:
    # Accelerate's prepared loader moves batches to the device in its own __iter__: a watched
    # copy bypassed it (batches stayed on the CPU, an accumulation step went missing). The
    # subclass multiplies each batch by 10 around super().__iter__()
    from tests.fixtures.subclass_train import ShardLoader

    def make() -> ShardLoader:
        return ShardLoader(
            BurnDataset(24, 0.0),
            batch_size=4,
            shuffle=True,
            generator=torch.Generator().manual_seed(3),
        )

    plain = [b["moved"].flatten().tolist() for b in make()]
    watched = ioprobe.watch(make())
    got = [b["moved"].flatten().tolist() for b in watched]
    assert got == plain
    assert sorted(v for b in got for v in b) == [10 * i for i in range(24)]
    assert len(watched) == 6 and watched.batch_size == 4
    rec = watched.run
    assert rec.watch is not None
    assert [(e.samples, e.batches) for e in rec.watch.epochs] == [(24, 6)]

    # a plain subclass that keeps DataLoader's iteration is watched as before
    class Named(DataLoader[torch.Tensor]):
        pass

    assert len(consume(ioprobe.watch(Named(BurnDataset(8, 0.0), batch_size=4)))) == 2


def test_a_loader_given_a_batch_sampler_records_its_batch_size_and_sampler() -> None:
    # Accelerate builds its loaders this way: batch_size None and a sequential sampler are
    # the loader's unused defaults, and the record said so
    from torch.utils.data import BatchSampler, RandomSampler

    ds = BurnDataset(32, 0.0)
    batches = BatchSampler(RandomSampler(ds), batch_size=8, drop_last=False)
    watched = ioprobe.watch(DataLoader(ds, batch_sampler=batches))
    consume(watched)
    w = watched.run.watch
    assert w is not None
    assert (w.settings.batch_size, w.settings.sampler) == (8, "RandomSampler")
    assert (w.loader["batch_size"], w.loader["sampler"]) == ("8", "RandomSampler")


def test_a_loader_in_the_main_process_counts_nothing_the_process_did_before_its_epoch(
    tmp_path: Path,
) -> None:
    """With num_workers=0 the main process loads, and what it reads between two loaders (or
    two epochs: a validation pass) is not the loader's: 20 MB read between them must not
    reach the second loader's first batch."""
    ds = BurnDataset(32, 0.001)
    first = ioprobe.watch(DataLoader(ds, batch_size=8))
    assert sum(len(b) for b in first) == 32
    big = tmp_path / "between.bin"
    big.write_bytes(os.urandom(20 << 20))
    assert len(big.read_bytes()) == 20 << 20  # 20 MB through read(): in rchar
    second = ioprobe.watch(DataLoader(ds, batch_size=8))
    assert sum(len(b) for b in second) == 32
    assert second.run.watch is not None
    assert sum(e.read_chars for e in second.run.watch.epochs) < 1 << 20


def test_the_record_read_mid_loop_is_what_was_seen_and_the_loop_goes_on() -> None:
    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(BurnDataset(160, 0.0), batch_size=8, num_workers=2)

    plain = consume(make())
    watched = ioprobe.watch(make())
    got, mid = [], None
    for k, batch in enumerate(watched):
        got.append(batch)
        if k == 5:
            mid = watched.run  # a training loop logging its loader's record as it goes
            assert mid.watch is not None and sum(e.samples for e in mid.watch.epochs) == 48
    # the loop was not ended or changed by the read: every batch, in order
    assert [b.tolist() for b in got] == [b.tolist() for b in plain]
    end = watched.run
    assert end is not mid and end.watch is not None  # re-read: the loop moved on since
    assert sum(e.samples for e in end.watch.epochs) == 160
    assert len(end.watch.epochs) == 2  # the pass as read mid-way, and its rest
    consume(watched)  # the next pass is an epoch of its own
    again = watched.run.watch
    assert again is not None and sum(e.samples for e in again.epochs) == 320


def test_an_iterator_left_open_at_exit_ends_without_a_word(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "left_open.py"
    script.write_text(
        "import torch, ioprobe\n"
        "from torch.utils.data import DataLoader\n"
        "w = ioprobe.watch(DataLoader(torch.arange(64.0), batch_size=8, num_workers=1))\n"
        "i1, i2 = iter(w), iter(w)\n"
        "next(i1); next(i2); next(i1)\n"  # two passes open, neither finished
        "print(w.run.kind)\n"
    )
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "watch", proc.stderr
    # the open iterators are closed as the interpreter ends, after the module's names were
    # cleared: "Exception ignored ... catching classes that do not inherit from BaseException"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_record_read_from_another_thread_while_the_loop_runs_costs_the_loop_nothing() -> None:
    import threading

    watched = ioprobe.watch(DataLoader(BurnDataset(800, 0.0), batch_size=8, num_workers=2))
    stop = threading.Event()
    reads = []

    def reader() -> None:  # a monitoring thread polling the record
        while not stop.is_set():
            reads.append(watched.run)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        batches = sum(1 for _ in watched) + sum(1 for _ in watched)
    finally:
        stop.set()
        t.join(10)
    assert batches == 200 and reads  # every batch of both passes, no assertion
    end = watched.run.watch
    assert end is not None and sum(e.samples for e in end.epochs) == 1600


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copy_of_a_watched_loader_is_a_watched_copy_with_its_own_record(how: str) -> None:
    # once iterated, the collector (its threads, locks, the NVML module) made a watched
    # loader refuse pickle and deepcopy, where the plain loader copies
    import copy
    import pickle

    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(
            BurnDataset(64, 0.0),
            batch_size=8,
            num_workers=1,
            generator=torch.Generator().manual_seed(3),
        )

    watched = ioprobe.watch(make())
    consume(watched)
    twin = pickle.loads(pickle.dumps(watched)) if how == "pickle" else copy.deepcopy(watched)
    assert type(twin) is type(watched) and twin.batch_size == 8
    got = consume(twin)
    assert [b.tolist() for b in got] == [b.tolist() for b in consume(make())]
    assert twin.run.watch is not None and len(twin.run.watch.epochs) == 1
    assert twin.run is not watched.run and len(watched.run.watch.epochs) == 1


class _OddLength(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset read through a sampler of its own, whose ``__len__`` does not give a length
    as ``len()`` takes one."""

    def __init__(self, length: object) -> None:
        self.length = length

    def __len__(self) -> int:
        if isinstance(self.length, BaseException):
            raise self.length
        return self.length  # type: ignore[return-value]

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i])


@pytest.mark.parametrize(
    "length",
    [NotImplementedError(), RuntimeError("no length"), -1, 2**70],
    ids=["not-implemented", "runtime-error", "negative", "past-ssize"],
)
def test_a_dataset_whose_len_fails_is_watched_as_unwatched(length: object) -> None:
    # len() of it raised past the watch (only TypeError was expected): the script died
    def batches(loader: object) -> list[list[int]]:
        return [b.flatten().tolist() for b in loader]  # type: ignore[attr-defined]

    def make() -> DataLoader[torch.Tensor]:
        return DataLoader(_OddLength(length), batch_size=4, num_workers=1, sampler=range(32))

    watched = ioprobe.watch(make())
    assert batches(watched) == batches(make())
    assert watched.run.measured_samples_per_s is not None


TIMED_OUT = """
import sys, time, torch, ioprobe
from torch.utils.data import DataLoader, Dataset
class S(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        if i == 20: time.sleep(2)
        return torch.tensor([i])
try:
    for b in ioprobe.watch(DataLoader(S(), batch_size=4, num_workers=1, timeout=1)): pass
except RuntimeError:
    sys.exit(4)
"""


def test_a_loader_that_times_out_shuts_its_workers_down_as_unwatched(tmp_path: Path) -> None:
    # the error kept a reference cycle through the watch's frame: the worker, still inside
    # its slow sample, was killed at exit and left multiprocessing's pymp-* folder behind
    script = tmp_path / "timeout.py"
    script.write_text(TIMED_OUT)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 4, proc.stderr
    assert list(tmp.iterdir()) == []

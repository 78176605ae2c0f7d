"""Partial failure is counted, not fatal and not hidden: files that vanish or cannot be read
after the listing are skipped and counted by cause, the end-to-end run never delivers them,
and only a target where nothing can be read fails the probe."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

import aiohttp
import pytest

from ioprobe.collect import dataset as ds_mod
from ioprobe.collect import pipeline as pipe_mod
from ioprobe.collect import storage as st
from ioprobe.collect.failures import ReadFailures, cause, label
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.progress import SilentReporter
from ioprobe.errors import TargetError
from ioprobe.record import DatasetProfile, PipelineRun, RunRecord
from ioprobe.render.summary import read_errors_line
from tests.unit.ground.test_record import make_record


def _files(root: Path, count: int, size: int = 2000) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"f{i:04d}.bin" for i in range(count)]
    for p in paths:
        p.write_bytes(os.urandom(size))
    return paths


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)  # a directory opens; reading it fails
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def _raised(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("no exception")


def test_each_backend_error_has_a_cause(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    assert cause(_raised(open, tmp_path / "gone", "rb")) == "not_found"
    assert cause(_raised(_read, tmp_path / "dir")) == "is_a_directory"
    assert cause(aiohttp.ServerTimeoutError()) == "timeout"
    assert cause(OSError(errno.EIO, "I/O error")) == "EIO"
    assert cause(OSError(errno.ECONNRESET, "reset")) == "connection"
    assert cause(aiohttp.ClientResponseError(None, (), status=403)) == "http_403"  # type: ignore[arg-type]
    # botocore comes with the test extras (moto); a bare GPU image may lack it
    client_error = pytest.importorskip("botocore.exceptions").ClientError
    s3 = client_error({"ResponseMetadata": {"HTTPStatusCode": 500}}, "GetObject")
    assert cause(s3) == "http_500"
    assert cause(ValueError("odd")) == "other"
    # fsspec says "not found" for an HTTP read that aiohttp gave up redirecting
    try:
        raise FileNotFoundError("u") from aiohttp.TooManyRedirects(None, ())  # type: ignore[arg-type]
    except FileNotFoundError as looped:
        assert cause(looped) == "redirect_loop"
        assert label(cause(looped)) == "redirected over and over (a redirect loop)"


def test_a_file_is_counted_once_by_its_first_cause() -> None:
    tally = ReadFailures()
    tally.add("a", "not_found")
    tally.add("a", "timeout")
    tally.add("b", "http_403", "Forbidden")
    assert tally.counts() == {"not_found": 1, "http_403": 1}
    assert tally.summary() == "2 files: 1 HTTP 403, 1 not found"
    assert tally.example == "a: not found"


def test_a_pass_counts_vanished_and_swapped_files_and_measures_the_rest(tmp_path: Path) -> None:
    paths = _files(tmp_path / "data", 30)
    ds = ds_mod.resolve(str(tmp_path / "data"))
    for p in paths[:5]:
        p.unlink()
    for p in paths[5:7]:
        p.unlink()
        p.mkdir()  # a directory where the listing saw a file
    tally = ReadFailures()
    out = st.measure_pass(ds, ds.entries, "warm", 1.0, levels=(1, 2), failures=tally)
    assert tally.counts() == {"not_found": 5, "is_a_directory": 2}
    assert out.sweep[0].errors == 7  # every item is read once per level
    assert out.sweep[0].bytes == 23 * 2000
    assert out.read_bytes_per_s is not None and out.read_bytes_per_s > 0


def test_a_pass_where_every_read_fails_says_so_by_cause(tmp_path: Path) -> None:
    _files(tmp_path / "data", 4)
    ds = ds_mod.resolve(str(tmp_path / "data"))
    shutil.rmtree(tmp_path / "data")
    with pytest.raises(OSError, match=r"every read failed \(4 files: 4 not found\)"):
        st.measure_pass(ds, ds.entries, "cold", 1.0, levels=(1,))


class _Vandal(SilentReporter):
    """Deletes files, and swaps others for directories, once the storage phase starts: the
    listing saw them, the reads do not."""

    def __init__(self, gone: list[Path], swapped: list[Path]) -> None:
        self.gone, self.swapped = gone, swapped

    def phase(self, name: str) -> None:
        if name.startswith("storage") and (self.gone or self.swapped):
            for p in self.gone:
                p.unlink()
            for p in self.swapped:
                p.unlink()
                p.mkdir()
            self.gone, self.swapped = [], []


def test_the_probe_skips_files_that_vanish_after_listing_and_counts_them(tmp_path: Path) -> None:
    paths = _files(tmp_path / "data", 40)
    opts = ProbeOptions(target=str(tmp_path / "data"), loader="raw", time_budget_s=3)
    rec = Probe(opts, _Vandal(paths[:10], paths[10:12])).run()
    assert rec.dataset.read_errors == {"not_found": 10, "is_a_directory": 2}
    assert rec.stages.storage.capacity_samples_per_s
    assert rec.stages.cpu.capacity_samples_per_s


def test_the_probe_fails_in_one_line_when_every_file_vanished(tmp_path: Path) -> None:
    paths = _files(tmp_path / "data", 6)
    opts = ProbeOptions(target=str(tmp_path / "data"), loader="raw", time_budget_s=2)
    with pytest.raises(TargetError, match=r"every read failed \(6 files: 6 not found\)"):
        Probe(opts, _Vandal(paths, [])).run()


class _ToFifos(SilentReporter):
    """Replaces every file by a named pipe once the warm pass begins: the cold pass read
    them, the warm one cannot."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def phase(self, name: str) -> None:
        if name == "storage (warm)":
            for p in self.paths:
                p.unlink()
                os.mkfifo(p)


def test_a_pass_that_reads_nothing_after_one_that_measured_is_noted_and_the_probe_goes_on(
    tmp_path: Path,
) -> None:
    # the whole probe ended "every read failed", exit 2, and the cold pass it had measured
    # was lost
    paths = _files(tmp_path / "data", 12)
    opts = ProbeOptions(target=str(tmp_path / "data"), loader="raw", time_budget_s=2)
    rec = Probe(opts, _ToFifos(paths)).run()
    st = rec.stages.storage
    assert st.cold is not None and st.cold.sweep and st.warm is None
    assert st.capacity_samples_per_s  # from the cold pass
    assert any(
        n.startswith("the warm pass was not measured: every read failed (12 files: 12 ESPIPE)")
        for n in rec.notes
    ), rec.notes


def test_end_to_end_samples_exclude_failed_reads_and_count_them_as_errors(
    tmp_path: Path,
) -> None:
    paths = _files(tmp_path / "data", 200, size=500)
    ds = ds_mod.resolve(str(tmp_path / "data"))
    for p in paths[::2]:
        p.unlink()
    tally = ReadFailures()
    run = pipe_mod.run_pipeline(
        ds.entries,
        None,
        "raw",
        workers=2,
        batch_size=20,
        compute_s=0.0,
        budget_s=60.0,  # ends when the ten batches are taken
        cache="warm",
        failures=tally,
    )
    delivered = run.tracks[0].columns["samples"]
    assert run.errors == 100
    assert sum(delivered) == 100
    assert run.samples == sum(delivered[1:])  # the first batch is start-up, left out
    assert tally.counts() == {"not_found": 100}


def test_the_terminal_note_names_failed_files_by_cause() -> None:
    rec = make_record()
    rec.dataset = DatasetProfile(
        target="/data", files=200, read_errors={"http_403": 2, "not_found": 10}
    )
    assert read_errors_line(rec) == "12 of 200 files failed to read: 10 not found, 2 HTTP 403"
    rec.dataset.read_errors = {}
    assert read_errors_line(rec) is None


def test_records_without_error_counts_still_load(tmp_path: Path) -> None:
    rec = make_record()
    rec.pipeline = PipelineRun(
        workers=1,
        batch_size=4,
        compute_seconds_per_batch=0.0,
        batches=1,
        samples=4,
        seconds=1.0,
        samples_per_s=4.0,
        wait_seconds=0.0,
        gpu_idle_fraction=0.0,
        cache="warm",
    )
    data = rec.to_json()
    del data["dataset"]["read_errors"]
    del data["pipeline"]["errors"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = RunRecord.load(tmp_path / "old.json")
    assert old.dataset.read_errors == {}
    assert old.pipeline is not None and old.pipeline.errors == 0
    rec.dataset.read_errors = {"timeout": 3}
    rec.pipeline.errors = 3
    rec.save(tmp_path / "new.json")
    assert RunRecord.load(tmp_path / "new.json") == rec


def _caused(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def _short_body() -> BaseException:
    from aiohttp import http_exceptions

    inner = http_exceptions.ContentLengthError("received 10 of 1000 bytes")
    return _caused(aiohttp.ClientPayloadError("Response payload is not completed"), inner)


def _self_signed() -> BaseException:
    import ssl

    verify = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate")
    return _caused(FileNotFoundError("https://127.0.0.1:8443/data/"), verify)


CAUSES = [
    # aiohttp's short body: no status the server sent
    (_short_body, "short_response"),
    # a parser error aiohttp re-raises as a response error "with status 400": the server
    # sent no such status, and its response was not short but malformed
    (
        lambda: _caused(
            aiohttp.ClientResponseError(None, (), status=400),  # type: ignore[arg-type]
            __import__("aiohttp").http_exceptions.InvalidHeader(b"Content-Length: -5"),
        ),
        "malformed_response",
    ),
    # the same re-raise around a body that ended short
    (
        lambda: _caused(
            aiohttp.ClientResponseError(None, (), status=400),  # type: ignore[arg-type]
            __import__("aiohttp").http_exceptions.ContentLengthError("received 1 of 9 bytes"),
        ),
        "short_response",
    ),
    # fsspec reports a failed TLS handshake as not found, raised from the real cause
    (_self_signed, "tls_certificate"),
    (lambda: _caused(OSError("x"), __import__("ssl").SSLError(1, "wrong version")), "tls"),
    (lambda: aiohttp.ClientResponseError(None, (), status=404), "http_404"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("make", "key"), CAUSES)
def test_a_failure_is_named_by_what_caused_it(make: object, key: str) -> None:
    assert cause(make()) == key  # type: ignore[operator]


def test_the_new_causes_read_as_words() -> None:
    assert label("tls_certificate") == "TLS certificate not trusted"
    assert label("short_response") == "response shorter than announced"
    assert label("malformed_response") == "response not valid HTTP"


def test_files_turned_into_fifos_are_counted_and_stall_nothing(tmp_path: Path) -> None:
    # a FIFO with no writer blocks a plain open for ever: the cold pass's eviction and its
    # reads must fail on it, count it, and measure the rest at their own rate
    paths = _files(tmp_path / "data", 24)
    ds = ds_mod.resolve(str(tmp_path / "data"))
    for p in paths[:4]:
        p.unlink()
        os.mkfifo(p)
    tally = ReadFailures()
    t0 = time.monotonic()
    out = st.measure_pass(ds, ds.entries, "cold", 1.0, levels=(1, 2), failures=tally)
    assert time.monotonic() - t0 < 10
    assert tally.counts() == {"ESPIPE": 4}
    assert out.sweep[0].errors == 4
    assert out.sweep[0].bytes == 20 * 2000
    # the end-to-end and profile reads of a whole file fail on it too, not read it as empty
    with pytest.raises(OSError):
        pipe_mod.read_whole(None, ds.entries[[e.path for e in ds.entries].index(str(paths[0]))])


def test_sparse_files_are_counted_and_the_probe_says_its_rates_flatter(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _files(data, 6, size=20_000)
    for i in range(4):  # a hole of 1 MiB with nothing written: no block allocated
        with open(data / f"sparse{i}.bin", "wb") as fh:
            fh.truncate(1 << 20)
    ds = ds_mod.resolve(str(data))
    if ds.sparse == 0:
        pytest.skip("this file system allocates the holes it is given")
    assert ds.sparse == 4
    rec = Probe(ProbeOptions(target=str(data), loader="raw", time_budget_s=2)).run()
    notes = [n for n in rec.notes if "sparse" in n]
    assert notes == [
        "4 of 10 files are sparse (mostly holes, which read as zeros without touching the "
        "disk): the storage rates are higher than the same data written out would give"
    ]

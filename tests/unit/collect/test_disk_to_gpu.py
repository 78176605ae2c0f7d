"""The disk-to-GPU path through the CUDA seam's stand-in: every byte arrives once and in
order, reads overlap copies, the deadline holds, the user's files are untouched, and the
record says what cuFile did (tests/integration/probe/test_disk_to_gpu_gpu.py runs it on a GPU)."""

from __future__ import annotations

import enum
import hashlib
import io
import os
import types
from pathlib import Path
from typing import Any

import fsspec
import pytest
from rich.console import Console

from ioprobe import units
from ioprobe.analysis import finalize
from ioprobe.analysis.report import findings
from ioprobe.collect import disk_to_gpu as d2g
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.pcie import make_link
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.storage import plan_items
from ioprobe.record import RunRecord
from ioprobe.render.facts import measurements
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.terminal import view
from tests.fixtures.sim_copier import HostBuf, SimCopier

MIB = 1 << 20


class Recording(SimCopier):
    """Keeps what each copy left on the device, and what kind of host memory each buffer was."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.arrived: list[bytes] = []
        self.kinds: list[bool] = []

    def host(self, nbytes: int, pinned: bool) -> HostBuf:
        self.kinds.append(pinned)
        return super().host(nbytes, pinned)

    def start(
        self, host: HostBuf, device: bytearray, nbytes: int, direction: Any, reps: int
    ) -> Any:
        pending = super().start(host, device, nbytes, direction, reps)
        self.arrived.append(bytes(device[:nbytes]))
        return pending


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[FileEntry]:
    root = tmp_path_factory.mktemp("d2g")
    out = []
    for i in range(40):
        p = root / f"small{i:02d}.bin"
        p.write_bytes(os.urandom(30_000 + 997 * i))
        out.append(FileEntry(str(p), p.stat().st_size))
    big = root / "big.bin"
    big.write_bytes(os.urandom(3 * MIB + 12345))  # spans four 1 MiB buffers
    out.append(FileEntry(str(big), big.stat().st_size))
    return out


def _expected(entries: list[FileEntry], buffer: int) -> bytes:
    parts = []
    for path, off, length in plan_items(entries, buffer):
        with open(path, "rb") as fh:
            fh.seek(off)
            parts.append(fh.read(length))
    return b"".join(parts)


def _state(entries: list[FileEntry]) -> dict[str, tuple[int, str]]:
    return {
        e.path: (os.stat(e.path).st_mtime_ns, hashlib.sha256(Path(e.path).read_bytes()).hexdigest())
        for e in entries
    }


def test_the_device_receives_exactly_the_files_bytes_through_pinned_buffers(
    files: list[FileEntry],
) -> None:
    c = Recording(real_time=True)
    path = d2g.measure_path(c, files, budget_s=30, cold=False, buffer_bytes=MIB)
    arrived = b"".join(c.arrived)
    want = _expected(files, MIB)
    assert hashlib.sha256(arrived).digest() == hashlib.sha256(want).digest()
    assert len(arrived) == sum(e.size for e in files)  # nothing lost or sent twice
    assert all(len(b) <= MIB for b in c.arrived)
    # small files are packed: far fewer copies than files
    assert len(c.arrived) < len(files) // 4
    assert c.kinds == [True, True]  # two buffers, both page-locked
    assert path.bytes == sum(e.size for e in files) and path.files == len(files)
    assert path.method == "pinned double buffer, 2 x 1 MiB" and path.cache == "warm"
    assert path.buffer_bytes == MIB and path.copy_seconds > 0 and path.read_seconds > 0


def test_the_path_asks_for_pinned_memory_even_with_more_buffers(files: list[FileEntry]) -> None:
    c = Recording()
    path = d2g.measure_path(c, files, 30, False, buffer_bytes=512 << 10, buffers=3)
    assert c.kinds == [True, True, True]
    assert path.method == "pinned triple buffer, 3 x 512 KiB"
    assert b"".join(c.arrived) == _expected(files, 512 << 10)


def test_a_slow_link_sets_the_pace_at_its_modelled_rate(files: list[FileEntry]) -> None:
    rate = 50e6  # far below a warm read
    c = SimCopier(real_time=True, latency_s=0.0, rates={("h2d", True): rate})
    path = d2g.measure_path(c, files, budget_s=30, cold=False, buffer_bytes=MIB)
    assert path.bytes_per_s == pytest.approx(rate, rel=0.15)
    assert path.copy_seconds == pytest.approx(path.bytes / rate, rel=1e-6)


def test_reads_overlap_copies_when_both_take_as_long(tmp_path: Path) -> None:
    # milliseconds per buffer on both sides, so sleep granularity is noise, not the result
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(64 * MIB))
    entries = [FileEntry(str(big), 64 * MIB)]
    shares = []
    for _ in range(3):  # a busy host only adds time: the best of three shows the overlap
        warm = d2g.measure_path(SimCopier(move=False), entries, 30, False, buffer_bytes=8 * MIB)
        read_rate = warm.bytes / warm.read_seconds
        c = SimCopier(move=False, real_time=True, latency_s=0.0, rates={("h2d", True): read_rate})
        path = d2g.measure_path(c, entries, 30, False, buffer_bytes=8 * MIB)
        shares.append(path.seconds / (path.read_seconds + path.copy_seconds))
    # serial would take read + copy; double buffering hides most of the shorter one
    assert min(shares) < 0.8, shares


def test_the_budget_stops_the_path(files: list[FileEntry]) -> None:
    c = SimCopier(real_time=True, latency_s=0.0, rates={("h2d", True): 5e6})
    path = d2g.measure_path(c, files, budget_s=0.3, cold=False, buffer_bytes=MIB)
    # the copies in flight at the deadline (two buffers, 0.2 s each at 5 MB/s) still finish
    assert path.seconds < 0.3 + 2 * MIB / 5e6 + 0.2
    assert 0 < path.bytes < sum(e.size for e in files)


def test_the_probe_holds_the_path_to_its_share_and_ten_seconds(files: list[FileEntry]) -> None:
    c = SimCopier(real_time=True, latency_s=0.0, rates={("h2d", True): 1e6})
    path = d2g.run_path(c, files, remote=False, budget_s=600, cold=False)
    assert path.seconds < d2g.MAX_SECONDS + 2 * d2g.BUFFER / 1e6 + 1


def test_cold_evicts_first_and_leaves_the_files_as_they_were(files: list[FileEntry]) -> None:
    before = _state(files)
    path = d2g.measure_path(SimCopier(), files, 30, cold=True, buffer_bytes=MIB)
    # "cold" only where mincore finds the pages gone (tmpfs cannot drop them: then "warm")
    assert path.cache in ("cold", "warm")
    d2g.run_path(SimCopier(), files, remote=False, budget_s=5, cold=True)
    assert _state(files) == before


def test_a_remote_target_is_skipped_with_the_reason() -> None:
    path = d2g.run_path(
        SimCopier(), [FileEntry("s3://bucket/a.bin", 10)], remote=True, budget_s=5, cold=True
    )
    assert path.bytes_per_s is None and path.method.startswith("not measured: remote target")


def test_a_copier_that_fails_becomes_the_method_not_a_traceback(files: list[FileEntry]) -> None:
    class NoPinned(SimCopier):
        def host(self, nbytes: int, pinned: bool) -> HostBuf:
            raise RuntimeError("cudaHostAlloc failed: out of memory")

    path = d2g.run_path(NoPinned(), files, remote=False, budget_s=5, cold=False)
    assert path.method == "not measured: RuntimeError: cudaHostAlloc failed: out of memory"


def test_kvikio_absent_is_said_plainly(files: list[FileEntry]) -> None:
    try:
        import kvikio  # noqa: F401

        pytest.skip("kvikio is installed here")
    except ImportError:
        pass
    assert d2g.kvikio_read(SimCopier(), files, 1.0) == (None, "kvikio not installed")
    path = d2g.run_path(SimCopier(), files, remote=False, budget_s=5, cold=False)
    assert path.cufile == "kvikio not installed" and path.cufile_bytes_per_s is None


class CompatMode(enum.IntEnum):
    OFF = 0
    ON = 1
    AUTO = 2


def _fake_kvikio(defaults: Any, read: list[tuple[str, int, int]], **kw: Any) -> Any:
    """A kvikio with ``CuFile(path, "r").pread(buf, size, offset).get()``: what real kvikio
    offers, reading nothing."""

    class CuFile:
        def __init__(self, path: str, mode: str) -> None:
            assert mode == "r"
            self.path = path

        def __enter__(self) -> CuFile:
            return self

        def __exit__(self, *a: object) -> None: ...

        def pread(self, buf: Any, size: int, offset: int) -> Any:
            read.append((self.path, offset, size))
            return types.SimpleNamespace(get=lambda: size)

    return types.SimpleNamespace(CuFile=CuFile, __version__="25.10", defaults=defaults, **kw)


def test_kvikio_in_compatibility_mode_is_named_as_such(files: list[FileEntry]) -> None:
    read: list[tuple[str, int, int]] = []
    fake = _fake_kvikio(types.SimpleNamespace(compat_mode=lambda: True), read)
    rate, what = d2g.kvikio_read(SimCopier(store=False), files, 5.0, kvikio=fake)
    assert (
        what
        == "kvikio 25.10, compatibility mode: no GPUDirect Storage, reads bounce through host memory"
    )
    assert rate is not None and rate > 0
    assert read[1:] == list(plan_items(files, d2g.BUFFER))  # after one read to open cuFile


def test_kvikio_settings_of_each_generation_are_read_honestly() -> None:
    # 25.04 on: get("compat_mode") is an enum whose AUTO is truthy; the resolved answer wins
    new = types.SimpleNamespace(
        get=lambda name: CompatMode.AUTO, is_compat_mode_preferred=lambda: False
    )
    no_nvfs = types.SimpleNamespace(properties=types.SimpleNamespace(is_gds_available=False))
    gds = types.SimpleNamespace(properties=types.SimpleNamespace(is_gds_available=True))
    assert "cuFile's own compatibility mode" in d2g.cufile_mode(
        _fake_kvikio(new, [], cufile_driver=no_nvfs)
    )
    assert d2g.cufile_mode(_fake_kvikio(new, [], cufile_driver=gds)).endswith("GPUDirect Storage")
    # 24.12 and 25.02: compat_mode() is the enum, AUTO unresolved
    auto = types.SimpleNamespace(compat_mode=lambda: CompatMode.AUTO)
    assert "AUTO or unknown" in d2g.cufile_mode(_fake_kvikio(auto, []))
    on = types.SimpleNamespace(get=lambda name: CompatMode.ON)
    assert d2g.COMPAT in d2g.cufile_mode(_fake_kvikio(on, []))


def test_a_kvikio_failure_is_a_sentence(files: list[FileEntry]) -> None:
    def broken() -> bool:
        raise RuntimeError("cuFile driver not loaded")

    fake = _fake_kvikio(types.SimpleNamespace(compat_mode=broken), [])
    rate, what = d2g.kvikio_read(SimCopier(store=False), files, 5.0, kvikio=fake)
    assert rate is None and what == "kvikio failed: RuntimeError: cuFile driver not loaded"


def test_the_probe_runs_the_path_and_reports_it_beside_the_stages(
    files: list[FileEntry], tmp_path: Path
) -> None:
    root = Path(files[0].path).parent
    before = _state(files)
    opts = ProbeOptions(
        target=str(root),
        loader="raw",
        passes=["cold", "warm"],
        time_budget_s=6,
        copier=SimCopier(real_time=True),
        link_reader=lambda i: make_link(5, 5, 16, 16),
    )
    rec = finalize(Probe(opts).run())
    path = rec.stages.pcie.disk_to_gpu
    assert path is not None and path.bytes_per_s is not None and path.files == len(files)
    assert path.cache in ("cold", "warm")
    assert rec.stages.pcie.copies  # the host-to-device probe kept it
    facts = dict(measurements(rec, findings(rec)))
    line = facts["disk→GPU"]
    assert line.startswith(f"{units.bandwidth(path.bytes_per_s)} end to end ({path.cache}, pinned")
    assert "1 thread as the path reads" in line
    assert "cuFile" in line and "kvikio" in line
    # beside the stages in all three reports
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(view(rec, findings(rec)))
    assert f"disk→GPU {line}" in " ".join(out.getvalue().split())
    assert f"| disk→GPU | {line} |" in render_markdown(rec, findings(rec))
    assert "disk→GPU" in render_html(rec, findings(rec))
    rec.save(tmp_path / "run.json")
    assert RunRecord.load(tmp_path / "run.json").stages.pcie.disk_to_gpu == path
    assert _state(files) == before


def test_a_remote_probe_says_why_it_has_no_path_and_succeeds() -> None:
    fs = fsspec.filesystem("memory")
    for i in range(6):
        fs.pipe(f"/d2g-remote/f{i}.bin", os.urandom(50_000))
    rec = finalize(
        Probe(
            ProbeOptions(
                target="memory://d2g-remote",
                loader="raw",
                time_budget_s=3,
                copier=SimCopier(real_time=True),
                link_reader=lambda i: make_link(5, 5, 16, 16),
            )
        ).run()
    )
    path = rec.stages.pcie.disk_to_gpu
    assert path is not None and path.method.startswith("not measured: remote target")
    assert dict(measurements(rec, findings(rec)))["disk→GPU"] == path.method


def test_without_a_gpu_the_probe_has_no_path_and_still_succeeds(files: list[FileEntry]) -> None:
    root = Path(files[0].path).parent
    rec = Probe(
        ProbeOptions(
            target=str(root),
            loader="raw",
            passes=["warm"],
            time_budget_s=3,
            copier="not measured: no CUDA device",
        )
    ).run()
    assert rec.stages.pcie.disk_to_gpu is None
    assert rec.stages.pcie.method == "not measured: no CUDA device"
    done = finalize(rec)
    assert "disk→GPU" not in dict(measurements(done, findings(done)))

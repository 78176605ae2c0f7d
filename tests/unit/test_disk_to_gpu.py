"""The disk-to-GPU path through the CUDA seam's stand-in: every byte arrives once and in
order, reads overlap copies, the deadline holds, the user's files are untouched, and the
record says what cuFile did (tests/integration/test_disk_to_gpu_gpu.py runs it on a GPU)."""

from __future__ import annotations

import hashlib
import os
import types
from pathlib import Path
from typing import Any

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.report import measurements
from ioprobe.collect import disk_to_gpu as d2g
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.pcie import make_link
from ioprobe.collect.probe import Probe, ProbeOptions
from ioprobe.collect.storage import plan_items
from ioprobe.record import RunRecord
from tests.fixtures.sim_copier import HostBuf, SimCopier

MIB = 1 << 20


class Recording(SimCopier):
    """Keeps what each copy carried, and what kind of host memory each buffer was."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.carried: list[bytes] = []
        self.kinds: list[bool] = []

    def host(self, nbytes: int, pinned: bool) -> HostBuf:
        self.kinds.append(pinned)
        return super().host(nbytes, pinned)

    def start(
        self, host: HostBuf, device: bytearray, nbytes: int, direction: Any, reps: int
    ) -> Any:
        self.carried.append(bytes(host.data[:nbytes]))
        return super().start(host, device, nbytes, direction, reps)


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


def test_every_byte_arrives_once_in_order_through_pinned_buffers(files: list[FileEntry]) -> None:
    c = Recording(real_time=True)
    path = d2g.measure_path(c, files, budget_s=30, cold=False, buffer_bytes=MIB)
    assert b"".join(c.carried) == _expected(files, MIB)
    assert all(len(b) <= MIB for b in c.carried)
    assert c.kinds == [True, True]  # two buffers, both page-locked
    assert path.bytes == sum(e.size for e in files) and path.files == len(files)
    assert path.method == "pinned double buffer, 2 x 1 MiB" and path.cache == "warm"


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
    warm = d2g.measure_path(SimCopier(move=False), entries, 30, False, buffer_bytes=8 * MIB)
    read_rate = warm.bytes / warm.read_seconds
    c = SimCopier(move=False, real_time=True, latency_s=0.0, rates={("h2d", True): read_rate})
    path = d2g.measure_path(c, entries, 30, False, buffer_bytes=8 * MIB)
    # serial would take read + copy; double buffering hides most of the shorter one
    assert path.seconds < 0.8 * (path.read_seconds + path.copy_seconds), path


def test_the_budget_stops_the_path(files: list[FileEntry]) -> None:
    c = SimCopier(real_time=True, latency_s=0.0, rates={("h2d", True): 5e6})
    path = d2g.measure_path(c, files, budget_s=0.3, cold=False, buffer_bytes=MIB)
    # one buffer's copy (0.2 s at 5 MB/s) may still finish past the deadline
    assert path.seconds < 0.3 + 2 * MIB / 5e6 + 0.2
    assert 0 < path.bytes < sum(e.size for e in files)


def test_cold_evicts_first_and_leaves_the_files_as_they_were(files: list[FileEntry]) -> None:
    before = {
        e.path: (os.stat(e.path).st_mtime_ns, hashlib.sha256(Path(e.path).read_bytes()).hexdigest())
        for e in files
    }
    path = d2g.measure_path(SimCopier(), files, 30, cold=True, buffer_bytes=MIB)
    assert path.cache in ("cold", "partly cached")  # tmpfs cannot evict: said, not hidden
    after = {
        e.path: (os.stat(e.path).st_mtime_ns, hashlib.sha256(Path(e.path).read_bytes()).hexdigest())
        for e in files
    }
    assert after == before


def test_kvikio_absent_is_said_plainly(files: list[FileEntry]) -> None:
    try:
        import kvikio  # noqa: F401

        pytest.skip("kvikio is installed here")
    except ImportError:
        pass
    assert d2g.kvikio_read(SimCopier(), files, 1.0) == (None, "kvikio not installed")


def test_kvikio_in_compatibility_mode_is_named_as_such(
    files: list[FileEntry], monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[tuple[str, int, int]] = []

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

    fake = types.SimpleNamespace(CuFile=CuFile, __version__="25.10")
    defaults = types.SimpleNamespace(compat_mode=lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "kvikio.defaults", defaults)
    rate, what = d2g.kvikio_read(SimCopier(store=False), files, 5.0, kvikio=fake)
    assert (
        what
        == "kvikio 25.10, compatibility mode: no GPUDirect Storage, reads bounce through host memory"
    )
    assert rate is not None and rate > 0
    assert read == list(plan_items(files, d2g.BUFFER))


def test_the_probe_runs_the_path_and_reports_it_beside_the_stages(
    files: list[FileEntry], tmp_path: Path
) -> None:
    root = Path(files[0].path).parent
    opts = ProbeOptions(
        target=str(root),
        loader="raw",
        passes=["warm"],
        time_budget_s=6,
        copier=SimCopier(real_time=True),
        link_reader=lambda i: make_link(5, 5, 16, 16),
    )
    rec = finalize(Probe(opts).run())
    path = rec.stages.pcie.disk_to_gpu
    assert path is not None and path.bytes_per_s is not None and path.files == len(files)
    assert rec.stages.pcie.copies  # the host-to-device probe kept it
    facts = dict(measurements(rec))
    assert facts["disk→GPU"].startswith(f"{path.bytes_per_s / 1e9:,.2f} GB/s end to end (warm")
    assert "storage alone" in facts["disk→GPU"]
    rec.save(tmp_path / "run.json")
    assert RunRecord.load(tmp_path / "run.json").stages.pcie.disk_to_gpu == path


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

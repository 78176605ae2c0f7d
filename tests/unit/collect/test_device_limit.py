"""The device limit: direct reads through io_uring (kept in flight by the C loop, or by the
Python one where the install built none) or threads at a queue-depth sweep read the bytes
asked for, at the offsets asked for, with the depth asked for held in flight; a file system
that refuses O_DIRECT gives a reason, not a failure; the headroom beside the loader's cold
reads names only the levers its sweep shows."""

from __future__ import annotations

import errno
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.measures import device_headroom
from ioprobe.collect import device_limit as dl
from ioprobe.collect import direct_loop
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.uring import Ring
from ioprobe.record import DeviceLimit, DirectPoint
from tests.support.direct import direct_folder
from tests.unit.analysis.test_whatif import probe_record


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with direct_folder(tmp_path) as folder:
        yield folder


# how the reads are kept in flight: the engine measure_device is asked for, and whether the
# C loop may be used for io_uring
LOOPS = {
    "c-loop": ("io_uring", True),
    "python-ring": ("io_uring", False),
    "threads": ("threads", False),
}


@pytest.fixture(params=list(LOOPS))
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name, native = LOOPS[request.param]
    if native and not direct_loop.available():
        pytest.skip("this install has no C compiler: the C loop was not built")
    if not native:
        monkeypatch.setattr(dl.direct_loop, "available", lambda: False)
    return name


def _pattern_file(path: Path, blocks: int, block: int = 4096) -> bytes:
    # each block starts with its own index, so a read from the wrong offset shows
    data = b"".join(k.to_bytes(8, "little") * (block // 8) for k in range(blocks))
    path.write_bytes(data)
    return data


def _assert_each_slot_holds(buffers: mmap.mmap, data: bytes, offsets: list[int]) -> None:
    """Slot k's 4 KiB block holds the file's bytes at ``offsets[k]``."""
    for slot, off in enumerate(offsets):
        assert buffers[slot * 4096 : (slot + 1) * 4096] == data[off : off + 4096]


def test_the_ring_reads_the_bytes_at_the_offsets_asked(disk: Path) -> None:
    data = _pattern_file(disk / "f.bin", 64)
    fd = os.open(disk / "f.bin", os.O_RDONLY | os.O_DIRECT)
    buffers = mmap.mmap(-1, 4 * 4096)
    import ctypes

    view = ctypes.c_char.from_buffer(buffers)
    base = ctypes.addressof(view)
    try:
        with Ring(4) as ring:
            offsets = [17 * 4096, 3 * 4096, 63 * 4096, 0]
            for slot, off in enumerate(offsets):
                ring.prepare(slot, base + slot * 4096, 4096, 100 + slot)
                ring.submit(slot, fd, off)
            seen: dict[int, int] = {}
            while len(seen) < 4:
                ring.enter(1)
                seen.update(ring.completions())
        assert seen == {100 + s: 4096 for s in range(4)}
        _assert_each_slot_holds(buffers, data, offsets)
    finally:
        del view
        buffers.close()
        os.close(fd)


def test_each_point_reads_whole_blocks_and_holds_its_depth(disk: Path, engine: str) -> None:
    _pattern_file(disk / "a.bin", 2048)  # 8 MiB
    entries = [FileEntry(str(disk / "a.bin"), 8 << 20)]
    dev = dl.measure_device(
        entries, 1.2, blocks=[4096, 1 << 20], depths=[1, 8], engine=engine, plateau=False
    )
    assert dev.engine == engine and dev.files == 1 and dev.bytes_spanned == 8 << 20
    assert [(p.block_bytes, p.queue_depth) for p in dev.sweep] == [
        (4096, 1),
        (4096, 8),
        (1 << 20, 1),
        (1 << 20, 8),
    ]
    for p in dev.sweep:
        assert p.reads > 0
        # every read a whole block: the bytes are the reads times the block
        assert p.read_bytes_per_s == pytest.approx(p.reads_per_s * p.block_bytes, rel=1e-9)
        # Little's law: reads per second times the mean time in flight is the depth held
        # (the p50 stands in for the mean; a busy host's stragglers lift the tail only)
        assert p.latency_p50_ms is not None and p.latency_p99_ms is not None
        in_flight = p.reads_per_s * p.latency_p50_ms / 1e3
        assert 0.3 * p.queue_depth <= in_flight <= 1.5 * p.queue_depth, (p, in_flight)


def test_small_files_are_read_in_blocks_they_hold(disk: Path) -> None:
    for k in range(8):
        _pattern_file(disk / f"s{k}.bin", 32)  # 128 KiB each
    entries = [FileEntry(str(disk / f"s{k}.bin"), 128 << 10) for k in range(8)]
    assert dl.blocks_for([e.size for e in entries]) == (4096, 128 << 10)
    dev = dl.measure_device(entries, 0.6, depths=[1, 4])
    assert {p.block_bytes for p in dev.sweep} == {4096, 128 << 10}
    # files under 4 KiB are no target
    tiny = disk / "tiny"
    tiny.write_bytes(b"x" * 100)
    none = dl.measure_device([FileEntry(str(tiny), 100)], 0.5)
    assert not none.sweep and none.note and "4 KiB" in none.note


def test_a_file_system_that_refuses_direct_reads_gives_a_reason(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pattern_file(disk / "a.bin", 16)
    real_open = os.open

    def no_direct(path: object, flags: int, *a: object) -> int:
        if flags & os.O_DIRECT:  # what tmpfs before 6.6 and many FUSE mounts answer
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(dl.os, "open", no_direct)
    dev = dl.measure_device([FileEntry(str(disk / "a.bin"), 16 * 4096)], 0.5)
    assert not dev.sweep and dev.note is not None and "O_DIRECT" in dev.note


def test_a_read_the_device_fails_ends_the_sweep_with_a_note_not_a_hang(
    disk: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one target of many fails (a descriptor the kernel refuses: EBADF, as a failing disk
    # answers EIO). The ring raised at the first failed completion with the rest of its
    # batch uncounted, and then waited in the kernel for reads that would never come
    _pattern_file(disk / "a.bin", 256)
    entries = [FileEntry(str(disk / "a.bin"), 256 * 4096)]
    real = dl._targets

    def one_bad(fds: list[tuple[int, int]], block: int, rng: object) -> list[tuple[int, int]]:
        targets = real(fds, block, rng)  # type: ignore[arg-type]
        return [*targets[:50], (1 << 20, 0), *targets[50:]]

    monkeypatch.setattr(dl, "_targets", one_bad)
    start = time.monotonic()
    dev = dl.measure_device(entries, 2.0, blocks=[4096], depths=[16, 32], engine=engine)
    assert time.monotonic() - start < 5.0
    assert dev.note is not None and "a direct read failed" in dev.note
    assert dev.sweep == []  # the first point met the failed read: nothing measured stands


def _c_buffers(depth: int, block: int = 4096) -> tuple[mmap.mmap, object, int]:
    import ctypes

    buffers = mmap.mmap(-1, depth * block)
    view = ctypes.c_char.from_buffer(buffers)
    return buffers, view, ctypes.addressof(view)


@pytest.mark.skipif(not direct_loop.available(), reason="the C loop was not built")
def test_the_c_loop_reads_the_bytes_at_the_offsets_asked(disk: Path) -> None:
    data = _pattern_file(disk / "f.bin", 64)
    fd = os.open(disk / "f.bin", os.O_RDONLY | os.O_DIRECT)
    # one read per slot, each its own block: the last read into a slot is the one it keeps
    offsets = [17 * 4096, 3 * 4096, 63 * 4096, 0]
    buffers, view, base = _c_buffers(4)
    try:
        targets = direct_loop.Targets.of([(fd, off) for off in offsets])
        done = direct_loop.reads(targets, 4096, 4, 0.0, base)
        assert isinstance(done, direct_loop.Loop)
        assert done.failed == 0 and done.in_flight == 0
        assert done.reads == 4 and done.bytes == 4 * 4096 and len(done.latencies_ns) == 4
        _assert_each_slot_holds(buffers, data, offsets)
    finally:
        del view
        buffers.close()
        os.close(fd)


@pytest.mark.skipif(not direct_loop.available(), reason="the C loop was not built")
def test_ctrl_c_stops_the_c_loop_with_its_reads_drained(disk: Path) -> None:
    import _thread
    import threading

    _pattern_file(disk / "f.bin", 256)
    fd = os.open(disk / "f.bin", os.O_RDONLY | os.O_DIRECT)
    buffers, view, base = _c_buffers(8)
    targets = direct_loop.Targets.of([(fd, k * 4096) for k in range(256)])
    timer = threading.Timer(0.3, _thread.interrupt_main)
    t0 = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            direct_loop.reads(targets, 4096, 8, 30.0, base)  # asked for 30 s
        # the loop saw its stop flag within one wait and drained its 8 reads
        assert time.monotonic() - t0 < 3.0
        loops = [t for t in threading.enumerate() if t.name == "ioprobe-direct-reads"]
        assert not [t for t in loops if t.is_alive()]
    finally:
        timer.cancel()
        del view
        buffers.close()
        os.close(fd)


def _with_device(points: list[tuple[int, int, float]]) -> object:
    rec = probe_record()  # its cold pass: 320 MB/s at 8 threads
    rec.stages.storage.device = DeviceLimit(
        files=1,
        sweep=[
            DirectPoint(
                block_bytes=b,
                queue_depth=d,
                reads=100,
                seconds=1.0,
                read_bytes_per_s=r,
                reads_per_s=r / b,
            )
            for b, d, r in points
        ],
    )
    return rec


def test_headroom_names_the_levers_its_sweep_shows() -> None:
    rec = _with_device(
        [(4096, 64, 200e6), (1 << 20, 1, 300e6), (1 << 20, 8, 480e6), (1 << 20, 32, 900e6)]
    )
    h = device_headroom(rec)  # type: ignore[arg-type]
    assert h is not None and h.large is not None and h.small is not None
    assert h.large.depth == 32 and h.ratio == pytest.approx(900 / 320)
    assert h.at_loader_depth == 480e6
    # direct reads at the loader's 8 threads give 1.5x, and 32 in flight 1.9x over those
    assert h.levers == ["direct", "depth"]


def test_no_lever_where_the_loader_already_gets_the_device() -> None:
    rec = _with_device([(1 << 20, 4, 300e6), (1 << 20, 8, 330e6), (1 << 20, 16, 335e6)])
    h = device_headroom(rec)  # type: ignore[arg-type]
    assert h is not None and h.levers == []
    from ioprobe.analysis.report import findings
    from ioprobe.render.terminal import render

    done = finalize(rec)  # type: ignore[arg-type]
    text = " ".join(render(done, findings(done), width=200).split())
    assert "device limit" in text and "already get what the device gives" in text


class _RingThatLost:
    """A ring whose reads in flight number ``real``, while the caller counts one more: a
    signal raised between a reap and its count leaves the count so. Any wait in the kernel
    for a completion would be a wait for ever: it fails the test instead."""

    def __init__(self, real: int) -> None:
        self.pending = real

    def enter(self, wait: int) -> None:
        assert wait == 0, "a wait in the kernel for a completion that may never come"

    def completions(self) -> list[tuple[int, int]]:
        done, self.pending = [(0, 4096)] * self.pending, 0
        return done


def test_a_drain_told_of_a_read_that_never_comes_ends_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dl, "DRAIN_S", 0.2)
    ring = _RingThatLost(real=3)
    t0 = time.monotonic()
    assert dl._drain(ring, 4) is False  # type: ignore[arg-type]  # one read never came back
    assert 0.2 <= time.monotonic() - t0 < 1.0
    assert ring.pending == 0  # the three real ones were reaped

"""Writing an output never destroys anything: a file is replaced atomically, a link's target is
written and the link kept, a device or FIFO is written in place, anything else is refused."""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ioprobe.errors import BadInputError
from ioprobe.outputs import check_output, destination, fd_of, write_output
from ioprobe.record import RunRecord
from tests.unit.ground.test_record import make_record


def test_a_new_file_gets_the_text_the_umask_mode_and_no_leftovers(tmp_path: Path) -> None:
    mask = os.umask(0o027)
    try:
        write_output(tmp_path / "out.json", "hello\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.json").read_text() == "hello\n"
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_an_existing_file_is_replaced_by_a_rename_not_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("old, and longer than the new text\n")
    before = out.stat().st_ino
    write_output(out, "new\n")
    assert out.read_text() == "new\n"
    assert out.stat().st_ino != before  # a new file renamed over it: no half-written state


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "run.json").write_text("old\n")
    link = tmp_path / "run.json"
    link.symlink_to(real / "run.json")
    make_record().save(link)
    assert link.is_symlink() and os.readlink(link) == str(real / "run.json")
    assert RunRecord.load(real / "run.json") == make_record()
    assert sorted(p.name for p in real.iterdir()) == ["run.json"]  # the temp was beside it


def test_a_dangling_symlink_writes_the_file_it_names(tmp_path: Path) -> None:
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    write_output(link, "made\n")
    assert link.is_symlink()
    assert (tmp_path / "elsewhere.json").read_text() == "made\n"


def test_a_dangling_symlink_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "gone" / "run.json")
    with pytest.raises(BadInputError, match="whose directory does not exist"):
        write_output(link, "x")
    with pytest.raises(BadInputError, match="whose directory does not exist"):
        check_output(link)
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_dev_full_fails_with_no_space_and_stays_a_device() -> None:
    with pytest.raises(OSError) as info:
        make_record().save("/dev/full")
    assert info.value.errno == errno.ENOSPC
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_dev_null_is_written_in_place_and_stays_a_device() -> None:
    assert check_output("/dev/null").kind == "stream"
    write_output("/dev/null", "discarded\n")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def _read_fifo_in_thread(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def test_a_fifo_is_written_in_place_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert check_output(fifo).kind == "stream"  # checking never opens it: no reader needed
    thread, got = _read_fifo_in_thread(fifo)
    write_output(fifo, "through the pipe\n")
    thread.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_descriptor_path_is_written_through_the_descriptor(tmp_path: Path) -> None:
    # a descriptor redirected to a file that already holds text (a shell's >>): the text is
    # added after it, never truncated and never replaced by a new file
    log = tmp_path / "log.txt"
    log.write_text("kept\n")
    with open(log, "a") as fh:
        ino = os.fstat(fh.fileno()).st_ino
        write_output(f"/dev/fd/{fh.fileno()}", "added\n")
    assert log.read_text() == "kept\nadded\n"
    assert log.stat().st_ino == ino


def test_a_descriptor_path_reaches_a_pipe() -> None:
    r, w = os.pipe()
    try:
        write_output(f"/proc/self/fd/{w}", "piped\n")
        assert os.read(r, 100) == b"piped\n"
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize(
    ("path", "fd"),
    [
        ("/dev/stdout", 1),
        ("/dev/stderr", 2),
        ("/dev/fd/5", 5),
        ("/proc/self/fd/12", 12),
        ("/dev/stdin.json", None),
        ("/dev/null", None),
        ("out.json", None),
    ],
)
def test_descriptor_names_are_recognised(path: str, fd: int | None) -> None:
    assert fd_of(path) == fd


def test_a_descriptor_that_is_not_open_or_read_only_is_refused() -> None:
    r, w = os.pipe()
    os.close(w)
    try:
        with pytest.raises(BadInputError, match="not open"):
            check_output(f"/dev/fd/{w}")
        with pytest.raises(BadInputError, match="reading only"):
            check_output(f"/dev/fd/{r}")
    finally:
        os.close(r)


def unix_socket(tmp_path: Path) -> Path:
    path = tmp_path / "sock"
    socket.socket(socket.AF_UNIX).bind(str(path))  # the node stays after the socket closes
    return path


def block_device(tmp_path: Path) -> Path:
    """A block device node to refuse: made in tmp_path where mknod is allowed (root), else a
    link to one in /dev (an unprivileged run could not replace that node anyway)."""
    node = tmp_path / "blk"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 0))
        return node
    except PermissionError:
        pass
    found = next((p for p in Path("/dev").iterdir() if p.is_block_device()), None)
    if found is None:
        pytest.skip("no block device node on this machine and mknod is not allowed")
    node.symlink_to(found)
    return node


# kind -> (how to make one in tmp_path, how to tell it is still one, the refusal's words)
SPECIAL: dict[str, tuple[Callable[[Path], Path], Callable[[Path], bool], str]] = {
    "directory": (lambda tmp: tmp, Path.is_dir, "is a directory"),
    "socket": (unix_socket, Path.is_socket, "is a socket"),
    "block": (block_device, Path.is_block_device, "is a block device"),
}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_directory_a_socket_and_a_block_device_are_refused_untouched(
    kind: str, tmp_path: Path
) -> None:
    make, still, message = SPECIAL[kind]
    target = make(tmp_path)
    with pytest.raises(BadInputError, match=message):
        check_output(target)
    with pytest.raises(BadInputError, match=message):
        write_output(target, "x")
    assert still(target)


def test_a_read_only_file_is_not_replaced_even_by_root(tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    out.write_text("kept\n")
    out.chmod(0o444)
    with pytest.raises(BadInputError, match="read-only"):
        write_output(out, "new\n")
    assert out.read_text() == "kept\n"


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("missing/x.json", "no such directory"),
        ("file.txt/x.json", "is not a directory"),
    ],
)
def test_a_path_in_no_directory_is_refused_by_the_check(
    tmp_path: Path, relative: str, message: str
) -> None:
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(BadInputError, match=message):
        check_output(tmp_path / relative)


def test_a_directory_that_refuses_new_files_is_found_even_as_root() -> None:
    # /proc takes no new files from anyone, root included, whatever access() says
    with pytest.raises(BadInputError, match="cannot write in '/proc'"):
        check_output("/proc/ioprobe-check.json")


def test_the_check_writes_nothing_it_leaves_behind(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("old\n")
    dest = check_output(tmp_path / "old.json")
    assert (dest.kind, dest.path) == ("file", str(tmp_path / "old.json"))
    assert [p.name for p in tmp_path.iterdir()] == ["old.json"]
    assert (tmp_path / "old.json").read_text() == "old\n"


def test_a_file_through_a_link_is_named_by_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    assert destination(tmp_path / "b.json").path == destination(tmp_path / "a.json").path


def test_a_fifo_no_one_reads_is_given_up_after_its_deadline(tmp_path: Path) -> None:
    import time

    from ioprobe.outputs import _write_stream

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(BadInputError, match=r"a FIFO no one read for 0\.3 s; not written"):
        _write_stream(str(fifo), b"x" * 10, idle_s=0.3)
    assert time.monotonic() - t0 < 2.0


def test_a_reader_that_stops_reading_is_given_up_after_its_deadline(tmp_path: Path) -> None:
    from ioprobe.outputs import _write_stream

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # a reader that opens the FIFO and never reads: the pipe fills at 64 KiB
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(BadInputError, match=r"its reader took nothing for 0\.3 s"):
            _write_stream(str(fifo), b"x" * (1 << 20), idle_s=0.3)
    finally:
        os.close(reader)


def test_a_stream_that_drips_is_given_up_though_never_silent_for_long(tmp_path: Path) -> None:
    import time

    from ioprobe.outputs import read_input

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    stop = threading.Event()

    def drip() -> None:
        fd = os.open(fifo, os.O_WRONLY)
        try:
            while not stop.is_set():
                os.write(fd, b"{")
                time.sleep(0.1)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    writer = threading.Thread(target=drip, daemon=True)
    writer.start()
    time.sleep(0.2)  # the writer has the FIFO open
    t0 = time.monotonic()
    try:
        with pytest.raises(BadInputError, match="a stream that drips"):
            read_input(fifo, "run.json", 1 << 20, idle_s=0.5)
    finally:
        stop.set()
    assert time.monotonic() - t0 < 3.0


def test_a_name_near_the_file_systems_limit_is_written(tmp_path: Path) -> None:
    # 250 bytes is a legal name; the temporary file beside it must not be longer than 255
    out = tmp_path / ("r" * 245 + ".json")
    write_output(out, "{}\n")
    assert out.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_relative_output_in_a_removed_current_folder_is_one_line(tmp_path: Path) -> None:
    # the shell's folder removed under it (a cleaned build tree): realpath asks getcwd, which
    # raised FileNotFoundError through the whole command
    gone = tmp_path / "gone"
    gone.mkdir()
    here = os.getcwd()
    os.chdir(gone)
    try:
        gone.rmdir()
        with pytest.raises(BadInputError, match="current folder was removed"):
            check_output("run.json")
    finally:
        os.chdir(here)

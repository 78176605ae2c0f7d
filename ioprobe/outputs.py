"""Writing a file the user named (a record, a page, a summary, a trace) without destroying
anything.

A regular file, or a new one, is replaced atomically: a temporary file beside it, then a
rename. A symlink is followed and its target written the same way, so the link stays a link.
A character device or a FIFO (a terminal, /dev/null, a named pipe) is written in place,
never replaced; /dev/stdout, /dev/stderr and /dev/fd/N are this process's own descriptors
and are written through them, never reopened (reopening a redirected stdout would truncate
it). Anything else (a directory, a socket, a block device) is refused.

``check_output`` answers, before any work starts, whether a path can be written;
``write_output`` writes it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ioprobe.errors import BadInputError

# names of this process's own descriptors; /dev/fd is a link to /proc/self/fd on Linux
_FD_PATH = re.compile(r"/dev/(stdout|stderr)|/dev/fd/(\d+)|/proc/self/fd/(\d+)")

# the kinds refused, by the name a user knows them by
_REFUSED_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISBLK, "a block device"),
)


@dataclass(frozen=True)
class Destination:
    """Where an output path leads, and so how it is written.

    ``file``: replaced atomically at ``path``, the real path (a link's target).
    ``stream``: a character device or FIFO, opened at ``path`` and written in place.
    ``fd``: one of this process's descriptors, ``fd``, written through.
    """

    kind: Literal["file", "stream", "fd"]
    path: str
    fd: int = -1


def fd_of(path: str | os.PathLike[str]) -> int | None:
    """The descriptor a path names (/dev/stdout: 1, /dev/fd/3: 3), None for any other path."""
    m = _FD_PATH.fullmatch(os.fspath(path))
    if m is None:
        return None
    std, fd, proc_fd = m.groups()
    if std is not None:
        return 1 if std == "stdout" else 2
    return int(fd if fd is not None else proc_fd)


# Set where the command started with stdout closed (``>&-``): descriptor 1 is /dev/null then
# (so that no file ioprobe opens takes its number), and what an output writes there is lost
_stdout_closed = False


def stdout_was_closed() -> None:
    """Note that the command started with stdout closed (``cli.main`` fills it)."""
    global _stdout_closed
    _stdout_closed = True


def check_stdout_open(name: str) -> None:
    """BadInputError naming ``name`` where an output asked for on stdout would be lost: the
    command started with stdout closed (``cat FILE >&-`` fails too, where it went on
    silently, exit 0, nothing written)."""
    if _stdout_closed:
        raise BadInputError(
            f"{name}: stdout is closed (the command was started with >&-): what is written "
            "there is lost; give a file name"
        )


def writes_stdout(path: str | None) -> bool:
    """Whether an output goes to standard output: '-', /dev/stdout, /dev/fd/1."""
    return path is not None and (path == "-" or fd_of(path) == 1)


def destination(path: str | os.PathLike[str]) -> Destination:
    """What writing ``path`` would write to; BadInputError naming the path if it is a kind
    ioprobe must not write (a directory, a socket, a block device, a read-only file, a link
    into a missing directory)."""
    name = os.fsdecode(path)  # bytes too, as open() takes them
    if not name:
        # '' resolves to the working directory: the atomic write would rename over it
        raise BadInputError("an empty file name; give a file name")
    if name.endswith(os.sep):
        # "out.json/" names a directory: writing the file "out.json" is not what was asked
        raise BadInputError(f"{name}: names a directory (it ends in {os.sep}); give a file name")
    fd = fd_of(name)
    if fd is not None:
        return Destination("fd", name, fd)
    try:
        st = os.stat(name)  # follows links: a link is judged by what it points at
    except (FileNotFoundError, NotADirectoryError):
        return _new_file(name)
    except OSError as exc:  # a link loop, a parent that cannot be searched
        raise BadInputError(f"{name}: cannot be used as an output: {exc.strerror}") from None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return Destination("stream", name)
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _REFUSED_KINDS if test(st.st_mode)), "not a regular file")
        raise BadInputError(f"{name}: is {kind}; give a file name")
    if not os.access(name, os.W_OK) or not st.st_mode & 0o222:
        # replacing it would succeed (the rename needs only its directory), but the user
        # made it read-only to keep it; root may write it anyway, and is stopped by its
        # mode as rm asks before removing a write-protected file
        raise BadInputError(f"{name}: the file is read-only; ioprobe will not replace it")
    return Destination("file", _real(name))


def _real(name: str) -> str:
    """``name`` with its links resolved, from /. A relative name in a folder removed since
    the shell entered it has no such path: that is said, not raised."""
    try:
        return os.path.realpath(name)
    except FileNotFoundError:  # os.getcwd() of a removed folder
        raise BadInputError(
            f"{name}: the current folder was removed; give the path from /"
        ) from None


def _new_file(name: str) -> Destination:
    """A path that does not exist yet, or a link to one: the file it names, whose directory
    must exist."""
    given = os.path.dirname(name) or "."
    if not os.path.islink(name) and not os.path.isdir(given):
        # the kernel's answer, not realpath's: "nosuch/../run.json" folds to "run.json" as a
        # string, where no file system resolves it
        if os.path.exists(given):
            raise BadInputError(f"{name}: {given!r} is not a directory")
        raise BadInputError(f"{name}: no such directory {given!r}")
    real = _real(name)
    parent = os.path.dirname(real)
    if not os.path.isdir(parent):
        if os.path.islink(name):
            raise BadInputError(f"{name}: is a symlink to {real!r}, whose directory does not exist")
        given = os.path.dirname(name) or "."
        if os.path.exists(given):
            raise BadInputError(f"{name}: {given!r} is not a directory")
        raise BadInputError(f"{name}: no such directory {given!r}")
    return Destination("file", real)


def check_output(path: str | os.PathLike[str]) -> Destination:
    """``destination(path)``, having made sure it can be written, without writing it: a
    file's directory accepts a new file, a device or FIFO is writable, a descriptor is open
    for writing. Raises BadInputError with one line naming the path."""
    name = os.fspath(path)
    if writes_stdout(os.fsdecode(name)):  # a bytes path too, as open() takes them
        check_stdout_open(os.fsdecode(name))
    dest = destination(name)
    if dest.kind == "file":
        _check_directory(name, os.path.dirname(dest.path))
    elif dest.kind == "stream":
        # a FIFO is not opened here: that would wait for a reader
        if not os.access(dest.path, os.W_OK):
            raise BadInputError(f"{name}: permission denied")
    else:
        _check_descriptor(name, dest.fd)
    return dest


def _check_directory(name: str, parent: str) -> None:
    """A file can be created in ``parent``: a temporary one is made and removed, which also
    catches what permission bits cannot show (a read-only mount, /proc, a full disk's inode
    table, root's write to a directory that refuses it anyway)."""
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInputError(f"{name}: cannot write in {parent!r}: permission denied")
    if _append_only(parent):
        # files can be made there but never removed or replaced: the check's own file would
        # stay, and so would every temporary file of an atomic write
        raise BadInputError(f"{name}: {parent!r} is append-only or immutable; give another folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".ioprobe-check-", dir=parent)
    except OSError as exc:
        raise BadInputError(f"{name}: cannot write in {parent!r}: {exc.strerror}") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError as exc:
        raise BadInputError(
            f"{name}: a file made in {parent!r} cannot be removed ({exc.strerror}); "
            f"{os.path.basename(probe)!r} is left there"
        ) from None


FS_IOC_GETFLAGS = 0x80086601  # the inode flags chattr sets (x86-64 and arm64 value)
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20


def _append_only(folder: str) -> bool:
    """Whether ``folder`` has chattr's append-only or immutable flag; False where the file
    system keeps no such flags."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        flags = bytearray(8)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags)
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(int.from_bytes(flags[:4], sys.byteorder) & (FS_APPEND_FL | FS_IMMUTABLE_FL))


def _check_descriptor(name: str, fd: int) -> None:
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        raise BadInputError(f"{name}: descriptor {fd} is not open in this process") from None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise BadInputError(f"{name}: descriptor {fd} is open for reading only")


def write_output(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` as ``destination`` says: a file atomically, a device, a
    FIFO or a descriptor in place. Raises BadInputError for a kind ioprobe must not write and
    OSError when the write itself fails (a full disk, /dev/full, a closed pipe)."""
    dest = destination(path)
    data = text.encode("utf-8")
    if dest.kind == "file":
        atomic_write(dest.path, text)
    elif dest.kind == "stream":
        _write_stream(dest.path, data)
    else:
        # what Python has buffered for the same descriptor goes first
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _write_all(dest.fd, data)


def _write_stream(path: str, data: bytes, idle_s: float | None = None) -> None:
    """``data`` into a FIFO or a device, never blocked for ever: a FIFO no one opens for
    reading, or a reader that stops reading, fails after ``idle_s`` seconds (STREAM_IDLE_S)."""
    idle = STREAM_IDLE_S if idle_s is None else idle_s
    # no O_CREAT: a node removed since it was looked at is not recreated as a file
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK
    deadline = time.monotonic() + idle
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            # ENXIO: a FIFO with no reader yet; wait for one, not for ever
            if time.monotonic() > deadline:
                raise BadInputError(
                    f"{path}: a FIFO no one read for {idle:g} s; not written"
                ) from None
            time.sleep(0.05)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            # replaced by something else since it was looked at: writing in place would
            # overwrite the start of a file and leave its old tail
            raise BadInputError(f"{path}: changed while ioprobe was writing it; not written")
        _write_waiting(fd, data, path, idle)
    finally:
        os.close(fd)


def _write_waiting(fd: int, data: bytes, path: str, idle_s: float) -> None:
    import select  # only here: a stream is the rare case

    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # the reader's side is full: wait for room, not for ever
            _, ready, _ = select.select([], [fd], [], idle_s)
            if not ready:
                raise BadInputError(
                    f"{path}: its reader took nothing for {idle_s:g} s; not all written"
                ) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    crash or Ctrl-C mid-write leaves the old file (or none), never half a new one. ``path``
    must be a regular file or a new one: ``write_output`` decides that."""
    target = Path(path)
    # the temporary name is a hidden prefix of the target's, cut short: a name near the file
    # system's 255-byte limit would otherwise fail only after the measurement
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", dir=target.parent or ".")
    try:
        # mkstemp makes the file private (0600); a report is as readable as any file the
        # user creates
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- reading a file the user named --------------------------------------------------------

# how long a stream (a FIFO, a pipe, /dev/stdin) may stay silent before the read gives up
STREAM_IDLE_S = 10.0
# and how slowly it may deliver once past that long: a writer that drips a byte now and then
# is never silent for long, and would hold the read for ever
STREAM_MIN_BYTES_PER_S = 64_000


def read_input(
    path: str | os.PathLike[str],
    what: str,
    limit: int,
    *,
    idle_s: float = STREAM_IDLE_S,
    opens: bytes = b"",
) -> str:
    """The text of a file the user named (a record, ``--catalog``, ``--cost``), read with a
    size limit and, for a stream, a deadline: never blocked for ever, never read without end.

    A regular file larger than ``limit`` bytes is refused before it is read. A FIFO, a pipe
    or a character device (``<(cat run.json)``, /dev/stdin) is read as it comes, opened without
    blocking (a FIFO nobody writes to reads as empty instead of waiting for a writer), until
    its end, ``limit`` bytes (/dev/zero), ``idle_s`` seconds without a byte, or, past
    ``idle_s`` seconds, fewer than STREAM_MIN_BYTES_PER_S on average (a drip). A directory,
    a socket or a block device is refused. Where ``opens`` is given (``b"{"`` for a JSON
    object), text whose first byte past white space is another is refused at that byte, not
    after a gigabyte of ``yes``. Every refusal is a ``BadInputError`` starting ``what``;
    text that is not UTF-8 is one too. A UTF-8 byte-order mark before the text is dropped.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInputError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{what}: is a directory, expected a file") from None
    except OSError as exc:
        raise BadInputError(f"{what}: cannot read: {exc.strerror or exc}") from None
    try:
        data = _read_fd(fd, what, limit, idle_s, opens)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8-sig")  # a byte-order mark an editor wrote is no text
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what}: not UTF-8 text (byte {exc.start})") from None


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark


def _read_fd(fd: int, what: str, limit: int, idle_s: float, opens: bytes) -> bytes:
    mode = os.fstat(fd).st_mode
    for test, kind in _REFUSED_KINDS:
        if test(mode):
            raise BadInputError(f"{what}: is {kind}, expected a file")
    if stat.S_ISREG(mode):
        size = os.fstat(fd).st_size
        if size > limit:
            raise BadInputError(f"{what}: {size:,} bytes, more than the {limit:,} allowed")
    import select  # only here: a stream is the rare case

    chunks: list[bytes] = []
    got = 0
    started = time.monotonic()
    while True:
        try:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
        except BlockingIOError:  # a stream with nothing yet: wait for a byte, not for ever
            took = time.monotonic() - started
            if took > idle_s and got < STREAM_MIN_BYTES_PER_S * took:
                raise BadInputError(
                    f"{what}: {got:,} bytes in {took:.0f} s (a stream that drips, not a file)"
                ) from None
            ready, _, _ = select.select([fd], [], [], idle_s)
            if not ready:
                raise BadInputError(
                    f"{what}: nothing arrived for {idle_s:g} s (a FIFO or a pipe no one writes)"
                ) from None
            continue
        except OSError as exc:
            raise BadInputError(f"{what}: cannot read: {exc.strerror or exc}") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        got += len(chunk)
        if opens:
            # a byte-order mark an editor wrote before the text is no part of it
            head = (chunk.removeprefix(BOM) if got == len(chunk) else chunk).lstrip()
            if head and head[:1] != opens:
                raise BadInputError(
                    f"{what}: not valid JSON (it does not start with '{opens.decode()}')"
                )
            opens = opens if not head else b""  # one byte decides it
        if got > limit:
            raise BadInputError(f"{what}: more than the {limit:,} bytes allowed (a device?)")

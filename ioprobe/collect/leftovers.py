"""The tool's own temporary files and folders, named for the process that made them, and
the sweep that removes those a killed process left: SIGKILL cannot be caught, so a probe's
payload file or a run's records folder outlives a ``kill -9``, and the next one removes it.

A name holds the pid and a tag of where that pid means the process (the host's boot and its
pid namespace): a ``TMPDIR`` on storage that several nodes or containers share holds other
hosts' entries whose pid says nothing here, and those are left alone, as are other users'
entries and names not made here."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import zlib


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _where() -> str:
    """The host's boot and this process's pid namespace, as 8 hex digits: the same for
    every process whose pids this one can see."""
    parts = []
    for read in (_boot_id, lambda: os.readlink("/proc/self/ns/pid")):
        try:
            parts.append(read())
        except OSError:
            parts.append("")
    return f"{zlib.crc32('|'.join(parts).encode()):08x}"


def own_prefix(prefix: str, pid: int | None = None) -> str:
    """The name prefix of this process's temporary entry (for ``tempfile.mkstemp`` or
    ``mkdtemp``), or of process ``pid``'s here: ``prefix``, the pid and where it means
    that process."""
    return f"{prefix}{os.getpid() if pid is None else pid}-{_where()}-"


def running(pid: int) -> bool:
    """Whether a process ``pid`` runs here (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's, or no pid at all
        return True
    return True


def parse_mount_points(text: bytes) -> set[str]:
    """The mount points in the text of /proc/self/mountinfo (its fifth field), their octal
    escapes (``\\040`` for a space) read."""
    out: set[str] = set()
    for line in text.splitlines():
        fields = line.split(b" ")
        if len(fields) > 4:
            raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            out.add(os.fsdecode(raw))
    return out


def _mount_points() -> set[str]:
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            return parse_mount_points(f.read())
    except OSError:
        return set()


def remove_tree(path: str) -> bool:
    """Remove the folder ``path`` of the tool's own and what it holds, however deep (no
    recursion), following no link and entering no mount point under it: a filesystem a
    script mounted there, and the folders that hold it, are left as they are. Whether all
    of it went; what cannot be removed is left, never raised."""
    top = os.path.realpath(path)
    mounted = _mount_points()
    if top in mounted:
        return False
    mounts = {m for m in mounted if m.startswith(top + os.sep)}
    folders: list[str] = []
    todo = [top]
    while todo:
        d = todo.pop()
        folders.append(d)
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        if e.path not in mounts:
                            todo.append(e.path)
                        continue
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
        except OSError:  # a folder it cannot read: what is under it stays, and so do they
            continue
    for d in reversed(folders):
        with contextlib.suppress(OSError):  # it holds a mount, or what could not go
            os.rmdir(d)
    return not os.path.lexists(path)


def _pid(text: str) -> int | None:
    """The pid a name's field holds: ASCII digits alone (``str.isdigit`` takes "²" too)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 12 else None


def _named_in_use(paths: list[str]) -> set[str]:
    """Those of ``paths`` that a running process of this user names in its environment: a
    script that outlived the ``ioprobe run`` that started it (killed with SIGKILL, its
    script left running) still runs from that folder, the hook on its ``PYTHONPATH`` and its
    records folder in ``IOPROBE_RUN_DIR``, and saves its records there when it ends."""
    found: set[str] = set()
    if not paths:
        return found
    wanted = {p: os.fsencode(p) for p in paths}
    try:
        pids = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or not ours to read
            continue
        for path, name in wanted.items():
            # the path whole: followed by the end of a value, a folder under it or the next
            # entry of a path list, not a longer name that begins with it
            if re.search(re.escape(name) + rb"(?:\0|/|:|$)", env):
                found.add(path)
    return found


def remove_stale(folder: str, prefix: str) -> list[str]:
    """Remove the entries in ``folder`` named by ``own_prefix(prefix)`` in processes that
    no longer run here, files and folders (``remove_tree``), this user's alone, but one a
    running process names in its environment (``_named_in_use``); the names removed. A name
    it cannot read, an entry it cannot remove, is passed over: the sweep never stops the
    command that makes it."""
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return removed
    here = _where()
    stale = []
    for name in names:
        pid_text, _, rest = name[len(prefix) :].partition("-")
        pid = _pid(pid_text)
        if pid is not None and rest.startswith(here + "-") and not running(pid):
            stale.append(os.path.join(folder, name))
    busy = _named_in_use(stale)
    for path in stale:
        if path in busy:
            continue
        try:
            st = os.lstat(path)
            if st.st_uid != os.getuid():
                continue
            if stat.S_ISDIR(st.st_mode):
                if not remove_tree(path):
                    continue
            else:
                os.unlink(path)
            removed.append(os.path.basename(path))
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


__all__ = ["own_prefix", "parse_mount_points", "remove_stale", "remove_tree", "running"]

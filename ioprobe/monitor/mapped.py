"""The data files a DataLoader's workers mapped (``numpy.memmap``, mmap'ed chunks), counted
once each at their largest extent, and the directories whose files they mapped in turn."""

from __future__ import annotations

import os
from array import array

from ioprobe.monitor.message import MAPPED_FIELDS, folder_tag

TURNED_FILES_MAX = 100_000  # files counted per directory of files mapped in turn


def turned_files(folder: str, ending: str) -> tuple[dict[tuple[int, int], int], str]:
    """The regular files in ``folder`` named ``*ending`` (a reader maps them in turn: the
    chunks of a chunked format, a memmap per sample), by ``(device, inode)`` with their
    sizes, and "" or why the count is short: a directory that can't be listed, or one with
    more than ``TURNED_FILES_MAX`` such files, of which the first that many count. The files
    are the dataset's as far as their directory and ending say; a reader that maps only some
    of them reads less per epoch than they hold."""
    out: dict[tuple[int, int], int] = {}
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if not entry.name.endswith(ending) or not entry.is_file():
                    continue
                if len(out) == TURNED_FILES_MAX:
                    return out, f"; more than {TURNED_FILES_MAX:,} in {folder}: those counted"
                st = entry.stat()
                # keyed as a maps listing names a file (worker._file_key)
                out[(os.major(st.st_dev) << 32 | os.minor(st.st_dev), st.st_ino)] = st.st_size
    except OSError as exc:
        return out, f"; {folder} could not be listed ({exc.strerror or exc})"
    return out, ""


class MappedFiles:
    """The files mapped: bytes by (device, inode), each file's directory tag, the
    directories mapped in turn (``BatchStats.turned``) with what their listing or index
    gave, and the files seen mapped before the first such directory was added."""

    def __init__(self) -> None:
        self.files: dict[tuple[int, int], int] = {}  # (device, inode) -> bytes mapped
        self.folder_of: dict[tuple[int, int], int] = {}  # (device, inode) -> folder_tag
        # folder_tag of a directory mapped in turn whose index names its files -> (bytes,
        # files) the index gives: they replace what was seen mapped there
        self.indexed: dict[int, tuple[int, int]] = {}
        # "directory/*ending" of the files a worker unmapped (BatchStats.turned) -> the files
        # matching it, counted as it first came, and why the count may be short
        self.turned: dict[str, tuple[int, str]] = {}
        self.seen_before = 0  # files seen mapped before the directories' files were added

    def add(self, mapped: bytes) -> None:
        """A worker's mapped data files: each file's largest extent seen in any worker (a
        file mapped before the workers forked is in every one of them: counted once)."""
        quads = array("q", mapped)
        files = self.files
        for k in range(0, len(quads) - MAPPED_FIELDS + 1, MAPPED_FIELDS):
            key = (quads[k], quads[k + 1])
            self.folder_of[key] = quads[k + 3]
            if quads[k + 2] > files.get(key, 0):
                files[key] = quads[k + 2]

    def total(self) -> tuple[int, int]:
        """Bytes and files mapped: each file seen mapped once, except in a directory of files
        mapped in turn whose index names them, where the index's files count instead (a
        cache smaller than the data evicts files before any listing sees them)."""
        indexed, folder_of = self.indexed, self.folder_of
        seen = [n for k, n in self.files.items() if folder_of.get(k) not in indexed]
        return (
            sum(seen) + sum(b for b, _ in indexed.values()),
            len(seen) + sum(f for _, f in indexed.values()),
        )

    def take_turned(self, turned: bytes) -> None:
        """Count the files of the directories whose files a worker mapped in turn
        (``turned_files``) as mapped. Listed as they are first reported, not when the record
        is made: a job may remove its data before it exits (``ioprobe run`` records then).
        Where the directory holds a streaming format's index (``shards.indexed_sizes``), the
        files it names count instead of those listed and those seen mapped there: a cache
        smaller than the data (litdata's ``max_cache_size``) has evicted most of them before
        the first look."""
        from ioprobe.collect.shards import indexed_sizes  # tar, gzip: not for every worker

        for pattern in turned.decode("utf-8", "surrogateescape").split("\0"):
            if pattern in self.turned:
                continue
            if not self.turned:
                self.seen_before = len(self.files)
            folder, _, ending = pattern.rpartition("/*")
            sizes = indexed_sizes(folder, ending)
            if sizes:
                tag = folder_tag(folder.encode("utf-8", "surrogateescape"))
                self.indexed[tag] = (sum(sizes.values()), len(sizes))
                self.turned[pattern] = (len(sizes), f"; the files {folder}/index.json names")
                continue
            found, why = turned_files(folder, ending)
            self.turned[pattern] = (len(found), why)
            for key, size in found.items():
                if size > self.files.get(key, 0):
                    self.files[key] = size

    def note(self) -> str:
        """What the record says of files mapped in turn; "" where none were."""
        if not self.turned:
            return ""
        names = sorted(self.turned)
        where = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        found = sum(n for n, _ in self.turned.values())
        why = "".join(w for _, w in self.turned.values())
        return (
            f"the workers mapped data files in turn, unmapping some between two looks: the "
            f"mapped bytes count every file matching {where} ({found:,} files; "
            f"{self.seen_before:,} were seen mapped before the first was unmapped){why}"
        )


__all__ = ["TURNED_FILES_MAX", "MappedFiles", "turned_files"]

"""How many samples a target's files hold, where one file is not one sample.

Training data is often packed: WebDataset tar shards (plain or gzip-compressed), TFRecord
files, chunked streaming formats with an ``index.json`` (MDS shards, litdata chunks), Parquet
files and Arrow tables. Counting each file as a sample makes the storage stage's capacity
shards/s where the GPU counts samples/s (a chunk set read at 2 samples/s that holds
thousands), makes the sample size that of a shard (advice to "pack small samples into shards"
for data already in shards), and reads the index as a sample.

``detect`` finds the layout and counts the samples from what the format itself says: the
index's per-shard sample counts, the tar headers (one sample per WebDataset key), the TFRecord
record headers, the Parquet footers (through pyarrow, which every user of the format has) and
the Arrow record batches' headers, all by range reads, so a remote file is counted without
being fetched whole; gzip can't be hopped through, so compressed tars and TFRecords are
decompressed to count. ``--samples-per-file N`` overrides it. Index and metadata files are
taken out of the samples. ``split`` cuts a shard's bytes into its samples' bytes where the
format allows (tar members, TFRecord records, the offset tables of uncompressed MDS and
litdata chunks), so the CPU stage decodes samples, not shards.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import random
import re
import struct
import tarfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ioprobe.collect.dataset import _EXT_FORMAT, Dataset, FileEntry, _one_line
from ioprobe.collect.remote import cat_range
from ioprobe.collect.storage import READ_FLAGS

INDEX_NAMES = frozenset({"index.json"})
# metadata a Hugging Face `save_to_disk` directory holds beside its Arrow files
ARROW_SIDECARS = frozenset({"dataset_info.json", "state.json", "dataset_dict.json"})
INDEX_MAX_BYTES = 64 << 20
TAR_BLOCK = 512
# tar shards whose headers are walked at most; the rest are extrapolated by bytes
TAR_WALK_MAX = 64
FIRST_SHARD_S = 5.0  # the first shard's count may take this long past the deadline
OFFSET_SPLITTERS = ("MDS shards", "litdata chunks")
GZIP_MAGIC = b"\x1f\x8b"
# a gzip file's decompressed size is not known before its end: the walk's bound instead
UNKNOWN_SIZE = 1 << 62
SPLIT_MAX = 256 << 20  # decompressed bytes of one payload that ``split`` cuts at most
TFRECORD_HEADER = 12  # uint64 length, uint32 masked crc of the length
TFRECORD_NAME = re.compile(r"\.tfrec(?:ords?)?(?:-\d+-of-\d+)?(?:\.gz)?$")
ARROW_MAGIC = b"ARROW1"
ARROW_HEAD = 4096  # bytes read per Arrow message: its prefix and, mostly, its whole header
ARROW_META_MAX = 16 << 20  # a message header longer than this is damage, not a header
ARROW_RECORD_BATCH = 3  # the MessageHeader union's tag of a record batch
PARQUET_TAIL = 8 << 10  # bytes read at a Parquet file's end: the footer, mostly, in one read

Reader = Callable[[FileEntry, int, int], bytes]  # entry, offset, length -> bytes


class RangeReader:
    """``read(entry, offset, length)`` over a dataset's files, keeping the last file open:
    a tar's headers are read one after another from one file, and an open per header would
    cost more than the read. Use it as a context manager: the file is closed at the end."""

    def __init__(self, fs: Any | None) -> None:
        self.fs = fs
        self._path: str | None = None
        self._handle: Any = None

    def __call__(self, entry: FileEntry, offset: int, length: int) -> bytes:
        if entry.path != self._path:
            self.close()
            self._handle = (
                os.open(entry.path, READ_FLAGS)
                if self.fs is None
                else self.fs.open(entry.path, "rb")
            )
            self._path = entry.path
        if self.fs is None:
            return os.pread(self._handle, length, offset)
        self._handle.seek(offset)
        return bytes(self._handle.read(length))

    def exact(self, entry: FileEntry, offset: int, length: int) -> bytes:
        """These bytes and no more: one ranged request where the file is remote. A footer
        or a batch header far from the last read is fetched without the read-ahead block
        (megabytes) that an open remote file fetches for the hops of a header walk."""
        if self.fs is None:
            return self(entry, offset, length)
        end = min(offset + length, entry.size)
        if end <= offset:
            return b""
        return cat_range(self.fs, entry.path, offset, end)

    def close(self) -> None:
        if self._handle is not None:
            if self.fs is None:
                os.close(self._handle)
            else:
                self._handle.close()
        self._handle = self._path = None

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Layout:
    """What holds the samples. ``samples`` is None where each file is one sample."""

    # files, tar shards, tar.gz shards, tfrecord files, MDS shards, litdata chunks, parquet,
    # arrow, packed files (the flag)
    kind: str = "files"
    data: list[FileEntry] = field(default_factory=list)  # the files that hold samples
    samples: int | None = None  # samples in ``data`` (the listed entries, not extrapolated)
    basis: str | None = None  # how ``samples`` was counted
    index_files: int = 0  # index and metadata files, not samples
    sample_formats: Counter[str] = field(default_factory=Counter)  # formats inside shards
    notes: list[str] = field(default_factory=list)

    @property
    def packed(self) -> bool:
        return self.samples is not None

    @property
    def splitter(self) -> str | None:
        """How ``split`` cuts one of ``data``'s files into samples; None where it can't."""
        if self.kind in ("tar shards", "tar.gz shards", "tfrecord files"):
            return self.kind.split()[0]
        if self.kind in OFFSET_SPLITTERS and self.basis != "compressed":
            return "offsets"
        return None


def detect(
    ds: Dataset,
    read: Reader,
    *,
    samples_per_file: int | None = None,
    seconds: float = 5.0,
    seed: int = 0,
) -> Layout:
    """The layout of ``ds``'s files and the samples they hold, counted within ``seconds``.

    An index (``index.json`` of MDS or litdata) names its data files and their sample counts;
    files it does not name are left out. Tar and TFRecord files are counted from their headers
    (decompressed where gzip), Parquet files from their footers, Arrow files from their record
    batches' headers. ``samples_per_file`` overrides every count (index files are still left
    out). A dataset of plain files is one sample per file."""
    deadline = time.monotonic() + seconds
    entries = list(ds.entries)
    indexes = [e for e in entries if os.path.basename(e.path) in INDEX_NAMES]
    layout = _from_indexes(indexes, entries, read) if indexes else None
    if layout is None:
        layout = _by_format(entries, indexes, read, deadline, seed)
    if samples_per_file is not None:
        layout = replace(
            layout,
            kind="packed files" if layout.kind == "files" else layout.kind,
            samples=samples_per_file * len(layout.data),
            basis=f"--samples-per-file {samples_per_file}",
            # the flag answers what the notes ask for; what was left out still is
            notes=[n for n in layout.notes if "--samples-per-file" not in n],
        )
    return layout


def _by_format(
    entries: list[FileEntry],
    indexes: list[FileEntry],
    read: Reader,
    deadline: float,
    seed: int,
) -> Layout:
    """The layout of a target with no index that could be read: the dominant extension
    decides (tar, tar.gz, tfrecord, parquet, arrow), else plain files. An ``index.json`` of no
    known format is still no sample."""
    others = [e for e in entries if e not in indexes]
    notes = (
        [
            f"{len(indexes)} index.json of a format ioprobe does not read (not MDS or "
            "litdata): left out of the samples; pass --samples-per-file N for the samples "
            "each data file holds"
        ]
        if indexes
        else []
    )
    # the extension holding the most bytes: a saved dataset's few JSON files are not it
    exts: Counter[str] = Counter()
    for e in others:
        exts[_layout_ext(e.path)] += e.size
    top = exts.most_common(1)[0][0] if exts else ""
    data = [e for e in others if _layout_ext(e.path) == top]
    sidecars: list[FileEntry] = []
    if top == ".tar":
        layout = _walked("tar shards", data, read, deadline, seed, _tar_count, "tar headers")
    elif top == ".tar.gz":
        layout = _walked("tar.gz shards", data, read, deadline, seed, _targz_count, "tar headers")
    elif top == ".tfrecord":
        layout = _walked(
            "tfrecord files", data, read, deadline, seed, tfrecord_count, "tfrecord headers"
        )
    elif top in (".parquet", ".arrow"):
        sidecars = [e for e in others if os.path.basename(e.path) in ARROW_SIDECARS]
        layout = _table_layout(top, data, read, deadline, seed)
    elif (top == ".gz" or top not in _EXT_FORMAT) and _all_tfrecord(data, read):
        # TensorFlow's shard names need no extension: "train-00000-of-01024"
        layout = _walked(
            "tfrecord files", data, read, deadline, seed, tfrecord_count, "tfrecord headers"
        )
        layout.notes.append(
            f"files named without .tfrecord ({os.path.basename(data[0].path)}, ...) are "
            "TFRecord by their record headers: counted as such"
        )
    else:
        return Layout(data=others or entries, index_files=len(indexes), notes=notes)
    layout.index_files = len(indexes) + len(sidecars)
    layout.notes = notes + layout.notes
    return layout


def _layout_ext(path: str) -> str:
    """The extension that names a packed format: ``.tar.gz`` for ``.tgz`` too, ``.tfrecord``
    for TFRecord's spellings (``.tfrecords``, ``.tfrec``, ``x.tfrecord-00003-of-00010``, each
    maybe ``.gz``), else the last one."""
    name = os.path.basename(path.split("?", 1)[0]).lower()
    if name.endswith((".tar.gz", ".tgz")):
        return ".tar.gz"
    if TFRECORD_NAME.search(name):
        return ".tfrecord"
    return _ext(path)


def _ext(path: str) -> str:
    return os.path.splitext(path.split("?", 1)[0])[1].lower()


# ------------------------------------------------------------------------------ indexes


def _from_indexes(
    indexes: list[FileEntry], entries: list[FileEntry], read: Reader
) -> Layout | None:
    """The data files the indexes name, with their sample counts; None where no index is of
    a format read here. Each index names files in its own directory."""
    by_path = {e.path: e for e in entries}
    kinds: Counter[str] = Counter()
    data: list[FileEntry] = []
    samples = 0
    compressed = False
    for idx in indexes:
        parsed = _parse_index(_read_all(read, idx))
        if parsed is None:
            continue
        kind, shards = parsed
        kinds[kind] += 1
        base = os.path.dirname(idx.path)
        for names, n in shards:
            entry = next(
                (by_path[p] for p in (_join(base, m) for m, _ in names) if p in by_path), None
            )
            if entry is not None:
                data.append(entry)
                samples += n
                compressed |= entry.path != _join(base, names[0][0])
    if not kinds:
        return None
    named = {e.path for e in data}
    left_out = [e for e in entries if e.path not in named and e not in indexes]
    notes = (
        [f"{len(left_out)} files no index names were left out of the samples"] if left_out else []
    )
    if not data:
        return None
    return Layout(
        kind=kinds.most_common(1)[0][0],
        data=data,
        samples=samples,
        basis="compressed" if compressed else "index",
        index_files=len(indexes),
        notes=notes,
    )


def _join(base: str, name: str) -> str:
    if "://" in base or "://" in name:
        return f"{base.rstrip('/')}/{name}"
    return os.path.join(base, name)


def _read_all(read: Reader, entry: FileEntry) -> bytes:
    return read(entry, 0, min(entry.size, INDEX_MAX_BYTES))


def _parse_index(raw: bytes) -> tuple[str, list[tuple[list[tuple[str, int]], int]]] | None:
    """(layout kind, [([(file name that may hold a shard, its bytes or -1)], samples)]) from
    an MDS or litdata ``index.json``; None for anything else.

    MDS lists ``shards``, each with ``samples`` and its ``raw_data`` (and, when compressed,
    ``zip_data``) basename and bytes; litdata lists ``chunks``, each with ``chunk_size``
    samples, its ``filename`` and ``chunk_bytes``. A compressed MDS shard is on disk under its
    ``zip_data`` name."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth
        return None
    if not isinstance(doc, dict):
        return None
    out: list[tuple[list[tuple[str, int]], int]] = []
    shards = doc.get("shards")
    if isinstance(shards, list):
        for s in shards:
            n = _count(s.get("samples") if isinstance(s, dict) else None)
            names = [
                (d["basename"], _size_field(d.get("bytes")))
                for key in ("raw_data", "zip_data")
                if isinstance(d := s.get(key) if isinstance(s, dict) else None, dict)
                and isinstance(d.get("basename"), str)
            ]
            if n is not None and names:
                out.append((names, n))
        return ("MDS shards", out) if out else None
    chunks = doc.get("chunks")
    if isinstance(chunks, list):
        for c in chunks:
            if not isinstance(c, dict):
                continue
            n, name = _count(c.get("chunk_size")), c.get("filename")
            if n is not None and isinstance(name, str):
                out.append(([(name, _size_field(c.get("chunk_bytes")))], n))
        return ("litdata chunks", out) if out else None
    return None


# Samples one shard or chunk may claim: far past any real one (a trillion), below the
# figures a record holds (1e30), so a damaged or hostile index cannot make a record that
# does not load back.
MAX_SHARD_SAMPLES = 10**12


def _count(value: object) -> int | None:
    """An index's sample count, where it is one a shard can hold; None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SHARD_SAMPLES:
        return value
    return None


def _size_field(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


def indexed_sizes(folder: str, ending: str) -> dict[str, int]:
    """The data files ending in ``ending`` that an MDS or litdata ``index.json`` in the local
    ``folder`` names, with their bytes as the index gives them; empty where there is no such
    index, or it gives no size for one of them. A streaming format's local cache keeps its
    index while it evicts chunks (litdata's ``max_cache_size``, mosaicml-streaming's
    ``cache_limit``), so the index still names every file after a listing of the folder has
    lost some."""
    try:
        with open(os.path.join(folder, "index.json"), "rb") as f:
            parsed = _parse_index(f.read(INDEX_MAX_BYTES))
    except OSError:
        return {}
    out: dict[str, int] = {}
    for names, _ in parsed[1] if parsed else []:
        for name, size in names:
            if name.endswith(ending):
                if size < 0:
                    return {}
                out[name] = size
    return out


# ------------------------------------------------------------------------------ walks


@dataclass
class _Count:
    """One file's samples, as far as a walk through it went."""

    samples: int
    covered: int  # bytes of the file the count stands for: all of it, or up to a cut
    formats: Counter[str] = field(default_factory=Counter)
    damage: str | None = None  # why the walk stopped before the file's end, where it did
    decompressed: bool = False


Walker = Callable[[FileEntry, Reader, float], _Count]


def _walked(
    kind: str,
    data: list[FileEntry],
    read: Reader,
    deadline: float,
    seed: int,
    walker: Walker,
    what: str,
    *,
    cap: int | None = TAR_WALK_MAX,
) -> Layout:
    """Samples in ``data``, counted by ``walker`` in as many files as ``deadline`` allows (at
    most ``cap``, in an order drawn from ``seed``); the rest are extrapolated by bytes from the
    ones walked. The first file is walked whole where it can be within FIRST_SHARD_S past the
    deadline: a count extrapolated from part of a file is off by its padding and headers. A
    damaged file counts the samples before the damage, with a note; one that can't be read
    is left to the extrapolation, with a note."""
    order = list(data)
    random.Random(seed).shuffle(order)
    samples = covered = walked = 0
    formats: Counter[str] = Counter()
    damaged: list[str] = []
    unreadable: list[str] = []
    decompressed = False
    for entry in order if cap is None else order[:cap]:
        if (walked or unreadable) and time.monotonic() > deadline:
            break
        until = deadline if walked else max(deadline, time.monotonic() + FIRST_SHARD_S)
        try:
            count = walker(entry, read, until)
        except Exception as exc:  # a remote read raises whatever its library raises
            unreadable.append(f"{_name(entry)} ({_one_line(exc)})")
            continue
        samples += count.samples
        covered += count.covered
        formats.update(count.formats)
        decompressed |= count.decompressed
        walked += 1
        if count.damage is not None:
            damaged.append(f"{_name(entry)} ({count.damage})")
    notes = _walk_notes(kind, damaged, unreadable)
    if not samples:
        notes.append(
            f"no sample could be counted in the {kind}: each file counts as one sample; pass "
            "--samples-per-file N"
        )
        return Layout(kind=kind, data=data, notes=notes)
    total_bytes = sum(e.size for e in data)
    unzipped = ", decompressed to count" if decompressed else ""
    if covered >= total_bytes:
        basis = what + unzipped
    else:
        samples = round(samples * total_bytes / covered) if covered else len(data)
        noun = "shards" if kind.endswith("shards") else "files"
        by = "compressed size" if decompressed else "size"
        basis = f"{what} of {walked} of {len(data)} {noun}{unzipped}, extrapolated by {by}"
    return Layout(
        kind=kind, data=data, samples=samples, basis=basis, sample_formats=formats, notes=notes
    )


def _walk_notes(kind: str, damaged: list[str], unreadable: list[str]) -> list[str]:
    """What the walk met: damaged files counted up to the damage, files it could not read."""
    notes = []
    if damaged:
        notes.append(
            f"{len(damaged)} of the {kind} counted are damaged and count the samples before "
            f"the damage: {_listed(damaged)}"
        )
    if unreadable:
        notes.append(f"{len(unreadable)} of the {kind} could not be read: {_listed(unreadable)}")
    return notes


def _name(entry: FileEntry) -> str:
    return entry.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def _listed(items: list[str], at_most: int = 3) -> str:
    more = f" and {len(items) - at_most} more" if len(items) > at_most else ""
    return "; ".join(items[:at_most]) + more


class _ReaderFile(io.RawIOBase):
    """One file through a ``Reader``, front to back, as a file object for ``gzip``; ``pos``
    is how many of its bytes were fetched."""

    def __init__(self, entry: FileEntry, read: Reader) -> None:
        super().__init__()
        self.entry, self._read, self.pos = entry, read, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.entry.size - self.pos)
        if n <= 0:
            return 0
        data = self._read(self.entry, self.pos, n)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


class _Gunzipped:
    """A ``Reader`` over a gzip file's decompressed bytes, for walks that only go forward:
    a hop forward is decompressed and dropped (gzip can't be seeked). A read that fails or
    ends early sets ``damage`` and reads nothing from then on, so a walk stops where the
    stream does and keeps what it counted."""

    def __init__(self, entry: FileEntry, read: Reader) -> None:
        self.raw = _ReaderFile(entry, read)
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.damage: str | None = None

    def __call__(self, _entry: FileEntry, offset: int, length: int) -> bytes:
        if self.damage is not None:
            return b""
        try:
            if offset != self.gz.tell():
                self.gz.seek(offset)
                if self.gz.tell() < offset:
                    self.damage = f"its data ends at decompressed byte {self.gz.tell():,}"
                    return b""
            return self.gz.read(length)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            self.damage = f"damaged gzip stream: {_one_line(exc)}"
            return b""

    def compressed(self, decompressed: int) -> int:
        """The compressed bytes that stand for the first ``decompressed`` bytes, at the
        ratio of what was read so far."""
        return min(round(self.raw.pos * decompressed / max(self.gz.tell(), 1)), self.raw.entry.size)

    def close(self) -> None:
        self.gz.close()


def _gzipped(entry: FileEntry, read: Reader, deadline: float, walker: Walker) -> _Count:
    """``walker``'s count of a gzip file's decompressed bytes, its bytes covered given back
    in compressed bytes (extrapolation is by the files' sizes on storage)."""
    gz = _Gunzipped(entry, read)
    try:
        count = walker(FileEntry(entry.path, UNKNOWN_SIZE), gz, deadline)
        done = gz.damage is not None or count.covered >= UNKNOWN_SIZE
        covered = entry.size if done else gz.compressed(count.covered)
    finally:
        gz.close()
    return _Count(count.samples, covered, count.formats, gz.damage, decompressed=True)


def _is_gzip(entry: FileEntry, read: Reader) -> bool:
    return entry.size >= 2 and read(entry, 0, 2) == GZIP_MAGIC


def _tar_count(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    keys, covered, formats = tar_keys(entry, read, deadline)
    return _Count(keys, covered, formats)


def _targz_count(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    """WebDataset keys in a gzip-compressed tar, from its headers as the stream is
    decompressed; a ``.tar.gz`` that is no gzip is walked as a tar."""
    if not _is_gzip(entry, read):
        return _tar_count(entry, read, deadline)
    return _gzipped(entry, read, deadline, _tar_count)


# ------------------------------------------------------------------------------ tar shards


def tar_keys(entry: FileEntry, read: Reader, deadline: float) -> tuple[int, int, Counter[str]]:
    """(samples, bytes of the shard the count covers, formats of the samples' main members)
    from one tar's headers, reading 512 bytes per member and skipping the data. A shard cut
    short by the deadline covers the bytes up to its last whole sample."""
    offset = 0
    keys = 0
    last = None
    covered = 0
    header_start = 0  # where the member being read ends: a sample's end when the key changes
    formats: Counter[str] = Counter()
    pending: list[str] = []
    while offset + TAR_BLOCK <= entry.size:
        if time.monotonic() > deadline and keys:
            return keys, covered, formats
        header = read(entry, offset, TAR_BLOCK)
        if len(header) < TAR_BLOCK or header.count(0) == TAR_BLOCK:
            break  # the archive's end: zero blocks
        name, size, kind = _tar_header(header)
        if name is None:
            break
        offset += TAR_BLOCK + (size + TAR_BLOCK - 1) // TAR_BLOCK * TAR_BLOCK
        if kind not in (b"0", b"\0", b"7"):
            continue  # directories, links, pax and GNU long-name headers hold no sample data
        key = _key(name)
        if key != last:
            if last is not None:
                keys += 1
                formats[_main_format(pending)] += 1
                covered = header_start
            last, pending = key, []
        header_start = offset
        pending.append(name)
    if last is not None:
        keys += 1
        formats[_main_format(pending)] += 1
    return keys, entry.size, formats


def _tar_header(block: bytes) -> tuple[str | None, int, bytes]:
    """(member name, data size, type flag) of a ustar/GNU header; name None if it is not one."""
    try:
        raw_size = block[124:136]
        if raw_size[0] & 0x80:  # GNU base-256 for sizes over 8 GiB
            size = int.from_bytes(raw_size[1:], "big")
        else:
            size = int(raw_size.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return None, 0, b""
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:262] == b"ustar":
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "replace"), size, block[156:157]


def _key(name: str) -> str:
    """A WebDataset sample key: the path up to the first dot of the file name."""
    head, base = os.path.split(name)
    return os.path.join(head, base.split(".", 1)[0])


def _main_format(names: Iterable[str]) -> str:
    """A sample's format: its first image member's, else its first member's extension."""
    fmts = [_EXT_FORMAT.get(os.path.splitext(n)[1].lower(), "") for n in names]
    images = [f for f in fmts if f in ("jpeg", "png", "webp", "gif", "bmp", "tiff")]
    if images:
        return images[0]
    return next((f for f in fmts if f), "unknown")


# ------------------------------------------------------------------------------ tfrecord


SNIFFED_FILES = 3  # files of no known extension whose first bytes are looked at
GZIP_SNIFF = 64 << 10  # compressed bytes read to see a gzip file's first record header


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord headers carry; for a header's 8 bytes,
    a table walk costs nothing worth a C library."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def looks_tfrecord(entry: FileEntry, read: Reader) -> bool:
    """Whether a file begins with a TFRecord record header: a length, then the masked CRC-32C
    of those 8 bytes, which other data matches about once in 2^32. A gzip file is looked at
    through its first decompressed bytes."""
    if entry.size < TFRECORD_HEADER:
        return False
    head = read(entry, 0, TFRECORD_HEADER)
    if head[:2] == GZIP_MAGIC:
        packed = read(entry, 0, min(entry.size, GZIP_SNIFF))
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed, TFRECORD_HEADER)
        except zlib.error:
            return False
    if len(head) < TFRECORD_HEADER:
        return False
    crc = crc32c(head[:8])
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    (stored,) = struct.unpack_from("<I", head, 8)
    return bool(stored == masked)


def _all_tfrecord(data: list[FileEntry], read: Reader) -> bool:
    """Whether files whose names say nothing are TFRecord: the first few, by path, all are."""
    firsts = sorted(data, key=lambda e: e.path)[:SNIFFED_FILES]
    return bool(firsts) and all(looks_tfrecord(e, read) for e in firsts)


def tfrecord_count(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    """Records in one TFRecord file (``uint64 length, uint32 crc, data, uint32 crc`` each),
    from their 12-byte headers, the data skipped; a gzip-compressed file is decompressed to
    count. Checksums are not checked: a loader checks them, a count needs only the lengths."""
    if _is_gzip(entry, read):
        return _gzipped(entry, read, deadline, _tfrecords)
    return _tfrecords(entry, read, deadline)


def _tfrecords(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    offset = records = 0

    def count(covered: int, damage: str | None = None) -> _Count:
        # the samples are tf.train.Example records, whatever their first bytes look like
        return _Count(records, covered, Counter({"tfrecord": records}), damage)

    while offset < entry.size:
        if records and time.monotonic() > deadline:
            return count(offset)
        head = read(entry, offset, TFRECORD_HEADER)
        if not head:
            break  # a decompressed stream's end
        if len(head) < TFRECORD_HEADER:
            return count(entry.size, f"a record header cut at byte {offset:,}")
        (length,) = struct.unpack_from("<Q", head)
        end = offset + TFRECORD_HEADER + length + 4
        if end > entry.size:
            return count(entry.size, f"the record at byte {offset:,} runs past the end")
        records += 1
        offset = end
    return count(entry.size)


# ------------------------------------------------------------------------------ tables


def _table_layout(
    ext: str, data: list[FileEntry], read: Reader, deadline: float, seed: int
) -> Layout:
    """Rows in Parquet files (their footers, parsed by pyarrow) or Arrow IPC files (their
    record batches' headers), local or remote, by range reads of those parts alone."""
    exact = read.exact if isinstance(read, RangeReader) else read
    if ext == ".arrow":
        return _walked(
            "arrow", data, exact, deadline, seed, arrow_rows, "arrow batch headers", cap=None
        )
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return Layout(
            kind="parquet",
            data=data,
            notes=[
                "the rows of parquet files are counted with pyarrow, which is not installed: "
                "each file counts as one sample; pass --samples-per-file N"
            ],
        )
    return _walked(
        "parquet", data, exact, deadline, seed, parquet_rows, "parquet metadata", cap=None
    )


def parquet_rows(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    """Rows in one Parquet file from its footer alone: the file's last 8 bytes are the
    footer's length and ``PAR1``; the footer, read from before them, is parsed by pyarrow
    behind a stand-in file head (it reads no other part of the file for its metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if entry.size < 12:
        return _Count(0, entry.size, damage="too short for a parquet file")
    n = min(entry.size, PARQUET_TAIL)
    tail = read(entry, entry.size - n, n)
    if len(tail) < 8:
        return _Count(0, entry.size, damage="its end could not be read")
    length, magic = struct.unpack_from("<I4s", tail, len(tail) - 8)
    if magic != b"PAR1":
        why = "an encrypted footer" if magic == b"PARE" else "no parquet footer"
        return _Count(0, entry.size, damage=why)
    if length + 12 > entry.size:
        return _Count(0, entry.size, damage="a footer longer than the file")
    if length + 8 > len(tail):
        tail = read(entry, entry.size - 8 - length, length + 8 - len(tail)) + tail
    footer = tail[len(tail) - 8 - length :]
    try:
        meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
    except Exception as exc:  # pyarrow raises its own errors for a damaged footer
        return _Count(0, entry.size, damage=f"footer unreadable: {_one_line(exc)}")
    return _Count(int(meta.num_rows), entry.size)


def arrow_rows(entry: FileEntry, read: Reader, deadline: float) -> _Count:
    """Rows in one Arrow IPC file, file or stream format (Hugging Face writes the stream
    format), from its record batches' headers, the bodies skipped: each message is a length
    prefix, a flatbuffer header (a record batch's says its rows and body length), then the
    body. The file format is the stream format behind 8 bytes of magic, with a footer after
    the end-of-stream marker that lists the batches but not their rows."""
    offset = 8 if read(entry, 0, len(ARROW_MAGIC)) == ARROW_MAGIC else 0
    rows = 0
    covered = offset
    while offset < entry.size:
        if rows and time.monotonic() > deadline:
            return _Count(rows, covered)
        head = read(entry, offset, min(ARROW_HEAD, entry.size - offset))
        (size,) = struct.unpack_from("<I", head) if len(head) >= 4 else (None,)
        start = 4
        if size == 0xFFFFFFFF:  # the continuation marker of format version 0.15 on
            (size,) = struct.unpack_from("<I", head, 4) if len(head) >= 8 else (None,)
            start = 8
        if size is None or size > ARROW_META_MAX or offset + start + size > entry.size:
            return _Count(rows, entry.size, damage=f"the message at byte {offset:,} is cut")
        if size == 0:
            break  # the end-of-stream marker
        meta = head[start : start + size]
        if len(meta) < size:
            meta += read(entry, offset + start + len(meta), size - len(meta))
        parsed = _arrow_message(meta)
        if parsed is None:
            return _Count(rows, entry.size, damage=f"no arrow message at byte {offset:,}")
        kind, body, n = parsed
        offset += start + size + body
        if offset > entry.size:
            return _Count(rows, entry.size, damage="a record batch runs past the end")
        rows += n
        if kind == ARROW_RECORD_BATCH:
            covered = offset
    return _Count(rows, entry.size)


def _arrow_message(meta: bytes) -> tuple[int, int, int] | None:
    """(header type, body length, rows) of an Arrow ``Message`` flatbuffer; rows are a
    record batch's ``length``, 0 for other messages. None where it is no message."""
    try:
        message = _fb_table(meta, struct.unpack_from("<I", meta)[0])
        at = _fb_field(meta, message, 1)
        kind = meta[at] if at is not None else 0
        at = _fb_field(meta, message, 3)
        body = struct.unpack_from("<q", meta, at)[0] if at is not None else 0
        rows = 0
        at = _fb_field(meta, message, 2)
        if kind == ARROW_RECORD_BATCH and at is not None:
            batch = _fb_table(meta, at + struct.unpack_from("<I", meta, at)[0])
            at = _fb_field(meta, batch, 0)
            rows = struct.unpack_from("<q", meta, at)[0] if at is not None else 0
    except (struct.error, IndexError):
        return None
    if body < 0 or rows < 0:
        return None
    return kind, body, rows


def _fb_table(buf: bytes, pos: int) -> tuple[int, int, int]:
    """A flatbuffer table at ``pos``: (its position, its vtable's, the vtable's size)."""
    vtable = pos - struct.unpack_from("<i", buf, pos)[0]
    if not 0 <= vtable < len(buf):
        raise IndexError(vtable)
    return pos, vtable, struct.unpack_from("<H", buf, vtable)[0]


def _fb_field(buf: bytes, table: tuple[int, int, int], slot: int) -> int | None:
    """Where field ``slot`` of ``table`` is in ``buf``; None where it is absent (default)."""
    pos, vtable, size = table
    entry = 4 + 2 * slot
    if entry + 2 > size:
        return None
    rel = struct.unpack_from("<H", buf, vtable + entry)[0]
    return pos + rel if rel else None


# ------------------------------------------------------------------------------ splitting


def split(layout: Layout, payload: bytes) -> list[bytes] | None:
    """The samples in one of ``layout``'s files, as a loader hands them to its decode: a tar
    shard's samples (each its main member: the image, else the largest; a ``.tar.gz`` once
    decompressed), a TFRecord file's records' data (decompressed where gzip), an MDS or
    litdata chunk's samples (cut at its offset table); None where the format can't be cut
    here (compressed chunks, tables), and the file then stands for its samples as a whole. A
    payload cut short gives the samples it holds whole."""
    how = layout.splitter
    if how == "tar":
        return _tar_samples(payload)
    if how == "tar.gz":
        return _tar_samples(_gunzip(payload))
    if how == "tfrecord":
        return _tfrecord_samples(_gunzip(payload))
    if how == "offsets":
        return _offset_samples(payload)
    return None


def _gunzip(payload: bytes) -> bytes:
    """``payload`` decompressed where it is gzip (every member of a multi-member file, up to
    SPLIT_MAX bytes), as far as it goes: a prefix or a damaged stream gives what came before
    the cut. Anything else is returned as it is."""
    if payload[:2] != GZIP_MAGIC:
        return payload
    out: list[bytes] = []
    left = SPLIT_MAX
    data = payload
    while data[:2] == GZIP_MAGIC and left > 0:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(data, left)
        except zlib.error:
            break
        out.append(chunk)
        left -= len(chunk)
        if not d.eof:
            break
        data = d.unused_data
    return b"".join(out)


def _tfrecord_samples(data: bytes) -> list[bytes] | None:
    out: list[bytes] = []
    offset = 0
    while offset + TFRECORD_HEADER <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + TFRECORD_HEADER
        if start + length > len(data):
            break
        out.append(data[start : start + length])
        offset = start + length + 4
    return out or None


def _tar_samples(payload: bytes) -> list[bytes]:
    out: list[bytes] = []
    last = None
    group: list[tuple[str, bytes]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                f = tar.extractfile(member)
                if f is None:
                    continue
                key = _key(member.name)
                if key != last and group:
                    out.append(_main_member(group))
                    group = []
                last = key
                group.append((member.name, f.read()))
    except (tarfile.TarError, EOFError, OSError):
        # a payload cut short: the samples read whole so far stand, the one cut does not
        return out
    if group:
        out.append(_main_member(group))
    return out


def _main_member(group: list[tuple[str, bytes]]) -> bytes:
    for name, data in group:
        if _main_format([name]) in ("jpeg", "png", "webp", "gif", "bmp", "tiff"):
            return data
    return max(group, key=lambda m: len(m[1]))[1]


def _offset_samples(payload: bytes) -> list[bytes] | None:
    """Samples cut at the table ``uint32 n, uint32 offsets[n + 1]`` that opens MDS shards and
    litdata chunks (offsets from the file's start); None where the table does not fit."""
    if len(payload) < 8:
        return None
    (n,) = struct.unpack_from("<I", payload, 0)
    if n == 0 or 4 + 4 * (n + 1) > len(payload):
        return None
    offsets = struct.unpack_from(f"<{n + 1}I", payload, 4)
    if any(b < a for a, b in itertools.pairwise(offsets)) or offsets[0] < 4 * (n + 2):
        return None
    end = min(offsets[-1], len(payload))
    return [payload[a:b] for a, b in itertools.pairwise(offsets) if b <= end]


__all__ = [
    "Layout",
    "RangeReader",
    "arrow_rows",
    "detect",
    "parquet_rows",
    "split",
    "tar_keys",
    "tfrecord_count",
]

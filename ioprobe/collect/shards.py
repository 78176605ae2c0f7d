"""How many samples a target's files hold, where one file is not one sample.

Training data is often packed: WebDataset tar shards, chunked streaming formats with an
``index.json`` (MDS shards, litdata chunks), Parquet files and Arrow tables. Counting each file
as a sample makes the storage stage's capacity shards/s where the GPU counts samples/s (a chunk
set read at 2 samples/s that holds thousands), makes the sample size that of a shard (advice to
"pack small samples into shards" for data already in shards), and reads the index as a sample.

``detect`` finds the layout and counts the samples from what the format itself says: the
index's per-shard sample counts, the tar headers (one sample per WebDataset key), the Parquet
footers and Arrow record batches (through pyarrow, which every user of those formats has);
``--samples-per-file N`` overrides it. Index and metadata files are taken out of the samples.
``split`` cuts a shard's bytes into its samples' bytes where the format allows (tar members,
the offset tables of uncompressed MDS and litdata chunks), so the CPU stage decodes samples,
not shards.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import struct
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ioprobe.collect.dataset import _EXT_FORMAT, Dataset, FileEntry

INDEX_NAMES = frozenset({"index.json"})
# metadata a Hugging Face `save_to_disk` directory holds beside its Arrow files
ARROW_SIDECARS = frozenset({"dataset_info.json", "state.json", "dataset_dict.json"})
INDEX_MAX_BYTES = 64 << 20
TAR_BLOCK = 512
# tar shards whose headers are walked at most; the rest are extrapolated by bytes
TAR_WALK_MAX = 64
FIRST_SHARD_S = 5.0  # the first tar shard's headers may take this long past the deadline
OFFSET_SPLITTERS = ("MDS shards", "litdata chunks")

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
                os.open(entry.path, os.O_RDONLY)
                if self.fs is None
                else self.fs.open(entry.path, "rb")
            )
            self._path = entry.path
        if self.fs is None:
            return os.pread(self._handle, length, offset)
        self._handle.seek(offset)
        return bytes(self._handle.read(length))

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

    # files, tar shards, MDS shards, litdata chunks, parquet, arrow, packed files (the flag)
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
        if self.kind == "tar shards":
            return "tar"
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
    files it does not name are left out. Tar files are counted from their headers; Parquet and
    Arrow files from their metadata. ``samples_per_file`` overrides every count (index files
    are still left out). A dataset of plain files is one sample per file."""
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
    decides (tar, parquet, arrow), else plain files. An ``index.json`` of no known format is
    still no sample."""
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
        exts[_ext(e.path)] += e.size
    top = exts.most_common(1)[0][0] if exts else ""
    if top == ".tar":
        data = [e for e in others if _ext(e.path) == ".tar"]
        layout = _tar_layout(data, read, deadline, seed)
        layout.index_files = len(indexes)
        layout.notes = notes + layout.notes
        return layout
    if top in (".parquet", ".arrow"):
        sidecars = [e for e in others if os.path.basename(e.path) in ARROW_SIDECARS]
        data = [e for e in others if _ext(e.path) == top]
        layout = _table_layout(top, data, deadline)
        layout.index_files = len(indexes) + len(sidecars)
        layout.notes = notes + layout.notes
        return layout
    return Layout(data=others or entries, index_files=len(indexes), notes=notes)


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
                (by_path[p] for p in (_join(base, m) for m in names) if p in by_path), None
            )
            if entry is not None:
                data.append(entry)
                samples += n
                compressed |= entry.path != _join(base, names[0])
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


def _parse_index(raw: bytes) -> tuple[str, list[tuple[list[str], int]]] | None:
    """(layout kind, [(file names that may hold a shard, samples)]) from an MDS or litdata
    ``index.json``; None for anything else.

    MDS lists ``shards``, each with ``samples`` and its ``raw_data`` (and, when compressed,
    ``zip_data``) basename; litdata lists ``chunks``, each with ``chunk_size`` samples and its
    ``filename``. A compressed MDS shard is on disk under its ``zip_data`` name."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    out: list[tuple[list[str], int]] = []
    shards = doc.get("shards")
    if isinstance(shards, list):
        for s in shards:
            n = s.get("samples") if isinstance(s, dict) else None
            names = [
                d["basename"]
                for key in ("raw_data", "zip_data")
                if isinstance(d := s.get(key) if isinstance(s, dict) else None, dict)
                and isinstance(d.get("basename"), str)
            ]
            if isinstance(n, int) and n >= 0 and names:
                out.append((names, n))
        return ("MDS shards", out) if out else None
    chunks = doc.get("chunks")
    if isinstance(chunks, list):
        for c in chunks:
            if not isinstance(c, dict):
                continue
            n, name = c.get("chunk_size"), c.get("filename")
            if isinstance(n, int) and n >= 0 and isinstance(name, str):
                out.append(([name], n))
        return ("litdata chunks", out) if out else None
    return None


# ------------------------------------------------------------------------------ tar shards


def _tar_layout(data: list[FileEntry], read: Reader, deadline: float, seed: int) -> Layout:
    """Samples in tar shards, one per WebDataset key (a member's path up to the first dot of
    its file name), from the headers of as many shards as ``deadline`` allows; the rest are
    extrapolated by bytes from the ones walked."""
    order = list(data)
    random.Random(seed).shuffle(order)
    keys = 0
    covered = 0
    walked = 0
    formats: Counter[str] = Counter()
    for entry in order[:TAR_WALK_MAX]:
        if walked and time.monotonic() > deadline:
            break
        # the first shard is walked whole where it can be: a count extrapolated from part
        # of a shard is off by the tar's padding
        n, span, fmts = tar_keys(
            entry, read, deadline if walked else max(deadline, time.monotonic() + FIRST_SHARD_S)
        )
        keys += n
        covered += span
        formats.update(fmts)
        walked += 1
    total_bytes = sum(e.size for e in data)
    if covered >= total_bytes:
        samples, basis = keys, "tar headers"
    else:
        samples = round(keys * total_bytes / covered) if covered else len(data)
        basis = f"tar headers of {walked} of {len(data)} shards, extrapolated by size"
    return Layout(
        kind="tar shards", data=data, samples=samples, basis=basis, sample_formats=formats
    )


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


# ------------------------------------------------------------------------------ tables


def _table_layout(ext: str, data: list[FileEntry], deadline: float) -> Layout:
    """Rows in Parquet files (their footers) or Arrow files (their record batches), through
    pyarrow, local files only; without it, or for remote tables, the layout says what is
    missing and each file counts once."""
    kind = "parquet" if ext == ".parquet" else "arrow"
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return Layout(
            kind=kind,
            data=data,
            notes=[
                f"the rows of {kind} files are counted with pyarrow, which is not installed: "
                "each file counts as one sample; pass --samples-per-file N"
            ],
        )
    if any("://" in e.path for e in data):
        return Layout(
            kind=kind,
            data=data,
            notes=[
                f"the rows of remote {kind} files are not counted: each file counts as one "
                "sample; pass --samples-per-file N"
            ],
        )
    rows = 0
    counted = 0
    for entry in data:
        if counted and time.monotonic() > deadline:
            break
        try:
            rows += _table_rows(kind, entry.path)
        except Exception:  # pyarrow raises its own errors for a damaged file
            continue
        counted += 1
    if not counted:
        return Layout(kind=kind, data=data, notes=[f"no {kind} file's rows could be read"])
    total_bytes = sum(e.size for e in data)
    done = data[:counted]
    if counted == len(data):
        return Layout(kind=kind, data=data, samples=rows, basis=f"{kind} metadata")
    covered = sum(e.size for e in done)
    return Layout(
        kind=kind,
        data=data,
        samples=round(rows * total_bytes / covered),
        basis=f"{kind} metadata of {counted} of {len(data)} files, extrapolated by size",
    )


def _table_rows(kind: str, path: str) -> int:
    import pyarrow as pa

    if kind == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    with pa.memory_map(path) as source:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid:
            source.seek(0)
            # the stream format (Hugging Face's): batches are read zero-copy from the map,
            # so only their headers are touched
            return sum(batch.num_rows for batch in pa.ipc.open_stream(source))
        return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


# ------------------------------------------------------------------------------ splitting


def split(layout: Layout, payload: bytes) -> list[bytes] | None:
    """The samples in one of ``layout``'s files, as a loader hands them to its decode: a tar
    shard's samples (each its main member: the image, else the largest), an MDS or litdata
    chunk's samples (cut at its offset table); None where the format can't be cut here
    (compressed shards, tables), and the file then stands for its samples as a whole."""
    how = layout.splitter
    if how == "tar":
        return _tar_samples(payload)
    if how == "offsets":
        return _offset_samples(payload)
    return None


def _tar_samples(payload: bytes) -> list[bytes]:
    import io

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


__all__ = ["Layout", "RangeReader", "detect", "split", "tar_keys"]

"""Resolve a probe target to a list of sample files and profile the dataset.

A target is a local file, directory or glob, or any fsspec URL. Local trees are walked with
``os.scandir`` and every entry's type is checked before anything is opened: FIFOs, sockets and
device files are never opened (opening a FIFO blocks forever), broken symlinks, empty and
unreadable files are skipped and counted. A tree with more than ``STAT_SAMPLE`` files is not
stat-ed in full: sizes come from a random sample and totals are extrapolated, because on a
network file system a stat per file of a 10M-file tree takes longer than the whole probe.

The walk keeps no list of the names it passes: a reservoir keeps a uniform random sample of
``STAT_SAMPLE`` of them (memory flat at any size of tree) and a count. It stops at its share
of the budget (``WALK_SHARE``); the folders it had not reached are then estimated by random
descents (Knuth's estimate of a tree's size: one folder's files plus its subfolders' count
times a random subfolder's estimate, down to a leaf), and the record states the estimate and
its standard error.
"""

from __future__ import annotations

import glob as globlib
import math
import os
import random
import re
import stat
import statistics
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ioprobe.capacity import density_class
from ioprobe.collect.bucket import Deadline, Rest, remote_files
from ioprobe.collect.budget import Pending, map_within, network_timeouts
from ioprobe.collect.failures import (
    ReadFailures,
    chain,
    http_status,
    kinds,
    label,
    transport_cause,
)
from ioprobe.collect.quiet import quiet_fsspec_loop
from ioprobe.errors import StorageTimeoutError, TargetError
from ioprobe.record import DatasetProfile
from ioprobe.redact import redact_message, redact_url

T = TypeVar("T")

STAT_SAMPLE = 20_000  # files stat-ed at most; beyond, sizes are a random sample
WALK_SHARE = 0.3  # of the budget: the walk's time; the folders left are estimated
DESCENTS = 400  # random descents that estimate the folders a stopped walk left, at most
DESCENT_SHARE = 0.05  # of the budget, at least DESCENT_MIN_S: the descents' time
DESCENT_MIN_S = 0.5
# A remote listing's page asked for before the walk's end may come this share of the budget
# after it; the walk, that grace and the estimate of the rest all end by LISTED_SHARE of the
# budget, under the probe's own limit on the listing (half the budget)
PAGE_GRACE_SHARE = 0.05
LISTED_SHARE = 0.45
CHECK_EVERY = 4096  # names between two looks at the clock

_MAGIC: list[tuple[int, bytes, str]] = [
    (0, b"\xff\xd8\xff", "jpeg"),
    (0, b"\x89PNG\r\n\x1a\n", "png"),
    (0, b"GIF8", "gif"),
    (0, b"\x93NUMPY", "npy"),
    (0, b"PAR1", "parquet"),
    (0, b"\x89HDF\r\n\x1a\n", "hdf5"),
    (0, b"\x1f\x8b", "gzip"),
    (0, b"\x28\xb5\x2f\xfd", "zstd"),
    (0, b"II*\x00", "tiff"),
    (0, b"MM\x00*", "tiff"),
    (0, b"BM", "bmp"),
    (0, b"OggS", "ogg"),
    (0, b"fLaC", "flac"),
    (4, b"ftyp", "mp4"),
    (0, b"\x1aE\xdf\xa3", "webm"),
    (257, b"ustar", "tar"),
    (128, b"DICM", "dicom"),
]
_EXT_FORMAT = {
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".png": "png",
    ".webp": "webp",
    ".gif": "gif",
    ".bmp": "bmp",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".npy": "npy",
    ".npz": "npz",
    ".tar": "tar",
    ".parquet": "parquet",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfrec": "tfrecord",
    ".wav": "wav",
    ".flac": "flac",
    ".mp4": "mp4",
    ".nii": "nifti",
    ".gz": "gzip",
    ".dcm": "dicom",
    ".txt": "text",
    ".json": "json",
    ".bin": "binary",
}
MAGIC_BYTES = 264  # enough for every signature above


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int


@dataclass
class Dataset:
    """A resolved target: what to read and how to reach it. ``target`` is the form that may
    be shown (credentials redacted); the entries and ``fs`` hold what reads use."""

    target: str
    entries: list[FileEntry]  # files with a known size, in listing order
    fs: Any | None = None  # an fsspec filesystem for remote targets, None for local files
    total_files: int = 0  # including files whose size was not stat-ed
    sizes_estimated: bool = False
    listing_truncated: bool = False
    listed_files: int = 0  # names the walk passed (local targets)
    files_error: int | None = None  # the standard error of total_files, where estimated
    files_at_least: bool = False  # the estimate is a lower bound (a folder left uncounted)
    skipped: Counter[str] = field(default_factory=Counter)
    # files stat-ed that are mostly holes (allocated blocks under half their size): holes
    # read as zeros without touching the disk, so they read faster than real data
    sparse: int = 0

    @property
    def remote(self) -> bool:
        return self.fs is not None


# a URL's scheme (RFC 3986, 3.1): a letter, then letters, digits, "+", "-" or "."
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def as_url(target: str) -> str:
    """``target`` with its scheme in lower case, as fsspec's registry names it (a scheme is
    case-insensitive: ``HTTP://host/`` is ``http://host/``); a local path that exists, or
    text with no scheme, as it is."""
    m = _SCHEME.match(target)
    if m is None or m.group(1).islower() or os.path.lexists(target):
        return target
    return m.group(1).lower() + target[m.end(1) :]


def is_remote(target: str) -> bool:
    """Whether ``target`` is a URL to open with fsspec: it has a scheme, and is not a local
    path that exists (a directory named ``runs/http://x`` is that directory)."""
    target = as_url(target)
    return "://" in target and not target.startswith("file://") and not os.path.lexists(target)


def file_url_path(target: str) -> str:
    """The local path a ``file://`` URL names, percent-escapes decoded to the bytes they
    stand for (``%20`` a space, ``%FF`` a byte no UTF-8 name holds) and a ``localhost``
    host dropped; anything else as it is."""
    url = as_url(target)
    if not url.startswith("file://") or os.path.lexists(target):
        return target
    rest = url[len("file://") :]
    if rest.startswith("localhost/"):
        rest = rest[len("localhost") :]
    return os.fsdecode(urllib.parse.unquote_to_bytes(rest))


def resolve(
    target: str,
    *,
    seed: int = 0,
    storage_options: dict[str, Any] | None = None,
    budget_s: float = 60.0,
) -> Dataset:
    """List the files of ``target``; raise TargetError with one clear line if it can't be used.

    The returned dataset and every error quote the target redacted (``redact_url``): a signed
    URL's signature or a password in it never reaches a record, a report or an error line.

    A remote target's requests get connect and read timeouts derived from ``budget_s``, the
    probe's time budget, unless ``storage_options`` sets its own.
    """
    if is_remote(target):
        return _resolve_remote(as_url(target), storage_options or {}, budget_s)
    path = file_url_path(target)
    return _resolve_local(redact_url(target, whole=True), os.path.expanduser(path), seed, budget_s)


def _resolve_local(target: str, path: str, seed: int, budget_s: float = 60.0) -> Dataset:
    skipped: Counter[str] = Counter()
    rng = random.Random(seed)
    deadline = time.monotonic() + WALK_SHARE * budget_s
    walk = _local_candidates(target, path, skipped, deadline)
    listing = take_listing(walk, rng, deadline)
    names = listing.names
    truncated = listing.stopped or (isinstance(walk, _Walk) and walk.stopped)
    sizes_estimated = listing.count > STAT_SAMPLE or truncated
    entries, statted, sparse = _stat_entries(names, skipped)
    if not entries:
        detail = _skip_summary(skipped)
        raise TargetError(
            f"{target}: no readable non-empty files" + (f" ({detail})" if detail else "")
        )
    listed, error, bound = float(listing.count), None, False
    if truncated and isinstance(walk, _Walk):
        deadline = time.monotonic() + max(DESCENT_SHARE * budget_s, DESCENT_MIN_S)
        left, whole = walk.finish_folder(deadline)
        rest, error = estimate_rest(walk.pending, rng, deadline)
        listed += left + rest
        bound = not whole  # a folder too large to count: at least this many
    total = len(entries)
    if sizes_estimated:
        # scale the usable fraction of the sample up to the whole listing
        total = round(listed * len(entries) / max(statted, 1))
        if error is not None:
            error = error * len(entries) / max(statted, 1)
    return Dataset(
        target=target,
        entries=entries,
        total_files=total,
        sizes_estimated=sizes_estimated,
        listing_truncated=truncated,
        skipped=skipped,
        sparse=sparse,
        listed_files=listing.count,
        files_error=round(error) if error is not None else None,
        files_at_least=bound,
    )


def _local_candidates(
    target: str, path: str, skipped: Counter[str], deadline: float = math.inf
) -> Iterable[str]:
    """The names a local target stands for (a glob's matches, a tree's files, or the one
    file), lazily for a tree; a target that cannot be used raises TargetError here. A path
    that exists as written is that path, even with ``[``, ``*`` or ``?`` in its name
    (``data[1]``); only one that does not is a pattern."""
    if any(ch in path for ch in "*?[") and not os.path.lexists(path):
        names = sorted(globlib.iglob(path, recursive=True))
        if not names:
            raise TargetError(f"{target}: the pattern matches no files")
        return iter(names)
    if not os.path.lexists(path):
        raise TargetError(f"{target}: no such file or directory")
    try:
        st = os.stat(path)
    except OSError:
        raise TargetError(f"{target}: is a broken symlink") from None
    if stat.S_ISDIR(st.st_mode):
        if not os.access(path, os.R_OK | os.X_OK):
            raise TargetError(f"{target}: permission denied (directory not readable)")
        return _Walk(path, skipped, deadline)
    if stat.S_ISREG(st.st_mode):
        return iter([path])
    raise TargetError(f"{target}: is not a regular file or directory ({_kind(st.st_mode)})")


@dataclass
class Listing(Generic[T]):
    names: list[T]  # a uniform random sample of the names walked, in walk order
    count: int  # the names walked
    stopped: bool  # the walk reached its deadline before its end


def take_listing(
    candidates: Iterable[T],
    rng: random.Random,
    deadline: float,
    k: int | None = None,
) -> Listing[T]:
    """Walk ``candidates`` until they end or ``deadline`` (``time.monotonic``) passes,
    keeping a uniform random sample of ``k`` names (Li's reservoir algorithm L: it draws
    random numbers only for the names it keeps, about k log(n/k) of n) and the count;
    ``k`` is ``STAT_SAMPLE`` by default."""
    k = STAT_SAMPLE if k is None else k
    kept: list[tuple[int, T]] = []
    count = 0
    clock = time.monotonic
    it = iter(candidates)
    for name in it:
        kept.append((count, name))
        count += 1
        if count >= k:
            break
        if count % CHECK_EVERY == 0 and clock() > deadline:
            return Listing([n for _, n in kept], count, True)
    else:
        return Listing([n for _, n in kept], count, False)
    # names k+1 on: skip ahead by geometric gaps, replacing a random kept name at each stop
    w = math.exp(math.log(_unit(rng)) / k)
    take = count + _gap(rng, w)
    stopped = False
    for name in it:
        if count == take:
            kept[rng.randrange(k)] = (count, name)
            w *= math.exp(math.log(_unit(rng)) / k)
            take += 1 + _gap(rng, w)
        count += 1
        if count % CHECK_EVERY == 0 and clock() > deadline:
            stopped = True
            break
    kept.sort(key=lambda pair: pair[0])
    return Listing([n for _, n in kept], count, stopped)


def _unit(rng: random.Random) -> float:
    return rng.random() or 1e-300  # random() may return 0.0, whose log is undefined


def _gap(rng: random.Random, w: float) -> int:
    return int(math.log(_unit(rng)) / math.log1p(-w)) if w < 1.0 else 0


def estimate_rest(
    pending: list[str], rng: random.Random, deadline: float, descents: int | None = None
) -> tuple[float, float | None]:
    """The files below the folders a stopped walk had not reached, and the estimate's
    standard error: ``descents`` random descents, each from a folder drawn from ``pending``
    (Knuth: a folder's files plus its subfolders' count times a random subfolder's
    estimate, down to a leaf), until ``deadline``. Each descent's value times the folders
    left is an unbiased estimate of their files; the error is that of the mean."""
    if not pending:
        return 0.0, 0.0
    descents = DESCENTS if descents is None else descents
    values: list[float] = []
    while len(values) < descents and (len(values) < 2 or time.monotonic() < deadline):
        values.append(_descend(rng.choice(pending), rng))
    mean = statistics.fmean(values)
    error = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    n = len(pending)
    return n * mean, (n * error if error is not None else None)


def _descend(top: str, rng: random.Random, depth: int = 0) -> float:
    files, dirs = 0, []
    try:
        with os.scandir(top) as it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.path)
                    elif entry.is_file(follow_symlinks=True):
                        files += 1
                except OSError:
                    continue
    except OSError:
        return 0.0
    if not dirs or depth > 64:
        return float(files)
    return files + len(dirs) * _descend(rng.choice(dirs), rng, depth + 1)


def _stat_entries(names: list[str], skipped: Counter[str]) -> tuple[list[FileEntry], int, int]:
    """The samples among ``names`` (regular, non-empty, readable files), how many names
    could be stat-ed at all (the denominator when a sample's totals are scaled up), and how
    many samples are sparse (fewer blocks allocated than half their size)."""
    entries: list[FileEntry] = []
    statted = sparse = 0
    for name in names:
        try:
            st = os.stat(name)
        except OSError:
            skipped["broken_symlink" if os.path.islink(name) else "vanished"] += 1
            continue
        statted += 1
        if stat.S_ISDIR(st.st_mode):
            continue  # a glob's match of a directory: neither a sample nor a skipped file
        reason = _not_a_sample(name, st)
        if reason is None:
            entries.append(FileEntry(name, st.st_size))
            sparse += st.st_blocks * 512 < st.st_size // 2
        else:
            skipped[reason] += 1
    return entries, statted, sparse


def _not_a_sample(name: str, st: os.stat_result) -> str | None:
    """Why a stat-ed file that is not a directory is skipped, or None to keep it."""
    if not stat.S_ISREG(st.st_mode):
        return "special_file"
    if st.st_size == 0:
        return "empty"
    if not os.access(name, os.R_OK):
        return "unreadable"
    return None


class _Walk:
    """Regular-file paths below ``root``, depth first; never follows directory symlinks (no
    cycles). ``pending`` holds the folders not yet reached; where the walk is stopped,
    ``finish_folder`` counts what is left of the folder it was in, and what is below the
    pending folders is estimated."""

    def __init__(self, root: str, skipped: Counter[str], deadline: float = math.inf) -> None:
        self.pending = [root]
        self.skipped = skipped
        self.deadline = deadline  # time.monotonic(): no folder is started after it
        self.stopped = False
        self._entries: Iterator[os.DirEntry[str]] | None = None  # the folder being listed
        self._dirs: list[str] = []  # its subfolders found so far

    def __iter__(self) -> Iterator[str]:
        # held here: a generator dropped by its caller closes, and its folder's listing with it
        self._walking = self._names()
        return self._walking

    def _names(self) -> Iterator[str]:
        stack, skipped = self.pending, self.skipped
        found = 0
        while stack:
            if found and time.monotonic() > self.deadline:
                # a tree of folders and few files yields too few names for the reader's
                # clock: the walk reads its own between folders (once it has a file to show)
                self.stopped = True
                return
            top = stack.pop()
            try:
                it = os.scandir(top)
            except OSError:
                skipped["unreadable_dir"] += 1
                continue
            with it:
                self._entries, self._dirs = it, []
                for entry in it:
                    if _is_sample(entry, self._dirs, skipped):
                        found += 1
                        yield entry.path
                stack.extend(sorted(self._dirs, reverse=True))
                self._entries = None

    def finish_folder(self, deadline: float) -> tuple[int, bool]:
        """The files left in the folder a stopped walk was listing, counted (not kept), its
        subfolders put with the pending ones; and whether it was counted to its end before
        ``deadline``."""
        it, count = self._entries, 0
        if it is None:
            return 0, True
        for k, entry in enumerate(it):
            count += _is_sample(entry, self._dirs, Counter())
            if k % CHECK_EVERY == 0 and time.monotonic() > deadline:
                return count, False
        self.pending.extend(self._dirs)
        self._entries = None
        return count, True


def _is_sample(entry: os.DirEntry[str], dirs: list[str], skipped: Counter[str]) -> bool:
    """Whether a folder's entry is a file to list; a subfolder goes on ``dirs``, anything
    else is counted in ``skipped`` by why."""
    try:
        if entry.is_dir(follow_symlinks=False):
            dirs.append(entry.path)
        elif entry.is_file(follow_symlinks=True):
            return True
        elif entry.is_symlink():
            if os.path.exists(entry.path):
                # a link to a directory or a special file: neither is a sample
                skipped["symlink_not_file"] += 1
            else:
                skipped["broken_symlink"] += 1
        else:
            skipped["special_file"] += 1
    except OSError:
        skipped["unreadable"] += 1
    return False


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "a special file"


def _skip_summary(skipped: Counter[str]) -> str:
    # a read failure's cause as failures.label words it: "TLS certificate not trusted"
    return ", ".join(f"{n} {label(reason)}" for reason, n in sorted(skipped.items()))


def _resolve_remote(url: str, storage_options: dict[str, Any], budget_s: float) -> Dataset:
    target = redact_url(url, whole=True)  # what is shown; ``url`` only opens the filesystem
    started = time.monotonic()
    fs, path = _open_remote(url, target, storage_options, budget_s)
    deadline = Deadline(started + WALK_SHARE * budget_s, PAGE_GRACE_SHARE * budget_s)
    try:
        files, pages = remote_files(fs, path, deadline)
        listing = take_listing(files, random.Random(0), math.inf)
    except TargetError:
        raise
    except Exception as exc:
        raise _listing_error(target, exc, url) from None
    skipped: Counter[str] = Counter()
    infos, sizes_asked = _fill_sizes(fs, listing.names, skipped)
    entries = _remote_entries(infos, skipped)
    if not entries:
        raise TargetError(_none_found(target, skipped))
    listed, error, bound = float(listing.count), None, False
    if deadline.hit:
        rest = Rest(0.0, None)
        if pages is not None:
            wait = max(DESCENT_SHARE * budget_s, DESCENT_MIN_S)
            end = min(time.monotonic() + wait, started + LISTED_SHARE * budget_s)
            rest = pages.rest(end)
        listed += rest.files
        error, bound = rest.error, rest.error is None
    sizes_estimated = sizes_asked or listing.count > STAT_SAMPLE or deadline.hit
    total = len(entries)
    if sizes_estimated:
        # the usable share of the sample, scaled up to the whole listing
        total = round(listed * len(entries) / max(len(listing.names), 1))
        if error is not None:
            error = error * len(entries) / max(len(listing.names), 1)
    return Dataset(
        target=target,
        entries=entries,
        fs=fs,
        total_files=total,
        sizes_estimated=sizes_estimated,
        listing_truncated=deadline.hit,
        skipped=skipped,
        listed_files=listing.count,
        files_error=round(error) if error is not None else None,
        files_at_least=bound,
    )


def _open_remote(
    url: str, target: str, storage_options: dict[str, Any], budget_s: float
) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it that ``url`` names; errors quote
    ``target``, its redacted form."""
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is a core dependency
        raise TargetError(f"{target}: remote targets need fsspec") from None
    opts = dict(storage_options)
    _set_timeouts(url.split("://", 1)[0], opts, budget_s)
    quiet_fsspec_loop()  # before any call of the filesystem's can start it unquiet
    try:
        fs, path = url_to_fs(fsspec, url, opts)
    except (ImportError, ValueError) as exc:
        raise TargetError(f"{target}: {_one_line(exc, url)}") from None
    except Exception as exc:  # a backend that connects as it is made (ftp, hdfs, sftp)
        raise TargetError(f"{target}: cannot reach it: {_one_line(exc, url)}") from None
    return fs, path


def url_to_fs(fsspec: Any, url: str, opts: dict[str, Any]) -> tuple[Any, str]:
    """fsspec's filesystem and path for ``url``. A host written as an IPv6 literal
    (``http://[::1]:8080/``) holds ``::``, which fsspec's own parser reads as a chain of
    URLs: such a URL is one filesystem's, opened by its scheme."""
    scheme, sep, rest = url.partition("://")
    if sep and "[" in rest.split("/", 1)[0] and "::" not in scheme:
        cls = fsspec.get_filesystem_class(scheme)
        return cls(**opts), cls._strip_protocol(url)
    fs, path = fsspec.core.url_to_fs(url, **opts)
    return fs, path


def _set_timeouts(scheme: str, opts: dict[str, Any], budget_s: float) -> None:
    """Connect and read timeouts from the budget, where the backend takes them: a server that
    accepts the connection and never answers must fail a request, not hold the probe. Other
    backends are bounded by the probe's deadlines alone (collect/budget.py)."""
    connect, read = network_timeouts(budget_s)
    if scheme in ("http", "https"):
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
        opts.setdefault("client_kwargs", {"timeout": timeout})
    elif scheme in ("s3", "s3a"):
        opts.setdefault("config_kwargs", {"connect_timeout": connect, "read_timeout": read})


def _listing_error(target: str, exc: Exception, url: str) -> TargetError:
    """The one line for a listing that failed. The cause's chain is read first: fsspec says
    "not found" for any HTTP listing that failed, a TLS handshake refused included."""
    transport = transport_cause(exc)
    if transport == "redirect_loop":  # aiohttp's own text is a status 0 and the URL again
        return TargetError(f"{target}: {label(transport)}")
    if transport is not None:
        return TargetError(f"{target}: {label(transport)}: {_one_line(_root(exc), url)}")
    if isinstance(exc, FileNotFoundError):
        return TargetError(f"{target}: not found")
    if isinstance(exc, PermissionError):
        return TargetError(f"{target}: permission denied")
    if isinstance(exc, TimeoutError):  # asyncio's, aiohttp's and fsspec's timeouts
        return StorageTimeoutError(
            f"{target}: storage did not answer within the time budget (the listing timed out)"
        )
    # fsspec backends raise anything from aiohttp, botocore, ...
    return TargetError(f"{target}: cannot reach it: {_one_line(exc, url)}")


def _root(exc: BaseException) -> BaseException:
    """The last exception of ``exc``'s chain: the one that says what happened."""
    return list(chain(exc))[-1]


def _fill_sizes(
    fs: Any, files: list[dict[str, Any]], skipped: Counter[str]
) -> tuple[list[dict[str, Any]], bool]:
    """``files`` with a size where the listing gave none, and whether only a random sample
    of those was asked (sizes then estimated).

    Listings parsed from HTML (http) carry no sizes: each file is asked, concurrently, and
    only a random sample of a huge listing.
    """
    known: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    for info in files:
        (unknown if info.get("size") is None else known).append(info)
    if not unknown:
        return files, False
    sampled = len(unknown) > STAT_SAMPLE
    if sampled:
        unknown = random.Random(0).sample(unknown, STAT_SAMPLE)
    # daemon threads: a request stuck on a server that stopped answering must not hold the
    # process at exit, as a thread pool's would (the listing's own deadline bounds the wait)
    infos = map_within(lambda i: _safe_info(fs, str(i["name"])), unknown, 16)
    found = [i for i in infos if isinstance(i, dict)]
    for got in infos:
        if not isinstance(got, dict):
            skipped[got if isinstance(got, str) else "vanished"] += 1
    return known + found, sampled


def _remote_entries(files: list[dict[str, Any]], skipped: Counter[str]) -> list[FileEntry]:
    """Non-empty files of known size, sorted by path."""
    entries: list[FileEntry] = []
    for info in files:
        size = info.get("size")
        if size is None:
            skipped["unknown_size"] += 1
        elif size == 0:
            skipped["empty"] += 1
        elif not isinstance(size, int | float) or size < 0:
            skipped["invalid_size"] += 1  # a listing's own fault (a size of -5)
        else:
            entries.append(FileEntry(str(info["name"]), int(size)))
    entries.sort(key=lambda e: e.path)
    return entries


def _none_found(target: str, skipped: Counter[str]) -> str:
    """The one line for a remote listing that left no file to read, saying why where one
    cause stands out: a server that states no file's size (no Content-Length)."""
    unsized = skipped["unknown_size"]
    if unsized and unsized == sum(skipped.values()):
        return (
            f"{target}: the server gave no size (no Content-Length) for any file it listed "
            f"({unsized:,}): the probe reads files of known size"
        )
    if skipped:
        return f"{target}: no non-empty files found ({_skip_summary(skipped)})"
    return f"{target}: no non-empty files found"


def _safe_info(fs: Any, name: str) -> dict[str, Any] | str:
    """A remote file's info, or why there is none: "refused" (HTTP 401 or 403: fsspec's
    HTTP backend raises FileNotFoundError for any failed request, the status in its cause),
    "http_error" (another status), else "vanished"."""
    try:
        info: dict[str, Any] = fs.info(name)
        return info
    except (FileNotFoundError, OSError) as exc:
        statuses = (http_status(e) for e in chain(exc))
        status = next((st for st in statuses if st is not None), None)
        if status in (401, 403):
            return "refused"
        transport = transport_cause(exc)
        if transport is not None:  # aiohttp's status 400 for a header it could not parse
            return transport
        return "http_error" if status is not None and status != 404 else "vanished"


def _one_line(exc: BaseException, url: str = "") -> str:
    """A library's error as one line; the URLs it quotes (aiohttp's and botocore's do, whole)
    redacted, and the secrets of ``url`` (the real target) masked where it repeats them
    without their scheme (botocore's "Invalid bucket name" quotes ``KEY:SECRET@bucket``)."""
    if any(type(e).__name__ == "CredentialRetrievalError" for e in chain(exc)):
        # botocore quotes whatever the configured credential program printed: its secret too
        return (
            "the AWS credential provider failed (its own message is not shown: what a "
            "credential program prints may hold a secret)"
        )
    # aiohttp's parser errors begin with a status of its own ("400, message: ..."), which
    # the server never sent: their message alone
    said = exc.message if "HttpProcessingError" in kinds(exc) else str(exc)  # type: ignore[attr-defined]
    text = redact_message(" ".join(str(said).split()), [url] if url else []) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."


_RIFF_FORMAT = {b"WEBP": "webp", b"WAVE": "wav"}


def _magic_format(head: bytes) -> str | None:
    for offset, magic, fmt in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return fmt
    if head[:4] == b"RIFF":
        return _RIFF_FORMAT.get(head[8:12])
    if head[:4] == b"PK\x03\x04":
        return "zip"
    return None


def detect_format(name: str, head: bytes) -> str:
    """Name a file's format from its magic bytes, falling back to its extension."""
    if "://" in name:
        # a signed URL's query is no part of the name: "x.jpg?X-Amz-Signature=..." is a JPEG,
        # and nor are its last segment's parameters ("x.jpg;jsessionid=...")
        name = name.split("?", 1)[0].split("#", 1)[0]
        last = name.rsplit("/", 1)
        last[-1] = last[-1].split(";", 1)[0]
        name = "/".join(last)
    fmt = _magic_format(head)
    if fmt is None:
        # TensorFlow's sharded names: "train.tfrecord-00003-of-00010" is a .tfrecord
        ext = re.sub(r"-\d+-of-\d+$", "", os.path.splitext(name)[1].lower())
        return _EXT_FORMAT.get(ext, ext.lstrip(".") or "unknown")
    # a NIfTI volume is gzip and an .npz is zip to their magic: the name tells them apart
    if fmt == "gzip" and name.endswith(".nii.gz"):
        return "nifti"
    if fmt == "zip" and name.endswith(".npz"):
        return "npz"
    return fmt


def _percentile(sorted_values: list[int], q: float) -> int:
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


def profile(
    ds: Dataset,
    read_head: Callable[[FileEntry], bytes],
    *,
    sample: int = 64,
    seed: int = 0,
    seconds: float = math.inf,
    failures: ReadFailures | None = None,
) -> DatasetProfile:
    """Summarise sizes and formats. ``read_head(entry) -> bytes`` reads a file's first bytes,
    for ``sample`` files at most, eight at a time, for at most ``seconds``: formats come from
    the heads read by then. A head that fails to read is counted in ``failures``."""
    sizes = sorted(e.size for e in ds.entries)
    mean = sum(sizes) / len(sizes)
    rng = random.Random(seed)
    probe = ds.entries if len(ds.entries) <= sample else rng.sample(ds.entries, sample)
    formats: Counter[str] = Counter()
    for entry, head in zip(probe, map_within(read_head, probe, 8, seconds), strict=True):
        if isinstance(head, Exception):
            if failures is not None:
                failures.add_exception(entry.path, head)
        elif not isinstance(head, Pending):
            formats[detect_format(entry.path, head)] += 1
    return DatasetProfile(
        target=ds.target,
        files=ds.total_files,
        bytes=round(mean * ds.total_files) if ds.sizes_estimated else sum(sizes),
        sample_bytes_mean=mean,
        density=density_class(mean),
        size_p50=_percentile(sizes, 0.5),
        size_p90=_percentile(sizes, 0.9),
        size_max=sizes[-1],
        size_stdev=statistics.pstdev(sizes) if len(sizes) > 1 else 0.0,
        formats=dict(formats),
        remote=ds.remote,
        sizes_estimated=ds.sizes_estimated,
        listing_truncated=ds.listing_truncated,
        files_listed=ds.listed_files if ds.listing_truncated else None,
        files_error=ds.files_error,
        files_at_least=ds.files_at_least,
        skipped=dict(ds.skipped),
    )

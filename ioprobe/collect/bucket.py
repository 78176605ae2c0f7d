"""A remote target's listing, lazily: an S3 bucket a page of keys at a time, any other
fsspec filesystem a folder at a time.

fsspec's ``find`` gathers a whole listing before it returns: a bucket of a million objects
holds every info dict in memory and takes as long as its thousand pages, whatever the
probe's budget. Read lazily, the listing feeds the same reservoir as a local walk
(``dataset.take_listing``: a bounded sample and a count) and stops at its share of the
budget.

An S3 page takes a round trip (0.1-0.3 s on S3 itself), so one listing in key order reads
a few thousand keys a second. Where the prefix holds folders (one folder alone is gone
into), the folders are cut into ``THREADS`` runs listed side by side instead
(``FolderListing``), and where the listing stops early the folders it had not reached are
estimated from those it had, a stretch of each run (``estimate_folders_rest``, with a
finite-population error). A prefix without folders is listed in key
order (``S3Pages``); where it stops, the keys after the last are estimated from the folders
it had finished (``estimate_bucket_rest``), or stated as a lower bound where the bucket has
no folders to go by.
"""

from __future__ import annotations

import math
import queue
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ioprobe.collect.budget import Overdue, within
from ioprobe.collect.quiet import start_quiet

PAGE_KEYS = 1000  # keys per ListObjectsV2 request: S3's own maximum
MAX_FOLDERS = 10_000  # top-level folders counted, at most; beyond, no estimate is made
THREADS = 8  # folders listed side by side (s3fs keeps 10 connections to a host)
DESCEND = 4  # levels of one folder alone gone into, to find the folders to spread over
# keys beside the folders, fewer than this for them to be spread over: a first page of keys
# alone is a flat prefix, listed in key order at the cost of that one page again
MAX_ROOT_KEYS = PAGE_KEYS


def is_s3(fs: Any) -> bool:
    """Whether ``fs`` is s3fs's filesystem (the one backend read page by page here)."""
    protocol = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return "s3" in protocol and hasattr(fs, "call_s3") and hasattr(fs, "split_path")


class Deadline:
    """When a listing asks for no more pages or folders (``time.monotonic``); ``hit`` says
    whether it stopped there. A page once fetched is taken whole: it cost its request. A
    page asked for before ``at`` may come until ``at + grace``; past that the listing stops
    without it, with the keys it has (``late``: a page that did not come)."""

    def __init__(self, at: float, grace: float = 0.0) -> None:
        self.at = at
        self.grace = grace
        self.hit = False
        self.late = False

    def passed(self) -> bool:
        self.hit = self.hit or time.monotonic() > self.at
        return self.hit

    def wait(self) -> float:
        """How long a page asked for now may take: to ``at``, and the grace past it."""
        return max(self.at - time.monotonic(), 0.0) + self.grace


class Listed(Protocol):
    """An S3 listing that can estimate, once stopped, the keys it had not reached."""

    def rest(self, deadline: float) -> Rest: ...


def remote_files(
    fs: Any, path: str, deadline: Deadline
) -> tuple[Iterator[dict[str, Any]], Listed | None]:
    """The info dicts of the files a glob, a folder or one object names, lazily, until
    ``deadline``; and the S3 listing they come from where a stopped listing's rest can be
    estimated (a bucket's folder, not a glob's matches). Errors are the backend's own,
    raised as the listing reaches them."""
    wild = _wild(path)
    root = _glob_root(path) if wild and is_s3(fs) else None
    if root is not None:
        return _or_literal(fs, path, _globbed(S3Pages(fs, root, deadline), path)), None
    if wild:
        infos = fs.glob(path, detail=True)
        found = _files(infos.values() if isinstance(infos, dict) else [])
        return _or_literal(fs, path, found), None
    if is_s3(fs):
        # s3fs's isdir lists a whole level of the bucket, every page of it, before the
        # listing starts again: one key is enough to know a folder
        pages = S3Pages(fs, path, deadline)
        if pages.has_keys():
            spread = FolderListing.of(pages)
            if spread is not None:
                return iter(spread), spread
            return iter(pages), pages
    elif fs.isdir(path):
        return _walked(fs, path, deadline), None
    return _files([fs.info(path)]), None


def _wild(path: str) -> bool:
    """Whether ``path`` holds a glob's wildcard. An HTTP path is its whole URL: the brackets
    of an IPv6 literal host (``http://[::1]:8080/``) are the host's, not a set."""
    _scheme, sep, rest = path.partition("://")
    tail = rest.partition("/")[2] if sep else path
    return any(ch in tail for ch in "*?[")


def _or_literal(fs: Any, path: str, matches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A glob's matches; where there are none, the object named by ``path`` as written, if
    one exists: a key may hold brackets (``a[1].bin``), which a glob reads as a set."""
    matched = False
    for info in matches:
        matched = True
        yield info
    if matched:
        return
    try:
        literal = fs.info(path)
    except (FileNotFoundError, OSError, ValueError):
        return
    yield from _files([literal])


def _files(infos: Any) -> Iterator[dict[str, Any]]:
    return (i for i in infos if i.get("type") in (None, "file"))


def _walked(fs: Any, path: str, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """The files of a remote folder's tree, top down, until ``deadline``. A folder whose
    listing is its ancestor's (the same files and sizes, the same folders) is that folder
    again, reached through a link to it (an http index's ``again -> .``): neither its files
    nor its folders are walked, which would count the same files down the loop."""
    seen: dict[str, tuple[frozenset[tuple[str, Any]], frozenset[str]]] = {}
    for top, dirs, files in fs.walk(path, detail=True):
        listing = (frozenset((n, i.get("size")) for n, i in files.items()), frozenset(dirs))
        parts = top.rstrip("/").split("/")
        ancestors = ("/".join(parts[:k]) for k in range(1, len(parts)))
        if any(seen.get(a) == listing for a in ancestors):
            dirs.clear()  # fsspec walks top down the folders left in ``dirs``
            continue
        seen[top.rstrip("/")] = listing
        yield from _files(files.values())
        if deadline.passed():
            return


def _glob_root(path: str) -> str | None:
    """The folder a glob's matches are all below: its path up to the last ``/`` before the
    first wildcard; None where the wildcard is in the bucket's name."""
    head = path[: min(path.find(ch) for ch in "*?[" if ch in path)]
    return head.rsplit("/", 1)[0] if "/" in head else None


def _globbed(pages: S3Pages, pattern: str) -> Iterator[dict[str, Any]]:
    from fsspec.utils import glob_translate

    match = re.compile(glob_translate(pattern)).match
    return (info for info in pages if match(info["name"]))


class S3Pages:
    """The objects below an S3 prefix, a ListObjectsV2 page at a time, as info dicts
    (``name`` is ``bucket/key``, as s3fs names them). Keys ending in ``/`` are folder
    markers, not files. As it goes it counts the keys per top-level folder below the prefix
    (``folders``; None past ``MAX_FOLDERS``) and keeps the last key (``last``): what
    ``estimate_bucket_rest`` needs where the listing is stopped."""

    def __init__(self, fs: Any, path: str, deadline: Deadline) -> None:
        self.fs = fs
        self.deadline = deadline
        bucket, key, _version = fs.split_path(path)
        self.bucket = bucket
        self.prefix = key.rstrip("/") + "/" if key else ""
        self.folders: Counter[str] | None = Counter()
        self.last = ""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
        kwargs["MaxKeys"] = PAGE_KEYS
        skip = len(self.prefix)
        first = True
        while True:
            # the first page waits as long as the probe's listing may (nothing to go on
            # without it); a later one until the deadline's grace, then the listing stops
            page = self._page(kwargs, None if first else self.deadline.wait())
            if page is None:
                self.deadline.hit = self.deadline.late = True
                return
            first = False
            for item in page.get("Contents", ()):
                info = _file_info(self.bucket, item)
                if info is not None:
                    self._count(item["Key"][skip:])
                    yield info
            if not page.get("IsTruncated") or self.deadline.passed():
                return
            token = page.get("NextContinuationToken")
            if not token:  # "more follow" without the way to them: the server's fault
                self.deadline.hit = True
                return
            kwargs["ContinuationToken"] = token

    def _page(self, kwargs: dict[str, Any], wait: float | None) -> dict[str, Any] | None:
        """One ListObjectsV2 page; None where it had not come within ``wait`` seconds (its
        request is left to the client's read timeout, on a daemon thread)."""
        if wait is None:
            page: dict[str, Any] = self.fs.call_s3("list_objects_v2", **kwargs)
            return page
        try:
            asked = dict(kwargs)  # the caller goes on to change its own
            got: dict[str, Any] = within(wait, lambda: self.fs.call_s3("list_objects_v2", **asked))
            return got
        except Overdue:
            return None

    def rest(self, deadline: float) -> Rest:
        return estimate_bucket_rest(self, deadline)

    def has_keys(self) -> bool:
        """Whether any key is below the prefix: whether the path is a folder (a bucket's
        name is one, its keys or not)."""
        if not self.prefix:
            return True
        page = self.fs.call_s3("list_objects_v2", Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        return bool(page.get("Contents") or page.get("CommonPrefixes"))

    def _count(self, rest: str) -> None:
        self.last = rest
        folders = self.folders
        if folders is None:
            return
        folder, slash, _name = rest.partition("/")
        if slash:  # a key in the prefix itself belongs to no folder
            folders[folder] += 1
            if len(folders) > MAX_FOLDERS:
                self.folders = None

    def top_folders(self, deadline: float) -> list[str] | None:
        """The folders right below the prefix (a delimited listing), or None where it did not
        end by ``deadline`` or there are more than ``MAX_FOLDERS``."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
        kwargs.update(Delimiter="/", MaxKeys=PAGE_KEYS)
        found: list[str] = []
        skip = len(self.prefix)
        while len(found) <= MAX_FOLDERS and time.monotonic() < deadline:
            page = self._page(kwargs, deadline - time.monotonic())
            if page is None:
                return None
            found += [p["Prefix"][skip:].rstrip("/") for p in page.get("CommonPrefixes", ())]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated"):
                return found
            if not token:
                return None
            kwargs["ContinuationToken"] = token
        return None


@dataclass
class Rest:
    files: float  # the keys a stopped listing had not reached, estimated
    error: float | None  # its standard error; None where only a lower bound is known


def estimate_bucket_rest(pages: S3Pages, deadline: float) -> Rest:
    """The keys a listing stopped at ``pages.last`` had not reached. S3 lists keys in order,
    so the top-level folders before the last key's are whole: their mean count stands for
    each folder after it, and for what is left of the one it was in. The error is
    ``unseen_error`` of the folders left. A bucket with no folders, or fewer than two
    finished, gives no estimate (``Rest(0, None)``: the count is a lower bound)."""
    folders, current = pages.folders, pages.last.partition("/")[0]
    if folders is None or "/" not in pages.last:
        return Rest(0.0, None)
    done = [n for name, n in folders.items() if name != current]
    if len(done) < 2:
        return Rest(0.0, None)
    try:
        names = pages.top_folders(deadline)
    except Exception:  # the estimate is a bonus: a failed request leaves the lower bound
        names = None
    if names is None:
        return Rest(0.0, None)
    # keys sort by their bytes: folder "a-b" lists before "a" ("-" < "/"), so compare with
    # the slash
    left = sum(1 for name in names if name + "/" > current + "/")
    mean = statistics.fmean(done)
    error = unseen_error(left + 1, statistics.variance(done), len(done))
    return Rest(max(mean - folders[current], 0.0) + left * mean, error)


def unseen_error(unseen: float, variance: float, seen: int) -> float:
    """The standard error of ``unseen`` folders' keys taken as that many times the mean of
    ``seen`` folders whose counts have sample ``variance``: the mean's own error, times the
    folders, and the folders' spread about their mean, which a mean however exact leaves.
    With a tenth of the folders left the second is the larger: the mean's error alone
    understated the error there by half or more."""
    return math.sqrt(unseen * unseen * variance / seen + unseen * variance)


def _file_info(bucket: str, item: dict[str, Any]) -> dict[str, Any] | None:
    """A ListObjectsV2 entry as s3fs's info dict; None for a folder marker (a key ending /)."""
    key = item["Key"]
    if key.endswith("/"):
        return None
    return {"name": f"{bucket}/{key}", "size": item["Size"], "type": "file"}


class FolderListing:
    """The keys below an S3 prefix that holds folders, listed in ``THREADS`` stretches side
    by side: the folders (in key order) cut into as many runs, each run listed by a thread
    in key order from its first folder's keys (``StartAfter``) to the next run's, in full
    pages, whatever the folders hold. The keys beside the folders come first. At
    ``deadline`` no page is asked for; one asked for before may come until its grace. The
    first page of each run is asked for whatever the deadline. The first of them to come is
    waited for as long as its request may take (the client's timeout), as a listing in key
    order waits for its first page; the others, asked for with it, as long again as it took
    (or the deadline's grace, if longer): a store slower than the deadline still gives
    stretches of the runs to go on, not no files, and one whose pages stop coming holds the
    listing no longer than a page that came. ``counts`` holds the keys listed per folder
    and ``finished`` the folders listed whole (a thread that has gone past a folder has
    listed it whole, an empty one too): what ``rest`` estimates the others from."""

    def __init__(
        self, pages: S3Pages, prefix: str, folders: list[str], beside: list[dict[str, Any]]
    ) -> None:
        self.fs, self.bucket, self.deadline = pages.fs, pages.bucket, pages.deadline
        self.prefix = prefix
        self.folders = folders
        self.beside = beside
        n, runs = len(folders), min(THREADS, len(folders))
        self.runs = [folders[k * n // runs : (k + 1) * n // runs] for k in range(runs)]
        self.counts: Counter[str] = Counter()
        self.finished: set[str] = set()

    @classmethod
    def of(cls, pages: S3Pages) -> FolderListing | None:
        """The listing of ``pages``' prefix spread over its folders, or of the folders of the
        one folder it holds alone (``DESCEND`` levels at most); None where there are fewer
        than two, more than ``MAX_FOLDERS``, ``MAX_ROOT_KEYS`` keys or more beside them, or
        the folders were not all listed by the deadline."""
        prefix = pages.prefix
        for _ in range(DESCEND + 1):
            level = _level(pages, prefix)
            if level is None:
                return None
            folders, beside = level
            if len(folders) == 1 and not beside:
                prefix = f"{prefix}{folders[0]}/"
                continue
            if len(folders) < 2:
                return None
            return cls(pages, prefix, folders, beside)
        return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.beside
        got: queue.Queue[Any] = queue.Queue(maxsize=2 * THREADS)
        stop = threading.Event()
        for k in range(len(self.runs)):
            thread = threading.Thread(
                target=self._lister, args=(k, got, stop), name=f"ioprobe-list-{k}", daemon=True
            )
            start_quiet(thread)
        running, heard = len(self.runs), set[int]()  # the runs whose first page has come
        asked, came = time.monotonic(), 0.0  # when the first pages were asked for; came
        try:
            while running:
                wait = self.deadline.wait()
                if len(heard) < len(self.runs):
                    wait = max(wait, 2 * came - asked - time.monotonic())
                try:
                    item = got.get(timeout=wait if heard else None)
                except queue.Empty:  # a page asked for in time that has not come
                    self.deadline.hit = self.deadline.late = True
                    return
                if item is None:
                    running -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    k, infos, counts, finished = item
                    came = came or time.monotonic()
                    heard.add(k)
                    self.counts.update(counts)
                    self.finished.update(finished)
                    yield from infos
        finally:
            stop.set()  # the threads ask for no more pages and put nothing more

    def _lister(self, k: int, got: queue.Queue[Any], stop: threading.Event) -> None:
        """Run ``k`` listed until its end, the deadline or ``stop``; then None (or the error
        that ended it) to say it is done."""
        end: BaseException | None = None
        try:
            self._run(k, got, stop)
        except Exception as exc:  # the backend's own error: raised where the listing is read
            end = exc
        _put(got, end, stop)

    def _run(self, k: int, got: queue.Queue[Any], stop: threading.Event) -> None:
        run, prefix = self.runs[k], self.prefix
        # keys of a folder sort after "folder/" and before the next folder's "next/"
        until = f"{prefix}{self.runs[k + 1][0]}/" if k + 1 < len(self.runs) else None
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
        kwargs["StartAfter"] = f"{prefix}{run[0]}/"
        index = {name: i for i, name in enumerate(run)}
        at = 0  # the folder of the run being listed
        first = True  # asked for whatever the deadline: the listing's least to go on
        while not stop.is_set() and (first or not self.deadline.passed()):
            first = False
            page = self.fs.call_s3("list_objects_v2", **kwargs)
            infos: list[dict[str, Any]] = []
            counts: Counter[str] = Counter()
            finished: list[str] = []
            contents = page.get("Contents", ())
            for item in contents:
                key = item["Key"]
                if until is not None and key >= until:
                    break
                folder, slash, _name = key[len(prefix) :].partition("/")
                i = index.get(folder) if slash else None  # a key beside them: listed already
                info = _file_info(self.bucket, item) if i is not None else None
                if i is None or info is None:
                    continue
                if i > at:  # the folders gone past are whole
                    finished += run[at:i]
                    at = i
                counts[folder] += 1
                infos.append(info)
            else:
                token = page.get("NextContinuationToken")
                if page.get("IsTruncated") and token and contents:
                    if not _put(got, (k, infos, counts, finished), stop):
                        return
                    kwargs = {**kwargs, "ContinuationToken": token}
                    kwargs.pop("StartAfter", None)
                    continue
            # the run's end (or a page that says more follow without the way on): every
            # folder from the one it was in is whole
            _put(got, (k, infos, counts, [*finished, *run[at:]]), stop)
            return

    def rest(self, deadline: float) -> Rest:
        counts = self.counts
        finished = [counts[n] for n in self.finished]
        begun = [c for n, c in counts.items() if n not in self.finished]
        unstarted = len(self.folders) - len(self.finished) - len(begun)
        return estimate_folders_rest(finished, begun, unstarted)


def _put(got: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put ``item`` on ``got`` unless ``stop`` comes first (the reader gone); whether put."""
    while not stop.is_set():
        try:
            got.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _level(pages: S3Pages, prefix: str) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The folders right below ``prefix`` and the keys beside them (a delimited listing),
    or None where there are more than ``MAX_FOLDERS`` folders or ``MAX_ROOT_KEYS`` keys,
    or the listing did not end by the deadline."""
    kwargs: dict[str, Any] = {"Bucket": pages.bucket, "Prefix": prefix}
    kwargs.update(Delimiter="/", MaxKeys=PAGE_KEYS)
    folders: list[str] = []
    beside: list[dict[str, Any]] = []
    skip = len(prefix)
    first = True
    while len(folders) <= MAX_FOLDERS and len(beside) < MAX_ROOT_KEYS:
        # the first page waits as the first of a listing in key order does
        page = pages._page(kwargs, None if first else pages.deadline.wait())
        if page is None or (not first and pages.deadline.passed()):
            return None
        first = False
        folders += [p["Prefix"][skip:].rstrip("/") for p in page.get("CommonPrefixes", ())]
        infos = (_file_info(pages.bucket, i) for i in page.get("Contents", ()))
        beside += [i for i in infos if i is not None]
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated"):
            return folders, beside
        if not token:
            return None
        kwargs["ContinuationToken"] = token
    return None


def estimate_folders_rest(finished: Sequence[int], begun: Sequence[int], unstarted: int) -> Rest:
    """The keys a folder listing stopped early had not reached, from the folders it began:
    ``finished`` counts of those listed whole, ``begun`` the keys listed so far of the others,
    and ``unstarted`` the folders it never began.

    Each thread lists its run of folders from the run's start, so the folders begun are a
    stretch at the start of every run: a sample spread over the key space. The folder a
    thread was in when it stopped is likely a large one (a thread spends longer in those):
    each is taken as the mean of the finished folders that hold at least the keys it has
    shown (or its own count, where none does). The sample's mean then stands for each
    folder not begun; the error is ``unseen_error`` of those folders (the mean's error and
    their own spread, from the finished folders'), beside the begun folders' own spread.
    Fewer than two finished: no estimate (``Rest(0, None)``: the count is a lower bound).

    Its limit: where folders differ tenfold, the folders a thread finished before it was
    stopped lean to the small ones, and the estimate comes out about 4% low."""
    if len(finished) < 2:
        return Rest(0.0, None) if unstarted or begun else Rest(0.0, 0.0)
    whole = [float(c) for c in finished]
    spread = statistics.pvariance(whole)
    own = 0.0  # the begun folders' own uncertainty: the spread of the folders they stand in for
    for seen in begun:
        larger = [float(c) for c in finished if c >= seen]
        whole.append(statistics.fmean(larger) if larger else float(seen))
        own += statistics.pvariance(larger) if len(larger) > 1 else spread
    mean = statistics.fmean(whole)
    files = sum(whole[len(finished) :]) - sum(begun) + unstarted * mean
    error = unseen_error(unstarted, statistics.variance(finished), len(whole))
    return Rest(max(files, 0.0), math.hypot(error, math.sqrt(own)))

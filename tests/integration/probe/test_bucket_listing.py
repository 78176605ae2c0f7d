"""A bucket's listing, a page at a time, against moto on 127.0.0.1: every key counted across
pages where the listing ends in time, the rest estimated from the folders listed whole where
it stops at its share of the budget, a lower bound where the bucket has no folders, and
memory flat however many keys."""

from __future__ import annotations

import bisect
import random
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from ioprobe.collect import bucket
from ioprobe.collect import dataset as ds
from ioprobe.collect.bucket import PAGE_KEYS, Deadline, remote_files
from ioprobe.render.summary import listing_note
from tests.support.servers import ListingProxy, S3Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


def _options(s3: S3Server, endpoint: str | None = None) -> dict[str, Any]:
    return {
        "key": s3.ACCESS_KEY,
        "secret": s3.SECRET_KEY,
        "client_kwargs": {"endpoint_url": endpoint or s3.endpoint_url, "region_name": s3.REGION},
    }


def _fs(s3: S3Server) -> Any:
    import s3fs

    return s3fs.S3FileSystem(**_options(s3), skip_instance_cache=True)


def test_a_bucket_listed_in_time_counts_every_key_across_pages(s3: S3Server) -> None:
    keys = [f"train/d{i % 3}/f{i:05d}.bin" for i in range(2_500)]
    s3.put_many("whole", keys)
    s3.put_many("whole", ["train/d0/", "train/d1/"])  # folder markers: no files
    s3.put_many("whole", [f"train/empty{i}.bin" for i in range(3)], b"")
    got = ds.resolve("s3://whole/train", storage_options=_options(s3), budget_s=60)
    assert got.total_files == 2_500 and len(got.entries) == 2_500  # three pages, no marker
    assert not got.listing_truncated and not got.sizes_estimated
    assert got.skipped["empty"] == 3


def test_a_glob_over_a_bucket_matches_across_pages(s3: S3Server) -> None:
    s3.put_many("globbed", [f"d{i % 20:02d}/f{i:05d}.bin" for i in range(2_500)])
    got = ds.resolve("s3://globbed/d1*/f*.bin", storage_options=_options(s3), budget_s=60)
    assert got.total_files == 10 * 125  # d10..d19, 125 keys each
    assert all("/d1" in e.path for e in got.entries)


def test_a_stopped_listing_estimates_the_rest_from_the_folders_listed_whole(
    s3: S3Server,
) -> None:
    rng = random.Random(5)
    counts = [rng.randrange(150, 450) for _ in range(100)]  # the truth: uneven folders
    s3.put_many("large", (f"d{d:03d}/f{i:04d}" for d, n in enumerate(counts) for i in range(n)))
    got = ds.resolve("s3://large", storage_options=_options(s3), budget_s=4.0)
    truth = sum(counts)
    assert got.listing_truncated and got.listed_files < truth / 2
    assert got.files_error is not None and not got.files_at_least
    # the estimate holds the truth within three of its standard errors; how many pages
    # moto answers in the listing's share depends on the host (each costs it about 0.3 s
    # of CPU), so the error's size and the time taken are held on a store of known pace
    assert abs(got.total_files - truth) <= 3 * got.files_error


def test_a_stopped_listing_of_a_store_of_known_pace_keeps_its_share_and_a_usable_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pages of 0.4 s: the folders' level, then eight runs side by side for the rest of the
    # walk's 1.2 s and its grace, about 24,000 of some 60,000 keys
    rng = random.Random(5)
    counts = [rng.randrange(300, 900) for _ in range(100)]
    store = _SlowStore([f"d{d:03d}/f{i:04d}" for d, n in enumerate(counts) for i in range(n)], 0.4)
    monkeypatch.setattr(ds, "url_to_fs", lambda _fsspec, _url, _opts: (store, "large"))
    budget = 4.0
    start = time.monotonic()
    got = ds.resolve("s3://large", budget_s=budget)
    elapsed = time.monotonic() - start
    truth = sum(counts)
    assert got.listing_truncated and got.listed_files < truth / 2
    assert got.files_error is not None and abs(got.total_files - truth) <= 3 * got.files_error
    assert got.files_error < 0.1 * truth  # an error a user can size hardware on
    # the listing's share of the budget and a page of slack
    assert elapsed < ds.WALK_SHARE * budget + 2 * store.page_s + 0.5, elapsed


class _SlowStore:
    """A bucket behind s3fs's one seam the listing calls (``call_s3``) whose every
    ListObjectsV2 page takes ``page_s`` (a far region's round trip; the wait holds no
    lock, as a socket's does not): Prefix, Delimiter, StartAfter and continuation as S3
    answers them, over sorted keys."""

    protocol = ("s3", "s3a")

    def __init__(self, keys: list[str], page_s: float) -> None:
        self.keys, self.page_s = sorted(keys), page_s
        self.pages = 0

    def split_path(self, path: str) -> tuple[str, str, None]:
        bucket, _, key = path.partition("/")
        return bucket, key, None

    def call_s3(self, method: str, **kw: Any) -> dict[str, Any]:
        assert method == "list_objects_v2"
        time.sleep(self.page_s)
        self.pages += 1
        prefix, delimiter = kw.get("Prefix", ""), kw.get("Delimiter")
        after = kw.get("ContinuationToken") or kw.get("StartAfter") or ""
        i = (
            bisect.bisect_right(self.keys, max(after, prefix))
            if after
            else bisect.bisect_left(self.keys, prefix)
        )
        contents: list[dict[str, Any]] = []
        folders: list[str] = []
        last = ""
        while i < len(self.keys) and len(contents) + len(folders) < kw["MaxKeys"]:
            key = self.keys[i]
            if not key.startswith(prefix):
                break
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:  # a folder: one entry, and on past its keys
                folder = key[: cut + 1]
                folders.append(folder)
                last = folder + "\U0010ffff"
                i = bisect.bisect_right(self.keys, last)
                continue
            contents.append({"Key": key, "Size": 1000})
            last = key
            i += 1
        more = i < len(self.keys) and self.keys[i].startswith(prefix)
        page: dict[str, Any] = {"Contents": contents, "IsTruncated": more}
        page["CommonPrefixes"] = [{"Prefix": f} for f in folders]
        if more:
            page["NextContinuationToken"] = last
        return page


def test_folders_listed_side_by_side_list_more_of_a_slow_store_than_one_listing() -> None:
    # 150 folders of 1,000 to 2,000 keys behind pages of 0.1 s: one listing in key order
    # reads ten pages a second, eight runs side by side about eight times as many
    rng = random.Random(2)
    sizes = [rng.randrange(1_000, 2_000) for _ in range(150)]
    keys = [f"c{d:03d}/f{i:04d}.bin" for d, n in enumerate(sizes) for i in range(n)]
    store = _SlowStore([*keys, "readme.txt"], page_s=0.1)
    seconds = 1.0

    def listed(spread: bool) -> tuple[int, bucket.Listed | None]:
        deadline = Deadline(time.monotonic() + seconds, 0.5)
        pages = bucket.S3Pages(store, "wide", deadline)
        listing = bucket.FolderListing.of(pages) if spread else None
        found = iter(listing) if listing is not None else iter(pages)
        return sum(1 for _ in found), listing or pages

    in_order, _ = listed(False)
    spread, listing = listed(True)
    assert 5 * PAGE_KEYS <= in_order <= 12 * PAGE_KEYS  # ten pages, give or take
    assert spread >= 5 * in_order, (spread, in_order)
    # the rest is estimated from a stretch of every run: within three errors of the truth
    assert listing is not None
    rest = listing.rest(time.monotonic() + 5)
    assert rest.error is not None
    assert abs(spread + rest.files - len(keys) - 1) <= 3 * rest.error
    assert rest.error < 0.1 * len(keys)


@pytest.mark.parametrize("page_s", [0.6, 1.2])
def test_a_store_slower_than_the_listings_share_still_gives_each_runs_first_page(
    page_s: float,
) -> None:
    # the folders' level comes in 0.6 s (the runs' first pages then end past the deadline
    # and its grace) or in 1.2 s (past them before any run starts): either way the listing
    # has its first pages to go on and estimates the rest, as a listing in key order has
    # its first page, instead of finding no files
    keys = [f"c{d:03d}/f{i:04d}.bin" for d in range(40) for i in range(300)]
    store = _SlowStore(keys, page_s=page_s)
    deadline = Deadline(time.monotonic() + 1.0, 0.2)
    listing = bucket.FolderListing.of(bucket.S3Pages(store, "wide", deadline))
    assert listing is not None
    names = [info["name"] for info in listing]
    assert len(names) == len(set(names)) == len(listing.runs) * PAGE_KEYS
    assert deadline.hit and store.pages == 1 + len(listing.runs)  # no page past the first
    rest = listing.rest(time.monotonic() + 5)
    assert rest.error is not None and len(names) + rest.files == len(keys)


def test_a_lone_folder_is_gone_into_and_its_folders_listed_side_by_side(s3: S3Server) -> None:
    s3.put_many("deep", (f"data/train/c{d}/f{i:03d}.bin" for d in range(5) for i in range(300)))
    s3.put_many("deep", ["data/train/c3/", "data/train/c9/"])  # markers; c9 holds nothing
    pages = bucket.S3Pages(_fs(s3), "deep", Deadline(time.monotonic() + 30))
    spread = bucket.FolderListing.of(pages)
    assert spread is not None and spread.prefix == "data/train/"
    assert spread.folders == ["c0", "c1", "c2", "c3", "c4", "c9"]
    names = [info["name"] for info in spread]
    assert len(names) == len(set(names)) == 1_500
    assert spread.finished == set(spread.folders) and spread.counts["c9"] == 0


def test_a_stopped_listing_of_a_flat_bucket_is_a_lower_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pages of 0.2 s: a 2 s budget's listing share reads a few of the 40 pages. (moto's pages
    # of a bucket this size cost it seconds of the test's own CPU each on a loaded host)
    store = _SlowStore([f"f{i:06d}.bin" for i in range(40_000)], page_s=0.2)
    monkeypatch.setattr(ds, "url_to_fs", lambda _fsspec, _url, _opts: (store, "flat"))
    got = ds.resolve("s3://flat", budget_s=2.0)
    assert got.listing_truncated and got.files_at_least and got.files_error is None
    assert got.total_files == got.listed_files < 40_000
    note = listing_note(ds.profile(got, lambda _e: b""))
    assert f"at least {got.total_files:,} files" in note and "bucket's keys" in note


class _Bucket:
    """A bucket of ``n`` keys for s3fs's one seam the listing calls (``call_s3``), made up
    page by page as S3 answers ListObjectsV2: moto takes time that grows with the
    bucket for every page, so hundreds of thousands of keys would take minutes there."""

    protocol = ("s3", "s3a")

    def __init__(self, n: int) -> None:
        self.n = n

    def split_path(self, path: str) -> tuple[str, str, None]:
        bucket, _, key = path.partition("/")
        return bucket, key, None

    def call_s3(self, method: str, **kw: Any) -> dict[str, Any]:
        assert method == "list_objects_v2"
        start = int(kw.get("ContinuationToken", 0))
        end = min(start + kw["MaxKeys"], self.n)
        keys = [{"Key": f"d{i // 5000:04d}/f{i:07d}.bin", "Size": 1000} for i in range(start, end)]
        return {"Contents": keys, "IsTruncated": end < self.n, "NextContinuationToken": str(end)}


def _listers_done(timeout: float = 10.0) -> None:
    """Wait for an earlier test's listing threads: one stopped at its deadline may still
    have a page in flight, and moto (in this process) answering it would count here."""
    end = time.monotonic() + timeout
    while any(t.name.startswith("ioprobe-list-") for t in threading.enumerate()):
        assert time.monotonic() < end, "a listing thread did not end"
        time.sleep(0.05)


def test_listing_memory_stays_flat_however_many_keys() -> None:
    _listers_done()

    def peak(n: int) -> tuple[int, int]:
        files, _pages = remote_files(_Bucket(n), "big", Deadline(float("inf")))
        tracemalloc.start()
        listing = ds.take_listing(files, random.Random(0), float("inf"))
        _now, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return listing.count, top

    small, small_peak = peak(50_000)
    large, large_peak = peak(300_000)
    assert (small, large) == (50_000, 300_000)
    # the reservoir of 20,000 names and one page: the same at 6x the keys
    assert large_peak < small_peak * 1.3 + 20 * PAGE_KEYS * 200


def _stalled(s3: S3Server, bucket_name: str, keys: list[str]) -> tuple[Any, float]:
    """``keys`` probed behind a store whose third list request and every one after it never
    come, with a budget of 4 s: what the listing gave, and how long it took."""
    s3.put_many(bucket_name, keys)
    with ListingProxy(s3.endpoint_url, stall_from=3) as proxy:
        t0 = time.monotonic()
        got = ds.resolve(
            f"s3://{bucket_name}/",
            storage_options=_options(s3, proxy.endpoint_url),
            budget_s=4.0,
        )
        return got, time.monotonic() - t0


def test_a_page_that_never_comes_stops_the_listing_with_the_pages_that_came(
    s3: S3Server,
) -> None:
    # the probe gives its listing half the budget: a page in flight past the walk's share
    # held it all that time, and the probe said "storage did not answer" with keys in hand.
    # A bucket's root is a folder without asking; list request 1 is the look for folders
    # (a page of keys and none), 2 the first page in key order, and 3 never comes
    got, took = _stalled(s3, "stalls", [f"k{i:05d}.bin" for i in range(5_000)])
    assert took < 0.5 * 4.0, took
    assert got.listed_files == PAGE_KEYS and got.listing_truncated
    # no folders to go by: the count is what came, a lower bound
    assert got.total_files == PAGE_KEYS and got.files_at_least


def test_folders_whose_pages_never_come_stop_the_listing_with_the_folders_that_came(
    s3: S3Server,
) -> None:
    # request 1 lists the ten folders, 2 is one folder's only page, and from 3 on none
    # comes: seven threads wait on theirs while the listing ends with what it has
    keys = [f"d{i % 10}/k{i:05d}.bin" for i in range(5_000)]
    got, took = _stalled(s3, "stalled-folders", keys)
    assert took < 0.5 * 4.0, took
    assert got.listed_files == 500 and got.listing_truncated
    # one folder finished is too few to stand for the other nine: a lower bound
    assert got.total_files == 500 and got.files_at_least


def test_pages_that_say_more_follow_without_a_token_end_the_listing_with_what_came(
    s3: S3Server,
) -> None:
    s3.put_many("tokenless", [f"k{i:05d}.bin" for i in range(2_500)])
    with ListingProxy(s3.endpoint_url, drop_token=True) as proxy:
        got = ds.resolve(
            "s3://tokenless", storage_options=_options(s3, proxy.endpoint_url), budget_s=10
        )
    assert got.listed_files == PAGE_KEYS and got.listing_truncated and got.files_at_least


def test_a_listed_size_below_zero_is_skipped_as_invalid() -> None:
    skipped: Counter[str] = Counter()
    infos = [{"name": "b/a", "size": -5}, {"name": "b/b", "size": 7}, {"name": "b/c", "size": 0}]
    entries = ds._remote_entries(infos, skipped)
    assert [(e.path, e.size) for e in entries] == [("b/b", 7)]
    assert skipped == Counter({"invalid_size": 1, "empty": 1})


def test_a_key_holding_brackets_is_probed_as_written_where_no_glob_match_exists(
    s3: S3Server,
) -> None:
    s3.put_many("brackets", ["lit/a[1].bin", "set/a[1].bin", "set/a1.bin"], b"12345")
    got = ds.resolve("s3://brackets/lit/a[1].bin", storage_options=_options(s3), budget_s=10)
    assert [e.path for e in got.entries] == ["brackets/lit/a[1].bin"]
    # where the pattern matches, it is a glob: [1] is the set of "1"
    got = ds.resolve("s3://brackets/set/a[1].bin", storage_options=_options(s3), budget_s=10)
    assert [e.path for e in got.entries] == ["brackets/set/a1.bin"]

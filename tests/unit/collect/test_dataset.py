from __future__ import annotations

import os
from pathlib import Path

import pytest

from ioprobe import capacity
from ioprobe.collect import dataset as ds
from ioprobe.errors import TargetError


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_walks_nested_tree_and_counts_what_it_skips(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"a/b/f{i}.bin", 100 + i)
    write(tmp_path / "top.bin", 50)
    write(tmp_path / "empty.bin", 0)
    os.mkfifo(tmp_path / "a/pipe")  # opening it would block: the listing must not
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "linkdir").symlink_to(tmp_path / "a", target_is_directory=True)
    d = ds.resolve(str(tmp_path))
    assert sorted(Path(e.path).name for e in d.entries) == [f"f{i}.bin" for i in range(5)] + [
        "top.bin"
    ]
    assert d.skipped == {"empty": 1, "special_file": 1, "broken_symlink": 1, "symlink_not_file": 1}
    assert d.total_files == 6


def test_a_single_file_and_a_glob_are_targets(tmp_path: Path) -> None:
    f = write(tmp_path / "one.npy", 10)
    write(tmp_path / "two.npy", 20)
    write(tmp_path / "skip.txt", 30)
    assert [e.size for e in ds.resolve(str(f)).entries] == [10]
    assert sorted(e.size for e in ds.resolve(str(tmp_path / "*.npy")).entries) == [10, 20]
    assert [e.size for e in ds.resolve(f"file://{f}").entries] == [10]


def test_a_file_url_is_percent_decoded_and_its_scheme_read_in_any_case(tmp_path: Path) -> None:
    # %20 and %FF were taken literally and FILE:// was no file URL: each found nothing
    folder = os.path.join(os.fsencode(tmp_path), b"a b", b"x\xff")
    os.makedirs(folder)
    with open(os.path.join(folder, b"f.bin"), "wb") as f:
        f.write(b"x" * 10)
    url = f"file://{tmp_path}/a%20b/x%FF"
    for given in (url, "FILE" + url[4:], f"file://localhost{tmp_path}/a%20b/x%FF"):
        assert [e.size for e in ds.resolve(given).entries] == [10], given
    assert not ds.is_remote("FILE" + url[4:])


def test_a_schemes_case_is_folded_for_fsspec_and_a_local_path_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    assert ds.as_url("HTTP://Host/A%20b") == "http://Host/A%20b"  # only the scheme
    assert ds.as_url("S3+Foo://b/k") == "s3+foo://b/k"
    assert ds.as_url("no/scheme/HTTP://x") == "no/scheme/HTTP://x"
    local = tmp_path / "HTTP:"
    (local / "x").mkdir(parents=True)
    named = str(tmp_path / "HTTP://x")
    assert os.path.isdir(named) and ds.as_url(named) == named and not ds.is_remote(named)
    assert ds.is_remote("HTTPS://example.invalid/data/")


def test_a_directory_named_like_a_pattern_is_that_directory(tmp_path: Path) -> None:
    # as a pattern, data[1] would name the sibling data1 and not itself
    write(tmp_path / "data[1]" / "a.npy", 10)
    write(tmp_path / "data[1]" / "sub" / "b.npy", 20)
    write(tmp_path / "data1" / "c.npy", 99)
    literal = ds.resolve(str(tmp_path / "data[1]"))
    assert sorted(e.size for e in literal.entries) == [10, 20]
    # a name that does not exist as written is still a pattern
    pattern = ds.resolve(str(tmp_path / "data[12]" / "*.npy"))
    assert [e.size for e in pattern.entries] == [99]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p / "missing", "no such file or directory"),
        (lambda p: p, "no readable non-empty files"),
        (
            lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1],
            "is not a regular file or directory (a FIFO)",
        ),
        (lambda p: ((p / "l").symlink_to(p / "x"), p / "l")[1], "broken symlink"),
        (lambda p: p / "*.nothing", "the pattern matches no files"),
    ],
    ids=["missing", "empty-dir", "fifo", "broken-link", "empty-glob"],
)
def test_unusable_targets_raise_one_clear_error(
    tmp_path: Path, setup: object, message: str
) -> None:
    target = setup(tmp_path)  # type: ignore[operator]
    with pytest.raises(TargetError) as info:
        ds.resolve(str(target))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_only_empty_files_says_why(tmp_path: Path) -> None:
    write(tmp_path / "a", 0)
    write(tmp_path / "b", 0)
    with pytest.raises(TargetError, match=r"no readable non-empty files \(2 empty\)"):
        ds.resolve(str(tmp_path))


def test_huge_tree_is_sampled_not_stat_ed_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ds, "STAT_SAMPLE", 50)
    for i in range(300):
        write(tmp_path / f"d{i % 7}/f{i}.bin", 1000)
    d = ds.resolve(str(tmp_path))
    assert d.sizes_estimated
    assert len(d.entries) == 50
    assert d.total_files == 300
    prof = ds.profile(d, lambda e: b"")
    assert prof.bytes == 300 * 1000
    assert prof.sizes_estimated


@pytest.mark.parametrize(
    ("name", "head", "fmt"),
    [
        ("a.bin", b"\xff\xd8\xff\xe0rest", "jpeg"),
        ("a.jpg", b"\x89PNG\r\n\x1a\nrest", "png"),
        ("a", b"\x93NUMPY\x01\x00", "npy"),
        ("a.npz", b"PK\x03\x04", "npz"),
        ("a.zip", b"PK\x03\x04", "zip"),
        ("a.webp", b"RIFF\x00\x00\x00\x00WEBPVP8 ", "webp"),
        ("a.tar", b"\x00" * 257 + b"ustar", "tar"),
        ("a.nii.gz", b"\x1f\x8b\x08", "nifti"),
        ("notes.txt", b"hello", "text"),
        ("weird.xyz", b"hello", "xyz"),
        # a URL's query and its last segment's parameters are no part of the extension
        ("https://h/d/a.tfrecord?X-Amz-Signature=S", b"\x00\x01", "tfrecord"),
        ("http://h/a.bin;jsessionid=S3KR1T", b"hello", "binary"),
    ],
)
def test_format_comes_from_magic_bytes_before_extension(name: str, head: bytes, fmt: str) -> None:
    assert ds.detect_format(name, head) == fmt


def test_density_thresholds() -> None:
    assert capacity.density_class(110_000) == "low"
    assert capacity.density_class(capacity.DENSITY_LOW_MAX) == "medium"
    assert capacity.density_class(capacity.DENSITY_HIGH_MIN - 1) == "medium"
    assert capacity.density_class(50 << 20) == "high"


def test_profile_reports_size_percentiles_and_formats(tmp_path: Path) -> None:
    for i in range(1, 11):
        (tmp_path / f"{i}.jpg").write_bytes(b"\xff\xd8\xff" + b"x" * (i * 100))
    d = ds.resolve(str(tmp_path))
    prof = ds.profile(d, lambda e: Path(e.path).read_bytes()[:16])
    assert prof.files == 10
    assert prof.size_max == 1003
    assert prof.size_p50 in (503, 603)
    assert prof.formats == {"jpeg": 10}
    assert prof.density == "low"


def test_the_listing_keeps_a_uniform_sample_and_the_count_not_every_name() -> None:
    import random

    names = (f"n{i}" for i in range(200_000))
    listing = ds.take_listing(names, random.Random(1), float("inf"), k=1000)
    assert listing.count == 200_000 and not listing.stopped
    assert len(listing.names) == 1000 == len(set(listing.names))
    index = [int(n[1:]) for n in listing.names]
    assert index == sorted(index)  # in walk order
    # uniform over the walk: each tenth of it holds about a tenth of the sample
    tenths = [sum(1 for i in index if t * 20_000 <= i < (t + 1) * 20_000) for t in range(10)]
    assert all(60 <= n <= 140 for n in tenths), tenths


def test_a_walk_stopped_at_its_deadline_estimates_the_folders_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    # the truth, by construction: 240 folders of 0-60 files in two levels, 7,000-odd files
    rng = random.Random(7)
    truth, first = 0, None
    for a in range(12):
        for b in range(20):
            n = rng.randrange(61)
            first = n if first is None and n else first
            folder = tmp_path / f"a{a:02d}" / f"b{b:02d}"
            folder.mkdir(parents=True)
            for i in range(n):
                (folder / f"f{i}").write_bytes(b"x")
            truth += n
    monkeypatch.setattr(ds, "WALK_SHARE", 0.0)  # the walk's deadline passes at once
    monkeypatch.setattr(ds, "STAT_SAMPLE", 200)
    d = ds.resolve(str(tmp_path), budget_s=10)
    # seen between folders, once a folder has given a file: the first with any, in order
    assert d.listing_truncated and d.listed_files == first
    assert d.files_error is not None and not d.files_at_least
    # the estimate within three of its standard errors of the truth, the error under 15%
    assert abs(d.total_files - truth) <= 3 * d.files_error, (d.total_files, truth, d.files_error)
    assert d.files_error < 0.15 * truth
    prof = ds.profile(d, lambda e: b"")
    assert prof.files == d.total_files and prof.files_listed == first
    from ioprobe.render.summary import listing_note

    assert f"after {first} files" in listing_note(prof) and "±" in listing_note(prof)


def test_a_tree_of_folders_and_few_files_stops_its_walk_between_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 5 files among 3,000 empty folders: too few names for the clock read every
    # CHECK_EVERY of them, where the walk overran its share and the probe said the storage
    # did not answer
    (tmp_path / "a").mkdir()
    for i in range(5):
        (tmp_path / "a" / f"f{i}").write_bytes(b"x")
    for i in range(3000):
        (tmp_path / f"z{i:04d}").mkdir()
    monkeypatch.setattr(ds, "WALK_SHARE", 0.0)
    d = ds.resolve(str(tmp_path), budget_s=10)
    assert d.listing_truncated and d.listed_files == 5 and len(d.entries) == 5
    # the empty folders left are estimated (their descents find nothing)
    assert d.total_files == 5 and d.files_error == 0


def test_a_folder_too_large_to_count_in_time_gives_a_lower_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3000):
        (tmp_path / f"f{i}").write_bytes(b"x")
    monkeypatch.setattr(ds, "WALK_SHARE", 0.0)
    monkeypatch.setattr(ds, "DESCENT_MIN_S", 0.0)
    monkeypatch.setattr(ds, "DESCENT_SHARE", 0.0)
    monkeypatch.setattr(ds, "CHECK_EVERY", 256)
    d = ds.resolve(str(tmp_path), budget_s=10)
    assert d.listing_truncated and d.files_at_least
    assert 256 <= d.total_files <= 3000


@pytest.mark.parametrize(
    ("url", "cls", "path"),
    [
        ("http://[::1]:8080/data/", "HTTPFileSystem", "http://[::1]:8080/data/"),
        ("https://u@[fe80::1]/d", "HTTPFileSystem", "https://u@[fe80::1]/d"),
        ("memory://plain/x", "MemoryFileSystem", "/plain/x"),
    ],
    ids=["ipv6-literal", "ipv6-with-user", "no-brackets"],
)
def test_a_url_whose_host_is_an_ipv6_literal_is_one_filesystems(
    url: str, cls: str, path: str
) -> None:
    # fsspec's own parser reads the literal's "::" as a chain of URLs: "http://[" was its path
    import fsspec

    fs, got = ds.url_to_fs(fsspec, url, {})
    assert type(fs).__name__ == cls and got == path


def test_a_failing_credential_program_s_output_is_not_quoted() -> None:
    # botocore quotes whatever the credential_process printed: a secret, where it echoes one
    exceptions = pytest.importorskip("botocore.exceptions")
    err = exceptions.CredentialRetrievalError(
        provider="custom-process", error_msg="process-failed-S3KR1T"
    )
    try:
        raise FileNotFoundError("s3://b/x") from err
    except FileNotFoundError as exc:
        line = ds._one_line(exc, "s3://b/x")
    assert "S3KR1T" not in line and "credential provider failed" in line

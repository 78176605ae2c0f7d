"""Where a watched dataset says it reads from: the chunked streaming formats' own attributes,
read off objects shaped as litdata's and mosaicml-streaming's datasets are."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from ioprobe.loaders.torch import dataset_source, format_cache


def test_litdata_input_dir_gives_its_url_else_its_local_path() -> None:
    remote = SimpleNamespace(input_dir=SimpleNamespace(url="s3://bucket/train", path="/cache"))
    assert dataset_source(remote) == "s3://bucket/train"
    local = SimpleNamespace(input_dir=SimpleNamespace(url=None, path="/data/chunks"))
    assert dataset_source(local) == "/data/chunks"


def test_mosaic_streams_give_the_first_streams_remote_redacted() -> None:
    stream = SimpleNamespace(remote="https://user:secret@host/mds?X-Amz-Signature=abc", local="/x")
    got = dataset_source(SimpleNamespace(streams=[stream]))
    assert got.startswith("https://") and "secret" not in got and "abc" not in got
    assert (
        dataset_source(SimpleNamespace(streams=[SimpleNamespace(remote=None, local="/m")])) == "/m"
    )


class Raising:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")


def test_a_dataset_that_names_no_source_or_raises_on_lookup_gives_none() -> None:
    assert dataset_source(SimpleNamespace(rows=[1, 2])) == ""
    assert dataset_source(Raising()) == ""
    assert dataset_source(SimpleNamespace(streams=[])) == ""


def _litdata_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """litdata's own size rule, as litdata 0.2.76 writes it: decimal units, a float is a
    share of the disk (not a size). The seam: the default test environment has no litdata."""
    units = {"gb": 1000**3, "mb": 1000**2, "kb": 1000, "g": 1000**3, "m": 1000**2, "k": 1000}

    def parse(value: int | str) -> int:
        if isinstance(value, int):
            return value
        raw = value.strip().lower()
        unit = next(u for u in units if raw.endswith(u))
        return int(float(raw[: -len(unit)]) * units[unit])

    fmt = ModuleType("litdata.utilities.format")
    fmt._is_absolute_cache_size = lambda v: not isinstance(v, float)  # type: ignore[attr-defined]
    fmt._parse_max_cache_size = parse  # type: ignore[attr-defined]
    for name, mod in (
        ("litdata", ModuleType("litdata")),
        ("litdata.utilities", ModuleType("litdata.utilities")),
        ("litdata.utilities.format", fmt),
    ):
        monkeypatch.setitem(sys.modules, name, mod)


def test_a_litdata_cache_size_and_pre_download_are_read_as_litdata_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _litdata_parser(monkeypatch)
    monkeypatch.delenv("MAX_CACHE_SIZE", raising=False)
    where = SimpleNamespace(url="s3://b/t", path="/cache")
    ds = SimpleNamespace(input_dir=where, max_cache_size="1MB", max_pre_download=2)
    assert format_cache(ds) == (1_000_000, 2)
    monkeypatch.setenv("MAX_CACHE_SIZE", "8MB")  # litdata's rule: the environment wins
    assert format_cache(ds) == (8_000_000, 2)
    monkeypatch.delenv("MAX_CACHE_SIZE")
    share = SimpleNamespace(input_dir=where, max_cache_size=0.9, max_pre_download=2)
    assert format_cache(share)[0] == 0  # a share of the disk: no size known here
    assert (
        format_cache(SimpleNamespace(input_dir=where, max_cache_size=None, max_pre_download=2))[0]
        == 0
    )
    assert format_cache(SimpleNamespace(rows=[1])) == (0, 0)  # not litdata's
    assert format_cache(Raising()) == (0, 0)


def test_without_litdata_importable_no_cache_size_is_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "litdata", None)
    ds = SimpleNamespace(input_dir=SimpleNamespace(url="s3://b/t"), max_cache_size="1MB")
    ds.max_pre_download = 2
    assert format_cache(ds) == (0, 0)

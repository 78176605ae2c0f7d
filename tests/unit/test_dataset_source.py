"""Where a watched dataset says it reads from: the chunked streaming formats' own attributes,
read off objects shaped as litdata's and mosaicml-streaming's datasets are."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ioprobe.watch.torch import dataset_source


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

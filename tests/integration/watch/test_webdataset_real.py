"""A real ``webdataset`` pipeline read by a watched DataLoader delivers the samples it delivers
unwatched, and the record states what the workers read and spent. The truth is built here: tar
shards written with ``wds.TarWriter`` holding samples of 4,096 float32 (a ``.npy`` member) and
their id (a ``.cls`` member), and a decoder that burns a known CPU time per sample."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import ioprobe
from tests.fixtures.burn import burn_10ms

# the dev extras install webdataset; an image without it collects this module and skips it
wds = pytest.importorskip("webdataset")

pytestmark = pytest.mark.slow

FLOATS = 4096


def write_shards(root: Path, shards: int, per_shard: int) -> list[str]:
    """``shards`` tar files of ``per_shard`` samples; sample ``k`` is random floats and ``k``."""
    rng = np.random.default_rng(0)
    urls = []
    for s in range(shards):
        url = str(root / f"shard-{s:03d}.tar")
        with wds.TarWriter(url) as sink:
            for i in range(per_shard):
                key = s * per_shard + i
                x = rng.standard_normal(FLOATS, dtype=np.float32)
                sink.write({"__key__": f"{key:06d}", "npy": x, "cls": key})
        urls.append(url)
    return urls


def loader(urls: list[str], batch: int, *decoders: Callable[..., Any]) -> DataLoader[Any]:
    """Each worker takes its own shards (``split_by_worker``, the library's default, named
    here), read in order: no shard shuffle."""
    ds = (
        wds.WebDataset(urls, shardshuffle=False, workersplitter=wds.split_by_worker)
        .decode(*decoders)
        .to_tuple("npy", "cls")
    )
    return DataLoader(ds, batch_size=batch, num_workers=2)


def test_a_watched_webdataset_gives_the_same_samples_and_the_shards_bytes_per_sample(
    tmp_path: Path,
) -> None:
    shards, per_shard, batch, epochs = 8, 32, 16, 2
    urls = write_shards(tmp_path, shards, per_shard)
    samples = shards * per_shard

    def batches(it: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [b for _ in range(epochs) for b in it]

    plain = batches(loader(urls, batch))
    watched_loader = ioprobe.watch(loader(urls, batch))
    watched = batches(watched_loader)
    # the DataLoader takes the workers' batches in turn, each worker its shards in order:
    # the order is deterministic, so it is compared as it is
    assert len(watched) == len(plain) == epochs * samples // batch
    for (wx, wy), (px, py) in zip(watched, plain, strict=True):
        assert torch.equal(wy, py)
        assert torch.equal(wx, px)
    ids = [i for _, y in plain for i in y.tolist()]
    assert sorted(ids) == sorted(list(range(samples)) * epochs)
    run = watched_loader.run
    w = run.watch
    assert w is not None
    assert [e.samples for e in w.epochs] == [samples] * epochs
    # tar headers, padding and the label member are read with each array: the shards' bytes
    shard_bytes = sum(os.path.getsize(u) for u in urls) / samples
    assert shard_bytes > FLOATS * 4
    assert w.bytes_seen == "read"
    assert run.dataset.sample_bytes_mean == pytest.approx(shard_bytes, rel=0.1)


def burnt_npy(data: bytes) -> np.ndarray[Any, Any]:
    """An ``.npy`` member decoded after burning 10 ms of this thread's CPU."""
    burn_10ms(data)
    loaded: np.ndarray[Any, Any] = np.load(io.BytesIO(data))
    return loaded


def test_a_decoder_burning_cpu_names_the_cpu_stage_at_its_cost_per_sample(
    tmp_path: Path,
) -> None:
    """10 ms of CPU per sample in the decoder, beside the tar parsing and the array's own
    decode (about 0.3 ms here): the CPU stage limits, at 10 ms per sample."""
    shards, per_shard, batch = 8, 16, 8
    urls = write_shards(tmp_path, shards, per_shard)
    watched = ioprobe.watch(loader(urls, batch, wds.handle_extension("npy", burnt_npy)))
    ids = [i for _, y in watched for i in y.tolist()]
    assert sorted(ids) == list(range(shards * per_shard))
    run = watched.run
    assert run.bottleneck == "cpu"
    cpu = run.stages.cpu
    assert cpu is not None and cpu.cpu_seconds_per_sample is not None
    assert cpu.cpu_seconds_per_sample == pytest.approx(0.010, rel=0.15)

"""fsspec: samples fetched over HTTP (a server on 127.0.0.1 started here) by a map-style
dataset, through fsspec (unmetered) or, with --metered, through ioprobe.loaders.files.

  python examples/frameworks/fsspec_http_train.py [--metered]
  ioprobe run --json /tmp/http.json -- python examples/frameworks/fsspec_http_train.py [--metered]
"""

from __future__ import annotations

import functools
import http.server
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class HttpSamples(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, base: str, n: int, metered: bool) -> None:
        self.urls = [f"{base}/{i:05d}.npy" for i in range(n)]
        self.metered = metered

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.metered:
            from ioprobe.loaders import files

            data = files.read_bytes(self.urls[i])
        else:
            with fsspec.open(self.urls[i], "rb") as fh:
                data = fh.read()
        return torch.frombuffer(bytearray(data[128:]), dtype=torch.float32), i % 4


def main(metered: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-http-"))
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rng = np.random.default_rng(0)
        for i in range(256):
            np.save(root / f"{i:05d}.npy", rng.standard_normal(4096, dtype=np.float32))
        base = f"http://127.0.0.1:{server.server_address[1]}"
        gen = torch.Generator().manual_seed(0)
        ds = HttpSamples(base, 256, metered)
        loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, generator=gen)
        torch.manual_seed(0)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            batches = 0
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
            print(f"epoch {epoch}: {batches} batches, loss {loss.item():.4f}")
    finally:
        server.shutdown()
        shutil.rmtree(root)


if __name__ == "__main__":
    main("--metered" in sys.argv[1:])

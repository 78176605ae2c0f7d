"""litdata from S3: samples written into chunk files by litdata's optimize(), uploaded to an S3
bucket (a moto server on 127.0.0.1 started here), streamed back by its StreamingDataset from
s3:// through a torch DataLoader whose workers split the chunks between them.

  python examples/frameworks/litdata_s3_train.py
  ioprobe run --json /tmp/litdata_s3.json -- python examples/frameworks/litdata_s3_train.py
  python examples/frameworks/litdata_s3_train.py --watch   # ioprobe.watch on the loader
  python examples/frameworks/litdata_s3_train.py --burn-ms 5   # each sample burns 5 ms of CPU
  python examples/frameworks/litdata_s3_train.py --latency-ms 100 --chunk-size 8 \\
      --gets-per-worker 1   # each request answered 100 ms late, one at a time: storage-bound

litdata 0.2.76 downloads each chunk in a thread of the worker that reads it (obstore where it is
installed, else boto3), into cache_dir, then reads the local copy through a memory map. It keeps
up to 32 chunks ahead of the reader (whatever max_pre_download says) and fetches up to 8 at once
(LITDATA_ASYNC_DOWNLOAD_CONCURRENCY, which --gets-per-worker sets). The chunks stay in cache_dir,
so the second epoch reads them from local disk without a request, unless --max-cache-size is
smaller than the data set: then each chunk is deleted once read and fetched again next epoch.
optimize() sets the process's multiprocessing start method to spawn, so the workers are spawned
and find the endpoint in the AWS_* variables set here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

try:
    import boto3
    import litdata
    import litdata.streaming.downloader
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from moto.server import ThreadedMotoServer
except ImportError:
    print(
        "litdata_s3_train.py needs litdata and moto: pip install litdata 'moto[server]'",
        file=sys.stderr,
    )
    sys.exit(2)

SAMPLES = 1024
BUCKET = "litdata"

# litdata 0.2.76 fetches chunks through obstore with client options of its own, which leave out
# allow_http (and so override AWS_ALLOW_HTTP): a plain-http endpoint such as this moto server is
# refused. Set at import, so the spawned workers, which import this module again, have it too.
_options = getattr(litdata.streaming.downloader, "_OBSTORE_CLIENT_OPTIONS", None)
if isinstance(_options, dict):
    _options["allow_http"] = "true"


def make_sample(i: int) -> dict[str, Any]:
    # optimize() may call this in any order: each sample's values come from its own index.
    x = np.random.default_rng(i).standard_normal(4096, dtype=np.float32)
    return {"x": x, "y": i % 4}


class Burn:
    """A decode step that costs `ms` of CPU per sample, spent in the worker that loads it. A
    class, not a closure: the workers are spawned and the dataset must pickle."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        end = time.thread_time() + self.ms / 1000
        while time.thread_time() < end:
            pass
        return sample


def start_s3(latency_s: float) -> tuple[Any, str]:
    """A moto S3 server on 127.0.0.1 whose every request is answered `latency_s` late, as a
    far object store's first byte is; the server is threaded, so concurrent requests wait
    together, not in turn."""

    class Handler(MotoRequestHandler):
        def run_wsgi(self) -> None:
            if latency_s:
                time.sleep(latency_s)
            super().run_wsgi()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    # werkzeug looks the handler class up per connection: swapping it now covers every request
    server._server.RequestHandlerClass = Handler
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            # a developer's ~/.aws files must not send these requests elsewhere
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    return server, endpoint


def upload(endpoint: str, local_dir: Path, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(local_dir.iterdir()):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.name}")


def main(
    watch: bool,
    burn_ms: float,
    latency_ms: float = 0.0,
    chunk_size: int = 64,
    workers: int = 2,
    max_cache_size: str | None = None,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-litdata-s3-"))
    server, endpoint = start_s3(latency_ms / 1000)
    try:
        out = root / "optimized"
        litdata.optimize(
            fn=make_sample,
            inputs=list(range(SAMPLES)),
            output_dir=str(out),
            chunk_size=chunk_size,
            num_workers=1,
            verbose=False,
        )
        upload(endpoint, out, "train")
        torch.manual_seed(0)
        ds = litdata.StreamingDataset(
            f"s3://{BUCKET}/train",
            cache_dir=str(root / "cache"),
            shuffle=True,
            max_cache_size=max_cache_size,
            transform=Burn(burn_ms) if burn_ms else None,
        )
        loader: Any = DataLoader(ds, batch_size=32, num_workers=workers)
        if watch:
            import ioprobe

            loader = ioprobe.watch(loader)
        model = torch.nn.Linear(4096, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            batches = 0
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
            print(f"epoch {epoch}: {batches} batches, loss {loss.item():.4f}")
        if watch:
            loader.run.save("litdata_s3_watch.json")
            print("record: litdata_s3_watch.json")
    finally:
        server.stop()
        shutil.rmtree(root)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", action="store_true", help="ioprobe.watch(loader)")
    parser.add_argument("--burn-ms", type=float, default=0.0, help="CPU ms burnt per sample")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="ms each S3 request waits")
    parser.add_argument("--chunk-size", type=int, default=64, help="samples per chunk")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--gets-per-worker", type=int, help="chunk requests at once per worker")
    parser.add_argument("--max-cache-size", help="litdata's cache budget, e.g. 1MB")
    args = parser.parse_args()
    if args.gets_per_worker:
        # read by litdata in each worker, which inherits this process's environment
        os.environ["LITDATA_ASYNC_DOWNLOAD_CONCURRENCY"] = str(args.gets_per_worker)
    main(
        args.watch,
        args.burn_ms,
        args.latency_ms,
        args.chunk_size,
        args.workers,
        args.max_cache_size,
    )

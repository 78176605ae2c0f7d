"""Folders listed side by side against one listing in key order, on a store whose every
ListObjectsV2 page takes ``--page-s`` (the test's ``_SlowStore`` behind s3fs's ``call_s3``
seam), each listing given ``--seconds``: the keys listed, the estimate of the rest with its
standard error, against the truth built.

    python tests/benchmarks/bench_folder_listing.py [--folders 150] [--page-s 0.1] [--seconds 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ioprobe.collect import bucket
from ioprobe.collect.bucket import Deadline
from tests.integration.probe.test_bucket_listing import _SlowStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folders", type=int, default=150)
    ap.add_argument("--page-s", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(2)
    sizes = [rng.randrange(1_000, 2_000) for _ in range(args.folders)]
    keys = [f"c{d:03d}/f{i:04d}.bin" for d, n in enumerate(sizes) for i in range(n)]
    store = _SlowStore([*keys, "readme.txt"], page_s=args.page_s)
    truth = len(keys) + 1
    print(f"truth: {truth:,} keys in {args.folders} folders; pages of {args.page_s} s")
    for spread in (False, True):
        deadline = Deadline(time.monotonic() + args.seconds, 0.5)
        pages = bucket.S3Pages(store, "wide", deadline)
        listing = bucket.FolderListing.of(pages) if spread else None
        t0 = time.monotonic()
        n = sum(1 for _ in (iter(listing) if listing is not None else iter(pages)))
        took = time.monotonic() - t0
        rest = (listing or pages).rest(time.monotonic() + 5)
        total = n + rest.files
        err = f"± {rest.error:,.0f}" if rest.error is not None else "(a lower bound)"
        print(
            f"{'side by side' if spread else 'in key order':>13}: {n:>8,} keys listed in "
            f"{took:.2f} s; estimate {total:>10,.0f} {err} ({total / truth - 1:+.1%})"
        )


if __name__ == "__main__":
    main()

"""The built-in sample dataset that ``ioprobe probe`` uses when given no target.

2,000 deterministic JPEGs (ImageNet-like: 256 to 500 pixels a side, about 20-60 KB each),
generated with Pillow and NumPy from a fixed seed, written once under the user's cache
directory and reused. Built in a temporary sibling directory and renamed into place, so an
interrupted build never leaves a half dataset that a later run would trust.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

VERSION = 1
COUNT = 2000


def cache_root() -> Path:
    from platformdirs import user_cache_dir

    return Path(os.environ.get("IOPROBE_CACHE_DIR") or user_cache_dir("ioprobe"))


def sample_dir() -> Path:
    return cache_root() / f"sample-v{VERSION}"


class _Generator:
    """Crops of a few precomputed textures plus noise: JPEGs with the sizes and decode cost of
    natural photos, at a few ms each instead of computing every image from scratch."""

    def __init__(self) -> None:
        import numpy as np

        rng = np.random.default_rng(VERSION)
        y, x = np.mgrid[0:512, 0:512].astype(np.float32)
        self._bases = []
        for _ in range(8):
            chans = [
                127
                + 120
                * np.sin(x / rng.uniform(6, 60) + y / rng.uniform(20, 200) + rng.uniform(0, 6))
                for _ in range(3)
            ]
            self._bases.append(np.stack(chans, axis=-1).astype(np.int16))
        self._noise = rng.integers(-24, 25, size=(1024, 1024, 3), dtype=np.int16)

    def image(self, i: int) -> bytes:
        import io

        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(1000 + i)
        w, h = int(rng.integers(256, 501)), int(rng.integers(256, 501))
        bx, by = int(rng.integers(0, 513 - w)), int(rng.integers(0, 513 - h))
        nx, ny = int(rng.integers(0, 1025 - w)), int(rng.integers(0, 1025 - h))
        base = self._bases[i % len(self._bases)][by : by + h, bx : bx + w]
        pixels = np.clip(base + self._noise[ny : ny + h, nx : nx + w], 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels, "RGB").save(out, format="JPEG", quality=85)
        return out.getvalue()


def ensure_sample(
    count: int = COUNT, on_progress: Callable[[int, int], None] | None = None
) -> Path:
    """Return the sample dataset's directory, generating it first if it is not complete."""
    target = sample_dir()
    # the marker lives beside the dataset, so it is never probed as a sample
    marker = target.with_name(target.name + ".complete")
    if marker.exists() and target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    gen = _Generator()
    try:
        for i in range(count):
            sub = tmp / f"class{i % 10:02d}"
            sub.mkdir(exist_ok=True)
            (sub / f"img{i:05d}.jpg").write_bytes(gen.image(i))
            if on_progress is not None and (i % 50 == 0 or i == count - 1):
                on_progress(i + 1, count)
        if target.exists():
            shutil.rmtree(target)  # an earlier, incomplete build of our own cache
        os.replace(tmp, target)
        marker.write_text(f"{count}\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target

"""Sample decoders for the CPU stage: what a loader does to a file's bytes.

``raw`` does nothing (pure I/O), ``image`` is Pillow decode + RGB + resize to 224x224 (the
work a torchvision ImageNet transform does before tensor conversion), ``numpy`` loads
``.npy``/``.npz``; ``dali`` decodes as ``image`` here (the probe measures DALI's own decoders
beside it). ``module:function`` names any importable callable taking bytes: users measure
their own decode this way, and tests use it to build samples of known CPU cost.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable
from typing import Any

from ioprobe.errors import BadInputError

Decoder = Callable[[bytes], Any]
BUILTIN = ("raw", "image", "numpy")
IMAGE_FORMATS = {"jpeg", "png", "webp", "gif", "bmp", "tiff"}
NUMPY_FORMATS = {"npy", "npz"}


def decode_raw(data: bytes) -> int:
    """No decode: the one copy of the bytes a loader makes at the least (into the tensor or
    array it hands on). Its cost grows with the sample's size, as a loader's does; a stage
    that costs nothing would leave a cache of a huge dataset limited by nothing at all."""
    return len(bytearray(data))


def decode_image(data: bytes) -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)


def decode_numpy(data: bytes) -> Any:
    import numpy as np

    loaded = np.load(io.BytesIO(data), allow_pickle=False)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            return [np.ascontiguousarray(loaded[k]) for k in loaded.files]
    return np.ascontiguousarray(loaded)


def output_nbytes(obj: Any) -> int | None:
    """Bytes a decoded sample occupies as a uint8 or numeric array: what crosses to the GPU.

    A Pillow image counts one byte per band per pixel (``ToTensor``'s float would be four,
    but a loader that copies floats can copy uint8 and convert on the device); arrays count
    ``nbytes``; ``raw`` returns the file's length. A non-empty list or tuple is the sum of
    its parts, when every part has a size. None for anything else.
    """
    size = _one_output_nbytes(obj)
    if size is not None or not isinstance(obj, list | tuple) or not obj:
        return size
    parts = [output_nbytes(o) for o in obj]
    known = [p for p in parts if p is not None]
    return sum(known) if len(known) == len(parts) else None


def _one_output_nbytes(obj: Any) -> int | None:
    """``output_nbytes`` of a single object, not a sequence of them."""
    if isinstance(obj, int) and not isinstance(obj, bool):  # a bool is not a length
        return obj
    if isinstance(obj, bytes | bytearray | memoryview):
        return len(obj)
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if hasattr(obj, "getbands") and hasattr(obj, "size"):
        w, h = obj.size
        return int(w * h * len(obj.getbands()))
    return None


def choose(loader: str, formats: dict[str, int]) -> str:
    """Resolve ``auto`` from the dataset's dominant format; other names pass through."""
    if loader != "auto":
        return loader
    if not formats:
        return "raw"
    top = max(formats.items(), key=lambda kv: kv[1])[0]
    if top in IMAGE_FORMATS:
        return "image"
    if top in NUMPY_FORMATS:
        return "numpy"
    return "raw"


def resolve(name: str) -> Decoder:
    if name == "raw":
        return decode_raw
    if name in ("image", "dali"):
        # dali: the probe measures DALI beside Pillow (collect/decode_paths.py); anything
        # that decodes sample by sample here uses Pillow
        return decode_image
    if name == "numpy":
        return decode_numpy
    if ":" in name:
        module, _, attr = name.partition(":")
        if not module or not attr:
            raise BadInputError(f"--loader {name!r}: give it as module:function")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise BadInputError(f"--loader {name}: cannot import it ({exc})") from None
        except Exception as exc:  # the user's module fails as it is imported
            raise BadInputError(
                f"--loader {name}: importing it failed: {type(exc).__name__}: {exc}"
            ) from None
        if not callable(fn):
            raise BadInputError(f"--loader {name}: is not callable")
        return fn  # type: ignore[no-any-return]
    raise BadInputError(f"--loader {name!r}: use auto, raw, image, numpy, dali, or module:function")

"""Deprecated: ``ioprobe.loaders.gather``. Import ``gather`` from there."""

from __future__ import annotations

import warnings

from ioprobe.loaders.gather import gather

warnings.warn(
    "ioprobe.watch.gather moved to ioprobe.loaders.gather; the old path goes in the next release",
    FutureWarning,
    stacklevel=2,
)

__all__ = ["gather"]

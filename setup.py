"""Builds the optional NVTX injection library (csrc/nvtx_inject.c) beside the package.

Everything else about the distribution is in pyproject.toml. The library gives per-operator
timing for NVIDIA DALI; without a C compiler or the NVTX v3 headers the install still succeeds
and ioprobe falls back to per-thread CPU time, saying so in its records.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup


def nvtx_include() -> str | None:
    """The first folder holding nvtx3/nvToolsExt.h: the nvidia-nvtx-cu12 wheel (a build
    requirement on Linux), then a CUDA toolkit."""
    candidates = [Path(p) / "nvidia" / "nvtx" / "include" for p in sys.path if p]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    candidates.extend(sorted(Path("/usr/local").glob("cuda-*/include"), reverse=True))
    for c in candidates:
        if (c / "nvtx3" / "nvToolsExt.h").is_file():
            return str(c)
    return None


ext_modules = []
include = nvtx_include() if sys.platform.startswith("linux") else None
if include:
    ext_modules.append(
        Extension(
            "ioprobe._nvtx_inject",
            sources=["csrc/nvtx_inject.c"],
            include_dirs=[include],
            extra_compile_args=["-O2", "-std=c11", "-fvisibility=hidden"],
            libraries=["pthread"],
            optional=True,  # no compiler: install anyway, measure DALI by thread CPU time
        )
    )
else:
    print("ioprobe: NVTX v3 headers not found; per-operator DALI timing is not built")

setup(ext_modules=ext_modules)

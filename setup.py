"""Builds ioprobe's two optional C libraries beside the package.

Everything else about the distribution is in pyproject.toml. Without a C compiler the install
still succeeds and ioprobe falls back, saying so in its records:
- the NVTX injection library (csrc/nvtx_inject.c) gives per-operator timing for NVIDIA DALI
  (else per-thread CPU time); it needs the NVTX v3 headers;
- the direct-read loop (csrc/uring_reads.c) keeps the device-limit pass's reads in flight as
  fio does (else the same loop in Python, slower at small blocks); Linux only.
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

if sys.platform.startswith("linux"):
    # loaded with ctypes (collect/direct_loop.py), never imported: a plain shared library
    ext_modules.append(
        Extension(
            "ioprobe._uring_reads",
            sources=["csrc/uring_reads.c"],
            extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)

"""Builds CUDA headers of tracekit/kernels as a host library with g++ (tests/kernels/host_shim
stands in for the few CUDA names they use), for the tests that run device code on the CPU
(test_decoders_host.py, test_codes_host.py)."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np

from tracekit import quants
from tracekit.kernels import cuda

SHIM = Path(__file__).resolve().parent / "host_shim"
KERNELS = Path(cuda.__file__).resolve().parent


def build(
    folder: Path, name: str, source: str, flags: tuple[str, ...] = ("-std=c++17",)
) -> ctypes.CDLL:
    """``source`` compiled as ``folder/name.so`` (IEEE f32, no contraction: FFMA is std::fma)."""
    (folder / f"{name}.cpp").write_text(source)
    # -fno-gnu-unique: the shims' inline variables (threadIdx, ...) stay each library's own; as
    # GNU-unique symbols the dynamic linker would bind a later library's to the first's, across
    # RTLD_LOCAL (cuda_block.h's global threadIdx vs mmq_host.h's thread_local one: a segfault)
    cmd = ["g++", *flags, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-fno-gnu-unique"]
    cmd += [f"-I{SHIM}", f"-I{KERNELS}", *quants.cuda_defines()]
    cmd += ["-o", str(folder / f"{name}.so"), str(folder / f"{name}.cpp")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(folder / f"{name}.so"))


def with_static_shared(source: str) -> str:
    """``source`` (after ``#include "cuda_block.h"``, which drops ``__shared__``) with its static
    ``__shared__`` arrays as function-local statics, the block's shared memory since the shim
    runs one block at a time on one OS thread, and each ``extern __shared__`` array a plain
    extern (static and extern do not combine: the test defines the global array)."""
    body = re.sub(r"extern\s+__shared__\s+", "extern ", source)
    return "#undef __shared__\n#define __shared__ static\n" + body


def aligned(raw: np.ndarray) -> np.ndarray:
    """A copy of raw at a 16-byte aligned address (the kernels' word-wise paths need it)."""
    buf = np.empty(raw.size + 16, np.uint8)
    start = -buf.ctypes.data % 16
    out = buf[start : start + raw.size]
    out[...] = raw
    return out

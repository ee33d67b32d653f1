"""Compiling and caching the ``.cu`` sources that sit next to their launchers.

Each family keeps its CUDA C++ in ``tracekit/kernels/<family>.cu``; :func:`module` compiles it
once per process with NVRTC (through ``cupy.RawModule``) and caches it. No ``--use_fast_math``:
the dequant/embed kernels must be bit-exact with gguf-py (STYLE.md), and the others keep IEEE
semantics so the NumPy reference stays a valid oracle.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# -I: the families include quant_decoders.cuh from this folder.
_OPTIONS = ("-std=c++17", f"-I{_HERE}")


@functools.cache
def module(family: str) -> Any:
    """The compiled RawModule of ``<family>.cu`` (compiled on first use, then cached)."""
    import cupy

    src = (_HERE / f"{family}.cu").read_text()
    return cupy.RawModule(code=src, options=_OPTIONS)


@functools.cache
def kernel(family: str, name: str) -> Any:
    """One ``__global__`` function of a family's module (``extern "C"`` names); cached, since
    ``RawModule.get_function`` costs ~3 µs of host time per launch on the H200 host."""
    return module(family).get_function(name)


def is_device_array(a: Any) -> bool:
    """True for a CuPy ndarray (checked without importing CuPy where it is absent)."""
    return type(a).__module__.startswith("cupy")

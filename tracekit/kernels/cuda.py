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

import numpy as np

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


# -- launching, and recording launches for replay ---------------------------------------------
class LaunchTape:
    """The launches made while it is active (see :func:`recording`), kept for replay.

    A runner records one decode step through the normal dispatch chain (arm -> backend ->
    launcher -> kernel, every gate checked), then replays the tape at later decode steps: the
    same kernels on the same buffers, without the Python of the three hops above the kernel
    (see ``tracekit/runner/replay.py``). ``entries`` holds, in launch order, either
    ``(function, grid, block, args, shared_mem)`` or a host callable (a cuBLAS call) taking the
    stream pointer.
    """

    def __init__(self) -> None:
        self.entries: list[Any] = []

    def __len__(self) -> int:
        return len(self.entries)


_tape: LaunchTape | None = None

#: The kernels whose last parameter is ``unsigned long long* stamp`` (stamp.cuh): the ones that
#: can be the first launch of a graph node. Launchers pass NO_STAMP (null); a timed CUDA graph
#: of a replayed step passes a slot of its timestamp buffer to each node's first kernel.
STAMPED = frozenset(
    {
        "add_f32", "mul_f32", "silu_f32", "gelu_tanh_f32", "scale_f32", "f32_bits_to_i32",
        "convert_f32_f16", "add_bias_f32", "rms_norm_f32", "rope_f32", "kv_store_f32",
        "gather_rows_f32", "embed_rows_f16", "embed_rows_bf16", "embed_rows_q8_0",
        "embed_rows_q4_0", "embed_rows_q4_1", "embed_rows_q5_0", "embed_rows_q5_1",
        "embed_rows_q4_k", "embed_rows_q5_k", "embed_rows_q6_k", "softcap_f32", "slice_cols_f32",
    }
)  # fmt: skip
NO_STAMP = np.uint64(0)


class recording:  # noqa: N801 (a context manager used like a function)
    """``with recording(tape):`` appends every launch made inside it to ``tape``."""

    def __init__(self, tape: LaunchTape) -> None:
        self.tape = tape

    def __enter__(self) -> LaunchTape:
        global _tape
        if _tape is not None:
            raise RuntimeError("launches are already being recorded")
        _tape = self.tape
        return self.tape

    def __exit__(self, *exc: Any) -> None:
        global _tape
        _tape = None


def launch(
    fn: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], shared_mem=0
) -> None:
    """Launch ``fn`` (a CuPy ``Function``) on the current stream; recorded when taping.

    Every launcher calls this, so a tape sees every kernel of a step. Scalars must be NumPy
    scalars (their C type is what the kernel reads back); device arrays are passed as pointers.
    """
    fn(grid, block, args, shared_mem=shared_mem)
    if _tape is not None:
        _tape.entries.append((fn, tuple(grid), tuple(block), tuple(args), int(shared_mem)))


def record_host_call(call: Any) -> None:
    """Record a host-side launch (``call(stream_ptr)``, e.g. a cuBLAS GEMM) when taping."""
    if _tape is not None:
        _tape.entries.append(call)

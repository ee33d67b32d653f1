"""The quantized matrix-vector product (decode's MatMul on the quant path, seed §3.2).

    matvec_<suffix>_n<nt>(raw, x) -> f32 [nt, n]   every type of the quant table, nt in 1..8

``out = x @ W.T`` with ``W`` [n, k] read straight from its GGUF blocks (``raw``): no dequantized
copy of the weight is ever written. Each value of ``W`` is decoded in f32 by the type's block
decoder in ``quant_decoders.cuh`` (bit-equal to ``gguf.quants.dequantize``) and multiplied into
an f32 sum; F32/F16/BF16 weights go through the same kernel (8-value "blocks"). The NumPy
reference :func:`ref_matvec` is the same product in f32 of the same exact values; the two
differ only in summation order (tests bound the difference).

GPU layout (the grid contract, :func:`geometry`): one warp per weight row (WPR warps when the
matrix has few rows), ``ROWS_PER_BLOCK`` rows per block, grid = ceil(n / rows per block). A row's 8-value chunks are dealt to the lanes
round-robin; ``UNROLL`` chunks per lane are decoded before their FMAs. Kernels are generated per
type from the quant table (``MATVEC_KERNELS(<suffix>, <GGML name>)``, appended to matvec.cu), one
per token count, and compiled on first use of that type.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tracekit.kernels import cuda, dequant
from tracekit.kernels.checks import KernelInputError, require_array
from tracekit.kernels.launch import Geometry, LaunchRecord, ceil_div
from tracekit.quants import QUANT_TABLE, QuantType, quant_type

FAMILY = "matvec"
#: The most tokens one matvec launch takes (decode and speculative-sized batches); larger
#: batches (a prefill) run the f16 GEMM path (``Backend.matmul``).
MAX_NT = 8
#: Weight rows per thread block (one warp each, or WPR: :func:`warps_per_row`) and 8-value
#: chunks decoded per lane before their FMAs: scripts/bench_matvec.py's sweep picks them.
ROWS_PER_BLOCK = 4
UNROLL = 4
#: Warps a launch aims to run (about half of an H200's 132 SMs x 64 warp slots): rows fewer than
#: this get several warps each.
TARGET_WARPS = 4096
#: A matvec launch reads, per weight value, its packed bits once; per output, 2 flops per k.
_INT32_MAX = 2**31 - 1
#: The path name a matvec launch records (the node's path in the trace).
PATH = "quant"


def block_sizes(qt: QuantType) -> tuple[int, int]:
    """(bytes, values) of the kernel's block: the quant table's, 8 values for F32/F16/BF16."""
    return (qt.type_size, qt.block_size) if qt.is_quantized else (8 * qt.type_size, 8)


def kernel_name(qt: QuantType, nt: int) -> str:
    return f"matvec_{qt.suffix}_n{nt}"


def kernel_names() -> frozenset[str]:
    """Every matvec kernel name (each times itself when given a stamp slot: cuda.STAMPED)."""
    return frozenset(
        kernel_name(qt, nt) for qt in QUANT_TABLE.values() for nt in range(1, MAX_NT + 1)
    )


cuda.register_stamped(kernel_names())


def warps_per_row(n: int, k: int) -> int:
    """WPR: warps sharing a row, so that about TARGET_WARPS warps run (a power of 2, <= 8, and
    no more lanes than the row has 8-value chunks)."""
    wpr = 1
    while wpr < 8 and n * wpr < TARGET_WARPS and 64 * wpr <= k // 8:
        wpr *= 2
    return wpr


def geometry(
    n: int, k: int, rows_per_block: int = ROWS_PER_BLOCK, wpr: int | None = None
) -> Geometry:
    """block = (32, WPR, rows per block) (at most 8 warps), grid = ceil(n / rows per block)."""
    wpr = warps_per_row(n, k) if wpr is None else wpr
    if wpr not in (1, 2, 4, 8):
        raise ValueError(f"warps per row {wpr} must be 1, 2, 4 or 8")
    rows = max(1, min(rows_per_block, 8 // wpr))
    if not 1 <= rows_per_block <= 8:
        raise ValueError(f"rows per block {rows_per_block} must be in [1, 8] (256 threads)")
    if n < 1:
        raise ValueError(f"row count {n} must be positive")
    return Geometry((ceil_div(n, rows), 1, 1), (32, wpr, rows), 32 * wpr * n)


def check(x: Any, raw: Any, qt: QuantType, shape: tuple[int, int]) -> tuple[int, int, int]:
    """The gates of the reference and the launcher; returns (nt, n, k)."""
    if len(shape) != 2:
        raise KernelInputError(f"matvec weight shape {shape} must be 2-D [n, k]")
    n, k = (int(s) for s in shape)
    dequant.check_raw(raw, qt, (n, k), "matvec weight")
    require_array(x, np.float32, "matvec x", ndim=2)
    nt, kx = (int(s) for s in x.shape)
    if kx != k:
        raise KernelInputError(f"matvec k mismatch: x {tuple(x.shape)} vs weight [{n}, {k}]")
    if not 1 <= nt <= MAX_NT:
        raise KernelInputError(f"matvec takes 1..{MAX_NT} tokens, got x with {nt} rows")
    if k % 8:
        raise KernelInputError(f"matvec row length k={k} must be a multiple of 8")
    if max(n, k) > _INT32_MAX:
        raise KernelInputError(f"matvec dims n={n}, k={k} exceed the int32 limit")
    return nt, n, k


def _record(name: str, geo: Geometry | None, raw: Any, x: Any, out: Any) -> LaunchRecord:
    nt, k = (int(s) for s in x.shape)
    n = int(out.shape[1])
    return LaunchRecord.of(name, geo, reads=[raw, x], writes=[out], flops=2 * nt * n * k, path=PATH)


def ref_matvec(
    x: np.ndarray, raw: np.ndarray, qt: QuantType, shape: tuple[int, int]
) -> tuple[np.ndarray, LaunchRecord]:
    """NumPy reference: ``x @ W.T`` in f32, W the exact f32 values gguf-py dequantizes to.

    Returns:
        (out [nt, n] float32, record ``numpy_matvec_<suffix>``, path ``quant``)

    Raises:
        KernelInputError: a gate failed (see :func:`check`).
    """
    qt = quant_type(qt)
    check(x, raw, qt, shape)
    w, _ = dequant.ref_dequantize_f32(raw, qt, tuple(int(s) for s in shape))
    out = np.matmul(x, w.T)
    return out, _record(f"numpy_matvec_{qt.suffix}", None, raw, x, out)


@functools.cache
def _module(suffix: str, unroll: int) -> Any:
    """matvec.cu with the kernels of one type (from the quant table), compiled once."""
    import cupy

    qt = next(t for t in QUANT_TABLE.values() if t.suffix == suffix)
    # the type's CUDA decoder (its declaration's ``device``); float types' is a Src* reader
    struct = qt.device if qt.is_quantized else f"FloatBlock<{qt.device}>"
    src = (cuda._HERE / f"{FAMILY}.cu").read_text()
    src += f"\nMATVEC_KERNELS({qt.suffix}, {struct})\n"
    return cupy.RawModule(code=src, options=(*cuda._OPTIONS, f"-DMV_UNROLL={unroll}"))


@functools.cache
def _kernel(suffix: str, nt: int, unroll: int) -> Any:
    return _module(suffix, unroll).get_function(f"matvec_{suffix}_n{nt}")


def launch_matvec(
    x: Any,
    raw: Any,
    qt: QuantType,
    shape: tuple[int, int],
    out: Any = None,
    *,
    rows_per_block: int = ROWS_PER_BLOCK,
    unroll: int = UNROLL,
    wpr: int | None = None,
) -> tuple[Any, LaunchRecord]:
    """``x [nt, k] @ W [n, k]ᵀ`` on the GPU with ``matvec_<suffix>_n<nt>``, W packed in ``raw``.

    Args:
        x: CuPy f32 [nt, k], 1 <= nt <= MAX_NT, contiguous, 16-byte aligned.
        raw: CuPy uint8, the weight's GGUF bytes (``qt.nbytes(shape)`` of them).
        qt, shape: the weight's type and shape [n, k] (k a multiple of the block size and of 8).
        out: optional CuPy f32 [nt, n] to write into.
        rows_per_block, unroll, wpr: the kernel configuration (the bench sweeps them; wpr None:
            :func:`warps_per_row`).

    Returns:
        (out, launch record with ``extra.path == "quant"``)

    Raises:
        KernelInputError: a gate failed, host arrays, or a misaligned x.
    """
    from tracekit.kernels.elementwise import device_out, require_device

    qt = quant_type(qt)
    nt, n, k = check(x, raw, qt, shape)
    require_device(x, "matvec x")
    require_device(raw, "matvec weight")
    if x.data.ptr % 16:
        raise KernelInputError(
            f"matvec x starts {x.data.ptr % 16} bytes past a 16-byte boundary; it must be aligned"
        )
    o = device_out(out, (nt, n), np.float32, "matvec out")
    geo = geometry(n, k, rows_per_block, wpr)
    fast = np.int32(raw.data.ptr % 16 == 0)  # Fast<T> decoders need 16-byte aligned blocks
    ts, qk = block_sizes(qt)
    args = (
        raw, x, o, np.int32(n), np.int32(k), np.int32(ts), np.int32(qk), fast, cuda.NO_STAMP,
    )  # fmt: skip
    cuda.launch(_kernel(qt.suffix, nt, unroll), geo.grid, geo.block, args)
    return o, _record(kernel_name(qt, nt), geo, raw, x, o)

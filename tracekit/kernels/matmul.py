"""MatMul: activations [nt, k] f32 times a weight [n, k] (GGUF's row-per-output layout)ᵀ.

The GPU path is the seed's f16 path: the weight is dequantized to f16 once at load (the w16
cache, see ``Backend.matmul_weight``), the activations are converted with ``convert_f32_f16``
and cuBLAS runs the GEMM with f16 inputs, f32 accumulation and f32 output. The NumPy path runs
the same product in f32 on the exact dequantized weight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError, require_array, require_contiguous
from tracekit.kernels.launch import LaunchRecord


def _check_shapes(x: Any, w: Any, what_w: str) -> tuple[int, int, int]:
    """Returns (nt, n, k)."""
    if x.ndim != 2:
        raise KernelInputError(f"matmul x has shape {tuple(x.shape)}, expected 2-D [nt, k]")
    if w.ndim != 2:
        raise KernelInputError(f"matmul {what_w} has shape {tuple(w.shape)}, expected 2-D [n, k]")
    nt, k = (int(s) for s in x.shape)
    n, kw = (int(s) for s in w.shape)
    if k != kw:
        raise KernelInputError(
            f"matmul k mismatch: x {tuple(x.shape)} has k={k}, {what_w} {tuple(w.shape)} has k={kw}"
        )
    if nt < 1 or n < 1 or k < 1:
        raise KernelInputError(
            f"matmul shapes x {tuple(x.shape)}, {what_w} {tuple(w.shape)} are empty"
        )
    return nt, n, k


def ref_matmul(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """``x @ w.T`` in float32 (an f16 weight is upcast to f32 first).

    Args:
        x: [nt, k] float32.
        w: [n, k] float32 or float16.

    Returns:
        (out [nt, n] float32, record ``numpy_matmul_f32`` with flops 2*nt*n*k)

    Raises:
        KernelInputError: a dtype other than those, a non-contiguous input, or a k mismatch.
    """
    require_array(x, np.float32, "matmul x")
    if np.dtype(w.dtype) not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise KernelInputError(
            f"matmul weight has dtype {np.dtype(w.dtype).name}, expected float32 or float16"
        )
    require_contiguous(w, "matmul weight")
    nt, n, k = _check_shapes(x, w, "weight")
    w32 = w if w.dtype == np.float32 else w.astype(np.float32)
    out = np.matmul(x, w32.T)
    rec = LaunchRecord.of(
        "numpy_matmul_f32", None, reads=[x, w], writes=[out], flops=2 * nt * n * k
    )
    return out, rec

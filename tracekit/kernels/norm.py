"""RMS norm over the last axis: ``y = x / sqrt(mean(x^2) + eps) * w``.

Used on [nt, d] hidden rows and on per-head [nt, n_head, head_dim] Q/K rows (gemma3's
q_norm/k_norm): every contiguous run of the last axis is one row. The sum of squares is
accumulated in float64 (the reference and the kernel alike, so the f32 scale agrees to the
last bit almost always), then ``scale = 1 / sqrt(mean + eps)`` is rounded to f32 and the
output is ``(x * scale) * w`` in f32, the order ggml and Hugging Face use.

The CUDA kernel runs one block per row (grid-stride over rows past the grid limit), each thread
striding over the row, with warp-shuffle reductions (and one shared-memory hop between warps
when the block is wider than a warp). Flops per element: 2 (square, add) + 1 (x * scale)
+ 1 (* w, when given).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.kernels import cuda
from tracekit.kernels.checks import KernelInputError, require_array, require_nonempty
from tracekit.kernels.elementwise import device_out, require_device
from tracekit.kernels.launch import Geometry, LaunchRecord, grid_1d
from tracekit.kernels.registry import KernelOp, declare

FAMILY = "norm"
KERNEL = "rms_norm_f32"
#: Elements of a row each thread loads per pass. A thread's loads are independent, so it waits
#: for about one memory latency per pass; with one warp on an 896-wide row (the old rule: one
#: warp below 1024) each thread waited for 28 loads in turn, 17 µs per row on the H200 (the
#: 0.5B decode trace: 49 rms_norm nodes, 0.8 ms of a 2.1 ms step).
ROW_ELEMS_PER_THREAD = 4


def kernel_defines() -> tuple[str, ...]:
    """The values a thread keeps in registers (norm.cu's NORM_RPT): block_for's per-thread
    count, so a row the launcher sizes fits them."""
    return (f"-DNORM_RPT={ROW_ELEMS_PER_THREAD}",)


def _check(x: Any, w: Any, eps: float) -> tuple[int, int]:
    """Returns (rows, d)."""
    require_array(x, np.float32, "rms_norm x")
    require_nonempty(x, "rms_norm x")
    d = int(x.shape[-1])
    if w is not None:
        require_array(w, np.float32, "rms_norm weight", ndim=1)
        if int(w.size) != d:
            raise KernelInputError(
                f"rms_norm weight length {int(w.size)} is not the row length {d} of x "
                f"{tuple(x.shape)}"
            )
    if not (np.isfinite(eps) and eps >= 0):
        raise KernelInputError(f"rms_norm eps {eps} must be finite and >= 0")
    return int(x.size) // d, d


def _record(geometry: Any, x: Any, w: Any, y: Any, rows: int, d: int, **kw: Any) -> LaunchRecord:
    reads = (x,) if w is None else (x, w)
    per_elem = 3 if w is None else 4
    return LaunchRecord.of(
        KERNEL,
        geometry,
        reads=reads,
        writes=(y,),
        flops=per_elem * rows * d,
        rows=rows,
        cols=d,
        **kw,
    )


def ref_rms_norm_f32(
    x: np.ndarray, w: np.ndarray | None, eps: float
) -> tuple[np.ndarray, LaunchRecord]:
    """RMS norm of every row of the last axis (NumPy reference).

    Args:
        x: float32 [..., d], C-contiguous, non-empty.
        w: float32 [d] or None (no weight).
        eps: added to the mean square, >= 0.

    Returns:
        (y, record): y float32 with x's shape.

    Raises:
        KernelInputError: wrong dtype/contiguity, empty x, weight length != d, bad eps.
    """
    rows, d = _check(x, w, eps)
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(ms + float(eps))).astype(np.float32)
    y = x * scale
    if w is not None:
        y *= w
    return y, _record(None, x, w, y, rows, d)


def block_for(d: int) -> int:
    """Threads per row: enough warps that each thread loads about ROW_ELEMS_PER_THREAD values
    (one warp for head_dim rows of <= 128, 224 threads for 896, 1024 from 4096 up)."""
    warps = -(-d // (32 * ROW_ELEMS_PER_THREAD))
    return 32 * max(1, min(32, warps))


def geometry(rows: int, d: int) -> Geometry:
    """One block per row: rows * block threads; grid_1d clamps at 2^31 - 1 blocks and the
    kernel strides over the rows past that."""
    block = block_for(d)
    return grid_1d(rows * block, block)


def launch_rms_norm_f32(x: Any, w: Any, eps: float, out: Any = None) -> tuple[Any, LaunchRecord]:
    """RMS norm on the device: one block per row, warp-shuffle reductions (see module doc)."""
    from tracekit.kernels.cuda import NO_STAMP, kernel, launch

    rows, d = _check(x, w, eps)
    require_device(x, "rms_norm x")
    if w is not None:
        require_device(w, "rms_norm weight")
    y = device_out(out, tuple(x.shape), np.float32, "rms_norm out")
    geo = geometry(rows, d)
    w_arg = w if w is not None else x  # never read when has_w == 0
    launch(
        kernel(FAMILY, KERNEL),
        geo.grid,
        geo.block,
        (
            x,
            w_arg,
            y,
            np.int64(rows),
            np.int32(d),
            np.float64(eps),
            np.int32(w is not None),
            NO_STAMP,
        ),  # fmt: skip
    )
    working = min(rows, geo.grid[0]) * min(geo.block[0], d)
    return y, _record(geo, x, w, y, rows, d, threads_working=working)


cuda.defines(FAMILY, kernel_defines)

# -- the op declaration (tracekit/kernels/registry.py) ----------------------------------------
# flops counted by _record: 3 per element without a weight, 4 with one
declare([KernelOp(KERNEL, FAMILY, ref_rms_norm_f32, launch_rms_norm_f32)])

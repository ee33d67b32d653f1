"""Row reductions over [rows, n] float32: ``softmax_f32`` and ``argmax_f32``.

softmax: y = exp(x - max) / sum(exp(x - max)) per row. exp in f32, the sum accumulated in
float64 and rounded to f32 once (reference and kernel alike), then one f32 division.
A row holding NaN or +inf gives NaN throughout (as the formula does). Flops per element:
5 (max compare, subtract, exp, add, divide).

argmax: int32 [rows], the FIRST index of the row maximum; NaN is ignored (never the maximum);
an all-NaN row gives 0. A row of -inf (and NaN) gives the first non-NaN index. 1 flop
(one compare) per element.

The CUDA kernels run one block per row (grid-stride over rows past the grid limit), each
thread striding over the row, with warp-shuffle reductions and one shared-memory hop between
warps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError, require_array, require_nonempty
from tracekit.kernels.elementwise import device_out, require_device
from tracekit.kernels.launch import Geometry, LaunchRecord, grid_1d
from tracekit.kernels.registry import KernelOp, declare, flops

FAMILY = "reduce"
#: argmax returns int32 indices, so a row holds at most 2^31 - 1 elements.
MAX_ROW = 2**31 - 1


def _check(x: Any, op: str) -> tuple[int, int]:
    require_array(x, np.float32, f"{op} x", ndim=2)
    require_nonempty(x, f"{op} x")
    rows, n = (int(s) for s in x.shape)
    if n > MAX_ROW:
        raise KernelInputError(f"{op} row length {n} exceeds {MAX_ROW} (int32 indices)")
    return rows, n


def _record(name: str, geo: Geometry | None, x: Any, y: Any, **extra: Any) -> LaunchRecord:
    """A row op's record (the reference's, geometry None, and the launch's): x [rows, n] read,
    y written."""
    rows, n = (int(v) for v in x.shape)
    return LaunchRecord.of(name, geo, reads=(x,), writes=(y,), flops=flops(name, x.size),
                           rows=rows, cols=n, **extra)  # fmt: skip


def ref_softmax_f32(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """Row-wise softmax of float32 [rows, n] (max-subtracted; NumPy reference).

    Raises:
        KernelInputError: wrong dtype/rank/contiguity or empty x.
    """
    rows, n = _check(x, "softmax_f32")
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        s = e.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        y = e / s
    return y, _record("softmax_f32", None, x, y)


def ref_argmax_f32(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """First index of each row's maximum, NaN ignored, all-NaN row -> 0 (int32 [rows]).

    Raises:
        KernelInputError: wrong dtype/rank/contiguity, empty x, or a row longer than 2^31 - 1.
    """
    rows, n = _check(x, "argmax_f32")
    nan = np.isnan(x)
    idx = np.argmax(np.where(nan, -np.inf, x), axis=1)
    # Rows whose best is -inf: argmax picked index 0, which may be a NaN; the answer is then the
    # first non-NaN element (every non-NaN one is -inf), or 0 for an all-NaN row.
    best = x[np.arange(rows), idx]
    low = np.isneginf(best) | np.isnan(best)
    if low.any():
        idx[low] = np.argmax(~nan[low], axis=1)
    out = idx.astype(np.int32)
    return out, _record("argmax_f32", None, x, out)


def block_for(n: int) -> int:
    """One warp for short rows, 256 threads otherwise."""
    return 32 if n <= 256 else 256


def geometry(rows: int, n: int) -> Geometry:
    """One block per row (grid_1d over rows * block threads: clamped, grid-stride over rows)."""
    block = block_for(n)
    return grid_1d(rows * block, block)


def _launch(name: str, x: Any, out: Any, out_shape: tuple[int, ...], out_dtype: Any):
    from tracekit.kernels.cuda import kernel, launch

    rows, n = _check(x, name)
    require_device(x, f"{name} x")
    y = device_out(out, out_shape, out_dtype, f"{name} out")
    geo = geometry(rows, n)
    launch(kernel(FAMILY, name), geo.grid, geo.block, (x, y, np.int64(rows), np.int64(n)))
    return y, _record(
        name, geo, x, y, threads_working=min(rows, geo.grid[0]) * min(geo.block[0], n)
    )


def launch_softmax_f32(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """Row-wise softmax on the device (see module doc)."""
    return _launch("softmax_f32", x, out, tuple(x.shape), np.float32)


def launch_argmax_f32(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """Row-wise argmax on the device -> int32 [rows] (see module doc)."""
    return _launch("argmax_f32", x, out, (int(x.shape[0]),) if x.ndim else (), np.int32)


# -- the op declarations (tracekit/kernels/registry.py) ---------------------------------------
declare(
    [
        # max, subtract, exp, sum, divide per element
        KernelOp("softmax_f32", FAMILY, ref_softmax_f32, launch_softmax_f32, flops=5),
        # one compare per element
        KernelOp("argmax_f32", FAMILY, ref_argmax_f32, launch_argmax_f32, flops=1),
    ]
)

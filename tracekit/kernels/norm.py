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

``add_rms_norm_f32(a, b, w, eps)`` is a residual add and the norm that reads it in one launch
(the graph's ``add_rms_norm`` node): the sum ``a + b`` (add_f32's one f32 add) and its norm,
computed by the same template as ``rms_norm_f32`` with the same geometry, so both are bit for
bit the pair add_f32 then rms_norm_f32. They are written into ONE output [2, *a.shape], plane 0
the sum and plane 1 the normed rows, so that each part is contiguous for any row count (the
graph's ``plane`` views read them without a copy). Flops per element: add_f32's 1 + the norm's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.kernels import cuda
from tracekit.kernels.checks import KernelInputError, require_array, require_nonempty
from tracekit.kernels.elementwise import device_out, require_device
from tracekit.kernels.launch import Geometry, LaunchRecord, grid_1d
from tracekit.kernels.registry import KernelOp, declare, flops

FAMILY = "norm"
KERNEL = "rms_norm_f32"
ADD_KERNEL = "add_rms_norm_f32"
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


def _norm_flops(w: Any, elements: int) -> int:
    return (3 if w is None else 4) * elements  # square, add, * scale (, * w)


def _record(geometry: Any, x: Any, w: Any, y: Any, rows: int, d: int, **kw: Any) -> LaunchRecord:
    reads = (x,) if w is None else (x, w)
    return LaunchRecord.of(
        KERNEL,
        geometry,
        reads=reads,
        writes=(y,),
        flops=_norm_flops(w, rows * d),
        rows=rows,
        cols=d,
        **kw,
    )


def _normed(x: np.ndarray, w: np.ndarray | None, eps: float, out: np.ndarray) -> None:
    # the reference's arithmetic (ref_rms_norm_f32's and ref_add_rms_norm_f32's) into out
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(ms + float(eps))).astype(np.float32)
    np.multiply(x, scale, out=out)
    if w is not None:
        out *= w


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
    y = np.empty_like(x)
    _normed(x, w, eps, y)
    return y, _record(None, x, w, y, rows, d)


def _check_add(a: Any, b: Any, w: Any, eps: float) -> tuple[int, int]:
    """Returns (rows, d) of the sum a + b."""
    require_array(a, np.float32, "add_rms_norm a")
    require_array(b, np.float32, "add_rms_norm b")
    require_nonempty(a, "add_rms_norm a")
    if tuple(a.shape) != tuple(b.shape):
        raise KernelInputError(
            f"add_rms_norm a {tuple(a.shape)} and b {tuple(b.shape)} are not of one shape"
        )
    d = int(a.shape[-1])
    if w is not None:
        require_array(w, np.float32, "add_rms_norm weight", ndim=1)
        if int(w.size) != d:
            raise KernelInputError(
                f"add_rms_norm weight length {int(w.size)} is not the row length {d} of a + b "
                f"{tuple(a.shape)}"
            )
    if not (np.isfinite(eps) and eps >= 0):
        raise KernelInputError(f"add_rms_norm eps {eps} must be finite and >= 0")
    return int(a.size) // d, d


def _add_record(
    geometry: Any, a: Any, b: Any, w: Any, out: Any, rows: int, d: int, **kw: Any
) -> LaunchRecord:
    n = rows * d
    return LaunchRecord.of(
        ADD_KERNEL,
        geometry,
        reads=(a, b) if w is None else (a, b, w),
        writes=(out,),
        flops=flops("add_f32", n) + _norm_flops(w, n),
        rows=rows,
        cols=d,
        **kw,
    )


def ref_add_rms_norm_f32(
    a: np.ndarray, b: np.ndarray, w: np.ndarray | None, eps: float
) -> tuple[np.ndarray, LaunchRecord]:
    """The residual sum a + b and its RMS norm, as two planes of one array (NumPy reference).

    Bit for bit ``ref_add_f32(a, b)`` then ``ref_rms_norm_f32`` of that sum: the same f32 add,
    then the norm's own arithmetic on the sum.

    Args:
        a, b: float32 [..., d] of one shape, C-contiguous, non-empty.
        w: float32 [d] or None (no weight).
        eps: added to the mean square, >= 0.

    Returns:
        (out, record): out float32 [2, *a.shape], ``out[0]`` = a + b, ``out[1]`` its norm.

    Raises:
        KernelInputError: wrong dtype/contiguity, empty a, a and b of two shapes, weight length
            != d, bad eps.
    """
    rows, d = _check_add(a, b, w, eps)
    out = np.empty((2, *a.shape), np.float32)
    np.add(a, b, out=out[0])
    _normed(out[0], w, eps, out[1])
    return out, _add_record(None, a, b, w, out, rows, d)


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
    rows, d = _check(x, w, eps)
    require_device(x, "rms_norm x")
    if w is not None:
        require_device(w, "rms_norm weight")
    y = device_out(out, tuple(x.shape), np.float32, "rms_norm out")
    geo, working = _launch_rows(KERNEL, (x,), w, y, rows, d, eps)
    return y, _record(geo, x, w, y, rows, d, threads_working=working)


def _launch_rows(
    name: str, inputs: tuple[Any, ...], w: Any, y: Any, rows: int, d: int, eps: float
) -> tuple[Any, int]:
    """Launch ``name`` (rms_norm_f32 or add_rms_norm_f32: the inputs, the weight, y, then the
    same scalars) with one block per row; returns (its geometry, the threads working)."""
    from tracekit.kernels.cuda import NO_STAMP, kernel, launch

    geo = geometry(rows, d)
    w_arg = w if w is not None else inputs[0]  # never read when has_w == 0
    args = (*inputs, w_arg, y, np.int64(rows), np.int32(d), np.float64(eps),
            np.int32(w is not None), NO_STAMP)  # fmt: skip
    launch(kernel(FAMILY, name), geo.grid, geo.block, args)
    return geo, min(rows, geo.grid[0]) * min(geo.block[0], d)


def _span(x: Any) -> tuple[int, int]:
    p = int(x.data.ptr)
    return p, p + int(x.nbytes)


def launch_add_rms_norm_f32(
    a: Any, b: Any, w: Any, eps: float, out: Any = None
) -> tuple[Any, LaunchRecord]:
    """a + b and its RMS norm on the device, into the planes of one [2, *a.shape] output: one
    ``add_rms_norm_f32`` launch with rms_norm_f32's geometry (one block per row).

    Raises:
        KernelInputError: as :func:`ref_add_rms_norm_f32`; an input or out not on the device;
            out of the wrong shape or dtype, or overlapping a, b or w (a row's sum would be
            written over values other blocks have yet to read).
    """
    rows, d = _check_add(a, b, w, eps)
    require_device(a, "add_rms_norm a")
    require_device(b, "add_rms_norm b")
    if w is not None:
        require_device(w, "add_rms_norm weight")
    y = device_out(out, (2, *a.shape), np.float32, "add_rms_norm out")
    y0, y1 = _span(y)
    for what, x in (("a", a), ("b", b), ("weight", w)):
        if x is None:
            continue
        x0, x1 = _span(x)
        if x0 < y1 and y0 < x1:
            raise KernelInputError(
                f"add_rms_norm out [{y0:#x}, {y1:#x}) overlaps {what} [{x0:#x}, {x1:#x})"
            )
    geo, working = _launch_rows(ADD_KERNEL, (a, b), w, y, rows, d, eps)
    return y, _add_record(geo, a, b, w, y, rows, d, threads_working=working)


cuda.defines(FAMILY, kernel_defines)

# -- the op declaration (tracekit/kernels/registry.py) ----------------------------------------
# flops counted by _record: 3 per element without a weight, 4 with one; _add_record: add_f32's
# declared 1 more
declare(
    [
        KernelOp(KERNEL, FAMILY, ref_rms_norm_f32, launch_rms_norm_f32),
        KernelOp(ADD_KERNEL, FAMILY, ref_add_rms_norm_f32, launch_add_rms_norm_f32),
    ]
)

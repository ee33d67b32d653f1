"""Per-node tensor statistics: summary numbers, a histogram and a layout-keeping heatmap.

On the GPU (a CuPy array) the statistics are computed on the device by the kernels of
``stats.cu``: one fused single-pass reduction (min, max, sum, sum of squares and the NaN/±Inf/
zero counts, finished by the last block to arrive, so one launch), then one histogram and one
heatmap launch; only the small results (a few dozen numbers, ``bins`` counts, ``rows*cols`` cell
sums) cross to the host. On the CPU (a NumPy array) the same quantities are computed with the
same formulas, so both backends give the same structure and, to rounding, the same values:
min/max and the counts exactly, the histogram exactly (bin index from the same float64
formula), sums to float64 rounding, heatmap codes to ±1.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError

#: Most histogram bins a GPU block keeps in shared memory (8 B each).
MAX_BINS = 4096
#: Code of a heatmap cell whose source block held a NaN or an Inf.
BAD_CODE = 255
#: Codes 0..254 map linearly onto [lo, hi].
CODE_MAX = 254
DEFAULT_AXES = ("rows", "cols")


# -- helpers shared by both paths -----------------------------------------------------------
def _num(v: float) -> float | None:
    """A JSON-safe float: None where the value is not finite (allow_nan=False)."""
    v = float(v)
    return v if math.isfinite(v) else None


def _view_2d(shape: tuple[int, ...]) -> tuple[int, int]:
    """The heatmap's source view: [leading dims flattened][last dim]; a scalar is [1][1]."""
    if not shape:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _splits(n: int, parts: int) -> np.ndarray:
    """Start offsets of ``parts`` near-equal pieces of ``n`` (+ the end): piece i is
    ``[i*n // parts, (i+1)*n // parts)``, so sizes differ by at most one. The GPU kernel uses
    the same integer formula."""
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


def _hist_range(lo: float, hi: float) -> tuple[float, float]:
    """The histogram's [lo, hi]; a constant tensor gets a window around its value."""
    if hi > lo:
        return lo, hi
    pad = 0.5 * max(1.0, abs(lo))
    return lo - pad, hi + pad


def _hist_scale(lo: float, hi: float, bins: int) -> float:
    """bins per unit value: bin = floor((v - lo) * scale), clamped to [0, bins-1]."""
    return bins / (hi - lo)


def encode_heatmap(cells: np.ndarray) -> tuple[float | None, float | None, str]:
    """Encode a grid of cell means (NaN marks a non-finite cell) as (lo, hi, base64 codes).

    Codes 0..254 map linearly onto [lo, hi] (lo/hi = min/max of the finite cells; a constant
    grid encodes as all 0), 255 marks a non-finite cell. lo and hi are None when no cell is
    finite.
    """
    cells = np.asarray(cells, dtype=np.float64)
    finite = np.isfinite(cells)
    codes = np.full(cells.shape, BAD_CODE, dtype=np.uint8)
    if not finite.any():
        return None, None, base64.b64encode(codes.tobytes()).decode("ascii")
    lo, hi = float(cells[finite].min()), float(cells[finite].max())
    if hi > lo:
        q = np.rint((cells[finite] - lo) * (CODE_MAX / (hi - lo)))
        codes[finite] = np.clip(q, 0, CODE_MAX).astype(np.uint8)
    else:
        codes[finite] = 0
    return lo, hi, base64.b64encode(codes.tobytes()).decode("ascii")


def decode_heatmap(heatmap: dict[str, Any]) -> np.ndarray:
    """The float64 [rows, cols] grid a ``heatmap`` dict encodes (NaN where the code is 255).

    Each decoded value is within (hi - lo) / 508 of the cell mean it encodes.

    Raises:
        ValueError: the codes do not hold ``rows * cols`` bytes.
    """
    rows, cols = int(heatmap["rows"]), int(heatmap["cols"])
    codes = np.frombuffer(base64.b64decode(heatmap["codes"]), dtype=np.uint8)
    if codes.size != rows * cols:
        raise ValueError(
            f"heatmap codes hold {codes.size} bytes, expected rows*cols = {rows * cols}"
        )
    codes = codes.reshape(rows, cols)
    out = np.full((rows, cols), np.nan)
    ok = codes != BAD_CODE
    lo, hi = heatmap["lo"], heatmap["hi"]
    if ok.any():
        out[ok] = lo + codes[ok].astype(np.float64) * ((hi - lo) / CODE_MAX)
    return out


def _check_args(x: Any, axes: Any, bins: int, heat_rows: int, heat_cols: int) -> tuple[str, str]:
    if not 1 <= bins <= MAX_BINS:
        raise KernelInputError(f"histogram bins {bins} must be in [1, {MAX_BINS}]")
    if not (1 <= heat_rows <= 65535 and 1 <= heat_cols <= 65535):
        raise KernelInputError(
            f"heatmap grid {heat_rows}x{heat_cols} must be between 1x1 and 65535x65535"
        )
    if np.dtype(x.dtype).kind not in "fiub":
        raise KernelInputError(
            f"statistics need a numeric tensor, got dtype {np.dtype(x.dtype).name}"
        )
    axes = DEFAULT_AXES if axes is None else tuple(axes)
    if len(axes) != 2 or not all(isinstance(a, str) for a in axes):
        raise KernelInputError(f"heatmap axes {axes!r} must be two names (rows, cols)")
    return axes  # type: ignore[return-value]


def _assemble(
    shape: tuple[int, ...],
    axes: tuple[str, str],
    mn: float,
    mx: float,
    total: float,
    total_sq: float,
    n_finite: int,
    nan: int,
    pinf: int,
    ninf: int,
    zeros: int,
    hist_lo: float | None,
    hist_hi: float | None,
    hist_counts: np.ndarray,
    cells: np.ndarray,
) -> dict[str, Any]:
    count = math.prod(shape)
    if n_finite:
        mean = total / n_finite
        std = math.sqrt(max(total_sq / n_finite - mean * mean, 0.0))
        summary = dict(
            min=_num(mn), max=_num(mx), mean=_num(mean), std=_num(std), absmax=_num(max(-mn, mx))
        )
    else:
        summary = dict(min=None, max=None, mean=None, std=None, absmax=None)
    if hist_lo is None:
        edges: list[float] = []
        counts: list[int] = []
    else:
        edges = [float(e) for e in np.linspace(hist_lo, hist_hi, hist_counts.size + 1)]
        counts = [int(c) for c in hist_counts]
    lo, hi, codes = encode_heatmap(cells)
    return dict(
        count=int(count),
        **summary,
        nan=int(nan),
        pos_inf=int(pinf),
        neg_inf=int(ninf),
        zeros=int(zeros),
        hist=dict(edges=edges, counts=counts),
        heatmap=dict(
            rows=int(cells.shape[0]),
            cols=int(cells.shape[1]),
            axes=list(axes),
            source_shape=[int(s) for s in shape],
            lo=lo,
            hi=hi,
            codes=codes,
        ),
    )


# -- the public entry ------------------------------------------------------------------------
def tensor_stats(
    x: Any,
    axes: tuple[str, str] | None = None,
    bins: int = 32,
    heat_rows: int = 32,
    heat_cols: int = 64,
) -> dict[str, Any]:
    """Statistics of one tensor (NumPy or CuPy, any numeric dtype, any shape), JSON-ready.

    Args:
        x: the tensor. A CuPy array is reduced on its device; only small results are copied.
        axes: names of the heatmap's two axes, e.g. ``("tokens", "features")``;
            default ``("rows", "cols")``.
        bins: histogram bins (1 .. 4096).
        heat_rows, heat_cols: the largest heatmap grid; the source view is smaller in a
            dimension, that dimension is kept at full resolution.

    Returns:
        A dict of plain Python types (``docs/trace-format.md``, ``stats``):

        - ``count`` (int): elements in the tensor (finite or not).
        - ``min``, ``max``, ``mean``, ``std`` (population, ddof=0), ``absmax`` (float or None):
          over the finite values; None when there is none.
        - ``nan``, ``pos_inf``, ``neg_inf``, ``zeros`` (int): counts (±0 both count as zero).
        - ``hist``: ``edges`` (bins+1 floats) and ``counts`` (bins ints) of the finite values on
          ``[min, max]`` (a constant tensor gets the window value ± max(0.5, |value|/2)); value v
          falls in bin ``floor((v - edges[0]) * bins / (edges[-1] - edges[0]))``, the maximum in
          the last bin. Both lists are empty when no value is finite.
        - ``heatmap``: the tensor viewed as 2-D, [leading dims flattened][last dim] (e.g.
          [tokens][features]), cut into ``rows`` x ``cols`` near-equal blocks (rows =
          min(heat_rows, source rows), cols likewise; block i of n source rows over R cells
          covers ``[i*n//R, (i+1)*n//R)``); each cell is the mean of its block. Keys: ``rows``,
          ``cols``, ``axes`` (2 names), ``source_shape`` (the tensor's shape), ``lo``, ``hi``
          (min/max of the finite cell means, None if none), ``codes`` (base64 of rows*cols
          uint8, row-major: 0..254 map linearly onto [lo, hi], 255 = the block held a NaN or
          an Inf). :func:`decode_heatmap` inverts it. An empty tensor has a 0 x 0 heatmap.

    Raises:
        KernelInputError: a non-numeric dtype, bins outside [1, 4096], a grid under 1x1, or
            axes that are not two names.
    """
    axes = _check_args(x, axes, bins, heat_rows, heat_cols)
    from tracekit.kernels.cuda import is_device_array

    if is_device_array(x):
        return _stats_cupy(x, axes, bins, heat_rows, heat_cols)
    return _stats_numpy(np.asarray(x), axes, bins, heat_rows, heat_cols)


def _grid(shape: tuple[int, ...], heat_rows: int, heat_cols: int) -> tuple[int, int, int, int]:
    n_rows, n_cols = _view_2d(shape)
    if n_rows * n_cols == 0:
        return n_rows, n_cols, 0, 0
    return n_rows, n_cols, min(heat_rows, n_rows), min(heat_cols, n_cols)


# -- NumPy ----------------------------------------------------------------------------------
def _stats_numpy(
    x: np.ndarray, axes: tuple[str, str], bins: int, heat_rows: int, heat_cols: int
) -> dict[str, Any]:
    shape = tuple(int(s) for s in x.shape)
    n_rows, n_cols, R, C = _grid(shape, heat_rows, heat_cols)
    a = np.asarray(x, dtype=np.float64).reshape(n_rows, n_cols)
    finite = np.isfinite(a)
    nan = int(np.isnan(a).sum())
    pinf = int(np.isposinf(a).sum())
    ninf = int(np.isneginf(a).sum())
    zeros = int((a == 0).sum())
    v = a[finite]
    n_finite = int(v.size)
    if n_finite:
        mn, mx = float(v.min()), float(v.max())
        total, total_sq = float(v.sum()), float(np.dot(v, v))
        hlo, hhi = _hist_range(mn, mx)
        idx = np.floor((v - hlo) * _hist_scale(hlo, hhi, bins))
        counts = np.bincount(np.clip(idx, 0, bins - 1).astype(np.int64), minlength=bins)
    else:
        mn = mx = total = total_sq = 0.0
        hlo = hhi = None
        counts = np.zeros(0, dtype=np.int64)
    if R:
        rs, cs = _splits(n_rows, R), _splits(n_cols, C)
        clean = np.where(finite, a, 0.0)
        sums = np.add.reduceat(np.add.reduceat(clean, rs[:-1], axis=0), cs[:-1], axis=1)
        nf = np.add.reduceat(~finite, rs[:-1], axis=0, dtype=np.int64)
        bad = np.add.reduceat(nf, cs[:-1], axis=1)
        sizes = np.outer(np.diff(rs), np.diff(cs))
        cells = np.where(bad > 0, np.nan, sums / sizes)
    else:
        cells = np.zeros((0, 0))
    return _assemble(
        shape, axes, mn, mx, total, total_sq, n_finite, nan, pinf, ninf, zeros, hlo, hhi, counts,
        cells,
    )  # fmt: skip


# -- CuPy -----------------------------------------------------------------------------------
#: dtype -> kernel suffix of stats.cu; other dtypes are converted to float64 first (exact for
#: every int32 and smaller, the values the graph produces).
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}
#: Reduction launch: threads per block, and at most this many blocks (the last block to finish
#: reduces the per-block partials, so their count bounds its work).
_RED_BLOCK = 256
_RED_MAX_BLOCKS = 1024
_HIST_BLOCK = 256
_HEAT_BLOCK = 256


def _stats_cupy(x: Any, axes: tuple[str, str], bins: int, heat_rows: int, heat_cols: int) -> dict:
    import cupy

    from tracekit.kernels.cuda import kernel
    from tracekit.kernels.launch import ceil_div

    shape = tuple(int(s) for s in x.shape)
    n_rows, n_cols, R, C = _grid(shape, heat_rows, heat_cols)
    n = n_rows * n_cols
    if np.dtype(x.dtype) not in _SUFFIX:
        x = x.astype(cupy.float64)
    x = cupy.ascontiguousarray(x)  # RawKernel ignores strides
    sfx = _SUFFIX[np.dtype(x.dtype)]
    n64 = np.int64(n)

    # 1. one fused reduction: [min, max, sum, sumsq] (f64) + [finite, nan, +inf, -inf, zeros].
    n_blocks = max(1, min(ceil_div(n, _RED_BLOCK), _RED_MAX_BLOCKS))
    part_d = cupy.empty(n_blocks * 4, dtype=cupy.float64)
    part_u = cupy.empty(n_blocks * 5, dtype=cupy.uint64)
    res_d = cupy.empty(4, dtype=cupy.float64)
    res_u = cupy.empty(5, dtype=cupy.uint64)
    done = cupy.zeros(1, dtype=cupy.uint32)
    kernel("stats", f"stats_reduce_{sfx}")(
        (n_blocks, 1, 1), (_RED_BLOCK, 1, 1), (x, n64, part_d, part_u, res_d, res_u, done)
    )
    mn, mx, total, total_sq = (float(v) for v in res_d.get())
    n_finite, nan, pinf, ninf, zeros = (int(v) for v in res_u.get())

    # 2. histogram of the finite values on [min, max] (needs them: one small copy above).
    if n_finite:
        hlo, hhi = _hist_range(mn, mx)
        hist = cupy.zeros(bins, dtype=cupy.uint64)
        hb = max(1, min(ceil_div(n, _HIST_BLOCK), _RED_MAX_BLOCKS))
        kernel("stats", f"stats_hist_{sfx}")(
            (hb, 1, 1),
            (_HIST_BLOCK, 1, 1),
            (
                x,
                n64,
                np.float64(hlo),
                np.float64(_hist_scale(hlo, hhi, bins)),
                np.int32(bins),
                hist,
            ),
            shared_mem=bins * 8,
        )
    else:
        hlo = hhi = None
        hist = cupy.zeros(0, dtype=cupy.uint64)

    # 3. heatmap: one block per cell, sums (f64) and non-finite counts of its source block.
    if R:
        sums = cupy.empty(R * C, dtype=cupy.float64)
        bad = cupy.empty(R * C, dtype=cupy.uint64)
        kernel("stats", f"stats_heat_{sfx}")(
            (C, R, 1),
            (_HEAT_BLOCK, 1, 1),
            (x, np.int64(n_rows), np.int64(n_cols), np.int32(R), np.int32(C), sums, bad),
        )
        rs, cs = _splits(n_rows, R), _splits(n_cols, C)
        sizes = np.outer(np.diff(rs), np.diff(cs))
        s, b = sums.get().reshape(R, C), bad.get().reshape(R, C)
        cells = np.where(b > 0, np.nan, s / sizes)
    else:
        cells = np.zeros((0, 0))
    return _assemble(
        shape, axes, mn, mx, total, total_sq, n_finite, nan, pinf, ninf, zeros, hlo, hhi,
        hist.get(), cells,
    )  # fmt: skip

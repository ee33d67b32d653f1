"""CPU tests of softmax_f32 / argmax_f32: references vs float64 / loop formulas, gates."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels import reduce
from tracekit.kernels.checks import KernelInputError

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("shape", [(1, 1), (3, 31), (45, 65), (2, 151936)])
def test_softmax_against_float64(shape: tuple[int, int]) -> None:
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    y, rec = reduce.ref_softmax_f32(x)
    x64 = x.astype(np.float64)
    d = x64 - x64.max(axis=1, keepdims=True)
    e = np.exp(d)
    # The f32 subtraction x - max rounds by up to |d| * 2^-24, which exp turns into that much
    # relative error (|d| < ~40 here: 2.4e-6); plus f32 exp and one division (~1e-6).
    rtol = 1.5e-6 + float(-d.min()) * 2.0**-24
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(y.sum(axis=1, dtype=np.float64), 1.0, rtol=1e-5)
    assert rec.kernel == "softmax_f32" and rec.bytes_read == x.nbytes == rec.bytes_written
    assert rec.flops == 5 * x.size


def test_softmax_is_max_subtracted_and_nan_propagates() -> None:
    x = np.float32([[1e4, 1e4 + 1, 1e4 - 1], [0, np.nan, 1], [-np.inf, 0, 0]])
    y, _ = reduce.ref_softmax_f32(x)
    e = np.exp(np.float64([-1, 0, -2]))
    np.testing.assert_allclose(y[0], e / e.sum(), rtol=2e-6)  # no overflow at 1e4
    assert np.isnan(y[1]).all()
    np.testing.assert_array_equal(y[2], [0, 0.5, 0.5])


def _loop_argmax(row: np.ndarray) -> int:
    best, at = None, 0
    for i, v in enumerate(row.tolist()):
        if v != v:  # NaN is never the maximum
            continue
        if best is None or v > best:
            best, at = v, i
    return at


def test_argmax_first_index_nan_ignored() -> None:
    x = np.float32(
        [
            [1, 5, 5, 2],  # tie: first index
            [np.nan, 3, np.nan, 3],  # NaN ignored
            [np.nan, np.nan, np.nan, np.nan],  # all NaN: 0
            [np.nan, -np.inf, -np.inf, np.nan],  # only -inf left: the first non-NaN
            [-np.inf, -np.inf, -np.inf, -np.inf],
            [np.inf, np.nan, np.inf, 0],
        ]
    )
    idx, rec = reduce.ref_argmax_f32(x)
    assert idx.dtype == np.int32 and idx.tolist() == [1, 1, 0, 1, 0, 0]
    assert rec.bytes_written == 4 * x.shape[0] and rec.bytes_read == x.nbytes


def test_argmax_random_with_nans_and_ties() -> None:
    x = RNG.integers(-4, 5, size=(200, 33)).astype(np.float32)
    x[RNG.random(x.shape) < 0.3] = np.nan
    x[RNG.random(x.shape) < 0.1] = -np.inf
    x[:5] = np.nan
    idx, _ = reduce.ref_argmax_f32(x)
    assert idx.tolist() == [_loop_argmax(r) for r in x]


@pytest.mark.parametrize("fn", [reduce.ref_softmax_f32, reduce.ref_argmax_f32])
def test_reduce_gates(fn) -> None:
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    with pytest.raises(KernelInputError, match=r"dtype float64, expected float32"):
        fn(x.astype(np.float64))
    with pytest.raises(KernelInputError, match=r"expected 2-D"):
        fn(x.ravel())
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        fn(x.T)
    with pytest.raises(KernelInputError, match=r"is empty"):
        fn(x[:, :0])
    with pytest.raises(KernelInputError, match=r"expected a cupy array"):
        reduce.launch_softmax_f32(x)


@pytest.mark.parametrize(
    ("rows", "n", "grid", "block"),
    [(1, 1, 1, 32), (70000, 7, 70000, 32), (4, 151936, 4, 256), (1, 257, 1, 256)],
)
def test_reduce_geometry_one_block_per_row(rows: int, n: int, grid: int, block: int) -> None:
    geo = reduce.geometry(rows, n)
    assert geo.grid == (grid, 1, 1) and geo.block == (block, 1, 1) and not geo.strided

"""CPU tests of rms_norm_f32: the reference vs a float64 formula, gates, geometry."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels import norm
from tracekit.kernels.checks import KernelInputError

RNG = np.random.default_rng(11)


def _f64_rms_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    return y if w is None else y * w.astype(np.float64)


@pytest.mark.parametrize(
    ("shape", "with_w"),
    [((1, 1), True), ((7, 31), True), ((30, 896), True), ((5, 4, 64), True), ((9, 257), False)],
)
def test_rms_norm_against_float64(shape: tuple[int, ...], with_w: bool) -> None:
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    w = (RNG.standard_normal(shape[-1])).astype(np.float32) if with_w else None
    y, rec = norm.ref_rms_norm_f32(x, w, 1e-6)
    # f64 sum of squares, then three f32 roundings (scale, x*scale, *w): <= ~2 ulp of 2^-23.
    np.testing.assert_allclose(y, _f64_rms_norm(x, w, 1e-6), rtol=1e-6, atol=1e-30)
    assert y.shape == x.shape and y.dtype == np.float32
    rows, d = x.size // shape[-1], shape[-1]
    assert rec.kernel == "rms_norm_f32" and rec.extra == {"rows": rows, "cols": d}
    assert rec.bytes_read == x.nbytes + (w.nbytes if with_w else 0)
    assert rec.bytes_written == y.nbytes and rec.flops == (4 if with_w else 3) * x.size


def test_rms_norm_eps_dominates_a_zero_row() -> None:
    x = np.zeros((2, 8), np.float32)
    x[1] = 3.0
    y, _ = norm.ref_rms_norm_f32(x, None, 1e-5)
    assert not y[0].any()  # 0 / sqrt(eps): no NaN
    np.testing.assert_allclose(y[1], 3.0 / np.sqrt(9.0 + 1e-5), rtol=1e-7)


def test_rms_norm_per_head_equals_flattened_rows() -> None:
    x = RNG.standard_normal((6, 8, 128)).astype(np.float32)
    w = RNG.standard_normal(128).astype(np.float32)
    a, _ = norm.ref_rms_norm_f32(x, w, 1e-6)
    b, _ = norm.ref_rms_norm_f32(x.reshape(48, 128), w, 1e-6)
    np.testing.assert_array_equal(a.reshape(48, 128), b)


def test_rms_norm_gates() -> None:
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    with pytest.raises(KernelInputError, match=r"weight length 15 is not the row length 16"):
        norm.ref_rms_norm_f32(x, np.ones(15, np.float32), 1e-6)
    with pytest.raises(KernelInputError, match=r"dtype float64, expected float32"):
        norm.ref_rms_norm_f32(x.astype(np.float64), None, 1e-6)
    with pytest.raises(KernelInputError, match=r"weight has dtype float16"):
        norm.ref_rms_norm_f32(x, np.ones(16, np.float16), 1e-6)
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        norm.ref_rms_norm_f32(x[:, ::2], None, 1e-6)
    with pytest.raises(KernelInputError, match=r"is empty"):
        norm.ref_rms_norm_f32(x[:0], None, 1e-6)
    with pytest.raises(KernelInputError, match=r"eps -1.0 must be finite and >= 0"):
        norm.ref_rms_norm_f32(x, None, -1.0)
    with pytest.raises(KernelInputError, match=r"expected a cupy array"):
        norm.launch_rms_norm_f32(x, None, 1e-6)


@pytest.mark.parametrize(
    ("rows", "d", "grid", "block"),
    [
        (1, 1, 1, 32),
        (30, 896, 30, 224),  # 4 values per thread: 7 warps
        (70000, 64, 70000, 32),
        (3, 4096, 3, 1024),
        (2, 2048, 2, 512),
        (4, 129, 4, 64),
        (2**31 + 5, 8, 2**31 - 1, 32),
    ],
)
def test_rms_norm_geometry_one_block_per_row(rows: int, d: int, grid: int, block: int) -> None:
    geo = norm.geometry(rows, d)
    assert geo.grid == (grid, 1, 1) and geo.block == (block, 1, 1)
    assert geo.strided is (rows > 2**31 - 1)  # past the x limit the kernel strides over rows

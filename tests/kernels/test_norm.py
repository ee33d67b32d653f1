"""CPU tests of rms_norm_f32 and add_rms_norm_f32: the references (vs a float64 formula; the
fused one vs add_f32 then rms_norm_f32, bit for bit), gates, geometry, norm.cu compiled by
nvcc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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


# -- add_rms_norm_f32: a residual add and the norm that reads it, one launch --------------------
#: Row lengths: below a warp, odd, model widths (SmolLM2 576, qwen2 0.5B 896, 4096), and 8192,
#: past NORM_RPT x 1024 (the kernel's streaming branch).
ADD_NORM_D = (1, 3, 4, 5, 576, 896, 4096, 8192)


def _bits(x: np.ndarray) -> list[int]:
    return np.ascontiguousarray(x).view(np.uint32).ravel().tolist()


@pytest.mark.parametrize("d", ADD_NORM_D)
@pytest.mark.parametrize("with_w", [True, False])
def test_add_rms_norm_is_add_then_rms_norm_bit_for_bit(d: int, with_w: bool) -> None:
    from tracekit.kernels import elementwise as ew

    for nt in range(1, 10):
        a = (RNG.standard_normal((nt, d)) * 3).astype(np.float32)
        b = (RNG.standard_normal((nt, d)) * 0.5).astype(np.float32)
        w = RNG.standard_normal(d).astype(np.float32) if with_w else None
        out, rec = norm.ref_add_rms_norm_f32(a, b, w, 1e-6)
        s, _ = ew.ref_add_f32(a, b)
        y, _ = norm.ref_rms_norm_f32(s, w, 1e-6)
        assert out.shape == (2, nt, d) and out.dtype == np.float32 and out.flags.c_contiguous
        assert _bits(out[0]) == _bits(s) and _bits(out[1]) == _bits(y)
        assert out[0].flags.c_contiguous and out[1].flags.c_contiguous  # both planes, any nt
        assert rec.kernel == "add_rms_norm_f32" and rec.extra == {"rows": nt, "cols": d}
        assert rec.bytes_read == a.nbytes + b.nbytes + (w.nbytes if with_w else 0)
        assert rec.bytes_written == out.nbytes == 2 * a.nbytes
        assert rec.flops == (5 if with_w else 4) * nt * d  # add_f32's 1 + the norm's


def test_add_rms_norm_keeps_nan_and_inf_as_the_pair_does() -> None:
    from tracekit.kernels import elementwise as ew

    a = RNG.standard_normal((3, 64)).astype(np.float32)
    b = RNG.standard_normal((3, 64)).astype(np.float32)
    a[0, 5], a[1, 7], b[1, 7] = np.nan, np.inf, -np.inf  # inf + -inf: NaN
    w = RNG.standard_normal(64).astype(np.float32)
    with np.errstate(invalid="ignore"):
        out, _ = norm.ref_add_rms_norm_f32(a, b, w, 1e-6)
        s, _ = ew.ref_add_f32(a, b)
        y, _ = norm.ref_rms_norm_f32(s, w, 1e-6)
    assert _bits(out[0]) == _bits(s) and _bits(out[1]) == _bits(y)
    assert np.isnan(out[1, :2]).all() and np.isfinite(out[1, 2]).all()


def test_add_rms_norm_gates() -> None:
    a = RNG.standard_normal((4, 16)).astype(np.float32)
    w = np.ones(16, np.float32)
    with pytest.raises(KernelInputError, match=r"a \(4, 16\) and b \(4, 15\) are not of one shape"):
        norm.ref_add_rms_norm_f32(a, a[:, :15].copy(), w, 1e-6)
    with pytest.raises(KernelInputError, match=r"weight length 15 is not the row length 16 of"):
        norm.ref_add_rms_norm_f32(a, a, w[:15], 1e-6)
    with pytest.raises(KernelInputError, match=r"add_rms_norm b has dtype float64"):
        norm.ref_add_rms_norm_f32(a, a.astype(np.float64), w, 1e-6)
    with pytest.raises(KernelInputError, match=r"add_rms_norm a with strides .* not C-contiguous"):
        norm.ref_add_rms_norm_f32(np.zeros((4, 32), np.float32)[:, ::2], a, w, 1e-6)
    with pytest.raises(KernelInputError, match=r"add_rms_norm a is empty"):
        norm.ref_add_rms_norm_f32(a[:0], a[:0], w, 1e-6)
    with pytest.raises(KernelInputError, match=r"add_rms_norm eps nan must be finite and >= 0"):
        norm.ref_add_rms_norm_f32(a, a, w, float("nan"))
    with pytest.raises(KernelInputError, match=r"add_rms_norm a is a numpy.ndarray, expected a"):
        norm.launch_add_rms_norm_f32(a, a, w, 1e-6)


def test_add_rms_norm_is_declared_beside_rms_norm() -> None:
    from tracekit.kernels.registry import KERNEL_OPS

    op = KERNEL_OPS["add_rms_norm_f32"]
    assert (op.family, op.kernels, op.flops) == ("norm", ("add_rms_norm_f32",), None)
    assert op.ref is norm.ref_add_rms_norm_f32 and op.launch is norm.launch_add_rms_norm_f32
    assert op.stamped  # timed in a CUDA-graph replay as rms_norm_f32 is


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_norm_cu_compiles_for_sm_90(tmp_path: Path) -> None:
    """norm.cu as the launcher compiles it (its -D options), with nvcc for sm_90: compile only,
    no GPU needed. Both kernels are in it."""
    from tracekit.kernels import cuda

    (tmp_path / "norm.cu").write_text(cuda.source(norm.FAMILY))
    cmd = ["nvcc", "-arch=sm_90", "-cubin", *cuda.options(norm.FAMILY)]
    cmd += ["-o", str(tmp_path / "n.cubin"), str(tmp_path / "norm.cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    cubin = (tmp_path / "n.cubin").read_bytes()
    for k in (norm.KERNEL, norm.ADD_KERNEL):
        assert k.encode() + b"\0" in cubin, f"{k} is not in the cubin"

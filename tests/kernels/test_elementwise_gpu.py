"""GPU parity of the elementwise, norm, rope and reduce kernels against their NumPy references.

Run on a GPU host:  .venv/bin/pytest -m gpu tests/kernels/test_elementwise_gpu.py
Every output is poisoned (NaN, or a sentinel for integer outputs) before the launch, so an
element the kernel never wrote fails the comparison. Exact equality where the kernel does
the reference's f32 operations (add, mul, scale, bits, convert, add_bias, argmax); stated
tolerances where libm and CUDA transcendentals differ by a few ulp.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tracekit.kernels import elementwise as ew
from tracekit.kernels import norm, reduce, rope
from tracekit.kernels.checks import KernelInputError

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(2024)
SIZES = [1, 3, 4, 5, 31, 33, 255, 257, 1_000_003]
SHAPES_2D = [(45, 65), (1823, 781)]
ROWS_PAST_GRID_Y = 70_000  # > 65535 rows: rows ride grid.x, never grid.y


def _cp() -> Any:
    """CuPy, imported inside the tests: this module must import (and skip) where it is absent."""
    import cupy

    return cupy


def _randn(shape: Any, scale: float = 3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _poisoned(shape: Any, dtype: Any) -> Any:
    cupy = _cp()
    if np.dtype(dtype).kind == "f":
        return cupy.full(shape, np.nan, dtype=dtype)
    return cupy.full(shape, -123456, dtype=dtype)


def _misaligned(a: np.ndarray) -> Any:
    """A device copy of ``a`` that starts 4 bytes past a 16-byte boundary (a view into a
    one-longer buffer): the launcher must take the scalar path."""
    cupy = _cp()
    buf = cupy.empty(a.size + 1, dtype=a.dtype)
    view = buf[1:].reshape(a.shape)
    a = np.ascontiguousarray(a)
    view.data.copy_from_host(a.ctypes.data, a.nbytes)  # byte copy: NaN payloads survive
    assert view.data.ptr % 16 != 0
    return view


def _misaligned_out(shape: Any, dtype: Any) -> Any:
    cupy = _cp()
    size = int(np.prod(shape))
    buf = cupy.full(size + 1, np.nan if np.dtype(dtype).kind == "f" else -1, dtype=dtype)
    return buf[1:].reshape(shape)


# -- streaming elementwise ops ----------------------------------------------------------------
BINARY = ["add_f32", "mul_f32"]
# (name, rtol, atol, extra args). silu: CUDA expf (<= 2 ulp) vs NumPy's f32 exp, then the same
# add and divide: <= ~5 ulp = 6e-7 relative -> rtol 1e-6. gelu: tanhf vs NumPy's f32 tanh;
# 1 + tanh(u) cancels for u << 0, so the error is absolute, ~|x| * 2 ulp(1) <= 20 * 2.4e-7
# -> atol 5e-6 (|x| < ~20 for these inputs). scale: one f32 multiply -> exact.
UNARY = [
    ("silu_f32", 1e-6, 1e-37, ()),
    ("gelu_tanh_f32", 1e-6, 5e-6, ()),
    ("scale_f32", 0.0, 0.0, (0.0883883476,)),
]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("n", SIZES)
def test_binary_exact(name: str, n: int) -> None:
    cupy = _cp()
    x, y = _randn(n), _randn(n)
    want, _ = getattr(ew, f"ref_{name}")(x, y)
    out = _poisoned(n, np.float32)
    got, rec = getattr(ew, f"launch_{name}")(cupy.asarray(x), cupy.asarray(y), out=out)
    assert got is out and rec.kernel == name and rec.extra == {"vectorized": True}
    np.testing.assert_array_equal(cupy.asnumpy(got), want)
    assert rec.bytes_read == 8 * n and rec.bytes_written == 4 * n


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shape", [*SHAPES_2D, (31,), (257,)])
def test_binary_misaligned_views(name: str, shape: tuple[int, ...]) -> None:
    cupy = _cp()
    x, y = _randn(shape), _randn(shape)
    want, _ = getattr(ew, f"ref_{name}")(x, y)
    out = _misaligned_out(shape, np.float32)
    got, rec = getattr(ew, f"launch_{name}")(_misaligned(x), _misaligned(y), out=out)
    assert rec.extra == {"vectorized": False}
    np.testing.assert_array_equal(cupy.asnumpy(got), want)


def test_add_in_place_and_2d() -> None:
    cupy = _cp()
    for shape in SHAPES_2D:
        x, y = _randn(shape), _randn(shape)
        want, _ = ew.ref_add_f32(x, y)
        dx = cupy.asarray(x)
        got, _ = ew.launch_add_f32(dx, cupy.asarray(y), out=dx)  # the residual stream, in place
        assert got is dx
        np.testing.assert_array_equal(cupy.asnumpy(dx), want)


@pytest.mark.parametrize(("name", "rtol", "atol", "args"), UNARY)
@pytest.mark.parametrize("shape", [*[(n,) for n in SIZES], *SHAPES_2D])
def test_unary(name: str, rtol: float, atol: float, args: tuple, shape: tuple[int, ...]) -> None:
    cupy = _cp()
    x = _randn(shape, 4.0)
    if x.size >= 8:
        x.ravel()[:8] = [0.0, -0.0, -87.0, -89.0, 88.0, 1e-30, -1e4, 1e4]
    want, _ = getattr(ew, f"ref_{name}")(x, *args)
    out = _poisoned(shape, np.float32)
    got, rec = getattr(ew, f"launch_{name}")(cupy.asarray(x), *args, out=out)
    assert rec.kernel == name
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=rtol, atol=atol)
    # The misaligned (scalar) path gives the same values.
    out2 = _misaligned_out(shape, np.float32)
    got2, rec2 = getattr(ew, f"launch_{name}")(_misaligned(x), *args, out=out2)
    assert rec2.extra == {"vectorized": False}
    np.testing.assert_array_equal(cupy.asnumpy(got2), cupy.asnumpy(got))


@pytest.mark.parametrize("n", [1, 3, 5, 31, 33, 255, 257, 65537])
def test_f32_bits_to_i32_exact(n: int) -> None:
    cupy = _cp()
    bits = RNG.integers(-(2**31), 2**31, size=n, dtype=np.int64).astype(np.int32)
    x = bits.view(np.float32)  # includes NaN and denormal patterns: bits must survive
    for dx in (cupy.asarray(x), _misaligned(x)):
        out = _poisoned(n, np.int32)
        got, rec = ew.launch_f32_bits_to_i32(dx, out=out)
        np.testing.assert_array_equal(cupy.asnumpy(got), bits)
        assert got.dtype == np.int32 and rec.bytes_written == 4 * n


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 17, 31, 33, 255, 257, 1_000_003])
def test_convert_f32_f16_exact(n: int) -> None:
    cupy = _cp()
    x = _randn(n, 1000.0)
    specials = np.float32(
        [65504, 65519.996, 65520, -1e9, 6e-8, 2.0**-25, 2.0**-24 * 1.5, 1 + 2**-11, 0.1, -0.0]
    )
    x[: min(n, specials.size)] = specials[: min(n, specials.size)]
    want, _ = ew.ref_convert_f32_f16(x)
    for dx, out in (
        (cupy.asarray(x), _poisoned(n, np.float16)),
        (_misaligned(x), _misaligned_out((n,), np.float16)),
    ):
        got, rec = ew.launch_convert_f32_f16(dx, out=out)
        np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint16), want.view(np.uint16))
        assert rec.bytes_read == 4 * n and rec.bytes_written == 2 * n


def test_convert_geometry_eight_per_thread() -> None:
    cupy = _cp()
    _, rec = ew.launch_convert_f32_f16(cupy.zeros(2049, cupy.float32))
    assert rec.extra == {"vectorized": True} and rec.grid == (2, 1, 1)  # 257 items of 8


def test_add_f32_past_2_31_elements() -> None:
    cupy = _cp()
    n = 2**31 + 3  # 8.6 GB per array; the n % 4 = 3 tail sits past 2^31
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 3 * 4 * n + (1 << 30):
        pytest.skip(f"needs {3 * 4 * n / 2**30:.1f} GiB free, device has {free / 2**30:.1f}")
    fill = cupy.ElementwiseKernel(
        "float32 scale, int64 mod", "float32 x", "x = scale * (float)(i % mod)", "tk_fill_mod"
    )
    x = cupy.empty(n, cupy.float32)
    y = cupy.empty(n, cupy.float32)
    fill(np.float32(1.0), np.int64(1021), x)
    fill(np.float32(0.5), np.int64(997), y)
    z = cupy.full(n, np.nan, cupy.float32)
    got, rec = ew.launch_add_f32(x, y, out=z)
    assert rec.extra == {"vectorized": True} and rec.threads_launched < -(-n // 4)  # strided
    assert rec.bytes_read == 8 * n and rec.bytes_written == 4 * n
    cupy.cuda.get_current_stream().synchronize()
    del x, y
    # Windows: the start, around 2^31 / 4 (float4 index 2^29), around 2^31, and the tail.
    for start in (0, 2**29 - 8, 2**31 - 1000, n - 1000):
        idx = np.arange(start, start + 1000, dtype=np.int64)
        want = ((idx % 1021).astype(np.float32) + np.float32(0.5) * (idx % 997)).astype(np.float32)
        np.testing.assert_array_equal(
            cupy.asnumpy(z[start : start + 1000]), want, err_msg=f"{start}"
        )
    assert not bool(cupy.isnan(z).any())
    del z


# -- add_bias_f32 -------------------------------------------------------------------------------
# -- glu: act(gate) * up over a fused [gate | up] ------------------------------------------------
GLU_N = [1, 3, 4, 5, 1023]
GLU_NT = list(range(1, 10))
#: act -> (rtol, atol per unit of |up|) against the NumPy reference: the act's UNARY tolerance
#: and one more rounding (the product, 0.5 ulp)
GLU_TOL = {"silu": (2e-6, 1e-37), "gelu_tanh": (2e-6, 5e-6)}


def _glu_x(nt: int, n: int) -> np.ndarray:
    x = _randn((nt, 2 * n), 4.0)
    edges = np.float32([0.0, -0.0, -87.0, -89.0, 88.0, 1e-30, -1e4, 1e4, np.nan, np.inf, -np.inf])
    gates = x[:, :n].reshape(-1)
    k = min(edges.size, gates.size)
    gates[:k] = edges[:k]
    x[:, :n] = gates.reshape(nt, n)
    x[-1, -1] = np.nan  # an up NaN
    return x


def _bits(a: Any) -> np.ndarray:
    return _cp().asnumpy(a).view(np.uint32)


def _act_then_mul_on_device(dx: Any, act: str) -> Any:
    """The graph before glu, on the device: the slices (copies), the act kernel, mul_f32."""
    n = int(dx.shape[1]) // 2
    gate, _ = ew.launch_slice_cols_f32(dx, 0, n)
    up, _ = ew.launch_slice_cols_f32(dx, n, n)
    a, _ = getattr(ew, f"launch_{act}_f32")(gate)
    return ew.launch_mul_f32(a, up)[0]


@pytest.mark.parametrize("act", list(ew.GLU_ACTS))
@pytest.mark.parametrize("n", GLU_N)
@pytest.mark.parametrize("nt", GLU_NT)
def test_glu(act: str, n: int, nt: int) -> None:
    cupy = _cp()
    x = _glu_x(nt, n)
    dx = cupy.asarray(x)
    out = _poisoned((nt, n), np.float32)
    got, rec = ew.launch_glu_f32(dx, act, out=out)
    assert got is out and rec.kernel == f"glu_{act}_f32"
    assert rec.extra == {"rows": nt, "cols": n, "vectorized": n % 4 == 0}
    assert rec.bytes_read == 8 * nt * n and rec.bytes_written == 4 * nt * n
    # bit for bit the act kernel then mul_f32 (NaN payloads too): the same f32 operations
    np.testing.assert_array_equal(_bits(got), _bits(_act_then_mul_on_device(dx, act)))
    want, _ = ew.ref_glu_f32(x, act)
    rtol, atol = GLU_TOL[act]
    up = np.abs(x[:, n:][np.isfinite(x[:, n:])])
    np.testing.assert_allclose(
        cupy.asnumpy(got), want, rtol=rtol, atol=atol * float(up.max(initial=1.0))
    )
    # the scalar path (x and out 4 bytes past a 16-byte boundary) gives the same bits
    out2 = _misaligned_out((nt, n), np.float32)
    got2, rec2 = ew.launch_glu_f32(_misaligned(x), act, out=out2)
    assert rec2.extra["vectorized"] is False
    np.testing.assert_array_equal(_bits(got2), _bits(got))


@pytest.mark.parametrize("act", list(ew.GLU_ACTS))
@pytest.mark.parametrize(("nt", "n"), [(1, 4864), (130, 4864), (7, 8192), (4097, 36)])
def test_glu_model_shapes(act: str, nt: int, n: int) -> None:
    # qwen2-0.5b's n_ff (a decode row, a prefill), wider rows, many short rows
    cupy = _cp()
    x = _glu_x(nt, n)
    dx = cupy.asarray(x)
    got, rec = ew.launch_glu_f32(dx, act, out=_poisoned((nt, n), np.float32))
    assert rec.extra["vectorized"] is True
    np.testing.assert_array_equal(_bits(got), _bits(_act_then_mul_on_device(dx, act)))


def test_glu_out_gates() -> None:
    cupy = _cp()
    dx = cupy.asarray(_randn((1, 8)))
    with pytest.raises(KernelInputError, match=r"glu out \[0x[0-9a-f]+, 0x[0-9a-f]+\) overlaps x"):
        ew.launch_glu_f32(dx, "silu", out=dx[:, 4:])  # one row: a contiguous view of x
    with pytest.raises(
        KernelInputError, match=r"shape mismatch: glu out \(1, 8\) vs expected \(1, 4\)"
    ):
        ew.launch_glu_f32(dx, "silu", out=cupy.empty((1, 8), cupy.float32))
    with pytest.raises(KernelInputError, match=r"glu act 'relu'"):
        ew.launch_glu_f32(dx, "relu")


@pytest.mark.parametrize(
    "shape", [(1, 1), (1, 31), (30, 896), (45, 65), (1823, 781), (ROWS_PAST_GRID_Y, 33)]
)
def test_add_bias_exact(shape: tuple[int, int]) -> None:
    cupy = _cp()
    y, b = _randn(shape), _randn(shape[1])
    want, _ = ew.ref_add_bias_f32(y.copy(), b)
    out = _poisoned(shape, np.float32)
    got, rec = ew.launch_add_bias_f32(cupy.asarray(y), cupy.asarray(b), out=out)
    # fresh CuPy buffers are 256-byte aligned: a float4 per thread whenever d % 4 == 0
    assert got is out and rec.grid == ew.bias_geometry(shape[0], shape[1], shape[1] % 4 == 0).grid
    np.testing.assert_array_equal(cupy.asnumpy(got), want)
    dy = cupy.asarray(y)  # in place (the MatMul bias epilogue)
    got, _ = ew.launch_add_bias_f32(dy, cupy.asarray(b))
    assert got is dy
    np.testing.assert_array_equal(cupy.asnumpy(dy), want)


def test_add_bias_rejects_wrong_length_before_launch() -> None:
    cupy = _cp()
    with pytest.raises(KernelInputError, match=r"bias length 64 is not the row length 65"):
        ew.launch_add_bias_f32(cupy.zeros((45, 65), cupy.float32), cupy.zeros(64, cupy.float32))


def test_out_gates() -> None:
    cupy = _cp()
    x = cupy.zeros(10, cupy.float32)
    with pytest.raises(KernelInputError, match=r"shape mismatch"):
        ew.launch_add_f32(x, x, out=cupy.zeros(11, cupy.float32))
    with pytest.raises(KernelInputError, match=r"dtype float16, expected float32"):
        ew.launch_silu_f32(x, out=cupy.zeros(10, cupy.float16))
    with pytest.raises(KernelInputError, match=r"numpy.ndarray, expected a cupy array"):
        ew.launch_mul_f32(x, x, out=np.zeros(10, np.float32))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 30 * 4096 + 5, 1_000_003])
def test_fill_writes_every_element_and_only_those(n: int) -> None:
    cupy = _cp()
    buf = _poisoned(n + 8, np.float32)  # 8 poisoned guards after the end
    rec = ew.launch_fill_f32(buf[:n], -2.5)
    host = cupy.asnumpy(buf)
    np.testing.assert_array_equal(host[:n], np.full(n, -2.5, np.float32))
    assert np.isnan(host[n:]).all()
    assert rec.kernel == "fill_f32" and rec.bytes_written == 4 * n and rec.bytes_read == 0
    with pytest.raises(KernelInputError, match="4 bytes past a 16-byte boundary"):
        ew.launch_fill_f32(buf[1:9])
    with pytest.raises(KernelInputError, match="fill out"):
        ew.launch_fill_f32(cupy.zeros(8, cupy.float64))


def test_launch_empty() -> None:
    rec = ew.launch_empty()
    _cp().cuda.get_current_stream().synchronize()
    assert rec.kernel == "empty_kernel" and rec.grid == (1, 1, 1) and rec.block == (32, 1, 1)
    assert rec.threads_launched == 32 and rec.threads_working == 0


# -- rms_norm_f32 -------------------------------------------------------------------------------
# Both sides sum squares in float64 and round scale = 1/sqrt(mean + eps) to f32 once; then
# two rounded f32 products. Only the f64 summation order differs (1e-16 relative): a rare 1-ulp
# flip of scale -> rtol 1e-6 (8 ulp).
@pytest.mark.parametrize(
    ("shape", "with_w"),
    [
        ((1, 1), True),
        ((1, 31), True),
        ((45, 65), True),
        ((1823, 781), True),
        ((ROWS_PAST_GRID_Y, 64), True),
        ((3, 4096), True),  # the 256-thread block with the shared-memory hop
        ((5, 1033), False),
        ((6, 8, 128), True),  # per-head Q/K norm
    ],
)
def test_rms_norm(shape: tuple[int, ...], with_w: bool) -> None:
    cupy = _cp()
    x = _randn(shape)
    w = _randn(shape[-1]) if with_w else None
    want, _ = norm.ref_rms_norm_f32(x, w, 1e-6)
    out = _poisoned(shape, np.float32)
    dw = cupy.asarray(w) if with_w else None
    got, rec = norm.launch_rms_norm_f32(cupy.asarray(x), dw, 1e-6, out=out)
    assert got is out and rec.grid[0] == x.size // shape[-1]
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-6, atol=1e-30)


# -- rope_f32 -----------------------------------------------------------------------------------
# The angle is bit-identical (same f32 products); cosf/sinf and NumPy's f32 cos/sin differ by
# <= ~2 ulp each, so |dy| <= (|a| + |b|) * 2.4e-7 <= ~3e-6 for these unit-scale inputs.
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize(
    ("nt", "nh", "hd", "base", "fs", "max_pos"),
    [
        (1, 1, 2, 10000.0, 1.0, 1),
        (45, 3, 64, 10000.0, 1.0, 70_000),
        (33, 14, 128, 1e6, 1.0, 4096),
        (7, 4, 256, 10000.0, 0.25, 512),
        (1823, 2, 64, 500000.0, 1.0, 131_072),
    ],
)
def test_rope(nt: int, nh: int, hd: int, base: float, fs: float, max_pos: int, neox: bool) -> None:
    cupy = _cp()
    x = _randn((nt, nh, hd), 1.0)
    pos = RNG.integers(0, max_pos, size=nt).astype(np.int32)
    want, _ = rope.ref_rope_f32(x, pos, base, neox, fs)
    out = _poisoned(x.shape, np.float32)
    got, rec = rope.launch_rope_f32(cupy.asarray(x), cupy.asarray(pos), base, neox, fs, out=out)
    assert got is out and rec.extra == {"mode": "neox" if neox else "normal"}
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-6, atol=4e-6)


# -- softmax_f32 / argmax_f32 -------------------------------------------------------------------
# softmax: exp(x - max) with the same f32 subtraction; CUDA expf vs NumPy's f32 exp (a few ulp);
# the sum in f64 rounded once; one division -> rtol 2e-6; atol 1e-38 covers denormal outputs.
SOFTMAX_SHAPES = [
    (1, 1),
    (1, 31),
    (3, 257),
    (45, 65),
    (1823, 781),
    (ROWS_PAST_GRID_Y, 7),
    (2, 151936),
]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
def test_softmax(shape: tuple[int, int]) -> None:
    cupy = _cp()
    x = _randn(shape, 8.0)
    want, _ = reduce.ref_softmax_f32(x)
    out = _poisoned(shape, np.float32)
    got, rec = reduce.launch_softmax_f32(cupy.asarray(x), out=out)
    assert got is out and rec.grid[0] == shape[0]
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=2e-6, atol=1e-38)


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
def test_argmax_exact(shape: tuple[int, int]) -> None:
    cupy = _cp()
    # Small integers: many ties, so "first index" is exercised; NaN and -inf sprinkled in.
    x = RNG.integers(-50, 50, size=shape).astype(np.float32)
    x[RNG.random(shape) < 0.2] = np.nan
    x[RNG.random(shape) < 0.05] = -np.inf
    if shape[0] >= 3:
        x[0] = np.nan  # all NaN -> 0
        x[1] = np.nan
        x[1, -1] = -np.inf  # only -inf left -> the last index
        x[2] = 7.0  # all tied -> 0
    want, _ = reduce.ref_argmax_f32(x)
    out = _poisoned(shape[0], np.int32)
    got, rec = reduce.launch_argmax_f32(cupy.asarray(x), out=out)
    assert got is out and rec.bytes_written == 4 * shape[0]
    np.testing.assert_array_equal(cupy.asnumpy(got), want)


def test_argmax_of_logits_vocab_row() -> None:
    cupy = _cp()
    x = _randn((4, 151936))
    x[0, 151935] = 100.0  # the last element
    x[1, 0] = 100.0
    x[2, 70000] = x[2, 90000] = 100.0  # tie: the first
    got, _ = reduce.launch_argmax_f32(cupy.asarray(x))
    want, _ = reduce.ref_argmax_f32(x)
    assert cupy.asnumpy(got).tolist() == want.tolist()
    assert want[:3].tolist() == [151935, 0, 70000]

"""CPU tests of the elementwise family: references vs float64 formulas, gates, geometry."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tracekit.kernels import elementwise as ew
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.launch import MAX_GRID_X

RNG = np.random.default_rng(7)
SHAPES = [(1,), (31,), (33,), (257,), (45, 65), (3, 5, 7)]


def _f32(shape: tuple[int, ...], scale: float = 3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_add_mul_scale_equal_float64_rounded(shape: tuple[int, ...]) -> None:
    # One f32 op equals the exact (f64) result rounded once: 53 >= 2 * 24 + 2 bits makes the
    # double rounding innocuous, so these are exact comparisons.
    x, y = _f32(shape), _f32(shape)
    z, rec = ew.ref_add_f32(x, y)
    np.testing.assert_array_equal(z, (x.astype(np.float64) + y).astype(np.float32))
    assert z.dtype == np.float32 and rec.kernel == "add_f32"
    assert rec.bytes_read == 2 * x.nbytes and rec.bytes_written == x.nbytes
    assert rec.flops == x.size and rec.grid is None
    z, rec = ew.ref_mul_f32(x, y)
    np.testing.assert_array_equal(z, (x.astype(np.float64) * y).astype(np.float32))
    assert rec.kernel == "mul_f32"
    z, rec = ew.ref_scale_f32(x, 0.125 + 1e-9)  # s is rounded to f32 first
    np.testing.assert_array_equal(z, (x.astype(np.float64) * np.float32(0.125)).astype(np.float32))
    assert rec.bytes_read == x.nbytes and rec.bytes_written == x.nbytes


def test_silu_against_float64() -> None:
    x = np.concatenate([_f32((4096,), 6.0), np.float32([0, -0.0, 1e-30, -87, -89, 88, 1e4])])
    z, rec = ew.ref_silu_f32(x)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = x64 / (1 + np.exp(-x64))
    # f32 exp (a few ulp) + one add + one divide: within 2e-6 relative (~16 ulp of 2^-23).
    # x = -89: exp(89) overflows f32 (limit ~88.72), so f32 gives -0 where f64 gives -2e-37.
    np.testing.assert_allclose(z, want, rtol=2e-6, atol=3e-37)
    assert z[-3] == 0 and np.signbit(z[-3]) and rec.flops == 3 * x.size


def test_gelu_tanh_against_float64() -> None:
    x = np.concatenate([_f32((4096,), 4.0), np.float32([0, -20, 20, 1e-20])])
    z, _ = ew.ref_gelu_tanh_f32(x)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    # 1 + tanh(u) cancels for u << 0: absolute error ~ |x| * ulp(1) ~ 16 * 1.2e-7.
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=2e-6)


def test_gelu_known_values() -> None:
    z, _ = ew.ref_gelu_tanh_f32(np.float32([0.0, 1.0, -1.0]))
    np.testing.assert_allclose(z, [0.0, 0.8411920, -0.1588080], rtol=1e-6)


def test_f32_bits_to_i32_reinterprets_ids() -> None:
    ids = np.array([0, 1, 151935, 2**31 - 1, -1, -(2**31)], dtype=np.int32)
    z, rec = ew.ref_f32_bits_to_i32(ids.view(np.float32))
    np.testing.assert_array_equal(z, ids)
    assert z.dtype == np.int32 and rec.flops == 0
    one, _ = ew.ref_f32_bits_to_i32(np.float32([1.0, -2.0]))
    assert one.tolist() == [0x3F800000, struct.unpack("<i", struct.pack("<f", -2.0))[0]]


def test_convert_f32_f16_round_to_nearest_even() -> None:
    # Values checked against Python's own binary16 packing (struct 'e': round half to even).
    vals = [0.1, 1 / 3, 1.0 + 2**-11, 1.0 + 3 * 2**-11, 65504.0, 6e-8, 2.0**-24, 3e-5, -7.25]
    x = np.float32(vals)
    z, rec = ew.ref_convert_f32_f16(x)
    want = [struct.unpack("<H", struct.pack("<e", float(v)))[0] for v in x]
    assert z.dtype == np.float16 and z.view(np.uint16).tolist() == want
    assert rec.bytes_written == 2 * x.size and rec.bytes_read == 4 * x.size
    # Past the largest half (65504 + half an ulp = 65520) rounds to inf.
    big, _ = ew.ref_convert_f32_f16(np.float32([65519.0, 65520.0, -1e9, np.inf]))
    assert big.tolist() == [65504.0, np.inf, -np.inf, np.inf]


def test_add_bias_in_place_per_row() -> None:
    y = _f32((30, 896))
    b = _f32((896,))
    want = (y.astype(np.float64) + b).astype(np.float32)
    z, rec = ew.ref_add_bias_f32(y, b)
    assert z is y
    np.testing.assert_array_equal(y, want)
    assert rec.kernel == "add_bias_f32" and rec.extra == {"rows": 30, "cols": 896}
    assert rec.bytes_read == y.nbytes + b.nbytes and rec.bytes_written == y.nbytes


def test_add_bias_rejects_wrong_length() -> None:
    with pytest.raises(KernelInputError, match=r"bias length 897 is not the row length 896"):
        ew.ref_add_bias_f32(_f32((30, 896)), _f32((897,)))
    with pytest.raises(KernelInputError, match=r"expected 2-D"):
        ew.ref_add_bias_f32(_f32((30 * 896,)), _f32((896,)))


@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary_gates(op: str) -> None:
    fn = getattr(ew, f"ref_{op}_f32")
    x = _f32((4, 6))
    with pytest.raises(KernelInputError, match=r"dtype float64, expected float32"):
        fn(x.astype(np.float64), x)
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        fn(x[:, ::2], x[:, ::2])
    with pytest.raises(KernelInputError, match=r"shape mismatch: .* \(4, 6\) vs .* \(6, 4\)"):
        fn(x, x.reshape(6, 4))
    with pytest.raises(KernelInputError, match=r"is empty"):
        fn(x[:0], x[:0])


@pytest.mark.parametrize(
    "name", ["silu_f32", "gelu_tanh_f32", "f32_bits_to_i32", "convert_f32_f16"]
)
def test_unary_gates(name: str) -> None:
    fn = getattr(ew, f"ref_{name}")
    with pytest.raises(KernelInputError, match=r"dtype float16, expected float32"):
        fn(np.zeros(3, np.float16))
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        fn(_f32((5, 4)).T)
    with pytest.raises(KernelInputError, match=r"is empty"):
        fn(np.zeros((0, 3), np.float32))


def test_launchers_reject_host_arrays() -> None:
    x = _f32((8,))
    with pytest.raises(KernelInputError, match=r"numpy.ndarray, expected a cupy array"):
        ew.launch_add_f32(x, x)
    with pytest.raises(KernelInputError, match=r"bias length 3 is not the row length 8"):
        ew.launch_add_bias_f32(x.reshape(1, 8), _f32((3,)))


def test_stream_geometry_clamps_to_the_cap_and_strides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ew, "sm_count", lambda: 132)
    monkeypatch.setattr(ew, "BLOCKS_PER_SM", 16)
    geo = ew.stream_geometry(2**31 + 3, 4, True)
    assert geo.grid == (132 * 16, 1, 1) and geo.strided


@pytest.mark.parametrize(
    ("n", "vec", "grid", "strided"),
    [
        (1, True, 1, False),
        (3, True, 1, False),
        (1024, True, 1, False),
        (1025, True, 2, False),
        (31, False, 1, False),
        (257, False, 2, False),
        (2**31 + 3, True, 2097153, False),  # ceil(ceil(n / 4) / 256): no clamp by default
    ],
)
def test_stream_geometry(
    monkeypatch: pytest.MonkeyPatch, n: int, vec: bool, grid: int, strided: bool
) -> None:
    monkeypatch.setattr(ew, "sm_count", lambda: 132)
    geo = ew.stream_geometry(n, 4, vec)
    assert geo.grid == (grid, 1, 1) and geo.block == (ew.BLOCK, 1, 1)
    assert geo.work_items == (-(-n // 4) if vec else n) and geo.strided is strided


def test_convert_geometry_eight_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ew, "sm_count", lambda: 132)
    geo = ew.stream_geometry(2049, 8, True)  # 256 full items + a 1-element tail item
    assert geo.work_items == 257 and geo.grid == (2, 1, 1)


@pytest.mark.parametrize(
    ("nt", "d", "vec", "grid"),
    [
        (30, 896, True, (30, 2, 1)),  # 224 float4 per row: two tiles of 128 threads
        (30, 896, False, (30, 7, 1)),
        (1, 1, False, (1, 1, 1)),
        (5, 64, True, (5, 1, 1)),
        (70000, 65, False, (70000, 1, 1)),
    ],
)
def test_add_bias_grid_is_rows_by_column_tiles(
    nt: int, d: int, vec: bool, grid: tuple[int, int, int]
) -> None:
    # Seed §3.1: grid.x is the ROW count (one block row per token), columns tile grid.y.
    geo = ew.bias_geometry(nt, d, vec)
    assert geo.grid == grid and geo.block == (ew.BIAS_BLOCK, 1, 1)
    assert geo.work_items == nt * (d // 4 if vec else d)
    assert geo.grid[0] <= MAX_GRID_X


# -- glu: act(gate) * up over a fused [gate | up] -------------------------------------------------
GLU_N = [1, 3, 4, 5, 1023]
GLU_NT = list(range(1, 10))


def _glu_input(nt: int, n: int) -> np.ndarray:
    """[nt, 2n]: gates over silu's and gelu's ranges (exp(-x) overflows below -88.7), ups of
    both signs, and the edge values once each where they fit."""
    x = _f32((nt, 2 * n), 8.0)
    edges = np.float32([0.0, -0.0, -87.0, -89.0, 88.0, 1e-30, -1e4, 1e4, 1e-40, -20.0])
    flat = x[:, :n].reshape(-1)  # a copy for nt > 1; written back below
    k = min(edges.size, flat.size)
    flat[:k] = edges[:k]
    x[:, :n] = flat.reshape(nt, n)
    return x


def _act_then_mul(x: np.ndarray, act: str) -> np.ndarray:
    """The graph before the glu node: the two slices (views on one row, copies otherwise, as
    runner/ops.py's slice_cols), the act op's reference, then mul's."""
    n = x.shape[1] // 2
    if x.shape[0] == 1:
        gate, up = x[:, :n], x[:, n:]
    else:
        gate, up = ew.ref_slice_cols_f32(x, 0, n)[0], ew.ref_slice_cols_f32(x, n, n)[0]
    a, _ = getattr(ew, f"ref_{act}_f32")(gate)
    z, _ = ew.ref_mul_f32(a, up)
    return z


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{bad.size} elements differ, first at flat index {bad[0]}: "
        f"{got.ravel()[bad[0]]!r} vs {want.ravel()[bad[0]]!r}"
    )


@pytest.mark.parametrize("act", list(ew.GLU_ACTS))
@pytest.mark.parametrize("n", GLU_N)
@pytest.mark.parametrize("nt", GLU_NT)
def test_glu_is_act_then_mul_bit_for_bit(act: str, n: int, nt: int) -> None:
    x = _glu_input(nt, n)
    z, rec = ew.ref_glu_f32(x, act)
    _same_bits(z, _act_then_mul(x, act))
    assert z.flags.c_contiguous and not np.shares_memory(z, x)
    assert rec.kernel == f"glu_{act}_f32" and rec.grid is None
    # each input element read once (gate and up), each output written once
    assert rec.bytes_read == x.nbytes == 8 * nt * n and rec.bytes_written == 4 * nt * n
    act_flops = ew.KERNEL_OPS[f"{act}_f32"].flops
    assert rec.flops == (act_flops + 1) * nt * n and rec.extra == {"rows": nt, "cols": n}


@pytest.mark.parametrize("act", list(ew.GLU_ACTS))
def test_glu_propagates_nan_and_inf(act: str) -> None:
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    gate = np.float32([nan, inf, -inf, 1.0, 1.0, 0.0, 2.0, nan])
    up = np.float32([1.0, 1.0, 1.0, nan, inf, inf, -inf, inf])
    x = np.concatenate([gate, up]).reshape(1, -1)
    z, _ = ew.ref_glu_f32(x, act)
    _same_bits(z, _act_then_mul(x, act))
    # act(inf) = inf for both; act(-inf) is -inf / inf (silu) or 0.5 (-inf) 0 (gelu): NaN;
    # act(0) * inf = 0 * inf: NaN; act(2) > 0 times -inf: -inf
    assert np.isnan(z[0, [0, 2, 3, 5, 7]]).all()
    assert z[0, 1] == inf and z[0, 4] == inf and z[0, 6] == -inf
    # the same on every row of a many-row x
    xs = np.repeat(x, 5, axis=0)
    _same_bits(ew.ref_glu_f32(xs, act)[0], np.repeat(z, 5, axis=0))


def test_glu_gates() -> None:
    x = _f32((4, 6))
    with pytest.raises(
        KernelInputError, match=r"glu act 'relu' is not one of \('silu', 'gelu_tanh'\)"
    ):
        ew.ref_glu_f32(x, "relu")
    with pytest.raises(KernelInputError, match=r"glu x \(4, 7\) has 7 columns, not \[gate \| up\]"):
        ew.ref_glu_f32(_f32((4, 7)), "silu")
    with pytest.raises(KernelInputError, match=r"glu x has shape \(24,\) \(1-D\), expected 2-D"):
        ew.ref_glu_f32(x.reshape(-1), "silu")
    with pytest.raises(KernelInputError, match=r"dtype float64, expected float32"):
        ew.ref_glu_f32(x.astype(np.float64), "silu")
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        ew.ref_glu_f32(_f32((6, 4)).T, "silu")
    with pytest.raises(KernelInputError, match=r"glu x is empty"):
        ew.ref_glu_f32(x[:0], "silu")
    with pytest.raises(KernelInputError, match=r"numpy.ndarray, expected a cupy array"):
        ew.launch_glu_f32(x, "silu")


def test_glu_streams_as_the_other_unrolled_kernels() -> None:
    assert ew.elems_per_item("glu_f32") == ew.elems_per_item("mul_f32") == 4 * ew.STREAM_UNROLL
    assert ew.KERNEL_OPS["glu_f32"].kernels == ("glu_silu_f32", "glu_gelu_tanh_f32")
    assert ew.KERNEL_OPS["glu_f32"].stamped  # timed in a CUDA-graph replay as the others


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("unroll", [1, ew.STREAM_UNROLL, 4])
def test_elementwise_cu_compiles_for_sm_90(tmp_path: Path, unroll: int) -> None:
    """elementwise.cu as the launcher compiles it (its -D options; UNROLL as the sweep varies
    it), with nvcc for sm_90: compile only, no GPU needed. Every declared kernel is in it."""
    from tracekit.kernels import cuda

    (tmp_path / "elementwise.cu").write_text(cuda.source(ew.FAMILY))
    opts = [o for o in cuda.options(ew.FAMILY) if not o.startswith("-DUNROLL=")]
    cmd = ["nvcc", "-arch=sm_90", "-cubin", *opts, f"-DUNROLL={unroll}"]
    cmd += ["-o", str(tmp_path / "e.cubin"), str(tmp_path / "elementwise.cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    cubin = (tmp_path / "e.cubin").read_bytes()
    for op in ew.KERNEL_OPS.values():
        if op.family == ew.FAMILY:
            for k in op.kernels:
                assert k.encode() + b"\0" in cubin, f"{k} is not in the cubin"

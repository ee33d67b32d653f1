"""The quant path's matvec (NumPy reference, gates, path choice) and the matmul paths on the CPU.

The GPU kernels are checked against the same oracle in test_matvec_gpu.py (marked ``gpu``).
"""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest

from tracekit.kernels import cuda, matmul, matvec
from tracekit.kernels.backend import get_backend
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.dequant import f16_field_offsets, random_blocks
from tracekit.kernels.matmul import MatmulWeight, choose_path, w16_cache_on
from tracekit.quants import (
    MMVQ_DEFAULT,
    QUANT_TABLE,
    QUANTIZED_TYPES,
    QuantType,
    StagedShape,
    quant_type,
)

TYPES = list(QUANT_TABLE.values())
TYPE_IDS = [t.name for t in TYPES]
U = 2.0**-24  # f32 unit roundoff


def finite_raw(qt: QuantType, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random blocks with finite f16 scales; float types: normal values (random bits would
    overflow the product)."""
    if qt.is_quantized:
        return random_blocks(qt, n_blocks, rng)
    v = rng.standard_normal(n_blocks).astype(np.float32)
    if qt.name == "F16":
        return v.astype(np.float16).view(np.uint8)
    if qt.name == "BF16":
        return (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return v.view(np.uint8)


def weight(
    qt: QuantType, n: int, k: int, seed: int = 0, tame: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes, gguf-py's f64 dequantization [n, k]) of a random weight. ``tame``: f16 scales
    in (-0.01, 0.01), so the values fit in f16 (the f16 path's tests)."""
    rng = np.random.default_rng(seed)
    raw = finite_raw(qt, n * k // qt.block_size, rng)
    if tame and qt.is_quantized:
        blocks = raw.reshape(-1, qt.type_size)
        for off in f16_field_offsets(qt):
            d = (rng.uniform(-0.01, 0.01, len(blocks))).astype(np.float16)
            blocks[:, off : off + 2] = d.view(np.uint8).reshape(-1, 2)
    w = gguf.quants.dequantize(raw, qt.qtype).reshape(n, k).astype(np.float64)
    return raw, w


def oracle(x: np.ndarray, w64: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x @ w.T in float64, sum |x| |w| per output: the scale of the rounding error)."""
    x64 = x.astype(np.float64)
    return x64 @ w64.T, np.abs(x64) @ np.abs(w64).T


def gamma(n_terms: int) -> float:
    """The classic bound on an n-term f32 sum's relative error (of sum |terms|)."""
    return n_terms * U / (1 - n_terms * U)


def random_x(nt: int, k: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((nt, k)).astype(np.float32)


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("n, nt", [(1, 1), (5, 3), (33, 8)])
def test_ref_matvec_is_x_times_the_gguf_values(qt: QuantType, n: int, nt: int) -> None:
    k = 2 * max(qt.block_size, 32)
    raw, w64 = weight(qt, n, k)
    x = random_x(nt, k)
    got, rec = matvec.ref_matvec(x, raw, qt, (n, k))
    assert got.dtype == np.float32 and got.shape == (nt, n)
    # bit for bit the f32 product of gguf-py's own values (same BLAS call, same operands)
    assert np.array_equal(got, x @ w64.astype(np.float32).T)
    want, scale = oracle(x, w64)
    assert np.all(np.abs(got - want) <= gamma(k) * scale)
    assert rec.kernel == f"numpy_matvec_{qt.suffix}" and rec.extra["path"] == "quant"
    assert rec.bytes_read == raw.nbytes + x.nbytes and rec.flops == 2 * nt * n * k


def test_ref_matvec_catches_one_wrong_value() -> None:
    """Negative control of the GPU test's bound: one decoded value off by one code step is
    well outside the per-lane summation bound the GPU test uses."""
    qt = quant_type("Q8_0")
    n, k = 4, 4096
    raw, w64 = weight(qt, n, k)
    x = random_x(1, k)
    want, scale = oracle(x, w64)
    bad = w64.copy()
    blk = (2 * k + 1234) // qt.block_size
    d = float(raw[blk * qt.type_size : blk * qt.type_size + 2].view(np.float16)[0])
    bad[2, 1234] += d  # one code step of that block
    wrong, _ = oracle(x, bad)
    bound = gamma(8 * math.ceil(k / 256) + 6) * scale
    assert np.abs(wrong - want)[0, 2] > bound[0, 2]


@pytest.mark.parametrize(
    "shape, nt, msg",
    [
        ((4, 64), 9, "1..8 tokens"),
        ((4, 64), 0, "1..8 tokens"),
        ((4, 96), 1, "k mismatch"),
    ],
)
def test_matvec_gates(shape: tuple[int, int], nt: int, msg: str) -> None:
    qt = quant_type("Q8_0")
    raw, _ = weight(qt, *shape)
    x = random_x(max(nt, 1), 64)[:nt] if shape[1] == 64 else random_x(1, 64)
    with pytest.raises(KernelInputError, match=msg):
        matvec.ref_matvec(np.ascontiguousarray(x), raw, qt, shape)


def test_matvec_gates_the_weight_bytes() -> None:
    qt = quant_type("Q4_K")
    raw, _ = weight(qt, 2, 256)
    with pytest.raises(KernelInputError):
        matvec.ref_matvec(random_x(1, 256), raw[:-1], qt, (2, 256))
    with pytest.raises(KernelInputError, match="multiple of 8"):
        f32 = quant_type("F32")
        matvec.ref_matvec(random_x(1, 12), np.zeros(48, np.uint8), f32, (1, 12))


def test_every_matvec_kernel_can_carry_a_node_stamp() -> None:
    names = matvec.kernel_names()
    quantized = sum(t.is_quantized for t in QUANT_TABLE.values())
    # mmvq, matvec per type; mmvq_qx, mmvq_st and mmvq_st_qx per quantized type; quantize_q8
    assert len(names) == (len(QUANT_TABLE) + 3 * quantized + 1) * matvec.MAX_NT
    assert names <= cuda.STAMPED


def test_geometry_is_one_warp_per_row_or_wpr_for_few_rows() -> None:
    g = matvec.geometry(14336, 4096)
    assert g.block == (32, 1, matvec.ROWS_PER_BLOCK)
    assert g.grid[0] * matvec.ROWS_PER_BLOCK >= 14336 > (g.grid[0] - 1) * matvec.ROWS_PER_BLOCK
    assert matvec.geometry(1, 32).grid == (1, 1, 1) and matvec.geometry(1, 32).block[1] == 1
    g = matvec.geometry(896, 4864)  # a 0.5B model's ffn_down: 896 rows, 8 warps each
    assert g.block == (32, 8, 1) and g.grid == (896, 1, 1)
    assert matvec.geometry(896, 896).block[1] == 2  # 112 chunks a row: 64 lanes at most
    for n, k in ((896, 896), (128, 4096), (4096, 14336), (151936, 896)):
        g = matvec.geometry(n, k)
        wpr, rows = g.block[1], g.block[2]
        assert wpr * rows <= 8 and g.grid[0] * rows >= n
        assert wpr == 1 or 32 * wpr <= k // 8  # every lane has a chunk


def test_block_sizes_of_float_types_are_eight_values() -> None:
    assert matvec.block_sizes(quant_type("F32")) == (32, 8)
    assert matvec.block_sizes(quant_type("BF16")) == (16, 8)
    assert matvec.block_sizes(quant_type("Q6_K")) == (210, 256)


# -- path choice ------------------------------------------------------------------------------
def _w(cached_as: str | None, qt: str = "Q4_0") -> MatmulWeight:
    return MatmulWeight(None, quant_type(qt), (4, 32), object() if cached_as else None,
                        cached_as)  # fmt: skip


def test_choose_path() -> None:
    assert choose_path("quant", _w(None), 1) == "quant"
    assert choose_path("quant", _w(None), matvec.MAX_NT) == "quant"
    # a prefill on the quant path: the f16 GEMM, per call or cached
    assert choose_path("quant", _w(None), matvec.MAX_NT + 1) == "f16-per-call"
    assert choose_path("quant", _w("f16"), 512) == "f16-cached"
    # on mmq a prefill of a block-quantized weight stays on the GGUF blocks (quantize_q8 + mmq),
    # the w16 cache or not
    assert choose_path("mmq", _w(None), 1) == "quant"
    assert choose_path("mmq", _w(None), matvec.MAX_NT + 1) == "quant"
    assert choose_path("mmq", _w("f16"), 512) == "quant"
    # a float weight has no quant kernel past MAX_NT: the f16 path
    assert choose_path("mmq", _w(None, "F16"), matvec.MAX_NT) == "quant"
    assert choose_path("mmq", _w(None, "F16"), matvec.MAX_NT + 1) == "f16-per-call"
    assert choose_path("mmq", _w("f16", "BF16"), matvec.MAX_NT + 1) == "f16-cached"
    assert choose_path("f16", _w(None), 1) == "f16-per-call"
    assert choose_path("f16", _w("f16"), 1) == "f16-cached"
    assert choose_path("f32", _w("f32"), 300) == "f32"
    with pytest.raises(KernelInputError, match="f32 copy"):
        choose_path("f32", _w(None), 1)


def test_w16_cache_rule_is_the_seeds() -> None:
    big, small = matmul.W16_CACHE_AUTO_BYTES, matmul.W16_CACHE_AUTO_BYTES - 1
    assert w16_cache_on("f16", "auto", big) and not w16_cache_on("f16", "auto", small)
    assert not w16_cache_on("quant", "auto", big)
    assert w16_cache_on("quant", "on", 1) and not w16_cache_on("f16", "off", big)


def test_modes_are_checked() -> None:
    with pytest.raises(ValueError, match="--matmul 'int8'"):
        get_backend("numpy", "int8")
    with pytest.raises(ValueError, match="--w16-cache 'maybe'"):
        get_backend("numpy", None, "maybe")
    assert get_backend("numpy").matmul_mode == "f32"


# -- the paths on the NumPy backend -----------------------------------------------------------
@pytest.mark.parametrize(
    "mode, cache, nt, path, kernels",
    [
        ("f32", "auto", 3, "f32", ["numpy_matmul_f32"]),
        ("quant", "auto", 3, "quant",
         ["numpy_quantize_q8", "numpy_mmvq_q4_k"] if quant_type("Q4_K").mmvq.prequantize else ["numpy_mmvq_q4_k"]),
        # a prefill: the f16 GEMM on the quant path, quantize_q8 + mmq (the same q8 product) on mmq
        ("quant", "auto", 9, "f16-per-call",
         ["convert_f32_f16", "dequant_q4_k_f16", "numpy_matmul_f32"]),
        ("mmq", "auto", 3, "quant",
         ["numpy_quantize_q8", "numpy_mmvq_q4_k"] if quant_type("Q4_K").mmvq.prequantize else ["numpy_mmvq_q4_k"]),
        ("mmq", "auto", 9, "quant", ["numpy_quantize_q8", "numpy_mmq_q4_k"]),
        ("mmq", "auto", 130, "quant", ["numpy_quantize_q8", "numpy_mmq_q4_k"]),
        ("f16", "off", 1, "f16-per-call",
         ["convert_f32_f16", "dequant_q4_k_f16", "numpy_matmul_f32"]),
        ("f16", "on", 1, "f16-cached", ["convert_f32_f16", "numpy_matmul_f32"]),
    ],
)  # fmt: skip
def test_numpy_backend_runs_the_path_it_names(mode, cache, nt, path, kernels) -> None:
    qt = quant_type("Q4_K")
    n, k = 6, 512
    raw, w64 = weight(qt, n, k, tame=True)
    be = get_backend("numpy", mode, cache)
    w = be.matmul_weight(raw, qt, (n, k), be.w16_cache_on(1 << 40))
    load = be.take_records()
    x = random_x(nt, k)
    got = be.matmul(x, w)
    recs = be.take_records()
    assert [r.kernel for r in recs] == kernels
    assert {r.extra["path"] for r in recs} == {path}
    want, scale = oracle(x, w64)
    if path.startswith("f16"):  # both operands rounded to f16, f32 sums
        x16 = x.astype(np.float16).astype(np.float64)
        w16 = w64.astype(np.float16).astype(np.float64)
        want, scale = x16 @ w16.T, np.abs(x16) @ np.abs(w16).T
        assert [r.kernel for r in load] == (["dequant_q4_k_f16"] if path == "f16-cached" else [])
    if path == "quant":  # the q8 activations' product (the tests of ref_mmvq below bound it)
        want, scale = q8_oracle(x, w64)
    assert np.all(np.abs(got - want) <= gamma(k) * scale)


@pytest.mark.parametrize(
    "mode, nt, fused",
    [("f32", 3, False), ("quant", 3, True), ("quant", 9, False), ("mmq", 9, False),
     ("f16", 1, False)],
)  # fmt: skip
def test_a_bias_is_the_epilogue_on_mmvq_and_add_bias_after_a_gemm(mode, nt, fused) -> None:
    """Backend.matmul(x, w, bias): on mmvq/matvec the bias is the kernel's (one launch, its
    record says ``epilogue: bias``); on every other path ``add_bias_f32`` is the node's last
    launch. Either way out = (x W^T) + b, the same f32 add, on the path the records name."""
    qt = quant_type("Q4_K")
    n, k = 6, 512
    raw, _ = weight(qt, n, k, tame=True)
    be = get_backend("numpy", mode, "off")
    w = be.matmul_weight(raw, qt, (n, k))
    be.take_records()
    x, b = random_x(nt, k), np.linspace(-3, 3, n, dtype=np.float32)
    plain = be.matmul(x, w)
    recs0 = be.take_records()
    got = be.matmul(x, w, b)
    recs = be.take_records()
    assert np.array_equal(got, (plain + b).astype(np.float32))
    assert len({r.extra["path"] for r in recs}) == 1
    if fused:
        assert [r.kernel for r in recs] == [r.kernel for r in recs0]
        assert recs[-1].extra["epilogue"] == "bias"
        assert recs[-1].bytes_read == recs0[-1].bytes_read + 4 * n
    else:
        assert [r.kernel for r in recs] == [r.kernel for r in recs0] + ["add_bias_f32"]
    with pytest.raises(KernelInputError, match=r"bias is float32 \(5,\)"):
        be.matmul(x, w, b[:5])


# -- mmvq: 8-bit activations ------------------------------------------------------------------
def q8_oracle(x: np.ndarray, w64: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W @ x8 in float64, sum |W| |x8|): the exact product with x as quantize_q8 rounds it
    (x8 = d q), from gguf-py's values; ref_mmvq computes it in f32 terms per group of 16."""
    q, d, _ = matvec.quantize_q8(x)
    x8 = q.astype(np.float64) * np.repeat(d.astype(np.float64), 32, axis=1)
    return x8 @ w64.T, np.abs(x8) @ np.abs(w64).T


def test_quantize_q8_rounds_each_run_to_its_own_scale() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 256)) * rng.uniform(0.01, 100, (3, 256))).astype(np.float32)
    x[0, 32:64] = 0.0  # a run of zeros: d = 0, q = 0
    x[1, 64:96] *= 1e-30  # tiny, still normal-range products
    x[2, 100] = np.nan  # its run is poisoned
    x[2, 200] = -np.inf
    q, d, qsum = matvec.quantize_q8(x)
    assert q.dtype == np.int8 and d.dtype == np.float32 and qsum.dtype == np.int32
    r = x.reshape(3, 8, 32).astype(np.float64)
    ok = np.isfinite(r).all(-1)
    assert not ok[2, 3] and not ok[2, 6] and ok.sum() == 22
    amax = np.where(ok, np.abs(np.where(np.isfinite(r), r, 0)).max(-1), 0)
    assert np.array_equal(d[ok], (amax[ok].astype(np.float32) / np.float32(127)))
    assert np.isnan(d[~ok]).all() and (q.reshape(3, 8, 32)[~ok] == 0).all()
    assert d[0, 1] == 0 and not q[0, 32:64].any()
    qq = q.reshape(3, 8, 32).astype(np.float64)
    assert np.abs(qq).max() <= 127 and (np.abs(qq).max(-1)[ok & (amax > 0)] == 127).all()
    # round to nearest: |x - d q| <= d / 2 for every value of a finite run
    err = np.abs(r - qq * d[..., None].astype(np.float64))[ok]
    assert (err <= d[ok][:, None] * (0.5 + 1e-6)).all()
    inv = np.float32(127) / amax[ok & (amax > 0)].astype(np.float32)
    assert np.array_equal(
        qq[ok & (amax > 0)], np.rint(r[ok & (amax > 0)].astype(np.float32) * inv[:, None])
    )
    assert np.array_equal(qsum, q.reshape(3, 16, 16).sum(-1))


QTYPES = [t for t in TYPES if t.is_quantized]


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
@pytest.mark.parametrize("n, nt", [(1, 1), (7, 3), (33, 8)])
def test_ref_mmvq_is_the_q8_product_of_the_gguf_values(qt: QuantType, n: int, nt: int) -> None:
    k = 3 * qt.block_size if qt.block_size > 32 else 96
    raw, w64 = weight(qt, n, k, seed=n)
    x = random_x(nt, k, seed=nt)
    got, rec, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert got.dtype == np.float32 and got.shape == (nt, n)
    want, scale = q8_oracle(x, w64)
    # each group's term is two or three f32 roundings from its exact value, then k / 16 sums
    assert np.all(np.abs(got - want) <= gamma(k // 16 + 3) * scale)
    assert np.all(mag <= scale * (1 + 1e-5))  # a group's |term| <= its sum |W| |x8|
    # against the exact x: the activation rounding is at most d / 2 a value
    exact, _ = oracle(x, w64)
    _, d, _ = matvec.quantize_q8(x)
    half = np.repeat(d.astype(np.float64), 32, axis=1) / 2
    assert np.all(np.abs(got - exact) <= half @ np.abs(w64).T * 1.001 + gamma(k) * scale)
    assert rec.kernel == f"numpy_mmvq_{qt.suffix}" and rec.extra["path"] == "quant"
    assert rec.extra["math_path"] == matvec.MATH_MMVQ
    assert rec.bytes_read == raw.nbytes + x.nbytes and rec.flops == 2 * nt * n * k


def test_ref_mmvq_bound_catches_one_wrong_code() -> None:
    """Negative control of the GPU test's bound (gamma(k / 16 + 40) of sum |terms|): one code
    off by one step in one group is far outside it."""
    qt = quant_type("Q4_K")
    n, k = 3, 4096
    raw, _ = weight(qt, n, k, seed=4, tame=True)  # d, dmin alike (random ones: dmin >> d)
    x = random_x(1, k)
    got, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    bad = raw.copy()
    blk = (k + 1024) // qt.block_size  # row 1
    bad[blk * qt.type_size + 16 + 5] ^= 0x01  # one low nibble of qs: one code +-1
    wrong, _ = matvec.ref_mmvq(x, bad, qt, (n, k))
    assert np.abs(wrong - got)[0, 1] > gamma(k // 16 + 40) * mag[0, 1]
    assert np.array_equal(wrong[0, [0, 2]], got[0, [0, 2]])


def test_ref_mmvq_nan_activation_poisons_only_outputs_it_feeds() -> None:
    qt = quant_type("Q8_0")
    raw, _ = weight(qt, 4, 128)
    x = random_x(2, 128)
    x[1, 40] = np.nan
    got, _ = matvec.ref_mmvq(x, raw, qt, (4, 128))
    assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()


def test_ref_mmvq_refuses_float_weights() -> None:
    with pytest.raises(KernelInputError, match="block-quantized"):
        matvec.ref_mmvq(random_x(1, 64), np.zeros(256, np.uint8), quant_type("F32"), (1, 64))


def test_mmvq_shared_memory_and_grid_cap() -> None:
    # 448 runs of 32 values, 48 bytes each, and 16 bytes after each 8 (56 groups)
    assert matvec.mmvq_shared_bytes(1, 14336) == 448 * 48 + 56 * 16
    geo, smem = matvec.mmvq_geometry(151936, 896, 1, sms=132)
    assert smem == matvec.mmvq_shared_bytes(1, 896)
    full = matvec.geometry(151936, 896, matvec.MMVQ_ROWS_PER_BLOCK)
    assert geo.block == full.block
    threads = geo.block[0] * geo.block[1] * geo.block[2]
    assert geo.grid[0] == 132 * (32 * MMVQ_DEFAULT.warps_per_sm // threads) < full.grid[0]
    assert geo.strided
    geo, _ = matvec.mmvq_geometry(4, 896, 1, sms=132)  # few rows: no cap reached
    assert geo.grid == matvec.geometry(4, 896, matvec.MMVQ_ROWS_PER_BLOCK).grid


def test_prequantize_only_for_large_weights() -> None:
    """A type declared prequantize (Q4_1) takes the two-launch pair for weights of at least
    PREQUANTIZE_MIN_VALUES values, the one fused launch below (a small decode matvec); a type
    not declared so never; an explicit choice wins. The NumPy backend records what the GPU
    launches."""
    q41, q4k = quant_type("Q4_1"), quant_type("Q4_K")
    big = matvec.PREQUANTIZE_MIN_VALUES
    assert q41.mmvq.prequantize and not q4k.mmvq.prequantize
    assert matvec.prequantizes(q41, big // 4096, 4096)
    assert not matvec.prequantizes(q41, big // 4096 - 1, 4096)
    assert not matvec.prequantizes(q41, 576, 576)  # SmolLM2's q
    assert not matvec.prequantizes(q4k, 14336, 4096)
    assert matvec.prequantizes(q41, 576, 576, prequantize=True)
    be = get_backend("numpy", "quant")
    for n, want in ((576, ["numpy_mmvq_q4_1"]), (4096, ["numpy_quantize_q8", "numpy_mmvq_q4_1"])):
        k = 4096
        raw, _ = weight(q41, n, k, seed=1)
        w = be.matmul_weight(raw, q41, (n, k))
        be.take_records()
        be.matmul(random_x(1, k), w)
        assert [r.kernel for r in be.take_records()] == want


@pytest.mark.parametrize("rpw", [1, 2, 4])
def test_mmvq_geometry_counts_rows_per_warp(rpw: int) -> None:
    """R rows a warp: the grid covers ceil(n / R) warps' rows (ceil-div, so the last warp may
    hold fewer), capped as before; other counts are refused by name."""
    for n in (1, 5, 37, 4099):
        geo, _ = matvec.mmvq_geometry(n, 4096, 1, sms=132, rows_per_warp=rpw, warps_per_sm=24)
        rows, threads = geo.block[2], geo.block[0] * geo.block[1] * geo.block[2]
        assert geo.grid[0] == min(-(-n // (rows * rpw)), 132 * max(1, 24 * 32 // threads))
        assert geo.grid[0] * rows * rpw >= n or geo.strided
    with pytest.raises(ValueError, match="rows per warp 3 must be 1, 2 or 4"):
        matvec.mmvq_geometry(64, 4096, 1, sms=132, rows_per_warp=3)


def test_balanced_warps_per_row_evens_the_last_round() -> None:
    """mmvq's grid is capped (rows grid-strided): 4096 rows on 396 blocks of 8 warps (K-quants,
    24 warps an SM, 132 SMs) are 2 rows for 928 warps and 1 for the rest at one warp a row;
    two warps a row make it at most 3 half rows (1.5). Where rows divide evenly (14336 rows:
    5 either way) or few rows fill no round, the count is warps_per_row's."""
    cap = 132 * 3 * 8
    assert matvec.balanced_wpr(4096, 4096, cap) == 2
    assert matvec.balanced_wpr(4096, 14336, cap) == 2
    assert matvec.balanced_wpr(28672, 4096, cap) == 2  # 10 rounds -> 9.5
    assert matvec.balanced_wpr(14336, 4096, cap) == 1
    assert matvec.balanced_wpr(6144, 4096, cap) == 1
    for n, k in ((896, 896), (896, 4864), (151936, 896), (576, 576)):
        assert matvec.balanced_wpr(n, k, cap) == matvec.warps_per_row(n, k)
    assert matvec.balanced_wpr(4096, 2048, cap) == 1  # 2 warps would leave lanes no chunk
    geo, _ = matvec.mmvq_geometry(4096, 4096, 1, sms=132, warps_per_sm=24)
    assert geo.block == (32, 2, 4) and geo.grid == (396, 1, 1)
    old, _ = matvec.mmvq_geometry(4096, 4096, 1, sms=132, wpr=1, warps_per_sm=24)
    assert old.block == (32, 1, 8) and old.grid == (396, 1, 1)  # an explicit count is kept


def test_staged_declaration_reads_the_row_length(monkeypatch):
    """mmvq_st runs where the type's declaration says: large weights of a staged type, and for
    Q4_0 only rows of k >= its staged_min_k (the 0.5B output's k = 896 ran faster unstaged),
    Q2_K only rows of k >= 4096 (the lengths timed staged and faster; shorter ones untimed)."""
    from tracekit.quants import quant_type

    monkeypatch.setattr(matvec, "_has_bulk_copy", lambda: True)
    monkeypatch.setattr(matvec, "STAGED_OVERRIDE", None)
    q4_0, q8_0, q2_k = quant_type("Q4_0"), quant_type("Q8_0"), quant_type("Q2_K")
    assert q4_0.mmvq.staged_min_k > 896
    assert not matvec.stages_weight(q4_0, 151936, 896)
    assert matvec.stages_weight(q4_0, 14336, 4096)
    assert matvec.stages_weight(q8_0, 151936, 896)
    assert not matvec.stages_weight(q8_0, 896, 896)  # under STAGED_MIN_VALUES
    assert not matvec.stages_weight(q2_k, 14336, 2048)  # k under Q2_K's staged_min_k
    assert matvec.stages_weight(q2_k, 4096, 14336) and matvec.stages_weight(q2_k, 14336, 4096)
    assert matvec.stages_weight(q2_k, 14336, 2048, staged=True)  # asked for: runs it
    assert not matvec.stages_weight(q2_k, 4096, 14336, staged=False)
    assert matvec.stages_weight(quant_type("Q3_K"), 14336, 4096)
    monkeypatch.setattr(matvec, "_has_bulk_copy", lambda: False)
    assert not matvec.stages_weight(q8_0, 14336, 4096)


def test_x_held_comes_from_the_declaration_unless_the_environment_sets_it(monkeypatch) -> None:
    """mmvq_st's x held in registers (MMVQ_ST_XREG) is a type's declaration (timed faster with
    it: all but Q5_0 and Q5_1; Q5_K with two rows a warp), which its staged module compiles with; a
    TRACEKIT_CUDA_DEFINES value (an A/B) replaces it for every type, and the declaration's
    option is then left out, so the module is built with the one the launch records name."""
    held = {t.name: matvec.x_held(t) for t in QUANT_TABLE.values() if t.is_quantized}
    assert {name for name, v in held.items() if v == 0} == {"Q5_0", "Q5_1"}
    assert held["Q4_0"] == held["Q6_K"] == held["Q8_0"] == 128
    for name, want in (("Q4_0", ("-DMMVQ_ST_XREG=128",)), ("Q5_0", ())):
        _, opts = matvec.module_source(quant_type(name).suffix, 1, 0, staged=True)
        assert tuple(o for o in opts if o.startswith("-DMMVQ_ST_XREG")) == want
    monkeypatch.setattr(cuda, "EXTRA_DEFINES", ("-DMMVQ_ST_XREG=0",))
    assert matvec.x_held(quant_type("Q4_0")) == 0 and matvec.x_held(quant_type("Q5_0")) == 0
    assert matvec.x_held_option(quant_type("Q4_0")) == ()


#: an H100's SMs and shared memory a block may opt into (the staged launch's device limits)
H100_SMS, H100_SMEM = 132, 227 * 1024


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_staged_blocks_are_the_types_declaration_and_fit_every_shape(qt: QuantType) -> None:
    """A staged launch's blocks come from the type's StagedShape (two rows a warp on 4-warp
    blocks for Q4_0, 8-warp for Q2_K, ...): at 14336 x 4096 with one token, the declared rows a
    warp, warps a block and blocks an SM exactly; at every shape the engine stages (long rows
    taking other blocks or more warps a row) and 1 to 8 tokens, a launch that fits: at most 8 warps a block,
    tiles of whole steps of its rows times the rows a warp, stages and x within the block's
    shared memory (staged_geometry raises where they are not)."""
    declared = qt.mmvq.staged_shape
    bps, rpw, w, rb, per_launch = matvec.staged_blocks(qt, 1, 4096, H100_SMEM)
    assert (bps, rpw, w * rb, per_launch) == (
        declared.blocks_per_sm, declared.rows_per_warp, declared.block_warps, 1)  # fmt: skip
    shapes = [(14336, 4096), (4096, 14336), (151936, 896), (896, 4864), (57344, 4096)]
    for n, k in ((n, k) for n, k in shapes if k % qt.block_size == 0):
        for nt in range(1, matvec.MAX_NT + 1):
            bps, rpw, w, rb, per_launch = matvec.staged_blocks(qt, nt, k, H100_SMEM)
            assert w * rb <= 8 and 1 <= per_launch <= nt
            geo, smem, _, _, rpt = matvec.staged_geometry(
                n, k, per_launch, qt, H100_SMS, H100_SMEM, None, None, bps, w, rb, rpw
            )  # fmt: skip
            assert geo.block == (32, w, rb) and rpt % (rb * rpw) == 0
            assert smem <= matvec._per_block_shared(bps), (n, k, nt)


def test_staged_blocks_given_replace_the_declaration() -> None:
    """bench_mmvq_staged's --st-shape and a launch's own arguments: StagedShape(1, 8, 2) gives
    the blocks every type had before it declared its own (one row a warp, 8 warps, 2 an SM),
    and a launch's blocks_per_sm / rows_per_warp / rows_per_block override each part."""
    q4_0 = quant_type("Q4_0")
    assert q4_0.mmvq.staged_shape != StagedShape()
    assert matvec.staged_blocks(q4_0, 1, 4096, H100_SMEM, blocks=StagedShape()) == (2, 1, 1, 8, 1)
    assert matvec.staged_blocks(q4_0, 1, 4096, H100_SMEM, None, 2, 3, 1) == (3, 1, 1, 2, 1)


def test_declared_blocks_give_way_on_rows_longer_than_they_were_timed_on() -> None:
    """A type's declared blocks were timed at 14336 x 4096, one warp a row. Where a row's two
    stages and x need more warps a row at them (Q4_0 at k = 14336 and 8192: 4 blocks an SM
    leave 57 KB a block), the launch takes the blocks timed on such rows, StagedShape(), and
    only then more warps a row; a row that fits keeps the declaration (Q2_K's 8-warp blocks at
    k = 8192), and blocks or warps a row given explicitly keep it (more warps a row instead)."""
    q4_0, q2_k = quant_type("Q4_0"), quant_type("Q2_K")
    assert matvec.staged_blocks(q4_0, 1, 14336, H100_SMEM) == (2, 1, 2, 4, 1)
    assert matvec.staged_blocks(q4_0, 1, 8192, H100_SMEM) == (2, 1, 1, 8, 1)
    assert matvec.staged_blocks(q2_k, 1, 8192, H100_SMEM) == (2, 2, 1, 8, 1)
    given = q4_0.mmvq.staged_shape
    assert matvec.staged_blocks(q4_0, 1, 14336, H100_SMEM, blocks=given)[:3] == (4, 2, 4)
    assert matvec.staged_blocks(q4_0, 1, 14336, H100_SMEM, wpr=4)[:4] == (4, 2, 4, 1)
    assert matvec.staged_blocks(q4_0, 1, 4096, H100_SMEM, wpr=2)[:4] == (4, 2, 2, 2)

"""GPU tests of the quant path's matvec kernels and the f16 paths (marked ``gpu``).

Run on a GPU host:  python3 -m pytest -m gpu tests/kernels/test_matvec_gpu.py

mmvq (block-quantized weights): against ref_mmvq, whose per-group terms the kernel rounds
identically but for the K-quants (their integer scales: d and dmin once an item, a few ulps of
the item's sum |term| apart); otherwise only the summation order differs, so |gpu - ref| <=
gamma(k / 16 + 40) of sum |terms| (test_matvec.py's negative control: one code off by one step
fails it).

matvec (float weights): x @ W.T in float64 on gguf-py's own dequantized values. The values are exact
(the decoders are bit-equal to gguf-py) and each lane sums at most 8 * ceil(k / 256) products in
f32, then 5 shuffle levels, so |gpu - oracle| <= gamma(8 ceil(k/256) + 6) * sum |x| |w|: tight
enough that one value off by one code step fails (test_matvec.py's negative control). Outputs
are poisoned with NaN before every launch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.kernels.test_matvec import TYPES, gamma, oracle, random_x, weight
from tracekit.kernels import matmul, matvec
from tracekit.kernels.backend import get_backend
from tracekit.kernels.checks import KernelInputError
from tracekit.quants import QuantType, StagedShape, quant_type

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def poisoned(cp, shape):
    out = cp.empty(shape, cp.float32)
    out.view(cp.uint8).fill(0xFF)
    return out


def on_device_at(cp, raw: np.ndarray, offset: int):
    buf = cp.empty(raw.size + offset, cp.uint8)
    view = buf[offset:]
    view.set(raw)
    return view


def kernel_bound(k: int, scale: np.ndarray) -> np.ndarray:
    return gamma(8 * math.ceil(k / 256) + 6) * scale


# rows: 1, not a multiple of ROWS_PER_BLOCK, large; k: one block, odd block counts, 4096
CASES = [(1, 1), (37, 3), (5, 8), (301, 2), (1024, 1)]


QTYPES = [t for t in TYPES if t.is_quantized]
FTYPES = [t for t in TYPES if not t.is_quantized]


def mmvq_bound(k: int, mag: np.ndarray) -> np.ndarray:
    return gamma(k // 16 + 40) * mag


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
@pytest.mark.parametrize("n, nt", CASES)
@pytest.mark.parametrize("qx", [True, False], ids=["qx", "fused"])
def test_mmvq_matches_its_reference(cp, qt: QuantType, n: int, nt: int, qx: bool):
    k = {1: 4096, 37: 3 * qt.block_size, 5: qt.block_size * 9, 301: 2816, 1024: 256}[n]
    k = max(k // qt.block_size, 1) * qt.block_size
    raw, _ = weight(qt, n, k, seed=n + nt, tame=True)
    x = random_x(nt, k, seed=nt)
    out = poisoned(cp, (nt, n))
    got, recs = matvec.launch_matvec(
        cp.asarray(x), cp.asarray(raw), qt, (n, k), out, prequantize=qx
    )
    assert got is out
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    err = np.abs(cp.asnumpy(got) - want)
    assert np.all(err <= mmvq_bound(k, mag)), (float(np.nanmax(err / mag)), n, k, nt)
    if qx:
        assert [r.kernel for r in recs] == [f"quantize_q8_n{nt}", f"mmvq_qx_{qt.suffix}_n{nt}"]
        geo = matvec.geometry(n, k, matvec.MMVQ_ROWS_PER_BLOCK)
        assert recs[1].grid == geo.grid and recs[1].block == geo.block
        assert {r.extra["path"] for r in recs} == {"quant"}
        return
    geo, smem = matvec.mmvq_geometry(n, k, nt, matvec._device_limits()[0])
    assert [r.kernel for r in recs] == [f"mmvq_{qt.suffix}_n{nt}"]
    assert recs[0].grid == geo.grid and recs[0].block == geo.block
    assert recs[0].extra["path"] == "quant" and recs[0].extra["shared_bytes"] == smem


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
@pytest.mark.parametrize("n, nt", [(1, 1), (37, 3), (5, 8), (301, 2), (1024, 1), (4099, 1)])
@pytest.mark.parametrize("rpw, unroll", [(2, 1), (4, 1), (1, 2), (1, 4), (2, 2)])
def test_mmvq_rows_per_warp_gives_the_same_bits(
    cp, qt: QuantType, n: int, nt: int, rpw: int, unroll: int
):
    """R rows a warp (one read of x from shared memory for R rows' items) and U items fetched
    a lane before the first is decoded: each row's terms are summed in the one-row, one-item
    kernel's order, so the outputs are its bits, for row counts that leave a warp's last rows
    outside the matrix (n % R != 0), in both variants; poisoned."""
    k = {1: 4096, 37: 3 * qt.block_size, 5: qt.block_size * 9, 301: 2816, 1024: 256}.get(n, 512)
    k = max(k // qt.block_size, 1) * qt.block_size
    raw, _ = weight(qt, n, k, seed=n + nt + 1, tame=True)
    x = cp.asarray(random_x(nt, k, seed=nt + 1))
    w = cp.asarray(raw)
    want, _, mag = matvec.ref_mmvq(cp.asnumpy(x), raw, qt, (n, k), bound=True)
    for qx in (False, True):
        one, _ = matvec.launch_matvec(
            x, w, qt, (n, k), poisoned(cp, (nt, n)), prequantize=qx, rows_per_warp=1, unroll=1
        )
        got, recs = matvec.launch_matvec(
            x, w, qt, (n, k), poisoned(cp, (nt, n)), prequantize=qx, rows_per_warp=rpw,
            unroll=unroll,
        )  # fmt: skip
        assert cp.asnumpy(got).view(np.uint32).tolist() == cp.asnumpy(one).view(np.uint32).tolist()
        assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))
        if not qx:
            geo, _ = matvec.mmvq_geometry(
                n, k, nt, matvec._device_limits()[0], rows_per_warp=rpw,
                warps_per_sm=qt.mmvq.warps_per_sm,
            )  # fmt: skip
            assert recs[0].grid == geo.grid and recs[0].block == geo.block


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
@pytest.mark.parametrize("n, nt", [(1, 1), (37, 3), (5, 8), (301, 2), (1024, 1), (4099, 1)])
@pytest.mark.parametrize(
    "rows_per_tile, stages, wpr, bps, rb",
    [(None, None, None, None, None), (1, 2, 8, 3, None), (4, 3, 2, 2, None),
     (16, 2, 1, 1, None), (8, 4, 1, 1, None), (2, 2, 1, 6, 2), (4, 2, 1, 4, 4)],
)  # fmt: skip
@pytest.mark.parametrize("qx", [False, True], ids=["fused", "qx"])
def test_mmvq_staged_gives_mmvqs_bits(
    cp, qt: QuantType, n: int, nt: int, rows_per_tile, stages, wpr, bps, rb, qx: bool
):
    """mmvq_st (tiles staged by the bulk-copy engine, the stage ring wrapping on a one-wave
    grid) computes mmvq's terms in mmvq's order: the fused mmvq's bits at the same warps per
    row, for weights whose rows and whole size fall off the 16-byte grid; poisoned outputs.
    Blocks of 8 warps and of fewer (rb rows a block: 2 and 4), at one row a warp; the first
    configuration at the type's declared blocks (rows a warp included). qx: x quantized by its
    own launch (quantize_q8_n<nt>) and bulk-copied in by mmvq_st_qx: the same bits."""
    k = {1: 4096, 37: 3 * qt.block_size, 5: qt.block_size * 9, 301: 2816, 1024: 256}.get(n, 512)
    k = max(k // qt.block_size, 1) * qt.block_size
    raw, _ = weight(qt, n, k, seed=n + nt + 2, tame=True)
    x = cp.asarray(random_x(nt, k, seed=nt + 2))
    w = cp.asarray(raw)
    got, recs = matvec.launch_matvec(
        x, w, qt, (n, k), poisoned(cp, (nt, n)), staged=True, rows_per_tile=rows_per_tile,
        stages=stages, wpr=wpr, blocks_per_sm=bps, rows_per_block=rb, prequantize=qx,
        rows_per_warp=None if rows_per_tile is None else 1,
    )  # fmt: skip
    names = [f"quantize_q8_n{nt}", f"mmvq_st_qx_{qt.suffix}_n{nt}"] if qx else [
        f"mmvq_st_{qt.suffix}_n{nt}"]  # fmt: skip
    assert [r.kernel for r in recs] == names
    declared = qt.mmvq.staged_shape
    assert recs[-1].block[2] == (rb or max(1, declared.block_warps // recs[-1].block[1]))
    assert recs[-1].extra["blocks_per_sm"] == (
        declared.blocks_per_sm if rows_per_tile is None else bps
    )
    assert recs[-1].extra["rows_per_warp"] == (
        declared.rows_per_warp if rows_per_tile is None else 1
    )
    assert all(r.extra["path"] == "quant" for r in recs)
    wpr = recs[-1].block[1]
    same, _ = matvec.launch_matvec(
        x, w, qt, (n, k), poisoned(cp, (nt, n)), prequantize=False, wpr=wpr
    )
    assert cp.asnumpy(got).view(np.uint32).tolist() == cp.asnumpy(same).view(np.uint32).tolist()
    want, _, mag = matvec.ref_mmvq(cp.asnumpy(x), raw, qt, (n, k), bound=True)
    assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
@pytest.mark.parametrize("n, nt", [(37, 3), (301, 2), (4099, 1)])
@pytest.mark.parametrize("rpw", [2, 4])
@pytest.mark.parametrize("fewer_warps", [False, True], ids=["8warps", "8/Rwarps"])
def test_mmvq_staged_rows_walked_together_give_mmvqs_bits(
    cp, qt: QuantType, n: int, nt: int, rpw: int, fewer_warps: bool
):
    """mmvq_st with R rows a warp walks together (MMVQ_ST_RPW, x read once for them): mmvq's
    bits, for row counts whose last tile has rows past the matrix (n % 8R != 0), blocks of 8
    warps (tiles of 8R rows, or more warps a row where two such stages do not fit) and of 8 / R
    warps (the default's tiles); poisoned outputs."""
    k = {37: 3 * qt.block_size, 301: 2816, 4099: 4096}[n]
    k = max(k // qt.block_size, 1) * qt.block_size
    raw, _ = weight(qt, n, k, seed=n + nt + rpw, tame=True)
    x = cp.asarray(random_x(nt, k, seed=nt + rpw))
    w = cp.asarray(raw)
    got, recs = matvec.launch_matvec(
        x, w, qt, (n, k), poisoned(cp, (nt, n)), staged=True, prequantize=False,
        rows_per_warp=rpw, rows_per_block=8 // rpw if fewer_warps else None,
        staged_shape=None if fewer_warps else StagedShape(rpw, 8, matvec.STAGED_BLOCKS_PER_SM),
    )  # fmt: skip
    assert [r.kernel for r in recs] == [f"mmvq_st_{qt.suffix}_n{nt}"]
    rec = recs[0]
    assert rec.extra["rows_per_warp"] == rpw
    assert rec.extra["rows_per_tile"] % (rec.block[2] * rpw) == 0
    same, _ = matvec.launch_matvec(
        x, w, qt, (n, k), poisoned(cp, (nt, n)), prequantize=False, wpr=rec.block[1]
    )
    assert cp.asnumpy(got).view(np.uint32).tolist() == cp.asnumpy(same).view(np.uint32).tolist()
    want, _, mag = matvec.ref_mmvq(cp.asnumpy(x), raw, qt, (n, k), bound=True)
    assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))


@pytest.mark.parametrize(
    "qt", [quant_type(t) for t in ("Q8_0", "Q4_K", "Q6_K")], ids=lambda t: t.name
)
@pytest.mark.parametrize("k", [14336, 28672])
@pytest.mark.parametrize("qx", [False, True], ids=["fused", "qx"])
def test_mmvq_staged_at_long_rows_and_many_tokens(cp, qt: QuantType, k: int, qx: bool):
    """8 tokens of long rows: x's runs (172 or 344 KB) and two stages of 8 rows do not fit a
    block's shared memory, so the launch takes fewer rows a block-row (more warps a row) and
    splits the tokens, each launch with at least two stages. mmvq's bits at the same warps a
    row. qx: one quantize_q8 launch for all tokens, each mmvq_st_qx launch copying its own
    tokens' runs."""
    n, nt = 300, 8
    raw, _ = weight(qt, n, k, seed=11, tame=True)
    x = cp.asarray(random_x(nt, k, seed=12))
    w = cp.asarray(raw)
    got, recs = matvec.launch_matvec(x, w, qt, (n, k), poisoned(cp, (nt, n)), staged=True,
                                     prequantize=qx)  # fmt: skip
    if qx:
        assert recs[0].kernel == f"quantize_q8_n{nt}"
        recs = recs[1:]
        assert all(r.kernel.startswith("mmvq_st_qx_") for r in recs)
    assert len(recs) > 1 and all(r.extra["stages"] >= 2 for r in recs)
    assert len({r.block for r in recs}) == 1 and recs[0].block[1] > 1
    same, _ = matvec.launch_matvec(
        x, w, qt, (n, k), poisoned(cp, (nt, n)), prequantize=False, wpr=recs[0].block[1]
    )
    assert cp.asnumpy(got).view(np.uint32).tolist() == cp.asnumpy(same).view(np.uint32).tolist()
    want, _, mag = matvec.ref_mmvq(cp.asnumpy(x), raw, qt, (n, k), bound=True)
    assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))


@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
def test_mmvq_on_wild_blocks_and_poisoned_activations(cp, qt: QuantType):
    """Raw random bytes (NaN/Inf scales) and a NaN activation: NaN exactly where the
    reference has it, the rest within the bound."""
    n, k = 19, 2 * qt.block_size if qt.block_size > 32 else 128
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, qt.nbytes((n, k)), dtype=np.uint8)
    x = random_x(3, k)
    x[2, 5] = np.nan
    with np.errstate(all="ignore"):
        want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    fin = np.isfinite(want) & np.isfinite(mag)
    for qx in (True, False):
        got, _ = matvec.launch_matvec(
            cp.asarray(x), cp.asarray(raw), qt, (n, k), poisoned(cp, (3, n)), prequantize=qx
        )
        g = cp.asnumpy(got)
        assert np.array_equal(np.isnan(g), np.isnan(want)) and np.isnan(g[2]).all()
        assert np.all(np.abs(g - want)[fin] <= mmvq_bound(k, mag)[fin])


@pytest.mark.parametrize("qt", TYPES, ids=[t.name for t in TYPES])
@pytest.mark.parametrize("nt", [1, 3, 8])
def test_a_bias_in_the_epilogue_is_the_unbiased_product_plus_add_bias(cp, qt: QuantType, nt):
    """mmvq (both variants) and matvec with a bias: bit for bit the same kernel without it
    followed by add_bias_f32's f32 add (the launch it replaces), one launch, its bias bytes
    and flops counted."""
    from tracekit.kernels.elementwise import launch_add_bias_f32

    n, k = 301, 8 * qt.block_size if qt.is_quantized else 264
    raw, _ = weight(qt, n, k, seed=nt, tame=True)
    x, dr = cp.asarray(random_x(nt, k, seed=nt)), cp.asarray(raw)
    bias = cp.asarray(np.random.default_rng(nt).standard_normal(n).astype(np.float32))
    for qx in (True, False) if qt.is_quantized else (None,):
        plain, recs0 = matvec.launch_matvec(
            x, dr, qt, (n, k), poisoned(cp, (nt, n)), prequantize=qx
        )
        want, _ = launch_add_bias_f32(plain.copy(), bias)
        got, recs = matvec.launch_matvec(
            x, dr, qt, (n, k), poisoned(cp, (nt, n)), prequantize=qx, bias=bias
        )
        assert np.array_equal(cp.asnumpy(got), cp.asnumpy(want)), (qt.name, qx)
        assert not np.array_equal(cp.asnumpy(got), cp.asnumpy(plain))
        assert [r.kernel for r in recs] == [r.kernel for r in recs0]
        last, last0 = recs[-1], recs0[-1]
        assert last.extra["epilogue"] == "bias" and "epilogue" not in last0.extra
        assert last.bytes_read == last0.bytes_read + 4 * n and last.flops == last0.flops + nt * n
    with pytest.raises(KernelInputError, match="bias"):
        matvec.launch_matvec(x, dr, qt, (n, k), bias=bias[:-1])


def test_mmvq_refuses_a_misaligned_weight(cp):
    qt = quant_type("Q4_0")
    raw, _ = weight(qt, 4, 64)
    with pytest.raises(KernelInputError, match="16-byte"):
        matvec.launch_matvec(cp.asarray(random_x(1, 64)), on_device_at(cp, raw, 2), qt, (4, 64))


def test_mmvq_splits_tokens_whose_x_does_not_fit_in_shared_memory(cp):
    qt = quant_type("Q8_0")
    sms, smem_max = matvec._device_limits()
    k = (smem_max // matvec.mmvq_shared_bytes(1, 32) // 3) * 32  # 3 tokens fit, 8 do not
    n, nt = 5, 8
    raw, _ = weight(qt, n, k, tame=True)
    x = random_x(nt, k)
    got, recs = matvec.launch_matvec(
        cp.asarray(x), cp.asarray(raw), qt, (n, k), poisoned(cp, (nt, n)), prequantize=False
    )
    per = smem_max // matvec.mmvq_shared_bytes(1, k)
    assert [r.kernel for r in recs] == [f"mmvq_q8_0_n{min(per, nt - t)}" for t in range(0, nt, per)]
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))


@pytest.mark.parametrize("k", [4096, 4096 + 256, 14336])
def test_mmvq_at_the_48_kb_shared_memory_edge(cp, k: int):
    """8 tokens of k = 4096: 48 KB of quantized x exactly, plus the kernel's static shared
    memory (an 8B model's 8-token prefill failed here with INVALID_VALUE before the opt-in
    counted the static part)."""
    qt = quant_type("Q4_K")
    n, nt = 24, 8
    raw, _ = weight(qt, n, k, tame=True)
    x = random_x(nt, k)
    got, recs = matvec.launch_matvec(
        cp.asarray(x), cp.asarray(raw), qt, (n, k), poisoned(cp, (nt, n)), prequantize=False
    )
    assert [r.kernel for r in recs] == ["mmvq_q4_k_n8"]
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag))


@pytest.mark.parametrize("qt", FTYPES, ids=[t.name for t in FTYPES])
@pytest.mark.parametrize("n, nt", CASES)
@pytest.mark.parametrize("offset", [0, 2])
def test_matvec_matches_the_float64_oracle(cp, qt: QuantType, n: int, nt: int, offset: int):
    k = {1: 4096, 37: 3 * max(qt.block_size, 32), 5: qt.block_size * 9 if qt.is_quantized else 72,
         301: 2816, 1024: 256}[n]  # fmt: skip
    k = max(k // qt.block_size, 1) * qt.block_size
    raw, w64 = weight(qt, n, k, seed=n + nt)
    x = random_x(nt, k, seed=nt)
    out = poisoned(cp, (nt, n))
    got, (rec,) = matvec.launch_matvec(
        cp.asarray(x), on_device_at(cp, raw, offset), qt, (n, k), out
    )
    assert got is out
    want, scale = oracle(x, w64)
    err = np.abs(cp.asnumpy(got).astype(np.float64) - want)
    assert np.all(err <= kernel_bound(k, scale)), (float(np.nanmax(err / scale)), n, k, nt)
    assert rec.kernel == f"matvec_{qt.suffix}_n{nt}" and rec.extra["path"] == "quant"
    assert rec.grid == matvec.geometry(n, k).grid and rec.block == matvec.geometry(n, k).block


@pytest.mark.parametrize("unroll", [1, 2, 8])
@pytest.mark.parametrize("rows, wpr", [(1, 1), (8, 1), (4, 2), (2, 4), (1, 8)])
def test_matvec_configurations_agree(cp, unroll: int, rows: int, wpr: int):
    for qt in (quant_type("Q4_K"), quant_type("Q3_K"), quant_type("F16")):
        n, k = 70, 2304
        raw, w64 = weight(qt, n, k, seed=5, tame=True)
        x = random_x(2, k)
        got, _ = matvec.launch_matvec(cp.asarray(x), cp.asarray(raw), qt, (n, k), poisoned(cp, (2, n)),
                                      rows_per_block=rows, unroll=unroll, wpr=wpr)  # fmt: skip
        if qt.is_quantized:
            want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
            assert np.all(np.abs(cp.asnumpy(got) - want) <= mmvq_bound(k, mag)), qt.name
        else:
            want, scale = oracle(x, w64)
            assert np.all(np.abs(cp.asnumpy(got) - want) <= kernel_bound(k, scale))


def test_matvec_gates(cp):
    qt = quant_type("Q8_0")
    raw = cp.asarray(weight(qt, 4, 64)[0])
    with pytest.raises(KernelInputError, match="1..8 tokens"):
        matvec.launch_matvec(cp.zeros((9, 64), cp.float32), raw, qt, (4, 64))
    with pytest.raises(KernelInputError, match="16-byte"):
        matvec.launch_matvec(cp.zeros(65, cp.float32)[1:].reshape(1, 64), raw, qt, (4, 64))
    with pytest.raises(KernelInputError, match="cupy array"):
        matvec.launch_matvec(np.zeros((1, 64), np.float32), raw, qt, (4, 64))


@pytest.mark.parametrize(
    "mode, cache, nt, path, kernels",
    [
        ("quant", "auto", 2, "quant",
         ["quantize_q8_n2", "mmvq_qx_q4_k_n2"] if quant_type("Q4_K").mmvq.prequantize else ["mmvq_q4_k_n2"]),
        ("quant", "auto", 40, "f16-per-call",
         ["convert_f32_f16", "dequant_q4_k_f16", "cublaslt_matmul_f16_f32"]),
        ("mmq", "auto", 40, "quant", ["quantize_q8", "mmq_q4_k"]),
        ("f16", "off", 1, "f16-per-call",
         ["convert_f32_f16", "dequant_q4_k_f16", "cublaslt_matmul_f16_f32"]),
        ("f16", "on", 40, "f16-cached", ["convert_f32_f16", "cublaslt_matmul_f16_f32"]),
    ],
)  # fmt: skip
def test_cupy_backend_runs_the_path_it_names(cp, mode, cache, nt, path, kernels):
    qt = quant_type("Q4_K")
    n, k = 96, 1024
    raw, w64 = weight(qt, n, k, tame=True)
    be = get_backend("cupy", mode, cache)
    w = be.matmul_weight(cp.asarray(raw), qt, (n, k), be.w16_cache_on(1 << 40))
    be.take_records()
    x = random_x(nt, k)
    got = cp.asnumpy(be.matmul(cp.asarray(x), w))
    recs = be.take_records()
    assert [r.kernel for r in recs] == kernels and {r.extra["path"] for r in recs} == {path}
    cpu = get_backend("numpy", mode, cache)
    wc = cpu.matmul_weight(raw, qt, (n, k), cpu.w16_cache_on(1 << 40))
    ref = cpu.matmul(x, wc)
    assert [r.extra["path"] for r in cpu.take_records()][-1] == path
    # same operands on both (f16-rounded on the f16 paths); only summation order differs
    assert np.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_w16_cache_auto_is_off_below_2_gib(cp):
    be = get_backend("cupy", "f16")
    assert not be.w16_cache_on(matmul.W16_CACHE_AUTO_BYTES - 1)
    assert be.w16_cache_on(matmul.W16_CACHE_AUTO_BYTES)

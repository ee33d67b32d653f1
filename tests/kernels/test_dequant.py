"""CPU tests of the dequant references: bit-equal to gguf-py for every type, hand-made blocks
with spelled-out values, gates, edge sizes, launch records.

The helpers at the top (``gguf_dequant``, ``assert_bits_equal``, ``block_of``) are shared with
test_embed.py and test_dequant_embed_gpu.py.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from gguf.quants import dequantize as gguf_dequantize

from tracekit.kernels import dequant
from tracekit.kernels.checks import KernelInputError
from tracekit.quants import QUANT_TABLE, QuantType, quant_type

TYPES = list(QUANT_TABLE.values())
TYPE_IDS = [t.name for t in TYPES]
RNG = np.random.default_rng(20261129)


# -- shared helpers ----------------------------------------------------------------------------
def gguf_dequant(raw: np.ndarray, qt: QuantType, shape: tuple[int, ...]) -> np.ndarray:
    """The oracle: gguf-py's f32 values, in ``shape``."""
    with np.errstate(all="ignore"):
        return np.asarray(gguf_dequantize(raw.reshape(-1), qt.qtype), np.float32).reshape(shape)


def gguf_f16(raw: np.ndarray, qt: QuantType, shape: tuple[int, ...]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return gguf_dequant(raw, qt, shape).astype(np.float16)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, qt: QuantType, what: str) -> None:
    """Equal bit for bit (so +0/-0 count), any NaN equal to any NaN; names the first bad block."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    g, w = got.reshape(-1), want.reshape(-1)
    ui = np.uint32 if g.dtype == np.float32 else np.uint16
    same = (g.view(ui) == w.view(ui)) | (np.isnan(g) & np.isnan(w))
    if not same.all():
        i = int(np.argmin(same))
        blk = i // qt.block_size
        sl = slice(blk * qt.block_size, (blk + 1) * qt.block_size)
        raise AssertionError(
            f"{what}: {int((~same).sum())} values differ; first at element {i} = block {blk} "
            f"(element {i % qt.block_size} of it): got {g[i]!r}, want {w[i]!r}\n"
            f"block got:  {g[sl].tolist()}\nblock want: {w[sl].tolist()}"
        )
    np.testing.assert_array_equal(got, want)


def random_raw(qt: QuantType, shape: tuple[int, ...], finite: bool = True) -> np.ndarray:
    n_blocks = qt.nbytes(shape) // qt.type_size
    if finite:
        return dequant.random_blocks(qt, n_blocks, RNG)
    return RNG.integers(0, 256, n_blocks * qt.type_size, dtype=np.uint8)


def shape_for(qt: QuantType, rows: int, blocks_per_row: int) -> tuple[int, int]:
    # F32/F16/BF16 have 1-element blocks: give them an odd, block-unfriendly row length
    return (rows, blocks_per_row * qt.block_size if qt.is_quantized else 45 * blocks_per_row)


def check_all_refs(raw: np.ndarray, qt: QuantType, shape: tuple[int, ...], what: str) -> None:
    f32, rec32 = dequant.ref_dequantize_f32(raw, qt, shape)
    f16, rec16 = dequant.ref_dequantize_f16(raw, qt, shape)
    assert f32.shape == shape and f16.shape == shape
    assert_bits_equal(f32, gguf_dequant(raw, qt, shape), qt, f"{what} f32")
    assert_bits_equal(f16, gguf_f16(raw, qt, shape), qt, f"{what} f16")
    n = math.prod(shape)
    assert rec32.kernel == f"dequant_{qt.suffix}_f32" and rec16.kernel == f"dequant_{qt.suffix}_f16"
    assert rec16.bytes_read == raw.nbytes == qt.nbytes(shape)
    assert rec16.bytes_written == 2 * n and rec32.bytes_written == 4 * n
    assert rec16.flops == 2 * n and rec16.grid is None


# -- parity with gguf-py, every type ------------------------------------------------------------
@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_random_blocks_equal_gguf(qt: QuantType) -> None:
    shape = shape_for(qt, 37, 3)
    check_all_refs(random_raw(qt, shape), qt, shape, f"{qt.name} random")


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_random_bytes_with_nan_inf_scales_equal_gguf(qt: QuantType) -> None:
    shape = shape_for(qt, 64, 2)
    raw = random_raw(qt, shape, finite=False)
    blocks = raw.reshape(-1, qt.type_size)
    # make sure there are NaN and Inf scales (and elements) in the mix, whatever the RNG gives
    u16 = blocks.view(np.uint16)  # every field of interest is 2-byte aligned in its block
    for off in dequant.f16_field_offsets(qt):
        u16[0, off // 2], u16[1, off // 2] = 0x7E00, 0xFC00  # NaN, -Inf
    if qt.name in ("F32", "BF16"):  # the top 16 bits of an f32 / the whole bf16
        u16[0, -1], u16[1, -1] = 0x7FC0, 0xFF80  # NaN, -Inf
    f32, _ = dequant.ref_dequantize_f32(raw, qt, shape)
    want = gguf_dequant(raw, qt, shape)
    assert np.isnan(want).any() and np.isnan(f32).any()
    check_all_refs(raw, qt, shape, f"{qt.name} NaN/Inf")


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_all_zero_block_is_zero(qt: QuantType) -> None:
    shape = (1, qt.block_size if qt.is_quantized else 8)
    raw = np.zeros(qt.nbytes(shape), np.uint8)
    check_all_refs(raw, qt, shape, f"{qt.name} zero")
    f32, _ = dequant.ref_dequantize_f32(raw, qt, shape)
    # every value is a zero: +0.0, or -0.0 where a zero scale meets a negative code
    # (Q4_0: 0 * (0 - 8)); the sign is gguf-py's, checked bit for bit above
    assert (f32 == 0).all()


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("rows", [1, 2, 3, 17])
def test_edge_row_counts(qt: QuantType, rows: int) -> None:
    shape = shape_for(qt, rows, 1)
    check_all_refs(random_raw(qt, shape), qt, shape, f"{qt.name} rows={rows}")


def test_many_rows_Q4_0() -> None:
    # > 65535 rows, several CPU chunks (and threads)
    qt = quant_type("Q4_0")
    shape = (65537, 32)
    assert math.prod(shape) > 2 * dequant.CPU_CHUNK_ELEMS
    check_all_refs(random_raw(qt, shape), qt, shape, "Q4_0 65537 rows")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("qt", [t for t in TYPES if t.is_quantized], ids=lambda t: t.name)
def test_several_chunks_and_a_ragged_tail(
    qt: QuantType, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two full CPU chunks and a partial one, on one thread and on the pool: the per-size tables
    # (K-quant shifts) and the per-thread f16 scratch must serve chunks of either size
    monkeypatch.setattr(dequant, "CPU_THREADS", threads)
    blocks = 2 * (dequant.CPU_CHUNK_ELEMS // qt.block_size) + 3
    shape = (blocks, qt.block_size)
    check_all_refs(random_raw(qt, shape), qt, shape, f"{qt.name} 3 chunks, {threads} threads")
    small = shape_for(qt, 5, 1)  # then a small tensor again: the scratch is only ever sliced
    check_all_refs(random_raw(qt, small), qt, small, f"{qt.name} small after large")


@pytest.mark.parametrize("name", ["Q8_0", "Q6_K", "BF16"])
def test_3d_shape_and_unaligned_bytes(name: str) -> None:
    qt = quant_type(name)
    shape = (3, 5, qt.block_size if qt.is_quantized else 7)
    raw = random_raw(qt, shape)
    buf = np.empty(raw.size + 1, np.uint8)
    buf[1:] = raw  # an odd start address: every field read is unaligned
    check_all_refs(buf[1:], qt, shape, f"{name} unaligned")


def test_names_and_enums_are_accepted() -> None:
    qt = quant_type("Q4_K")
    raw = random_raw(qt, (2, 256))
    a, _ = dequant.ref_dequantize_f16(raw, "Q4_K", (2, 256))
    b, _ = dequant.ref_dequantize_f16(raw, qt.qtype, [2, 256])
    np.testing.assert_array_equal(a, b)


# -- hand-made blocks with spelled-out values --------------------------------------------------
def f16_bytes(x: float) -> bytes:
    return struct.pack("<e", x)


def block_of(qt: QuantType, parts: list[bytes]) -> np.ndarray:
    raw = np.frombuffer(b"".join(parts), np.uint8).copy()
    assert raw.size == qt.type_size, (raw.size, qt.type_size)
    return raw


def check_hand(qt: QuantType, raw: np.ndarray, want: list[float]) -> None:
    want32 = np.array(want, np.float32).reshape(1, -1)
    shape = want32.shape
    got, _ = dequant.ref_dequantize_f32(raw, qt, shape)
    assert_bits_equal(got, want32, qt, f"{qt.name} hand-made")
    assert_bits_equal(gguf_dequant(raw, qt, shape), want32, qt, f"{qt.name} hand-made (gguf)")
    got16, _ = dequant.ref_dequantize_f16(raw, qt, shape)
    with np.errstate(over="ignore"):  # 3e38 -> inf in f16, on purpose
        want16 = want32.astype(np.float16)
    assert_bits_equal(got16, want16, qt, f"{qt.name} hand-made f16")


def test_hand_block_Q4_0() -> None:
    # d = 0.5; byte j: low nibble j (element j), high nibble 15 - j (element j + 16)
    qt = quant_type("Q4_0")
    qs = bytes(j | ((15 - j) << 4) for j in range(16))
    raw = block_of(qt, [f16_bytes(0.5), qs])
    want = [0.5 * (j - 8) for j in range(16)] + [0.5 * (7 - j) for j in range(16)]
    assert want[:3] == [-4.0, -3.5, -3.0] and want[15] == 3.5 and want[16] == 3.5
    check_hand(qt, raw, want)


def test_hand_block_Q8_0() -> None:
    # d = 0.25; int8 codes -128, -1, 0, 1, 127, then 3 j - 40
    qt = quant_type("Q8_0")
    codes = [-128, -1, 0, 1, 127] + [3 * j - 40 for j in range(27)]
    raw = block_of(qt, [f16_bytes(0.25), struct.pack("<32b", *codes)])
    want = [0.25 * c for c in codes]
    assert want[:5] == [-32.0, -0.25, 0.0, 0.25, 31.75]
    check_hand(qt, raw, want)


def test_hand_block_Q4_1() -> None:
    # d = 2, m = -1.5; element j = low nibble of byte j (= j), j + 16 = high nibble (= 1)
    qt = quant_type("Q4_1")
    raw = block_of(qt, [f16_bytes(2.0), f16_bytes(-1.5), bytes(j | 0x10 for j in range(16))])
    want = [2.0 * j - 1.5 for j in range(16)] + [0.5] * 16
    check_hand(qt, raw, want)


def test_hand_block_Q5_0() -> None:
    # d = 1; nibbles all 15; qh = bit j set for odd j: code 31 (odd j) or 15 (even j), minus 16
    qt = quant_type("Q5_0")
    raw = block_of(qt, [f16_bytes(1.0), struct.pack("<I", 0xAAAAAAAA), bytes([0xFF] * 16)])
    want = [15.0 if j % 2 else -1.0 for j in range(32)]
    check_hand(qt, raw, want)


def test_hand_block_Q5_1() -> None:
    # d = 0.5, m = 1; low nibble 1, high nibble 2; qh: top 16 bits set (elements 16..31)
    qt = quant_type("Q5_1")
    raw = block_of(
        qt, [f16_bytes(0.5), f16_bytes(1.0), struct.pack("<I", 0xFFFF0000), bytes([0x21] * 16)]
    )
    want = [0.5 * 1 + 1.0] * 16 + [0.5 * (2 + 16) + 1.0] * 16
    check_hand(qt, raw, want)


def k_scale_bytes(sc: list[int], mn: list[int]) -> bytes:
    """Pack eight 6-bit scales and mins the way Q4_K/Q5_K store them (inverse of the unpack)."""
    b = [0] * 12
    for j in range(4):
        b[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
        b[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6)
        b[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4)
    return bytes(b)


SC = [1, 2, 3, 17, 33, 47, 62, 63]
MN = [0, 5, 63, 16, 1, 31, 48, 2]


def test_hand_block_Q4_K() -> None:
    # d = 1, dmin = 0.5; sub-block j value l: (d sc[j]) q - dmin mn[j], q = nibble j % 2 of
    # qs[32 (j // 2) + l]; here low nibble l % 16, high nibble (l + i) % 16 for pair i
    qt = quant_type("Q4_K")
    qs = bytes((lo % 16) | (((lo + i) % 16) << 4) for i in range(4) for lo in range(32))
    raw = block_of(qt, [f16_bytes(1.0), f16_bytes(0.5), k_scale_bytes(SC, MN), qs])
    want = []
    for j in range(8):
        i = j // 2
        for lo in range(32):
            q = lo % 16 if j % 2 == 0 else (lo + i) % 16
            want.append(1.0 * SC[j] * q - 0.5 * MN[j])
    assert want[0] == 0.0 and want[1] == 1.0 and want[32] == 0.0 - 2.5 and want[-1] == 63 * 2 - 1
    check_hand(qt, raw, want)


def test_hand_block_Q5_K() -> None:
    # as Q4_K with a 5th bit: bit j of qh[l] for value l of sub-block j; qh[l] = l (bits 0..4)
    qt = quant_type("Q5_K")
    qs = bytes((lo % 16) | ((15 - lo % 16) << 4) for _ in range(4) for lo in range(32))
    qh = bytes(range(32))
    raw = block_of(qt, [f16_bytes(0.25), f16_bytes(2.0), k_scale_bytes(SC, MN), qh, qs])
    want = []
    for j in range(8):
        for lo in range(32):
            nib = lo % 16 if j % 2 == 0 else 15 - lo % 16
            q = nib | (((lo >> j) & 1) << 4)
            want.append(0.25 * SC[j] * q - 2.0 * MN[j])
    check_hand(qt, raw, want)


def test_hand_block_Q6_K() -> None:
    # d = 0.125, int8 scales -3 .. 12 (one per 16 values); code of value e is e % 64, stored as
    # low 4 bits in nibble r // 64 of ql[64 h + r % 64] and bits 4-5 in bits 2 (r // 32) of
    # qh[32 h + r % 32], e = 128 h + r;  x = (d scales[e // 16]) (code - 32)
    qt = quant_type("Q6_K")
    ql, qh = [0] * 128, [0] * 64
    for e in range(256):
        h, r, q = e // 128, e % 128, e % 64
        ql[64 * h + r % 64] |= (q & 15) << (4 * (r // 64))
        qh[32 * h + r % 32] |= (q >> 4) << (2 * (r // 32))
    scales = list(range(-3, 13))
    raw = block_of(qt, [bytes(ql), bytes(qh), struct.pack("<16b", *scales), f16_bytes(0.125)])
    want = [0.125 * scales[e // 16] * (e % 64 - 32) for e in range(256)]
    assert want[0] == 0.125 * -3 * -32 == 12.0 and want[255] == 0.125 * 12 * 31
    check_hand(qt, raw, want)


def test_hand_F16_BF16_F32() -> None:
    vals = [0.0, -0.0, 1.0, -2.5, 65504.0, 2.0**-24, float("inf")]
    check_hand(quant_type("F16"), np.frombuffer(struct.pack("<7e", *vals), np.uint8).copy(), vals)
    check_hand(quant_type("F32"), np.frombuffer(struct.pack("<7f", *vals), np.uint8).copy(), vals)
    # bf16 = the top 16 bits of the f32: 1.0 = 0x3F80, -2.5 = 0xC020, 3.0e38 ~ 0x7F62
    bf = struct.pack("<3H", 0x3F80, 0xC020, 0x7F62)
    want = [1.0, -2.5, struct.unpack("<f", struct.pack("<I", 0x7F620000))[0]]
    check_hand(quant_type("BF16"), np.frombuffer(bf, np.uint8).copy(), want)


def test_f16_rounding_is_once_to_nearest_even() -> None:
    # Q4_1 with d = 1, m = 2^-11: 1 + 2^-11 is a tie between two f16 values and rounds to the
    # even one (1.0); 3 + 2^-11 is below half an f16 ulp of 3 (2^-10) and rounds to 3.0
    qt = quant_type("Q4_1")
    raw = block_of(qt, [f16_bytes(1.0), f16_bytes(2.0**-11), bytes([0x31] * 16)])
    f32, _ = dequant.ref_dequantize_f32(raw, qt, (1, 32))
    f16, _ = dequant.ref_dequantize_f16(raw, qt, (1, 32))
    assert f32[0, 0] == np.float32(1 + 2.0**-11) and f16[0, 0] == 1.0
    assert f32[0, 16] == np.float32(3 + 2.0**-11) and f16[0, 16] == 3.0


# -- gates -------------------------------------------------------------------------------------
REFS = [dequant.ref_dequantize_f32, dequant.ref_dequantize_f16]


@pytest.mark.parametrize("ref", REFS, ids=["f32", "f16"])
def test_gate_dtype(ref) -> None:
    qt = quant_type("Q4_0")
    raw = random_raw(qt, (2, 32))
    with pytest.raises(KernelInputError, match="raw has dtype int8, expected uint8"):
        ref(raw.view(np.int8), qt, (2, 32))
    with pytest.raises(KernelInputError, match="raw has dtype float32"):
        ref(np.zeros(18, np.float32), qt, (2, 32))


@pytest.mark.parametrize("ref", REFS, ids=["f32", "f16"])
def test_gate_contiguous(ref) -> None:
    qt = quant_type("Q8_0")
    raw = np.zeros((2, 2 * 34), np.uint8)[:, ::2]
    with pytest.raises(KernelInputError, match="raw with strides .* is not C-contiguous"):
        ref(raw, qt, (2, 32))


@pytest.mark.parametrize("ref", REFS, ids=["f32", "f16"])
def test_gate_byte_count_names_both_numbers(ref) -> None:
    qt = quant_type("Q4_K")
    raw = random_raw(qt, (3, 256))
    with pytest.raises(KernelInputError, match=r"raw has 431 bytes, .*Q4_K .*\(3, 256\) .*432"):
        ref(raw[:-1], qt, (3, 256))
    with pytest.raises(KernelInputError, match=r"raw has 432 bytes, .*\(4, 256\) .*576"):
        ref(raw, qt, (4, 256))


@pytest.mark.parametrize("ref", REFS, ids=["f32", "f16"])
def test_gate_row_not_whole_blocks(ref) -> None:
    qt = quant_type("Q4_0")
    with pytest.raises(KernelInputError, match="row length 900 is not a multiple of Q4_0 block"):
        ref(np.zeros(1000, np.uint8), qt, (2, 900))
    with pytest.raises(KernelInputError, match="non-positive"):
        ref(np.zeros(0, np.uint8), qt, (0, 32))


def test_gate_unknown_type() -> None:
    with pytest.raises(ValueError, match="unknown tensor type 'Q9_9'"):
        dequant.ref_dequantize_f16(np.zeros(18, np.uint8), "Q9_9", (1, 32))


# -- GPU-side helpers that need no GPU ---------------------------------------------------------
@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_geometry_covers_every_chunk(qt: QuantType) -> None:
    cfg = dequant.config(qt)  # the per-type table the launcher reads
    for n in (qt.block_size, 7 * qt.block_size, 65537 * qt.block_size):
        geo = dequant.geometry(qt, n)
        chunks = math.ceil(n / dequant.CHUNK_ELEMS)
        per = dequant.chunks_per_thread(qt)  # warp variant: chunks x WARP_STEPS
        assert geo.work_items * per >= chunks and geo.threads_launched >= geo.work_items
        assert geo.block == (cfg.block, 1, 1)
    clamped = dequant.geometry(qt, 1 << 40, max_grid=5)
    assert clamped.grid == (5, 1, 1) and clamped.strided
    if qt.is_quantized:  # a staged tile's blocks fit the shared memory the launcher asks for
        tile_elems = cfg.block * cfg.chunks * dequant.CHUNK_ELEMS
        assert tile_elems % qt.block_size == 0
        assert dequant.tile_smem_bytes(qt) >= tile_elems // qt.block_size * qt.type_size + 16
        slices = cfg.block // 32 * dequant.warp_slice_bytes(qt)
        want = {"direct": 0, "warp": slices, "warp_occ": slices}
        v = dequant.VARIANTS[cfg.variant]
        assert dequant.launch_smem_bytes(qt) == want.get(v, dequant.tile_smem_bytes(qt))


def test_random_blocks_have_finite_scales() -> None:
    for qt in (t for t in TYPES if dequant.f16_field_offsets(t)):
        raw = dequant.random_blocks(qt, 4096, RNG).reshape(-1, qt.type_size)
        for off in dequant.f16_field_offsets(qt):
            assert np.isfinite(raw[:, off : off + 2].copy().view(np.float16)).all()


@pytest.mark.parametrize("name", ["Q4_0", "Q6_K"])
def test_cpu_speedup_vs_gguf_reports_a_ratio(name: str) -> None:
    # a small run: checks the function works; the ratio itself is the bench's business
    r = dequant.cpu_speedup_vs_gguf(name, 1 << 16, repeat=1, row_len=512)
    assert math.isfinite(r) and r > 0


def test_f32_to_f16_several_pieces_leaves_its_input() -> None:
    # > 2 of its scratch-sized pieces, a 2-D out, NaNs and infs in the mix; x is not written
    n = 2 * dequant.CPU_CHUNK_ELEMS + 7
    x = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[::1001] = np.float32(np.nan)
    x[5::999] = -np.float32(np.inf)
    keep = x.copy()
    got = np.empty((1, n), np.float16)
    dequant.f32_to_f16(x, got)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).reshape(1, n)
    assert (got.view(np.uint16) == want.view(np.uint16)).all()
    assert (x.view(np.uint32) == keep.view(np.uint32)).all()


def test_f32_to_f16_matches_numpy_cast_bit_for_bit() -> None:
    # (the whole 2^32 range was checked once offline; here: the edges and a random sample)
    edges = [0.0, -0.0, 1.0, 65504.0, 65519.996, 65520.0, 65536.0, 1e38, 2.0**-14, 2.0**-24]
    edges += [2.0**-25, 3 * 2.0**-26, 2.0**-25 * 1.0000001, 2.0**-14 - 2.0**-25, 1 + 2.0**-11]
    edges += [1 + 3 * 2.0**-11, 2047.5, 2048.0 + 1, 1e-45, float("inf"), float("nan")]
    x = np.array(edges + [-v for v in edges], np.float32)
    bits = np.array(
        [
            0x7F800001,
            0xFF800001,
            0x7FC00000,
            0x7FFFFFFF,
            0x7F802000,
            0x33000000,
            0x33000001,
            0x387FE000,
            0x387FF000,
            0x477FEFFF,
            0x477FF000,
        ],
        np.uint32,
    )
    rand = RNG.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([x, bits.view(np.float32), rand.view(np.float32)])
    got = np.empty(x.size, np.float16)
    dequant.f32_to_f16(x, got)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    bad = np.flatnonzero(got.view(np.uint16) != want.view(np.uint16))
    assert bad.size == 0, [
        (hex(x.view(np.uint32)[i]), hex(got.view(np.uint16)[i]), hex(want.view(np.uint16)[i]))
        for i in bad[:5]
    ]


@pytest.mark.parametrize(
    ("variant", "macro"), [("warp", "DEQUANT_KERNEL"), ("warp_occ", "DEQUANT_KERNEL_OCC")]
)
def test_instantiation_of_the_warp_variants(
    variant: str, macro: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a warp variant's line carries WARP_STEPS; warp_occ's macro carries its launch bounds
    qt = quant_type("Q3_K")
    v = next(i for i, name in dequant.VARIANTS.items() if name == variant)
    monkeypatch.setitem(dequant.CONFIG, qt.qtype, dequant.KernelConfig(v, 128, 2))
    monkeypatch.setattr(dequant, "WARP_STEPS", 5)
    assert f"{macro}(dequant_q3_k_f16, Q3_K, {v}, 2, 5)" in dequant.instantiations().splitlines()
    assert dequant.chunks_per_thread(qt) == 10
    # 4 warps, each a step of 2 blocks: 220 B at any offset mod 16 plus 16 B of slack, 16 words
    assert dequant.launch_smem_bytes(qt) == 4 * dequant.warp_slice_bytes(qt) == 4 * 16 * 16

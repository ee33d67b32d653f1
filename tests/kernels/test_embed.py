"""CPU tests of the embedding references: rows bit-equal to gguf-py for every type, the f32
gather, gates (ids too), edge sizes, launch records, and the decoders shared with dequant.cu."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.kernels.test_dequant import (
    TYPE_IDS,
    TYPES,
    assert_bits_equal,
    block_of,
    f16_bytes,
    gguf_dequant,
    random_raw,
)
from tracekit.kernels import cuda, dequant, embed
from tracekit.kernels.checks import KernelInputError
from tracekit.quants import QuantType, quant_type

RNG = np.random.default_rng(33)


def table_shape(qt: QuantType, rows: int, blocks: int = 2) -> tuple[int, int]:
    return (rows, blocks * qt.block_size if qt.is_quantized else 45)


def some_ids(rows: int, nt: int) -> np.ndarray:
    # the first and last rows, a repeat, the rest random
    ids = RNG.integers(0, rows, nt).astype(np.int32)
    ids[:3] = [0, rows - 1, 0][:nt] if nt >= 3 else ids[:3]
    return ids


def want_rows(raw: np.ndarray, qt: QuantType, shape: tuple[int, int], ids: np.ndarray):
    return gguf_dequant(raw, qt, shape)[ids]


def check_embed(raw: np.ndarray, qt: QuantType, shape: tuple[int, int], ids, what: str) -> None:
    got, rec = embed.ref_embed_rows(raw, qt, shape, ids)
    assert got.dtype == np.float32 and got.shape == (len(ids), shape[1])
    assert_bits_equal(got, want_rows(raw, qt, shape, ids), qt, what)
    nt, n = got.shape
    if qt.name == "F32":
        assert rec.kernel == "gather_rows_f32" and rec.flops == 0
    else:
        assert rec.kernel == f"embed_rows_{qt.suffix}" and rec.flops == 2 * nt * n
    assert rec.bytes_read == nt * qt.row_bytes(n) + ids.nbytes
    assert rec.bytes_written == got.nbytes and rec.grid is None


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_random_table_rows_equal_gguf(qt: QuantType) -> None:
    shape = table_shape(qt, 51)
    check_embed(random_raw(qt, shape), qt, shape, some_ids(51, 37), f"{qt.name} embed")


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_random_bytes_incl_nan_inf_equal_gguf(qt: QuantType) -> None:
    shape = table_shape(qt, 64)
    raw = random_raw(qt, shape, finite=False)
    check_embed(raw, qt, shape, np.arange(63, -1, -1, dtype=np.int32), f"{qt.name} NaN/Inf")


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_all_zero_table(qt: QuantType) -> None:
    shape = table_shape(qt, 3, 1)
    raw = np.zeros(qt.nbytes(shape), np.uint8)
    check_embed(raw, qt, shape, np.array([2, 0], np.int32), f"{qt.name} zero")


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize(("rows", "nt"), [(1, 1), (1, 5), (7, 1), (9, 13)])
def test_edge_sizes(qt: QuantType, rows: int, nt: int) -> None:
    shape = table_shape(qt, rows, 1)
    ids = RNG.integers(0, rows, nt).astype(np.int32)
    check_embed(random_raw(qt, shape), qt, shape, ids, f"{qt.name} rows={rows} nt={nt}")


def test_many_rows_Q8_0() -> None:
    qt = quant_type("Q8_0")
    shape = (65537, 32)
    ids = np.array([65536, 0, 65535, 40000, 65536], np.int32)
    check_embed(random_raw(qt, shape), qt, shape, ids, "Q8_0 65537 rows")


def test_hand_table_Q4_0() -> None:
    # row 0: d = 1, every nibble 9 -> +1.0; row 1: d = -2, low nibbles j, high nibbles 0
    qt = quant_type("Q4_0")
    row0 = block_of(qt, [f16_bytes(1.0), bytes([0x99] * 16)])
    row1 = block_of(qt, [f16_bytes(-2.0), bytes(range(16))])
    raw = np.concatenate([row0, row1])
    got, _ = embed.ref_embed_rows(raw, qt, (2, 32), np.array([1, 0, 1], np.int32))
    r1 = [-2.0 * (j - 8) for j in range(16)] + [16.0] * 16
    want = np.array([r1, [1.0] * 32, r1], np.float32)
    assert r1[0] == 16.0 and r1[8] == -0.0 and r1[15] == -14.0
    assert_bits_equal(got, want, qt, "Q4_0 hand table")


def test_f32_table_goes_through_the_gather() -> None:
    x = RNG.standard_normal((6, 5)).astype(np.float32)
    raw = x.view(np.uint8).reshape(-1)
    ids = np.array([5, 0, 5], np.int32)
    got, rec = embed.ref_embed_rows(raw, "F32", (6, 5), ids)
    np.testing.assert_array_equal(got, x[ids])
    assert rec.kernel == "gather_rows_f32"


def test_gather_rows_f32() -> None:
    x = RNG.standard_normal((9, 7)).astype(np.float32)
    ids = np.array([8, 0, 3, 3], np.int32)
    got, rec = embed.ref_gather_rows_f32(x, ids)
    np.testing.assert_array_equal(got, x[ids])
    assert rec.kernel == "gather_rows_f32"
    assert rec.bytes_read == 4 * 7 * 4 + 16 and rec.bytes_written == got.nbytes


# -- gates -------------------------------------------------------------------------------------
def q4_table(rows: int = 4) -> tuple[np.ndarray, QuantType, tuple[int, int]]:
    qt = quant_type("Q4_0")
    return random_raw(qt, (rows, 64)), qt, (rows, 64)


@pytest.mark.parametrize(("bad", "pos"), [(-1, 2), (4, 1), (2**31 - 1, 0)])
def test_gate_id_out_of_range_names_id_and_position(bad: int, pos: int) -> None:
    raw, qt, shape = q4_table()
    ids = np.array([0, 1, 2], np.int32)
    ids[pos] = bad
    word = "negative" if bad < 0 else "out of range"
    with pytest.raises(KernelInputError, match=rf"token id {bad} at position {pos} is {word}"):
        embed.ref_embed_rows(raw, qt, shape, ids)
    with pytest.raises(KernelInputError, match=rf"token id {bad} at position {pos}"):
        embed.ref_gather_rows_f32(np.zeros((4, 3), np.float32), ids)


def test_gate_ids_dtype_rank_contiguity_empty() -> None:
    raw, qt, shape = q4_table()
    with pytest.raises(KernelInputError, match="token ids has dtype int64, expected int32"):
        embed.ref_embed_rows(raw, qt, shape, np.array([0, 1]))
    with pytest.raises(KernelInputError, match="token ids has dtype float32"):
        embed.ref_embed_rows(raw, qt, shape, np.array([0, 1], np.float32))
    with pytest.raises(KernelInputError, match=r"token ids has shape \(1, 2\) \(2-D\)"):
        embed.ref_embed_rows(raw, qt, shape, np.array([[0, 1]], np.int32))
    with pytest.raises(KernelInputError, match="token ids with strides"):
        embed.ref_embed_rows(raw, qt, shape, np.arange(6, dtype=np.int32)[::2])
    with pytest.raises(KernelInputError, match="token ids is empty"):
        embed.ref_embed_rows(raw, qt, shape, np.zeros(0, np.int32))


def test_gate_table() -> None:
    raw, qt, shape = q4_table()
    ids = np.array([0], np.int32)
    with pytest.raises(KernelInputError, match=r"table shape \(256,\) must be 2-D"):
        embed.ref_embed_rows(raw, qt, (256,), ids)
    with pytest.raises(KernelInputError, match=r"embedding table has 144 bytes, .*\(5, 64\).*180"):
        embed.ref_embed_rows(raw, qt, (5, 64), ids)
    with pytest.raises(KernelInputError, match="row length 48 is not a multiple of Q4_0 block"):
        embed.ref_embed_rows(raw, qt, (3, 48), ids)
    with pytest.raises(KernelInputError, match="embedding table has dtype int8"):
        embed.ref_embed_rows(raw.view(np.int8), qt, shape, ids)
    with pytest.raises(KernelInputError, match="embedding table with strides"):
        embed.ref_embed_rows(np.repeat(raw, 2)[::2], qt, shape, ids)


def test_gate_gather_x() -> None:
    ids = np.array([0], np.int32)
    with pytest.raises(KernelInputError, match="gather_rows_f32 x has dtype float64"):
        embed.ref_gather_rows_f32(np.zeros((2, 3)), ids)
    with pytest.raises(KernelInputError, match=r"gather_rows_f32 x has shape \(6,\) \(1-D\)"):
        embed.ref_gather_rows_f32(np.zeros(6, np.float32), ids)
    with pytest.raises(KernelInputError, match="gather_rows_f32 x with strides"):
        embed.ref_gather_rows_f32(np.zeros((2, 6), np.float32)[:, ::2], ids)


# -- the GPU side, checked without a GPU -------------------------------------------------------
def test_embed_and_dequant_share_one_copy_of_the_decoders() -> None:
    # Both families include quant_decoders.cuh (NVRTC gets -I<kernels folder>): no decoder
    # struct may be defined in either .cu, so the two can never drift apart.
    here = Path(embed.__file__).parent
    header = (here / "quant_decoders.cuh").read_text()
    for family in ("embed.cu", "dequant.cu"):
        src = (here / family).read_text()
        assert '#include "quant_decoders.cuh"' in src, family
        for qt in (t for t in TYPES if t.is_quantized):
            assert f"struct {qt.name} {{" in header
            assert f"struct {qt.name} {{" not in src, (family, qt.name)


def test_word_wise_decoders_one_copy_and_alignment_kept_by_every_row() -> None:
    # A type's word-wise decoder (dec8_w, picked through Fast<T>) lives in its one struct in
    # the header; it declares the block alignment it needs, and TS % ALIGN == 0 is what lets
    # embed.cu pick it for a whole table from raw % ALIGN alone (row id starts at
    # raw + id * row_bytes, row_bytes a multiple of TS). A type without one decodes byte-wise.
    here = Path(embed.__file__).parent
    header = (here / "quant_decoders.cuh").read_text()
    word_wise = set()
    for qt in (t for t in TYPES if t.is_quantized):
        body = re.search(rf"^struct {qt.name} \{{(.*?)^\}};", header, re.S | re.M)
        assert body, qt.name
        m = re.search(r"static constexpr int ALIGN = (\d+);", body.group(1))
        if m:
            align = int(m.group(1))
            assert align in (2, 4, 8, 16) and qt.type_size % align == 0, (qt.name, align)
            assert "void dec8_w(const u8* b, int c, float* v)" in body.group(1), qt.name
            word_wise.add(qt.name)
        for family in ("embed.cu", "dequant.cu"):
            assert f"struct {qt.name}" not in (here / family).read_text(), family
    # the swept types keep the word-wise decoders their BENCHMARKS.md numbers were measured with
    assert {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"} <= word_wise
    assert "struct Fast<T, tk_void_t<decltype(T::ALIGN)>> : T" in header
    embed_src = (here / "embed.cu").read_text()
    assert "gather_quant<Fast<T>>" in embed_src and "Fast<T>::ALIGN - 1" in embed_src
    assert "gather_quant<T>" in embed_src  # the byte-wise fallback for a misaligned table


def _defines(src: str, name: str) -> bool:
    # a kernel is defined directly (`void name(`) or through a macro (`KERNEL(name, T)`)
    return re.search(rf"(void {name}\(|_KERNEL\({name}, )", src) is not None


def test_every_type_has_its_kernel() -> None:
    src, dsrc = cuda.source("embed"), cuda.source("dequant")  # as compiled: with the generated
    for qt in TYPES:
        name = "gather_rows_f32" if qt.name == "F32" else f"embed_rows_{qt.suffix}"
        assert _defines(src, name), name
        assert _defines(dsrc, dequant.kernel_name(qt)), dequant.kernel_name(qt)


@pytest.mark.parametrize(("nt", "n"), [(1, 32), (30, 896), (4096, 4096), (3, 45)])
def test_geometry(nt: int, n: int) -> None:
    geo = embed.embed_geometry(quant_type("F16"), nt, n)
    assert geo.work_items == nt * -(-n // 8) and geo.block == (embed.BLOCK, 1, 1)
    assert geo.threads_launched >= geo.work_items
    g = embed.gather_geometry(nt, n)
    assert g.work_items == nt * -(-n // 4)
    assert embed.gather_geometry(nt, n, max_grid=1).grid == (1, 1, 1)


def test_seed_30_token_embed_geometry() -> None:
    # seed §4.2 launched 1,024 threads for 30 tokens x 28 Q4_0 blocks (one per block); here
    # one thread per 8 values: 30 x 112 = 3,360 work items in 14 blocks of 256
    geo = embed.embed_geometry(quant_type("Q4_0"), 30, 896)
    assert geo.work_items == 3360 and geo.grid == (14, 1, 1)


def test_bf16_hand_rows() -> None:
    raw = np.frombuffer(struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0x0000), np.uint8).copy()
    got, _ = embed.ref_embed_rows(raw, "BF16", (2, 2), np.array([1, 0], np.int32))
    np.testing.assert_array_equal(got, np.array([[-1.0, 0.0], [1.0, 2.0]], np.float32))

"""GPU tests of the dequant and embed kernels against their NumPy references (marked ``gpu``).

Run on a GPU host:  .venv/bin/pytest -m gpu tests/kernels/test_dequant_embed_gpu.py

Every output is poisoned (all bytes 0xFF: a NaN) before the launch and compared bit for bit
with the reference (any NaN equals any NaN). The test data is finite, so a value the kernel
failed to write stays a NaN where the reference has a number and fails the comparison.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.kernels.test_dequant import TYPE_IDS, TYPES, assert_bits_equal
from tracekit.kernels import dequant, embed
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.launch import MAX_GRID_X, grid_1d
from tracekit.quants import QuantType, quant_type

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(2026)


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def finite_raw(qt: QuantType, n_blocks: int) -> np.ndarray:
    """Random blocks with every f16 scale finite, and (F32/BF16) every element finite."""
    raw = dequant.random_blocks(qt, n_blocks, RNG)
    if qt.name in ("F32", "BF16"):  # the f32 exponent sits in the top 16 bits: never all ones
        top = raw.reshape(-1, qt.type_size)[:, -2:].view(np.uint16)
        top ^= np.where((top & 0x7F80) == 0x7F80, np.uint16(0x4000), np.uint16(0))
    return raw


def poisoned(cp, shape: tuple[int, ...], dtype) -> object:
    out = cp.empty(shape, dtype)
    out.view(cp.uint8).fill(0xFF)
    return out


def on_device_at(cp, raw: np.ndarray, offset: int):
    """A device copy of ``raw`` starting ``offset`` bytes past a 256-byte boundary."""
    buf = cp.empty(raw.size + offset, cp.uint8)
    view = buf[offset:]
    view.set(raw)
    return view


# -- dequant ------------------------------------------------------------------------------------
DEQUANT_CASES = {
    # name: (rows, blocks per row, max_grid, raw offset)
    "1row_1block": (1, 1, MAX_GRID_X, 0),
    "odd_rows": (37, 3, MAX_GRID_X, 0),
    "rows_65537": (65537, 1, MAX_GRID_X, 0),
    "clamped_grid": (301, 5, 3, 0),
    "unaligned_raw": (19, 2, MAX_GRID_X, 5),
}


def dequant_shape(qt: QuantType, rows: int, bpr: int) -> tuple[int, int]:
    # the float types get a row length that is not a multiple of 8 (a partial last chunk)
    return (rows, bpr * qt.block_size if qt.is_quantized else 13 * bpr)


def dequant_case(cp, qt: QuantType, case: tuple[int, int, int, int], what: str):
    """One (rows, blocks a row, max grid, raw offset) case: the launch on poisoned output,
    checked bit for bit against the reference; returns (shape, the launch record)."""
    rows, bpr, max_grid, offset = case
    shape = dequant_shape(qt, rows, bpr)
    raw = finite_raw(qt, qt.nbytes(shape) // qt.type_size)
    want, _ = dequant.ref_dequantize_f16(raw, qt, shape)
    out = poisoned(cp, shape, cp.float16)
    got, rec = dequant.launch_dequantize_f16(
        on_device_at(cp, raw, offset), qt, shape, out=out, max_grid=max_grid
    )
    assert got is out
    assert_bits_equal(got.get(), want, qt, what)
    return shape, rec


@pytest.mark.parametrize("case", list(DEQUANT_CASES))
@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_dequant_f16_equals_reference(cp, qt: QuantType, case: str) -> None:
    max_grid = DEQUANT_CASES[case][2]
    shape, rec = dequant_case(cp, qt, DEQUANT_CASES[case], f"dequant {qt.name} {case}")
    n = math.prod(shape)
    geo = dequant.geometry(qt, n, max_grid)
    assert rec.kernel == f"dequant_{qt.suffix}_f16"
    assert (rec.grid, rec.block, rec.threads_launched) == (
        geo.grid,
        geo.block,
        geo.threads_launched,
    )
    cfg = dequant.config(qt)  # quant types: per-type chunks per thread and block; floats 1
    assert cfg.chunks == 1 or qt.is_quantized
    per = dequant.chunks_per_thread(qt)  # cfg.chunks, x WARP_STEPS for the warp variant
    assert geo == grid_1d(math.ceil(math.ceil(n / 8) / per), cfg.block, max_grid)
    assert rec.bytes_read == qt.nbytes(shape) and rec.bytes_written == 2 * n and rec.flops == 2 * n


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_dequant_numpy_input_and_nan_inf_scales(cp, qt: QuantType) -> None:
    shape = dequant_shape(qt, 65, 2)
    raw = RNG.integers(0, 256, qt.nbytes(shape), dtype=np.uint8)  # NaN/Inf scales and all
    want, _ = dequant.ref_dequantize_f16(raw, qt, shape)
    got, _ = dequant.launch_dequantize_f16(raw, qt, shape)  # NumPy in: copied to the device
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float16
    assert_bits_equal(got.get(), want, qt, f"dequant {qt.name} random bytes")


def test_dequant_Q4_0_past_2_31_elements(cp) -> None:
    qt = quant_type("Q4_0")
    rows, n = 524289, 4096  # 2,147,487,744 elements: flat indices past 2^31
    assert rows * n > 2**31
    row_bytes = qt.row_bytes(n)
    raw = cp.random.randint(0, 256, rows * row_bytes, dtype=cp.uint8)
    hi = raw.reshape(-1, qt.type_size)[:, 1]  # the high byte of each f16 scale
    hi[...] = cp.where((hi & 0x7C) == 0x7C, hi ^ 0x40, hi)  # exponent never all ones: finite
    out = poisoned(cp, (rows, n), cp.float16)
    got, rec = dequant.launch_dequantize_f16(raw, qt, (rows, n), out=out)
    assert rec.bytes_written == 2 * rows * n
    pick = np.array([0, 1, 65535, 65536, rows // 2, rows - 2, rows - 1])
    pick = np.concatenate([pick, RNG.integers(0, rows, 5)])
    sample = raw.reshape(rows, row_bytes)[cp.asarray(pick)].get()
    want, _ = dequant.ref_dequantize_f16(sample, qt, (len(pick), n))
    assert_bits_equal(got[cp.asarray(pick)].get(), want, qt, "Q4_0 > 2^31 sampled rows")
    del raw, out, got


def test_dequant_out_gates(cp) -> None:
    qt = quant_type("Q8_0")
    raw = finite_raw(qt, 4)
    with pytest.raises(KernelInputError, match=r"out has shape \(2, 32\), expected \(4, 32\)"):
        dequant.launch_dequantize_f16(raw, qt, (4, 32), out=cp.empty((2, 32), cp.float16))
    with pytest.raises(KernelInputError, match="out has dtype float32, expected float16"):
        dequant.launch_dequantize_f16(raw, qt, (4, 32), out=cp.empty((4, 32), cp.float32))
    with pytest.raises(KernelInputError, match="out must be a CuPy array"):
        dequant.launch_dequantize_f16(raw, qt, (4, 32), out=np.empty((4, 32), np.float16))
    misaligned = cp.empty(4 * 32 + 1, cp.float16)[1:].reshape(4, 32)
    with pytest.raises(KernelInputError, match="2 bytes past a 16-byte boundary"):
        dequant.launch_dequantize_f16(raw, qt, (4, 32), out=misaligned)
    with pytest.raises(KernelInputError, match=r"raw has 136 bytes, .*\(5, 32\) .*170"):
        dequant.launch_dequantize_f16(cp.asarray(raw), qt, (5, 32))
    with pytest.raises(KernelInputError, match="raw has dtype int8"):
        dequant.launch_dequantize_f16(cp.asarray(raw).view(cp.int8), qt, (4, 32))


# -- embed --------------------------------------------------------------------------------------
EMBED_CASES = {
    # name: (rows, blocks per row, tokens, max_grid, raw offset, ids on device)
    "1row_1token": (1, 1, 1, MAX_GRID_X, 0, False),
    "odd": (37, 3, 13, MAX_GRID_X, 0, True),
    "rows_70000": (70000, 1, 31, MAX_GRID_X, 0, True),
    "clamped_grid": (50, 2, 77, 2, 0, False),
    "unaligned_raw": (21, 2, 9, MAX_GRID_X, 4, True),
    "4096_tokens": (1000, 2, 4096, MAX_GRID_X, 0, True),
}


def embed_shape(qt: QuantType, rows: int, bpr: int, aligned: bool = True) -> tuple[int, int]:
    if qt.is_quantized:
        return (rows, bpr * qt.block_size)
    return (rows, 16 * bpr if aligned else 13 * bpr)  # 13: the scalar path, partial chunks


@pytest.mark.parametrize("case", list(EMBED_CASES))
@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
def test_embed_equals_reference(cp, qt: QuantType, case: str) -> None:
    rows, bpr, nt, max_grid, offset, device_ids = EMBED_CASES[case]
    shape = embed_shape(qt, rows, bpr, aligned=case != "unaligned_raw")
    raw = finite_raw(qt, qt.nbytes(shape) // qt.type_size)
    ids = RNG.integers(0, rows, nt).astype(np.int32)
    ids[: min(nt, 2)] = [rows - 1, 0][: min(nt, 2)]
    want, _ = embed.ref_embed_rows(raw, qt, shape, ids)
    out = poisoned(cp, (nt, shape[1]), cp.float32)
    if qt.name == "F32":
        offset -= offset % 4  # an f32 table must be 4-byte aligned
    got, rec = embed.launch_embed_rows(
        on_device_at(cp, raw, offset),
        qt,
        shape,
        cp.asarray(ids) if device_ids else ids,
        out=out,
        max_grid=max_grid,
    )
    assert got is out
    assert_bits_equal(got.get(), want, qt, f"embed {qt.name} {case}")
    n = shape[1]
    if qt.name == "F32":
        geo = grid_1d(nt * math.ceil(n / 4), embed.BLOCK, max_grid)
        assert rec.kernel == "gather_rows_f32"
    else:
        geo = grid_1d(nt * math.ceil(n / 8), embed.BLOCK, max_grid)
        assert rec.kernel == f"embed_rows_{qt.suffix}"
    assert (rec.grid, rec.block, rec.threads_launched) == (
        geo.grid,
        geo.block,
        geo.threads_launched,
    )
    assert rec.bytes_read == nt * qt.row_bytes(n) + 4 * nt and rec.bytes_written == 4 * nt * n


@pytest.mark.parametrize("qt", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("bad", [-1, 6, 2**31 - 1])
def test_embed_device_id_out_of_range_surfaces(cp, qt: QuantType, bad: int) -> None:
    shape = embed_shape(qt, 6, 1)
    raw = cp.asarray(finite_raw(qt, qt.nbytes(shape) // qt.type_size))
    ids = cp.asarray(np.array([0, 5, bad, 1, bad], np.int32))
    word = "negative" if bad < 0 else "out of range"
    with pytest.raises(KernelInputError, match=rf"token id {bad} at position 2 is {word}"):
        embed.launch_embed_rows(raw, qt, shape, ids)
    cp.cuda.get_current_stream().synchronize()  # the device is still usable afterwards
    good, _ = embed.launch_embed_rows(raw, qt, shape, cp.asarray(np.array([5], np.int32)))
    want, _ = embed.ref_embed_rows(raw.get(), qt, shape, np.array([5], np.int32))
    assert_bits_equal(good.get(), want, qt, f"embed {qt.name} after a bad id")


def test_embed_host_id_out_of_range_raises_before_launch(cp) -> None:
    qt = quant_type("Q4_K")
    raw = cp.asarray(finite_raw(qt, 4))
    out = poisoned(cp, (2, 256), cp.float32)
    with pytest.raises(KernelInputError, match="token id 4 at position 1 is out of range"):
        embed.launch_embed_rows(raw, qt, (4, 256), np.array([3, 4], np.int32), out=out)
    assert cp.isnan(out).all()  # nothing was launched


@pytest.mark.parametrize(("n", "offset"), [(8, 0), (7, 0), (12, 4), (1, 0)])
def test_gather_rows_f32(cp, n: int, offset: int) -> None:
    rows, nt = 66000, 19
    x = RNG.standard_normal((rows, n)).astype(np.float32)
    buf = cp.empty(rows * n + offset // 4, cp.float32)
    xd = buf[offset // 4 :].reshape(rows, n)  # offset 4: not 16-byte aligned, scalar path
    xd.set(x)
    ids = RNG.integers(0, rows, nt).astype(np.int32)
    ids[:2] = [rows - 1, 0]
    out = poisoned(cp, (nt, n), cp.float32)
    got, rec = embed.launch_gather_rows_f32(xd, cp.asarray(ids), out=out)
    np.testing.assert_array_equal(got.get(), x[ids])
    assert rec.grid == grid_1d(nt * math.ceil(n / 4), embed.BLOCK).grid
    with pytest.raises(KernelInputError, match=f"token id {rows} at position 0"):
        embed.launch_gather_rows_f32(xd, cp.asarray(np.array([rows, 0], np.int32)))


def test_backend_cupy_uses_these_launchers(cp) -> None:
    from tracekit.kernels.backend import CupyBackend

    be = CupyBackend()
    qt = quant_type("Q6_K")
    raw = finite_raw(qt, 6)
    got = be.dequantize_f16(be.asarray(raw), qt, (3, 512))
    want, _ = dequant.ref_dequantize_f16(raw, qt, (3, 512))
    assert_bits_equal(be.to_host(got), want, qt, "CupyBackend.dequantize_f16")
    rows = be.embed_rows(be.asarray(raw), qt, (3, 512), np.array([2, 0], np.int32))
    want, _ = embed.ref_embed_rows(raw, qt, (3, 512), np.array([2, 0], np.int32))
    assert_bits_equal(be.to_host(rows), want, qt, "CupyBackend.embed_rows")
    assert [r.kernel for r in be.take_records()] == ["dequant_q6_k_f16", "embed_rows_q6_k"]

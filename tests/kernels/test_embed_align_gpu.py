"""GPU tests of the quant embed kernels' two decoder paths (marked ``gpu``).

Run on a GPU host:  .venv/bin/pytest -m gpu tests/kernels/test_embed_align_gpu.py

embed.cu decodes a table with the word-wise ``Fast<T>`` decoders when ``raw % Fast<T>::ALIGN ==
0`` (Q4_K/Q5_K 16, Q5_1 8, Q4_1 4, the others 2) and with the byte-wise ones otherwise. Here
every quant type runs from a table at several offsets past a 256-byte boundary, so each type
takes both paths, and the rows (row_bytes = blocks * TS, an odd number of blocks) start at
every alignment the table allows. Compared bit for bit with the NumPy reference, which is
gguf-py's dequantization.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_dequant import TYPES, assert_bits_equal
from tests.kernels.test_dequant_embed_gpu import finite_raw, on_device_at, poisoned
from tracekit.kernels import dequant, embed
from tracekit.quants import QuantType

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(2027)
QTYPES = [t for t in TYPES if t.is_quantized]
#: Offsets of the table past a 256-byte boundary: aligned, odd, 2 mod 4, 4 mod 8 and 8 mod 16
#: (at 2, 4 and 8 some types are word-wise, the others byte-wise).
OFFSETS = (0, 1, 2, 3, 4, 6, 8, 12)
#: f16 scale bits: +-0, +-smallest and largest subnormal, smallest normal, +-max, +-Inf, NaNs, +-1
SPECIAL_F16 = np.array(
    [
        int(h, 16)
        for h in "0000 8000 0001 8001 03FF 0400 7BFF FBFF 7C00 FC00 7E00 7C01 3C00 BC00".split()
    ],
    np.uint16,
)


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("device_ids", [False, True], ids=["host_ids", "device_ids"])
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
def test_embed_at_every_table_alignment(cp, qt: QuantType, offset: int, device_ids: bool) -> None:
    rows, bpr, nt = 23, 3, 40  # 3 blocks a row: rows start at each alignment that TS allows
    shape = (rows, bpr * qt.block_size)
    raw = finite_raw(qt, rows * bpr)
    ids = RNG.integers(0, rows, nt).astype(np.int32)
    ids[:2] = [rows - 1, 0]
    want, _ = embed.ref_embed_rows(raw, qt, shape, ids)
    out = poisoned(cp, (nt, shape[1]), cp.float32)
    got, _ = embed.launch_embed_rows(
        on_device_at(cp, raw, offset), qt, shape, cp.asarray(ids) if device_ids else ids, out=out
    )
    assert_bits_equal(got.get(), want, qt, f"embed {qt.name} table at +{offset}")


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("qt", QTYPES, ids=[t.name for t in QTYPES])
def test_embed_nan_inf_zero_scales_both_paths(cp, qt: QuantType, offset: int) -> None:
    # random bytes, with NaN, Inf, subnormal and signed-zero f16 fields forced into half the
    # blocks: word-wise (FFMA) and byte-wise (FMUL then FADD) agree with gguf-py bit for bit
    rows, bpr = 64, 2
    shape = (rows, bpr * qt.block_size)
    raw = RNG.integers(0, 256, qt.nbytes(shape), dtype=np.uint8)
    blocks = raw.reshape(-1, qt.type_size)
    for off in dequant.f16_field_offsets(qt):  # each special in some block, each field
        pick = RNG.integers(0, len(SPECIAL_F16), blocks.shape[0] // 2)
        blocks[: len(pick), off : off + 2] = SPECIAL_F16[pick].view(np.uint8).reshape(-1, 2)
    ids = np.arange(rows - 1, -1, -1, dtype=np.int32)
    want, _ = embed.ref_embed_rows(raw, qt, shape, ids)
    got, _ = embed.launch_embed_rows(on_device_at(cp, raw, offset), qt, shape, cp.asarray(ids))
    assert_bits_equal(got.get(), want, qt, f"embed {qt.name} NaN/Inf table at +{offset}")

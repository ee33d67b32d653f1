"""The public functions (tracekit/api.py) through the package root, on the NumPy backend."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import tracekit
from tracekit.kernels.backend import get_backend


def _table(rows: int, cols: int, qtype: T) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(7).standard_normal((rows, cols)).astype(np.float32)
    raw = gguf.quants.quantize(x, qtype)
    return raw.reshape(-1).view(np.uint8), gguf.quants.dequantize(raw, qtype)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0])
def test_dequantize_matches_gguf_and_leaves_no_records(qtype: T) -> None:
    raw, ref = _table(3, 96, qtype)
    be = get_backend("numpy")
    out = tracekit.dequantize(raw, qtype.name, (3, 96), backend=be)
    assert out.dtype == np.float16 and out.shape == (3, 96)
    np.testing.assert_array_equal(out, ref.astype(np.float16))
    assert be.records == []  # a caller's backend does not accumulate the call's launch records


def test_embed_gathers_rows_and_leaves_no_records() -> None:
    raw, ref = _table(5, 64, T.Q8_0)
    be = get_backend("numpy")
    out = tracekit.embed(raw, T.Q8_0, (5, 64), [4, 0, 4], backend=be)
    assert out.dtype == np.float32 and out.shape == (3, 64)
    np.testing.assert_array_equal(out, ref[[4, 0, 4]])
    assert be.records == []


def test_embed_refuses_non_integer_ids() -> None:
    raw, _ = _table(5, 64, T.Q8_0)
    with pytest.raises(ValueError, match="token ids must be integers, got dtype float64"):
        tracekit.embed(raw, "Q8_0", (5, 64), [1.0, 2.0], backend="numpy")


def test_dequantize_names_a_bad_row_length() -> None:
    raw, _ = _table(2, 64, T.Q8_0)
    with pytest.raises(ValueError, match="row length 33 is not a multiple of Q8_0 block size 32"):
        tracekit.dequantize(raw[: 2 * 34], "Q8_0", (2, 33), backend="numpy")

"""The synthetic model writer's parts (tracekit/model/synthetic.py): its byte-level vocabulary
and its packers for the types gguf-py cannot quantize, checked with gguf-py's decoders. The
written models themselves are tested where they are used (test_demo, test_model, the parity
tests against transformers).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tracekit.model.synthetic import (
    byte_level_vocab,
    quantize_iq4_nl,
    quantize_iq4_xs,
    quantize_q2_k,
    quantize_q3_k,
    quantize_q4_k,
    quantize_q5_k,
    quantize_q6_k,
)
from tracekit.quants import QUANT_TABLE


def test_byte_level_vocab() -> None:
    v = byte_level_vocab(40)
    assert len(v.tokens) == 256 + 40 + 3 and len(v.merges) == 40
    assert v.tokens[ord("A")] == "A" and v.tokens[ord(" ")] == "Ġ"
    assert v.token_types[-3:] == [3, 3, 3] and v.bos_id == v.eos_id == 296
    for m in v.merges:  # every merge's parts exist before its result
        a, b = m.split(" ")
        assert v.tokens.index(a) < v.tokens.index(a + b) and v.tokens.index(b) < v.tokens.index(
            a + b
        )
    assert byte_level_vocab(40) == v


@pytest.mark.parametrize(
    ("quantize", "qtype", "bits", "corr"),
    [
        (quantize_q2_k, T.Q2_K, 2, 0.94),
        (quantize_q3_k, T.Q3_K, 3, 0.98),
        (quantize_q4_k, T.Q4_K, 4, 0.99),
        (quantize_q5_k, T.Q5_K, 5, 0.99),
        (quantize_q6_k, T.Q6_K, 6, 0.99),
        (quantize_iq4_nl, T.IQ4_NL, 4, 0.99),
        (quantize_iq4_xs, T.IQ4_XS, 4, 0.99),
    ],
    ids=lambda v: v.name if isinstance(v, T) else None,
)
def test_k_quant_packers_decode_close(quantize, qtype: T, bits: int, corr: float) -> None:
    """The packed blocks decode (with gguf-py, the independent decoder) close to the input."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    x[1, :256] = 0.0  # an all-zero block: d = 0 must not produce NaN
    q = quantize(x)
    qk, ts = gguf.GGML_QUANT_SIZES[qtype]
    assert q.dtype == np.uint8 and q.shape == (3, 512 // qk * ts)
    y = gguf.quants.dequantize(q, qtype)
    assert np.isfinite(y).all() and np.array_equal(y[1, :256], np.zeros(256, np.float32))
    # error within about one step of the sub-block range (x spans ~±3.5)
    assert np.abs(y - x).max() < 8.0 / 2**bits
    assert np.corrcoef(x.ravel(), y.ravel())[0, 1] > corr


def test_k_quant_packers_reject_short_rows() -> None:
    with pytest.raises(ValueError, match="row length 128 is not a multiple of 256"):
        quantize_q4_k(np.zeros((2, 128), np.float32))


def test_iq4_nl_packer_rejects_rows_of_partial_blocks() -> None:
    with pytest.raises(ValueError, match="row length 48 is not a multiple of 32"):
        quantize_iq4_nl(np.zeros((2, 48), np.float32))


@pytest.mark.parametrize("qtype", [q.qtype for q in QUANT_TABLE.values() if q.is_quantized])
def test_random_blocks_decode_finite_near_the_std(qtype: T) -> None:
    from tracekit.model.synthetic import random_blocks

    rng = np.random.default_rng(3)
    raw = random_blocks(rng, (8, 512), 0.05, qtype)
    assert raw.dtype == np.uint8 and raw.shape == (
        8,
        gguf.GGML_QUANT_SIZES[qtype][1] * 512 // gguf.GGML_QUANT_SIZES[qtype][0],
    )
    x = gguf.quants.dequantize(raw, qtype)
    assert x.shape == (8, 512) and np.isfinite(x).all()
    # the scale is set from the type's own code spread: the values' std is about the one asked
    assert 0.05 / 2 < float(x.std()) < 0.05 * 2


def test_random_blocks_spec_writes_a_loadable_model(tmp_path) -> None:
    import tracekit
    from tracekit.model.synthetic import write_synthetic_model

    p = write_synthetic_model(tmp_path / "r.gguf", "llama", random_blocks=True)
    logits = tracekit.load_model(p).logits([1, 2, 3], backend="numpy")
    assert np.isfinite(logits).all()

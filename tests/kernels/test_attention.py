"""CPU tests of the attention family: the NumPy references against a per-(token, head) loop in
float64 written independently of the vectorised reference, and every gate."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels.attention import ref_attention_f32, ref_kv_store_f32
from tracekit.kernels.checks import KernelInputError


def naive_attention(q, k, v, n_past, scale, window=0, softcap=0.0):
    """One (token, head) at a time, float64, explicit key loop bounds."""
    nt, n_head, hd = q.shape
    n_kv = k.shape[1]
    g = n_head // n_kv
    out = np.zeros((nt, n_head, hd))
    for t in range(nt):
        pos = n_past + t
        lo = max(0, pos - window + 1) if window > 0 else 0
        for h in range(n_head):
            kh = h // g
            s = np.array(
                [scale * np.dot(q[t, h].astype(np.float64), k[j, kh]) for j in range(lo, pos + 1)]
            )
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            p = np.exp(s - s.max())
            p /= p.sum()
            out[t, h] = sum(p[i] * v[lo + i, kh].astype(np.float64) for i in range(len(p)))
    return out.reshape(nt, n_head * hd)


def make(nt, n_head, n_kv, hd, n_ctx, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nt, n_head, hd), dtype=np.float32)
    k = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    v = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    return q, k, v


@pytest.mark.parametrize(
    "nt,n_head,n_kv,hd,n_past,window,softcap",
    [
        (1, 4, 4, 16, 0, 0, 0.0),  # first token: attends only itself
        (1, 8, 2, 32, 20, 0, 0.0),  # decode, GQA 4:1
        (7, 6, 3, 16, 5, 0, 0.0),  # prefill continuing a cache
        (9, 4, 1, 8, 3, 4, 0.0),  # sliding window, MQA
        (5, 4, 2, 16, 10, 0, 5.0),  # soft-capped scores
        (12, 2, 2, 8, 0, 3, 2.0),  # window + softcap from the start
    ],
)
def test_attention_matches_naive(nt, n_head, n_kv, hd, n_past, window, softcap):
    q, k, v = make(nt, n_head, n_kv, hd, n_ctx=n_past + nt + 3)
    scale = 1.0 / np.sqrt(hd)
    out, rec = ref_attention_f32(q, k, v, n_past, scale, window, softcap)
    assert out.dtype == np.float32 and out.shape == (nt, n_head * hd)
    # f32 softmax and dot products vs a float64 loop: a few ulp of the O(1) outputs.
    np.testing.assert_allclose(
        out, naive_attention(q, k, v, n_past, scale, window, softcap), rtol=1e-5, atol=1e-5
    )
    assert rec.kernel == "attention_f32" and rec.flops > 0
    assert rec.bytes_written == out.nbytes
    assert rec.bytes_read >= q.nbytes


def test_attention_ignores_rows_past_the_query():
    """Rows after n_past+nt-1 (unfilled cache) must not matter, even if they hold NaN."""
    q, k, v = make(3, 2, 1, 8, n_ctx=10)
    a, _ = ref_attention_f32(q, k, v, 4, 0.3)
    k[7:], v[7:] = np.nan, np.nan
    b, _ = ref_attention_f32(q, k, v, 4, 0.3)
    np.testing.assert_array_equal(a, b)


def test_attention_window_excludes_old_keys():
    q, k, v = make(1, 2, 2, 8, n_ctx=10)
    a, _ = ref_attention_f32(q, k, v, 8, 0.3, window=3)  # position 8 sees keys 6, 7, 8
    k[:6], v[:6] = np.nan, np.nan
    b, _ = ref_attention_f32(q, k, v, 8, 0.3, window=3)
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(b).all()


def test_attention_single_key_returns_its_value():
    q, k, v = make(1, 4, 2, 8, n_ctx=1)
    out, _ = ref_attention_f32(q, k, v, 0, 1.0)
    np.testing.assert_array_equal(out.reshape(4, 8), v[0][[0, 0, 1, 1]])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(nh=6, nkv=4), "multiple of n_kv"),
        (dict(hd_q=16), "head_dim"),
        (dict(n_past=8), "n_ctx"),
        (dict(window=-1), "window"),
        (dict(softcap=-1.0), "softcap"),
        (dict(dtype=np.float16), "dtype"),
        (dict(n_past=-1), "negative"),
    ],
)
def test_attention_gates(kwargs, match):
    nh, nkv, hd = kwargs.get("nh", 4), kwargs.get("nkv", 2), 8
    q = np.zeros((3, nh, kwargs.get("hd_q", hd)), dtype=kwargs.get("dtype", np.float32))
    k = np.zeros((10, nkv, hd), dtype=np.float32)
    with pytest.raises(KernelInputError, match=match):
        ref_attention_f32(
            q,
            k,
            k.copy(),
            kwargs.get("n_past", 0),
            1.0,
            kwargs.get("window", 0),
            kwargs.get("softcap", 0.0),
        )


def test_attention_rejects_non_contiguous_q():
    q = np.zeros((4, 3, 8), dtype=np.float32).transpose(1, 0, 2)[:, :2]
    k = np.zeros((10, 2, 8), dtype=np.float32)
    with pytest.raises(KernelInputError, match="contiguous"):
        ref_attention_f32(q, k, k.copy(), 0, 1.0)


def test_kv_store_writes_rows_in_place():
    cache = np.full((8, 2, 4), -7.0, dtype=np.float32)
    x = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    out, rec = ref_kv_store_f32(cache, x, 5)
    assert out is cache
    np.testing.assert_array_equal(cache[5:8], x)
    assert (cache[:5] == -7.0).all()
    assert rec.kernel == "kv_store_f32" and rec.bytes_read == x.nbytes == rec.bytes_written


def test_kv_store_gates():
    cache = np.zeros((8, 2, 4), dtype=np.float32)
    with pytest.raises(KernelInputError, match="n_ctx 8"):
        ref_kv_store_f32(cache, np.zeros((3, 2, 4), np.float32), 6)
    with pytest.raises(KernelInputError, match="expected"):
        ref_kv_store_f32(cache, np.zeros((3, 1, 4), np.float32), 0)
    with pytest.raises(KernelInputError, match="dtype"):
        ref_kv_store_f32(cache, np.zeros((3, 2, 4), np.float64), 0)
    with pytest.raises(KernelInputError, match="negative"):
        ref_kv_store_f32(cache, np.zeros((1, 2, 4), np.float32), -1)


def test_attention_nan_value_reaches_only_queries_that_attend_it():
    """A NaN in the V row of position 6 poisons queries at positions >= 6 only (causal)."""
    q, k, v = make(4, 2, 1, 8, n_ctx=8)
    clean, _ = ref_attention_f32(q, k, v, 4, 0.3)
    v[6, 0, 3] = np.nan
    out, _ = ref_attention_f32(q, k, v, 4, 0.3)  # queries at positions 4, 5, 6, 7
    # unpoisoned and equal up to f32 rounding: BLAS may take another kernel once the V block
    # holds a NaN (OpenBLAS 0.3.31 under numpy 2.4.6: 6e-8 apart), so not bit for bit
    assert np.isfinite(out[:2]).all()
    np.testing.assert_allclose(out[:2], clean[:2], rtol=1e-6, atol=1e-7)
    assert np.isnan(out[2:]).any(axis=1).all()

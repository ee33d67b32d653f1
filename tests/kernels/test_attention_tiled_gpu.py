"""GPU parity of attention_tiled_f32 (the launcher's kernel from its bucket's min_nt queries on) against
ref_attention_f32, at the sizes that break tiles: nt around the 32-query tile and the 64-key
tile, caches with n_past > 0, windows of 1, 7 and longer than the context, a soft cap, GQA
ratios 1, 2 and 7, every head_dim bucket (64, 80 -> 128, 128, 256), NaN in q, K and V.

Run on a GPU host: ``.venv/bin/pytest -m gpu tests/kernels/test_attention_tiled_gpu.py``.
Outputs are poisoned (NaN) before every launch, so a cell the kernel does not write fails; the
cache rows past the step's last position are NaN, so a row the kernel must not read fails too.
The same cases run on the CPU through tests/kernels/host_shim/cuda_block.h (test_attention.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels import cuda
from tracekit.kernels.attention import (
    TILE_CONFIGS,
    TILE_THREADS,
    attention_kernel,
    launch_attention_f32,
    ref_attention_f32,
)

pytestmark = pytest.mark.gpu

# f32 dot products and an online softmax in another order than NumPy's matmul: O(1) outputs
# (inputs ~N(0,1)) agree to a few ulp of the sums, head_dim up to 256
ATOL, RTOL = 2e-5, 1e-4


def _cp():
    import cupy

    return cupy


def inputs(nt, n_past, n_head, n_kv, hd, seed):
    rng = np.random.default_rng(seed)
    n_ctx = n_past + nt + 3
    q = rng.standard_normal((nt, n_head, hd), dtype=np.float32)
    k = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    v = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    k[n_past + nt :], v[n_past + nt :] = np.nan, np.nan  # unfilled rows: never read
    return q, k, v


def run(q, k, v, n_past, scale, window=0, softcap=0.0, positions=None, tiled=True):
    cp = _cp()
    nt, n_head, hd = q.shape
    out = cp.full((nt, n_head * hd), np.nan, np.float32)
    pos = None if positions is None else cp.asarray(positions)
    got, rec = launch_attention_f32(
        cp.asarray(q),
        cp.asarray(k),
        cp.asarray(v),
        n_past,
        scale,
        window,
        softcap,
        out,
        pos,
        tiled=tiled,
    )
    assert got is out
    return got.get(), rec


CASES = [
    # nt, n_past, n_head, n_kv, window, softcap
    (16, 0, 4, 4, 0, 0.0),  # the threshold, GQA 1
    (17, 0, 4, 2, 0, 0.0),  # GQA 2
    (63, 0, 14, 2, 0, 0.0),  # Qwen2.5-0.5B's heads: GQA 7
    (64, 0, 8, 4, 7, 0.0),  # window 7
    (65, 29, 8, 8, 0, 0.0),  # continuing a cache, one query past two tiles
    (130, 0, 4, 2, 1, 0.0),  # window 1: each query sees only itself
    (130, 200, 7, 1, 0, 30.0),  # soft cap, MQA, a long cache
    (37, 11, 8, 4, 16, 0.0),  # window 16 over a cache
    (20, 9, 4, 2, 1000, 0.0),  # a window longer than the context
    (512, 0, 14, 2, 0, 0.0),  # the 512-token prefill of Qwen2.5-0.5B
    (512, 40, 8, 4, 128, 50.0),  # a prefill continuing a cache, window and cap
]


@pytest.mark.parametrize("hd", [64, 80, 128, 256])
@pytest.mark.parametrize("nt,n_past,n_head,n_kv,window,softcap", CASES)
def test_tiled_attention_matches_reference(nt, n_past, n_head, n_kv, window, softcap, hd):
    q, k, v = inputs(nt, n_past, n_head, n_kv, hd, seed=nt + n_past + hd)
    scale = 1.0 / np.sqrt(hd)
    want, rref = ref_attention_f32(q, k, v, n_past, scale, window, softcap)
    got, rec = run(q, k, v, n_past, scale, window, softcap)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)
    cfg = attention_kernel(nt, hd, tiled=True)
    assert cfg is not None and rec.kernel == cfg.name and hd <= cfg.d
    assert rec.grid == (-(-nt // cfg.bq), n_head, 1) and rec.block == (TILE_THREADS, 1, 1)
    assert rec.extra["shared_bytes"] == cfg.shared_bytes
    assert (rec.bytes_read, rec.bytes_written, rec.flops) == (
        rref.bytes_read,
        rref.bytes_written,
        rref.flops,
    )


def test_below_the_threshold_attention_f32_runs_and_agrees_with_the_tiled_kernel():
    min_nt = TILE_CONFIGS[0].min_nt
    q, k, v = inputs(min_nt, 21, 14, 2, 64, seed=1)
    small, rec_small = run(q[: min_nt - 1], k, v, 21, 0.125, tiled=None)
    tiled, rec_tiled = run(q, k, v, 21, 0.125, tiled=None)
    assert rec_small.kernel == "attention_f32" and rec_small.grid == (min_nt - 1, 14, 1)
    assert rec_tiled.kernel == "attention_tiled_f32_d64"
    # query t's output depends on keys <= 21 + t only: the first nt - 1 rows agree
    np.testing.assert_allclose(tiled[:-1], small, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("hd", [64, 128, 256])
def test_nan_in_q_poisons_its_row_only(hd):
    q, k, v = inputs(70, 5, 4, 2, hd, seed=hd)
    q[40, 3, 1] = np.nan
    want, _ = ref_attention_f32(q, k, v, 5, 0.1)
    got, _ = run(q, k, v, 5, 0.1)
    bad = np.zeros(want.shape, bool)
    bad[40, 3 * hd : 4 * hd] = True
    assert np.isnan(want[bad]).all() and np.isnan(got[bad]).all()
    np.testing.assert_allclose(got[~bad], want[~bad], atol=ATOL, rtol=RTOL)


def test_nan_key_and_value_reach_only_the_queries_that_attend_them():
    q, k, v = inputs(48, 0, 2, 2, 64, seed=5)
    k[30, 0, 7] = np.nan  # kv head 0: head 0, from position 30 on
    v[40, 1, 3] = np.nan  # kv head 1: head 1, from position 40 on (masked P is 0; 0 * NaN)
    got, _ = run(q, k, v, 0, 0.125)
    g = got.reshape(48, 2, 64)
    assert np.isfinite(g[:30, 0]).all() and np.isnan(g[30:, 0]).all()
    assert np.isfinite(g[:40, 1]).all() and np.isnan(g[40:, 1, 3]).all()


def test_rows_below_every_window_are_never_seen():
    q, k, v = inputs(32, 90, 2, 1, 64, seed=6)
    k[:86], v[:86] = np.nan, np.nan  # query 90 + t sees keys 86 + t .. 90 + t
    want, _ = ref_attention_f32(q, k, v, 90, 0.125, window=5)
    got, _ = run(q, k, v, 90, 0.125, window=5)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_a_replayed_launch_reads_n_past_from_positions():
    """Recorded at n_past 5, replayed after the positions moved to 9: the kernel's n_past is
    the device's, the grid (which depends on nt only) stays right."""
    cp = _cp()
    q, k, v = inputs(40, 9, 4, 2, 64, seed=7)
    dq, dk, dv = cp.asarray(q), cp.asarray(k), cp.asarray(v)
    pos = cp.arange(5, 45, dtype=cp.int32)
    out = cp.full((40, 4 * 64), np.nan, np.float32)
    tape = cuda.LaunchTape()
    with cuda.recording(tape):
        _, rec = launch_attention_f32(dq, dk, dv, 5, 0.125, out=out, positions=pos, tiled=True)
    assert rec.kernel == "attention_tiled_f32_d64" and len(tape) == 1
    pos[:] = cp.arange(9, 49, dtype=cp.int32)
    out.fill(np.nan)
    fn, grid, block, args, smem = tape.entries[0]
    fn(grid, block, args, shared_mem=smem)
    want, _ = ref_attention_f32(q, k, v, 9, 0.125)
    np.testing.assert_allclose(out.get(), want, atol=ATOL, rtol=RTOL)

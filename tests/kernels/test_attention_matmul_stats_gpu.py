"""GPU parity of the attention, matmul and stats kernels against their NumPy references.

Run on a GPU host: ``.venv/bin/pytest -m gpu tests/kernels/test_attention_matmul_stats_gpu.py``.
Outputs are poisoned (NaN) before every launch, so a cell the kernel does not write fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels.attention import (
    SPLIT_MIN_KEYS,
    attention_kernel,
    attention_splits,
    launch_attention_f32,
    launch_kv_store_f32,
    ref_attention_f32,
    ref_kv_store_f32,
)
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.elementwise import sm_count
from tracekit.kernels.matmul import launch_matmul_f16w
from tracekit.kernels.stats import StatsBatch, decode_heatmap, tensor_stats

pytestmark = pytest.mark.gpu


def _cp():
    import cupy

    return cupy


def poisoned(shape, dtype=np.float32):
    return _cp().full(shape, np.nan, dtype=dtype)


def _qkv(seed: int, nt: int, n_ctx: int, n_head: int, n_kv: int, hd: int):
    """Random f32 q [nt, n_head, hd] and K/V caches [n_ctx, n_kv, hd], drawn in that order."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nt, n_head, hd), dtype=np.float32)
    k = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    v = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    return q, k, v


# -- attention ----------------------------------------------------------------------------------
# The kernel sums q·k over lanes in a different order than NumPy's matmul and uses expf in an
# online softmax: agreement to 1e-5 absolute + 1e-4 relative on O(1) outputs (inputs ~N(0,1)).
ATOL, RTOL = 1e-5, 1e-4


@pytest.mark.parametrize("hd", [64, 80, 128, 256])
@pytest.mark.parametrize(
    "nt,n_past,n_head,n_kv,window,softcap",
    [
        (1, 0, 14, 2, 0, 0.0),  # one key: one range, the other splits empty
        (1, SPLIT_MIN_KEYS - 1, 14, 2, 0, 0.0),  # one range of 16 keys
        (1, SPLIT_MIN_KEYS, 14, 2, 0, 0.0),  # 17 keys: two ranges, the second of one key
        (1, 127, 32, 8, 0, 0.0),  # Llama-3-8B's heads at the end of tg128
        (1, 1000, 14, 2, 0, 30.0),  # a long cache, soft-capped
        (1, 900, 8, 1, 64, 0.0),  # a window: the ranges split [pos - 63, pos] only
        (3, 45, 4, 2, 0, 0.0),  # three queries, each its own key count
    ],
)
def test_split_k_decode_matches_reference(nt, n_past, n_head, n_kv, window, softcap, hd):
    """attention_f32 with its keys split over grid.z blocks (split-K, merged by the last block
    of each (token, head)): the reference's result at every split count the device picks,
    also when the same launch is replayed at later positions (the ranges come from past[0])."""
    from tracekit.kernels import cuda

    cp = _cp()
    n_ctx = n_past + nt + 40
    q, k, v = _qkv(n_past + hd, nt, n_ctx, n_head, n_kv, hd)
    dq, dk, dv = cp.asarray(q), cp.asarray(k), cp.asarray(v)
    pos = cp.arange(n_past, n_past + nt, dtype=cp.int32)
    out = poisoned((nt, n_head * hd))
    tape = cuda.LaunchTape()
    with cuda.recording(tape):
        _, rec = launch_attention_f32(dq, dk, dv, n_past, hd**-0.5, window, softcap, out, pos)
    assert len(tape) == 1
    splits = attention_splits(nt, n_head, n_ctx, sm_count())
    assert rec.kernel == "attention_f32" and rec.grid == (nt, n_head, splits) and splits > 1
    want, _ = ref_attention_f32(q, k, v, n_past, hd**-0.5, window, softcap)
    np.testing.assert_allclose(out.get(), want, atol=ATOL, rtol=RTOL)
    for later in (n_past + 7, n_past + 39):  # the recorded launch, replayed further on
        pos[:] = cp.arange(later, later + nt, dtype=cp.int32)
        out.fill(np.nan)
        fn, grid, block, args, smem = tape.entries[0]
        fn(grid, block, args, shared_mem=smem)
        want, _ = ref_attention_f32(q, k, v, later, hd**-0.5, window, softcap)
        np.testing.assert_allclose(out.get(), want, atol=ATOL, rtol=RTOL, err_msg=str(later))


def test_split_k_nan_key_poisons_only_the_queries_that_see_it():
    cp = _cp()
    q, k, v = _qkv(3, 1, 300, 14, 2, 64)
    k[150, 1, 3] = np.nan  # kv head 1: q heads 7..13
    out = poisoned((1, 14 * 64))
    launch_attention_f32(cp.asarray(q), cp.asarray(k), cp.asarray(v), 250, 0.125, out=out)
    got = out.get().reshape(14, 64)
    assert np.isnan(got[7:]).all() and np.isfinite(got[:7]).all()
    want, _ = ref_attention_f32(q, k, v, 250, 0.125)
    np.testing.assert_allclose(got[:7], want.reshape(14, 64)[:7], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("hd", [64, 128])
@pytest.mark.parametrize(
    "nt,n_past,n_head,n_kv,window,softcap",
    [
        (1, 0, 8, 8, 0, 0.0),  # the first decode step: one key
        (1, 300, 14, 2, 0, 0.0),  # decode, GQA 7:1, many keys
        (37, 0, 9, 3, 0, 0.0),  # prefill (SmolLM2's 9 heads over 3 kv heads)
        (37, 11, 8, 4, 16, 0.0),  # prefill continuing a cache, sliding window
        (1, 600, 8, 1, 512, 0.0),  # decode past the window (gemma3 local layer), MQA
        (5, 3, 4, 2, 0, 50.0),  # soft-capped scores
    ],
)
def test_attention_matches_reference(nt, n_past, n_head, n_kv, window, softcap, hd):
    cp = _cp()
    rng = np.random.default_rng(nt + n_past + hd)
    n_ctx = n_past + nt + 5
    q = rng.standard_normal((nt, n_head, hd), dtype=np.float32)
    k = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    v = rng.standard_normal((n_ctx, n_kv, hd), dtype=np.float32)
    k[n_past + nt :] = np.nan  # unfilled rows: never read
    v[n_past + nt :] = np.nan
    scale = 1.0 / np.sqrt(hd)
    want, rref = ref_attention_f32(q, k, v, n_past, scale, window, softcap)
    out = poisoned((nt, n_head * hd))
    got, rec = launch_attention_f32(
        cp.asarray(q), cp.asarray(k), cp.asarray(v), n_past, scale, window, softcap, out=out
    )
    assert got is out
    np.testing.assert_allclose(got.get(), want, atol=ATOL, rtol=RTOL)
    cfg = attention_kernel(nt, hd)  # the tiled kernel from its bucket's min_nt queries on
    if cfg is None:
        splits = attention_splits(nt, n_head, n_ctx, sm_count())
        assert rec.kernel == "attention_f32" and rec.extra["splits"] == splits
        assert rec.grid == (nt, n_head, splits) and rec.block == (128, 1, 1)
    else:
        assert rec.kernel == cfg.name and rec.grid == (-(-nt // cfg.bq), n_head, 1)
    assert (rec.bytes_read, rec.bytes_written, rec.flops) == (
        rref.bytes_read,
        rref.bytes_written,
        rref.flops,
    )


def test_attention_head_dim_256_and_odd():
    cp = _cp()
    for hd in (256, 80, 33):
        rng = np.random.default_rng(hd)
        q = rng.standard_normal((3, 4, hd), dtype=np.float32)
        k = rng.standard_normal((10, 2, hd), dtype=np.float32)
        v = rng.standard_normal((10, 2, hd), dtype=np.float32)
        want, _ = ref_attention_f32(q, k, v, 7, 0.1)
        got, _ = launch_attention_f32(
            cp.asarray(q), cp.asarray(k), cp.asarray(v), 7, 0.1, out=poisoned((3, 4 * hd))
        )
        np.testing.assert_allclose(got.get(), want, atol=ATOL, rtol=RTOL)


def test_attention_nan_reaches_only_attending_queries():
    cp = _cp()
    q, k, v = _qkv(5, 4, 8, 2, 1, 64)
    k[6, 0, 0] = np.nan  # position 6: read by queries at positions 6 and 7 only
    got, _ = launch_attention_f32(cp.asarray(q), cp.asarray(k), cp.asarray(v), 4, 0.125)
    g = got.get()
    assert np.isfinite(g[:2]).all() and np.isnan(g[2:]).all(axis=1).all()


def test_attention_rejects_head_dim_over_256_and_host_arrays():
    cp = _cp()
    q = cp.zeros((1, 2, 288), cp.float32)
    k = cp.zeros((4, 2, 288), cp.float32)
    with pytest.raises(KernelInputError, match="head_dim 288"):
        launch_attention_f32(q, k, k, 0, 1.0)
    with pytest.raises(KernelInputError, match="cupy"):
        launch_attention_f32(
            np.zeros((1, 2, 8), np.float32), k[:, :, :8].copy(), k[:, :, :8].copy(), 0, 1.0
        )


@pytest.mark.parametrize("start,nt", [(0, 1), (5, 37), (41, 1)])
def test_kv_store_matches_reference(start, nt):
    cp = _cp()
    rng = np.random.default_rng(start)
    kc = rng.standard_normal((42, 3, 64), dtype=np.float32)
    vc = rng.standard_normal((42, 3, 64), dtype=np.float32)
    k = rng.standard_normal((nt, 3, 64), dtype=np.float32)
    v = rng.standard_normal((nt, 3, 64), dtype=np.float32)
    dkc, dvc = cp.asarray(kc), cp.asarray(vc)
    got, rec = launch_kv_store_f32(dkc, cp.asarray(k), dvc, cp.asarray(v), start)
    want_k, _ = ref_kv_store_f32(kc.copy(), k, vc_ref := vc.copy(), v, start)
    assert got is dkc
    np.testing.assert_array_equal(dkc.get(), want_k)
    np.testing.assert_array_equal(dvc.get(), vc_ref)
    assert rec.bytes_written == k.nbytes + v.nbytes and rec.grid[1] == 2
    with pytest.raises(KernelInputError, match="n_ctx 42"):
        launch_kv_store_f32(dkc, cp.asarray(k), dvc, cp.asarray(v), 42 - nt + 1)


# -- matmul -------------------------------------------------------------------------------------
@pytest.mark.parametrize("nt,n,k", [(1, 576, 576), (37, 1536, 576), (7, 65, 45), (1, 1, 1)])
def test_matmul_f16w_matches_float64_on_f16_operands(nt, n, k):
    cp = _cp()
    rng = np.random.default_rng(nt * n + k)
    x = rng.standard_normal((nt, k), dtype=np.float32)
    w16 = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float16)
    # The kernel rounds x to f16 (convert_f32_f16) and accumulates in f32: compare with the
    # float64 product of the same f16-rounded operands.
    want = x.astype(np.float16).astype(np.float64) @ w16.astype(np.float64).T
    out = poisoned((nt, n))
    got, recs = launch_matmul_f16w(cp.asarray(x), cp.asarray(w16), out=out)
    assert got is out
    err = np.abs(got.get() - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < 1e-3, f"relative error {err:.2e}"
    conv, gemm = recs
    assert conv.kernel == "convert_f32_f16"
    assert gemm.kernel == "cublaslt_matmul_f16_f32" and gemm.grid is None
    assert gemm.flops == 2 * nt * n * k
    assert gemm.bytes_read == nt * k * 2 + n * k * 2 and gemm.bytes_written == nt * n * 4


def test_matmul_gates():
    cp = _cp()
    x = cp.zeros((2, 8), cp.float32)
    with pytest.raises(KernelInputError, match="k mismatch"):
        launch_matmul_f16w(x, cp.zeros((4, 9), cp.float16))
    with pytest.raises(KernelInputError, match="dtype"):
        launch_matmul_f16w(x, cp.zeros((4, 8), cp.float32))
    with pytest.raises(KernelInputError, match="contiguous"):
        launch_matmul_f16w(x, cp.zeros((8, 4), cp.float16).T)


# -- stats --------------------------------------------------------------------------------------
def _planted(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(dtype)
    flat = x.reshape(-1)
    n = flat.size
    if n < 14:  # too small for the planted specials
        return x
    flat[rng.choice(n, 5, replace=False)] = np.nan
    flat[rng.choice(n, 2, replace=False)] = np.inf
    flat[rng.choice(n, 3, replace=False)] = -np.inf
    flat[rng.choice(n, 4, replace=False)] = 0.0
    return x


@pytest.mark.parametrize(
    "shape,dtype",
    [
        ((37, 576), np.float32),
        ((1, 49152), np.float32),  # a logits row
        ((5, 9, 64), np.float32),
        ((300_001,), np.float32),  # more than the reduction's 1024 blocks x 256 threads
        ((33, 130), np.float16),
        ((17, 70), np.float64),
        ((4096, 4097), np.float32),  # 16.8M elements, non-divisible heatmap blocks
    ],
)
def test_stats_cupy_matches_numpy(shape, dtype):
    cp = _cp()
    x = _planted(shape, dtype)
    want = tensor_stats(x, axes=("tokens", "features"))
    got = tensor_stats(cp.asarray(x), axes=("tokens", "features"))
    for key in ("count", "nan", "pos_inf", "neg_inf", "zeros", "min", "max", "absmax"):
        assert got[key] == want[key], key
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-9, abs=1e-12)
    assert got["std"] == pytest.approx(want["std"], rel=1e-9)
    assert got["hist"]["counts"] == want["hist"]["counts"]
    np.testing.assert_allclose(got["hist"]["edges"], want["hist"]["edges"], rtol=0, atol=0)
    gh, wh = got["heatmap"], want["heatmap"]
    for key in ("rows", "cols", "axes", "source_shape"):
        assert gh[key] == wh[key], key
    assert gh["lo"] == pytest.approx(wh["lo"], rel=1e-9, abs=1e-12)
    assert gh["hi"] == pytest.approx(wh["hi"], rel=1e-9, abs=1e-12)
    a, b = decode_heatmap(gh), decode_heatmap(wh)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    # Cell sums in a different order: codes may differ by one step at a rounding boundary.
    step = (wh["hi"] - wh["lo"]) / 254
    np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], atol=step * 1.01)


def test_stats_cupy_edge_tensors():
    cp = _cp()
    for x in (
        np.full((3, 3), np.nan, np.float32),
        np.full((4, 5), 2.5, np.float32),
        np.zeros((0, 7), np.float32),
        np.array(1.5, np.float32),
        np.array([[3, 1, 2]], np.int32),
    ):
        want, got = tensor_stats(x), tensor_stats(cp.asarray(x))
        assert got == want, x


def test_stats_repeat_calls_reset_the_ticket():
    """The reduction's last-block ticket is reset by the kernel: a second call is correct."""
    cp = _cp()
    x = cp.arange(1_000_000, dtype=cp.float32)
    a, b = tensor_stats(x), tensor_stats(x)
    assert a == b and a["max"] == 999_999.0 and a["min"] == 0.0


def assert_stats_close(got, want):
    """GPU statistics against the NumPy path: counts, min/max, histogram exact; sums to f64
    rounding; heatmap codes within one step (cell sums in another order)."""
    for key in ("count", "nan", "pos_inf", "neg_inf", "zeros", "min", "max", "absmax"):
        assert got[key] == want[key], key
    if want["mean"] is None:
        assert got["mean"] is None and got["std"] is None
    else:
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-9, abs=1e-12)
        assert got["std"] == pytest.approx(want["std"], rel=1e-9, abs=1e-12)
    assert got["hist"] == want["hist"]
    gh, wh = got["heatmap"], want["heatmap"]
    for key in ("rows", "cols", "axes", "source_shape"):
        assert gh[key] == wh[key], key
    if wh["lo"] is None:
        assert gh["lo"] is None and gh["hi"] is None
        assert gh["codes"] == wh["codes"]
        return
    assert gh["lo"] == pytest.approx(wh["lo"], rel=1e-9, abs=1e-12)
    assert gh["hi"] == pytest.approx(wh["hi"], rel=1e-9, abs=1e-12)
    a, b = decode_heatmap(gh), decode_heatmap(wh)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    step = (wh["hi"] - wh["lo"]) / 254
    np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], atol=step * 1.01 + 1e-300)


def assert_batch_matches_numpy(got: dict, xs: list) -> None:
    """A batch's statistics (keys 0..len(xs)-1, heatmap axes tokens x features) against the
    NumPy path's, tensor by tensor (assert_stats_close), naming the tensor that differs."""
    assert list(got) == list(range(len(xs)))
    for i, x in enumerate(xs):
        want = tensor_stats(x, axes=("tokens", "features"))
        try:
            assert_stats_close(got[i], want)
        except AssertionError as e:
            raise AssertionError(f"tensor {i}: shape {x.shape} {x.dtype}: {e}") from e


def batch_tensors():
    """Sizes 1, 7, 4096, 1e6+3; 2-D and 3-D; f32/f16 (and f64, int32); planted NaN/±Inf/zeros;
    an all-NaN, a constant, an empty tensor and a scalar; cells of every heatmap mode (a thread
    per cell of <= 32 values, a warp per small cell, a block per cell of >= 1024 values)."""
    rng = np.random.default_rng(5)
    xs = []
    for dt in (np.float32, np.float16):
        xs += [
            np.array([1.25], dt),
            (rng.standard_normal(7) * 3).astype(dt),
            _planted((4096,), dt, seed=1),
            _planted((1_000_003,), dt, seed=2),
            _planted((37, 576), dt, seed=3),
            _planted((1, 1536), dt, seed=4),
            _planted((5, 9, 64), dt, seed=6),
            _planted((300, 4097), dt, seed=7),  # cells of <= 10 x 65 values: warp mode
            _planted((2048, 2048), dt, seed=8),  # 64 x 32 = 2048-value cells: block mode
            _planted((1, 14, 64), dt, seed=10),  # 896 one-value cells: thread mode
            _planted((3, 333, 64), dt, seed=11),  # 999 x 64 in 32 x 64 cells of <= 32: thread
        ]
    xs += [
        np.full((3, 3), np.nan, np.float32),
        np.full((4, 5), 2.5, np.float32),
        np.zeros((0, 7), np.float32),
        np.array(1.5, np.float32),
        _planted((17, 70), np.float64, seed=9),
        np.array([[3, 1, 2]], np.int32),
        np.array([True, False, True]),  # converted to float64 when added
    ]
    return xs


def test_stats_batch_cupy_matches_numpy():
    cp = _cp()
    xs = batch_tensors()
    b = StatsBatch()
    for i, x in enumerate(xs):
        b.add(i, cp.asarray(x), axes=("tokens", "features"))
    got = b.finish()
    assert_batch_matches_numpy(got, xs)
    # the per-tensor device path agrees too (same kernels' formulas)
    for i in (3, 8, 19):
        assert_stats_close(got[i], tensor_stats(cp.asarray(xs[i]), axes=("tokens", "features")))


def test_stats_batch_cupy_small_grid_and_bins():
    cp = _cp()
    xs = [_planted((37, 576), np.float32, seed=s) for s in range(3)] + [np.full((9,), 7.0)]
    b = StatsBatch(bins=7, heat_rows=3, heat_cols=5)
    for i, x in enumerate(xs):
        b.add(i, cp.asarray(x))
    got = b.finish()
    for i, x in enumerate(xs):
        assert_stats_close(got[i], tensor_stats(x, bins=7, heat_rows=3, heat_cols=5))


def test_stats_batch_is_deterministic_and_resets_tickets():
    """Partials are merged in block order: a second collection gives identical dicts (and the
    per-tensor tickets were zeroed again)."""
    cp = _cp()
    xs = [cp.asarray(_planted((1_000_003,), np.float32, seed=s)) for s in range(4)]
    runs = []
    for _ in range(2):
        b = StatsBatch()
        for i, x in enumerate(xs):
            b.add(i, x)
        runs.append(b.finish())
    assert runs[0] == runs[1]


def test_stats_batch_launches_are_constant(monkeypatch):
    """Two kernel launches per collect(), whatever the number and sizes of the tensors."""
    import tracekit.kernels.cuda as cuda

    cp = _cp()
    calls = []
    real = cuda.kernel

    def counting(family, name):
        k = real(family, name)

        def launch(*a, **kw):
            calls.append(name)
            return k(*a, **kw)

        return launch

    monkeypatch.setattr(cuda, "kernel", counting)
    rng = np.random.default_rng(0)
    counts = []
    for n_tensors in (1, 17, 600):
        b = StatsBatch()
        for i in range(n_tensors):
            shape = [(1, 576), (1, 1536), (37, 192), (5000,)][i % 4]
            b.add(i, cp.asarray(rng.standard_normal(shape).astype(np.float32)))
        calls.clear()
        assert len(b.finish()) == n_tensors
        counts.append(len(calls))
        assert [r.kernel for r in b.launches] == calls
    assert counts == [2, 2, 2]


def test_stats_batch_copy_snapshot_and_mixed_backends():
    cp = _cp()
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    before = tensor_stats(cp.asnumpy(x))
    h = _planted((9, 70), np.float32)
    b = StatsBatch()
    b.add("ref", x)
    b.add("host", h)
    b.add("copy", x, copy=True)
    x += 100.0  # a later in-place write
    got = b.finish()
    assert list(got) == ["ref", "host", "copy"]
    assert got["copy"] == before
    assert got["ref"] == tensor_stats(cp.asnumpy(x))
    assert got["host"] == tensor_stats(h)


# -- ceilings -----------------------------------------------------------------------------------
def test_ceilings_are_sane(tmp_path, monkeypatch):
    from tracekit.kernels.backend import CupyBackend
    from tracekit.kernels.ceilings import measure_ceilings

    monkeypatch.setenv("TRACEKIT_CACHE", str(tmp_path))
    c = measure_ceilings(CupyBackend(), force=True)
    assert 1e11 < c["copy_bandwidth_Bps"] < 1e14  # 100 GB/s .. 100 TB/s
    assert 1e-7 < c["launch_overhead_s"] < 1e-3
    assert 1e12 < c["peak_flops"] < 1e16
    # one direction alone runs near the copy's mix of both (H100: reads 1-3% above it); the
    # bound model takes the fastest of the three, and so does the ridge
    copy, read, write = (c[k] for k in ("copy_bandwidth_Bps", "read_bandwidth_Bps",
                                       "write_bandwidth_Bps"))  # fmt: skip
    print(f"streams (GB/s): copy {copy / 1e9:.0f}, read {read / 1e9:.0f}, write {write / 1e9:.0f}")
    assert 0.7 * copy < read < 1.5 * copy and 0.5 * copy < write < 1.5 * copy
    assert c["ridge_flop_per_byte"] == pytest.approx(c["peak_flops"] / max(copy, read, write))
    floors, peaks = c["launch_floor_s"], c["peak_flops_by_path"]
    # a kernel in a busy stream or a graph costs the device ~1 µs, far under the host's
    # launch latency that one event pair around an idle launch sees
    assert 1e-8 < floors["graph"] < 1e-5 and 1e-8 < floors["stream"] < 1e-5
    assert floors["stream"] < c["launch_overhead_s"]
    print("peaks (flop/s or op/s):", peaks)
    assert c["peak_flops"] == max(v for v in peaks.values() if v)
    assert peaks["f16_tensor_core"] > peaks["f32_cuda_core"] > 1e12
    # int8 MMA (mmq's path) out-runs DP4A chains (mmvq's) on the same SMs
    assert peaks["int8_tensor_core"] > 2 * peaks["int8_dp4a"] > 1e12
    assert list(tmp_path.glob("ceilings-*.json"))
    assert measure_ceilings(CupyBackend()) == c  # cached

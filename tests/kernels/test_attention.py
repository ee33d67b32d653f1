"""CPU tests of the attention family: the NumPy references against a per-(token, head) loop in
float64 written independently of the vectorised reference, and every gate."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import build, with_static_shared
from tracekit.kernels import cuda
from tracekit.kernels.attention import (
    MAX_BLOCK_SHARED_BYTES,
    MAX_HEAD_DIM,
    TILE_CONFIGS,
    TILE_THREADS,
    TileConfig,
    attention_kernel,
    attention_tiled_geometry,
    ref_attention_f32,
    ref_kv_store_f32,
)
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.registry import KERNEL_OPS


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


def test_kv_store_writes_k_and_v_rows_in_place():
    kc = np.full((8, 2, 4), -7.0, dtype=np.float32)
    vc = np.full((8, 2, 4), -9.0, dtype=np.float32)
    k = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    out, rec = ref_kv_store_f32(kc, k, vc, -k, 5)
    assert out is kc
    np.testing.assert_array_equal(kc[5:8], k)
    np.testing.assert_array_equal(vc[5:8], -k)
    assert (kc[:5] == -7.0).all() and (vc[:5] == -9.0).all()
    assert rec.kernel == "kv_store_f32" and rec.bytes_read == 2 * k.nbytes == rec.bytes_written


def test_kv_store_gates():
    cache = np.zeros((8, 2, 4), dtype=np.float32)

    def store(x, start, v_cache=None, v=None):
        vc = np.zeros_like(cache) if v_cache is None else v_cache
        return ref_kv_store_f32(cache, x, vc, x if v is None else v, start)

    with pytest.raises(KernelInputError, match="n_ctx 8"):
        store(np.zeros((3, 2, 4), np.float32), 6)
    with pytest.raises(KernelInputError, match="expected"):
        store(np.zeros((3, 1, 4), np.float32), 0)
    with pytest.raises(KernelInputError, match="dtype"):
        store(np.zeros((3, 2, 4), np.float64), 0)
    with pytest.raises(KernelInputError, match="negative"):
        store(np.zeros((1, 2, 4), np.float32), -1)
    with pytest.raises(KernelInputError, match="K and V differ"):
        store(np.zeros((3, 2, 4), np.float32), 0, v_cache=np.zeros((9, 2, 4), np.float32))


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


# -- the tiled kernel: the launcher's choice and geometry ---------------------------------------
@pytest.mark.parametrize(
    "nt,hd,want",
    [
        (1, 64, None),  # decode: attention_f32
        (63, 64, None),  # below d64's min_nt (measured: 16 and 32 queries ran slower tiled)
        (64, 64, "attention_tiled_f32_d64"),
        (512, 1, "attention_tiled_f32_d64"),
        (512, 64, "attention_tiled_f32_d64"),
        (64, 65, "attention_tiled_f32_d128"),
        (64, 80, "attention_tiled_f32_d128"),
        (64, 128, "attention_tiled_f32_d128"),
        (64, 129, None),  # d256's min_nt is 128: 8 heads x 2 query tiles leave the SMs idle
        (128, 129, "attention_tiled_f32_d256"),
        (512, 256, "attention_tiled_f32_d256"),
        (512, 257, None),  # over every bucket (the launcher rejects it: MAX_HEAD_DIM)
    ],
)
def test_the_launcher_picks_the_kernel_by_nt_and_head_dim(nt, hd, want):
    cfg = attention_kernel(nt, hd)
    assert (cfg.name if cfg else None) == want
    if cfg is not None:
        assert hd <= cfg.d and cfg.name in KERNEL_OPS["attention_f32"].kernels


@pytest.mark.parametrize("hd", [1, 64, 65, 128, 129, 256])
def test_forcing_a_kernel_ignores_nt_but_not_the_head_dim_buckets(hd):
    assert attention_kernel(1, hd, tiled=False) is None
    assert attention_kernel(512, hd, tiled=False) is None
    forced = attention_kernel(1, hd, tiled=True)
    assert forced is not None and forced.d == min(c.d for c in TILE_CONFIGS if hd <= c.d)
    assert attention_kernel(1, 257, tiled=True) is None


def test_the_tile_buckets_cover_every_head_dim_the_gate_allows():
    assert all(c.min_nt >= 2 for c in TILE_CONFIGS)  # decode (nt = 1) keeps attention_f32
    assert [c.d for c in TILE_CONFIGS] == sorted(c.d for c in TILE_CONFIGS)
    assert TILE_CONFIGS[-1].d == MAX_HEAD_DIM
    for c in TILE_CONFIGS:
        # two blocks per SM at least, and within the per-block opt-in limit
        assert c.min_blocks >= 2 and c.shared_bytes <= MAX_BLOCK_SHARED_BYTES
        assert c.name in cuda.STAMPED  # each opens with the LaunchStamp scope


@pytest.mark.parametrize("nt", [16, 17, 63, 64, 65, 130, 512])
def test_tiled_geometry_covers_every_query_once(nt):
    for cfg in TILE_CONFIGS:
        geo = attention_tiled_geometry(nt, 14, cfg)
        tiles = geo.grid[0]
        assert geo.grid == (tiles, 14, 1) and geo.block == (TILE_THREADS, 1, 1)
        # every query in exactly one tile, no empty tile
        assert (tiles - 1) * cfg.bq < nt <= tiles * cfg.bq
        assert geo.threads_launched == geo.work_items == tiles * 14 * TILE_THREADS


def test_tiled_geometry_gates_the_head_count():
    with pytest.raises(KernelInputError, match="65536 heads"):
        attention_tiled_geometry(16, 65536, TILE_CONFIGS[0])


def test_tile_configs_reject_partial_sub_tiles():
    with pytest.raises(ValueError, match="bq must be a multiple of 8"):
        TileConfig(64, 12, 64, 64)
    with pytest.raises(ValueError, match="bq must be a multiple"):
        TileConfig(80, 32, 64, 64)  # 80 columns: not whole float4 chunks per lane


def test_the_instantiations_name_the_declared_kernels_and_their_shared_memory():
    src = cuda.source("attention")
    for c in TILE_CONFIGS:
        line = f"ATTENTION_TILED_KERNEL({c.name}, {c.d}, {c.bq}, {c.bk}, {c.min_blocks}, "
        assert f"{line}{c.shared_bytes})" in src


# -- the tiled kernel, run on the CPU (tests/kernels/host_shim/cuda_block.h) ---------------------
# Each block's 128 threads run as fibers with real barriers and shuffles, so the kernel's
# indexing, masks, online softmax and NaN handling are checked here; the GPU tests
# (test_attention_tiled_gpu.py) check the same cases on the device.
_HOST_RUNNERS = """
static const float *g_q, *g_k, *g_v;
static float* g_out;
static int g_i[6];
static float g_scale, g_softcap;
static const int* g_past;
"""


def _host_source() -> str:
    defines = [o[2:].split("=", 1) for o in cuda.options("attention") if o.startswith("-DATT")]
    src = ['#include "cuda_block.h"', *(f"#define {k} {v}" for k, v in defines)]
    src += [cuda.source("attention"), _HOST_RUNNERS]
    src.append(f"float4 tile_smem4[{max(c.shared_bytes for c in TILE_CONFIGS) // 16}];")
    for c in TILE_CONFIGS:
        src.append(
            f"static void body_{c.name}() {{ {c.name}(g_q, g_k, g_v, g_out, g_i[0], g_i[1], "
            f"g_i[2], g_i[3], g_i[4], g_i[5], g_scale, g_softcap, g_past, nullptr); }}\n"
            f'extern "C" void run_{c.name}(const float* q, const float* k, const float* v, '
            f"float* out, const int* i, float scale, float softcap, const int* past, "
            f"unsigned int gx, unsigned int gy, unsigned int bx) {{\n"
            f"  g_q = q; g_k = k; g_v = v; g_out = out; g_scale = scale; g_softcap = softcap;\n"
            f"  g_past = past; for (int j = 0; j < 6; ++j) g_i[j] = i[j];\n"
            f"  tk_host::run_grid(dim3{{gx, gy, 1}}, dim3{{bx, 1, 1}}, body_{c.name});\n}}"
        )
    return "\n".join(src) + "\n"


@pytest.fixture(scope="module")
def host_tiled(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    return build(tmp_path_factory.mktemp("attention"), "attention_tiled", _host_source())


def run_tiled_on_host(lib, q, k, v, n_past, scale, window=0, softcap=0.0, positions=None):
    """The tiled kernel's bucket and geometry (forced: small nt keeps the host run short), the
    kernel run on the CPU; output poisoned first."""
    nt, n_head, hd = q.shape
    cfg = attention_kernel(nt, hd, tiled=True)
    assert cfg is not None, f"hd={hd} is in no tiled bucket"
    geo = attention_tiled_geometry(nt, n_head, cfg)
    out = np.full((nt, n_head * hd), np.nan, np.float32)
    ints = np.array([nt, n_head, k.shape[1], hd, n_past, window], np.int32)
    ptr = ctypes.c_void_p
    getattr(lib, f"run_{cfg.name}")(
        *(ptr(a.ctypes.data) for a in (q, k, v, out, ints)),
        ctypes.c_float(scale),
        ctypes.c_float(softcap),
        ptr(positions.ctypes.data if positions is not None else None),
        *(ctypes.c_uint(x) for x in (geo.grid[0], geo.grid[1], geo.block[0])),
    )
    return out


def make_unfilled(nt, n_head, n_kv, hd, n_past, seed):
    """q, K, V with the rows past the step's last position NaN: the kernel must never read them."""
    q, k, v = make(nt, n_head, n_kv, hd, n_ctx=n_past + nt + 5, seed=seed)
    k[n_past + nt :], v[n_past + nt :] = np.nan, np.nan
    return q, k, v


# f32 dot products and an online softmax in another order than NumPy's: O(1) outputs agree to
# a few ulp of the sums (inputs ~N(0,1), head_dim up to 256)
ATOL, RTOL = 2e-5, 1e-4


@pytest.mark.parametrize(
    "nt,n_past,n_head,n_kv,hd,window,softcap",
    [
        (16, 0, 2, 2, 64, 0, 0.0),  # the threshold: half a tile
        (17, 5, 4, 2, 64, 0, 0.0),  # GQA 2, continuing a cache
        (63, 0, 7, 1, 64, 0, 0.0),  # GQA 7 (Qwen2.5's 14:2 per kv head), one short of 2 tiles
        (64, 40, 2, 1, 64, 7, 0.0),  # whole tiles, window 7 over a cache
        (65, 0, 2, 2, 80, 1, 0.0),  # window 1: each query sees itself; head_dim 80 (d128)
        (130, 70, 2, 1, 128, 0, 30.0),  # soft cap, keys over several tiles
        (33, 3, 2, 2, 256, 0, 0.0),  # head_dim 256 (d256, 32-key tiles)
        (40, 100, 2, 1, 256, 16, 0.0),  # d256 with a window across key tiles
        (20, 9, 2, 2, 64, 1000, 0.0),  # a window longer than the context: no window
        (512, 0, 2, 1, 64, 0, 0.0),  # the prefill's length
    ],
)
def test_tiled_kernel_on_host_matches_reference(
    host_tiled, nt, n_past, n_head, n_kv, hd, window, softcap
):
    q, k, v = make_unfilled(nt, n_head, n_kv, hd, n_past, seed=nt + hd)
    scale = 1.0 / np.sqrt(hd)
    want, _ = ref_attention_f32(q, k, v, n_past, scale, window, softcap)
    got = run_tiled_on_host(host_tiled, q, k, v, n_past, scale, window, softcap)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_tiled_kernel_on_host_reads_n_past_from_positions(host_tiled):
    q, k, v = make_unfilled(20, 2, 1, 64, 9, seed=3)
    want, _ = ref_attention_f32(q, k, v, 9, 0.125)
    pos = np.arange(9, 29, dtype=np.int32)
    got = run_tiled_on_host(host_tiled, q, k, v, 0, 0.125, positions=pos)  # scalar ignored
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_tiled_kernel_on_host_nan_in_q_poisons_its_row_only(host_tiled):
    q, k, v = make_unfilled(40, 2, 1, 64, 0, seed=4)
    q[21, 1, 5] = np.nan
    want, _ = ref_attention_f32(q, k, v, 0, 0.125)
    got = run_tiled_on_host(host_tiled, q, k, v, 0, 0.125)
    bad = np.zeros(want.shape, bool)
    bad[21, 64:] = True  # token 21, head 1: the whole row
    assert np.isnan(want[bad]).all() and np.isnan(got[bad]).all()
    np.testing.assert_allclose(got[~bad], want[~bad], atol=ATOL, rtol=RTOL)


def test_tiled_kernel_on_host_nan_key_and_value_reach_only_attending_queries(host_tiled):
    """A NaN K row and a NaN V row inside the diagonal tile: queries before them see neither
    (the masked P is 0, and 0 * NaN would be NaN), later queries are NaN."""
    q, k, v = make_unfilled(48, 2, 2, 64, 0, seed=5)
    k[30, 0, 7] = np.nan  # kv head 0 -> head 0
    v[40, 1, 3] = np.nan  # kv head 1 -> head 1
    want, _ = ref_attention_f32(q, k, v, 0, 0.125)
    got = run_tiled_on_host(host_tiled, q, k, v, 0, 0.125)
    g = got.reshape(48, 2, 64)
    assert np.isfinite(g[:30, 0]).all() and np.isnan(g[30:, 0]).all()
    assert np.isfinite(g[:40, 1]).all() and np.isnan(g[40:, 1, 3]).all()
    ok = np.isfinite(want)
    assert (np.isfinite(got) == ok).all()
    np.testing.assert_allclose(got[ok], want[ok], atol=ATOL, rtol=RTOL)


def test_tiled_kernel_on_host_window_hides_old_nan_rows(host_tiled):
    """Rows below every query's window (in the first visited tile, and in tiles never visited)
    hold NaN: the output stays finite and equal to the reference."""
    q, k, v = make_unfilled(32, 2, 1, 64, 90, seed=6)
    # query 90 + t sees keys 86 + t .. 90 + t; the first visited tile starts at key 64
    k[:86], v[:86] = np.nan, np.nan
    want, _ = ref_attention_f32(q, k, v, 90, 0.125, window=5)
    got = run_tiled_on_host(host_tiled, q, k, v, 90, 0.125, window=5)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


# -- the decode kernel attention_f32 with its split-K merge, run on the CPU ---------------------
# Its static shared arrays (the query, the warps' partial sums) become function-local statics,
# the block's shared memory since the shim runs one block at a time on one OS thread; blocks
# of a (token, head) run one after another, so the last to arrive merges, as on the device.
# Its warps walk their keys independently (a warp with no key skips the loop and its
# shuffles), which cuda_block.h's round-based barriers do not allow: it is built with the
# shim's counted barriers (TK_HOST_COUNTED_BARRIERS).
_F32_RUNNER = """
static const float *g_q, *g_k, *g_v;
static float *g_out, *g_part;
static int g_i[5], *g_count;
static float g_scale, g_softcap;
static const int* g_past;
float4 tile_smem4[1];
static void body_f32() {
    attention_f32(g_q, g_k, g_v, g_out, g_i[0], g_i[1], g_i[2], g_i[3], g_i[4], g_scale,
                  g_softcap, g_past, g_part, g_count, nullptr);
}
extern "C" void run_f32(const float* q, const float* k, const float* v, float* out,
                        const int* i, float scale, float softcap, const int* past, float* part,
                        int* count, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    g_q = q; g_k = k; g_v = v; g_out = out; g_scale = scale; g_softcap = softcap;
    g_past = past; g_part = part; g_count = count;
    for (int j = 0; j < 5; ++j) g_i[j] = i[j];
    tk_host::run_grid(dim3{gx, gy, gz}, dim3{bx, 1, 1}, body_f32);
}
"""


@pytest.fixture(scope="module")
def host_f32(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    defines = [o[2:].split("=", 1) for o in cuda.options("attention") if o.startswith("-DATT")]
    dynamic = "extern __shared__ float4 tile_smem4[];"
    kernels = cuda.source("attention")
    assert dynamic in kernels  # (extern and static do not combine: the global array above)
    src = ["#define TK_HOST_COUNTED_BARRIERS", '#include "cuda_block.h"']
    src += [*(f"#define {k} {v}" for k, v in defines), with_static_shared(kernels), _F32_RUNNER]
    return build(tmp_path_factory.mktemp("attention_f32"), "attention_f32", "\n".join(src))


def run_f32_on_host(lib, q, k, v, n_past, scale, splits, window=0, softcap=0.0):
    """attention_f32 on grid (nt, n_head, splits) with its split-K scratch; returns (out, the
    arrival counts after the launch). Output poisoned first."""
    from tracekit.kernels.attention import ATT_THREADS, attention_geometry

    nt, n_head, hd = q.shape
    geo = attention_geometry(nt, n_head, splits)
    assert geo.block == (ATT_THREADS, 1, 1)
    out = np.full((nt, n_head * hd), np.nan, np.float32)
    part = np.full(nt * n_head * splits * (hd + 2), np.nan, np.float32)
    count = np.zeros(nt * n_head, np.int32)
    ints = np.array([n_head, k.shape[1], hd, n_past, window], np.int32)
    ptr = ctypes.c_void_p
    lib.run_f32(
        *(ptr(a.ctypes.data) for a in (q, k, v, out, ints)),
        ctypes.c_float(scale), ctypes.c_float(softcap), ptr(None),
        ptr(part.ctypes.data if splits > 1 else None), ptr(count.ctypes.data if splits > 1 else None),
        *(ctypes.c_uint(x) for x in (*geo.grid, geo.block[0])),
    )  # fmt: skip
    return out, count


@pytest.mark.parametrize(
    "nt,n_past,n_head,n_kv,hd,window,softcap,splits",
    [
        (1, 0, 4, 2, 64, 0, 0.0, 1),  # the first token, one block a head
        (1, 600, 2, 1, 64, 0, 0.0, 32),  # a long cache over the most splits
        (1, 40, 14, 2, 64, 0, 0.0, 32),  # fewer keys than splits x 16: the ranges left idle
        (1, 300, 4, 4, 128, 50, 0.0, 8),  # a window over split ranges
        (3, 97, 8, 2, 256, 0, 30.0, 4),  # head_dim 256, soft cap, 3 queries
        (2, 17, 2, 2, 80, 0, 0.0, 2),  # head_dim 80 (lanes past it idle)
    ],
)
def test_decode_kernel_on_host_matches_reference(
    host_f32, nt, n_past, n_head, n_kv, hd, window, softcap, splits
):
    q, k, v = make_unfilled(nt, n_head, n_kv, hd, n_past, seed=n_past + hd)
    scale = 1.0 / np.sqrt(hd)
    got, count = run_f32_on_host(host_f32, q, k, v, n_past, scale, splits, window, softcap)
    want, _ = ref_attention_f32(q, k, v, n_past, scale, window, softcap)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)
    assert not count.any()  # the merging block reset its count: a replay starts from zero


def test_decode_kernel_on_host_nan_key_poisons_its_range_merge(host_f32):
    """A NaN key row in one split's range makes the merged output NaN for the heads that read
    it (the split's max carries it), and only those."""
    q, k, v = make_unfilled(1, 4, 2, 64, 200, seed=5)
    k[37, 1] = np.nan  # kv head 1: query heads 2, 3
    got, _ = run_f32_on_host(host_f32, q, k, v, 200, 0.125, splits=8)
    rows = got.reshape(4, 64)
    assert np.isnan(rows[2:]).all() and np.isfinite(rows[:2]).all()

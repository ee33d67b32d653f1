"""Attention with a KV cache: ``kv_store_f32`` (append rows to the cache) and ``attention_f32``.

Layouts (NumPy order, all float32, C-contiguous):

    q        [nt, n_head, head_dim]     query t sits at position n_past + t
    k_cache  [n_ctx, n_kv, head_dim]    row j holds the key of position j
    v_cache  [n_ctx, n_kv, head_dim]
    out      [nt, n_head * head_dim]

Query t attends key j when ``j <= n_past + t`` (causal) and, with ``window > 0``, also
``j > n_past + t - window`` (sliding window: gemma3's local layers). Grouped-query attention:
head h reads kv head ``h // (n_head // n_kv)``. Scores are ``scale * q·k``, soft-capped to
``softcap * tanh(s / softcap)`` when ``softcap > 0``, softmaxed in f32; out = Σ p·v.

Two CUDA kernels share that contract (attention.cu), and the launcher picks one by nt
(:func:`attention_kernel`; the launch record names the kernel that ran):

- ``attention_f32``: one block per (token, head), an online softmax over the keys, one warp per
  key at a time: simple and right for decode (nt = 1) and short steps;
- ``attention_tiled_f32_d<D>`` (nt >= its bucket's ``min_nt``): flash-attention-2 on CUDA cores,
  a block per tile of queries of one head looping over key tiles in shared memory, for
  prefill-sized steps. One instantiation per head_dim bucket D of :data:`TILE_CONFIGS`
  (64, 128, 256; a head_dim below its bucket is padded with zero columns).

Both take head_dim up to 256.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.kernels import cuda
from tracekit.kernels.checks import KernelInputError, require_array
from tracekit.kernels.launch import Geometry, LaunchRecord, ceil_div
from tracekit.kernels.registry import KernelOp, declare

#: The CUDA kernel keeps one query row in registers/shared memory: head_dim up to this.
MAX_HEAD_DIM = 256


# -- gates (shared by the reference and the launcher, so both backends reject the same inputs) --
def _check_kv_store(cache: Any, x: Any, start: int) -> None:
    require_array(cache, np.float32, "KV cache", ndim=3)
    require_array(x, np.float32, "KV rows", ndim=3)
    n_ctx, n_kv, hd = (int(s) for s in cache.shape)
    nt = int(x.shape[0])
    if tuple(x.shape[1:]) != (n_kv, hd):
        raise KernelInputError(
            f"KV rows have shape {tuple(x.shape)}, expected [nt, {n_kv}, {hd}] to match the "
            f"cache {tuple(cache.shape)}"
        )
    _check_rows_fit(start, nt, n_ctx, "KV store start", f"KV store of {nt} rows at start")


def _check_rows_fit(start: int, nt: int, n_ctx: int, what: str, span: str) -> None:
    """Rows start .. start + nt - 1 of a cache of n_ctx rows: start >= 0 and the end inside."""
    if start < 0:
        raise KernelInputError(f"{what} {start} is negative")
    if start + nt > n_ctx:
        raise KernelInputError(
            f"{span} {start} ends at {start + nt}, past the cache's n_ctx {n_ctx}"
        )


def _check_kv_pair(k_cache: Any, k: Any, v_cache: Any, v: Any, start: int) -> None:
    _check_kv_store(k_cache, k, start)
    _check_kv_store(v_cache, v, start)
    if tuple(k_cache.shape) != tuple(v_cache.shape) or tuple(k.shape) != tuple(v.shape):
        raise KernelInputError(
            f"K and V differ: caches {tuple(k_cache.shape)} / {tuple(v_cache.shape)}, rows "
            f"{tuple(k.shape)} / {tuple(v.shape)}"
        )


def _check_attention(
    q: Any, k_cache: Any, v_cache: Any, n_past: int, window: int, softcap: float
) -> tuple[int, int, int, int, int]:
    """Returns (nt, n_head, head_dim, n_ctx, n_kv)."""
    require_array(q, np.float32, "attention q", ndim=3)
    require_array(k_cache, np.float32, "K cache", ndim=3)
    require_array(v_cache, np.float32, "V cache", ndim=3)
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise KernelInputError(
            f"shape mismatch: K cache {tuple(k_cache.shape)} vs V cache {tuple(v_cache.shape)}"
        )
    nt, n_head, hd = (int(s) for s in q.shape)
    n_ctx, n_kv, hd_kv = (int(s) for s in k_cache.shape)
    if nt < 1:
        raise KernelInputError(f"attention q has {nt} tokens, expected at least 1")
    if hd != hd_kv:
        raise KernelInputError(f"q head_dim {hd} differs from the KV cache head_dim {hd_kv}")
    if n_kv < 1 or n_head % n_kv:
        raise KernelInputError(
            f"n_head {n_head} is not a multiple of n_kv {n_kv} (grouped-query attention)"
        )
    _check_rows_fit(n_past, nt, n_ctx, "n_past", f"{nt} tokens at n_past")
    if window < 0:
        raise KernelInputError(f"sliding window {window} is negative (0 means no window)")
    if not softcap >= 0.0:
        raise KernelInputError(f"softcap {softcap} must be >= 0 (0 means no cap)")
    return nt, n_head, hd, n_ctx, n_kv


def _key_range(pos: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query position, the attended key range [lo, hi] (inclusive)."""
    lo = np.maximum(pos - window + 1, 0) if window > 0 else np.zeros_like(pos)
    return lo, pos


def attention_record(
    kernel: str,
    geometry: Geometry | None,
    nt: int,
    n_head: int,
    n_kv: int,
    hd: int,
    n_past: int,
    window: int,
) -> LaunchRecord:
    """The launch record of one attention launch over q [nt, n_head, hd] at ``n_past``."""
    if nt <= 8:  # decode: plain ints (a replayed step rebuilds this record every step)
        his = [n_past + t for t in range(nt)]
        los = [max(h - window + 1, 0) if window > 0 else 0 for h in his]
        keys = sum(h - lo + 1 for h, lo in zip(his, los, strict=True))
        span = max(his) - min(los) + 1
    else:
        pos = n_past + np.arange(nt, dtype=np.int64)
        lo, hi = _key_range(pos, window)
        keys = int((hi - lo + 1).sum())
        span = int(hi.max() - lo.min() + 1)
    # Fewest bytes: q once, each distinct K and V row in [min lo, max hi] once per kv head, out once.
    kv_bytes = 2 * span * n_kv * hd * 4
    # Per (token, head, key): 2*hd for q·k, 2*hd for p·v; ~5 for scale/max/exp/sum.
    flops = keys * n_head * (4 * hd + 5)
    q_bytes = nt * n_head * hd * 4
    return LaunchRecord.of(
        kernel, geometry, bytes_read=q_bytes + kv_bytes, bytes_written=q_bytes, flops=flops
    )


def _attention_record(
    kernel: str, geometry: Geometry | None, q: Any, k_cache: Any, n_past: int, window: int
) -> LaunchRecord:
    nt, n_head, hd = (int(s) for s in q.shape)
    return attention_record(kernel, geometry, nt, n_head, int(k_cache.shape[1]), hd, n_past, window)


# -- NumPy references ------------------------------------------------------------------------
def _same_start(positions: Any, start: int, what: str) -> None:
    """On the host the scalar is the truth; positions, when given, must agree with it."""
    if positions is not None and len(positions) and int(positions[0]) != int(start):
        raise KernelInputError(
            f"{what} positions start at {int(positions[0])}, but n_past is {int(start)}"
        )


def ref_kv_store_f32(
    k_cache: np.ndarray,
    k: np.ndarray,
    v_cache: np.ndarray,
    v: np.ndarray,
    start: int,
    positions: np.ndarray | None = None,
) -> tuple[np.ndarray, LaunchRecord]:
    """Write ``k`` and ``v`` [nt, n_kv, head_dim] into rows ``start .. start+nt-1`` of
    ``k_cache`` and ``v_cache`` in place (one launch on the device for both).

    ``positions`` (the step's int32 positions, ``[0] == start``) is what lets the device read
    the start row at run time, so a replayed step is right at any position; on the host it is
    only checked against ``start``.

    Returns:
        (k_cache, record): the same K cache object, updated (and the V cache).

    Raises:
        KernelInputError: dtype/contiguity/shape mismatch (K and V alike), ``start + nt >
            n_ctx``, or positions that do not start at ``start``.
    """
    _same_start(positions, start, "KV store")
    start = int(start)
    _check_kv_pair(k_cache, k, v_cache, v, start)
    k_cache[start : start + k.shape[0]] = k
    v_cache[start : start + v.shape[0]] = v
    return k_cache, LaunchRecord.of("kv_store_f32", None, reads=[k, v], writes=[k, v])


def ref_attention_f32(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    n_past: int,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
    *,
    positions: np.ndarray | None = None,
) -> tuple[np.ndarray, LaunchRecord]:
    """Causal (optionally sliding-window, soft-capped) GQA attention over a KV cache, in f32.

    Args:
        q: [nt, n_head, head_dim] float32; query t is at position ``n_past + t``.
        k_cache, v_cache: [n_ctx, n_kv, head_dim] float32, rows 0 .. n_past+nt-1 filled.
        n_past: tokens already in the cache before this step.
        scale: multiplies q·k (usually 1/sqrt(head_dim)).
        window: > 0 restricts query at position p to keys j > p - window.
        softcap: > 0 applies ``softcap * tanh(s / softcap)`` to the scaled scores.
        positions: the step's positions (the device reads n_past from them); on the host
            only checked to start at ``n_past``.

    Returns:
        (out [nt, n_head*head_dim] float32, record)

    Raises:
        KernelInputError: a gate fails (n_head % n_kv, head_dim, n_past + nt > n_ctx, ...).
    """
    _same_start(positions, n_past, "attention")
    n_past, window, scale, softcap = int(n_past), int(window), float(scale), float(softcap)
    nt, n_head, hd, _, n_kv = _check_attention(q, k_cache, v_cache, n_past, window, softcap)
    g = n_head // n_kv
    pos = n_past + np.arange(nt)
    lo, hi = _key_range(pos, window)
    k0, n_keys = int(lo.min()), n_past + nt  # the keys any query reads: rows k0 .. n_keys-1
    # [n_kv, g, nt, hd] @ [n_kv, 1, hd, L] -> scores [n_kv, g, nt, L], all in f32.
    qg = q.reshape(nt, n_kv, g, hd).transpose(1, 2, 0, 3)
    k = k_cache[k0:n_keys].transpose(1, 2, 0)[:, None]
    v = v_cache[k0:n_keys].transpose(1, 0, 2)[:, None]  # [n_kv, 1, L, hd]
    s = np.matmul(qg, k) * np.float32(scale)
    if softcap > 0.0:
        s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
    j = np.arange(k0, n_keys)
    mask = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # [nt, L]
    s = np.where(mask, s, np.float32(-np.inf))
    s = s - s.max(axis=-1, keepdims=True)  # each row has its own key j = pos: max is finite
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    if np.isfinite(v).all():
        o = np.matmul(p, v)  # [n_kv, g, nt, hd]
    else:
        # 0 * NaN is NaN: a non-finite V row must reach only the queries that attend it (as in
        # the kernel, which never reads a masked row), so weigh each query's own key range.
        o = np.empty((n_kv, g, nt, hd), dtype=np.float32)
        for t in range(nt):
            a, b = int(lo[t]) - k0, int(hi[t]) - k0 + 1
            o[:, :, t] = np.matmul(p[:, :, t, None, a:b], v[:, :, a:b])[:, :, 0]
    out = np.ascontiguousarray(o.transpose(2, 0, 1, 3).reshape(nt, n_head * hd), dtype=np.float32)
    rec = _attention_record("attention_f32", None, q, k_cache, n_past, window)
    return out, rec


# -- launchers -------------------------------------------------------------------------------
#: Threads per attention_f32 block (4 warps; attention.cu's ATT_THREADS, passed as a define).
ATT_THREADS = 128
KV_BLOCK = 256

#: attention_f32's key splits (split-K): a decode step has only n_head (token, head) blocks, each
#: walking its keys one per warp, a global load's latency per key (64 µs at 512 keys for 14
#: heads on the H200, scripts/bench_attention.py); up to MAX_SPLITS blocks share a query's keys,
#: each range at least SPLIT_MIN_KEYS keys (4 per warp), as many as make about two blocks per SM.
MAX_SPLITS = 32
SPLIT_MIN_KEYS = 16


def attention_splits(nt: int, n_head: int, n_ctx: int, sms: int) -> int:
    """attention_f32's grid.z for ``nt`` queries of ``n_head`` heads over a cache of ``n_ctx``
    rows on ``sms`` SMs: 1 when the (token, head) blocks already fill the GPU twice, else enough
    splits for about 2 blocks per SM, at most :data:`MAX_SPLITS` and one per SPLIT_MIN_KEYS cache
    rows. The kernel divides the keys it sees at run time into at most this many ranges."""
    blocks = nt * n_head
    if blocks >= 2 * sms:
        return 1
    return max(1, min(MAX_SPLITS, ceil_div(2 * sms, blocks), ceil_div(n_ctx, SPLIT_MIN_KEYS)))


_SPLIT_SCRATCH: dict[tuple[int, ...], tuple[Any, Any]] = {}


def _split_scratch(nt: int, n_head: int, splits: int, hd: int) -> tuple[Any, Any]:
    """The split-K partials (f32 [nt n_head splits (hd + 2)]) and arrival counts (int32 [nt
    n_head], zero; the merging block resets its count) of attention_f32, one pair per stream
    and shape: launches on one stream run in order, so the layers of a step share them, and a
    recorded step's replay finds them where it was recorded."""
    import cupy

    key = (cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, nt, n_head, splits, hd)
    got = _SPLIT_SCRATCH.get(key)
    if got is None:
        part = cupy.empty(nt * n_head * splits * (hd + 2), cupy.float32)
        count = cupy.zeros(nt * n_head, cupy.int32)
        got = _SPLIT_SCRATCH[key] = (part, count)
    return got


#: The tiled kernel's thread layout (attention.cu's ATT_TILE_TX x ATT_TILE_TY): TILE_TX lanes
#: share a query row (its keys in the score tile, its head_dim columns in O; a half warp, so
#: the row's max and sum are shuffles), TILE_TY row groups. 128 threads: 4 warps.
TILE_TX, TILE_TY = 16, 8
TILE_THREADS = TILE_TX * TILE_TY

#: Shared memory per SM on sm_90 (228 KiB, of which 1 KiB is reserved per resident block): the
#: blocks per SM a tile configuration's shared memory allows, which its ``__launch_bounds__``
#: asks ptxas to keep registers for. The opt-in limit per block is 227 KiB.
SM_SHARED_BYTES = 228 * 1024
BLOCK_RESERVED_BYTES = 1024
MAX_BLOCK_SHARED_BYTES = 227 * 1024


@dataclass(frozen=True)
class TileConfig:
    """One instantiation of ``attention_tiled_f32`` (attention.cu's ``ATTENTION_TILED_KERNEL``).

    Attributes:
        d: the head_dim bucket: head_dim <= d runs here, padded with zero columns.
        bq: queries per block (TILE_TY row groups of bq / TILE_TY rows each).
        bk: keys per tile (TILE_TX lanes of bk / TILE_TX keys each).
        min_nt: the fewest queries the launcher gives this kernel (fewer: ``attention_f32``).
    """

    d: int
    bq: int
    bk: int
    min_nt: int

    def __post_init__(self) -> None:
        if self.bq % TILE_TY or self.bk % TILE_TX or self.d % (4 * TILE_TX):
            raise ValueError(
                f"tile d={self.d} bq={self.bq} bk={self.bk}: bq must be a multiple of "
                f"{TILE_TY}, bk of {TILE_TX} and d of {4 * TILE_TX} (whole per-thread sub-tiles)"
            )

    @property
    def name(self) -> str:
        return f"attention_tiled_f32_d{self.d}"

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: Q [bq][d+4], K [bk][d+4], V [bk][d], P [bq][bk+16] floats
        (attention.cu's TiledLayout, which static_asserts this number)."""
        d, bq, bk = self.d, self.bq, self.bk
        return 4 * (bq * (d + 4) + bk * (d + 4) + bk * d + bq * (bk + 16))

    @property
    def min_blocks(self) -> int:
        """Blocks per SM its shared memory allows on sm_90 (its ``__launch_bounds__``)."""
        return max(1, SM_SHARED_BYTES // (self.shared_bytes + BLOCK_RESERVED_BYTES))


#: The tiled kernels, smallest head_dim bucket first. bq = 32 rather than 64: a 512-token
#: prefill of 14 heads then has 16 x 14 = 224 blocks for the H200's 132 SMs, and the causal
#: tail (the last query tile walks all 512 keys) is half as long; bk = 32 at d = 256 keeps the
#: K and V tiles to 66 KB so two blocks fit an SM. Shared memory: 52.7 KB (d 64, 4 blocks per
#: SM), 93.7 KB (d 128, 2), 105.5 KB (d 256, 2).
#:
#: min_nt, measured (scripts/bench_attention.py, H200, 2026-12-01 16:39 UTC: both kernels at
#: 14x2x64, 32x8x128 and 8x4x256 heads, caches of 0 and 512, nt 1..512): the tiled kernel's grid
#: is n_head x ceil(nt / 32) blocks against attention_f32's nt x n_head, so below a few query
#: tiles it leaves most SMs idle: at nt = 32 it was 0.44-0.80x attention_f32's speed on an empty
#: cache (1.14-1.46x on a 512 cache at d <= 128), at nt = 64 1.18-2.20x for d <= 128 but
#: 0.49-0.62x at d = 256 (8 heads: 16 blocks), which it wins from 512 queries on (1.46-2.04x).
TILE_CONFIGS = (
    TileConfig(64, 32, 64, min_nt=64),
    TileConfig(128, 32, 64, min_nt=64),
    TileConfig(256, 32, 32, min_nt=128),
)


def attention_kernel(nt: int, hd: int, tiled: bool | None = None) -> TileConfig | None:
    """The tiled configuration a step of ``nt`` queries of head_dim ``hd`` runs, or None where
    ``attention_f32`` runs it: fewer queries than the bucket's ``min_nt``, or a head_dim over
    every bucket. ``tiled`` True or False asks for one kernel whatever nt (tests, benchmarks)."""
    cfg = next((c for c in TILE_CONFIGS if hd <= c.d), None)
    if cfg is None or tiled is False:
        return None
    return cfg if tiled or nt >= cfg.min_nt else None


def kernel_defines() -> tuple[str, ...]:
    """The block sizes and head_dim bound attention.cu's bodies assume (shared arrays, loops,
    thread layouts), from the constants the grids and the gate use."""
    return (
        f"-DATT_THREADS={ATT_THREADS}",
        f"-DATT_MAX_HD={MAX_HEAD_DIM}",
        f"-DATT_TILE_TX={TILE_TX}",
        f"-DATT_TILE_TY={TILE_TY}",
        f"-DATT_SPLIT_MIN_KEYS={SPLIT_MIN_KEYS}",
        f"-DATT_MAX_SPLITS={MAX_SPLITS}",
    )


def instantiations() -> str:
    """The tiled kernels attention.cu compiles, one line per :data:`TILE_CONFIGS` entry."""
    return "\n".join(
        f"ATTENTION_TILED_KERNEL({c.name}, {c.d}, {c.bq}, {c.bk}, {c.min_blocks}, {c.shared_bytes})"
        for c in TILE_CONFIGS
    )


cuda.defines("attention", kernel_defines)
cuda.generate("attention", instantiations)
cuda.register_stamped(c.name for c in TILE_CONFIGS)  # each opens with the LaunchStamp scope


def _past_pointer(positions: Any, what: str) -> Any:
    """The device pointer the kernels read n_past from, or null (the launch scalar is used).

    ``positions`` (int32 [nt] on the device, = start .. start+nt-1) lets a replayed step read
    its n_past from the device; only its first element is read."""
    from tracekit.kernels.elementwise import require_device

    if positions is None:
        return np.uint64(0)
    require_array(positions, np.int32, f"{what} positions", ndim=1)
    require_device(positions, f"{what} positions")
    if positions.size < 1:
        raise KernelInputError(f"{what} positions are empty")
    return positions


def launch_kv_store_f32(
    k_cache: Any, k: Any, v_cache: Any, v: Any, start: int, positions: Any = None
) -> tuple[Any, LaunchRecord]:
    """Write ``k`` and ``v`` [nt, n_kv, head_dim] into rows ``start .. start+nt-1`` of the
    device caches, in one launch (grid.y: 0 the keys, 1 the values).

    The caches are updated in place; the K cache is returned (it is its own ``out``). With ``positions``
    (the step's int32 positions on the device, ``positions[0] == start``) the kernel reads the
    start row from the device (see attention.cu); ``start`` is still what the gates check.

    Raises:
        KernelInputError: as :func:`ref_kv_store_f32`, or a host array.
    """
    from tracekit.kernels.cuda import NO_STAMP, kernel, launch
    from tracekit.kernels.elementwise import require_device
    from tracekit.kernels.launch import grid_1d

    start = int(start)
    _check_kv_pair(k_cache, k, v_cache, v, start)
    for a, what in ((k_cache, "K cache"), (v_cache, "V cache"), (k, "K rows"), (v, "V rows")):
        require_device(a, what)
    n = int(k.size)
    row = int(k_cache.shape[1]) * int(k_cache.shape[2])
    one = grid_1d(n, KV_BLOCK)  # per tensor; grid.y = 2: K and V
    geo = Geometry((one.grid[0], 2, 1), one.block, 2 * one.work_items)
    past = _past_pointer(positions, "KV store")
    if n:
        args = (k, k_cache, v, v_cache, np.int64(start * row), np.int64(n), past, np.int64(row))
        launch(kernel("attention", "kv_store_f32"), geo.grid, geo.block, (*args, NO_STAMP))
    return k_cache, LaunchRecord.of("kv_store_f32", geo, reads=[k, v], writes=[k, v])


def attention_geometry(nt: int, n_head: int, splits: int = 1) -> Geometry:
    """One block of 128 threads per (token, head, key split): grid (nt, n_head, splits);
    every thread works (a split with no keys left still merges its empty range)."""
    from tracekit.kernels.launch import MAX_GRID_X, MAX_GRID_YZ

    if nt > MAX_GRID_X or n_head > MAX_GRID_YZ or splits > MAX_GRID_YZ:
        raise KernelInputError(
            f"attention grid ({nt} tokens, {n_head} heads, {splits} splits) is over the limits"
        )
    threads = nt * n_head * splits * ATT_THREADS
    return Geometry((nt, n_head, splits), (ATT_THREADS, 1, 1), threads)


def attention_tiled_geometry(nt: int, n_head: int, cfg: TileConfig) -> Geometry:
    """One block of :data:`TILE_THREADS` per (tile of ``cfg.bq`` queries, head): grid
    (ceil(nt / bq), n_head). Every thread works (a last tile's padding rows are computed and
    dropped), so work items are the threads launched."""
    from tracekit.kernels.launch import MAX_GRID_YZ

    if n_head > MAX_GRID_YZ:
        raise KernelInputError(f"attention grid ({n_head} heads) is over the limit {MAX_GRID_YZ}")
    tiles = ceil_div(nt, cfg.bq)
    return Geometry((tiles, n_head, 1), (TILE_THREADS, 1, 1), tiles * n_head * TILE_THREADS)


def launch_attention_f32(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    n_past: int,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
    out: Any = None,
    positions: Any = None,
    tiled: bool | None = None,
) -> tuple[Any, LaunchRecord]:
    """The device version of :func:`ref_attention_f32` (same arguments, CuPy arrays).

    The kernel is :func:`attention_kernel`'s choice: ``attention_tiled_f32_d<D>`` from its
    bucket's ``min_nt`` queries on, ``attention_f32`` below (``tiled`` True/False forces one);
    the record names the one that ran, with the geometry (and dynamic shared memory) it was
    launched with.

    Args:
        out: optional [nt, n_head*head_dim] float32 device array to write.
        positions: optional int32 [nt] device positions (``positions[0] == n_past``): the
            kernel then reads n_past from the device (see attention.cu).

    Raises:
        KernelInputError: as the reference, a head_dim over 256, or a host array.
    """
    from tracekit.kernels.cuda import NO_STAMP, NULL, kernel, run
    from tracekit.kernels.elementwise import device_out, require_device

    n_past, window, scale, softcap = int(n_past), int(window), float(scale), float(softcap)
    nt, n_head, hd, _, n_kv = _check_attention(q, k_cache, v_cache, n_past, window, softcap)
    if hd > MAX_HEAD_DIM:
        raise KernelInputError(f"head_dim {hd} exceeds the kernel's maximum {MAX_HEAD_DIM}")
    for a, what in ((q, "attention q"), (k_cache, "K cache"), (v_cache, "V cache")):
        require_device(a, what)
    o = device_out(out, (nt, n_head * hd), np.float32, "attention out")
    past = _past_pointer(positions, "attention")
    shape = (np.int32(n_head), np.int32(n_kv), np.int32(hd), np.int32(n_past), np.int32(window))
    tail = (np.float32(scale), np.float32(softcap), past, NO_STAMP)
    cfg = attention_kernel(nt, hd, tiled)
    if cfg is None:
        from tracekit.kernels.elementwise import sm_count

        splits = attention_splits(nt, n_head, int(k_cache.shape[0]), sm_count())
        geo = attention_geometry(nt, n_head, splits)
        name, smem, extra = "attention_f32", 0, {"splits": splits}
        part, count = _split_scratch(nt, n_head, splits, hd) if splits > 1 else (NULL, NULL)
        args = (q, k_cache, v_cache, o, *shape, *tail[:3], part, count, NO_STAMP)
    else:
        name, geo, smem = cfg.name, attention_tiled_geometry(nt, n_head, cfg), cfg.shared_bytes
        extra = {"shared_bytes": smem}
        args = (q, k_cache, v_cache, o, np.int32(nt), *shape, *tail)
        cuda.allow_dynamic_shared(kernel("attention", name), smem)  # the Function launched
    ref = attention_record(name, None, nt, n_head, n_kv, hd, n_past, window)
    rec = run(
        "attention",
        name,
        geo,
        args,
        smem,
        bytes_read=ref.bytes_read,
        bytes_written=ref.bytes_written,
        flops=ref.flops,
        **extra,
    )
    return o, rec


# -- the op declarations (tracekit/kernels/registry.py) ---------------------------------------
declare(
    [
        KernelOp("kv_store_f32", "attention", ref_kv_store_f32, launch_kv_store_f32, flops=0),
        # flops counted by attention_record: keys per query x heads x (4 head_dim + 5)
        KernelOp(
            "attention_f32",
            "attention",
            ref_attention_f32,
            launch_attention_f32,
            kernels=("attention_f32", *(c.name for c in TILE_CONFIGS)),
        ),
    ]
)

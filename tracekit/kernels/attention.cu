// Attention with a KV cache (launched by tracekit/kernels/attention.py).
//
//   kv_store_f32:   k_cache[start*row_elems + i] = k[i] and v_cache[...] = v[i], i < n: a
//                   grid-stride copy of nt rows, blockIdx.y 0 the keys, 1 the values (one
//                   launch for both).
//   attention_f32:  one block of ATT_THREADS threads per (token t, head h, key split z): grid
//                   (nt, n_head, S). Decode and short steps (nt below the bucket's
//                   attention.TileConfig.min_nt). S > 1 (split-K, attention.attention_splits:
//                   a decode step has only n_head blocks otherwise) splits the query's keys
//                   into S contiguous ranges of >= ATT_SPLIT_MIN_KEYS keys, computed from the
//                   device's n_past, so a replayed grid stays right at every position; each
//                   block writes its range's (max, sum, unnormalised output) to part, and the
//                   last block of (t, h) to finish (an atomic count, reset by that block)
//                   merges the ranges in split order (deterministic) into out; blocks past
//                   the ranges the keys fill leave at once, one range writes out directly.
//   attention_tiled_f32_d<D>: one block of ATT_TILE_TX * ATT_TILE_TY threads per (tile of BQ
//                   queries, head h): grid (ceil(nt / BQ), n_head), dynamic shared memory
//                   attention.TileConfig.shared_bytes; head_dim <= D (D = 64, 128, 256; the
//                   instantiations and their BQ, BK come from attention.TILE_CONFIGS).
//
// Layouts (row-major): q [nt][n_head][hd], k/v cache [n_ctx][n_kv][hd], out [nt][n_head*hd].
// Query t sits at position p = n_past + t and reads keys j in [lo, p], lo = max(0, p-window+1)
// when window > 0 else 0. Head h reads kv head h / (n_head / n_kv) (grouped-query attention).
//
// Each warp walks its share of the keys (j = lo + warp, lo + warp + n_warps, ...) keeping an
// online softmax: running max m, running sum l, and acc[d] = sum p_j v_j[d] for the head_dim
// elements d = lane + 32 i its lane owns (hd <= 256: 8 registers). The warps then merge their
// (m, l, acc) through shared memory. One pass over K and V, no score buffer; f32 throughout,
// IEEE expf/tanhf (no fast math), so the NumPy reference is a valid oracle.
//
// n_past from the device: when `past` is not null both kernels read n_past from past[0] (the
// step's first position) instead of the launch scalar, so a recorded decode step (a replayed
// launch tape or a CUDA graph) stays right at every later position. The host checked
// past[0] + nt <= n_ctx before it wrote the positions.

#include "stamp.cuh"  // LaunchStamp: the stamped kernels time themselves (stamp.cuh)

// ATT_THREADS (threads per block) and ATT_MAX_HD (the largest head_dim) come from
// attention.py (kernel_defines), which builds the grid and gates head_dim with them.
#if !defined(ATT_THREADS) || !defined(ATT_MAX_HD)
#error "compile with attention.kernel_defines(): -DATT_THREADS, -DATT_MAX_HD"
#endif
static_assert(ATT_THREADS % 32 == 0 && ATT_MAX_HD % 32 == 0, "whole warps, whole lanes");
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_PER_LANE (ATT_MAX_HD / 32)
// -inf without <math.h> (NVRTC has no INFINITY macro).
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void kv_store_f32(const float* __restrict__ k, float* __restrict__ k_cache,
                                        const float* __restrict__ v, float* __restrict__ v_cache,
                                        long long offset, long long n,
                                        const int* __restrict__ past, long long row,
                                        unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    if (past != nullptr) offset = (long long)past[0] * row;
    const float* __restrict__ x = blockIdx.y ? v : k;
    float* __restrict__ cache = blockIdx.y ? v_cache : k_cache;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[offset + i] = x[i];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#if !defined(ATT_SPLIT_MIN_KEYS) || !defined(ATT_MAX_SPLITS)
#error "compile with attention.kernel_defines(): -DATT_SPLIT_MIN_KEYS, -DATT_MAX_SPLITS"
#endif

extern "C" __global__ void attention_f32(const float* __restrict__ q,
                                         const float* __restrict__ k_cache,
                                         const float* __restrict__ v_cache,
                                         float* __restrict__ out, int n_head, int n_kv, int hd,
                                         int n_past, int window, float scale, float softcap,
                                         const int* __restrict__ past, float* part, int* count,
                                         unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    if (past != nullptr) n_past = past[0];
    __shared__ float sq[ATT_MAX_HD];
    __shared__ float sacc[ATT_WARPS][ATT_MAX_HD];
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];

    const int t = blockIdx.x, h = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kh = h / (n_head / n_kv);
    const long long pos = (long long)n_past + t;
    const long long lo = window > 0 ? max(0LL, pos - window + 1) : 0LL;
    const long long kv_row = (long long)n_kv * hd;  // floats between consecutive positions
    // split z's keys: [j0, j1], the z-th of `active` near-equal ranges of [lo, pos]; the
    // blocks past `active` have none and leave at once (the same count in every block of
    // (t, h), so `active` blocks arrive at the merge)
    const int z = blockIdx.z, S = gridDim.z;
    const long long n_keys = pos - lo + 1;
    const long long active =
        min((long long)S, (n_keys + ATT_SPLIT_MIN_KEYS - 1) / ATT_SPLIT_MIN_KEYS);
    if (z >= active) return;
    const long long chunk = (n_keys + active - 1) / active;
    const long long j0 = lo + z * chunk, j1 = min(pos, j0 + chunk - 1);

    const float* qrow = q + ((long long)t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) sq[d] = qrow[d];
    __syncthreads();

    float m = NEG_INF, l = 0.0f;
    float acc[ATT_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; ++i) acc[i] = 0.0f;

    for (long long j = j0 + warp; j <= j1; j += ATT_WARPS) {
        const float* krow = k_cache + j * kv_row + (long long)kh * hd;
        const float* vrow = v_cache + j * kv_row + (long long)kh * hd;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < hd) part += sq[d] * krow[d];
        }
        float s = warp_sum(part) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        // A NaN score must poison this warp's result (fmaxf would drop it): carry it in m.
        const float m_new = isnan(s) ? s : fmaxf(m, s);
        const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < hd) acc[i] = acc[i] * corr + p * vrow[d];
        }
        m = m_new;
    }

    // Merge the warps: out = sum_w acc_w exp(m_w - M) / sum_w l_w exp(m_w - M).
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) sacc[warp][d] = acc[i];
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    __syncthreads();
    float M = NEG_INF;
    for (int w = 0; w < ATT_WARPS; ++w) M = fmaxf(M, sm[w]);
    float L = 0.0f, wt[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; ++w) {
        // A warp that saw no key (fewer keys than warps) has m = -inf and weighs nothing; a
        // NaN m gives a NaN weight, so a NaN score reaches the output as in the reference.
        wt[w] = sm[w] == NEG_INF ? 0.0f : expf(sm[w] - M);
        L += sl[w] * wt[w];
    }
    const long long th = (long long)t * n_head + h;
    float* orow = out + th * hd;
    float* prow = part + (th * S + z) * (hd + 2);  // active > 1: this split's [o[hd], M, L]
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float o = 0.0f;
        for (int w = 0; w < ATT_WARPS; ++w)
            if (wt[w] != 0.0f) o += sacc[w][d] * wt[w];
        if (active == 1)
            orow[d] = o / L;
        else
            prow[d] = o;
    }
    if (active == 1) return;
    if (threadIdx.x == 0) {
        prow[hd] = M;
        prow[hd + 1] = L;
    }
    // The last of the `active` blocks of (t, h) merges: every block's partial is visible (fence)
    // before its count, and the merging block reads them from L2 (__ldcg), not its L1.
    __shared__ int merging;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) merging = atomicAdd(count + th, 1) == active - 1;
    __syncthreads();
    if (!merging) return;
    __threadfence();
    // The `active` ranges' (M, L) and weights go through shared memory once, then each
    // thread's columns.
    const int A = (int)active;
    const float* pth = part + th * S * (hd + 2);
    __shared__ float smz[ATT_MAX_SPLITS], slz[ATT_MAX_SPLITS], swz[ATT_MAX_SPLITS];
    if (threadIdx.x < A) {
        smz[threadIdx.x] = __ldcg(pth + threadIdx.x * (hd + 2) + hd);
        slz[threadIdx.x] = __ldcg(pth + threadIdx.x * (hd + 2) + hd + 1);
    }
    __syncthreads();
    float MM = NEG_INF;
    for (int u = 0; u < A; ++u) MM = fmaxf(MM, smz[u]);
    if (threadIdx.x < A)  // as the warps' merge: an empty range weighs nothing, a NaN poisons
        swz[threadIdx.x] = smz[threadIdx.x] == NEG_INF ? 0.0f : expf(smz[threadIdx.x] - MM);
    __syncthreads();
    float LL = 0.0f;
    for (int u = 0; u < A; ++u) LL += slz[u] * swz[u];
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float o = 0.0f;
#pragma unroll 4
        for (int u = 0; u < A; ++u)
            if (swz[u] != 0.0f) o += __ldcg(pth + u * (hd + 2) + d) * swz[u];
        orow[d] = o / LL;
    }
    if (threadIdx.x == 0) count[th] = 0;  // ready for the next launch (a replay reuses it)
}

// ---- attention_tiled_f32: flash-attention-2 on CUDA cores, for prefill-sized steps ----------
//
// A block owns BQ queries t0 .. t0+BQ-1 of one head h (t0 = BQ * tile) and walks the key tiles
// [kt, kt+BK) that any of them can see: from the tile holding the first query's lowest key
// (window) to the last query's own position (causal). Per key tile:
//
//   1. K and V rows kt .. kt+BK-1 of kv head kh -> shared (coalesced: consecutive threads read
//      consecutive floats of a row); rows past the last query's position and columns past
//      head_dim are zeros, never loaded (the unfilled cache may hold anything).
//   2. S = Q K^T: thread (ty, tx) owns the RQ x RK scores of rows ty + TY a and keys tx + TX b,
//      reading Q and K as float4 along head_dim: RQ + RK 16-byte loads per 4 RQ RK FMAs.
//   3. Online softmax per row: scaled, soft-capped, masked to -inf outside [lo, p]; the row max
//      is shuffled across the TX lanes that share the row (a half warp), then
//      corr = expf(m_old - m_new) rescales the row's running sum l and its O accumulators, and
//      P = expf(S - m_new) goes to shared memory (only the same half warp reads it back).
//   4. O += P V: the thread owns O rows ty + TY a (the rows of its scores, so corr is local) and
//      columns 4 tx + 4 TX c + (0..3), reading P (broadcast) and V (consecutive 16-byte chunks)
//      as float4: RQ + 4 DC loads per 16 RQ DC FMAs.
//
// l is kept per thread (its keys' share) and summed across the TX lanes once at the end;
// out[t][h][d] = O / l for t < nt, d < head_dim.
//
// Shared memory (floats; dynamic: attention.py's TileConfig.shared_bytes, which the generated
// instantiation passes as SMEM_BYTES and a static_assert holds to this layout):
//   Q [BQ][D+4] | K [BK][D+4] | V [BK][D] | P [BQ][BK+16]
// The +4 row pad spreads a quarter warp's float4 reads of 8 K rows over all 32 banks; P's +16
// puts the two rows a warp writes (ty = 2w, 2w+1) on different halves of the banks.
//
// Masks and NaN (the contract of attention_f32 and ref_attention_f32):
// - a score outside the row's [lo, p] is -inf before the max (a NaN key there is never seen);
// - a NaN score carries into the row max (nan_max, not fmaxf) and from there into every P, l and
//   O of the row: the whole output row is NaN, as in the reference;
// - a row that has seen no key yet (its first visited tile lies below its window) has
//   m = -inf: the exponents use 0 instead of m, so P = 0 and corr = 0, never expf(-inf + inf);
// - a masked P is 0, but 0 * NaN is NaN: a NaN V row must reach only the queries that attend
//   it, so a tile that some query sees only in part (the diagonal, the window's edge) skips
//   masked keys in O += P V (predicated FMAs); the full tiles, where every query sees every
//   key, run the plain loop.
// f32 throughout, IEEE expf/tanhf (no fast math).
#if !defined(ATT_TILE_TX) || !defined(ATT_TILE_TY)
#error "compile with attention.kernel_defines(): -DATT_TILE_TX, -DATT_TILE_TY"
#endif
static_assert(ATT_TILE_TX > 0 && 32 % ATT_TILE_TX == 0, "a row's lanes lie in one warp");
#define ATT_TILE_THREADS (ATT_TILE_TX * ATT_TILE_TY)
static_assert(ATT_TILE_THREADS % 32 == 0, "whole warps");

// max that keeps a NaN from either side (fmaxf returns the other operand)
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

template <int D, int BQ, int BK>
struct TiledLayout {
    static constexpr int TX = ATT_TILE_TX, TY = ATT_TILE_TY, THREADS = ATT_TILE_THREADS;
    static constexpr int RQ = BQ / TY;       // score and O rows per thread
    static constexpr int RK = BK / TX;       // score columns (keys) per thread
    static constexpr int DC = D / (4 * TX);  // float4 chunks of O per row per thread
    static constexpr int QS = D + 4;         // Q and K row stride (floats)
    static constexpr int PS = BK + 16;       // P row stride (floats)
    static constexpr int FLOATS = BQ * QS + BK * QS + BK * D + BQ * PS;
    static_assert(BQ % TY == 0 && BK % TX == 0 && BK % 4 == 0, "whole sub-tiles");
    static_assert(D % (4 * TX) == 0, "whole float4 chunks of O per thread");
};

template <int D, int BQ, int BK, bool MASKED>
__device__ __forceinline__ void tiled_pv(const float* __restrict__ Ps, const float* __restrict__ Vs,
                                         float (&acc)[BQ / ATT_TILE_TY][D / ATT_TILE_TX],
                                         const int (&lo)[BQ / ATT_TILE_TY],
                                         const int (&hi)[BQ / ATT_TILE_TY], int kt, int keys,
                                         int ty, int tx) {
    using L = TiledLayout<D, BQ, BK>;
    // full tile: all BK keys; partial: the keys up to the block's last position (rows past it
    // are zeros and masked for every query anyway)
    const int n = MASKED ? ((keys + 3) & ~3) : BK;
#pragma unroll 2
    for (int jj = 0; jj < n; jj += 4) {
        float4 p4[L::RQ];
#pragma unroll
        for (int a = 0; a < L::RQ; ++a)
            p4[a] = *reinterpret_cast<const float4*>(Ps + (ty + L::TY * a) * L::PS + jj);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            float4 v4[L::DC];
#pragma unroll
            for (int c = 0; c < L::DC; ++c)
                v4[c] = *reinterpret_cast<const float4*>(Vs + (jj + u) * D + 4 * tx + 4 * L::TX * c);
            const int j = kt + jj + u;
#pragma unroll
            for (int a = 0; a < L::RQ; ++a) {
                const float p = u == 0 ? p4[a].x : u == 1 ? p4[a].y : u == 2 ? p4[a].z : p4[a].w;
                if (MASKED && (j < lo[a] || j > hi[a])) continue;
#pragma unroll
                for (int c = 0; c < L::DC; ++c) {
                    acc[a][4 * c + 0] = fmaf(p, v4[c].x, acc[a][4 * c + 0]);
                    acc[a][4 * c + 1] = fmaf(p, v4[c].y, acc[a][4 * c + 1]);
                    acc[a][4 * c + 2] = fmaf(p, v4[c].z, acc[a][4 * c + 2]);
                    acc[a][4 * c + 3] = fmaf(p, v4[c].w, acc[a][4 * c + 3]);
                }
            }
        }
    }
}

template <int D, int BQ, int BK>
__device__ __forceinline__ void attention_tiled(const float* __restrict__ q,
                                                const float* __restrict__ k_cache,
                                                const float* __restrict__ v_cache,
                                                float* __restrict__ out, int nt, int n_head,
                                                int n_kv, int hd, int n_past, int window,
                                                float scale, float softcap,
                                                const int* __restrict__ past) {
    using L = TiledLayout<D, BQ, BK>;
    constexpr int RQ = L::RQ, RK = L::RK, TX = L::TX, TY = L::TY, QS = L::QS, PS = L::PS;
    extern __shared__ float4 tile_smem4[];
    float* const Qs = reinterpret_cast<float*>(tile_smem4);
    float* const Ks = Qs + BQ * QS;
    float* const Vs = Ks + BK * QS;
    float* const Ps = Vs + BK * D;
    if (past != nullptr) n_past = past[0];

    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int h = blockIdx.y, kh = h / (n_head / n_kv);
    // the last query tiles see the most keys: run them first so the short ones fill the tail
    const int t0 = (gridDim.x - 1 - blockIdx.x) * BQ;
    const int p_first = n_past + t0;                      // this block's first query position
    const int p_last = n_past + min(t0 + BQ, nt) - 1;     // ... and its last valid one
    const int k_lo = window > 0 ? max(0, p_first - window + 1) : 0;
    const long long kv_row = (long long)n_kv * hd;       // floats between consecutive positions
    const float* const kbase = k_cache + (long long)kh * hd;
    const float* const vbase = v_cache + (long long)kh * hd;

    for (int e = tid; e < BQ * D; e += L::THREADS) {
        const int r = e / D, d = e % D, t = t0 + r;
        Qs[r * QS + d] = (t < nt && d < hd) ? q[((long long)t * n_head + h) * hd + d] : 0.0f;
    }

    int lo[RQ], hi[RQ];
    float m[RQ], l[RQ], acc[RQ][D / TX];
#pragma unroll
    for (int a = 0; a < RQ; ++a) {
        hi[a] = n_past + t0 + ty + TY * a;  // past nt for the padding rows: never written
        lo[a] = window > 0 ? max(0, hi[a] - window + 1) : 0;
        m[a] = NEG_INF;
        l[a] = 0.0f;
#pragma unroll
        for (int i = 0; i < D / TX; ++i) acc[a][i] = 0.0f;
    }

    for (int kt = k_lo / BK * BK; kt <= p_last; kt += BK) {
        const int keys = min(BK, p_last - kt + 1);  // rows of this tile some query can see
        __syncthreads();  // the last tile's K, V and P reads are done (and Q is stored)
        for (int e = tid; e < BK * D; e += L::THREADS) {
            const int r = e / D, d = e % D;
            const bool in = r < keys && d < hd;
            const long long g = (long long)(kt + r) * kv_row + d;
            Ks[r * QS + d] = in ? kbase[g] : 0.0f;
            Vs[r * D + d] = in ? vbase[g] : 0.0f;
        }
        __syncthreads();

        float s[RQ][RK];
#pragma unroll
        for (int a = 0; a < RQ; ++a)
#pragma unroll
            for (int b = 0; b < RK; ++b) s[a][b] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 q4[RQ], k4[RK];
#pragma unroll
            for (int a = 0; a < RQ; ++a)
                q4[a] = *reinterpret_cast<const float4*>(Qs + (ty + TY * a) * QS + d);
#pragma unroll
            for (int b = 0; b < RK; ++b)
                k4[b] = *reinterpret_cast<const float4*>(Ks + (tx + TX * b) * QS + d);
#pragma unroll
            for (int a = 0; a < RQ; ++a)
#pragma unroll
                for (int b = 0; b < RK; ++b) {
                    s[a][b] = fmaf(q4[a].x, k4[b].x, s[a][b]);
                    s[a][b] = fmaf(q4[a].y, k4[b].y, s[a][b]);
                    s[a][b] = fmaf(q4[a].z, k4[b].z, s[a][b]);
                    s[a][b] = fmaf(q4[a].w, k4[b].w, s[a][b]);
                }
        }

#pragma unroll
        for (int a = 0; a < RQ; ++a) {
            float mt = NEG_INF;
#pragma unroll
            for (int b = 0; b < RK; ++b) {
                const int j = kt + tx + TX * b;
                float x = s[a][b] * scale;
                if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
                x = (j >= lo[a] && j <= hi[a]) ? x : NEG_INF;
                s[a][b] = x;
                mt = nan_max(mt, x);
            }
#pragma unroll
            for (int o = TX / 2; o > 0; o >>= 1)
                mt = nan_max(mt, __shfl_xor_sync(0xffffffffu, mt, o));
            const float m_new = nan_max(m[a], mt);
            const float m_use = m_new == NEG_INF ? 0.0f : m_new;  // no key seen yet: P = 0
            const float corr = expf(m[a] - m_use);
            float sum = 0.0f;
#pragma unroll
            for (int b = 0; b < RK; ++b) {
                const float p = expf(s[a][b] - m_use);
                sum += p;
                Ps[(ty + TY * a) * PS + tx + TX * b] = p;
            }
            l[a] = l[a] * corr + sum;
#pragma unroll
            for (int i = 0; i < D / TX; ++i) acc[a][i] *= corr;
            m[a] = m_new;
        }
        __syncwarp();  // a row's P is written and read by the half warp that owns the row

        // every valid query sees all BK keys: below the first query's position and at or above
        // the last one's window start
        const bool full = kt + BK - 1 <= p_first && (window <= 0 || kt >= p_last - window + 1);
        if (full)
            tiled_pv<D, BQ, BK, false>(Ps, Vs, acc, lo, hi, kt, keys, ty, tx);
        else
            tiled_pv<D, BQ, BK, true>(Ps, Vs, acc, lo, hi, kt, keys, ty, tx);
    }

#pragma unroll
    for (int a = 0; a < RQ; ++a) {
        float sum = l[a];
#pragma unroll
        for (int o = TX / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const int t = t0 + ty + TY * a;
        if (t >= nt) continue;
        float* const orow = out + ((long long)t * n_head + h) * hd;
#pragma unroll
        for (int c = 0; c < L::DC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int d = 4 * tx + 4 * TX * c + e;
                if (d < hd) orow[d] = acc[a][4 * c + e] / sum;
            }
    }
}

// One instantiation per attention.TILE_CONFIGS entry (generated: cuda.source("attention")), named
// by TileConfig.name.
// MIN_BLOCKS: the blocks per SM the shared memory allows, so ptxas keeps registers within it;
// SMEM_BYTES: the dynamic shared memory the launcher passes, which must be this layout's.
#define ATTENTION_TILED_KERNEL(name, D, BQ, BK, MIN_BLOCKS, SMEM_BYTES)                        \
    static_assert(sizeof(float) * TiledLayout<D, BQ, BK>::FLOATS == (SMEM_BYTES),              \
                  "attention.py's TileConfig.shared_bytes differs from TiledLayout");          \
    extern "C" __global__ __launch_bounds__(ATT_TILE_THREADS, MIN_BLOCKS)                      \
        void name(const float* __restrict__ q, const float* __restrict__ k_cache,              \
             const float* __restrict__ v_cache, float* __restrict__ out, int nt, int n_head,   \
             int n_kv, int hd, int n_past, int window, float scale, float softcap,             \
             const int* __restrict__ past, unsigned long long* stamp) {                        \
        const LaunchStamp launch_stamp(stamp);                                                 \
        attention_tiled<D, BQ, BK>(q, k_cache, v_cache, out, nt, n_head, n_kv, hd, n_past,     \
                                   window, scale, softcap, past);                              \
    }

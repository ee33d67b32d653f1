// Attention with a KV cache (launched by tracekit/kernels/attention.py).
//
//   kv_store_f32:   cache[start*row_elems + i] = x[i], i < n (a grid-stride copy of nt rows).
//   attention_f32:  one block of ATT_THREADS threads per (token t, head h): grid (nt, n_head).
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

extern "C" __global__ void kv_store_f32(const float* __restrict__ x, float* __restrict__ cache,
                                        long long offset, long long n,
                                        const int* __restrict__ past, long long row,
                                        unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    if (past != nullptr) offset = (long long)past[0] * row;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[offset + i] = x[i];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void attention_f32(const float* __restrict__ q,
                                         const float* __restrict__ k_cache,
                                         const float* __restrict__ v_cache,
                                         float* __restrict__ out, int n_head, int n_kv, int hd,
                                         int n_past, int window, float scale, float softcap,
                                         const int* __restrict__ past,
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

    const float* qrow = q + ((long long)t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) sq[d] = qrow[d];
    __syncthreads();

    float m = NEG_INF, l = 0.0f;
    float acc[ATT_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; ++i) acc[i] = 0.0f;

    for (long long j = lo + warp; j <= pos; j += ATT_WARPS) {
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
    float* orow = out + ((long long)t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float o = 0.0f;
        for (int w = 0; w < ATT_WARPS; ++w)
            if (wt[w] != 0.0f) o += sacc[w][d] * wt[w];
        orow[d] = o / L;
    }
}

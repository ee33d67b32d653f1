// Tensor statistics on the device (launched by tracekit/kernels/stats.py).
//
//   stats_reduce_<T>: one fused pass over x: min, max, sum, sum of squares of the finite
//                     values (f64) and the counts finite/NaN/+Inf/-Inf/zero. Each block writes
//                     its partial; the last block to finish (atomic ticket) reduces the
//                     partials in a fixed order, so one launch, deterministic sums.
//   stats_hist_<T>:   histogram of the finite values, bin = floor((v - lo) * scale) in f64
//                     (the NumPy path uses the same formula), shared-memory counts per block.
//   stats_heat_<T>:   one block per heatmap cell: f64 sum and non-finite count of the cell's
//                     source block [r*n/R, (r+1)*n/R) x [c*m/C, (c+1)*m/C).
//
// T in {float (f32), double (f64), __half (f16)}; every value is widened to double first.
#include <cuda_fp16.h>

__device__ __forceinline__ double widen(float v) { return (double)v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ double widen(__half v) { return (double)__half2float(v); }

// Block sizes and table widths: -D options from stats.py's constants (kernel_defines).
#if !defined(RED_BLOCK) || !defined(HEAT_BLOCK) || !defined(BATCH_BLOCK) || \
    !defined(DESC_WORDS) || !defined(RES_WORDS)
#error "compile with stats.kernel_defines(): RED_BLOCK, HEAT_BLOCK, BATCH_BLOCK, DESC/RES_WORDS"
#endif
static_assert((RED_BLOCK & (RED_BLOCK - 1)) == 0 && (HEAT_BLOCK & (HEAT_BLOCK - 1)) == 0,
              "the tree reductions need power-of-two blocks");

#define NRED_D 4  // min, max, sum, sumsq
#define NRED_U 5  // finite, nan, +inf, -inf, zeros

struct Acc {
    double d[NRED_D];
    unsigned long long u[NRED_U];
};

__device__ __forceinline__ void acc_init(Acc& a) {
    a.d[0] = __longlong_as_double(0x7ff0000000000000LL);   // +inf
    a.d[1] = __longlong_as_double(0xfff0000000000000ULL);  // -inf
    a.d[2] = 0.0;
    a.d[3] = 0.0;
    for (int i = 0; i < NRED_U; ++i) a.u[i] = 0ULL;
}

__device__ __forceinline__ void acc_merge(Acc& a, const Acc& b) {
    a.d[0] = fmin(a.d[0], b.d[0]);
    a.d[1] = fmax(a.d[1], b.d[1]);
    a.d[2] += b.d[2];
    a.d[3] += b.d[3];
    for (int i = 0; i < NRED_U; ++i) a.u[i] += b.u[i];
}

// Tree reduction of one Acc per thread in shared memory; thread 0 ends with the block's total.
// blockDim.x must be a power of two <= RED_BLOCK.
__device__ void block_reduce(Acc& a, Acc* sh) {
    const unsigned t = threadIdx.x;
    sh[t] = a;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            Acc o = sh[t + s];
            acc_merge(sh[t], o);
        }
        __syncthreads();
    }
    a = sh[0];
}

// One value into an accumulator: NaN / +Inf / -Inf counted apart, finite values into
// min, max, sum, sum of squares, count and zero count (the single-pass and batched kernels).
__device__ __forceinline__ void acc_add(Acc& a, double v) {
    if (isnan(v)) {
        a.u[1]++;
    } else if (isinf(v)) {
        a.u[v > 0 ? 2 : 3]++;
    } else {
        a.d[0] = fmin(a.d[0], v);
        a.d[1] = fmax(a.d[1], v);
        a.d[2] += v;
        a.d[3] += v * v;
        a.u[0]++;
        if (v == 0.0) a.u[4]++;
    }
}

template <typename T>
__device__ void stats_reduce(const T* __restrict__ x, long long n, double* part_d,
                             unsigned long long* part_u, double* res_d,
                             unsigned long long* res_u, unsigned int* ticket) {
    __shared__ Acc sh[RED_BLOCK];
    __shared__ bool last;
    Acc a;
    acc_init(a);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc_add(a, widen(x[i]));
    }
    block_reduce(a, sh);
    if (threadIdx.x == 0) {
        for (int k = 0; k < NRED_D; ++k) part_d[blockIdx.x * NRED_D + k] = a.d[k];
        for (int k = 0; k < NRED_U; ++k) part_u[blockIdx.x * NRED_U + k] = a.u[k];
        __threadfence();  // partials visible device-wide before the ticket is taken
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    // The last block: reduce the gridDim.x partials (read through L2: __ldcg).
    acc_init(a);
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        Acc p;
        for (int k = 0; k < NRED_D; ++k) p.d[k] = __ldcg(part_d + b * NRED_D + k);
        for (int k = 0; k < NRED_U; ++k) p.u[k] = __ldcg(part_u + b * NRED_U + k);
        acc_merge(a, p);
    }
    __syncthreads();  // sh is reused
    block_reduce(a, sh);
    if (threadIdx.x == 0) {
        for (int k = 0; k < NRED_D; ++k) res_d[k] = a.d[k];
        for (int k = 0; k < NRED_U; ++k) res_u[k] = a.u[k];
        *ticket = 0u;
    }
}

// One histogram count per warp and bin: the lanes whose values fall in bin k (k < 0: none)
// add their number once. A tensor's values crowd a few bins, and same-address shared atomics
// serialize (a 64-bit one is a compare-and-swap loop on sm_90: the 0.5B step's histograms took
// 97 us that way). All 32 lanes of the warp must call it together.
__device__ __forceinline__ void hist_bump(unsigned int* hsh, int k) {
    const unsigned peers = __match_any_sync(0xffffffffu, k);
    if (k >= 0 && (threadIdx.x & 31u) == (unsigned)(__ffs(peers) - 1))
        atomicAdd(&hsh[k], (unsigned)__popc(peers));
}

// The bin of value v on [lo, lo + bins / scale): floor((v - lo) * scale), clamped; -1 if v is
// not finite (NaN and Inf are counted by the reduction, not binned).
__device__ __forceinline__ int hist_bin(double v, double lo, double scale, int bins) {
    if (!isfinite(v)) return -1;
    const double f = floor(__dmul_rn(__dsub_rn(v, lo), scale));
    return f < 0.0 ? 0 : (f >= (double)bins ? bins - 1 : (int)f);
}

// 32-bit block counts: a block counts at most ceil(n / gridDim.x) values (< 2^32 for any
// tensor a device holds); the global counts are 64-bit. blockDim.x is a multiple of 32, and the
// loop index is warp-uniform, so whole warps reach hist_bump together.
template <typename T>
__device__ void stats_hist(const T* __restrict__ x, long long n, double lo, double scale,
                           int bins, unsigned long long* __restrict__ counts) {
    extern __shared__ unsigned int hsh[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) hsh[b] = 0u;
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long lane = threadIdx.x & 31u;
    for (long long base = (long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31u); base < n;
         base += stride) {
        const long long i = base + lane;
        hist_bump(hsh, i < n ? hist_bin(widen(x[i]), lo, scale, bins) : -1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (hsh[b]) atomicAdd(&counts[b], (unsigned long long)hsh[b]);
}

template <typename T>
__device__ void stats_heat(const T* __restrict__ x, long long n_rows, long long n_cols, int R,
                           int C, double* __restrict__ sums, unsigned long long* __restrict__ bad) {
    __shared__ double ssum[HEAT_BLOCK];
    __shared__ unsigned long long sbad[HEAT_BLOCK];
    const long long c = blockIdx.x, r = blockIdx.y;
    const long long r0 = r * n_rows / R, r1 = (r + 1) * n_rows / R;
    const long long c0 = c * n_cols / C, c1 = (c + 1) * n_cols / C;
    const long long w = c1 - c0, total = (r1 - r0) * w;
    double s = 0.0;
    unsigned long long nb = 0ULL;
    for (long long i = threadIdx.x; i < total; i += blockDim.x) {
        const long long rr = r0 + i / w, cc = c0 + i % w;
        const double v = widen(x[rr * n_cols + cc]);
        if (isfinite(v)) s += v; else nb++;
    }
    ssum[threadIdx.x] = s;
    sbad[threadIdx.x] = nb;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            ssum[threadIdx.x] += ssum[threadIdx.x + k];
            sbad[threadIdx.x] += sbad[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[r * C + c] = ssum[0];
        bad[r * C + c] = sbad[0];
    }
}

#define STATS_VARIANTS(T, SFX)                                                                \
    extern "C" __global__ void stats_reduce_##SFX(const T* x, long long n, double* part_d,  \
                                                  unsigned long long* part_u, double* res_d, \
                                                  unsigned long long* res_u,                 \
                                                  unsigned int* ticket) {                    \
        stats_reduce<T>(x, n, part_d, part_u, res_d, res_u, ticket);                         \
    }                                                                                         \
    extern "C" __global__ void stats_hist_##SFX(const T* x, long long n, double lo,          \
                                                double scale, int bins,                      \
                                                unsigned long long* counts) {                \
        stats_hist<T>(x, n, lo, scale, bins, counts);                                        \
    }                                                                                         \
    extern "C" __global__ void stats_heat_##SFX(const T* x, long long n_rows, long long n_cols,\
                                                int R, int C, double* sums,                  \
                                                unsigned long long* bad) {                   \
        stats_heat<T>(x, n_rows, n_cols, R, C, sums, bad);                                   \
    }

STATS_VARIANTS(float, f32)
STATS_VARIANTS(double, f64)
STATS_VARIANTS(__half, f16)

// ---- batched statistics: every tensor of a step in two launches ------------------------------
//
// The host (StatsBatch in stats.py) uploads one int64 table: per tensor DESC_WORDS words
//   [ptr, n, n_rows, n_cols, R, C, dtype code, cell offset, heat mode]
// followed by two prefix arrays of T+1 entries each: red_start (reduction/histogram blocks:
// tensor t owns blocks [red_start[t], red_start[t+1]), one per chunk of `chunk` elements) and
// heat_start (heatmap blocks), then block_tensor (int32: each block's tensor, the n_red
// reduction/histogram blocks then the heatmap blocks; stats.batch_table), right after
// heat_start, so a block finds its tensor with one load.
//
//   stats_batch_reduce:    one block per (tensor, chunk): min, max, sum, sum of squares (f64) and
//                          the finite/NaN/+Inf/-Inf/zero counts of its chunk; the last block of a
//                          tensor (atomic ticket per tensor) merges the tensor's partials in block
//                          order, so sums are deterministic. Results: res[t*9 .. t*9+8].
//   stats_batch_hist_heat: blocks [0, n_red): histogram of the same chunks on the tensor's
//                          [min, max] read from res (no host round trip); blocks [n_red, ...):
//                          heatmap cell means (NaN where the cell held a NaN/Inf), one warp per
//                          cell (heat mode 0, small cells), one block per cell (mode 1, large)
//                          or one thread per cell (mode 2, cells of a few values: a decode
//                          step's [1, 14, 64] has 896 cells of one value).
//
// dtype codes: 0 f32, 1 f16, 2 f64, 3 i32. Every word buffer is 8-byte: doubles are stored by
// their bits, so the host reads all results back in one copy.
// DESC_WORDS, RES_WORDS (min, max, sum, sumsq (double bits), finite, nan, +inf, -inf, zeros)
// and BATCH_BLOCK come from stats.py (kernel_defines), which sizes the tables and grids.
static_assert(BATCH_BLOCK % 32 == 0 && BATCH_BLOCK <= 1024, "BATCH_BLOCK: whole warps");
static_assert(RES_WORDS == NRED_D + NRED_U, "a result row is one Acc");
#define WARPS (BATCH_BLOCK / 32)

__device__ __forceinline__ double widen(int v) { return (double)v; }

// The table's block map (see above): it follows heat_start[0 .. T].
__device__ __forceinline__ const int* block_tensor(const long long* __restrict__ heat_start, int T) {
    return reinterpret_cast<const int*>(heat_start + T + 1);
}

__device__ __forceinline__ void acc_shfl_merge(Acc& a, unsigned off) {
    Acc o;
    for (int k = 0; k < NRED_D; ++k) o.d[k] = __shfl_down_sync(0xffffffffu, a.d[k], off);
    for (int k = 0; k < NRED_U; ++k) o.u[k] = __shfl_down_sync(0xffffffffu, a.u[k], off);
    acc_merge(a, o);
}

// Block total of one Acc per thread (fixed order: deterministic); thread 0 ends with it.
// blockDim.x == BATCH_BLOCK. Ends with a barrier, so sh may be reused right after.
__device__ void acc_block(Acc& a, Acc* sh) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (unsigned off = 16; off > 0; off >>= 1) acc_shfl_merge(a, off);
    if (lane == 0) sh[warp] = a;
    __syncthreads();
    if (warp == 0) {
        if (lane < WARPS) a = sh[lane]; else acc_init(a);
        for (unsigned off = 16; off > 0; off >>= 1) acc_shfl_merge(a, off);
    }
    __syncthreads();
}

template <typename T>
__device__ void acc_range(const T* __restrict__ x, long long i0, long long i1, Acc& a) {
#pragma unroll 4  // loads in flight: a chunk is 8 loads a thread, each an L2/DRAM round trip
    for (long long i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        acc_add(a, widen(x[i]));
    }
}

__device__ __forceinline__ void acc_store(unsigned long long* w, const Acc& a) {
    for (int k = 0; k < NRED_D; ++k) w[k] = (unsigned long long)__double_as_longlong(a.d[k]);
    for (int k = 0; k < NRED_U; ++k) w[NRED_D + k] = a.u[k];
}

extern "C" __global__ void __launch_bounds__(BATCH_BLOCK)
stats_batch_reduce(const long long* __restrict__ tab, int T, const long long* __restrict__ red_start,
                   long long chunk, unsigned long long* __restrict__ res,
                   unsigned long long* __restrict__ part, unsigned long long* __restrict__ tickets) {
    __shared__ Acc sh[WARPS];
    __shared__ bool last;
    const long long b = blockIdx.x;
    const int t = block_tensor(red_start + T + 1, T)[b];  // heat_start follows red_start
    const long long* d = tab + (long long)t * DESC_WORDS;
    const long long n = d[1], c = b - red_start[t], nb = red_start[t + 1] - red_start[t];
    const long long i0 = c * chunk, i1 = min(n, i0 + chunk);
    Acc a;
    acc_init(a);
    switch ((int)d[6]) {
        case 0: acc_range((const float*)d[0], i0, i1, a); break;
        case 1: acc_range((const __half*)d[0], i0, i1, a); break;
        case 2: acc_range((const double*)d[0], i0, i1, a); break;
        default: acc_range((const int*)d[0], i0, i1, a); break;
    }
    acc_block(a, sh);
    if (nb == 1) {  // the tensor's only chunk (every decode-step tensor): its total is final
        if (threadIdx.x == 0) acc_store(res + (long long)t * RES_WORDS, a);
        return;
    }
    if (threadIdx.x == 0) {
        acc_store(part + b * RES_WORDS, a);
        __threadfence();  // the partial is visible device-wide before the ticket is taken
        last = atomicAdd(tickets + t, 1ULL) == (unsigned long long)(nb - 1);
    }
    __syncthreads();
    if (!last) return;
    // The tensor's last block: merge its nb partials (read through L2: __ldcg) in block order.
    acc_init(a);
    for (long long p = red_start[t] + threadIdx.x; p < red_start[t + 1]; p += blockDim.x) {
        Acc q;
        const unsigned long long* w = part + p * RES_WORDS;
        for (int k = 0; k < NRED_D; ++k) q.d[k] = __longlong_as_double((long long)__ldcg(w + k));
        for (int k = 0; k < NRED_U; ++k) q.u[k] = __ldcg(w + NRED_D + k);
        acc_merge(a, q);
    }
    acc_block(a, sh);
    if (threadIdx.x == 0) acc_store(res + (long long)t * RES_WORDS, a);
}

template <typename T>
__device__ void hist_range_add(const T* __restrict__ x, long long i0, long long i1, double lo,
                               double scale, int bins, unsigned int* hsh) {
    const long long lane = threadIdx.x & 31u;  // whole warps step together (see hist_bump)
#pragma unroll 4
    for (long long base = i0 + (threadIdx.x & ~31u); base < i1; base += blockDim.x) {
        const long long i = base + lane;
        hist_bump(hsh, i < i1 ? hist_bin(widen(x[i]), lo, scale, bins) : -1);
    }
}

template <typename T>
__device__ void heat_cell_sum(const T* __restrict__ x, long long r0, long long c0, long long w,
                              long long n_cols, long long total, unsigned lane, unsigned lanes,
                              double& s, unsigned long long& nb) {
    for (long long i = lane; i < total; i += lanes) {
        const double v = widen(x[(r0 + i / w) * n_cols + c0 + i % w]);
        if (isfinite(v)) s += v; else nb++;
    }
}

extern "C" __global__ void __launch_bounds__(BATCH_BLOCK)
stats_batch_hist_heat(const long long* __restrict__ tab, int T,
                      const long long* __restrict__ red_start,
                      const long long* __restrict__ heat_start, long long n_red, long long chunk,
                      int bins, const unsigned long long* __restrict__ res,
                      unsigned long long* __restrict__ hist, double* __restrict__ cells) {
    extern __shared__ unsigned int bsh[];  // the chunk's bin counts (32-bit: chunk < 2^32)
    __shared__ double wsum[WARPS];
    __shared__ unsigned long long wbad[WARPS];
    const long long b = blockIdx.x;
    if (b < n_red) {
        // -- histogram of one chunk on [lo, hi] = the tensor's finite range (as _hist_range) --
        const int t = block_tensor(heat_start, T)[b];
        const unsigned long long* r = res + (long long)t * RES_WORDS;
        if (r[NRED_D] == 0ULL) return;  // no finite value: no histogram (whole block returns)
        const long long* d = tab + (long long)t * DESC_WORDS;
        double lo = __longlong_as_double((long long)r[0]), hi = __longlong_as_double((long long)r[1]);
        if (!(hi > lo)) {  // a constant tensor: the window value +- max(0.5, |value|/2)
            const double pad = __dmul_rn(0.5, fmax(1.0, fabs(lo)));
            lo = __dsub_rn(lo, pad);
            hi = __dadd_rn(hi, pad);
        }
        const double scale = __ddiv_rn((double)bins, __dsub_rn(hi, lo));
        for (int k = threadIdx.x; k < bins; k += blockDim.x) bsh[k] = 0u;
        __syncthreads();
        const long long i0 = (b - red_start[t]) * chunk, i1 = min(d[1], i0 + chunk);
        switch ((int)d[6]) {
            case 0: hist_range_add((const float*)d[0], i0, i1, lo, scale, bins, bsh); break;
            case 1: hist_range_add((const __half*)d[0], i0, i1, lo, scale, bins, bsh); break;
            case 2: hist_range_add((const double*)d[0], i0, i1, lo, scale, bins, bsh); break;
            default: hist_range_add((const int*)d[0], i0, i1, lo, scale, bins, bsh); break;
        }
        __syncthreads();
        unsigned long long* out = hist + (long long)t * bins;
        for (int k = threadIdx.x; k < bins; k += blockDim.x)
            if (bsh[k]) atomicAdd(out + k, (unsigned long long)bsh[k]);
        return;
    }
    // -- heatmap: the mean of one cell's source block, NaN if it held a NaN or an Inf --
    const long long hb = b - n_red;
    const int t = block_tensor(heat_start, T)[b];
    const long long* d = tab + (long long)t * DESC_WORDS;
    const long long n_rows = d[2], n_cols = d[3], R = d[4], C = d[5];
    const int mode = (int)d[8];
    const bool per_block = mode == 1, per_thread = mode == 2;
    const unsigned lane = per_block ? threadIdx.x : per_thread ? 0u : (threadIdx.x & 31u);
    const unsigned lanes = per_block ? blockDim.x : per_thread ? 1u : 32u;
    const long long local = hb - heat_start[t];
    const long long cell = per_block    ? local
                           : per_thread ? local * BATCH_BLOCK + threadIdx.x
                                        : local * WARPS + (threadIdx.x >> 5);
    if (cell >= R * C) return;  // warp and thread modes (a block-mode block always has its cell)
    const long long rr = cell / C, cc = cell % C;
    const long long r0 = rr * n_rows / R, r1 = (rr + 1) * n_rows / R;
    const long long c0 = cc * n_cols / C, c1 = (cc + 1) * n_cols / C;
    const long long w = c1 - c0, total = (r1 - r0) * w;
    double s = 0.0;
    unsigned long long nb = 0ULL;
    switch ((int)d[6]) {
        case 0: heat_cell_sum((const float*)d[0], r0, c0, w, n_cols, total, lane, lanes, s, nb); break;
        case 1: heat_cell_sum((const __half*)d[0], r0, c0, w, n_cols, total, lane, lanes, s, nb); break;
        case 2: heat_cell_sum((const double*)d[0], r0, c0, w, n_cols, total, lane, lanes, s, nb); break;
        default: heat_cell_sum((const int*)d[0], r0, c0, w, n_cols, total, lane, lanes, s, nb); break;
    }
    if (per_thread) {  // the thread's own cell: no lanes to combine
        cells[d[7] + cell] = nb ? __longlong_as_double(0x7ff8000000000000LL)
                                : __ddiv_rn(s, (double)total);
        return;
    }
    for (unsigned off = 16; off > 0; off >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, off);
        nb += __shfl_down_sync(0xffffffffu, nb, off);
    }
    if (per_block) {
        const unsigned wl = threadIdx.x & 31u, wi = threadIdx.x >> 5;
        if (wl == 0) {
            wsum[wi] = s;
            wbad[wi] = nb;
        }
        __syncthreads();
        if (threadIdx.x != 0) return;
        s = 0.0;
        nb = 0ULL;
        for (int k = 0; k < WARPS; ++k) {
            s += wsum[k];
            nb += wbad[k];
        }
    } else if ((threadIdx.x & 31u) != 0) {
        return;
    }
    cells[d[7] + cell] = nb ? __longlong_as_double(0x7ff8000000000000LL)
                            : __ddiv_rn(s, (double)total);
}

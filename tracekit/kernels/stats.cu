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
// blockDim.x must be a power of two <= 256.
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

template <typename T>
__device__ void stats_reduce(const T* __restrict__ x, long long n, double* part_d,
                             unsigned long long* part_u, double* res_d,
                             unsigned long long* res_u, unsigned int* ticket) {
    __shared__ Acc sh[256];
    __shared__ bool last;
    Acc a;
    acc_init(a);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = widen(x[i]);
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

template <typename T>
__device__ void stats_hist(const T* __restrict__ x, long long n, double lo, double scale,
                           int bins, unsigned long long* __restrict__ counts) {
    extern __shared__ unsigned long long hsh[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) hsh[b] = 0ULL;
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = widen(x[i]);
        if (!isfinite(v)) continue;
        double f = floor((v - lo) * scale);
        int b = f < 0.0 ? 0 : (f >= (double)bins ? bins - 1 : (int)f);
        atomicAdd(&hsh[b], 1ULL);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (hsh[b]) atomicAdd(&counts[b], hsh[b]);
}

template <typename T>
__device__ void stats_heat(const T* __restrict__ x, long long n_rows, long long n_cols, int R,
                           int C, double* __restrict__ sums, unsigned long long* __restrict__ bad) {
    __shared__ double ssum[256];
    __shared__ unsigned long long sbad[256];
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

// Row reductions over [rows, n] float32 (tracekit/kernels/reduce.py computes the grid).
// One block per row, grid-stride over rows past the grid's x limit; each thread strides over
// the row, warps reduce with shuffles, one shared-memory hop joins the warps (blockDim.x is
// 32 or a multiple of 32, at most 1024).

namespace {

constexpr int kNoIndex = 0x7fffffff;  // "no candidate yet": an all-NaN row ends as index 0

// -inf without <math.h>'s INFINITY (NVRTC compiles this file without host headers).
__device__ __forceinline__ float neg_inf() { return __int_as_float((int)0xff800000u); }

// (value, index) of an argmax candidate.
struct Cand {
    float v;
    int i;
};

// The candidate (v, i) beats (bv, bi) when larger, or equal with a lower index. NaN never
// compares true, so it never wins; -inf wins over "no candidate" (bv = -inf, bi = kNoIndex).
__device__ __forceinline__ Cand better(Cand b, Cand c) {
    return c.v > b.v || (c.v == b.v && c.i < b.i) ? c : b;
}

__device__ __forceinline__ float shfl_xor(float v, int o) {
    return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ double shfl_xor(double v, int o) {
    return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ Cand shfl_xor(Cand c, int o) {
    return Cand{__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
}

// The block's join of one value per thread (max, sum, argmax): a shuffle butterfly within each
// warp, then, with more than one warp, one hop through sh (32 slots) and a butterfly over the
// warps' values; every thread ends with the block's. The first barrier lets the caller reuse sh
// row after row.
template <class T, class Join>
__device__ __forceinline__ T block_join(T v, T* sh, T none, Join join) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = join(v, shfl_xor(v, o));
    if (nw > 1) {
        __syncthreads();
        if (lane == 0) sh[warp] = v;
        __syncthreads();
        v = lane < nw ? sh[lane] : none;
        for (int o = 16; o > 0; o >>= 1) v = join(v, shfl_xor(v, o));
    }
    return v;
}

}  // namespace

// y = exp(x - max) / sum(exp(x - max)); the sum in double, rounded to f32 once.
// Reads 4 B (three passes, the later ones mostly from L2), writes 4 B per element; 5 flops.
extern "C" __global__ void softmax_f32(const float* x, float* y, long long rows, long long n) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    const auto fmax = [](float a, float b) { return fmaxf(a, b); };
    const auto add = [](double a, double b) { return a + b; };
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = neg_inf();
        for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
        m = block_join(m, shm, neg_inf(), fmax);
        double s = 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)expf(xr[i] - m);
        s = block_join(s, shs, 0.0, add);
        const float s32 = (float)s;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - m) / s32;
    }
}

// out[r] = the first index of row r's maximum, NaN ignored, 0 for an all-NaN row.
// Reads 4 B per element, writes 4 B per row; 1 flop (a compare) per element.
extern "C" __global__ void argmax_f32(const float* x, int* out, long long rows, long long n) {
    __shared__ Cand shc[32];
    const Cand none{neg_inf(), kNoIndex};
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * n;
        Cand b = none;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) b = better(b, Cand{xr[i], (int)i});
        b = block_join(b, shc, none, better);
        if (threadIdx.x == 0) out[r] = b.i == kNoIndex ? 0 : b.i;
    }
}

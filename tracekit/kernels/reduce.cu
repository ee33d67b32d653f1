// Row reductions over [rows, n] float32 (tracekit/kernels/reduce.py computes the grid).
// One block per row, grid-stride over rows past the grid's x limit; each thread strides over
// the row, warps reduce with shuffles, one shared-memory hop joins the warps (blockDim.x is
// 32 or a multiple of 32, at most 1024).

namespace {

constexpr int kNoIndex = 0x7fffffff;  // "no candidate yet": an all-NaN row ends as index 0

// -inf without <math.h>'s INFINITY (NVRTC compiles this file without host headers).
__device__ __forceinline__ float neg_inf() { return __int_as_float((int)0xff800000u); }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The candidate (v, i) beats (bv, bi) when larger, or equal with a lower index. NaN never
// compares true, so it never wins; -inf wins over "no candidate" (bv = -inf, bi = kNoIndex).
__device__ __forceinline__ void take_better(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        take_better(v, i, ov, oi);
    }
}

}  // namespace

// y = exp(x - max) / sum(exp(x - max)); the sum in double, rounded to f32 once.
// Reads 4 B (three passes, the later ones mostly from L2), writes 4 B per element; 5 flops.
extern "C" __global__ void softmax_f32(const float* x, float* y, long long rows, long long n) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = neg_inf();
        for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
        m = warp_max(m);
        if (nw > 1) {
            __syncthreads();  // the previous row is done with shm/shs
            if (lane == 0) shm[warp] = m;
            __syncthreads();
            m = warp_max(lane < nw ? shm[lane] : neg_inf());
        }
        double s = 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)expf(xr[i] - m);
        s = warp_sum(s);
        if (nw > 1) {
            if (lane == 0) shs[warp] = s;
            __syncthreads();
            s = warp_sum(lane < nw ? shs[lane] : 0.0);
        }
        const float s32 = (float)s;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - m) / s32;
    }
}

// out[r] = the first index of row r's maximum, NaN ignored, 0 for an all-NaN row.
// Reads 4 B per element, writes 4 B per row; 1 flop (a compare) per element.
extern "C" __global__ void argmax_f32(const float* x, int* out, long long rows, long long n) {
    __shared__ float shv[32];
    __shared__ int shi[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * n;
        float bv = neg_inf();
        int bi = kNoIndex;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) take_better(bv, bi, xr[i], (int)i);
        warp_argmax(bv, bi);
        if (nw > 1) {
            __syncthreads();  // the previous row is done with shv/shi
            if (lane == 0) {
                shv[warp] = bv;
                shi[warp] = bi;
            }
            __syncthreads();
            bv = lane < nw ? shv[lane] : neg_inf();
            bi = lane < nw ? shi[lane] : kNoIndex;
            warp_argmax(bv, bi);
        }
        if (threadIdx.x == 0) out[r] = bi == kNoIndex ? 0 : bi;
    }
}

// RMS norm over rows of length d (tracekit/kernels/norm.py computes the grid).
//
// One block per row, grid-stride over rows past the grid's x limit. Each thread accumulates
// its strided share of sum(x^2) in double; warps reduce with __shfl_xor_sync, then one
// shared-memory hop across warps (blockDim.x is 32 or a multiple of 32, at most 1024).
// scale = 1 / sqrt(mean + eps) is computed in double and rounded to f32 once, like the NumPy
// reference; y = (x * scale) * w with each product rounded (__fmul_rn: no FMA contraction).
// Reads 4 B of x (twice: the second pass mostly from L1/L2) and 4 B of w, writes 4 B per element.

#include "stamp.cuh"  // LaunchStamp: the stamped kernels time themselves (stamp.cuh)

namespace {

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every thread of the block gets the total. sh holds one partial per warp.
__device__ double block_sum(double v, double* sh) {
    v = warp_sum(v);
    if (blockDim.x == 32) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // the previous row's readers are done with sh
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0;
    return warp_sum(v);
}

}  // namespace

#ifndef NORM_RPT
#error "compile with norm.kernel_defines(): -DNORM_RPT"
#endif

// A row that fits NORM_RPT values a thread (the launcher's usual geometry) is loaded once, x and
// w together, into registers: one memory round trip a row instead of three dependent ones (x,
// then x and w again after the reduction). Longer rows stream. Same sums, same order.
extern "C" __global__ void rms_norm_f32(const float* x, const float* w, float* y, long long rows,
                                        int d, double eps, int has_w, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    __shared__ double sh[32];
    const bool in_regs = d <= (int)blockDim.x * NORM_RPT;  // block-uniform
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * d;
        float* yr = y + r * d;
        double s = 0.0;
        float xv[NORM_RPT], wv[NORM_RPT];
        if (in_regs) {
#pragma unroll
            for (int u = 0; u < NORM_RPT; ++u) {
                const int i = threadIdx.x + u * blockDim.x;
                xv[u] = i < d ? xr[i] : 0.0f;
                wv[u] = has_w && i < d ? w[i] : 1.0f;
            }
#pragma unroll
            for (int u = 0; u < NORM_RPT; ++u) {
                const double v = xv[u];
                s += v * v;
            }
        } else {
            for (int i = threadIdx.x; i < d; i += blockDim.x) {
                const double v = xr[i];
                s += v * v;
            }
        }
        s = block_sum(s, sh);
        const float scale = (float)(1.0 / sqrt(s / (double)d + eps));
        if (in_regs) {
#pragma unroll
            for (int u = 0; u < NORM_RPT; ++u) {
                const int i = threadIdx.x + u * blockDim.x;
                if (i >= d) break;
                const float v = __fmul_rn(xv[u], scale);
                yr[i] = has_w ? __fmul_rn(v, wv[u]) : v;
            }
        } else {
            for (int i = threadIdx.x; i < d; i += blockDim.x) {
                const float v = __fmul_rn(xr[i], scale);
                yr[i] = has_w ? __fmul_rn(v, w[i]) : v;
            }
        }
    }
}

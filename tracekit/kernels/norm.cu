// RMS norm over rows of length d (tracekit/kernels/norm.py computes the grid), and the same norm
// of a residual sum a + b, written with the sum (add_rms_norm_f32: one launch for add + norm).
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

namespace {

// The rows of both kernels, one template so that the norm is the same code: x[i] is a[i]
// (kAdd false), or the f32 sum a[i] + b[i] (__fadd_rn: add_f32's one rounded add), stored to
// sum[i] as it is loaded (kAdd true). A row that fits NORM_RPT values a thread (the launcher's
// usual geometry) is loaded once, x and w together, into registers: one memory round trip a row
// instead of three dependent ones (x, then x and w again after the reduction). Longer rows
// stream; the fused kernel's second pass reads back the sums this thread stored. Same sums,
// same order, for one block size: y is bit for bit rms_norm_f32 of the sum.
template <bool kAdd>
__device__ __forceinline__ void norm_rows(const float* a, const float* b, const float* w,
                                          float* sum, float* y, long long rows, int d, double eps,
                                          int has_w, double* sh) {
    const bool in_regs = d <= (int)blockDim.x * NORM_RPT;  // block-uniform
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* ar = a + r * d;
        const float* br = kAdd ? b + r * d : nullptr;
        float* sr = kAdd ? sum + r * d : nullptr;
        float* yr = y + r * d;
        double s = 0.0;
        float xv[NORM_RPT], wv[NORM_RPT];
        if (in_regs) {
#pragma unroll
            for (int u = 0; u < NORM_RPT; ++u) {
                const int i = threadIdx.x + u * blockDim.x;
                float v = 0.0f;
                if (i < d) {
                    v = ar[i];
                    if (kAdd) {
                        v = __fadd_rn(v, br[i]);
                        sr[i] = v;
                    }
                }
                xv[u] = v;
                wv[u] = has_w && i < d ? w[i] : 1.0f;
            }
#pragma unroll
            for (int u = 0; u < NORM_RPT; ++u) {
                const double v = xv[u];
                s += v * v;
            }
        } else {
            for (int i = threadIdx.x; i < d; i += blockDim.x) {
                float x = ar[i];
                if (kAdd) {
                    x = __fadd_rn(x, br[i]);
                    sr[i] = x;
                }
                const double v = x;
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
                const float v = __fmul_rn(kAdd ? sr[i] : ar[i], scale);
                yr[i] = has_w ? __fmul_rn(v, w[i]) : v;
            }
        }
    }
}

}  // namespace

extern "C" __global__ void rms_norm_f32(const float* x, const float* w, float* y, long long rows,
                                        int d, double eps, int has_w, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    __shared__ double sh[32];
    norm_rows<false>(x, nullptr, w, nullptr, y, rows, d, eps, has_w, sh);
}

// out = [sum | normed] as two planes of rows x d: out[r, i] = a + b, out[rows * d + r * d + i]
// the rms_norm of that row (times w). Reads 8 B of a and b and 4 B of w, writes 8 B per element
// (the long-row pass also reads back 4 B of the sum); 5 flops (the add, then rms_norm's 4).
extern "C" __global__ void add_rms_norm_f32(const float* a, const float* b, const float* w,
                                            float* out, long long rows, int d, double eps,
                                            int has_w, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    __shared__ double sh[32];
    norm_rows<true>(a, b, w, out, out + rows * d, rows, d, eps, has_w, sh);
}

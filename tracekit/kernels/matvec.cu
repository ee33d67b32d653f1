// Quantized matrix-vector product for decode (seed §3.2's MMQ path, issue 13): out [nt, n] =
// x [nt, k] f32 @ W [n, k]^T, W read straight from its GGUF blocks, never dequantized to memory.
//
// Design: f32 decode + FMA. One warp (or WPR warps) per weight row; the row's lanes take its
// 8-value chunks round-robin (chunk g = values [8g, 8g + 8): chunk g % CPB of block g / CPB),
// decode each with the type's block decoder (quant_decoders.cuh: Fast<T>::dec8 when the weight
// is 16-byte aligned, else T::dec8 — the values gguf-py dequantizes to, bit for bit) and FMA it
// with the NT tokens' 8 activations (two 16-byte loads each, L1-resident: x is 16 KB a token).
// MV_UNROLL chunks are decoded before their FMAs, so their loads are in flight together. The
// lane sums are reduced with shuffles (then across the row's warps in shared memory) and lane t
// writes token t's output. f32 accumulation throughout (no fast-math): the NumPy reference is
// the same f32 product of the same exact values, up to summation order.
//
// Instantiation: matvec.py appends MATVEC_KERNELS(<suffix>, <struct>) for the type it loads, the
// struct being the type's declared CUDA decoder (tracekit/quants.py's ``device``; float types:
// FloatBlock<Src*> below), so a type declared there with its decoder plugs in with no edit here.

#include "quant_decoders.cuh"  // u8/u32/i64, T and Fast<T> decoders, SrcF32/F16/BF16
#include "stamp.cuh"           // LaunchStamp: every matvec kernel times itself (stamp.cuh)

#ifndef MV_UNROLL
#define MV_UNROLL 4
#endif

// Float weights through the same interface: a "block" of 8 values, one chunk.
template <class S>
struct FloatBlock {
    static constexpr int QK = 8, TS = 8 * S::BYTES;
    static __device__ __forceinline__ void dec8(const u8* b, int, float* v) {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = S::at(b + k * S::BYTES);
    }
};
template <class S>
struct Fast<FloatBlock<S>> : FloatBlock<S> {
    static constexpr int ALIGN = 16;
    static __device__ __forceinline__ void dec8(const u8* b, int, float* v) { S::vec8(b, v); }
};

// Fast<T> where quant_decoders.cuh specializes it, else T itself (a new type may come with its
// byte-wise decoder only).
template <class T, class = void>
struct FastOr {
    using type = T;
};
template <class T>
struct FastOr<T, decltype((void)Fast<T>::ALIGN)> {
    using type = Fast<T>;
};

// Rows with few outputs (896 on a 0.5B model) leave most of the GPU idle at one warp per row:
// then WPR = blockDim.y warps share a row (warp y takes every WPR-th 32-chunk stretch), and the
// warps' sums meet in shared memory in a fixed order.
template <class D, int NT>
__device__ __forceinline__ void matvec_row(const u8* __restrict__ w, const float* __restrict__ x,
                                           float* __restrict__ acc, int k) {
    constexpr int CPB = D::QK / 8;  // 8-value chunks per block
    const int lanes = 32 * blockDim.y;  // the row's lanes
    const int nchunks = k >> 3;
    for (int g0 = threadIdx.y * 32 + threadIdx.x; g0 < nchunks; g0 += lanes * MV_UNROLL) {
        float v[MV_UNROLL][8];
#pragma unroll
        for (int u = 0; u < MV_UNROLL; ++u) {
            const int g = g0 + lanes * u;
            if (g < nchunks) D::dec8(w + (i64)(g / CPB) * D::TS, g % CPB, v[u]);
        }
#pragma unroll
        for (int u = 0; u < MV_UNROLL; ++u) {
            const int g = g0 + lanes * u;
            if (g >= nchunks) break;  // (not 0 * x: an Inf activation would make a NaN)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const float4* xp = reinterpret_cast<const float4*>(x + (i64)t * k + 8 * g);
                const float4 a = __ldg(xp), b = __ldg(xp + 1);
                float s = acc[t];
                s = __fmaf_rn(v[u][0], a.x, s);
                s = __fmaf_rn(v[u][1], a.y, s);
                s = __fmaf_rn(v[u][2], a.z, s);
                s = __fmaf_rn(v[u][3], a.w, s);
                s = __fmaf_rn(v[u][4], b.x, s);
                s = __fmaf_rn(v[u][5], b.y, s);
                s = __fmaf_rn(v[u][6], b.z, s);
                s = __fmaf_rn(v[u][7], b.w, s);
                acc[t] = s;
            }
        }
    }
}

#define MV_MAX_WARPS 8  // blockDim.y * blockDim.z <= 8 (256 threads)

// Grid contract (matvec.py's geometry): block = (32, WPR, rows per block), grid.x = ceil(n /
// rows per block); row blockIdx.x * blockDim.z + threadIdx.z, its WPR warps threadIdx.y.
// fast: raw % 16 == 0 (Fast<T>'s alignment), checked by the launcher. ts/qk: the sizes of T's
// block (the quant table's, or 8 values for F32/F16/BF16), checked against T.
template <class T, int NT>
__device__ __forceinline__ void matvec(const u8* __restrict__ raw, const float* __restrict__ x,
                                       float* __restrict__ out, int n, int k, int ts, int qk,
                                       int fast) {
    __shared__ float part[MV_MAX_WARPS][NT];
    if (ts != T::TS || qk != T::QK || blockDim.x != 32 || blockDim.y * blockDim.z > MV_MAX_WARPS)
        __trap();
    const int row = blockIdx.x * blockDim.z + threadIdx.z;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    if (row < n) {  // no return: the block meets at the barrier below
        const u8* w = raw + (i64)row * (k / T::QK) * T::TS;
        if (fast)
            matvec_row<typename FastOr<T>::type, NT>(w, x, acc, k);
        else
            matvec_row<T, NT>(w, x, acc, k);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], o);
    }
    const int lane = threadIdx.x;
    if (blockDim.y == 1) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (lane == t && row < n) out[(i64)t * n + row] = acc[t];
        return;
    }
    const int wslot = threadIdx.z * blockDim.y + threadIdx.y;
#pragma unroll
    for (int t = 0; t < NT; ++t)
        if (lane == t) part[wslot][t] = acc[t];
    __syncthreads();
    if (threadIdx.y == 0 && lane < NT && row < n) {
        float s = 0.0f;
        for (int y = 0; y < blockDim.y; ++y) s += part[threadIdx.z * blockDim.y + y][lane];
        out[(i64)lane * n + row] = s;
    }
}

#define MATVEC_KERNEL(suffix, T, NT)                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        matvec_##suffix##_n##NT(const u8* __restrict__ raw, const float* __restrict__ x,       \
                                float* __restrict__ out, int n, int k, int ts, int qk,         \
                                int fast, unsigned long long* stamp) {                         \
        const LaunchStamp launch_stamp(stamp);                                                \
        matvec<T, NT>(raw, x, out, n, k, ts, qk, fast);                                        \
    }

// One kernel per token count 1..8 (MAX_NT in matvec.py).
#define MATVEC_KERNELS(suffix, T)                                                              \
    MATVEC_KERNEL(suffix, T, 1)                                                                \
    MATVEC_KERNEL(suffix, T, 2)                                                                \
    MATVEC_KERNEL(suffix, T, 3)                                                                \
    MATVEC_KERNEL(suffix, T, 4)                                                                \
    MATVEC_KERNEL(suffix, T, 5)                                                                \
    MATVEC_KERNEL(suffix, T, 6)                                                                \
    MATVEC_KERNEL(suffix, T, 7)                                                                \
    MATVEC_KERNEL(suffix, T, 8)

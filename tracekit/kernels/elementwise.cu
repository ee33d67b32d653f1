// Elementwise kernels (seed §2.2, §3.1, §3.4). Launched by tracekit/kernels/elementwise.py,
// which computes every grid (tracekit/kernels/launch.py) and passes scalars with fixed widths.
//
// Streaming kernels: (inputs..., out, long long n, int vec, [scalars]). With vec != 0 every
// pointer is 16-byte aligned (the launcher checked): a grid-stride loop moves float4s (4
// elements; two per input per thread per iteration), then the first (n % 4) threads of the
// grid do the tail.
// With vec == 0 a plain grid-stride loop over elements (any alignment). Indices are 64-bit.
// No __restrict__ on outputs: out may alias an input (each element is read before it is
// written, by the same thread).

#include <cuda_fp16.h>

#include "stamp.cuh"  // LaunchStamp: the stamped kernels time themselves (stamp.cuh)

namespace {

struct Add {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct Bits {  // a move, no arithmetic: the bit pattern (a NaN's payload too) is kept
    __device__ float operator()(float a) const { return a; }
};
struct Mul {
    __device__ float operator()(float a, float b) const { return a * b; }
};
struct Silu {
    // IEEE expf and division (no fast math): a few ulp from the NumPy reference.
    __device__ float operator()(float a) const { return a / (1.0f + expf(-a)); }
};
struct GeluTanh {
    // Products rounded one by one (__fmul_rn/__fadd_rn) in the reference's order.
    __device__ float operator()(float a) const {
        const float c = 0.7978845608028654f;  // sqrt(2 / pi), rounded to f32
        const float x3 = __fmul_rn(__fmul_rn(a, a), a);
        const float inner = __fmul_rn(c, __fadd_rn(a, __fmul_rn(0.044715f, x3)));
        return __fmul_rn(__fmul_rn(0.5f, a), __fadd_rn(1.0f, tanhf(inner)));
    }
};
struct Scale {
    float s;
    __device__ float operator()(float a) const { return a * s; }
};
struct Softcap {
    // gemma2's cap * tanh(x / cap), in HF's order: IEEE division, tanhf, one rounded product.
    float cap;
    __device__ float operator()(float a) const { return __fmul_rn(cap, tanhf(__fdiv_rn(a, cap))); }
};

// act(gate) * up: the activation's f32 value, then one rounded product (mul_f32's a * b).
template <class Act>
struct GluOf {
    Act act;
    __device__ float operator()(float gate, float up) const { return __fmul_rn(act(gate), up); }
};

template <class Op>
__device__ __forceinline__ float4 map4(Op op, float4 a, float4 b) {
    return make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
}

template <class Op>
__device__ __forceinline__ float4 map4(Op op, float4 a) {
    return make_float4(op(a.x), op(a.y), op(a.z), op(a.w));
}

// UNROLL float4s per input in flight per thread (all loads before any store); STREAM_HINTS
// uses evict-first loads/stores (__ldcs/__stcs) so a streamed tensor does not push reused data
// out of L2; CONVERT_ELEMS values per convert_f32_f16 work item. elementwise.py passes all
// three from the constants its grids are computed with (kernel_defines); the sweep varies them.
#if !defined(UNROLL) || !defined(STREAM_HINTS) || !defined(CONVERT_ELEMS)
#error "compile with elementwise.kernel_defines(): -DUNROLL, -DSTREAM_HINTS, -DCONVERT_ELEMS"
#endif
static_assert(UNROLL >= 1 && UNROLL <= 16, "UNROLL float4s per thread out of range");
static_assert(CONVERT_ELEMS == 8, "convert_f32_f16 writes one 16-byte store of 8 f16 per item");

__device__ __forceinline__ float4 load4(const float4* p) {
#if STREAM_HINTS
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void store4(float4* p, float4 v) {
#if STREAM_HINTS
    __stcs(p, v);
#else
    *p = v;
#endif
}

// The vector walk the streaming kernels share: float4 work items j = tid, tid + stride, ... of
// `total`, UNROLL of a thread's items loaded (load(j, v): v[0..NIN) its inputs' float4s)
// before any is stored (store(j, v)), so their loads are in flight together.
template <int NIN, class Load, class Store>
__device__ __forceinline__ void walk4(long long total, Load load, Store store) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = tid; i < total; i += UNROLL * stride) {
        float4 v[UNROLL][NIN];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long j = i + u * stride;
            if (j < total) load(j, v[u]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long j = i + u * stride;
            if (j < total) store(j, v[u]);
        }
    }
}

template <class Op>
__device__ void binary(Op op, const float* x, const float* y, float* z, long long n, int vec) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    if (vec) {
        const long long n4 = n >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* y4 = reinterpret_cast<const float4*>(y);
        float4* z4 = reinterpret_cast<float4*>(z);
        walk4<2>(
            n4, [&](long long j, float4* v) { v[0] = load4(x4 + j), v[1] = load4(y4 + j); },
            [&](long long j, const float4* v) { store4(z4 + j, map4(op, v[0], v[1])); });
        const long long t = (n4 << 2) + tid;  // the n % 4 tail: threads 0..2 of the grid
        if (t < n) z[t] = op(x[t], y[t]);
    } else {
        for (long long i = tid; i < n; i += stride) z[i] = op(x[i], y[i]);
    }
}

template <class Op>
__device__ void unary(Op op, const float* x, float* z, long long n, int vec) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    if (vec) {
        const long long n4 = n >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* z4 = reinterpret_cast<float4*>(z);
        walk4<1>(
            n4, [&](long long j, float4* v) { v[0] = load4(x4 + j); },
            [&](long long j, const float4* v) { store4(z4 + j, map4(op, v[0])); });
        const long long t = (n4 << 2) + tid;
        if (t < n) z[t] = op(x[t]);
    } else {
        for (long long i = tid; i < n; i += stride) z[i] = op(x[i]);
    }
}

// GLU over a fused [gate | up] matmul output: z[t, i] = act(x[t, i]) * x[t, n + i] for x
// [rows, 2n] (row stride 2n) and z [rows, n] (row stride n). The product is act's f32 result
// times up, one rounding (__fmul_rn), so z is bit for bit act_f32 then mul_f32. With vec != 0
// (n % 4 == 0 and x, z 16-byte aligned: the launcher checked) a work item is one float4 of z
// (UNROLL in flight per thread, as binary's), its gate and up float4s at the same column of
// the row; n % 4 == 0 leaves no tail. With vec == 0 a plain grid-stride loop over elements.
// z must not overlap x (the launcher checks): rows after the first would overwrite gates and
// ups other threads have yet to read.
template <class Act>
__device__ void glu(Act act, const float* x, float* z, long long rows, long long n, int vec) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    if (vec) {
        const long long n4 = n >> 2;  // float4s per row of z; a row of x holds 2 * n4
        const long long total = rows * n4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* z4 = reinterpret_cast<float4*>(z);
        walk4<2>(
            total,
            [&](long long j, float4* v) {
                const long long gj = j + (j / n4) * n4;  // row j / n4's gate: 2 n4 a row
                v[0] = load4(x4 + gj), v[1] = load4(x4 + gj + n4);
            },
            [&](long long j, const float4* v) {
                store4(z4 + j, map4(GluOf<Act>{act}, v[0], v[1]));
            });
    } else {
        const long long total = rows * n;
        for (long long j = tid; j < total; j += stride) {
            const long long gj = j + (j / n) * n;
            z[j] = GluOf<Act>{act}(x[gj], x[gj + n]);
        }
    }
}

}  // namespace

// Reads 8 B, writes 4 B per element; 1 flop.
extern "C" __global__ void add_f32(const float* x, const float* y, float* z, long long n, int vec,
                                    unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    binary(Add{}, x, y, z, n, vec);
}

// Reads 8 B, writes 4 B per element; 1 flop.
extern "C" __global__ void mul_f32(const float* x, const float* y, float* z, long long n, int vec,
                                    unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    binary(Mul{}, x, y, z, n, vec);
}

// Reads 4 B, writes 4 B per element; 3 flops (exp counted as 1).
extern "C" __global__ void silu_f32(const float* x, float* z, long long n, int vec, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    unary(Silu{}, x, z, n, vec);
}

// Reads 4 B, writes 4 B per element; 9 flops (tanh counted as 1).
extern "C" __global__ void gelu_tanh_f32(const float* x, float* z, long long n, int vec,
                                          unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    unary(GeluTanh{}, x, z, n, vec);
}

// GLU of a fused [gate | up] x [rows, 2n] into z [rows, n] (glu template above): one launch
// for the act and mul kernels. Reads 8 B, writes 4 B per output element; 4 flops (silu's 3 and
// the product).
extern "C" __global__ void glu_silu_f32(const float* x, float* z, long long rows, long long n,
                                         int vec, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    glu(Silu{}, x, z, rows, n, vec);
}

// As glu_silu_f32 with gelu_tanh: reads 8 B, writes 4 B per output element; 10 flops.
extern "C" __global__ void glu_gelu_tanh_f32(const float* x, float* z, long long rows,
                                              long long n, int vec, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    glu(GeluTanh{}, x, z, rows, n, vec);
}

// Reads 4 B, writes 4 B per element; 1 flop.
extern "C" __global__ void scale_f32(const float* x, float* z, long long n, int vec, float s,
                                      unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    unary(Scale{s}, x, z, n, vec);
}

// Reads 4 B, writes 4 B per element; 3 flops (tanh counted as 1).
extern "C" __global__ void softcap_f32(const float* x, float* z, long long n, int vec, float cap,
                                        unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    unary(Softcap{cap}, x, z, n, vec);
}

// Columns [start, start + width) of a row-major [rows, cols] x into a contiguous [rows, width]
// y: phi3's fused qkv and gate/up outputs split into their parts. One thread per output element,
// grid-stride over a 64-bit index; the launcher checked start + width <= cols.
// Reads 4 B, writes 4 B per output element; 0 flops.
extern "C" __global__ void slice_cols_f32(const float* x, float* y, long long rows, int cols,
                                           int start, int width, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    const long long total = rows * width;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
        const long long r = k / width;
        y[k] = x[r * cols + start + (k - r * width)];
    }
}

// The seed's I32-as-f32 token ids: copy the bit patterns, as the streaming unary kernels move
// floats (float4 when aligned, UNROLL of them per iteration).
extern "C" __global__ void f32_bits_to_i32(const float* x, int* z, long long n, int vec,
                                            unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    unary(Bits{}, x, reinterpret_cast<float*>(z), n, vec);
}

// 8 elements per thread: two float4 loads (32 B) and one 16-byte store of 8 halves, each
// rounded with __float2half_rn (round to nearest even, as NumPy's astype(float16)). The
// n % 8 tail is done by the first threads of the grid; vec == 0 converts one at a time.
extern "C" __global__ void convert_f32_f16(const float* x, __half* z, long long n, int vec,
                                            unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    if (vec) {
        const long long n8 = (long long)((unsigned long long)n / CONVERT_ELEMS);  // n >= 0
        const float4* x4 = reinterpret_cast<const float4*>(x);
        uint4* z8 = reinterpret_cast<uint4*>(z);
        for (long long i = tid; i < n8; i += stride) {
            const float4 a = x4[2 * i], b = x4[2 * i + 1];
            __half2 h0 = __halves2half2(__float2half_rn(a.x), __float2half_rn(a.y));
            __half2 h1 = __halves2half2(__float2half_rn(a.z), __float2half_rn(a.w));
            __half2 h2 = __halves2half2(__float2half_rn(b.x), __float2half_rn(b.y));
            __half2 h3 = __halves2half2(__float2half_rn(b.z), __float2half_rn(b.w));
            uint4 v;
            v.x = *reinterpret_cast<unsigned int*>(&h0);
            v.y = *reinterpret_cast<unsigned int*>(&h1);
            v.z = *reinterpret_cast<unsigned int*>(&h2);
            v.w = *reinterpret_cast<unsigned int*>(&h3);
            z8[i] = v;
        }
        const long long t = n8 * CONVERT_ELEMS + tid;
        if (t < n) z[t] = __float2half_rn(x[t]);
    } else {
        for (long long i = tid; i < n; i += stride) z[i] = __float2half_rn(x[i]);
    }
}

// Seed §3.1 contract: grid.x = nt, one block row per token t; the launcher passes the ROW
// COUNT nt (a guard here) and the row length d, never nt * d. Columns are tiled over grid.y:
// with vec (d % 4 == 0 and every pointer 16-byte aligned) a thread adds one float4 (columns
// 4i..4i+3), else one float. One float per thread in blocks of 64 measured 20% of copy
// bandwidth on the H200 (block scheduling, not DRAM, was the limit).
// out may be y (in place). Reads 4 B of y per element (b stays in L2), writes 4 B; 1 flop.
extern "C" __global__ void add_bias_f32(const float* y, const float* b, float* out, int d,
                                        long long nt, int vec, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    const long long t = blockIdx.x;
    const int i = threadIdx.x + blockIdx.y * blockDim.x;
    if (t >= nt) return;
    if (vec) {
        if (i >= (d >> 2)) return;
        const long long k = t * (d >> 2) + i;
        const float4 a = reinterpret_cast<const float4*>(y)[k];
        const float4 c = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(out)[k] = make_float4(a.x + c.x, a.y + c.y, a.z + c.z, a.w + c.w);
    } else {
        if (i >= d) return;
        const long long k = t * d + i;
        out[k] = y[k] + b[i];
    }
}

// The bench's launch-cost baseline: one block of 32 threads that does nothing.
extern "C" __global__ void empty_kernel() {}

// The launch floor as the tracer measures a launch (ceilings.py): an empty kernel that times
// itself with the LaunchStamp every stamped kernel opens with, so a kernel's stamped time is
// never below the floor's by construction of the instrument.
extern "C" __global__ void empty_stamped(unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
}

// The bench's store floor: out[0:n] = value, one 16-byte store per thread (a warp writes 512
// contiguous bytes), no loads and no division. A latency-bound kernel that writes a tensor
// cannot take less device time than this one writing the same tensor (out 16-byte aligned).
extern "C" __global__ void fill_f32(float* __restrict__ out, float value, long long n) {
    const long long chunks = n / 4;
    const float4 v = make_float4(value, value, value, value);
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < chunks;
         c += (long long)gridDim.x * blockDim.x)
        reinterpret_cast<float4*>(out)[c] = v;
    if (blockIdx.x == 0 && threadIdx.x < n - 4 * chunks) out[4 * chunks + threadIdx.x] = value;
}

// Holds the GPU for `ns` nanoseconds (one thread reads the global timer): the bench enqueues
// launches behind it so their timing excludes the host's launch overhead.
extern "C" __global__ void spin_kernel(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

// Writes the global timer (ns) to t[i] when it runs: queued either side of a launch that cannot
// time itself (a cuBLAS GEMM; tracekit/runner/stamps.py), before a node (when its work arrived)
// and at a step's ends. ~0.65 us of GPU time each on the H200 (an event-record node ~3.4 us).
extern "C" __global__ void globaltimer_stamp(unsigned long long* t, int i) {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    t[i] = g;
}

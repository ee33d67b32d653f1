// Matrix-vector products for decode (seed §3.2's MMQ path, issue 13): out [nt, n] =
// x [nt, k] f32 @ W [n, k]^T, W read straight from its GGUF blocks, never dequantized to memory.
// Two kernels: mmvq for the block-quantized types (integer dot products against activations
// quantized to 8 bits, below), matvec for F32/F16/BF16 weights (f32 FMA, next).
//
// matvec, the float weights: f32 decode + FMA. One warp (or WPR warps) per weight row; the row's lanes take its
// 8-value chunks round-robin (chunk g = values [8g, 8g + 8): chunk g % CPB of block g / CPB),
// decode each with the type's block decoder (quant_decoders.cuh: Fast<T>::dec8 when the weight
// is 16-byte aligned, else T::dec8 — the values gguf-py dequantizes to, bit for bit) and FMA it
// with the NT tokens' 8 activations (two 16-byte loads each, L1-resident: x is 16 KB a token).
// MV_UNROLL chunks are decoded before their FMAs, so their loads are in flight together. The
// lane sums are reduced with shuffles (then across the row's warps in shared memory) and lane t
// writes token t's output. f32 accumulation throughout (no fast-math): the NumPy reference is
// the same f32 product of the same exact values, up to summation order.
//
// Bias (optional, null for none): out[t, row] = sum + bias[row], one f32 add after the row's
// sum, the add add_bias_f32 makes: a matmul node with a bias (qwen2's q, k, v) is one launch.
//
// Instantiation: matvec.py appends MATVEC_KERNELS(<suffix>, <struct>) for the type it loads, the
// struct being the type's declared CUDA decoder (tracekit/quants.py's ``device``; float types:
// FloatBlock<Src*> below), so a type declared there with its decoder plugs in with no edit here.

#include "quant_codes.cuh"  // Codes<T>: each quant type's integer view (and quant_decoders.cuh)
#include "q8_runs.cuh"      // RUN_INTS, quantize_x: the 8-bit activations
#include "stamp.cuh"          // LaunchStamp: every matvec kernel times itself (stamp.cuh)

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

// A row's lane sums (+ bias[row]) -> out[t, row]: shuffles within each warp, then (WPR > 1) the
// row's warps meet in shared memory in a fixed order. Every thread of the block calls it (its
// barriers); the last barrier lets a grid-strided caller reuse part for its next row.
__device__ __forceinline__ float with_bias(float s, const float* __restrict__ bias, int row) {
    return bias ? __fadd_rn(s, __ldg(bias + row)) : s;
}
template <int NT>
__device__ __forceinline__ void write_row(float* acc, float (*part)[NT], float* __restrict__ out,
                                          int row, int n, const float* __restrict__ bias) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], o);
    }
    const int lane = threadIdx.x;
    if (blockDim.y == 1) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (lane == t && row < n) out[(i64)t * n + row] = with_bias(acc[t], bias, row);
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
        out[(i64)lane * n + row] = with_bias(s, bias, row);
    }
    __syncthreads();
}

// MMVQ_ROWS_REDUCE 1 (compile-time knob, off): a warp's R rows (one token, one warp a row) are
// summed across its lanes together: at each of the first log2 R shuffle steps a lane sends the
// rows its partner keeps and keeps the others (lane l ends with row 2 b3 + b4 of its bits
// 3-4: R = 4; b4: R = 2), so R rows take 5 + R - 2 shuffles instead of 5 R (2: 5 against 10;
// 4: 6 against 20). Each row's sums are the plain butterfly's, operand for operand (own +
// partner at every step, and the butterfly leaves the same bits on every lane): the same
// bits. Why: shuffles go through the pipe a tile's shared-memory reads wait on (MIO); at two
// rows a warp with x held, a 4096-value Q4_0 row pair is 48 LDS and 10 shuffles.
#ifndef MMVQ_ROWS_REDUCE
#define MMVQ_ROWS_REDUCE 0
#endif
template <int NT, int R>
__device__ __forceinline__ void write_rows(float (&acc)[R][NT], float (*part)[NT],
                                           float* __restrict__ out, int row0, int n,
                                           const float* __restrict__ bias) {
    if constexpr (MMVQ_ROWS_REDUCE && NT == 1 && (R == 2 || R == 4)) {
        if (blockDim.y == 1) {  // (warp-uniform: one warp a row; else the rows' warps meet)
            const int lane = threadIdx.x;
            const bool b4 = lane & 16, b3 = lane & 8;
            // step 16: rows 2k + b4 kept
            float v[R / 2];
#pragma unroll
            for (int k = 0; k < R / 2; ++k) {
                const float keep = b4 ? acc[2 * k + 1][0] : acc[2 * k][0];
                const float send = b4 ? acc[2 * k][0] : acc[2 * k + 1][0];
                v[k] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, 16);
            }
            float s = v[0];
            if constexpr (R == 4)  // step 8: row 2 b3 + b4 kept
                s = (b3 ? v[1] : v[0]) + __shfl_xor_sync(0xFFFFFFFFu, b3 ? v[0] : v[1], 8);
#pragma unroll
            for (int o = R == 4 ? 4 : 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
            const int r = R == 4 ? 2 * b3 + b4 : (int)b4;  // the row this lane holds
            if ((lane & (R == 4 ? 7 : 15)) == 0 && row0 + r < n)
                out[row0 + r] = with_bias(s, bias, row0 + r);
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) write_row<NT>(acc[i], part, out, row0 + i, n, bias);
}

// Grid contract (matvec.py's geometry): block = (32, WPR, rows per block), grid.x = ceil(n /
// rows per block); row blockIdx.x * blockDim.z + threadIdx.z, its WPR warps threadIdx.y.
// fast: raw % 16 == 0 (Fast<T>'s alignment), checked by the launcher. ts/qk: the sizes of T's
// block (the quant table's, or 8 values for F32/F16/BF16), checked against T.
template <class T, int NT>
__device__ __forceinline__ void matvec(const u8* __restrict__ raw, const float* __restrict__ x,
                                       float* __restrict__ out, int n, int k, int ts, int qk,
                                       int fast, const float* __restrict__ bias) {
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
    write_row<NT>(acc, part, out, row, n, bias);
}

#define MATVEC_KERNEL(suffix, T, NT)                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        matvec_##suffix##_n##NT(const u8* __restrict__ raw, const float* __restrict__ x,       \
                                float* __restrict__ out, int n, int k, int ts, int qk,         \
                                int fast, const float* __restrict__ bias,                      \
                                unsigned long long* stamp) {                                   \
        const LaunchStamp launch_stamp(stamp);                                                \
        matvec<T, NT>(raw, x, out, n, k, ts, qk, fast, bias);                                  \
    }

// One kernel per token count 1..8 (MAX_NT in matvec.py), for matvec and mmvq alike.
#define FOR_EACH_NT(KERNEL, suffix, T)                                                         \
    KERNEL(suffix, T, 1)                                                                       \
    KERNEL(suffix, T, 2)                                                                       \
    KERNEL(suffix, T, 3)                                                                       \
    KERNEL(suffix, T, 4)                                                                       \
    KERNEL(suffix, T, 5)                                                                       \
    KERNEL(suffix, T, 6)                                                                       \
    KERNEL(suffix, T, 7)                                                                       \
    KERNEL(suffix, T, 8)
#define MATVEC_KERNELS(suffix, T) FOR_EACH_NT(MATVEC_KERNEL, suffix, T)

// ---- mmvq: quantized weights x 8-bit activations -------------------------------------------
// Activations: each run of 32 values of a token's x is quantized as d = amax / 127 and
// q = rint(x * (127 / amax)) in [-127, 127] (IEEE divisions; q = 0 when amax = 0), with the sums of q over each
// half (16 values); a run holding a NaN or an Inf gets d = NaN, so every output it feeds is NaN
// (a float product would give Inf or NaN there too). Each thread block quantizes the whole x
// into shared memory first (NT k (1 + 4/32 + 4/16) bytes: 19.7 KB for one token of k = 14336),
// then loops over rows (grid-stride: the grid is about one wave, so x is quantized once per
// block, not per row).
// Weights: a row's work items (Codes<T>: 32 or 64 values) are dealt to its lanes
// round-robin, MV_UNROLL items loaded before their dot products. Per scale group g (SG = 16 or
// 32 values) with first value v: s = dp4a(codes, q8) over SG / 4 words + OFF * qsum(v); the
// group adds
//     (a[g] * dx(v)) * s  +  (b[g] * dx(v)) * qsum(v)        (MIN types only: the b term)
// each product rounded to f32 (no contraction), exactly as matvec.py's ref_mmvq computes every
// group's term; only the order in which the terms are summed differs. The K-quants, whose
// scales are small integers, take group_dots_int instead: the same sum, d and dmin applied once
// an item, rounded otherwise (within the tests' bound, a few ulps of an item's sum |term|).

// A lane's item groups read x at fixed offsets from one run (Codes<T>::RUN_STEP runs apart), so
// the compiler computes one address a lane and item, not one a group.
template <class C>
__device__ __forceinline__ constexpr int run_step() {
    if constexpr (C::NG * 16 / C::SG > 1) {
        static_assert(C::RUN_STEP > 0, "several scale groups an item: the type declares RUN_STEP");
        return C::RUN_STEP;
    } else {
        return 0;
    }
}

// A scale group's slice of a run: its PER x 16 int8 values (half: which 16 when PER is 1),
// their q8 sum and the run's scale dx.
template <int PER>
struct RunSlice {
    int4 q[PER];
    int qs;
    int qp;  // both halves' q8 sums as 16-bit halves (HALVES types: DP2A against byte scales)
    float dx;
};
template <int PER>
__device__ __forceinline__ RunSlice<PER> run_slice(const int* run, int half) {
    RunSlice<PER> x;
#pragma unroll
    for (int h = 0; h < PER; ++h) x.q[h] = *reinterpret_cast<const int4*>(run + 4 * (half + h));
    const int4 meta = *reinterpret_cast<const int4*>(run + 8);  // d, qsum0, qsum1, both
    x.qs = PER == 2 ? meta.y + meta.z : (half ? meta.z : meta.y);
    x.qp = meta.w;
    x.dx = __int_as_float(meta.x);
    return x;
}

// The x one item position reads (a lane's item of each of its R rows: the same values): slice
// m of its scale groups' runs (HALVES types read a run's two halves at once: PER 2 for their
// 16-value groups), as group_dots and group_dots_int take it, read where they use it (XRuns:
// from the runs in memory) or held (ItemX: registers, MMVQ_ST_XREG).
template <class C>
__host__ __device__ constexpr int x_per() {
    return Halves<C>::value ? 2 : C::SG / 16;
}
template <class C>
struct XRuns {
    const int* xb;  // the item's block's first run (x_block)
    int v0;  // the item's it.v[0]: a multiple of 16 that load sets from the item alone
    // slice m: v0 split into the run and half so the compiler sees that v0 is the same for all
    // of a lane's items (computed here, where the slice is read: a run0 and half computed once
    // in the constructor re-associated the addressing of Q2_K's and Q3_K's multi-token
    // kernels). A block's runs lie in one group of 8 (run_at's gap), so an item's are whole
    // runs apart.
    __device__ __forceinline__ RunSlice<x_per<C>()> operator()(int m) const {
        const int* run0 = xb + (v0 >> 5) * RUN_INTS;
        const int half = x_per<C>() == 2 ? 0 : (v0 >> 4) & 1;
        return run_slice<x_per<C>()>(run0 + m * run_step<C>() * RUN_INTS, half);
    }
};
template <class C, int NG>
struct ItemX {
    RunSlice<x_per<C>()> s[NG / x_per<C>()];
    __device__ __forceinline__ void load(const XRuns<C>& runs) {
#pragma unroll
        for (int m = 0; m < NG / x_per<C>(); ++m) s[m] = runs(m);
    }
    __device__ __forceinline__ const RunSlice<x_per<C>()>& operator()(int m) const { return s[m]; }
};

// One item position of R rows (a lane's item u of each of its warp's R rows: the same values
// of x): each group's activations are read from shared memory once for the R rows, whose
// items' terms add into sums[r] in the order the one-row loop adds them (each row's result is
// the same bits whatever R is).
template <class C, int NG, int R, class X>
__device__ __forceinline__ void group_dots(const CodeItem<NG> (&it)[R], const X& xi,
                                           float (&sums)[R]) {
    constexpr int PER = C::SG / 16;  // 16-value groups that share a scale: 1 or 2
    static_assert(!SplitCodes<C>::value || (PER == 2 && C::OFF == 0 && !C::MIN),
                  "split codes: 32-value groups");
#pragma unroll
    for (int m = 0; m < NG / PER; ++m) {
        const int g = PER * m;  // with PER 2, group g + 1 is the run's second half
        const RunSlice<PER> x = xi(m);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int s = 0;
            if constexpr (SplitCodes<C>::value) {
                // load_split's two addends, against the run stored in their (nibble) order
                // by quantize_x<NIBBLES>
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    s = dot16(it[r].w + 4 * h, x.q[h], s);
                    s = dot16(it[r].w2 + 4 * h, x.q[h], s);
                }
            } else {
#pragma unroll
                for (int h = 0; h < PER; ++h) s = dot16(it[r].w + 4 * (g + h), x.q[h], s);
            }
            if (C::OFF != 0) s += C::OFF * x.qs;
            float term = __fmul_rn(__fmul_rn(it[r].a[g], x.dx), (float)s);
            if (C::MIN)
                term = __fadd_rn(term, __fmul_rn(__fmul_rn(it[r].b[g], x.dx), (float)x.qs));
            sums[r] = m == 0 ? term : __fadd_rn(sums[r], term);
        }
    }
}

// The same for a type whose scales and mins are small integers (Codes<T>::INT_SCALES: the
// K-quants; load_int's items): a scale group's isc s and imn qsum are integers (|.| < 2^23,
// Q6_K's 16 x 32 x 127 x 128 the largest: exact in f32), so per item
//     sd = sum_g dx(g) (isc s),   sm = sum_g dx(g) (imn qsum)   (one FFMA a scale group each)
// and the item adds d sd - dmin sm: d and dmin once an item, not products a group. The terms
// are rounded otherwise than ref_mmvq's (a few ulps of the item's sum |term|), within the
// bound the tests hold every mmvq to.
template <class C, int NG, int R, class X>
__device__ __forceinline__ void group_dots_int(const CodeItem<NG> (&it)[R], const X& xi,
                                               float (&sums)[R]) {
    constexpr int PER = C::SG / 16;  // as group_dots: a scale's 16-value groups
    float sd[R], sm[R];
    if constexpr (Halves<C>::value) {
        // groups 2 m, 2 m + 1: run m's two halves, scaled each and added as one integer
        // (C::pair_dot), so a run, not a group, costs the conversion and the FFMA
        static_assert(PER == 1, "halves of a run with their own scales: SG 16");
#pragma unroll
        for (int m = 0; m < NG / 2; ++m) {
            const RunSlice<2> x = xi(m);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float fs = (float)C::pair_dot(it[r], x.q[0], x.q[1], x.qp, m);
                sd[r] = m == 0 ? __fmul_rn(x.dx, fs) : __fmaf_rn(x.dx, fs, sd[r]);
                if constexpr (C::MIN) {
                    const float fm = (float)C::pair_min(it[r], x.qp, m);
                    sm[r] = m == 0 ? __fmul_rn(x.dx, fm) : __fmaf_rn(x.dx, fm, sm[r]);
                }
            }
        }
    } else {
#pragma unroll
        for (int m = 0; m < NG / PER; ++m) {
            const int g = PER * m;
            const RunSlice<PER> x = xi(m);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                int s = C::dot(it[r], x.q[0], g);
                if (PER == 2) s += C::dot(it[r], x.q[1], g + 1);
                if (C::OFF != 0) s += C::OFF * x.qs;
                const float fs = (float)(it[r].isc[g] * s);
                sd[r] = m == 0 ? __fmul_rn(x.dx, fs) : __fmaf_rn(x.dx, fs, sd[r]);
                if (C::MIN) {
                    const float fm = (float)(it[r].imn[g] * x.qs);
                    sm[r] = m == 0 ? __fmul_rn(x.dx, fm) : __fmaf_rn(x.dx, fm, sm[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
        sums[r] = C::MIN ? __fmaf_rn(it[r].d, sd[r], -__fmul_rn(it[r].dmin, sm[r]))
                         : __fmul_rn(it[r].d, sd[r]);
}

// q8_runs.cuh's quantize_x with 8 lanes a run (each lane 4 values, one word of the run; amax,
// the finite flag and the sums across the 8 by shuffles), a group's U runs of a pass loaded
// together: a run's chain is an eighth of quantize_x's one-thread run, and every thread of the
// block loads at once. The same bits as quantize_x (max and integer sums are exact in any order).
// first and stride: multiples of 8 (a run's lanes are 8 consecutive lanes of one warp), and
// every thread of the block calls it (the shuffles; an idle group computes on zeros, unstored).
template <bool NIBBLES = false>
__device__ __forceinline__ void quantize_x_lanes(const float* __restrict__ x, int nt, int k,
                                                 int* xr, int first, int stride) {
    constexpr int U = 4;  // runs a group loads before it computes them
    const int runs = k >> 5, total = nt * runs, j = first & 7, groups = stride >> 3;
    for (int base = first >> 3; base - (first >> 3) < total; base += U * groups) {
        float v[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * groups;
            const int t = p / runs, r = p - t * runs;
            const float* src = x + (i64)t * k + 32 * r;
            if (p >= total) {
                v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0.0f;
            } else if (NIBBLES) {  // values 2 j, 2 j + 1 and 2 j + 16, 2 j + 17: word j's
                const float2 a = __ldg(reinterpret_cast<const float2*>(src + 2 * j));
                const float2 b = __ldg(reinterpret_cast<const float2*>(src + 2 * j + 16));
                v[u][0] = a.x, v[u][1] = b.x, v[u][2] = a.y, v[u][3] = b.y;  // (word order)
            } else {  // values 4 j .. 4 j + 3
                const float4 a = __ldg(reinterpret_cast<const float4*>(src + 4 * j));
                v[u][0] = a.x, v[u][1] = a.y, v[u][2] = a.z, v[u][3] = a.w;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * groups;
            float amax = 0.0f;
            int finite = 1;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float a = fabsf(v[u][i]);
                finite &= a <= 3.402823466e38f;  // 0 for NaN and Inf
                amax = fmaxf(amax, a);
            }
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) {
                amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
                finite &= __shfl_xor_sync(0xFFFFFFFFu, finite, o);
            }
            const RunScale sc = run_scale(amax, finite);
            int q[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) q[i] = q8_of(v[u][i], sc);
            const int w = q8_word(q[0], q[1], q[2], q[3]);
            // the half sums (values 0-15, 16-31): lanes 0-3 and 4-7, or with NIBBLES each
            // lane's bytes 0, 2 and 1, 3
            int s0 = NIBBLES ? q[0] + q[2] : (j < 4 ? q[0] + q[1] + q[2] + q[3] : 0);
            int s1 = NIBBLES ? q[1] + q[3] : (j < 4 ? 0 : q[0] + q[1] + q[2] + q[3]);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) {
                s0 += __shfl_xor_sync(0xFFFFFFFFu, s0, o);
                s1 += __shfl_xor_sync(0xFFFFFFFFu, s1, o);
            }
            if (p < total) {
                const int t = p / runs, r = p - t * runs;
                int* run = xr + (i64)t * run_row_ints(runs) + run_at(r);
                run[j] = w;
                if (j == 0) run_meta(run, sc.d, s0, s1);
            }
        }
    }
}

// x quantized in the order type T's mmvq reads it (quantize_x; the split-code types': nibble
// order), as every kernel of a type's module quantizes it (and the host tests).
// MMVQ_X_LANES 1: 8 lanes a run (quantize_x_lanes), not one thread (mmvq_st_timeline.py on the
// H200: with a run a thread, x is ready 4.2 µs after a block's entry; with two, 7 µs).
#ifndef MMVQ_X_LANES
#define MMVQ_X_LANES 0
#endif
template <class T>
__device__ __forceinline__ void quantize_x_for(const float* __restrict__ x, int nt, int k,
                                               int* xr, int first, int stride) {
    if (MMVQ_X_LANES)
        quantize_x_lanes<SplitCodes<Codes<T>>::value>(x, nt, k, xr, first, stride);
    else
        quantize_x<SplitCodes<Codes<T>>::value>(x, nt, k, xr, first, stride);
}

// Block b's first run in a token's row of x. A lane's blocks are b0 + j bstep, and a grid
// stride of blocks (bstep QK / 32 = blockDim.y QK / ITEMS runs) is whole groups of 8 runs, so
// block b0 + j bstep's first run is x_block(b0) + j x_block(bstep): a lane's x offsets are
// sums, not run_at's shift and multiply an item.
template <class T>
__device__ __forceinline__ constexpr int x_block(int b) {
    static_assert(T::QK / Codes<T>::ITEMS % 8 == 0, "a grid stride of blocks: groups of 8 runs");
    return run_at(b * (T::QK / 32));
}

// MMVQ_PAIRED_BLOCKS 1 (compile-time knob, off): the types that declare Codes<T>::PAIR_G
// (Q4_0, IQ4_NL, Q5_0, Q8_0, Q3_K, Q6_K, Q2_K) deal a warp's blocks to its lanes in groups.
// Why: in the plain order (lane b0's item j: block b0 + j bstep) a warp's load of an item
// reads words a block apart; for Q4_0's 18-byte blocks, 4.5 words, which puts two of the 32
// words in one shared-memory bank (2 wavefronts a load, mmvq_st's), where every other block
// alone (9 words apart: odd) puts each in its own. So within each whole window of 2 bstep
// blocks (two items of the warp's), items 2m and 2m + 1 of lane b0 take block b0 % G + 2 G
// (b0 / G) and the one G on: item 2m the window's even groups of G blocks, 2m + 1 its odd
// ones, or (PAIR_FLIP) the other way round for odd sub-items. scripts/mmvq_banks.py counts
// the wavefronts an item: Q4_0 11 -> 5.5, Q8_0 20 -> 10, Q6_K 23 -> 12, Q3_K 42 -> 29.5, Q2_K
// 21 -> 11. A row's last, partial window keeps the plain order. mmvq and mmvq_st both walk
// this order (the same terms in the same order: the same bits). Off until a GPU times it
// (gpu_check_s6.sh paired).
#ifndef MMVQ_PAIRED_BLOCKS
#define MMVQ_PAIRED_BLOCKS 0
#endif
// A lane's blocks: its item j is block b = b0 + j bstep in the plain order (the callers' b).
template <class T>
struct LaneBlocks {
    static constexpr int G = MMVQ_PAIRED_BLOCKS ? PairGroup<Codes<T>>::value : 0;
    static constexpr bool PAIRED = G > 0;
    // (bstep, lanes / ITEMS, is a multiple of 32 / ITEMS: whole groups a window's half)
    static constexpr int G1 = G > 0 ? G : 1;  // (no % 0 in the plain order's code)
    static_assert((32 / Codes<T>::ITEMS) % G1 == 0, "groups of blocks: whole halves");
    // PAIR_FLIP: a sub-item's low bit swaps which item takes the even groups
    static constexpr int FLIP = PairFlip<Codes<T>>::value ? 1 : 0;
    int b0, bstep, nb, sub;
    // the block item j (b < nb) reads
    __device__ __forceinline__ int at(int b, int j) const {
        if constexpr (!PAIRED) {
            return b;
        } else {
            const int base = 2 * bstep * (j >> 1), odd = (j ^ (FLIP & sub)) & 1;
            return base + 2 * bstep <= nb ? base + b0 % G1 + 2 * G1 * (b0 / G1) + G1 * odd : b;
        }
    }
    // ... and past the row's end, its last block (mmvq_st's held items: read, unused)
    __device__ __forceinline__ int at_or_last(int b, int j) const {
        if constexpr (!PAIRED)
            return min(b, nb - 1);
        else
            return b < nb ? at(b, j) : nb - 1;
    }
    // its first run of x (x_block), where the plain order's is xo
    __device__ __forceinline__ int x_at(int xo, int b, int j) const {
        if constexpr (!PAIRED)
            return xo;
        else
            return x_block<T>(at(b, j));
    }
};

// mmvq's item load and dot products: the integer-scale pair where the type has it.
template <class C, int NG>
__device__ __forceinline__ void mmvq_load(const u8* b, int sub, CodeItem<NG>& it) {
    if constexpr (IntScales<C>::value)
        C::load_int(b, sub, it);
    else if constexpr (SplitCodes<C>::value)
        C::load_split(b, sub, it);
    else
        C::load(b, sub, it);
}
// (xi: XRuns, the item's runs in memory, or ItemX, them held)
template <class C, int NG, int R, class X>
__device__ __forceinline__ void mmvq_dots_x(const CodeItem<NG> (&it)[R], const X& xi,
                                            float (&sums)[R]) {
    if constexpr (IntScales<C>::value)
        group_dots_int<C, NG, R>(it, xi, sums);
    else
        group_dots<C, NG, R>(it, xi, sums);
}
// ... with the item's x read from its runs at xb (x_block: shared memory, or global for mmvq_qx)
template <class C, int NG, int R>
__device__ __forceinline__ void mmvq_dots(const CodeItem<NG> (&it)[R], const int* xb,
                                          float (&sums)[R]) {
    mmvq_dots_x<C, NG, R>(it, XRuns<C>{xb, it[0].v[0]}, sums);
}

// Grid contract (matvec.py's mmvq_geometry): block = (32, WPR, rows per block), grid.x <= ceil(n
// / rows per block) (rows grid-strided), dynamic shared memory = mmvq_shared_bytes(NT, k).
// MMVQ_PREFETCH: a row's weight bytes are asked into L2 with one bulk prefetch (sm_90's
// cp.async.bulk.prefetch.L2) when a warp starts the row before it, so a lane's loads of the
// row find them in L2 instead of each waiting its own DRAM round trip (no registers held).
#ifndef MMVQ_PREFETCH
#define MMVQ_PREFETCH 1
#endif
__device__ __forceinline__ void prefetch_row_l2(const u8* raw, i64 row_bytes, int row, int n) {
#if MMVQ_PREFETCH && __CUDA_ARCH__ >= 900
    if (row >= n || threadIdx.x != 0 || threadIdx.y != 0) return;
    // 16-byte aligned start and size, inside [raw, raw + n row_bytes) (raw is 16-aligned)
    const i64 a = ((i64)row * row_bytes) & ~(i64)15;
    const i64 b = min((i64)(row + 1) * row_bytes + 15, (i64)n * row_bytes) & ~(i64)15;
    if (b > a)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(raw + a), "r"((u32)(b - a))
                     : "memory");
#endif
}

// MMVQ_RPW: rows per warp. A warp's R rows (consecutive) are walked together, item by item:
// each activation group read from shared memory serves R rows (the x reads cost as many
// shared-memory wavefronts as the weight bytes they are used with, and more than those bytes
// at R = 1), and R rows' loads are in flight at once.
#ifndef MMVQ_RPW
#define MMVQ_RPW 1
#endif

// QX: x arrives quantized (quantize_q8's xq / xd / xs in global memory, read through L1), so
// the block has no prologue and the grid is not capped; else the block quantizes x itself.
template <class T, int NT, bool QX>
__device__ __forceinline__ void mmvq(const u8* __restrict__ raw, const float* __restrict__ x,
                                     const int* gxr,
                                     float* __restrict__ out, int n, int k, int ts, int qk,
                                     const float* __restrict__ bias) {
    using C = Codes<T>;
    constexpr int NG = C::NG, R = MMVQ_RPW;
    __shared__ float part[MV_MAX_WARPS][NT];
    extern __shared__ int4 mmvq_smem[];
    if (ts != T::TS || qk != T::QK || blockDim.x != 32 || blockDim.y * blockDim.z > MV_MAX_WARPS)
        __trap();
    int* sxr = reinterpret_cast<int*>(mmvq_smem);
    const int* xr = QX ? gxr : sxr;
    const int lane = threadIdx.x, lanes = 32 * blockDim.y;
    const int nb = k / T::QK;
    // A lane's items are C::ITEMS-th parts of every (lanes / ITEMS)-th block: lanes is a
    // multiple of ITEMS, so the part (sub) is the same for all of them and everything that
    // depends on it alone (shifts, scale indices, x offsets) is computed once, not per item.
    const int first = threadIdx.y * 32 + lane;
    const int sub = first % C::ITEMS, b0 = first / C::ITEMS, bstep = lanes / C::ITEMS;
    const int xb0 = x_block<T>(b0), xstep = x_block<T>(bstep);
    const LaneBlocks<T> blocks{b0, bstep, nb, sub};
    const i64 row_bytes = (i64)nb * T::TS;
    const int rows_per_step = gridDim.x * blockDim.z * R;  // rows a grid stride covers
    // the first rows' first items are loaded before x is quantized: their latency hides the
    // prologue's
    CodeItem<NG> it[MV_UNROLL][R];
    int row0 = (blockIdx.x * blockDim.z + threadIdx.z) * R;  // this warp's first row
#pragma unroll
    for (int r = 0; r < R; ++r) prefetch_row_l2(raw, row_bytes, row0 + r, n);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (row0 + r >= n) break;
        const u8* w = raw + (i64)(row0 + r) * row_bytes;
#pragma unroll
        for (int u = 0; u < MV_UNROLL; ++u) {
            const int b = b0 + bstep * u;
            if (b < nb) mmvq_load<C>(w + blocks.at(b, u) * T::TS, sub, it[u][r]);
        }
    }
    if (!QX) {
        const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        quantize_x_for<T>(x, NT, k, sxr, tid, blockDim.x * blockDim.y * blockDim.z);
        __syncthreads();
    }
    bool loaded = true;
    for (int base = blockIdx.x * blockDim.z * R; base < n; base += rows_per_step) {
        row0 = base + threadIdx.z * R;
#pragma unroll
        for (int r = 0; r < R; ++r)  // this warp's next rows
            prefetch_row_l2(raw, row_bytes, row0 + r + rows_per_step, n);
        const int live = min(R, n - row0);  // rows of this warp inside the matrix (warp-uniform)
        float acc[R][NT];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
        if (live > 0) {
            const u8* w = raw + (i64)row0 * row_bytes;
            int xo = xb0;  // block bi's first run
            int j = 0;  // bi's item (bi = b0 + j bstep)
            for (int bi = b0; bi < nb;
                 bi += bstep * MV_UNROLL, xo += xstep * MV_UNROLL, j += MV_UNROLL) {
                if (!loaded) {
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        if (r >= live) break;
#pragma unroll
                        for (int u = 0; u < MV_UNROLL; ++u) {
                            const int b = bi + bstep * u;
                            if (b < nb)
                                mmvq_load<C>(w + r * row_bytes + blocks.at(b, j + u) * T::TS, sub,
                                             it[u][r]);
                        }
                    }
                }
                loaded = false;
#pragma unroll
                for (int u = 0; u < MV_UNROLL; ++u) {
                    const int b = bi + bstep * u;
                    if (b >= nb) break;
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        // rows past the matrix (r >= live) compute on stale items, never written
                        float sums[R];
                        const int* xb = xr + t * run_row_ints(k >> 5) +
                                        blocks.x_at(xo + u * xstep, b, j + u);
                        mmvq_dots<C, NG, R>(it[u], xb, sums);
#pragma unroll
                        for (int r = 0; r < R; ++r) acc[r][t] += sums[r];
                    }
                }
            }
        }
        loaded = false;
        write_rows<NT, R>(acc, part, out, row0, n, bias);
    }
}

// MMVQ_MIN_BLOCKS: resident 256-thread blocks an SM must fit (registers <= 64K / (256 x it)):
// mmvq needs many loads in flight, so its register count is capped (matvec.py passes it).
#ifndef MMVQ_MIN_BLOCKS
#define MMVQ_MIN_BLOCKS 1
#endif
// x [NT, k] f32 -> its runs xr [NT][run_row_ints] in global memory for mmvq_qx_* and
// mmvq_st_qx_*, in T's order (quantize_x_for), one thread per run of 32 values (grid:
// matvec.py's grid_1d); a module holds one type's mmvq or mmvq_st (matvec.py), so one of these
#define QUANTIZE_Q8_KERNEL(T, NT)                                                              \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        quantize_q8_n##NT(const float* __restrict__ x, int k, int* xr,                         \
                          unsigned long long* stamp) {                                         \
        const LaunchStamp launch_stamp(stamp);                                                \
        quantize_x_for<T>(x, NT, k, xr, blockIdx.x * blockDim.x + threadIdx.x,                 \
                          gridDim.x * blockDim.x);                                             \
    }
#define MMVQ_KERNEL(suffix, T, NT)                                                             \
    extern "C" __global__ void __launch_bounds__(256, MMVQ_MIN_BLOCKS)                         \
        mmvq_##suffix##_n##NT(const u8* __restrict__ raw, const float* __restrict__ x,         \
                              float* __restrict__ out, int n, int k, int ts, int qk,           \
                              const float* __restrict__ bias, unsigned long long* stamp) {     \
        const LaunchStamp launch_stamp(stamp);                                                \
        mmvq<T, NT, false>(raw, x, nullptr, out, n, k, ts, qk, bias);                          \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(256, MMVQ_MIN_BLOCKS)                         \
        mmvq_qx_##suffix##_n##NT(const u8* __restrict__ raw, const int* xr,                    \
                                 float* __restrict__ out, int n, int k, int ts, int qk,        \
                                 const float* __restrict__ bias, unsigned long long* stamp) {  \
        const LaunchStamp launch_stamp(stamp);                                                \
        mmvq<T, NT, true>(raw, nullptr, xr, out, n, k, ts, qk, bias);                          \
    }                                                                                          \
    QUANTIZE_Q8_KERNEL(T, NT)

#define MMVQ_KERNELS(suffix, T) FOR_EACH_NT(MMVQ_KERNEL, suffix, T)

// ---- mmvq_st: the weight staged into shared memory by the bulk-copy engine -----------------
// Why: mmvq above waits on its global loads (session 10's ncu, Q8_0: long scoreboard 61% of
// the stalls, DRAM 51% busy): a lane's narrow loads of its 34-byte blocks keep too few bytes in
// flight, and more items a lane or more warps did not help (sessions 8-10). Here the copy
// engine (sm_90's cp.async.bulk) brings a block's rows in tiles of tile_rows consecutive rows,
// STAGES tiles in flight a block, each tile one contiguous 16-byte-aligned span that completes
// its stage's mbarrier; the warps compute a tile from shared memory, with mmvq's own per-row
// code (the same items per lane, the same order of terms: the same bits as mmvq at the same
// warps per row), while the next tiles arrive. No registers wait on memory.
// Grid contract (matvec.py's staged_geometry): block = (32, WPR, RB), WPR RB <= 8; tiles of
// tile_rows (a multiple of RB) rows grid-strided (tile j: block j mod gridDim.x), warp z of a
// tile's rows taking rows z, z + RB, ...; dynamic shared memory = x's runs
// (mmvq_shared_bytes) + stages x stage_bytes, stage_bytes = mmvq_stage_bytes(tile_rows
// row_bytes): a tile's span from its first byte rounded down to 16 to its end rounded up, which
// is its bytes + up to 30. The tensor's last (< 16) bytes, past the last 16-byte boundary
// inside it, are copied by thread 0 with plain loads: no read past the weight.
#ifndef MMVQ_MAX_STAGES
#define MMVQ_MAX_STAGES 8
#endif
#ifndef MMVQ_ST_UNROLL
#define MMVQ_ST_UNROLL 1  // items a lane loads (from shared memory) before their dot products
#endif
// MMVQ_ST_RPW: rows of its tile a warp walks together (consecutive: warp z's R rows z R ..
// z R + R - 1, then rb R further), as mmvq's MMVQ_RPW: each run of x read from shared memory
// serves R rows, and R rows' items, dot products and reductions are independent work in
// flight. Why: a tile's compute is what holds mmvq_st (bulk_floor.py: 47 ns a KB puts the
// staged floor at 73-79% of copy, 20 ns would reach 85%), and at one row a warp x's reads are
// as many shared-memory loads as the weight's (BENCHMARKS.md, 2026-12-07 from 20:39 UTC).
// Grid contract: tile_rows a multiple of rb R (matvec.py's staged_geometry), so every warp
// walks a tile's rows the same number of times.
#ifndef MMVQ_ST_RPW
#define MMVQ_ST_RPW 1
#endif
// MMVQ_ST_XREG V (0: off): with one token, a lane holds the x of its first items, V values of
// it (V / (16 NG) items: 128 holds all of a 4096-value row's at one warp a row), in registers
// (ItemX), read from x's runs once a block: a lane's items sit at the same places in every row
// it walks, so those items read only their weight from shared memory. Why: at one row a warp,
// x's reads are half of an item's shared-memory wavefronts (Q4_0: 3 LDS.128 of x, 12, against
// the weight's 5 LDS.32 and an LDS.U16 at 2-way conflicts, 12), and the tile's compute is what
// holds mmvq_st (ncu, Q8_0: short scoreboard the first stall, MIO throttle among them).
// Each type's declaration sets it (quants.MmvqConfig.staged_x_held, through matvec.py's
// module_source): 128 where the GPU timed it faster, 0 (the kernels as before) elsewhere.
#ifndef MMVQ_ST_XREG
#define MMVQ_ST_XREG 0
#endif

__device__ __forceinline__ u32 smem_u32(const void* p) {
#if __CUDA_ARCH__ >= 900
    return (u32)__cvta_generic_to_shared(p);
#else
    return 0;
#endif
}

// One stage: an mbarrier the copy completes (arrival count 1: thread 0's expect_tx). The
// host build (and any device before sm_90) copies with the block's threads instead and
// meets at a barrier, so the kernel's logic runs the same everywhere.
struct StageBarrier {
    unsigned long long word;
};
__device__ __forceinline__ void stage_init(StageBarrier* b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(b)) : "memory");
#endif
}
__device__ __forceinline__ void stage_wait(StageBarrier* b, u32 parity) {
#if __CUDA_ARCH__ >= 900
    u32 done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_u32(b)), "r"(parity)
            : "memory");
#endif
}

// One bulk copy of bytes (a multiple of 16, both ends 16-byte aligned) that completes bar.
// The host build's TK_HOST_BULK stands in with the test's tk_host_bulk_copy (a memcpy that
// also checks the span lies inside the weight).
__device__ __forceinline__ void bulk_copy(u8* dst, const u8* src, u32 bytes, StageBarrier* bar) {
#if __CUDA_ARCH__ >= 900
    // (no proxy fence: the stage's earlier reads have returned their values before the
    // __syncthreads that precedes every refill, as CUTLASS's TMA pipelines rely on)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
    if (bytes)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(smem_u32(dst)),
            "l"(src), "r"(bytes), "r"(smem_u32(bar))
            : "memory");
#elif defined(TK_HOST_BULK)
    tk_host_bulk_copy(dst, src, bytes);
    (void)bar;
#endif
}

// The bytes [lo, hi) of the weight into dst (dst <- raw + lo16, lo16 = lo rounded down to 16:
// the tile's first byte lands at dst + lo % 16). Called by every thread of the block (uniform):
// thread 0 issues one bulk copy of [lo16, min(hi rounded up, total rounded down)) and copies
// the rest (< 16 bytes, the tensor's end) itself, which the warps see after the barrier that
// always lies between a fill and its use (stages >= 2); a device without the bulk copy (before
// sm_90) has all threads copy, then meet.
__device__ __forceinline__ void stage_fill(u8* dst, const u8* __restrict__ raw, i64 lo, i64 hi,
                                           i64 total, StageBarrier* bar, int tid, int nthreads) {
    const i64 lo16 = lo & ~(i64)15;
#if __CUDA_ARCH__ >= 900 || defined(TK_HOST_BULK)
    if (tid != 0) return;
    const i64 bulk_end = min((hi + 15) & ~(i64)15, total & ~(i64)15);
    bulk_copy(dst, raw + lo16, bulk_end > lo16 ? (u32)(bulk_end - lo16) : 0u, bar);
    for (i64 i = max(bulk_end, lo16); i < hi; ++i) dst[i - lo16] = raw[i];
    (void)nthreads;
#else
    for (i64 i = lo16 + tid; i < hi; i += nthreads) dst[i - lo16] = raw[i];
    (void)total, (void)bar;
    __syncthreads();
#endif
}

// MMVQ_ST_TIMELINE 1 (scripts/mmvq_st_timeline.py): thread 0 of each block notes when, on the
// global timer, the block entered, had x quantized, saw each tile arrive and had each tile
// computed, and left, so a launch's time splits into its ramp, its steady stream and its tail
// (the fixed cost launch_fixed_cost.py fits). Off: no code.
#ifndef MMVQ_ST_TIMELINE
#define MMVQ_ST_TIMELINE 0
#endif
#if MMVQ_ST_TIMELINE
#define MMVQ_TL_BLOCKS 2048
#define MMVQ_TL_TILES 14   // a block's first tiles noted (the default geometry has at most 7)
#define MMVQ_TL_EVENTS 32  // 0 entry, 1 x ready, 2 + 2u / 3 + 2u tile u arrived / computed, 31 exit
#define MMVQ_TL_EXIT (MMVQ_TL_EVENTS - 1)
__device__ unsigned long long mmvq_st_timeline[MMVQ_TL_BLOCKS][MMVQ_TL_EVENTS];
#define MMVQ_TL_MARK(event)                                                                    \
    do {                                                                                       \
        if (tid == 0 && blockIdx.x < MMVQ_TL_BLOCKS)                                           \
            mmvq_st_timeline[blockIdx.x][event] = globaltimer_ns();                            \
    } while (0)
#else
#define MMVQ_TL_TILES 0
#define MMVQ_TL_MARK(event) \
    do {                    \
    } while (0)
#endif

#ifndef MMVQ_ST_EARLY_FILLS
#define MMVQ_ST_EARLY_FILLS MMVQ_MAX_STAGES  // all of them (as measured through 2026-12-07)
#endif
// MMVQ_ST_X_FIRST 1: where x has at most a run of 32 values a thread, the threads' x loads go out
// before the first copies (mmvq_st_timeline.py: x is ready 4.2 µs after entry otherwise, its
// loads queued behind every block's first tiles)
#ifndef MMVQ_ST_X_FIRST
#define MMVQ_ST_X_FIRST 0
#endif
// MMVQ_ST_FILLS_AT_ARRIVAL 1: the first fills past MMVQ_ST_EARLY_FILLS (at least one goes early)
// go out when the block's first tile has arrived, not once x is quantized: every block's first
// copies are served interleaved, so fewer at once arrive sooner, and the deferred ones keep the
// memory busy while the first tiles are computed (before this, nothing was asked for then)
#ifndef MMVQ_ST_FILLS_AT_ARRIVAL
#define MMVQ_ST_FILLS_AT_ARRIVAL 0
#endif
// mmvq_st's one item a lane of each of its R rows against each token's x (its runs in shared
// memory, a token's row_ints apart, this item's at xo), added to acc: mmvq's terms in mmvq's
// order, each row's the same bits whatever R is (group_dots)
template <class C, int NG, int NT, int R>
__device__ __forceinline__ void add_item_dots(float (&acc)[R][NT], const CodeItem<NG> (&it)[R],
                                              const int* sxr, int row_ints, int xo) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float sums[R];
        mmvq_dots<C, NG, R>(it, sxr + t * row_ints + xo, sums);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] += sums[r];
    }
}

// QX: x comes quantized (quantize_q8_n<NT>'s runs, gxr, in T's order and sxr's layout): one
// bulk copy brings it ahead of the first tiles, completing a barrier of its own, in place of
// every block quantizing all of x itself (a launch's prequantize=True). x is then ready 1.6 µs
// after entry, not 3.7, yet the launch is slower (H100, 2026-12-07: BENCHMARKS.md), so the
// engine keeps the fused prologue (matvec.py's STAGED_PREQUANTIZE)
template <class T, int NT, bool QX = false>
__device__ __forceinline__ void mmvq_st(const u8* __restrict__ raw, const float* __restrict__ x,
                                        float* __restrict__ out, int n, int k, int ts, int qk,
                                        const float* __restrict__ bias, int stages,
                                        int stage_bytes, int tile_rows,
                                        const int* __restrict__ gxr = nullptr) {
    using C = Codes<T>;
    constexpr int NG = C::NG, U = MMVQ_ST_UNROLL, R = MMVQ_ST_RPW;
    __shared__ float part[MV_MAX_WARPS][NT];
    __shared__ StageBarrier full[MMVQ_MAX_STAGES + (QX ? 1 : 0)];  // (QX: x's the last)
    extern __shared__ int4 mmvq_smem[];
    const int rb = blockDim.z;
    const i64 row_bytes = (i64)(k / T::QK) * T::TS, total = (i64)n * row_bytes;
    if (ts != T::TS || qk != T::QK || blockDim.x != 32 || blockDim.y * rb > MV_MAX_WARPS ||
        stages < 2 || stages > MMVQ_MAX_STAGES || stage_bytes % 16 || tile_rows % (rb * R) ||
        tile_rows < rb || stage_bytes < ((tile_rows * row_bytes + 30) & ~(i64)15))
        __trap();
    int* sxr = reinterpret_cast<int*>(mmvq_smem);
    u8* stage0 = reinterpret_cast<u8*>(mmvq_smem) + NT * run_row_ints(k >> 5) * 4;
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int nthreads = blockDim.x * blockDim.y * rb;
    const int tiles = (n + tile_rows - 1) / tile_rows;
    MMVQ_TL_MARK(0);
    StageBarrier* const x_in = &full[QX ? MMVQ_MAX_STAGES : 0];  // (QX only)
    if (tid == 0) {
        for (int s = 0; s < stages; ++s) stage_init(&full[s]);
        if (QX) stage_init(x_in);
    }
    __syncthreads();  // the barriers initialized before any copy completes on them
    // the first tiles' copies: MMVQ_ST_EARLY_FILLS of them go out before x is stored, the rest
    // after it or (MMVQ_ST_FILLS_AT_ARRIVAL) once the first has arrived (every block's first
    // copies at once are served interleaved, so a block's first tile may arrive only as late as
    // its last: issued later, the later ones queue behind)
    const auto fill = [&](int s, int tile) {  // stage s <- the tile's rows, if it exists
        if (tile < tiles)
            stage_fill(stage0 + s * stage_bytes, raw, (i64)tile * tile_rows * row_bytes,
                       min((i64)(tile + 1) * tile_rows * row_bytes, total), total, &full[s], tid,
                       nthreads);
    };
    const auto first_fill = [&](int s) { fill(s, blockIdx.x + s * gridDim.x); };
    const int runs = k >> 5;
    // (at least one goes early where the others wait for the first to arrive)
    const int early = min(stages, MMVQ_ST_FILLS_AT_ARRIVAL ? max(1, MMVQ_ST_EARLY_FILLS)
                                                           : MMVQ_ST_EARLY_FILLS);
    if (QX) {
        const u32 xbytes = (u32)(NT * run_row_ints(runs) * 4);  // a multiple of 16 (RUN_GAP)
#if __CUDA_ARCH__ >= 900 || defined(TK_HOST_BULK)
        if (tid == 0)
            bulk_copy(reinterpret_cast<u8*>(sxr), reinterpret_cast<const u8*>(gxr), xbytes,
                      x_in);
#else
        for (u32 i = tid; i < xbytes / 4; i += nthreads) sxr[i] = gxr[i];
#endif
        for (int s = 0; s < early; ++s) first_fill(s);
    } else if (MMVQ_ST_X_FIRST && NT * runs <= nthreads) {
        // a run of x a thread at most: its loads go out before the copies (behind them, they
        // wait for them), then it is quantized while the tiles arrive
        const int t = tid / runs, r = tid - t * runs;
        float v[32];
        if (t < NT) x_run_load(x, k, t, r, v);
        for (int s = 0; s < early; ++s) first_fill(s);
        if (t < NT) x_run_store<SplitCodes<C>::value>(v, sxr, runs, t, r);
    } else {
        for (int s = 0; s < early; ++s) first_fill(s);
        quantize_x_for<T>(x, NT, k, sxr, tid, nthreads);
    }
    const int deferred = MMVQ_ST_FILLS_AT_ARRIVAL ? early : stages;  // at the first arrival
    for (int s = early; s < deferred; ++s) first_fill(s);
    __syncthreads();
    if (QX) stage_wait(x_in, 0);  // x's runs in
    MMVQ_TL_MARK(1);
    const int lane = threadIdx.x, lanes = 32 * blockDim.y, nb = k / T::QK;
    const int first = threadIdx.y * 32 + lane;  // mmvq's items, in mmvq's order
    const int sub = first % C::ITEMS, b0 = first / C::ITEMS, bstep = lanes / C::ITEMS;
    const int xb0 = x_block<T>(b0), xstep = x_block<T>(bstep);
    const LaneBlocks<T> blocks{b0, bstep, nb, sub};
    // MMVQ_ST_XREG: the items whose x a lane holds (one token, one item at a time)
    constexpr int XS = NT == 1 && U == 1 ? MMVQ_ST_XREG / (16 * NG) : 0;
    ItemX<C, NG> xheld[XS > 0 ? XS : 1];
    int use = 0;  // tiles this block has computed
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++use) {
        const int s = use % stages;
        stage_wait(&full[s], (u32)(use / stages) & 1u);
        if (use < MMVQ_TL_TILES) MMVQ_TL_MARK(2 + 2 * use);
        if (MMVQ_ST_FILLS_AT_ARRIVAL && use == 0)  // (no code in the engine's build)
            for (int d = deferred; d < stages; ++d) first_fill(d);
        const i64 tile_lo = (i64)tile * tile_rows * row_bytes;
        const u8* st = stage0 + s * stage_bytes + (tile_lo & 15);
        if constexpr (XS > 0) {
            if (use == 0) {
                // the lane's items' first value (load sets it.v from the item alone): from any
                // block, this tile's first
                CodeItem<NG> probe;
                mmvq_load<C>(st, sub, probe);
#pragma unroll
                for (int j = 0; j < XS; ++j)  // (past the row's end: its last block's x, unused)
                    xheld[j].load(XRuns<C>{sxr + x_block<T>(blocks.at_or_last(b0 + bstep * j, j)),
                                           probe.v[0]});
            }
        }
        // (the same trip count for all warps: tile_rows is a multiple of rb R)
        for (int r = threadIdx.z * R; r < tile_rows; r += rb * R) {
            const int row = tile * tile_rows + r;  // the first of the warp's R rows
            float acc[R][NT];
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
            if (row < n) {
                const u8* w = st + r * row_bytes;
                // (the held items' loads are the loop's written out again: as one helper or
                // lambda they changed the engine's SASS, knobs off)
                if constexpr (XS > 0) {  // the items whose x the lane holds
#pragma unroll
                    for (int j = 0; j < XS; ++j) {
                        // every held item is computed, a lane's past the row's end on the
                        // row's last block, and only those inside added: no branch between the
                        // items, so their loads can all go out before the first's dot products
                        const int b = b0 + bstep * j, bc = blocks.at_or_last(b, j);
                        CodeItem<NG> it[R];
#pragma unroll
                        for (int i = 0; i < R; ++i)
                            mmvq_load<C>(w + (i == 0 ? 0 : min(i, n - 1 - row)) * row_bytes +
                                             bc * T::TS,
                                         sub, it[i]);
                        float sums[R];
                        mmvq_dots_x<C, NG, R>(it, xheld[j], sums);
#pragma unroll
                        for (int i = 0; i < R; ++i)
                            if (b < nb) acc[i][0] += sums[i];
                    }
                }
                int xo = xb0 + xstep * XS;  // block bi's first run (x_block)
                int j = XS;                 // bi's item (bi = b0 + j bstep)
                for (int bi = b0 + bstep * XS; bi < nb;
                     bi += bstep * U, xo += xstep * U, j += U) {
                    CodeItem<NG> it[U][R];
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int b = bi + bstep * u;
                        // (rows past the matrix, the last tile's, read its last row again,
                        // never written)
                        if (b < nb)
#pragma unroll
                            for (int i = 0; i < R; ++i)
                                mmvq_load<C>(w + (i == 0 ? 0 : min(i, n - 1 - row)) * row_bytes +
                                                 blocks.at(b, j + u) * T::TS,
                                             sub, it[u][i]);
                    }
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int b = bi + bstep * u;
                        if (b >= nb) break;
                        add_item_dots<C, NG, NT, R>(acc, it[u], sxr, run_row_ints(k >> 5),
                                                    blocks.x_at(xo + u * xstep, b, j + u));
                    }
                }
            }
            write_rows<NT, R>(acc, part, out, row, n, bias);
        }
        __syncthreads();  // every warp is done with stage s: it may be refilled
        if (use < MMVQ_TL_TILES) MMVQ_TL_MARK(3 + 2 * use);
        fill(s, tile + stages * gridDim.x);
    }
    MMVQ_TL_MARK(MMVQ_TL_EXIT);
}

#define MMVQ_ST_KERNEL(suffix, T, NT)                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        mmvq_st_##suffix##_n##NT(const u8* __restrict__ raw, const float* __restrict__ x,      \
                                 float* __restrict__ out, int n, int k, int ts, int qk,        \
                                 const float* __restrict__ bias, int stages, int stage_bytes,  \
                                 int tile_rows, unsigned long long* stamp) {                   \
        const LaunchStamp launch_stamp(stamp);                                                \
        mmvq_st<T, NT>(raw, x, out, n, k, ts, qk, bias, stages, stage_bytes, tile_rows);       \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        mmvq_st_qx_##suffix##_n##NT(const u8* __restrict__ raw, const int* __restrict__ xr,    \
                                    float* __restrict__ out, int n, int k, int ts, int qk,     \
                                    const float* __restrict__ bias, int stages,                \
                                    int stage_bytes, int tile_rows,                            \
                                    unsigned long long* stamp) {                               \
        const LaunchStamp launch_stamp(stamp);                                                \
        mmvq_st<T, NT, true>(raw, nullptr, out, n, k, ts, qk, bias, stages, stage_bytes,       \
                             tile_rows, xr);                                                   \
    }                                                                                          \
    QUANTIZE_Q8_KERNEL(T, NT)
#define MMVQ_ST_KERNELS(suffix, T) FOR_EACH_NT(MMVQ_ST_KERNEL, suffix, T)

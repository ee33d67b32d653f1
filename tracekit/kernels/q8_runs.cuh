// 8-bit activations: x quantized per run of 32 values, as mmvq (matvec.cu) and mmq (mmq.cu) read
// it; matvec.py's quantize_q8 is the NumPy twin, bit for bit.
#pragma once

#include "quant_decoders.cuh"  // u8, i64

// A quantized run of 32 activations, as mmvq reads it: RUN_INTS ints (48 bytes) — the 32 int8
// values (8 words), d (f32 bits), the sums of q over each half, and the same two sums packed as
// 16-bit halves of one int — so a group's values, scale and sums come from one address (two or
// three 16-byte loads).
#ifndef RUN_INTS  // matvec.py / mmq.py pass RUN_BYTES / 4
#error "compile with -DRUN_INTS (tracekit/kernels/matvec.py's RUN_BYTES / 4)"
#endif

// A token's runs lie in groups of 8 (256 values) with RUN_GAP ints after each group: without the
// gap a group is 96 ints, a multiple of the 32 banks, so the lanes of a K-quant's quarter-warp,
// reading the same run of consecutive blocks, read one bank at different addresses (Q2_K's
// half-block items: a 4-way conflict on every 16-byte read of x); with it, consecutive groups
// start 4 banks apart. (matvec.py's run_row_ints is the host's twin.)
#define RUN_GAP 4
__device__ __forceinline__ constexpr int run_row_ints(int runs) {  // one token's runs
    return runs * RUN_INTS + ((runs + 7) >> 3) * RUN_GAP;
}
__device__ __forceinline__ constexpr int run_at(int r) {  // run r's first int in its row
    return r * RUN_INTS + (r >> 3) * RUN_GAP;
}

// x [nt, k] -> runs xr [nt][run_row_ints(k / 32)] (shared memory, or global for mmvq_qx and
// mmq), run r of token t at t run_row_ints + run_at(r).
// q = rint(x * (127 / amax)): the reciprocal once per run, and rint as one FADD of 1.5 * 2^23
// (its low mantissa bits are then the rounded-to-nearest-even integer: |x id| <= 127 < 2^22).
// Runs first, first + stride, ... (a block's threads in mmvq's prologue, a grid's in
// quantize_q8_n<nt> / quantize_q8).
// NIBBLES: the 32 values stored in the order of a type whose codes are two nibbles a byte
// (SplitCodes, matvec.cu): word m holds values 2m, 2m + 16, 2m + 1, 2m + 17, the byte order of
// PRMT's lookups of the codes' low and high nibbles, so mmvq dots them with no reordering of
// its own (8 PRMT an item); the sums stay those of values 0-15 and 16-31.
// A run's scale from its amax and whether all its values are finite: d = amax / 127 (NaN when
// a value is not finite), id = 127 / amax (0 when nothing is scaled: all zero, or not finite).
struct RunScale {
    float d, id;
    bool scaled;
};
__device__ __forceinline__ RunScale run_scale(float amax, bool finite) {
    const bool scaled = finite && amax > 0.0f;
    return {finite ? __fdiv_rn(amax, 127.0f) : __int_as_float(0x7FC00000),
            scaled ? __fdiv_rn(127.0f, amax) : 0.0f, scaled};
}
// v's 8-bit value: rint(v id) as one FADD of 1.5 * 2^23 (|v id| <= 127 < 2^22), or 0
__device__ __forceinline__ int q8_of(float v, const RunScale& s) {
    return s.scaled ? __float_as_int(__fadd_rn(__fmul_rn(v, s.id), 12582912.0f)) - 0x4B400000
                    : 0;
}
// a run's fourth 16 bytes: d, the half sums, and both sums again as 16-bit halves (|sum| <=
// 16 x 127), for DP2A against a pair of byte scales (Codes<T>::HALVES)
__device__ __forceinline__ void run_meta(int* run, float d, int s0, int s1) {
    reinterpret_cast<int4*>(run)[2] =
        make_int4(__float_as_int(d), s0, s1, (int)((s0 & 0xFFFF) | ((u32)s1 << 16)));
}
// four 8-bit values as one word, a the low byte
__device__ __forceinline__ int q8_word(int a, int b, int c, int d) {
    return (int)__byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// Run r of token t's 32 values, loaded (the first half of quantize_x's work for a run).
__device__ __forceinline__ void x_run_load(const float* __restrict__ x, int k, int t, int r,
                                           float (&v)[32]) {
    const float4* src = reinterpret_cast<const float4*>(x + (i64)t * k + 32 * r);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 f = __ldg(src + i);
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
}

// The loaded run quantized and stored at xr's run r of token t (the second half).
template <bool NIBBLES>
__device__ __forceinline__ void x_run_store(const float (&v)[32], int* xr, int runs, int t,
                                            int r) {
    float amax = 0.0f;
    bool finite = true;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const float a = fabsf(v[i]);
        finite = finite && a <= 3.402823466e38f;  // false for NaN and Inf
        amax = fmaxf(amax, a);
    }
    const RunScale sc = run_scale(amax, finite);
    int q[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) q[i] = q8_of(v[i], sc);
    int* run = xr + (i64)t * run_row_ints(runs) + run_at(r);
    int4* dst = reinterpret_cast<int4*>(run);
    int sums[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int w[4], s = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int* c = q + 16 * h + 4 * i;
            s += c[0] + c[1] + c[2] + c[3];
            // word 4 h + i: values p[0], p[o1], p[o2], p[o3]
            const int* p = NIBBLES ? q + 8 * h + 2 * i : c;
            constexpr int o1 = NIBBLES ? 16 : 1, o2 = NIBBLES ? 1 : 2, o3 = NIBBLES ? 17 : 3;
            w[i] = q8_word(p[0], p[o1], p[o2], p[o3]);
        }
        dst[h] = make_int4(w[0], w[1], w[2], w[3]);
        sums[h] = s;
    }
    run_meta(run, sc.d, sums[0], sums[1]);
}

template <bool NIBBLES = false>
__device__ __forceinline__ void quantize_x(const float* __restrict__ x, int nt, int k, int* xr,
                                           int first, int stride) {
    const int runs = k >> 5;
    for (int p = first; p < nt * runs; p += stride) {  // nt runs < 2^31: x's f32 count / 32
        const int t = p / runs, r = p - t * runs;
        float v[32];
        x_run_load(x, k, t, r, v);
        x_run_store<NIBBLES>(v, xr, runs, t, r);
    }
}

// GGUF block decoders shared by dequant.cu and embed.cu (and the quantized matmuls), one struct
// per quant type, named as GGML names it and declared once in tracekit/quants.py (its decoder
// struct, sizes and kernel instantiations come from that declaration). Each struct has
//   QK, TS     values and bytes per block, from gguf.GGML_QUANT_SIZES (QUANT_SIZES below)
//   dec8       elements [8c, 8c + 8) of the block at b as f32, at any alignment
//   ALIGN, dec8_w (optional) the same values with word loads, for a block at a multiple of
//              ALIGN bytes; Fast<T> picks dec8_w where a type has one, else dec8
// in gguf-py's arithmetic order (see dequant.cu's header for why that is bit-exact). The
// launchers pass "-I<this folder>" and tracekit.quants.cuda_defines() to NVRTC.
#pragma once

#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Byte readers that accept any alignment and work on global and shared memory alike.
__device__ __forceinline__ float ld_f16(const u8* p) {
    return __half2float(__ushort_as_half((u16)(p[0] | (p[1] << 8))));
}

// 4 bytes at any address, little-endian. Reads only the aligned words holding them.
__device__ __forceinline__ u32 ld_4(const u8* p) {
    const u32 q = (u32)(reinterpret_cast<unsigned long long>(p) & 3);
    const u32* w = (const u32*)(p - q);
    const u32 w0 = w[0], w1 = q ? w[1] : 0u;
    return __funnelshift_r(w0, w1, 8 * q);
}

// 8 bytes at any address, as two little-endian words.
__device__ __forceinline__ uint2 ld_8(const u8* p) {
    const u32 q = (u32)(reinterpret_cast<unsigned long long>(p) & 3);
    const u32* w = (const u32*)(p - q);
    const u32 w0 = w[0], w1 = w[1], w2 = q ? w[2] : 0u;
    return make_uint2(__funnelshift_r(w0, w1, 8 * q), __funnelshift_r(w1, w2, 8 * q));
}

// Byte k (0..7) of an 8-byte pair.
__device__ __forceinline__ u32 byte_of(uint2 v, int k) {
    return ((k < 4 ? v.x : v.y) >> (8 * (k & 3))) & 0xFFu;
}

// code - bias as f32, for 0 <= code < 2^22: exact. 2^23 + code is an f32 whose low mantissa
// bits are the code, so one FADD replaces an I2F (a quarter-rate conversion on sm_90).
__device__ __forceinline__ float code_f(u32 code, float bias) {
    return __fsub_rn(__uint_as_float(0x4B000000u | code), 8388608.0f + bias);
}

// A code split over two bit planes (Q3_K, Q5_K, Q6_K word-wise): LO bits of byte k of lo from
// bit ls, the HI bits above them from byte k of hi from bit hs.
template <int LO, int HI>
__device__ __forceinline__ u32 plane_code(uint2 lo, uint2 hi, int k, int ls, int hs) {
    return ((byte_of(lo, k) >> ls) & ((1u << LO) - 1u)) |
           (((byte_of(hi, k) >> hs) & ((1u << HI) - 1u)) << LO);
}

// Block sizes of type T: -DTK_<T>_QK / -DTK_<T>_TS, generated from the Python declaration.
#ifndef TK_QUANT_SIZES
#error "compile with tracekit.quants.cuda_defines() (cuda.OPTIONS carries them): the block sizes"
#endif
#define QUANT_SIZES(T) static constexpr int QK = TK_##T##_QK, TS = TK_##T##_TS

// ---- Word-wise decoding: T::dec8_w computes T::dec8's values with fewer instructions -------
// Valid only for a block at an address that is a multiple of T::ALIGN: Q4_K/Q5_K 16, Q5_1
// and IQ4_XS 8, Q4_1 and Q2_K 4, the others 2 (its fields are read with loads of that
// alignment). Every TS is a multiple of ALIGN, so each block of a tensor (each row of an
// embedding table too) has the tensor's alignment mod ALIGN: dequant.cu checks raw % 16 == 0
// (its staged copy keeps raw's alignment), embed.cu raw % ALIGN == 0; otherwise they use
// T::dec8 (Fast<T> below makes that choice at compile time for a type without dec8_w).
// Fields load as whole words (one 8- or 16-byte load where aligned, ld_8's 2-3 words at a
// 2-byte aligned address, no byte loads), codes are masked four to a word op, and a code
// byte becomes an f32 with one PRMT: bits 0x4B0000bb are 2^23 + bb, so one FADD gives the
// exact code - bias.
// Where gguf multiplies then adds (d q + m, dsc q - dmn), one FFMA does both: the product is
// exact in f32 (at most 17 + 5 significant bits), so FFMA's one rounding is gguf's rounding of
// the add, for Inf and NaN scales too.
__device__ __forceinline__ float f16_at(const u8* p) {  // p 2-byte aligned
    return __half2float(__ushort_as_half(*reinterpret_cast<const u16*>(p)));
}
__device__ __forceinline__ float half_lo(u32 w) { return __half2float(__ushort_as_half((u16)w)); }
__device__ __forceinline__ float half_hi(u32 w) {
    return __half2float(__ushort_as_half((u16)(w >> 16)));
}
__device__ __forceinline__ uint2 ld8_al(const u8* p) {  // p 8-byte aligned
    return *reinterpret_cast<const uint2*>(p);
}
__device__ __forceinline__ uint2 ld8_al4(const u8* p) {  // p 4-byte aligned
    const u32* w = reinterpret_cast<const u32*>(p);
    return make_uint2(w[0], w[1]);
}

// f[k] = (byte k of q) - bias, exact.
__device__ __forceinline__ void codes8(uint2 q, float bias, float* f) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const u32 bits = __byte_perm(k < 4 ? q.x : q.y, 0x4B000000u, 0x7440u | (k & 3));
        f[k] = __fsub_rn(__uint_as_float(bits), 8388608.0f + bias);
    }
}

// Nibble sh / 4 (sh = 0 or 4) of every byte.
__device__ __forceinline__ uint2 nib8(uint2 q, int sh) {
    return make_uint2((q.x >> sh) & 0x0F0F0F0Fu, (q.y >> sh) & 0x0F0F0F0Fu);
}

// Bits 0..3 of h -> bit 4 of bytes 0..3: the multiply copies h to bit offsets 0, 7, 14, 21
// (no carries: the copies do not overlap), so byte i's bit 0 is h's bit i.
__device__ __forceinline__ u32 spread4(u32 h) {
    return (((h & 15u) * 0x00204081u) & 0x01010101u) << 4;
}

// Q4_K/Q5_K's 6-bit sc[j] and m[j] from the 16-byte header h (d | dmin | scales[12]), as
// k_scale_min on whole words: sc[j] for j < 4 is byte j of s[0..3] & 63, for j >= 4 byte j - 4
// of (s[8..11] & 15) | (s[0..3] >> 6 << 4); the mins likewise from s[4..7] and s[8..11] >> 4.
__device__ __forceinline__ void k_scale_codes(uint4 h, int j, u32* sc, u32* m) {
    const u32 sw = j < 4 ? (h.y & 0x3F3F3F3Fu)
                         : ((h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u));
    const u32 mw = j < 4 ? (h.z & 0x3F3F3F3Fu)
                         : (((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u));
    const int sh = 8 * (j & 3);
    *sc = (sw >> sh) & 0xFFu;
    *m = (mw >> sh) & 0xFFu;
}

// (d * sc[j], dmin * m[j])
__device__ __forceinline__ void k_scales_w(uint4 h, int j, float* dsc, float* dmn) {
    u32 sc, m;
    k_scale_codes(h, j, &sc, &m);
    *dsc = __fmul_rn(half_lo(h.x), code_f(sc, 0.0f));
    *dmn = __fmul_rn(half_hi(h.x), code_f(m, 0.0f));
}

// Every decoder: elements [8c, 8c + 8) of one block at b, into v[0..8).
struct Q8_0 {  // d (f16) | qs[32] int8;  x = q * d
    QUANT_SIZES(Q8_0);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b);
        const uint2 q = ld_8(b + 2 + 8 * c);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(code_f(byte_of(q, k) ^ 0x80u, 128.0f), d);
    }
    // word-wise (Fast<Q8_0>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        uint2 q = ld_8(b + 2 + 8 * c);
        q.x ^= 0x80808080u;  // int8 -> int8 + 128
        q.y ^= 0x80808080u;
        float f[8];
        codes8(q, 128.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(f[k], d);
    }
};

// Chunk c of a d (f16) | qs[16] block (Q4_0, IQ4_NL): value j is the low nibble of qs[j], j + 16
// the high one; x = d * level(nibble).
template <class Level>
__device__ __forceinline__ void dec8_nibbles(const u8* b, int c, float* v, Level level) {
    const float d = ld_f16(b);
    const uint2 q = ld_8(b + 2 + 8 * (c & 1));
    const int sh = (c >> 1) * 4;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, level((byte_of(q, k) >> sh) & 15u));
}

struct Q4_0 {  // d (f16) | qs[16]; value j = low nibble of qs[j], j + 16 = high;  x = d (q - 8)
    QUANT_SIZES(Q4_0);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        dec8_nibbles(b, c, v, [](u32 q) { return code_f(q, 8.0f); });
    }
    // word-wise (Fast<Q4_0>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        float f[8];
        codes8(nib8(ld_8(b + 2 + 8 * (c & 1)), (c >> 1) * 4), 8.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, f[k]);
    }
};

struct Q4_1 {  // d (f16) | m (f16) | qs[16];  x = d q + m
    QUANT_SIZES(Q4_1);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint2 q = ld_8(b + 4 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fadd_rn(__fmul_rn(d, code_f((byte_of(q, k) >> sh) & 15u, 0.0f)), m);
    }
    // word-wise (Fast<Q4_1>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 4;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const u32 dm = *reinterpret_cast<const u32*>(b);
        const float d = half_lo(dm), m = half_hi(dm);
        float f[8];
        codes8(nib8(ld8_al4(b + 4 + 8 * (c & 1)), (c >> 1) * 4), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(d, f[k], m);
    }
};

// 5-bit codes of values [8c, 8c + 8) of a Q5_0/Q5_1 block: nibbles as Q4, bit 4 = bit j of qh.
__device__ __forceinline__ u32 q5_code(uint2 q, u32 hbits, int sh, int k) {
    return ((byte_of(q, k) >> sh) & 15u) | (((hbits >> k) & 1u) << 4);
}

// The eight 5-bit codes of chunk c of a Q5_0 / Q5_1 block, word-wise: the nibbles of qs (8
// bytes) | bit k of hbits << 4, each as f32 code - bias.
__device__ __forceinline__ void q5_codes8(uint2 qs, int c, u32 hbits, float bias, float* f) {
    uint2 q = nib8(qs, (c >> 1) * 4);
    q.x |= spread4(hbits);
    q.y |= spread4(hbits >> 4);
    codes8(q, bias, f);
}

struct Q5_0 {  // d (f16) | qh (u32) | qs[16];  x = d (q - 16)
    QUANT_SIZES(Q5_0);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b);
        const u32 hbits = ld_4(b + 2) >> (8 * c);
        const uint2 q = ld_8(b + 6 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, code_f(q5_code(q, hbits, sh, k), 16.0f));
    }
    // word-wise (Fast<Q5_0>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        const u32 hbits = ld_4(b + 2) >> (8 * c);
        float f[8];
        q5_codes8(ld_8(b + 6 + 8 * (c & 1)), c, hbits, 16.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, f[k]);
    }
};

struct Q5_1 {  // d (f16) | m (f16) | qh (u32) | qs[16];  x = d q + m
    QUANT_SIZES(Q5_1);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const u32 hbits = ld_4(b + 4) >> (8 * c);
        const uint2 q = ld_8(b + 8 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fadd_rn(__fmul_rn(d, code_f(q5_code(q, hbits, sh, k), 0.0f)), m);
    }
    // word-wise (Fast<Q5_1>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 8;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const uint2 hd = ld8_al(b);  // d | m, qh
        const float d = half_lo(hd.x), m = half_hi(hd.x);
        float f[8];
        q5_codes8(ld8_al(b + 8 + 8 * (c & 1)), c, hd.y >> (8 * c), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(d, f[k], m);
    }
};

// Q4_K/Q5_K scale and min of sub-block j from the 12 packed bytes s (llama.cpp's
// get_scale_min_k4): j < 4: low 6 bits of s[j], s[j + 4]; else low/high nibble of s[j + 4]
// with the top 2 bits of s[j - 4] / s[j].
__device__ __forceinline__ void k_scale_min(const u8* s, int j, u32* sc, u32* mn) {
    if (j < 4) {
        *sc = s[j] & 63u;
        *mn = s[j + 4] & 63u;
    } else {
        *sc = (s[j + 4] & 15u) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

struct Q4_K {  // d | dmin | scales[12] | qs[128];  x = (d sc[j]) q - dmin m[j]
    QUANT_SIZES(Q4_K);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int j = c >> 2;  // sub-block of 32 values: nibble j % 2 of qs[32 (j / 2) ..]
        u32 sc, mn;
        k_scale_min(b + 4, j, &sc, &mn);
        const float dsc = __fmul_rn(ld_f16(b), code_f(sc, 0.0f));
        const float dmn = __fmul_rn(ld_f16(b + 2), code_f(mn, 0.0f));
        const uint2 q = ld_8(b + 16 + (j >> 1) * 32 + (c & 3) * 8);
        const int sh = (j & 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fsub_rn(__fmul_rn(dsc, code_f((byte_of(q, k) >> sh) & 15u, 0.0f)), dmn);
    }
    // word-wise (Fast<Q4_K>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 16;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const int j = c >> 2;
        float dsc, dmn;
        k_scales_w(*reinterpret_cast<const uint4*>(b), j, &dsc, &dmn);
        float f[8];
        codes8(nib8(ld8_al(b + 16 + (j >> 1) * 32 + (c & 3) * 8), (j & 1) * 4), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(dsc, f[k], -dmn);
    }
};

struct Q5_K {  // d | dmin | scales[12] | qh[32] | qs[128];  bit 4 of value l of sub-block j
    QUANT_SIZES(Q5_K);  // = bit j of qh[l]
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int j = c >> 2, l0 = (c & 3) * 8;
        u32 sc, mn;
        k_scale_min(b + 4, j, &sc, &mn);
        const float dsc = __fmul_rn(ld_f16(b), code_f(sc, 0.0f));
        const float dmn = __fmul_rn(ld_f16(b + 2), code_f(mn, 0.0f));
        const uint2 h = ld_8(b + 16 + l0);
        const uint2 q = ld_8(b + 48 + (j >> 1) * 32 + l0);
        const int sh = (j & 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = __fsub_rn(__fmul_rn(dsc, code_f(plane_code<4, 1>(q, h, k, sh, j), 0.0f)), dmn);
        }
    }
    // word-wise (Fast<Q5_K>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 16;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const int j = c >> 2, l0 = (c & 3) * 8;
        float dsc, dmn;
        k_scales_w(*reinterpret_cast<const uint4*>(b), j, &dsc, &dmn);
        const uint2 h = ld8_al(b + 16 + l0);
        uint2 q = nib8(ld8_al(b + 48 + (j >> 1) * 32 + l0), (j & 1) * 4);
        q.x |= ((h.x >> j) & 0x01010101u) << 4;
        q.y |= ((h.y >> j) & 0x01010101u) << 4;
        float f[8];
        codes8(q, 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(dsc, f[k], -dmn);
    }
};

struct Q6_K {  // ql[128] | qh[64] | scales[16] int8 | d (f16);  value e = 128 h + r:
    QUANT_SIZES(Q6_K);  // low 4 bits = nibble r / 64 of ql[64 h + r % 64],
    // bits 4-5 = bits 2 (r / 32) of qh[32 h + r % 32];  x = (d scales[e / 16]) (q - 32)
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int e = 8 * c, h = e >> 7, r = e & 127;
        const float dsc = __fmul_rn(ld_f16(b + 208), (float)(signed char)b[192 + (c >> 1)]);
        const uint2 ql = ld_8(b + 64 * h + (r & 63));
        const uint2 qh = ld_8(b + 128 + 32 * h + (r & 31));
        const int sl = (r >> 6) * 4, shh = (r >> 5) * 2;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = __fmul_rn(dsc, code_f(plane_code<4, 2>(ql, qh, k, sl, shh), 32.0f));
        }
    }
    // word-wise (Fast<Q6_K>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const int e = 8 * c, h = e >> 7, r = e & 127;
        const float dsc = __fmul_rn(f16_at(b + 208), (float)(signed char)b[192 + (c >> 1)]);
        uint2 q = nib8(ld_8(b + 64 * h + (r & 63)), (r >> 6) * 4);
        const uint2 qh = ld_8(b + 128 + 32 * h + (r & 31));
        const int shh = (r >> 5) * 2;
        q.x |= ((qh.x >> shh) & 0x03030303u) << 4;
        q.y |= ((qh.y >> shh) & 0x03030303u) << 4;
        float f[8];
        codes8(q, 32.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(dsc, f[k]);
    }
};

// Word i of a block at byte O (0..3) of the aligned words w, shifted right by sh (8 O + sh < 32):
// for O > 0 it spans words i and i + 1, which the caller keeps inside the block. The top sh bits
// are the next word's (O > 0) or zero: callers mask them off.
template <u32 O>
__device__ __forceinline__ u32 word_at(const u32* w, int i, u32 sh) {
    if constexpr (O == 0)
        return w[i] >> sh;
    else
        return __funnelshift_r(w[i], w[i + 1], 8 * O + sh);
}

struct Q2_K {  // scales[16] | qs[64] | d | dmin;  sub-block j of 16: x = (d sc[j]) q - dmin m[j],
    QUANT_SIZES(Q2_K);  // sc / m = low / high nibble of scales[j]; value 128 h + 32 s + l:
    // q = bits 2s, 2s + 1 of qs[32 h + l]
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int h = c >> 4, sh = 2 * ((c >> 2) & 3), l0 = (c & 3) * 8;
        const u32 s = b[c >> 1];
        const float dl = __fmul_rn(ld_f16(b + 80), code_f(s & 15u, 0.0f));
        const float ml = __fmul_rn(ld_f16(b + 82), code_f(s >> 4, 0.0f));
        const uint2 q = ld_8(b + 16 + 32 * h + l0);
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fsub_rn(__fmul_rn(dl, code_f((byte_of(q, k) >> sh) & 3u, 0.0f)), ml);
    }
    // word-wise (Fast<Q2_K>): a block at a multiple of ALIGN bytes (TS 84 = 4 * 21)
    static constexpr int ALIGN = 4;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const int h = c >> 4, sh = 2 * ((c >> 2) & 3), l0 = (c & 3) * 8;
        const u32 s = *reinterpret_cast<const u32*>(b + 4 * (c >> 3)) >> (8 * ((c >> 1) & 3));
        const u32 dm = *reinterpret_cast<const u32*>(b + 80);  // d | dmin
        const float dl = __fmul_rn(half_lo(dm), code_f(s & 15u, 0.0f));
        const float ml = __fmul_rn(half_hi(dm), code_f((s >> 4) & 15u, 0.0f));
        const uint2 q = ld8_al4(b + 16 + 32 * h + l0);
        float f[8];
        codes8(make_uint2((q.x >> sh) & 0x03030303u, (q.y >> sh) & 0x03030303u), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(dl, f[k], -ml);  // dl q exact: one rounding
    }
};

struct Q3_K {  // hmask[32] | qs[64] | scales[12] | d;  value e = 32 g + l (g = 4 h + s):
    QUANT_SIZES(Q3_K);  // q = Q2_K's 2 bits | bit g of hmask[l] << 2;  x = (d (sc - 32)) (q - 4)
    // 6-bit sc[j]: low 4 bits = nibble j / 8 of scales[j % 8], high 2 = bits 2 (j / 4) of
    // scales[8 + j % 4]
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int j = c >> 1, g = c >> 2, l0 = (c & 3) * 8;
        const u32 lo = (b[96 + (j & 7)] >> (4 * (j >> 3))) & 15u;
        const u32 hi = (b[104 + (j & 3)] >> (2 * (j >> 2))) & 3u;
        const float dl = __fmul_rn(ld_f16(b + 108), code_f(lo | (hi << 4), 32.0f));
        const uint2 q = ld_8(b + 32 + 32 * (g >> 2) + l0);
        const uint2 m = ld_8(b + l0);
        const int sh = 2 * (g & 3);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = __fmul_rn(dl, code_f(plane_code<2, 1>(q, m, k, sh, g), 4.0f));
        }
    }
    // word-wise (Fast<Q3_K>): a block at a multiple of ALIGN bytes (TS 110 = 2 * 55). Every
    // field starts at b + 4k, so all are read as the aligned words of w = b - b % 4 that hold
    // them (word_at); a warp decodes one block, so the branch on b % 4 is warp-uniform. Per
    // chunk: 4 (b % 4 = 0) or 6 words of hmask and qs at two computed addresses, and the scales
    // and d as 4 words at fixed offsets (b % 4 = 0: words 24, 25 or 26 chosen by a predicated
    // load, 26, and d; 2: words 24-27, realigned by 16 bits, d in the last), so that the only
    // address arithmetic is l0 = 8 (c % 4) and 32 h on top of it.
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        if (reinterpret_cast<unsigned long long>(b) & 2)
            dec8_at<2>(b, c, v);
        else
            dec8_at<0>(b, c, v);
    }
    template <u32 O>  // O = b % 4
    static __device__ __forceinline__ void dec8_at(const u8* b, int c, float* v) {
        const u32* w = reinterpret_cast<const u32*>(b - O);
        const u32* m = w + 2 * (c & 3);           // hmask[l0 ..], l0 = 8 (c % 4)
        const u32* q = m + 8 + ((c & 16) >> 1);   // qs[32 h + l0 ..], h = c / 16
        const u32 sq = (u32)(c & 12) >> 1;         // 2 s: the qs bit plane, s = g % 4
        const u32 qx = word_at<O>(q, 0, sq) & 0x03030303u, qy = word_at<O>(q, 1, sq) & 0x03030303u;
        u32 mx, my;  // bit g of hmask at bit 2 of each byte
        if constexpr (O == 0) {
            mx = ((m[0] >> (c >> 2)) & 0x01010101u) << 2;
            my = ((m[1] >> (c >> 2)) & 0x01010101u) << 2;
        } else {  // the realigning funnel shift moves bit g to bit 2 for free
            const u32 sm = 8 * O - 2 + (c >> 2);
            mx = __funnelshift_r(m[0], m[1], sm) & 0x04040404u;
            my = __funnelshift_r(m[1], m[2], sm) & 0x04040404u;
        }
        u32 s0, s1, s2;  // scales[0..3], [4..7], [8..11]
        float d;
        if constexpr (O == 0) {
            s0 = w[24], s1 = w[25], s2 = w[26];
            d = f16_at(b + 108);
        } else {
            const u32 w27 = w[27];  // scales[10..11] | d: one load for both
            s0 = __funnelshift_r(w[24], w[25], 16), s1 = __funnelshift_r(w[25], w[26], 16);
            s2 = __funnelshift_r(w[26], w27, 16);
            d = half_hi(w27);
        }
        // sc[j], j = c / 2: low nibble j / 8 of byte j % 4 of s0 (j % 8 < 4) or s1, at bit
        // p = 8 (j % 4) + 4 (j / 8); high 2 bits at p + 2 ((j / 4) % 2) of s2, rotated to bit 4
        const u32 p = ((c & 6) | (c >> 4)) << 2;
        const u32 lo = (c & 8 ? s1 : s0) >> p;
        const u32 hi = __funnelshift_r(s2, s2, p + ((c & 8) >> 2) + 28);
        const u32 bits = (lo & 15u) | (hi & 0x30u) | 0x4B000000u;  // 2^23 + sc
        const float dl = __fmul_rn(d, __fsub_rn(__uint_as_float(bits), 8388608.0f + 32.0f));
        float f[8];
        codes8(make_uint2(qx | mx, qy | my), 4.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(dl, f[k]);
    }
};

// IQ4_NL/IQ4_XS's 16 levels: gguf-py's IQ4_NL.kvalues as int8 bytes, four to a word
// (tests/test_quants.py checks the words against gguf-py).
#define IQ4_LEVELS_0 0xBFAD9881u  // levels 0-3: -127 .. -83
#define IQ4_LEVELS_1 0xF6EADDCFu  // 4-7: -49 .. -10
#define IQ4_LEVELS_2 0x26190D01u  // 8-11: 1 .. 38
#define IQ4_LEVELS_3 0x71594535u  // 12-15: 53 .. 113

// Level of a 4-bit code, exact, picked with one PRMT per table half.
__device__ __forceinline__ float iq4_level(u32 q) {
    const u32 s = q & 7u;
    const u32 lo = __byte_perm(IQ4_LEVELS_0, IQ4_LEVELS_1, s);
    const u32 hi = __byte_perm(IQ4_LEVELS_2, IQ4_LEVELS_3, s);
    return code_f(((q & 8u ? hi : lo) & 0xFFu) ^ 0x80u, 128.0f);
}

// Levels of the 8 codes n (one 4-bit code per byte) as bytes level + 128, for codes8(., 128):
// the codes are packed as the 8 nibbles of one word s (PRMT reads its selectors as nibbles),
// each half of the table is looked up for four codes at once with s % 8, and a third PRMT takes
// byte i from the low half (selector i) or the high half (4 + i, bit 3 of code i).
__device__ __forceinline__ uint2 iq4_levels8(uint2 n) {
    constexpr u32 lo0 = IQ4_LEVELS_0 ^ 0x80808080u, lo1 = IQ4_LEVELS_1 ^ 0x80808080u;
    constexpr u32 hi0 = IQ4_LEVELS_2 ^ 0x80808080u, hi1 = IQ4_LEVELS_3 ^ 0x80808080u;
    // bytes 0 and 2 of n | n >> 4 are code pairs (a | b << 4); PRMT gathers the four pairs
    const u32 s = __byte_perm(n.x | (n.x >> 4), n.y | (n.y >> 4), 0x6420);
    const u32 s7 = s & 0x77777777u;  // bit 3 of a selector nibble would mean "replicate sign"
    const u32 pick = ((s >> 1) & 0x44444444u) | 0x32103210u;
    uint2 r;
    r.x = __byte_perm(__byte_perm(lo0, lo1, s7), __byte_perm(hi0, hi1, s7), pick);
    r.y = __byte_perm(__byte_perm(lo0, lo1, s7 >> 16), __byte_perm(hi0, hi1, s7 >> 16), pick >> 16);
    return r;
}

struct IQ4_NL {  // d (f16) | qs[16], nibbles as Q4_0;  x = d * LEVELS[q]
    QUANT_SIZES(IQ4_NL);
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        dec8_nibbles(b, c, v, [](u32 q) { return iq4_level(q); });
    }
    // word-wise (Fast<IQ4_NL>): a block at a multiple of ALIGN bytes
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        float f[8];
        codes8(iq4_levels8(nib8(ld_8(b + 2 + 8 * (c & 1)), (c >> 1) * 4)), 128.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, f[k]);
    }
};

struct IQ4_XS {  // d | scales_h (u16) | scales_l[4] | qs[128];  sub-block j of 32: 16 bytes of
    QUANT_SIZES(IQ4_XS);  // qs, nibbles as IQ4_NL;  6-bit ls = nibble j % 2 of scales_l[j / 2]
    // | bits 2j, 2j + 1 of scales_h << 4;  x = (d (ls - 32)) * LEVELS[q]
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int j = c >> 2, p = c & 3;
        const u32 sh16 = b[2] | ((u32)b[3] << 8);
        const u32 ls = ((b[4 + (j >> 1)] >> (4 * (j & 1))) & 15u) | (((sh16 >> (2 * j)) & 3u) << 4);
        const float dl = __fmul_rn(ld_f16(b), code_f(ls, 32.0f));
        const uint2 q = ld_8(b + 8 + 16 * j + 8 * (p & 1));
        const int sh = (p >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(dl, iq4_level((byte_of(q, k) >> sh) & 15u));
    }
    // word-wise (Fast<IQ4_XS>): a block at a multiple of ALIGN bytes (TS 136 = 8 * 17)
    static constexpr int ALIGN = 8;
    static __device__ __forceinline__ void dec8_w(const u8* b, int c, float* v) {
        const int j = c >> 2, p = c & 3;
        const uint2 hd = ld8_al(b);  // d | scales_h, scales_l[4]
        const u32 ls = ((hd.y >> (4 * j)) & 15u) | (((hd.x >> (16 + 2 * j)) & 3u) << 4);
        const float dl = __fmul_rn(half_lo(hd.x), code_f(ls, 32.0f));
        float f[8];
        codes8(iq4_levels8(nib8(ld8_al(b + 8 + 16 * j + 8 * (p & 1)), (p >> 1) * 4)), 128.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(dl, f[k]);
    }
};

// Fast<T>::dec8 is T::dec8_w for a type that has one (valid at a multiple of Fast<T>::ALIGN),
// else T::dec8 with ALIGN 1: a new type needs only its byte-wise dec8.
template <class...>
using tk_void_t = void;
template <class T, class = void>
struct Fast : T {
    static constexpr int ALIGN = 1;
};
template <class T>
struct Fast<T, tk_void_t<decltype(T::ALIGN)>> : T {
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        T::dec8_w(b, c, v);
    }
};

// Float tables, 8 elements at a time: vec8 from a 16-byte aligned address, at() from any.
struct SrcF32 {
    static constexpr int BYTES = 4;
    static __device__ __forceinline__ float at(const u8* p) { return __uint_as_float(ld_4(p)); }
    static __device__ __forceinline__ void vec8(const u8* p, float* v) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(p));
        const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
};

struct SrcF16 {
    static constexpr int BYTES = 2;
    static __device__ __forceinline__ float at(const u8* p) { return ld_f16(p); }
    static __device__ __forceinline__ void vec8(const u8* p, float* v) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
        const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __half2float(__ushort_as_half((u16)(w[k >> 1] >> (16 * (k & 1)))));
    }
};

struct SrcBF16 {  // bf16 = the top 16 bits of an f32
    static constexpr int BYTES = 2;
    static __device__ __forceinline__ float at(const u8* p) {
        return __uint_as_float((u32)(p[0] | (p[1] << 8)) << 16);
    }
    static __device__ __forceinline__ void vec8(const u8* p, float* v) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
        const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __uint_as_float((w[k >> 1] >> (16 * (k & 1))) << 16);
    }
};

// GGUF block decoders shared by dequant.cu and embed.cu (included by both; the launchers pass
// "-I<this folder>" to NVRTC). Each decoder writes elements [8c, 8c + 8) of one block as f32,
// in gguf-py's arithmetic order (see dequant.cu's header for why that is bit-exact).
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

// Every decoder: elements [8c, 8c + 8) of one block at b, into v[0..8).
struct Q8_0 {  // d (f16) | qs[32] int8;  x = q * d
    static constexpr int QK = 32, TS = 34;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b);
        const uint2 q = ld_8(b + 2 + 8 * c);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(code_f(byte_of(q, k) ^ 0x80u, 128.0f), d);
    }
};

struct Q4_0 {  // d (f16) | qs[16]; value j = low nibble of qs[j], j + 16 = high;  x = d (q - 8)
    static constexpr int QK = 32, TS = 18;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b);
        const uint2 q = ld_8(b + 2 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, code_f((byte_of(q, k) >> sh) & 15u, 8.0f));
    }
};

struct Q4_1 {  // d (f16) | m (f16) | qs[16];  x = d q + m
    static constexpr int QK = 32, TS = 20;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint2 q = ld_8(b + 4 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fadd_rn(__fmul_rn(d, code_f((byte_of(q, k) >> sh) & 15u, 0.0f)), m);
    }
};

// 5-bit codes of values [8c, 8c + 8) of a Q5_0/Q5_1 block: nibbles as Q4, bit 4 = bit j of qh.
__device__ __forceinline__ u32 q5_code(uint2 q, u32 hbits, int sh, int k) {
    return ((byte_of(q, k) >> sh) & 15u) | (((hbits >> k) & 1u) << 4);
}

struct Q5_0 {  // d (f16) | qh (u32) | qs[16];  x = d (q - 16)
    static constexpr int QK = 32, TS = 22;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b);
        const u32 hbits = ld_4(b + 2) >> (8 * c);
        const uint2 q = ld_8(b + 6 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, code_f(q5_code(q, hbits, sh, k), 16.0f));
    }
};

struct Q5_1 {  // d (f16) | m (f16) | qh (u32) | qs[16];  x = d q + m
    static constexpr int QK = 32, TS = 24;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const u32 hbits = ld_4(b + 4) >> (8 * c);
        const uint2 q = ld_8(b + 8 + 8 * (c & 1));
        const int sh = (c >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = __fadd_rn(__fmul_rn(d, code_f(q5_code(q, hbits, sh, k), 0.0f)), m);
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
    static constexpr int QK = 256, TS = 144;
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
};

struct Q5_K {  // d | dmin | scales[12] | qh[32] | qs[128];  bit 4 of value l of sub-block j
    static constexpr int QK = 256, TS = 176;  // = bit j of qh[l]
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
            const u32 code = ((byte_of(q, k) >> sh) & 15u) | (((byte_of(h, k) >> j) & 1u) << 4);
            v[k] = __fsub_rn(__fmul_rn(dsc, code_f(code, 0.0f)), dmn);
        }
    }
};

struct Q6_K {  // ql[128] | qh[64] | scales[16] int8 | d (f16);  value e = 128 h + r:
    static constexpr int QK = 256, TS = 210;  // low 4 bits = nibble r / 64 of ql[64 h + r % 64],
    // bits 4-5 = bits 2 (r / 32) of qh[32 h + r % 32];  x = (d scales[e / 16]) (q - 32)
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int e = 8 * c, h = e >> 7, r = e & 127;
        const float dsc = __fmul_rn(ld_f16(b + 208), (float)(signed char)b[192 + (c >> 1)]);
        const uint2 ql = ld_8(b + 64 * h + (r & 63));
        const uint2 qh = ld_8(b + 128 + 32 * h + (r & 31));
        const int sl = (r >> 6) * 4, shh = (r >> 5) * 2;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const u32 code = ((byte_of(ql, k) >> sl) & 15u) | (((byte_of(qh, k) >> shh) & 3u) << 4);
            v[k] = __fmul_rn(dsc, code_f(code, 32.0f));
        }
    }
};

// ---- Word-wise decoders: Fast<T>::dec8 computes T::dec8's values with fewer instructions ----
// Valid only for a block at an address that is a multiple of Fast<T>::ALIGN: Q4_K/Q5_K 16, Q5_1
// 8, Q4_1 4, the others 2 (its fields are read with loads of that alignment). Every TS is a
// multiple of ALIGN, so each block of a tensor (each row of an embedding table too) has the
// tensor's alignment mod ALIGN: dequant.cu checks raw % 16 == 0 (its staged copy keeps raw's
// alignment), embed.cu raw % ALIGN == 0; otherwise they use T::dec8. Fields load as
// whole words (one 8- or 16-byte load where aligned, ld_8's 2-3 words at a 2-byte aligned
// address, no byte loads), codes are masked four to a word op, and a code byte becomes an f32
// with one PRMT: bits 0x4B0000bb are 2^23 + bb, so one FADD gives the exact code - bias.
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

// Q4_K/Q5_K (d * sc[j], dmin * m[j]) from the 16-byte header h (d | dmin | scales[12]), as
// k_scale_min on whole words: sc[j] for j < 4 is byte j of s[0..3] & 63, for j >= 4 byte j - 4
// of (s[8..11] & 15) | (s[0..3] >> 6 << 4); the mins likewise from s[4..7] and s[8..11] >> 4.
__device__ __forceinline__ void k_scales_w(uint4 h, int j, float* dsc, float* dmn) {
    const u32 sw = j < 4 ? (h.y & 0x3F3F3F3Fu)
                         : ((h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u));
    const u32 mw = j < 4 ? (h.z & 0x3F3F3F3Fu)
                         : (((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u));
    const int sh = 8 * (j & 3);
    *dsc = __fmul_rn(half_lo(h.x), code_f((sw >> sh) & 0xFFu, 0.0f));
    *dmn = __fmul_rn(half_hi(h.x), code_f((mw >> sh) & 0xFFu, 0.0f));
}

template <class T>
struct Fast;

template <>
struct Fast<Q8_0> : Q8_0 {
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
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

template <>
struct Fast<Q4_0> : Q4_0 {
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        float f[8];
        codes8(nib8(ld_8(b + 2 + 8 * (c & 1)), (c >> 1) * 4), 8.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, f[k]);
    }
};

template <>
struct Fast<Q4_1> : Q4_1 {
    static constexpr int ALIGN = 4;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const u32 dm = *reinterpret_cast<const u32*>(b);
        const float d = half_lo(dm), m = half_hi(dm);
        float f[8];
        codes8(nib8(ld8_al4(b + 4 + 8 * (c & 1)), (c >> 1) * 4), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(d, f[k], m);
    }
};

template <>
struct Fast<Q5_0> : Q5_0 {
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const float d = f16_at(b);
        const u32 hbits = ld_4(b + 2) >> (8 * c);
        uint2 q = nib8(ld_8(b + 6 + 8 * (c & 1)), (c >> 1) * 4);
        q.x |= spread4(hbits);
        q.y |= spread4(hbits >> 4);
        float f[8];
        codes8(q, 16.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(d, f[k]);
    }
};

template <>
struct Fast<Q5_1> : Q5_1 {
    static constexpr int ALIGN = 8;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const uint2 hd = ld8_al(b);  // d | m, qh
        const float d = half_lo(hd.x), m = half_hi(hd.x);
        const u32 hbits = hd.y >> (8 * c);
        uint2 q = nib8(ld8_al(b + 8 + 8 * (c & 1)), (c >> 1) * 4);
        q.x |= spread4(hbits);
        q.y |= spread4(hbits >> 4);
        float f[8];
        codes8(q, 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(d, f[k], m);
    }
};

template <>
struct Fast<Q4_K> : Q4_K {
    static constexpr int ALIGN = 16;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
        const int j = c >> 2;
        float dsc, dmn;
        k_scales_w(*reinterpret_cast<const uint4*>(b), j, &dsc, &dmn);
        float f[8];
        codes8(nib8(ld8_al(b + 16 + (j >> 1) * 32 + (c & 3) * 8), (j & 1) * 4), 0.0f, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __fmaf_rn(dsc, f[k], -dmn);
    }
};

template <>
struct Fast<Q5_K> : Q5_K {
    static constexpr int ALIGN = 16;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
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

template <>
struct Fast<Q6_K> : Q6_K {
    static constexpr int ALIGN = 2;
    static __device__ __forceinline__ void dec8(const u8* b, int c, float* v) {
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

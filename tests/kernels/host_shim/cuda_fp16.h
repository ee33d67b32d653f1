// Host stand-ins for the CUDA names quant_decoders.cuh and quant_codes.cuh use, so that tests/kernels/
// test_decoders_host.py can run its block decoders (dec8, dec8_w) on the CPU with g++ and compare
// them bit for bit with gguf.quants.dequantize. Each is the PTX ISA's definition of the
// instruction; f32 arithmetic is IEEE (SSE, -ffp-contract=off), std::fma is FFMA's one rounding.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#define __device__
#define __host__
#define __forceinline__ inline

struct __half { uint16_t bits; };
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
struct float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return {x, y, z, w};
}

inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline float __half2float(__half h) {  // exact: every f16 is an f32
    const unsigned int s = (h.bits >> 15) & 1u, e = (h.bits >> 10) & 31u, m = h.bits & 1023u;
    if (e == 0) return (s ? -1.0f : 1.0f) * std::ldexp((float)m, -24);
    if (e == 31) return __uint_as_float((s << 31) | 0x7F800000u | (m << 13));
    return __uint_as_float((s << 31) | ((e + 112u) << 23) | (m << 13));
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// DP4A (.s32.s32): c + the sum of the four signed byte products
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += (signed char)(a >> (8 * i)) * (signed char)(b >> (8 * i));
    return c;
}
// DP2A (.s32.s32): c + a's two signed 16-bit halves times b's signed bytes 0-1 (lo) or 2-3 (hi)
inline int __dp2a_lo(int a, int b, int c) {
    return c + (short)a * (signed char)b + (short)(a >> 16) * (signed char)(b >> 8);
}
inline int __dp2a_hi(int a, int b, int c) {
    return c + (short)a * (signed char)(b >> 16) + (short)(a >> 16) * (signed char)(b >> 24);
}
// PRMT (default mode): result byte i = byte (s >> 4i) & 7 of {y, x}, or its sign bit replicated
// when bit 3 of that selector nibble is set.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const uint64_t xy = ((uint64_t)y << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned int sel = (s >> (4 * i)) & 15u;
        unsigned int byte = (unsigned int)(xy >> (8 * (sel & 7u))) & 0xFFu;
        if (sel & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
        r |= byte << (8 * i);
    }
    return r;
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int sh) {
    return (unsigned int)((((uint64_t)hi << 32) | lo) >> (sh & 31u));
}
inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int sh) {
    return (unsigned int)((((uint64_t)hi << 32) | lo) >> (sh < 32u ? sh : 32u));
}
template <class T>
inline T __ldg(const T* p) { return *p; }

// f32 -> f16, round to nearest even (cvt.rn.f16.f32); NaN -> a quiet NaN of the same sign.
struct __half2 { __half x, y; };
inline __half __float2half_rn(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    const unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return {(unsigned short)(sign | 0x7E00u)};
    if (a >= 0x477FF000u) return {(unsigned short)(sign | 0x7C00u)};  // >= 65520: inf
    if (a < 0x38800000u)  // below 2^-14: a multiple of 2^-24, rounded by the FPU (RNE)
        return {(unsigned short)(sign | (unsigned int)std::nearbyint(std::fabs(f) * 16777216.0f))};
    const unsigned int r = a + 0xFFFu + ((a >> 13) & 1u);  // RNE at the f16 ulp (bit 13)
    return {(unsigned short)(sign | ((r - (112u << 23)) >> 13))};
}
inline __half2 __floats2half2_rn(float a, float b) {
    return {__float2half_rn(a), __float2half_rn(b)};
}

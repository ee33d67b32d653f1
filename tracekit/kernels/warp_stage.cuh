// A warp's step of packed bytes, loaded coalesced (dequant.cu's warp variant, matvec.cu's
// MMVQ_STAGE): the step's bytes as the aligned 16-byte words that hold them, word i by lane
// i % 32, one 16-byte load a lane per 512 B, no lane repeating another's loads. S gives WORDS
// (the step's words) and PER_LANE (= ceil(WORDS / 32), the registers a lane holds them in).
#pragma once

#include "quant_decoders.cuh"  // u8/u32

// Word i (i < WORDS) of the step whose bytes start at a: the aligned 16 bytes at
// (a & ~15) + 16 i. Words wholly inside the tensor [lo, hi) load as one 16-byte word; a word
// at the tensor's ends gets its bytes inside [lo, hi) one at a time (the rest are zero), so
// nothing outside the tensor is read.
// Addresses are compared as integers (a word before the tensor is no C++ pointer into it).
__device__ __forceinline__ uint4 step_word(unsigned long long a, int i, unsigned long long lo,
                                           unsigned long long hi) {
    const unsigned long long w = (a & ~15ull) + 16ull * i;
    if (w >= lo && w + 16 <= hi) return __ldg(reinterpret_cast<const uint4*>(w));
    u32 r[4] = {0u, 0u, 0u, 0u};
    for (int k = 0; k < 16; ++k)
        if (w + k >= lo && w + k < hi) r[k >> 2] |= (u32) * reinterpret_cast<const u8*>(w + k)
                                                    << (8 * (k & 3));
    return make_uint4(r[0], r[1], r[2], r[3]);
}

template <class S>
__device__ __forceinline__ void load_step(uint4* r, unsigned long long a, unsigned long long lo,
                                          unsigned long long hi) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < S::PER_LANE; ++j)
        if (lane + 32 * j < S::WORDS) r[j] = step_word(a, lane + 32 * j, lo, hi);
}

// The integer view of every quant type, for the q8 matrix-vector product (matvec.cu's mmvq):
// a block's values as x = a[g] * (code + OFF) + b[g] over groups g of 16 values, the codes
// small integers packed four to a 32-bit word (one byte each), so that a group's dot product
// with 16 int8 activations is four DP4A. One Codes<T> per type of quant_decoders.cuh, in the
// same layout terms (its drawing is the type's declaration in tracekit/quants.py, whose
// ``int_parts`` is the NumPy twin: the same codes, a and b, tests/kernels/test_matvec.py checks
// both against gguf-py's values).
//
// Codes<T> has
//   ITEMS            work items per block (one lane's unit: 32 values, the K-quants but Q6_K 64)
//   NG               groups of 16 values per item
//   SG               values sharing one scale (and offset): 32, or 16 (Q2_K, Q3_K, Q6_K), from
//                    the declaration (-DTK_<T>_SG); with 32, groups 2m and 2m + 1 are the two
//                    halves of one 32-value run with equal a and b, and mmvq scales their
//                    summed dot product once
//   OFF              added to every code (Q4_0's -8: the codes are stored unsigned, the offset
//                    is folded into the integer sum as OFF * sum(q8), exact)
//   MIN              whether b (a per-group offset: Q4_1's m, the K-quants' -dmin m) exists
//   load(b, i, it)   item i of the block at b: it.w[4g..4g+4) the codes of group g, it.v[g] its
//                    first value's index in the block, it.a[g] / it.b[g] its factors (f32,
//                    exact products of the f16 scale and a small integer, as gguf-py's)
//   RUN_STEP         (types with more than one scale group an item) the x runs of 32 values
//                    from one scale group's first value to the next's, the same for every item:
//                    mmvq reads a lane's groups at fixed offsets from one address
// and, where the scales are small integers (the K-quants: INT_SCALES), also
//   load_int(b, i, it)  the same item with it.isc[g] / it.imn[g] the integer scale and min and
//                    it.d / it.dmin the block's two f16 factors (a[g] = d isc[g], b[g] = -dmin
//                    imn[g]), so mmvq applies d and dmin once an item (group_dots_int), and
//   dot(it, q, g)    group g's codes (as load_int left them) against 16 int8 activations
// and, where mmvq reads each code as the sum of two addends (SPLIT: the IQ4 types' levels),
//   load_split(b, i, it)  the item's codes as two addends, it.w + it.w2, byte for byte, in
//                    nibble order (words 2 j, 2 j + 1: the values 4 j, 4 j + 16, 4 j + 1,
//                    4 j + 17 and 4 j + 2, 4 j + 18, 4 j + 3, 4 j + 19 of a 32-value group)
// A block is at raw + i * TS with raw 16-byte aligned (the launcher checks), so each type's
// fields have a fixed alignment: gcd(TS, 16).
#pragma once

#include "quant_decoders.cuh"

template <int NG>
struct CodeItem {
    u32 w[4 * NG];
    u32 w2[4 * NG];  // load_split's second addend of each code (SplitCodes below)
    int v[NG];
    float a[NG], b[NG];
    int isc[NG], imn[NG];  // load_int's (the fields a kernel does not read cost no registers)
    float d, dmin;
    u32 hm[8];  // Q3_K's load_int: the item's hmask words (4 l + k), plane s at bit s
    u32 scb[2], mnb[2];  // HALVES load_int: the groups' scales / mins as bytes (g: word g / 4)
};

// dp4a of 4 unsigned bytes (codes up to 255, Q2_K's masked in place) with 4 signed ones.
__device__ __forceinline__ int dp4a_us(u32 a, int b, int c) {
#if defined(__CUDA_ARCH__)
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    for (int i = 0; i < 4; ++i) c += (int)((a >> (8 * i)) & 0xFFu) * (signed char)(b >> (8 * i));
    return c;
#endif
}

// A group's 16 codes (four words of one byte each) against 16 int8 activations, added to s.
__device__ __forceinline__ int dot16(const u32* w, int4 q, int s = 0) {
    s = __dp4a((int)w[0], q.x, s);
    s = __dp4a((int)w[1], q.y, s);
    s = __dp4a((int)w[2], q.z, s);
    return __dp4a((int)w[3], q.w, s);
}
// The same with the codes' bytes unsigned (dp4a_us).
__device__ __forceinline__ int dot16_us(const u32* w, int4 q) {
    int s = dp4a_us(w[0], q.x, 0);
    s = dp4a_us(w[1], q.y, s);
    s = dp4a_us(w[2], q.z, s);
    return dp4a_us(w[3], q.w, s);
}

// 16 bytes at a 2-byte aligned p as four little-endian words (5 aligned loads at p % 4 == 2,
// the fifth word predicated off at p % 4 == 0 so a tensor's last bytes are not overrun).
__device__ __forceinline__ uint4 ld16_a2(const u8* p) {
    const u32 q = (u32)(reinterpret_cast<unsigned long long>(p) & 3);
    const u32* w = reinterpret_cast<const u32*>(p - q);
    const u32 w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = q ? w[4] : 0u;
    const u32 s = 8 * q;
    return make_uint4(__funnelshift_r(w0, w1, s), __funnelshift_r(w1, w2, s),
                      __funnelshift_r(w2, w3, s), __funnelshift_r(w3, w4, s));
}
// 32 bytes at a 2-byte aligned p as two ld16_a2 (9 aligned loads: the halves share a word, and
// one address and shift, not two), each word shifted right by bits (< 16) more: its top bits
// then come from the next word, not zeros.
__device__ __forceinline__ void ld32_a2(const u8* p, uint4& lo, uint4& hi, u32 bits = 0) {
    const u32 q = (u32)(reinterpret_cast<unsigned long long>(p) & 3);
    const u32* w = reinterpret_cast<const u32*>(p - q);
    u32 v[9];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = w[i];
    v[8] = q ? w[8] : 0u;
    const u32 s = 8 * q + bits;
    lo = make_uint4(__funnelshift_r(v[0], v[1], s), __funnelshift_r(v[1], v[2], s),
                    __funnelshift_r(v[2], v[3], s), __funnelshift_r(v[3], v[4], s));
    hi = make_uint4(__funnelshift_r(v[4], v[5], s), __funnelshift_r(v[5], v[6], s),
                    __funnelshift_r(v[6], v[7], s), __funnelshift_r(v[7], v[8], s));
}
__device__ __forceinline__ uint4 ld16_a4(const u8* p) {  // p 4-byte aligned
    const u32* w = reinterpret_cast<const u32*>(p);
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint4 ld16_a8(const u8* p) {  // p 8-byte aligned
    const uint2* w = reinterpret_cast<const uint2*>(p);
    const uint2 lo = w[0], hi = w[1];
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
}
// A whole block of TS = 4 N - 2 bytes at a 2-byte aligned b (Q5_0: 22) as N aligned words,
// so that its fields share one address and one shift (BlockWindow::at), where Q5_0's separate
// reads of d, qh and qs take 1 + 2 + 5 loads from three addresses. The window ends with the
// block: at b % 4 == 0 the last word is the block's last two bytes alone (a tensor's end is
// not overrun), at b % 4 == 2 it starts 2 bytes before the block.
// MMVQ_Q5_0_WINDOW 1 reads Q5_0 so (mmvq_sass.py, nvcc 13 sm_90: mmvq_st's item loop 89 -> 84
// SASS, 8 -> 7 LDS; mmvq's 101 -> 89), the same codes and factors bit for bit (host test). Off
// until a GPU times it against the three reads (gpu_check_s6.sh paired); Q4_0 and IQ4_NL (18
// bytes: d and one ld16_a2) gain nothing from it (their loops 100 and 92 -> 100 and 97).
#ifndef MMVQ_Q5_0_WINDOW
#define MMVQ_Q5_0_WINDOW 0
#endif
template <int N>
struct BlockWindow {
    u32 v[N];
    u32 q8;  // 8 (b % 4): 0 or 16
    __device__ __forceinline__ explicit BlockWindow(const u8* b) {
        const u32 q = (u32)(reinterpret_cast<unsigned long long>(b) & 3);
        const u32* w = reinterpret_cast<const u32*>(b - q);
#pragma unroll
        for (int i = 0; i < N - 1; ++i) v[i] = w[i];
        v[N - 1] = q ? w[N - 1] : (u32)*reinterpret_cast<const u16*>(b + 4 * N - 4);
        q8 = 8 * q;
    }
    // the 4 bytes at block offset o (even, o + 4 <= TS): one funnel shift (by 32 it is v[i + 1])
    __device__ __forceinline__ u32 at(int o) const {
        return __funnelshift_rc(v[o / 4], v[o / 4 + 1], 8 * (o % 4) + q8);
    }
    __device__ __forceinline__ uint4 at16(int o) const {
        return make_uint4(at(o), at(o + 4), at(o + 8), at(o + 12));
    }
    __device__ __forceinline__ float f16_first() const { return half_lo(v[0] >> q8); }  // d
};

__device__ __forceinline__ u32 word(uint4 q, int i) {
    return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

// The 8 codes of a qs word w (byte i: low nibble = value i, high nibble = value i + 16) as IQ4
// levels: lo = the 4 low nibbles' levels, hi = the 4 high ones'. PRMT reads w's low 16 bits
// directly as four selectors (n0, m0, n1, m1: bit 3 masked off, it would replicate the sign),
// looked up in both table halves, picked by bit 3, then the bytes unshuffled.
__device__ __forceinline__ void iq4_levels_lohi(u32 w, u32& lo, u32& hi) {
    u32 r[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const u32 sel = w >> (16 * k);
        const u32 s7 = sel & 0x7777u, pick = ((sel >> 1) & 0x4444u) | 0x3210u;
        r[k] = __byte_perm(__byte_perm(IQ4_LEVELS_0, IQ4_LEVELS_1, s7),
                           __byte_perm(IQ4_LEVELS_2, IQ4_LEVELS_3, s7), pick);
    }
    lo = __byte_perm(r[0], r[1], 0x6420u);
    hi = __byte_perm(r[0], r[1], 0x7531u);
}

// PRMT in its default mode: a selector nibble with bit 3 set gives the selected byte's sign
// replicated (__byte_perm masks bit 3 off; the host shim's __byte_perm is this PRMT).
__device__ __forceinline__ u32 prmt_sign(u32 a, u32 b, u32 sel) {
#if defined(__CUDA_ARCH__)
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
#else
    return __byte_perm(a, b, sel);
#endif
}

// The same levels as two addends, for mmvq, where two more DP4A cost less than the pick: the
// codes go to PRMT unmasked, so the low table (levels 0-7, all negative) gives 0xFF (-1) where
// a code is >= 8, and the high table, stored as level + 1 and read with bit 3 flipped, gives
// 0 (its bytes are positive) where a code is < 8. Byte for byte, level = a + b (-1 + level + 1
// for the high codes): a dot product with the levels is the sum of the two addends' DP4A. The
// bytes stay in PRMT's order, the word's nibbles in turn (a0: values 0, 16, 1, 17 of the word's
// four bytes; a1: 2, 18, 3, 19), and mmvq's activations of these types are stored in that
// order when x is quantized (quantize_x<NIBBLES>), instead of unshuffling each addend.
// Why: mmvq's IQ4 loop is ALU-bound (ncu, H200, 2026-12-06: ALU pipe 62.7% busy, issue slots
// 55%); a word costs 1 LOP3, 2 SHF and 4 PRMT here, 9 ALU and 8 PRMT in iq4_levels_lohi.
static_assert((IQ4_LEVELS_0 & IQ4_LEVELS_1 & 0x80808080u) == 0x80808080u, "levels 0-7 < 0");
static_assert(((IQ4_LEVELS_2 | IQ4_LEVELS_3) & 0x80808080u) == 0u, "levels 8-15 >= 0");
static_assert((((IQ4_LEVELS_2 | IQ4_LEVELS_3) + 0x01010101u) & 0x80808080u) == 0u,
              "levels 8-15 + 1 < 128 (and each byte's + 1 carries into none)");
__device__ __forceinline__ void iq4_levels_split(u32 w, u32& a0, u32& a1, u32& b0, u32& b1) {
    constexpr u32 H0 = IQ4_LEVELS_2 + 0x01010101u, H1 = IQ4_LEVELS_3 + 0x01010101u;
    const u32 wx = w ^ 0x88888888u;
    a0 = prmt_sign(IQ4_LEVELS_0, IQ4_LEVELS_1, w);
    a1 = prmt_sign(IQ4_LEVELS_0, IQ4_LEVELS_1, w >> 16);
    b0 = prmt_sign(H0, H1, wx), b1 = prmt_sign(H0, H1, wx >> 16);
}

// load and load_int of a type whose fill<INT> writes either (the K-quants: integer scales), and
// its dot when the codes are whole (Q2_K and Q3_K, HALVES, declare pair_dot instead).
template <class Self, int NG>
struct FillBoth {
    static constexpr bool INT_SCALES = true;  // mmvq takes load_int and group_dots_int
    static __device__ __forceinline__ void load(const u8* b, int i, CodeItem<NG>& it) {
        Self::template fill<false>(b, i, it);
    }
    static __device__ __forceinline__ void load_int(const u8* b, int i, CodeItem<NG>& it) {
        Self::template fill<true>(b, i, it);
    }
    static __device__ __forceinline__ int dot(const CodeItem<NG>& it, int4 q, int g) {
        return dot16(it.w + 4 * g, q);
    }
};

// load and load_split of a type whose fill<SPLIT> writes either (the IQ4 types' levels).
template <class Self, int NG>
struct FillSplit {
    static constexpr bool SPLIT = true;  // mmvq takes load_split
    static __device__ __forceinline__ void load(const u8* b, int i, CodeItem<NG>& it) {
        Self::template fill<false>(b, i, it);
    }
    static __device__ __forceinline__ void load_split(const u8* b, int i, CodeItem<NG>& it) {
        Self::template fill<true>(b, i, it);
    }
};

// An IQ4 qs word (i of 4) into an item: the levels (load), or their two addends (load_split).
template <bool SPLIT, int NG>
__device__ __forceinline__ void iq4_word(u32 w, int i, CodeItem<NG>& it) {
    if (SPLIT)  // nibble order, words 2 i and 2 i + 1 (mmvq's x is quantized in that order)
        iq4_levels_split(w, it.w[2 * i], it.w[2 * i + 1], it.w2[2 * i], it.w2[2 * i + 1]);
    else
        iq4_levels_lohi(w, it.w[i], it.w[4 + i]);
}

template <class T>
struct Codes;  // a type without its integer view does not compile into mmvq

// A flag of Codes<T> that a type may leave undeclared (then false): Trait<C>::value.
#define CODES_FLAG(Trait, MEMBER)                                                              \
    template <class C, class = void>                                                           \
    struct Trait {                                                                             \
        static constexpr bool value = false;                                                   \
    };                                                                                         \
    template <class C>                                                                         \
    struct Trait<C, decltype((void)C::MEMBER)> {                                               \
        static constexpr bool value = C::MEMBER;                                               \
    };
CODES_FLAG(SplitCodes, SPLIT)  // codes as two addends a value (load_split)
CODES_FLAG(IntScales, INT_SCALES)  // integer scales (load_int, group_dots_int)
CODES_FLAG(Halves, HALVES)  // groups 2 m, 2 m + 1: one run's halves, own scales (pair_dot)
// PAIR_G (undeclared: 0): the groups of blocks MMVQ_PAIRED_BLOCKS deals to a warp's lanes
// (matvec.cu's LaneBlocks): of each window of two items' blocks, one item takes the even
// groups of PAIR_G blocks and the next the odd ones, where that puts the words a warp's load
// of one item reads in distinct shared-memory banks and the plain order does not:
// scripts/mmvq_banks.py counts each type's wavefronts at every group size, and its test checks
// that the declared one is the fewest: 1 for the blocks of TS = 2 mod 4 bytes (every other
// block lies an odd number of words on). PAIR_FLIP: a lane's odd sub-item takes the other
// group of each pair (Q2_K: a block's two 21-word halves, 8 words apart, then lie a block
// apart as well; 21 -> 11 wavefronts an item, against 13 at its best group size alone).
template <class C, class = void>
struct PairGroup {
    static constexpr int value = 0;
};
template <class C>
struct PairGroup<C, decltype((void)C::PAIR_G)> {
    static constexpr int value = C::PAIR_G;
};
CODES_FLAG(PairFlip, PAIR_FLIP)

#define SCALE_GROUP(T) static constexpr int SG = TK_##T##_SG

// 32-value blocks whose 16 qs bytes hold value j in the low nibble of byte j, j + 16 in the
// high: group 0 = the low nibbles, group 1 = the high ones (Q4_0, Q4_1, Q5_*, IQ4_NL).
template <class Item>
__device__ __forceinline__ void nibble_groups(uint4 q, Item& it) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        it.w[i] = word(q, i) & 0x0F0F0F0Fu;
        it.w[4 + i] = (word(q, i) >> 4) & 0x0F0F0F0Fu;
    }
    it.v[0] = 0;
    it.v[1] = 16;
}

template <>
struct Codes<Q8_0> {  // d | qs[32] int8: x = d q
    SCALE_GROUP(Q8_0);
    static constexpr int ITEMS = 1, NG = 2, OFF = 0;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void load(const u8* b, int, CodeItem<2>& it) {
        const uint4 lo = ld16_a2(b + 2), hi = ld16_a2(b + 18);
#pragma unroll
        for (int i = 0; i < 4; ++i) it.w[i] = word(lo, i), it.w[4 + i] = word(hi, i);
        it.v[0] = 0, it.v[1] = 16;
        it.a[0] = it.a[1] = f16_at(b);
    }
};

template <>
struct Codes<Q4_0> {  // d | qs[16]: x = d (q - 8)
    SCALE_GROUP(Q4_0);
    static constexpr int ITEMS = 1, NG = 2, OFF = -8;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void load(const u8* b, int, CodeItem<2>& it) {
        nibble_groups(ld16_a2(b + 2), it);
        it.a[0] = it.a[1] = f16_at(b);
    }
};

template <>
struct Codes<Q4_1> {  // d | m | qs[16]: x = d q + m  (TS 20: 4-byte aligned)
    SCALE_GROUP(Q4_1);
    static constexpr int ITEMS = 1, NG = 2, OFF = 0;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void load(const u8* b, int, CodeItem<2>& it) {
        const u32 dm = *reinterpret_cast<const u32*>(b);
        nibble_groups(ld16_a4(b + 4), it);
        it.a[0] = it.a[1] = half_lo(dm);
        it.b[0] = it.b[1] = half_hi(dm);
    }
};

// Q5_0/Q5_1's 5th bits: bit j of qh is bit 4 of value j.
template <class Item>
__device__ __forceinline__ void fifth_bits(u32 qh, Item& it) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        it.w[i] |= spread4(qh >> (4 * i));
        it.w[4 + i] |= spread4(qh >> (16 + 4 * i));
    }
}

template <>
struct Codes<Q5_0> {  // d | qh | qs[16]: x = d (q - 16)
    SCALE_GROUP(Q5_0);
    static constexpr int ITEMS = 1, NG = 2, OFF = -16;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void load(const u8* b, int, CodeItem<2>& it) {
        if constexpr (MMVQ_Q5_0_WINDOW) {
            const BlockWindow<6> blk(b);
            nibble_groups(blk.at16(6), it);
            fifth_bits(blk.at(2), it);
            it.a[0] = it.a[1] = blk.f16_first();
        } else {
            nibble_groups(ld16_a2(b + 6), it);
            fifth_bits(ld_4(b + 2), it);
            it.a[0] = it.a[1] = f16_at(b);
        }
    }
};

template <>
struct Codes<Q5_1> {  // d | m | qh | qs[16]: x = d q + m  (TS 24: 8-byte aligned)
    SCALE_GROUP(Q5_1);
    static constexpr int ITEMS = 1, NG = 2, OFF = 0;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void load(const u8* b, int, CodeItem<2>& it) {
        const uint2 h = ld8_al(b);  // d | m, qh
        nibble_groups(ld16_a8(b + 8), it);
        fifth_bits(h.y, it);
        it.a[0] = it.a[1] = half_lo(h.x);
        it.b[0] = it.b[1] = half_hi(h.x);
    }
};

template <>
struct Codes<IQ4_NL> : FillSplit<Codes<IQ4_NL>, 2> {  // d | qs[16] as Q4_0's: x = d LEVELS[q]
    SCALE_GROUP(IQ4_NL);
    static constexpr int ITEMS = 1, NG = 2, OFF = 0;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false;
    template <bool SPLIT_>
    static __device__ __forceinline__ void fill(const u8* b, int, CodeItem<2>& it) {
        const uint4 q = ld16_a2(b + 2);
#pragma unroll
        for (int i = 0; i < 4; ++i) iq4_word<SPLIT_>(word(q, i), i, it);
        it.v[0] = 0, it.v[1] = 16;
        it.a[0] = it.a[1] = f16_at(b);
    }
};

// Q4_K/Q5_K item r (of 4): qs bytes [32 r, +32), whose low nibbles are sub-block 2 r's 32 values
// and high nibbles sub-block 2 r + 1's: groups 0, 1 = the low nibbles of bytes 0-15, 16-31,
// groups 2, 3 the high ones (two halves of each sub-block, as SG = 32 wants).
// INT: load_int's integer scales and mins (sc[j], m[j]) and the header's d and dmin.
template <bool INT>
__device__ __forceinline__ void k_item(uint4 head, uint4 q0, uint4 q1, int r, CodeItem<4>& it) {
    if (INT) it.d = half_lo(head.x), it.dmin = half_hi(head.x);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h: sub-block 2 r + h, nibble h
        float dsc, dmn;
        u32 sc, mn;
        if (INT)
            k_scale_codes(head, 2 * r + h, &sc, &mn);
        else
            k_scales_w(head, 2 * r + h, &dsc, &dmn);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int g = 2 * h + half;
            const uint4 q = half ? q1 : q0;
            if (INT) {
                it.isc[g] = (int)sc, it.imn[g] = (int)mn;
            } else {
                it.a[g] = dsc;
                it.b[g] = -dmn;
            }
            it.v[g] = 64 * r + 32 * h + 16 * half;
#pragma unroll
            for (int k = 0; k < 4; ++k) it.w[4 * g + k] = (word(q, k) >> (4 * h)) & 0x0F0F0F0Fu;
        }
    }
}

// d | dmin | scales[12] | qs[128]: x = (d sc[j]) q - dmin m[j] (TS 144)
template <>
struct Codes<Q4_K> : FillBoth<Codes<Q4_K>, 4> {
    SCALE_GROUP(Q4_K);
    static constexpr int ITEMS = 4, NG = 4, OFF = 0, RUN_STEP = SG == 32 ? 1 : 0;
    static constexpr bool MIN = true;
    template <bool INT>
    static __device__ __forceinline__ void fill(const u8* b, int r, CodeItem<4>& it) {
        const uint4* p = reinterpret_cast<const uint4*>(b);
        k_item<INT>(p[0], p[1 + 2 * r], p[2 + 2 * r], r, it);
    }
};

// Q4_K's with qh[32] at 16: bit j of qh[l] = bit 4 of value l of j
template <>
struct Codes<Q5_K> : FillBoth<Codes<Q5_K>, 4> {
    SCALE_GROUP(Q5_K);
    static constexpr int ITEMS = 4, NG = 4, OFF = 0, RUN_STEP = SG == 32 ? 1 : 0;
    static constexpr bool MIN = true;
    template <bool INT>
    static __device__ __forceinline__ void fill(const u8* b, int r, CodeItem<4>& it) {
        const uint4* p = reinterpret_cast<const uint4*>(b);
        const uint4 qh0 = p[1], qh1 = p[2];  // qh[0..16), qh[16..32)
        k_item<INT>(p[0], p[3 + 2 * r], p[4 + 2 * r], r, it);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint4 qh = (g & 1) ? qh1 : qh0;
            const int j = 2 * r + (g >> 1);
#pragma unroll
            for (int k = 0; k < 4; ++k) it.w[4 * g + k] |= ((word(qh, k) >> j) & 0x01010101u) << 4;
        }
    }
};

// ql[128] | qh[64] | scales[16] int8 | d: x = (d sc[e / 16]) (q - 32)
template <>
struct Codes<Q6_K> : FillBoth<Codes<Q6_K>, 2> {
    SCALE_GROUP(Q6_K);
    static constexpr int ITEMS = 8, NG = 2, OFF = -32, RUN_STEP = 2;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false;
    // item i: h = i / 4, u = i % 4; group 0 = values 128 h + 16 u.. (low nibbles of ql[64 h +
    // 16 u..]), group 1 = 64 further (high nibbles); bits 4-5 from qh[32 h + 16 (u % 2)..] at
    // bits 2 (u / 2) and 2 (u / 2) + 4. INT: the signed scale bytes as isc, d once.
    template <bool INT>
    static __device__ __forceinline__ void fill(const u8* b, int i, CodeItem<2>& it) {
        const int h = i >> 2, u = i & 3;
        const uint4 ql = ld16_a2(b + 64 * h + 16 * u);
        const uint4 qh = ld16_a2(b + 128 + 32 * h + 16 * (u & 1));
        const float d = f16_at(b + 208);
        if (INT) it.d = d;
        const int s0 = 2 * (u >> 1);
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            it.v[g] = 128 * h + 64 * g + 16 * u;
            const int sc = (signed char)b[192 + (it.v[g] >> 4)];
            if (INT)
                it.isc[g] = sc;
            else
                it.a[g] = __fmul_rn(d, (float)sc);
#pragma unroll
            for (int k = 0; k < 4; ++k)
                it.w[4 * g + k] = ((word(ql, k) >> (4 * g)) & 0x0F0F0F0Fu) |
                                  (((word(qh, k) >> (s0 + 4 * g)) & 0x03030303u) << 4);
        }
    }
};

// Q2_K and Q3_K's item h (of 2): the block's half h, values 128 h.., as 8 groups g = 2 s + l of
// 16 values, s the two-bit plane of qs bytes [32 h + 16 l, +16) (bits 2 s) and l which 16
// bytes: group g holds the values 128 h + 32 s + 16 l.. = sub-block j = 8 h + g, so groups 2 m
// and 2 m + 1 are the two halves of one run of x (HALVES: mmvq takes pair_dot and pair_min, a
// run's integer sums, and scales a run, not a group). A half-block item, not a quarter: the
// scale words, d and dmin are read once for 128 values.
// INT (load_int): it.w[4 l + k] the qs words as loaded (8 registers an item, not 32), a
// group's plane masked in place when used (planes_dot: the codes times 4^s, shifted back once
// a group, exact), and it.scb / it.mnb the 8 groups' scales / mins as bytes (group g: byte g % 4
// of word g / 4), so a run's two groups are scaled by one DP2A against their two dot products
// as 16-bit halves (|dot| <= 7 x 16 x 127 < 2^15), and its mins by one against x's packed sums.
__device__ __forceinline__ void raw_planes(uint4 q0, uint4 q1, CodeItem<8>& it) {
#pragma unroll
    for (int k = 0; k < 4; ++k) it.w[k] = word(q0, k), it.w[4 + k] = word(q1, k);
}
__device__ __forceinline__ int planes_dot(const u32* w, int4 q, int s) {
    const u32 mask = 0x03030303u << (2 * s);
    const u32 c[4] = {w[0] & mask, w[1] & mask, w[2] & mask, w[3] & mask};
    return dot16_us(c, q);
}
// DP2A of two 16-bit values against run m's two byte factors in bytes[2] (m even: bytes 0-1
// of word m / 2, odd: bytes 2-3)
__device__ __forceinline__ int pair_dp2a(int pair, const u32* bytes, int m) {
    const int b = (int)bytes[m >> 1];
    return (m & 1) ? __dp2a_hi(pair, b, 0) : __dp2a_lo(pair, b, 0);
}
__device__ __forceinline__ int pack16(int lo, int hi) {  // two int16 values as one word
    return (int)__byte_perm((u32)lo, (u32)hi, 0x5410);
}

// scales[16] | qs[64] | d | dmin: x = (d sc[j]) q - dmin m[j] (TS 84)
template <>
struct Codes<Q2_K> : FillBoth<Codes<Q2_K>, 8> {
    SCALE_GROUP(Q2_K);
    static constexpr int ITEMS = 2, NG = 8, OFF = 0, RUN_STEP = 1;
    static constexpr int PAIR_G = 1;
    static constexpr bool PAIR_FLIP = true;
    static constexpr bool MIN = true, HALVES = true;
    template <bool INT>
    static __device__ __forceinline__ void fill(const u8* b, int h, CodeItem<8>& it) {
        const uint4 q0 = ld16_a4(b + 16 + 32 * h), q1 = ld16_a4(b + 32 + 32 * h);
        // the item's scale bytes j - 8 h = g: scales[8 h, 8 h + 8), two words
        const u32* sw = reinterpret_cast<const u32*>(b + 8 * h);
        const u32 sc0 = sw[0], sc1 = sw[1];
        const u32 dm = *reinterpret_cast<const u32*>(b + 80);
        if (INT) {
            raw_planes(q0, q1, it);
            it.scb[0] = sc0 & 0x0F0F0F0Fu, it.scb[1] = sc1 & 0x0F0F0F0Fu;
            it.mnb[0] = (sc0 >> 4) & 0x0F0F0F0Fu, it.mnb[1] = (sc1 >> 4) & 0x0F0F0F0Fu;
            it.d = half_lo(dm), it.dmin = half_hi(dm);
        }
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int s = g >> 1;
            const uint4 q = (g & 1) ? q1 : q0;
            const u32 scj = (((g >> 2) ? sc1 : sc0) >> (8 * (g & 3))) & 0xFFu;
            it.v[g] = 128 * h + 16 * g;
            if (!INT) {
                it.a[g] = __fmul_rn(half_lo(dm), code_f(scj & 15u, 0.0f));
                it.b[g] = -__fmul_rn(half_hi(dm), code_f(scj >> 4, 0.0f));
#pragma unroll
                for (int k = 0; k < 4; ++k) it.w[4 * g + k] = (word(q, k) >> (2 * s)) & 0x03030303u;
            }
        }
    }
    // run m's sc[2m] dot(2m) + sc[2m + 1] dot(2m + 1) and its mins against x's packed sums
    static __device__ __forceinline__ int pair_dot(const CodeItem<8>& it, int4 q0, int4 q1, int,
                                                   int m) {
        const int d0 = planes_dot(it.w, q0, m) >> (2 * m), d1 = planes_dot(it.w + 4, q1, m) >> (2 * m);
        return pair_dp2a(pack16(d0, d1), it.scb, m);
    }
    static __device__ __forceinline__ int pair_min(const CodeItem<8>& it, int qp, int m) {
        return pair_dp2a(qp, it.mnb, m);
    }
};

// hmask[32] | qs[64] | scales[12] | d: x = (d (sc - 32)) (q - 4)
template <>
struct Codes<Q3_K> : FillBoth<Codes<Q3_K>, 8> {
    SCALE_GROUP(Q3_K);
    static constexpr int ITEMS = 2, NG = 8, OFF = -4, RUN_STEP = 1;
    static constexpr int PAIR_G = 1;
    static constexpr bool MIN = false, HALVES = true;
    // item h as Q2_K's; group g = 2 s + l's third bit = bit 4 h + s of hmask[16 l..].
    // INT: q - 4 = lo + 4 hi - 4 with lo the two low bits (Q2_K's planes) and hi the third: the
    // hmask words loaded shifted by 4 h (it.hm[4 l + k], plane s at bit s: the bits above a
    // byte's low 4 are never read), so a group takes two DP4A
    // chains instead of assembling each code; it.scb the scales sc - 32 as signed bytes
    template <bool INT>
    static __device__ __forceinline__ void fill(const u8* b, int h, CodeItem<8>& it) {
        uint4 q0, q1, m0, m1;
        ld32_a2(b + 32 + 32 * h, q0, q1);
        ld32_a2(b, m0, m1, INT ? 4 * h : 0);  // INT: plane s (bit 4 h + s) at bit s of each byte
        // scales[12] and d (bytes 96..110) as the four aligned words that hold them
        const u32 q4 = (u32)(reinterpret_cast<unsigned long long>(b) & 3);  // 0 or 2 (TS 110)
        const u32* sw = reinterpret_cast<const u32*>(b + 96 - q4);
        // (at b % 4 == 0 the fourth word would pass the block's end: d is read on its own)
        const u32 w0 = sw[0], w1 = sw[1], w2 = sw[2], w3 = q4 ? sw[3] : 0u;
        const u32 s0 = __funnelshift_r(w0, w1, 8 * q4), s1 = __funnelshift_r(w1, w2, 8 * q4);
        const u32 s2 = __funnelshift_r(w2, w3, 8 * q4);
        const float d = q4 ? half_hi(w3) : f16_at(b + 108);
        if (INT) {
            it.d = d;
            raw_planes(q0, q1, it);
#pragma unroll
            for (int k = 0; k < 4; ++k)
                it.hm[k] = word(m0, k), it.hm[4 + k] = word(m1, k);
            // groups 0-3 (j = 8 h + g): low nibbles h of s0's bytes, high bits at 4 h of s2's;
            // groups 4-7: s1's, and s2's at 4 h + 2. sc - 32 a byte with no borrow between
            // bytes: (sc + 128 - 32) ^ 128
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const u32 sc = (((p ? s1 : s0) >> (4 * h)) & 0x0F0F0F0Fu) |
                               (((s2 >> (4 * h + 2 * p)) & 0x03030303u) << 4);
                it.scb[p] = ((sc | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
            }
        }
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int s = g >> 1, l = g & 1, j = 8 * h + g;
            const uint4 q = l ? q1 : q0, m = l ? m1 : m0;
            it.v[g] = 16 * j;
            if (!INT) {
                const u32 lo = (((j & 4) ? s1 : s0) >> (8 * (j & 3) + 4 * (j >> 3))) & 15u;
                const u32 hi = (s2 >> (8 * (j & 3) + 2 * (j >> 2))) & 3u;
                it.a[g] = __fmul_rn(d, code_f(lo | (hi << 4), 32.0f));
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    it.w[4 * g + k] = ((word(q, k) >> (2 * s)) & 0x03030303u) |
                                      (((word(m, k) >> (4 * h + s)) & 0x01010101u) << 2);
            }
        }
    }
    // run m's (sc[2m] - 32) dot(2m) + (sc[2m + 1] - 32) dot(2m + 1), dot(g) = the group's codes
    // q - 4 against x: the low planes' dot shifted back, plus 4 x the third bits' (at bit m of
    // it.hm, shifted back), minus 4 x the half's q8 sum (x's packed sums against the scales)
    static __device__ __forceinline__ int pair_dot(const CodeItem<8>& it, int4 q0, int4 q1, int qp,
                                                   int m) {
        const u32 bit = 0x01010101u << m;
        const u32 hb0[4] = {it.hm[0] & bit, it.hm[1] & bit, it.hm[2] & bit, it.hm[3] & bit};
        const u32 hb1[4] = {it.hm[4] & bit, it.hm[5] & bit, it.hm[6] & bit, it.hm[7] & bit};
        const int t0 = (planes_dot(it.w, q0, m) >> (2 * m)) + ((dot16_us(hb0, q0) >> m) << 2);
        const int t1 = (planes_dot(it.w + 4, q1, m) >> (2 * m)) + ((dot16_us(hb1, q1) >> m) << 2);
        return pair_dp2a(pack16(t0, t1), it.scb, m) + OFF * pair_dp2a(qp, it.scb, m);
    }
};

template <>
struct Codes<IQ4_XS> : FillSplit<Codes<IQ4_XS>, 2> {
    // d | scales_h | scales_l[4] | qs[128]: x = (d (ls[j] - 32)) LEVELS[q]
    SCALE_GROUP(IQ4_XS);
    static constexpr int ITEMS = 8, NG = 2, OFF = 0;
    static constexpr bool MIN = false;
    template <bool SPLIT_>
    static __device__ __forceinline__ void fill(const u8* b, int i, CodeItem<2>& it) {
        const uint2 hd = ld8_al(b);  // (TS 136: 8-byte aligned)
        const u32 ls = ((hd.y >> (4 * i)) & 15u) | (((hd.x >> (16 + 2 * i)) & 3u) << 4);
        const uint4 q = ld16_a8(b + 8 + 16 * i);
#pragma unroll
        for (int k = 0; k < 4; ++k) iq4_word<SPLIT_>(word(q, k), k, it);
        it.v[0] = 32 * i, it.v[1] = 32 * i + 16;
        it.a[0] = it.a[1] = __fmul_rn(half_lo(hd.x), code_f(ls, 32.0f));
    }
};

// The quantized matrix product for prefill-sized batches (issue 13, as llama.cpp's MMQ):
// out [nt, n] = x [nt, k] f32 @ W [n, k]^T, W read from its GGUF blocks, x quantized to 8 bits
// per run of 32 values by quantize_q8 (below; q8_runs.cuh), int8 tensor-core MMA per scale
// group. It computes what mmvq (matvec.cu) computes, for any number of tokens: per scale group g
// (SG = 16 or 32 values, Codes<T> in quant_codes.cuh) with the token's run scale dx,
//     s = sum(codes q8) + OFF qsum   (exact int32: one m16n8k32 MMA for SG 32, m16n8k16 for 16)
//     term = (a[g] dx) s  +  (b[g] dx) qsum      (MIN types only: the b term)
// each product rounded to f32 (no contraction), exactly as matvec.py's ref_mmvq rounds it; the
// terms are summed in k order into f32 accumulators (only that order differs from the NumPy
// reference's).
//
// Tile: MMQ_BM weight rows x MMQ_BN tokens per block (multiples of 32), one warp per 32 x 32
// sub-tile (2 m16 x 4 n8 MMA tiles), k stepped MMQ_KS values (a multiple of 256: whole blocks
// of every type) at a time; the last step may be short (k a multiple of the type's block, not of
// MMQ_KS): only its whole 32-value runs are multiplied. Grid contract (mmq.py's geometry):
// block = (32 (BM / 32) (BN / 32)), grid = (ceil(nt / BN), ceil(n / BM)) (token tiles vary
// fastest, so the blocks that share a weight tile run together and read it from L2), dynamic
// shared memory = mmq.py's shared_bytes (the kernel traps on less).
//
// Shared memory per step (one buffer):
//   sA [BM][RW] u32   the weight codes, int8 four to a word; sB [BN][RW] the tokens' q8 values.
//                     RW = KS / 4 + 8 words: a row is 32 bytes longer than KS, so that the
//                     8-byte fragment loads of 4 rows by 4 lanes (a half warp) hit 32 banks.
//                     Within each 32-value run the words are stored permuted: logical word 4h + i
//                     (values 16h + 4i.., half h) at 2i + h, so lane i's 8-byte load holds the
//                     words an m16n8k32 fragment wants at k = 4i.. and 16 + 4i.. (a0/a2, b0/b1),
//                     or for SG 16 both halves' m16n8k16 fragments (k = 4i.. of each 16-group).
//                     Weight and tokens are permuted alike, so every product pairs the same k.
//   sa, sb [BM][GS]   per scale group the weight's f32 factors (sb for MIN types only)
//   sdx [BN][RS]      per run the token's d; sqs [BN][GS] per scale group its qsum (f32, exact)
// GS = KS / SG + 1 and RS = KS / 32 + 1: the pad spreads a warp's 8 rows over distinct banks.
//
// int32 -> f32 for free: each MMA starts at the int32 bit pattern of 1.5 * 2^23, so its result
// read as f32 is exactly 1.5 * 2^23 + dot (|dot| <= 32 * 127 * 127 < 2^22), and one FADD of
// (OFF qsum - 1.5 * 2^23), exact in f32 (integers < 2^24), leaves s.

#include "quant_codes.cuh"  // Codes<T>: each quant type's integer view (and quant_decoders.cuh)
#include "q8_runs.cuh"      // RUN_INTS, quantize_x: the 8-bit activations
// MMQ_HOST_EMULATION: tests/kernels/test_mmq_host.py runs mmq<T> on the CPU (g++, one host thread
// per CUDA thread), supplying the MMA, the barrier and the shared-memory size itself; the stamp
// and the kernels below are the device's alone.
#ifndef MMQ_HOST_EMULATION
#include "stamp.cuh"  // LaunchStamp: every mmq kernel times itself
#endif

#if !defined(MMQ_BM) || !defined(MMQ_BN) || !defined(MMQ_KS)
#error "compile with -DMMQ_BM -DMMQ_BN -DMMQ_KS (tracekit/kernels/mmq.py's tile)"
#endif
static_assert(MMQ_BM % 32 == 0 && MMQ_BN % 32 == 0 && MMQ_KS % 256 == 0, "mmq tile");
#define MMQ_THREADS (32 * (MMQ_BM / 32) * (MMQ_BN / 32))
#ifndef MMQ_MIN_BLOCKS
#define MMQ_MIN_BLOCKS 1
#endif

#define MMQ_BIAS_BITS 0x4B400000  // 1.5 * 2^23 as f32 bits
#define MMQ_BIAS 12582912.0f

#ifndef MMQ_HOST_EMULATION
__device__ __forceinline__ void mma_k32(int (&c)[4], uint2 a_lo, uint2 a_hi, uint2 b) {
    // A rows gid (a_lo) and gid + 8 (a_hi), k = 4i.. (.x) and 16 + 4i.. (.y); B column gid
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a_lo.x), "r"(a_hi.x), "r"(a_lo.y), "r"(a_hi.y), "r"(b.x), "r"(b.y),
          "r"(MMQ_BIAS_BITS));
}
__device__ __forceinline__ void mma_k16(int (&c)[4], u32 a_lo, u32 a_hi, u32 b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%7,%7,%7,%7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a_lo), "r"(a_hi), "r"(b), "r"(MMQ_BIAS_BITS));
}

__device__ __forceinline__ u32 dynamic_smem_bytes() {
    u32 r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}
#endif

template <class C>
struct MmqLayout {
    static constexpr int RW = MMQ_KS / 4 + 8, GS = MMQ_KS / C::SG + 1, RS = MMQ_KS / 32 + 1;
    // in 4-byte words: sA, sB, sa, sb (MIN only), sdx, sqs
    static constexpr int WORDS = (MMQ_BM + MMQ_BN) * RW + MMQ_BM * GS * (C::MIN ? 2 : 1) +
                                 MMQ_BN * RS + MMQ_BN * GS;
};

// One scale group's terms into the warp tile's accumulators: c = the group's biased MMA sums
// (m tile, n tile, fragment element), g its index in the step, r its run.
template <class C>
__device__ __forceinline__ void mmq_group(float (&acc)[2][4][4], const int (&c)[2][4][4],
                                          const float* sa, const float* sb, const float* sdx,
                                          const float* sqs, int g, int r, int row_w, int tok_w) {
    using L = MmqLayout<C>;
    const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    float av[2][2], bv[2][2], dx[4][2], fix[4][2], qs[4][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
            const int row = row_w + 16 * mt + gid + 8 * hi;
            av[mt][hi] = sa[row * L::GS + g];
            bv[mt][hi] = C::MIN ? sb[row * L::GS + g] : 0.0f;
        }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
            const int tok = tok_w + 8 * nt + 2 * tig + cc;
            dx[nt][cc] = sdx[tok * L::RS + r];
            qs[nt][cc] = sqs[tok * L::GS + g];
            fix[nt][cc] = __fmaf_rn((float)C::OFF, qs[nt][cc], -MMQ_BIAS);  // exact integers
        }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hi = e >> 1, cc = e & 1;
                const float s = __fadd_rn(__int_as_float(c[mt][nt][e]), fix[nt][cc]);
                float term = __fmul_rn(__fmul_rn(av[mt][hi], dx[nt][cc]), s);
                if (C::MIN)
                    term = __fadd_rn(term, __fmul_rn(__fmul_rn(bv[mt][hi], dx[nt][cc]), qs[nt][cc]));
                acc[mt][nt][e] = __fadd_rn(acc[mt][nt][e], term);
            }
}

// xr: quantize_q8's runs [nt][run_row_ints(k / 32)]; raw 16-byte aligned (the launcher checks).
template <class T>
__device__ __forceinline__ void mmq(const u8* __restrict__ raw, const int* __restrict__ xr,
                                    float* __restrict__ out, int n, int nt, int k, int ts,
                                    int qk) {
    using C = Codes<T>;
    using L = MmqLayout<C>;
    constexpr int QK = T::QK, SG = C::SG, ITEMS = C::ITEMS, NG = C::NG;
    constexpr int KB = MMQ_KS / QK;        // a row's blocks per step
    constexpr int KR = MMQ_KS / 32;        // runs per step
    constexpr int UNITS = MMQ_BM * KB * ITEMS;  // Codes<T>::load calls per step
    extern __shared__ int4 mmq_smem[];
    if (ts != T::TS || qk != QK || blockDim.x != MMQ_THREADS || blockDim.y != 1 ||
        dynamic_smem_bytes() < 4u * L::WORDS)
        __trap();
    u32* sA = reinterpret_cast<u32*>(mmq_smem);
    u32* sB = sA + MMQ_BM * L::RW;
    float* sa = reinterpret_cast<float*>(sB + MMQ_BN * L::RW);
    float* sb = sa + MMQ_BM * L::GS;                      // MIN types only
    float* sdx = sb + (C::MIN ? MMQ_BM * L::GS : 0);
    float* sqs = sdx + MMQ_BN * L::RS;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int row_w = 32 * (warp % (MMQ_BM / 32)), tok_w = 32 * (warp / (MMQ_BM / 32));
    const int t0 = blockIdx.x * MMQ_BN, r0 = blockIdx.y * MMQ_BM;
    const int nb = k / QK, runs = k >> 5;

    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;

    for (int k0 = 0; k0 < k; k0 += MMQ_KS) {
        const int kv = min(MMQ_KS, k - k0), kb = kv / QK, kr = kv >> 5;
        // the weight's step: rows past n and blocks past k are not loaded (their products are
        // never stored, or never made)
        for (int u = tid; u < UNITS; u += MMQ_THREADS) {
            const int row = u / (KB * ITEMS), rem = u - row * (KB * ITEMS);
            const int blk = rem / ITEMS, item = rem - blk * ITEMS;
            if (r0 + row >= n || blk >= kb) continue;
            CodeItem<NG> it;
            C::load(raw + ((i64)(r0 + row) * nb + k0 / QK + blk) * T::TS, item, it);
            u32* dst = sA + row * L::RW;
#pragma unroll
            for (int g = 0; g < NG; ++g) {
                const int v = blk * QK + it.v[g];  // the group's first value in the step
                u32* w = dst + (v >> 5) * 8 + ((v >> 4) & 1);
#pragma unroll
                for (int i = 0; i < 4; ++i) w[2 * i] = it.w[4 * g + i];
                if (v % SG == 0) {  // (SG 32: the first of a run's two halves, equal factors)
                    sa[row * L::GS + v / SG] = it.a[g];
                    if (C::MIN) sb[row * L::GS + v / SG] = it.b[g];
                }
            }
        }
        // the tokens' step: their runs, words permuted as the weight's
        for (int p = tid; p < MMQ_BN * KR; p += MMQ_THREADS) {
            const int tok = p / KR, r = p - tok * KR;
            if (t0 + tok >= nt || r >= kr) continue;
            const int4* src = reinterpret_cast<const int4*>(
                xr + (i64)(t0 + tok) * run_row_ints(runs) + run_at((k0 >> 5) + r));
            const int4 q0 = src[0], q1 = src[1], m = src[2];  // values 0-15, 16-31; d, qsums
            int4* dst = reinterpret_cast<int4*>(sB + tok * L::RW + 8 * r);
            dst[0] = make_int4(q0.x, q1.x, q0.y, q1.y);
            dst[1] = make_int4(q0.z, q1.z, q0.w, q1.w);
            sdx[tok * L::RS + r] = __int_as_float(m.x);
            if (SG == 32) {
                sqs[tok * L::GS + r] = (float)(m.y + m.z);
            } else {
                sqs[tok * L::GS + 2 * r] = (float)m.y;
                sqs[tok * L::GS + 2 * r + 1] = (float)m.z;
            }
        }
        __syncthreads();
        for (int r = 0; r < kr; ++r) {
            uint2 fa[2][2], fb[4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int hi = 0; hi < 2; ++hi)
                    fa[mt][hi] = *reinterpret_cast<const uint2*>(
                        sA + (row_w + 16 * mt + gid + 8 * hi) * L::RW + 8 * r + 2 * tig);
#pragma unroll
            for (int j = 0; j < 4; ++j)
                fb[j] = *reinterpret_cast<const uint2*>(sB + (tok_w + 8 * j + gid) * L::RW +
                                                        8 * r + 2 * tig);
            int c[2][4][4];
            if (SG == 32) {
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int j = 0; j < 4; ++j) mma_k32(c[mt][j], fa[mt][0], fa[mt][1], fb[j]);
                mmq_group<C>(acc, c, sa, sb, sdx, sqs, r, r, row_w, tok_w);
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            mma_k16(c[mt][j], h ? fa[mt][0].y : fa[mt][0].x,
                                    h ? fa[mt][1].y : fa[mt][1].x, h ? fb[j].y : fb[j].x);
                    mmq_group<C>(acc, c, sa, sb, sdx, sqs, 2 * r + h, r, row_w, tok_w);
                }
            }
        }
        __syncthreads();  // the next step overwrites the tiles
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = r0 + row_w + 16 * mt + gid + 8 * (e >> 1);
                const int tok = t0 + tok_w + 8 * j + 2 * tig + (e & 1);
                if (row < n && tok < nt) out[(i64)tok * n + row] = acc[mt][j][e];
            }
}

#ifndef MMQ_HOST_EMULATION
// mmq.py appends MMQ_KERNELS(<suffix>, <struct>) for the type it loads (the quant table's
// ``device``), as matvec.py does for mmvq.
#define MMQ_KERNELS(suffix, T)                                                                 \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS)                  \
        mmq_##suffix(const u8* __restrict__ raw, const int* __restrict__ xr,                   \
                     float* __restrict__ out, int n, int nt, int k, int ts, int qk,            \
                     unsigned long long* stamp) {                                              \
        const LaunchStamp launch_stamp(stamp);                                                \
        mmq<T>(raw, xr, out, n, nt, k, ts, qk);                                                \
    }

// x [nt, k] f32 -> its runs xr [nt][run_row_ints(k / 32)] in global memory, one thread per run of
// 32 values (grid: mmq.py's quantize_geometry), for mmq: quantize_q8_n<nt> (matvec.cu) with the
// token count a parameter.
extern "C" __global__ __launch_bounds__(256) void quantize_q8(const float* __restrict__ x, int nt,
                                                               int k, int* xr,
                                                               unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    quantize_x(x, nt, k, xr, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}
#endif

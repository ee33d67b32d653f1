// The CUDA names mmq.cu's mmq<T> uses beyond cuda_fp16.h's, on the CPU (tests/kernels/
// test_mmq_host.py): one host thread per CUDA thread of a block (threadIdx thread-local, the
// block's other indices global, blocks run one after another), __syncthreads a std::barrier of
// the block, and the two int8 MMAs as the PTX ISA defines them for a warp: every lane posts its
// fragment registers, the warp meets, each lane computes its four outputs from all 32 lanes'
// registers, the warp meets again. The fragment layouts (groupID g = lane / 4, i = lane % 4):
//   m16n8k32  A: a0 = A[g][4i..], a1 = A[g + 8][4i..], a2 = A[g][16 + 4i..], a3 = A[g + 8][16 + 4i..]
//             B: b0 = B[4i..][g], b1 = B[16 + 4i..][g]
//   m16n8k16  A: a0 = A[g][4i..], a1 = A[g + 8][4i..];  B: b0 = B[4i..][g]
//   C, D      c0 = C[g][2i], c1 = C[g][2i + 1], c2 = C[g + 8][2i], c3 = C[g + 8][2i + 1]
// (four int8 to a register, the lowest byte first).
#pragma once
#include <algorithm>
#include <barrier>
#include <cstdlib>

#include <cuda_fp16.h>

#define MMQ_HOST_EMULATION 1
#define __shared__
#define __trap() std::abort()
using std::min;

struct dim3h { unsigned x = 0, y = 0, z = 0; };
inline thread_local dim3h threadIdx;
inline dim3h blockIdx, blockDim, gridDim;
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __fdiv_rn(float a, float b) { return a / b; }

inline std::barrier<>* g_block_barrier = nullptr;
inline std::barrier<>* g_warp_barrier[32] = {};
inline unsigned g_dynamic_smem = 0;
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
inline unsigned dynamic_smem_bytes() { return g_dynamic_smem; }

struct HostWarp { unsigned a[32][4], b[32][2]; };
inline HostWarp g_warps[32];

inline int s8(unsigned w, int byte) { return (signed char)(w >> (8 * byte)); }

// D = A B + C over the warp, K = 32 (nreg_a 4, nreg_b 2) or 16 (2, 1); C all `c_init`
inline void host_mma(int (&d)[4], const unsigned* a, int na, const unsigned* b, int nb, int K,
                     int c_init) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    HostWarp& W = g_warps[warp];
    for (int r = 0; r < na; ++r) W.a[lane][r] = a[r];
    for (int r = 0; r < nb; ++r) W.b[lane][r] = b[r];
    g_warp_barrier[warp]->arrive_and_wait();
    const int g = lane >> 2, i = lane & 3;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * i + (e & 1);
        int s = c_init;
        for (int kk = 0; kk < K; ++kk) {
            const int ka = (kk & 15) >> 2, hiK = kk >> 4;  // lane's i, and which k half
            const unsigned av = W.a[4 * (row & 7) + ka][(row >> 3) + 2 * hiK];
            const unsigned bv = W.b[4 * col + ka][hiK];
            s += s8(av, kk & 3) * s8(bv, kk & 3);
        }
        d[e] = s;
    }
    g_warp_barrier[warp]->arrive_and_wait();
}
inline void mma_k32(int (&c)[4], uint2 a_lo, uint2 a_hi, uint2 b) {
    const unsigned a[4] = {a_lo.x, a_hi.x, a_lo.y, a_hi.y}, bb[2] = {b.x, b.y};
    host_mma(c, a, 4, bb, 2, 32, 0x4B400000);
}
inline void mma_k16(int (&c)[4], unsigned a_lo, unsigned a_hi, unsigned b) {
    const unsigned a[2] = {a_lo, a_hi}, bb[1] = {b};
    host_mma(c, a, 2, bb, 1, 16, 0x4B400000);
}

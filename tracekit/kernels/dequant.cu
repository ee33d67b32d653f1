// Dequantize GGUF tensors to f16 (seed §3.2): dequant_<suffix>_f16 for every type of the table.
//
// Arithmetic: gguf-py's, in f32, in its order, with explicit __fmul_rn/__fadd_rn/__fsub_rn so
// nvcc cannot contract a multiply-add; each product of an f16 scale and a small integer code is
// exact in f32, so the only roundings are gguf's final add/subtract and the one
// __floats2half2_rn (round to nearest even). No half arithmetic; compiled without fast-math.
//
// Layout: a thread block owns a tile of blockDim.x * CPT 16-byte output chunks (8 f16 each);
// every thread decodes 8 consecutive values per chunk and writes them with one 16-byte store, a
// warp 512 contiguous bytes per instruction. How the packed bytes reach the decoder (staged in
// shared memory or loaded straight from global) and how they are decoded (byte-wise or
// word-wise) is a per-type variant picked by dequant.py's CONFIG (see "Kernel variants").

#include <cuda_fp16.h>


#include "quant_decoders.cuh"  // u8/u16/u32/i64, T and Fast<T> decoders, SrcF32/F16/BF16

// 8 f32 -> 8 f16 (round to nearest even) packed in one 16-byte word.
__device__ __forceinline__ uint4 pack8_f16(const float* v) {
    uint4 r;
    __half2 h;
    h = __floats2half2_rn(v[0], v[1]);
    r.x = *reinterpret_cast<const u32*>(&h);
    h = __floats2half2_rn(v[2], v[3]);
    r.y = *reinterpret_cast<const u32*>(&h);
    h = __floats2half2_rn(v[4], v[5]);
    r.z = *reinterpret_cast<const u32*>(&h);
    h = __floats2half2_rn(v[6], v[7]);
    r.w = *reinterpret_cast<const u32*>(&h);
    return r;
}

// ---- Kernel variants, chosen per type by dequant.py's CONFIG --------------------------------
// Output: 16-byte chunks of 8 f16; chunk g is value [8 (g % CPB), + 8) of block g / CPB. A
// thread block owns a tile of blockDim.x * CPT chunks; thread t does chunks t, t + blockDim.x,
// ... of it, so a warp stores 512 contiguous bytes per instruction. Tiles are walked
// grid-stride over 64-bit indices, so a clamped grid drops no work.
#define DQ_STAGE 0    // stage the tile's packed bytes in shared memory, byte-wise decoders
#define DQ_STAGE_W 1  // the same, word-wise decoders (Fast<T>) when raw % 16 == 0
#define DQ_DIRECT 2   // no shared memory: each thread loads its fields through L1; Fast<T>
                      // when raw % 16 == 0, else the byte-wise decoders
#define DQ_WARP 3     // a warp stages its own steps of blocks in shared memory, one coalesced
                      // load per 512 B, the next step's loads in flight during this one's
                      // decode; Fast<T> when raw % Fast<T>::ALIGN == 0, else byte-wise
#define DQ_WARP_OCC 4  // DQ_WARP capped at 32 registers (__launch_bounds__(256, 8): blocks of
                      // <= 256 threads, 64 warps an SM), where DQ_WARP takes 39-40 for Q3_K

// Copy n bytes at src (any alignment) into shared memory so that smem[o + i] = src[i] with
// o = src % 16: the 16-byte words in between move with one aligned load each; the ragged head
// (threads 0..15) and tail (threads 32..47) bytes go one at a time. Returns o.
__device__ __forceinline__ int stage_bytes(const u8* __restrict__ src, int n, u8* smem) {
    const int o = (int)(reinterpret_cast<unsigned long long>(src) & 15);
    const int head = o ? min(16 - o, n) : 0;
    const int nw = (n - head) >> 4;
    const int tail = n - head - 16 * nw;
    const uint4* w = reinterpret_cast<const uint4*>(src + head);
    uint4* sw = reinterpret_cast<uint4*>(smem + o + head);
    for (int i = threadIdx.x; i < nw; i += blockDim.x) sw[i] = __ldg(w + i);
    const int t = threadIdx.x;
    if (t < head) smem[o + t] = src[t];
    if (t >= 32 && t < 32 + tail) {
        const int i = head + 16 * nw + (t - 32);
        smem[o + i] = src[i];
    }
    return o;
}

// DQ_STAGE / DQ_STAGE_W: the tile's packed blocks are staged with aligned 16-byte loads, then
// every thread decodes its chunks from shared memory (blocks keep raw's alignment there).
template <class D, int CPT>
__device__ __forceinline__ void staged(const u8* __restrict__ raw, uint4* __restrict__ out,
                                       i64 nblocks) {
    extern __shared__ __align__(16) u8 smem[];
    constexpr int CPB = D::QK / 8;  // 16-byte output chunks per block
    const int tile_chunks = blockDim.x * CPT;
    const int tile_blocks = tile_chunks / CPB;
    const i64 ntiles = (nblocks + tile_blocks - 1) / tile_blocks;
    for (i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const i64 b0 = tile * tile_blocks;
        const int nb = (int)min((i64)tile_blocks, nblocks - b0);
        __syncthreads();  // the previous tile's decodes are done with smem
        const int o = stage_bytes(raw + b0 * D::TS, nb * D::TS, smem);
        __syncthreads();
        const u8* s = smem + o;
        uint4* dst = out + tile * tile_chunks;
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
            const int lc = k * blockDim.x + threadIdx.x;
            if (lc < nb * CPB) {
                float v[8];
                D::dec8(s + (lc / CPB) * D::TS, lc % CPB, v);
                dst[lc] = pack8_f16(v);
            }
        }
    }
}

// DQ_DIRECT: no staging and no barrier; a warp's lanes read neighbouring fields of a few
// blocks, so each 128-byte line comes from DRAM once and is then hit in L1. The CPT chunks'
// loads are independent, so they are in flight together.
template <class D, int CPT>
__device__ __forceinline__ void direct(const u8* __restrict__ raw, uint4* __restrict__ out,
                                       i64 nblocks) {
    constexpr unsigned CPB = D::QK / 8;
    const unsigned long long nchunks = (unsigned long long)nblocks * CPB;
    const unsigned long long tile_chunks = (unsigned long long)blockDim.x * CPT;
    for (unsigned long long g0 = blockIdx.x * tile_chunks + threadIdx.x; g0 < nchunks;
         g0 += gridDim.x * tile_chunks) {
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
            const unsigned long long g = g0 + (unsigned long long)k * blockDim.x;
            if (g < nchunks) {
                float v[8];
                D::dec8(raw + (g / CPB) * D::TS, (int)(g % CPB), v);
                out[g] = pack8_f16(v);
            }
        }
    }
}

// DQ_WARP: a warp owns runs of STEPS steps; a step is 32 CPT chunks (32 CPT / CPB whole blocks,
// 440 B of Q3_K at CPT 4). Its packed bytes are loaded once, as the aligned 16-byte words that
// hold them (one instruction a lane per 512 B, no lane repeating another's loads), into the
// warp's own shared-memory slice; then the warp issues the next step's loads and decodes the
// current step from the slice, so a step's loads are in flight during the previous step's
// decode and stores. No __syncthreads: the warps of a block are independent (__syncwarp only),
// and the decoders read shared memory through 32-bit addresses, not 64-bit global ones.
// Shared memory: WarpSlice<D, CPT>::BYTES per warp (dequant.py's warp_slice_bytes, checked
// against %dynamic_smem_size at entry).
template <class D, int CPT>
struct WarpSlice {
    static constexpr int CPB = D::QK / 8;
    static_assert((32 * CPT) % CPB == 0, "a warp step must hold whole blocks");
    static constexpr int BLOCKS = 32 * CPT / CPB;  // blocks per step
    // 16-byte words: the step's bytes at any offset mod 16 (+15) and 16 B of slack for the
    // decoders' word reads past a block's last field (ld_8 of an unaligned 8-byte field)
    static constexpr int WORDS = (BLOCKS * D::TS + 15 + 16 + 15) / 16;
    static constexpr int BYTES = 16 * WORDS;
    static constexpr int PER_LANE = (WORDS + 31) / 32;  // word loads a lane issues per step
};

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

template <class D, int CPT, int STEPS>
__device__ __forceinline__ void warp_steps(const u8* __restrict__ raw, uint4* __restrict__ out,
                                           i64 nblocks) {
    extern __shared__ __align__(16) u8 smem[];
    using S = WarpSlice<D, CPT>;
    constexpr int CPB = S::CPB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    uint4* slice = reinterpret_cast<uint4*>(smem + warp * S::BYTES);
    const unsigned long long lo = reinterpret_cast<unsigned long long>(raw);
    const unsigned long long hi = lo + (unsigned long long)nblocks * D::TS;
    const i64 nsteps = (nblocks + S::BLOCKS - 1) / S::BLOCKS;
    // the warp's runs: STEPS consecutive steps, then the run gridDim.x * wpb runs further on
    const i64 stride = (i64)gridDim.x * wpb * STEPS;
    i64 s = ((i64)blockIdx.x * wpb + warp) * STEPS;
    int in_run = 0;
    uint4 r[S::PER_LANE];
    if (s < nsteps) load_step<S>(r, lo + (unsigned long long)s * (S::BLOCKS * D::TS), lo, hi);
    while (s < nsteps) {  // warp-uniform
        i64 next = s + 1;
        if (++in_run == STEPS) next += stride - STEPS, in_run = 0;
        __syncwarp();  // the previous step's decodes are done with the slice
#pragma unroll
        for (int j = 0; j < S::PER_LANE; ++j)
            if (lane + 32 * j < S::WORDS) slice[lane + 32 * j] = r[j];
        __syncwarp();
        if (next < nsteps)  // in flight during this step's decode and stores
            load_step<S>(r, lo + (unsigned long long)next * (S::BLOCKS * D::TS), lo, hi);
        const i64 b0 = s * S::BLOCKS;
        const int nb = (int)min((i64)S::BLOCKS, nblocks - b0);
        const u8* sb = reinterpret_cast<const u8*>(slice) + ((lo + (unsigned long long)b0 * D::TS) & 15);
        uint4* dst = out + b0 * CPB;
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
            const int lc = 32 * k + lane;
            if (lc < nb * CPB) {
                float v[8];
                D::dec8(sb + (lc / CPB) * D::TS, lc % CPB, v);
                dst[lc] = pack8_f16(v);
            }
        }
        s = next;
    }
}

template <class T, int V, int CPT, int STEPS>
__device__ __forceinline__ void dequant(const u8* __restrict__ raw, uint4* __restrict__ out,
                                        i64 nblocks, int ts, int qk) {
    static_assert(V == DQ_STAGE || V == DQ_STAGE_W || V == DQ_DIRECT || V == DQ_WARP ||
                      V == DQ_WARP_OCC,
                  "unknown variant");
    static_assert(CPT >= 1 && CPT <= 64, "chunks per thread out of range");
    constexpr bool WARP = V == DQ_WARP || V == DQ_WARP_OCC;
    static_assert(STEPS >= 1 && (WARP || STEPS == 1), "steps: the warp variants' only");
    if (ts != T::TS || qk != T::QK) __trap();  // the launcher passes the quant table's sizes
    const unsigned long long a = reinterpret_cast<unsigned long long>(raw);
    if constexpr (WARP) {
        if (blockDim.x % 32) __trap();  // dequant.py's config check: whole warps
#ifdef __CUDA_ARCH__
        u32 dyn;  // the launcher's warp_slice_bytes per warp
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < (blockDim.x / 32) * WarpSlice<T, CPT>::BYTES) __trap();
#endif
        if ((a & (Fast<T>::ALIGN - 1)) == 0)  // the slice keeps raw's alignment mod 16
            warp_steps<Fast<T>, CPT, STEPS>(raw, out, nblocks);
        else
            warp_steps<T, CPT, STEPS>(raw, out, nblocks);
    } else if constexpr (V == DQ_DIRECT) {
        if ((a & 15) == 0)
            direct<Fast<T>, CPT>(raw, out, nblocks);
        else
            direct<T, CPT>(raw, out, nblocks);
    } else {
        if (V == DQ_STAGE_W && (a & 15) == 0)
            staged<Fast<T>, CPT>(raw, out, nblocks);
        else
            staged<T, CPT>(raw, out, nblocks);
    }
}

// dequant.py generates one line per quant type of the table (tracekit/quants.py), its variant
// chunks per thread and (warp variant) steps per run from the type's declared tuning:
//   DEQUANT_KERNEL(dequant_q4_0_f16, Q4_0, 2, 4, 1)
#define DEQUANT_KERNEL(name, T, V, CPT, STEPS)                                                 \
    extern "C" __global__ void name(const u8* __restrict__ raw, uint4* __restrict__ out,      \
                                    i64 nblocks, int ts, int qk) {                           \
        dequant<T, V, CPT, STEPS>(raw, out, nblocks, ts, qk);                                 \
    }
// ... the same with DQ_WARP_OCC's register cap (dequant.py emits it for that variant)
#define DEQUANT_KERNEL_OCC(name, T, V, CPT, STEPS)                                             \
    extern "C" __global__ void __launch_bounds__(256, 8)                                      \
        name(const u8* __restrict__ raw, uint4* __restrict__ out, i64 nblocks, int ts, int qk) { \
        dequant<T, V, CPT, STEPS>(raw, out, nblocks, ts, qk);                                 \
    }

// ---- F32 / F16 / BF16 -> f16: 8 elements per thread, one 16-byte store -----------------------
// vec: the source is 16-byte aligned, so whole chunks load as 16-byte words; otherwise every
// element is assembled from bytes. The last chunk may be partial (n need not divide by 8).
template <class S>
__device__ __forceinline__ void float_to_f16(const u8* __restrict__ raw, __half* __restrict__ out,
                                             i64 n, int vec) {
    const i64 nchunks = (n + 7) / 8;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < nchunks;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 e0 = 8 * g;
        const u8* p = raw + e0 * S::BYTES;
        if (e0 + 8 <= n) {
            float v[8];
            if (vec) {
                S::vec8(p, v);
            } else {
#pragma unroll
                for (int k = 0; k < 8; ++k) v[k] = S::at(p + k * S::BYTES);
            }
            reinterpret_cast<uint4*>(out)[g] = pack8_f16(v);
        } else {
            for (i64 e = e0; e < n; ++e) out[e] = __float2half_rn(S::at(raw + e * S::BYTES));
        }
    }
}

// ... and one per float type:  FLOAT_DEQUANT_KERNEL(dequant_f16_f16, SrcF16)
#define FLOAT_DEQUANT_KERNEL(name, S)                                                          \
    extern "C" __global__ void name(const u8* __restrict__ raw, __half* __restrict__ out, i64 n, \
                                    int vec) {                                                 \
        float_to_f16<S>(raw, out, n, vec);                                                     \
    }

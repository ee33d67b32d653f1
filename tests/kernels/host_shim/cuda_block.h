// Host stand-ins for running a CUDA kernel's blocks on the CPU, one block at a time, each of its
// threads a fiber (ucontext) on one OS thread: tests/kernels/test_attention.py runs
// attention_tiled_f32 this way and compares it with the NumPy reference, without a GPU.
//
// A barrier (__syncthreads, __syncwarp) switches back to the scheduler, which runs every
// unfinished fiber of the block up to its next barrier in turn: a round ends when all of them
// reached it, so no thread passes a barrier before every thread of the block has arrived (a
// __syncwarp is as strong as a __syncthreads for the threads still running). Warps may leave a
// loop of __syncwarp after different trip counts (dequant.cu's warp variant does). __shfl_xor_sync writes the lane's value to a slot, waits at
// a barrier, reads its partner's slot and waits again. That is only right for code in which
// every thread of the block reaches each barrier and shuffle together (block-uniform control
// flow around them); the scheduler aborts when a round ends with some threads at a
// __syncthreads and others finished, or some at a __syncwarp or shuffle and others of their warp
// finished, which is that rule broken.
//
// With TK_HOST_COUNTED_BARRIERS defined before this header, barriers count arrivals instead: a
// __syncthreads waits for every live thread of the block, a __syncwarp or shuffle for the live
// lanes of its warp (a thread that has returned no longer counts, as on sm_70+), so warps may
// take different paths between barriers (attention_f32's key loops); a round in which no
// thread moves is a deadlock, reported and aborted.
//
// __shared__ is dropped: a kernel's dynamic shared array (extern __shared__) becomes one global
// array the test defines; static __shared__ variables would become per-thread locals, so only
// kernels that keep all shared data in the dynamic array run right. stamp.cuh is this folder's
// stand-in (no timer on the host: the tests pass a null stamp slot).
#pragma once
#include <cstring>
#include <ucontext.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_fp16.h"

#define __global__
#define __shared__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __trap() std::abort()

using std::isnan;

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};
inline dim3 threadIdx, blockIdx, gridDim, blockDim;

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

namespace tk_host {
struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
    bool at_block_barrier = false;  // waiting at a __syncthreads (else a warp-level one)
};
inline ucontext_t scheduler;
inline std::vector<Fiber> fibers;
inline int current = 0;
inline float shfl_slots[1024];
inline void (*body)() = nullptr;

inline void yield() { swapcontext(&fibers[current].ctx, &scheduler); }

// Counted barriers (TK_HOST_COUNTED_BARRIERS): per block and per warp, arrivals and a
// generation that the last live arrival advances.
inline int block_arrived = 0, block_gen = 0, warp_arrived[32] = {}, warp_gen[32] = {};
inline bool progress = false;  // a thread finished, released or left a barrier this round
inline int live(int first, int count) {
    int k = 0;
    for (int i = first; i < first + count && i < (int)fibers.size(); ++i) k += !fibers[i].done;
    return k;
}
inline void meet(int& arrived, int& gen, int n_live) {
    const int g = gen;
    if (++arrived >= n_live) {
        arrived = 0, ++gen, progress = true;
        return;
    }
    while (gen == g) yield();
    progress = true;
}
inline void release_for_the_finished(int i) {  // a returned thread no longer counts
    if (block_arrived > 0 && block_arrived >= live(0, (int)fibers.size()))
        block_arrived = 0, ++block_gen;
    const int w = i >> 5;
    if (warp_arrived[w] > 0 && warp_arrived[w] >= live(w * 32, 32)) warp_arrived[w] = 0, ++warp_gen[w];
}

inline void entry() {
    body();
    fibers[current].done = true;  // uc_link returns to the scheduler
#ifdef TK_HOST_COUNTED_BARRIERS
    progress = true;
    release_for_the_finished(current);
#endif
}

inline void set_thread_index(int i) {
    threadIdx.x = i % blockDim.x;
    threadIdx.y = (i / blockDim.x) % blockDim.y;
    threadIdx.z = i / (blockDim.x * blockDim.y);
}

// Run fn() as every thread of every block of grid x block (block-uniform barriers only).
inline void run_grid(dim3 grid, dim3 block, void (*fn)()) {
    const int n = block.x * block.y * block.z;
    if (n > 1024) std::abort();
    gridDim = grid;
    blockDim = block;
    body = fn;
    fibers.assign(n, Fiber{});
    for (Fiber& f : fibers) f.stack.resize(64 * 1024);
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx) {
                blockIdx.x = bx, blockIdx.y = by, blockIdx.z = bz;
                for (int i = 0; i < n; ++i) {
                    Fiber& f = fibers[i];
                    f.done = false;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = &scheduler;
                    makecontext(&f.ctx, entry, 0);
                }
                block_arrived = 0;
                for (int w = 0; w < 32; ++w) warp_arrived[w] = 0;
                for (;;) {  // one round: every thread up to its next barrier (or its end)
                    int finished = 0;
                    progress = false;
                    for (int i = 0; i < n; ++i) {
                        current = i;
                        set_thread_index(i);
                        if (!fibers[i].done) swapcontext(&scheduler, &fibers[i].ctx);
                        finished += fibers[i].done;
                    }
                    if (finished == n) break;
#ifdef TK_HOST_COUNTED_BARRIERS
                    if (!progress) {
                        std::fprintf(stderr, "block (%u,%u,%u): deadlock, %d of %d threads "
                                     "finished and the rest wait at barriers\n", bx, by, bz,
                                     finished, n);
                        std::abort();
                    }
                    continue;
#endif
                    for (int i = 0; finished != 0 && i < n; ++i) {
                        bool bad = !fibers[i].done && fibers[i].at_block_barrier;
                        for (int j = i & ~31; !fibers[i].done && j < (i | 31) + 1 && j < n; ++j)
                            bad = bad || fibers[j].done;
                        if (bad) {
                            std::fprintf(stderr, "block (%u,%u,%u): %d of %d threads finished "
                                         "while thread %d waits at a barrier\n", bx, by, bz,
                                         finished, n, i);
                            std::abort();
                        }
                    }
                }
            }
    fibers.clear();
}
}  // namespace tk_host

#ifdef TK_HOST_COUNTED_BARRIERS
inline void __syncthreads() {
    tk_host::meet(tk_host::block_arrived, tk_host::block_gen,
                  tk_host::live(0, (int)tk_host::fibers.size()));
}
inline void tk_host_warp_meet() {
    const int w = tk_host::current >> 5;
    tk_host::meet(tk_host::warp_arrived[w], tk_host::warp_gen[w], tk_host::live(w * 32, 32));
}
inline void __syncwarp(unsigned int = 0xffffffffu) { tk_host_warp_meet(); }
inline float __shfl_xor_sync(unsigned int, float v, int lane_mask) {
    const int me = tk_host::current;
    tk_host::shfl_slots[me] = v;
    tk_host_warp_meet();
    const float r = tk_host::shfl_slots[(me & ~31) | ((me & 31) ^ lane_mask)];
    tk_host_warp_meet();
    return r;
}
#else
inline void __syncthreads() {
    tk_host::fibers[tk_host::current].at_block_barrier = true;
    tk_host::yield();
    tk_host::fibers[tk_host::current].at_block_barrier = false;
}
inline void __syncwarp(unsigned int = 0xffffffffu) { tk_host::yield(); }
inline float __shfl_xor_sync(unsigned int, float v, int lane_mask) {
    const int me = tk_host::current;
    tk_host::shfl_slots[me] = v;
    tk_host::yield();
    const float r = tk_host::shfl_slots[(me & ~31) | ((me & 31) ^ lane_mask)];
    tk_host::yield();
    return r;
}
#endif
// The int shuffle: the same exchange, the bits carried in the float slots unchanged.
inline int __shfl_xor_sync(unsigned int mask, int v, int lane_mask) {
    float f;
    std::memcpy(&f, &v, 4);
    f = __shfl_xor_sync(mask, f, lane_mask);
    std::memcpy(&v, &f, 4);
    return v;
}
// One OS thread runs every fiber: a fence orders nothing more, an atomic is a plain update.
inline void __threadfence() {}
inline int atomicAdd(int* p, int v) { const int old = *p; *p = old + v; return old; }
template <class T>
inline T __ldcg(const T* p) { return *p; }
inline int atomicOr(int* p, int v) { const int old = *p; *p = old | v; return old; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

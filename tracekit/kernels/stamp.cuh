// Per-launch device times (tracekit/runner/stamps.py): each stamped kernel times itself.
//
// A kernel is *stamped* when its last parameter is `unsigned long long* stamp` and its first
// statement is `const LaunchStamp launch_stamp(stamp);` (tracekit.kernels.cuda.STAMPED is
// derived from the sources by that rule). Launchers pass null (NO_STAMP): then the scope does
// nothing but one uniform branch. A timed pass passes a slot of STAMP_SLOT_WORDS words:
//   slot[0]  start: the global timer (ns) when block 0's first thread enters;
//   slot[1]  end:   the global timer when the grid's last thread leaves: each block meets at
//                   an exit barrier in the scope's destructor (it ends every return path, so
//                   early returns are counted) and its first thread folds the block's end in
//                   with an atomic max. The timer only grows, so a slot reused by a later
//                   launch or replay needs no reset.
// Cost when timed: a start store (block 0), the exit barrier and one global atomic max per
// block, whose result nobody waits for (a RED: same address, so a grid of thousands of blocks
// serializes a few ns per block at L2); the fewest instructions on the timed path, which
// measured cheapest (BENCHMARKS.md, 2026-12-05: the 0.5B decode step's stamps 71 -> 40 us on the
// H200; a one-block probe 0.08 us a launch against 0.24 with the exit count it replaced).
// The rule it asks of a stamped kernel: a return that only some of a block's threads take
// comes after the body's last __syncthreads (a thread waiting at the exit barrier is not at
// the body's). Returns the whole block takes may lie anywhere (attention_f32's splits).
// Measured cost: scripts/capture_overhead.py (timing pass vs untraced).
// A launch that cannot be stamped (a cuBLAS GEMM, an unstamped kernel) is timed by
// `globaltimer_stamp` kernels queued either side of it (stamps.py documents their error).
//
// Programmatic dependent launch (sm_90; packed.py, Session(pdl=True)): a stamped kernel may be
// launched before the kernel ahead of it in its stream has ended. The scope's first act,
// before any thread reads memory, is griddepcontrol.wait: it returns once the grids this one
// depends on have completed and their writes are visible. A start stamp is taken after the
// wait: the time is the kernel's own. Each block runs launch_dependents as it leaves (in the
// destructor): the kernel after this one launches as this grid's blocks finish, its blocks
// getting resident and waiting in their own griddepcontrol.wait while this grid's last blocks
// run. Triggered at the start instead, the next kernel's blocks sat resident through this
// grid's whole run and slowed the short kernels it overlapped: one-block norms and ropes of
// ~1.3-1.6 us took 0.2-0.3 us more in a pdl graph than in a stream, and 2 to 5 of the 0.5B
// step's 221 nodes disagreed by over 15%; triggered at the end, none did, and the untraced
// graph step did not slow (BENCHMARKS.md, 2026-12-05 on the H100). Launched without the
// attribute (every launch but a pdl graph's), both instructions return at once.
#pragma once

#define STAMP_SLOT_WORDS 2

// Measurement knobs of scripts/stamp_cost.py (defaults: the layout above). STAMP_END_WORDS:
// the blocks' end atomics spread over that many words, slot[1 + STAMP_END_STRIDE j] taking
// the blocks with linear index = j mod STAMP_END_WORDS (the end is their max), so fewer
// atomics queue on one address. STAMP_PROBE 1: start stamp only (no entry barrier, no end).
#ifndef STAMP_END_WORDS
#define STAMP_END_WORDS 1
#endif
#ifndef STAMP_END_STRIDE
#define STAMP_END_STRIDE 1
#endif
#ifndef STAMP_PROBE
#define STAMP_PROBE 0
#endif
// STAMP_EXIT_BARRIER 1: no entry barrier and no per-warp shared atomics; the block meets at a
// barrier in the scope's destructor (every thread passes it once: the scope ends every return
// path) and thread 0 folds the block's end in. Sound where no thread of a block that returned
// early is awaited by a __syncthreads in the body (every stamped kernel: a partial return is
// the body's last barrier-free stretch).
#ifndef STAMP_EXIT_BARRIER
#define STAMP_EXIT_BARRIER 0
#endif

__device__ __forceinline__ unsigned long long globaltimer_ns() {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    return g;
}

// STAMP_END_SOURCE (a stamp_cost.py knob): what the end word holds. 0: the global timer (the
// layout above); 1: a constant (no timer read: what the end costs without it); 2: the SM's
// cycle counter (%clock64: a cheaper read, not a time on the global clock).
#ifndef STAMP_END_SOURCE
#define STAMP_END_SOURCE 0
#endif
__device__ __forceinline__ unsigned long long launch_stamp_end_time() {
#if STAMP_END_SOURCE == 1
    return 1ull;
#elif STAMP_END_SOURCE == 2
    return clock64();
#else
    return globaltimer_ns();
#endif
}

// A small grid (at most STAMP_EXIT_BARRIER_BLOCKS blocks: a decode step's norms and adds are
// one block, 52 of the 0.5B shape's 245 launches) takes the exit-barrier path whatever
// STAMP_EXIT_BARRIER says: no entry barrier, no exit count, and a one-block grid's end is a
// plain store (stamp_cost.py, session 10: 0.30 -> 0.16 us a launch at one block). Uniform
// across the grid, so the branch costs a compare.
// Default 0 (off, the code compiled exactly as without it) until the H200 says; an A/B in one
// call: TRACEKIT_CUDA_DEFINES=-DSTAMP_EXIT_BARRIER_BLOCKS=1 (tracekit/kernels/cuda.py).
#ifndef STAMP_EXIT_BARRIER_BLOCKS
#define STAMP_EXIT_BARRIER_BLOCKS 0
#endif
__device__ __forceinline__ unsigned int launch_stamp_blocks() {
    return gridDim.x * gridDim.y * gridDim.z;
}
__device__ __forceinline__ bool launch_stamp_small_grid() {
#if STAMP_EXIT_BARRIER_BLOCKS > 0
    return launch_stamp_blocks() <= STAMP_EXIT_BARRIER_BLOCKS;
#else
    return false;
#endif
}

__device__ __forceinline__ unsigned int& launch_stamp_exited() {
    __shared__ unsigned int exited;  // threads of this block that have left the kernel
    return exited;
}

// STAMP_COMPACT: 1 (the default) the stamp described at the top. The rest are stamp_cost.py
// knobs: 0 the exit count of before (an entry barrier, a shared count of exited threads, the
// last one's atomic; the knobs above apply to it); 2 no barrier: each warp's first active lane
// folds its end in as it leaves (a warp's lanes leaving apart fold in apart); 3 as 2 with no
// branch on a null slot at the end (the untimed path runs the election predicated off). 2 and 3
// cost +20 us a launch at 4224 blocks (a thousand atomics on one word).
#ifndef STAMP_COMPACT
#define STAMP_COMPACT 1
#endif
__device__ __forceinline__ bool launch_stamp_block_first() {
    return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
}

// STAMP_PDL_TRIGGER (a measurement knob): where a block lets the next kernel launch. 1 (the
// default) as it leaves, as above; 0 at its start, right after the wait (before 2026-12-05).
#ifndef STAMP_PDL_TRIGGER
#define STAMP_PDL_TRIGGER 1
#endif

struct LaunchStamp {
    unsigned long long* slot;

    __device__ __forceinline__ explicit LaunchStamp(unsigned long long* s) : slot(s) {
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory");
#if STAMP_PDL_TRIGGER == 0
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#endif
#if STAMP_COMPACT
        if (slot != nullptr && launch_stamp_block_first() && (blockIdx.x | blockIdx.y | blockIdx.z) == 0)
            slot[0] = globaltimer_ns();
        return;
#endif
        if (slot == nullptr) return;
        const bool first = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
        const bool grid_first = first && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
        if (STAMP_PROBE == 1 || STAMP_EXIT_BARRIER || launch_stamp_small_grid()) {  // no exit count
            if (grid_first) slot[0] = globaltimer_ns();
            return;
        }
        if (first) launch_stamp_exited() = 0;
        if (grid_first) slot[0] = globaltimer_ns();
        __syncthreads();  // the kernel's first statement: every thread of the block is here
    }

    __device__ __forceinline__ ~LaunchStamp() {
#if __CUDA_ARCH__ >= 900 && STAMP_PDL_TRIGGER == 1
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#if STAMP_COMPACT == 1
        if (slot == nullptr) return;
        // barrier.sync without .aligned: a thread that returned early meets the block here
        // from another copy of this destructor (__syncthreads' bar.sync wants one instruction)
        asm volatile("barrier.sync 0;" ::: "memory");
        if (launch_stamp_block_first()) atomicMax(slot + 1, launch_stamp_end_time());
        return;
#elif STAMP_COMPACT >= 2
        // 2 leaves an untimed launch by a branch; 3 runs the election predicated off instead,
        // so the timed end fetches few code lines the untimed path has not
        if (STAMP_COMPACT == 2 && slot == nullptr) return;
        unsigned int lane_id;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane_id));
        if ((slot != nullptr) & (lane_id == (unsigned int)(__ffs(__activemask()) - 1)))
            atomicMax(slot + 1, launch_stamp_end_time());
        return;
#endif
        if (slot == nullptr || STAMP_PROBE == 1) return;
        const unsigned int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        if (STAMP_EXIT_BARRIER || launch_stamp_small_grid()) {
            __syncthreads();
            if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
                if (launch_stamp_blocks() == 1)  // the grid's only block: its end is the grid's
                    slot[1] = launch_stamp_end_time();
                else
                    atomicMax(&slot[1 + STAMP_END_STRIDE * (block % STAMP_END_WORDS)],
                              launch_stamp_end_time());
            }
            return;
        }
        // warp-aggregated: the threads leaving together count themselves once
        const unsigned int group = __activemask();
        const unsigned int lane = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        if ((lane & 31u) != (unsigned int)(__ffs(group) - 1)) return;
        const unsigned int block_threads = blockDim.x * blockDim.y * blockDim.z;
        const unsigned int n = __popc(group);
        if (atomicAdd(&launch_stamp_exited(), n) + n != block_threads) return;
        // no __threadfence: the end is when the last block has issued its work (its stores
        // may still drain), and a fence would lengthen every timed block by its latency
        atomicMax(&slot[1 + STAMP_END_STRIDE * (block % STAMP_END_WORDS)],
                  launch_stamp_end_time());  // this block's end; the grid's is the max
    }
};

// The start-only stamp of before per-launch times: a kernel that still opens with it is not in
// cuda.STAMPED (the rule wants the LaunchStamp scope), so a timed pass passes it null and times
// it with stamp kernels around it. Kept so such a kernel compiles; open with LaunchStamp instead.
__device__ __forceinline__ void node_start_stamp(unsigned long long* stamp) {
    if (stamp != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 &&
        threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        *stamp = globaltimer_ns();
    }
}

// Host stand-in for tracekit/kernels/stamp.cuh (found first: host_build puts this folder before
// tracekit/kernels on the include path). The real scope reads the GPU's global timer with
// inline PTX, which the host assembler cannot take; kernels run on the host by
// cuda_block.h are always given a null stamp slot, with which the real scope does nothing.
#pragma once
#include <atomic>

#define STAMP_SLOT_WORDS 3

struct LaunchStamp {
    explicit LaunchStamp(unsigned long long* slot) {
        if (slot != nullptr) __builtin_trap();  // a host run passes null (no timer here)
    }
};

// The global timer as a counter that only goes up, one step a read: a kernel's marks
// (matvec.cu's MMVQ_ST_TIMELINE) come back in the order the code took them, which is what a
// host test of them can check.
inline unsigned long long globaltimer_ns() {
    static std::atomic<unsigned long long> now{1000};
    return now.fetch_add(1) + 1;
}

// Host stand-in for tracekit/kernels/stamp.cuh (found first: host_build puts this folder before
// tracekit/kernels on the include path). The real scope reads the GPU's global timer with
// inline PTX, which the host assembler cannot take; kernels run on the host by
// cuda_block.h are always given a null stamp slot, with which the real scope does nothing.
#pragma once

#define STAMP_SLOT_WORDS 3

struct LaunchStamp {
    explicit LaunchStamp(unsigned long long* slot) {
        if (slot != nullptr) __builtin_trap();  // a host run passes null (no timer here)
    }
};

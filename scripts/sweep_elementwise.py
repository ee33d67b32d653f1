"""Sweep the streaming kernels' knobs (grid cap in blocks per SM, float4s in flight per thread,
evict-first hints) against torch.add, all measured in one run on the GPU."""

from __future__ import annotations

import itertools

import cupy as cp

from tracekit.kernels import cuda, elementwise
from tracekit.kernels.ceilings import gpu_times, median

N = 64 * 2**20
xs = [cp.random.standard_normal(N, dtype=cp.float32) for _ in range(3)]
ys = [cp.random.standard_normal(N, dtype=cp.float32) for _ in range(3)]
zs = [cp.empty(N, dtype=cp.float32) for _ in range(3)]


def gbps(fn, nbytes):
    return nbytes / median(gpu_times(fn, warmup=5, iters=30)) / 1e9


try:
    import torch

    tx = [torch.as_tensor(x, device="cuda") for x in xs]
    ty = [torch.as_tensor(y, device="cuda") for y in ys]
    tz = [torch.as_tensor(z, device="cuda") for z in zs]
    t_add = gbps(lambda i: torch.add(tx[i % 3], ty[i % 3], out=tz[i % 3]), 12 * N)
except Exception as e:  # torch absent: ratios against nothing
    print("torch unavailable:", e)
    t_add = float("nan")
print(f"torch.add {t_add:.0f} GB/s")
for unroll, hints in itertools.product((1, 2, 4), (0, 1)):
    # the kernels read both from elementwise.kernel_defines(), the grids from the same values
    elementwise.STREAM_UNROLL, elementwise.STREAM_HINTS = unroll, hints
    cuda.module.cache_clear()
    cuda.kernel.cache_clear()
    for bps in (8, 16, 32, 64, 100000):
        elementwise.BLOCKS_PER_SM = bps
        add = gbps(
            lambda i: elementwise.launch_add_f32(xs[i % 3], ys[i % 3], out=zs[i % 3]), 12 * N
        )
        silu = gbps(lambda i: elementwise.launch_silu_f32(xs[i % 3], out=zs[i % 3]), 8 * N)
        print(
            f"unroll {unroll} hints {hints} blocks/SM {bps:6d}: add {add:.0f} GB/s "
            f"({add / t_add:.3f}x torch)  silu {silu:.0f} GB/s ({silu / t_add:.3f}x)"
        )

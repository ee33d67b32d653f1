"""Where a 30-token embed gather's device time goes (BENCHMARKS.md, "30-token embed").

    python scripts/embed_latency.py

Times (queued behind a spin kernel, host launch cost excluded: ceilings.gpu_times_queued) an
empty kernel, kernels that only store a [30, dim] f32 output in different patterns, one that
loads the ids then stores, tracekit's embed_rows_q4_0, and two stripped-down Q4_0 gathers
(device ids with 32-bit indices; ids passed by value as a kernel parameter), at dim 4096 and
896 (the seed's 0.5B example).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SRC = r"""
#include "quant_decoders.cuh"
struct Ids { int v[64]; };
extern "C" __global__ void k_empty() {}
extern "C" __global__ void k_store(float* out, int total) {  // 2 float4 per thread (32 B)
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g < total) {
        float4* o = reinterpret_cast<float4*>(out) + 2 * g;
        o[0] = make_float4(1, 2, 3, 4); o[1] = make_float4(5, 6, 7, 8);
    }
}
extern "C" __global__ void k_store1(float* out) { if (threadIdx.x == 0) out[0] = 1.0f; }
extern "C" __global__ void k_store4(float* out, int total4) {  // 1 float4 per thread
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g < total4) reinterpret_cast<float4*>(out)[g] = make_float4(1, 2, 3, 4);
}
extern "C" __global__ void k_idstore(const int* ids, float* out, int total, int cpr) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g < total) {
        float f = (float)ids[g / cpr];
        float4* o = reinterpret_cast<float4*>(out) + 2 * g;
        o[0] = make_float4(f, 2, 3, 4); o[1] = make_float4(5, 6, 7, 8);
    }
}
template <class D>
__device__ void gat(const u8* raw, int id, float* out, int t, int c, int n_embd, long long rb) {
    constexpr int CPB = D::QK / 8;
    float v[8];
    D::dec8(raw + id * rb + (c / CPB) * D::TS, c % CPB, v);
    float4* o = reinterpret_cast<float4*>(out + (long long)t * n_embd + 8 * c);
    o[0] = make_float4(v[0], v[1], v[2], v[3]); o[1] = make_float4(v[4], v[5], v[6], v[7]);
}
extern "C" __global__ void k_dev32(const u8* raw, const int* ids, float* out, int total, int n) {
    int g = blockIdx.x * blockDim.x + threadIdx.x, cpr = n / 8;
    if (g < total) {
        int t = g / cpr;
        gat<Fast<Q4_0>>(raw, ids[t], out, t, g - t * cpr, n, (long long)(n / 32) * 18);
    }
}
extern "C" __global__ void k_val32(const u8* raw, Ids ids, float* out, int total, int n) {
    int g = blockIdx.x * blockDim.x + threadIdx.x, cpr = n / 8;
    if (g < total) {
        int t = g / cpr;
        gat<Fast<Q4_0>>(raw, ids.v[t], out, t, g - t * cpr, n, (long long)(n / 32) * 18);
    }
}
"""


def main() -> int:
    import cupy as cp

    from tracekit.kernels import cuda as tkcuda

    mod = cp.RawModule(code=SRC, options=tkcuda._OPTIONS)
    names = ("k_empty", "k_store", "k_store1", "k_store4", "k_idstore", "k_dev32", "k_val32")
    functions = {n: mod.get_function(n) for n in names}
    for dim in (4096, 896):
        _one_width(functions, dim)
    return 0


def _one_width(f: dict, dim: int, vocab: int = 32000, nt: int = 30) -> None:
    import cupy as cp

    from tracekit.kernels import elementwise, embed
    from tracekit.kernels.ceilings import gpu_times_queued
    from tracekit.quants import quant_type

    qt = quant_type("Q4_0")
    raw = cp.random.randint(0, 255, qt.nbytes((vocab, dim)), dtype=cp.uint8)
    ids_h = np.random.default_rng(0).integers(0, vocab, nt, dtype=np.int32)
    ids = cp.asarray(ids_h)
    by_value = np.zeros(1, dtype=np.dtype([("v", np.int32, (64,))], align=True))
    by_value["v"][0, :nt] = ids_h
    out = cp.empty((nt, dim), cp.float32)
    total = np.int32(nt * dim // 8)
    blocks = (int(total) + 255) // 256
    d, cpr = np.int32(dim), np.int32(dim // 8)
    cases = {
        "tracekit empty_kernel (1x32)": lambda i: elementwise.launch_empty(),
        f"empty {blocks}x256": lambda i: f["k_empty"]((blocks,), (256,), ()),
        "store 4 B (1 thread)": lambda i: f["k_store1"]((1,), (32,), (out,)),
        "store 2 float4/thread": lambda i: f["k_store"]((blocks,), (256,), (out, total)),
        "store 1 float4/thread": lambda i: f["k_store4"]((2 * blocks,), (256,), (out, 2 * total)),
        "tracekit fill_f32": lambda i: elementwise.launch_fill_f32(out),
        "id load + store": lambda i: f["k_idstore"]((blocks,), (256,), (ids, out, total, cpr)),
        "tracekit embed_rows_q4_0": lambda i: embed.launch_embed_rows(
            raw, qt, (vocab, dim), ids, out=out, ids_checked=True
        ),
        "gather, device ids, i32": lambda i: f["k_dev32"](
            (blocks,), (256,), (raw, ids, out, total, d)
        ),
        "gather, ids by value": lambda i: f["k_val32"](
            (blocks,), (256,), (raw, by_value[0], out, total, d)
        ),
    }
    print(f"dim {dim}: {nt} tokens, {blocks} blocks of 256")
    for name, fn in cases.items():
        t = statistics.median(gpu_times_queued(fn, launches=200, reps=7, warmup=20))
        print(f"  {name:30s} {t * 1e6:6.2f} us")


if __name__ == "__main__":
    sys.exit(main())

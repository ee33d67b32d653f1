"""Device ceilings, measured (never hard-coded) once per device and cached as JSON.

    copy_bandwidth_Bps   a large device-to-device copy: bytes read + bytes written per second
    read_bandwidth_Bps   cupy: the same buffer read by read_stream (its best configuration of
                         READ_FLOOR_CONFIGS), bytes read per second
    write_bandwidth_Bps  cupy: the same buffer written by cudaMemsetAsync, bytes per second
                         (a stream of one direction can beat the copy's mix of both: on the
                         H100, reads ran 1-3% faster, so the bound model's bandwidth is the
                         highest of the three: trace/perf.py's bandwidth_ceiling)
    launch_overhead_s    the CUDA-event time of one empty kernel from an idle device (the
                         host's launch latency, kept for reference); on NumPy, one tiny ufunc
    peak_flops           the highest of peak_flops_by_path
    peak_flops_by_path   flop/s per math path: ``f16_tensor_core`` (an f16 GEMM with f32
                         accumulation through cuBLASLt, 8192^3), ``f32_cuda_core`` (cupy's
                         f32 matmul: cuBLAS SGEMM, no TF32), ``int8_dp4a`` (DP4A chains on
                         every SM: the q8 matvec's path), ``int8_tensor_core`` (int8
                         mma.sync m16n8k32 chains on every SM: mmq's path); on NumPy
                         ``f32_matmul``
    launch_floor_s       the device cost of a minimal kernel per launch mode, timed as the
                         tracer times every launch (its own LaunchStamp start to end): ``stream``
                         (empty stamped kernels back to back in a busy stream, queued behind a
                         spin kernel so the host's launch rate does not show) and ``graph``
                         (as the nodes of one CUDA graph); on NumPy ``host`` (one tiny ufunc)
    launch_spacing_s     cupy: start-to-start spacing of empty kernels back to back (stream, and
                         graph nodes): the gap a launch adds, which the idle breakdown shows
    ridge_flop_per_byte  peak_flops / copy_bandwidth_Bps: the roofline's ridge point

The cache lives in ``$TRACEKIT_CACHE`` (else ``~/.cache/tracekit``) as
``ceilings-<backend>-<device slug>.json``; ``force=True`` re-measures. The runner's bound
classification (launch / bandwidth / compute) reads these numbers and writes them into the trace.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REQUIRED_KEYS = (
    "copy_bandwidth_Bps",
    "launch_overhead_s",
    "peak_flops",
    "peak_flops_by_path",
    "launch_floor_s",
    "ridge_flop_per_byte",
    "measured_at",
    "device",
    "method",
)
#: The measured streams that bound a launch's bytes, in the order a tie is named: the bound
#: model's bandwidth is the highest (a kernel's bytes cannot move faster than the fastest of
#: them; one direction alone can beat the copy's mix of both).
BANDWIDTH_KEYS = ("copy_bandwidth_Bps", "read_bandwidth_Bps", "write_bandwidth_Bps")


def bandwidth_ceiling(c: Any) -> tuple[float, str]:
    """The bound model's bandwidth of ceilings ``c`` and the stream that set it ("copy",
    "read" or "write"): the highest measured (older ceilings hold the copy alone)."""
    got = [(float(c[k]), k.split("_")[0]) for k in BANDWIDTH_KEYS if c.get(k)]
    return max(got, key=lambda v: v[0])


#: GPU copy: 512 MiB each way, ten times the H200's 50 MB L2, so the copy streams from HBM.
GPU_COPY_BYTES = 512 * 2**20
GPU_GEMM_N = 8192
#: CPU copy: 64 MiB, past the last-level cache of common CPUs; the matmul is 768^3 so the CPU
#: measurement stays well under ~2 s on 2 cores.
CPU_COPY_BYTES = 64 * 2**20
CPU_GEMM_N = 768


def cache_dir() -> Path:
    """``$TRACEKIT_CACHE`` if set, else ``~/.cache/tracekit``."""
    env = os.environ.get("TRACEKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tracekit"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "device"


def cache_path(backend: Any) -> Path:
    """Where the ceilings of this backend's device are cached."""
    return cache_dir() / f"ceilings-{_slug(backend.name)}-{_slug(backend.device_name())}.json"


# -- timing helpers (shared with tracekit bench) ------------------------------------------------
def gpu_times(fn: Callable[[int], Any], warmup: int = 3, iters: int = 20) -> list[float]:
    """Seconds per call of ``fn(i)`` from CUDA events around each call, after ``warmup`` calls.

    ``i`` is the iteration number, so a caller can rotate through several inputs (larger than
    L2 in total) and never time a warm cache.
    """
    import cupy

    for i in range(warmup):
        fn(i)
    starts = [cupy.cuda.Event() for _ in range(iters)]
    ends = [cupy.cuda.Event() for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(warmup + i)
        ends[i].record()
    ends[-1].synchronize()
    return [cupy.cuda.get_elapsed_time(a, b) * 1e-3 for a, b in zip(starts, ends, strict=True)]


def gpu_times_queued(
    fn: Callable[[int], Any], launches: int = 20, reps: int = 5, warmup: int = 3
) -> list[float]:
    """Seconds per call of ``fn(i)`` as the GPU runs the calls back to back, host overhead
    excluded: a spin kernel holds the GPU while the host queues ``launches`` calls between two
    events. This is a launch-bound kernel's own device time (the host side of a CuPy launch,
    ~10 µs, would otherwise be all that an event pair sees). ``fn`` must not synchronize.
    """
    import cupy

    from tracekit.kernels.elementwise import launch_spin

    for i in range(warmup):
        fn(i)
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    t0 = time.perf_counter()
    for i in range(launches):
        fn(warmup + i)
    host_s = time.perf_counter() - t0  # the queueing must finish inside the spin
    stream.synchronize()
    out = []
    for r in range(reps):
        launch_spin(int(3 * host_s * 1e9) + 200_000)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for i in range(launches):
            fn(warmup + (r + 1) * launches + i)
        end.record()
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3 / launches)
    return out


class _OwnTimer:
    """The stamper (``tracekit.kernels.cuda.set_stamper``) of :func:`gpu_own_times`: each
    stamped launch made through ``cuda.launch`` gets a stamp slot of its own, in call order."""

    def __init__(self, capacity: int) -> None:
        import cupy

        from tracekit.kernels.elementwise import SLOT_WORDS

        self.words = SLOT_WORDS
        self.capacity = capacity
        self.buf = cupy.zeros(capacity * SLOT_WORDS, dtype=cupy.uint64)
        self.calls: list[list[int]] = []  # per call of the timed function, its launches' slots
        self.used = 0  # slots taken this round

    def issue(self, entry: Any) -> None:
        from tracekit.kernels.cuda import NO_STAMP, STAMPED

        if not isinstance(entry, tuple):
            raise RuntimeError(
                "gpu_own_times: a host call (a cuBLAS GEMM) cannot time itself; only stamped "
                "kernels have an own device time"
            )
        fn, grid, block, args, smem = entry
        name = getattr(fn, "name", None)
        if name not in STAMPED or not (args and isinstance(args[-1], np.uint64)
                                       and args[-1] == NO_STAMP):  # fmt: skip
            raise RuntimeError(
                f"gpu_own_times: kernel {name!r} is not stamped (stamp.cuh: its last parameter "
                "the stamp slot, passed as cuda.NO_STAMP), so it has no own device time"
            )
        k = self.used
        if k >= self.capacity:
            raise RuntimeError(f"gpu_own_times: more than {self.capacity} launches to time")
        slot = self.buf[self.words * k : self.words * (k + 1)]
        fn(grid, block, (*args[:-1], slot), shared_mem=smem)
        self.calls[-1].append(k)
        self.used += 1


def gpu_own_times(
    fn: Callable[[int], Any], launches: int = 20, reps: int = 5, warmup: int = 3,
    max_launches_per_call: int = 4,
) -> list[float]:  # fmt: skip
    """Per round, the median own device time of a call of ``fn(i)``: the sum of its launches'
    LaunchStamp start-to-end times (block 0's entry to the last thread's exit, stamp.cuh), the
    time a trace gives the same launches. The calls run as :func:`gpu_times_queued` runs them
    (``launches`` back to back behind a spin kernel, ``reps`` rounds); unlike its time per call,
    this one excludes the gap between one launch's end and the next one's start. Every launch
    ``fn`` makes must be a stamped kernel issued through ``cuda.launch`` (else RuntimeError).
    """
    import cupy

    from tracekit.kernels import cuda
    from tracekit.kernels.elementwise import launch_spin

    for i in range(warmup):
        fn(i)
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    timer = _OwnTimer(launches * max_launches_per_call)
    out = []
    for r in range(reps):
        timer.calls, timer.used = [], 0
        timer.buf.fill(0)
        launch_spin(2_000_000)  # 2 ms: the host queues the calls before the first one runs
        cuda.set_stamper(timer)
        try:
            for i in range(launches):
                timer.calls.append([])
                fn(warmup + r * launches + i)
                if not timer.calls[-1]:
                    raise RuntimeError("gpu_own_times: a call of fn launched no stamped kernel")
        finally:
            cuda.set_stamper(None)
        stream.synchronize()
        w = timer.buf.get().reshape(-1, timer.words).astype(np.int64)
        per_call = []
        for slots in timer.calls:
            start, end = w[slots, 0], w[slots, 1]
            if (start == 0).any() or (end < start).any():
                raise RuntimeError("gpu_own_times: a stamped launch wrote no start/end stamp")
            per_call.append(float((end - start).sum()) * 1e-9)
        out.append(median(per_call))
    return out


def host_times(fn: Callable[[int], Any], warmup: int = 2, iters: int = 10) -> list[float]:
    """Seconds per call of ``fn(i)`` on the host clock (``time.perf_counter``)."""
    for i in range(warmup):
        fn(i)
    out = []
    for i in range(iters):
        t0 = time.perf_counter()
        fn(warmup + i)
        out.append(time.perf_counter() - t0)
    return out


def queued_copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """A device-to-device copy of ``nbytes`` (cudaMemcpyAsync), bytes read + written per second,
    timed as the kernel benchmarks time their launches (:func:`gpu_times_queued`, the median of
    5 rounds of 20 back to back): the denominator of their "% of copy"."""
    import cupy

    src = cupy.ones(nbytes // 4, cupy.float32)
    dst = cupy.empty_like(src)
    copy = lambda i: dst.data.copy_from_device_async(src.data, src.nbytes)  # noqa: E731
    return 2 * src.nbytes / median(gpu_times_queued(copy, launches=20, reps=5, warmup=3))


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


# -- measurement ------------------------------------------------------------------------------
def _measure_cupy() -> dict[str, Any]:
    import cupy

    from tracekit.kernels.elementwise import launch_empty
    from tracekit.kernels.matmul import gemm_f16_f32

    n = GPU_COPY_BYTES // 4
    src = cupy.ones(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)

    def copy(_: int) -> None:  # cudaMemcpyAsync device-to-device on the current stream
        dst.data.copy_from_device_async(src.data, src.nbytes)

    copy_s = median(gpu_times(copy, warmup=3, iters=20))
    copy_bps = 2 * src.nbytes / copy_s
    read_bps, read_how = _read_bandwidth(src.view(cupy.uint8))
    write_s = median(gpu_times(lambda i: dst.data.memset_async(0, dst.nbytes), warmup=3, iters=20))

    single = median(gpu_times(lambda i: launch_empty(), warmup=20, iters=200))
    burst = 1000
    b2b = median(gpu_times(lambda i: [launch_empty() for _ in range(burst)], 1, 5)) / burst
    cupy.cuda.get_current_stream().synchronize()
    host = median(host_times(lambda i: [launch_empty() for _ in range(burst)], 1, 5)) / burst
    cupy.cuda.get_current_stream().synchronize()

    # the spacing of empty kernels back to back (kept for reference: a stamped kernel's own
    # time excludes it, the gaps between launches show it)
    stream_spacing = median(gpu_times_queued(lambda i: launch_empty(), launches=200, reps=5))
    graph_spacing = _graph_node_floor(launch_empty, nodes=GRAPH_FLOOR_NODES)
    stream_floor, graph_floor = _stamped_floor(graph=False), _stamped_floor(graph=True)

    m = GPU_GEMM_N
    a16 = (cupy.random.standard_normal((m, m), dtype=cupy.float32) * 0.01).astype(cupy.float16)
    b16 = (cupy.random.standard_normal((m, m), dtype=cupy.float32) * 0.01).astype(cupy.float16)
    c32 = cupy.empty((m, m), dtype=cupy.float32)
    gemm_s = median(gpu_times(lambda i: gemm_f16_f32(a16, b16, c32), warmup=3, iters=10))
    peak = 2 * m**3 / gemm_s
    a32, b32 = a16.astype(cupy.float32), b16.astype(cupy.float32)
    sgemm_s = median(gpu_times(lambda i: cupy.matmul(a32, b32, out=c32), warmup=2, iters=5))
    peaks = {"f16_tensor_core": peak, "f32_cuda_core": 2 * m**3 / sgemm_s}
    peaks["int8_dp4a"] = _dp4a_peak()  # mmvq's math path (kernels/matvec.py)
    peaks["int8_tensor_core"] = _imma_peak()  # mmq's math path (kernels/mmq.py)
    return dict(
        copy_bandwidth_Bps=copy_bps,
        read_bandwidth_Bps=read_bps,
        write_bandwidth_Bps=dst.nbytes / write_s,
        launch_overhead_s=single,
        launch_back_to_back_s=b2b,
        launch_host_s=host,
        launch_floor_s={"stream": stream_floor, "graph": graph_floor},
        launch_spacing_s={"stream": stream_spacing, "graph": graph_spacing},
        peak_flops=max(v for v in peaks.values() if v),
        peak_flops_by_path=peaks,
        method=(
            f"copy: cudaMemcpyAsync of {GPU_COPY_BYTES // 2**20} MiB device-to-device, bytes read + "
            "written / median CUDA-event time of 20 after 3 warm-up; read: the same buffer read "
            f"by read_stream ({read_how}, its best of READ_FLOOR_CONFIGS, median of 10 each), "
            "bytes / time; write: cudaMemsetAsync of the same buffer, median of 20; launch: "
            "median CUDA-event "
            "time around one empty-kernel launch (200 after 20 warm-up), also back-to-back per "
            f"launch (launch_back_to_back_s, bursts of {burst}) and host time per launch "
            f"(launch_host_s); launch_floor_s: the median own time (LaunchStamp start to end, "
            f"as the tracer times every launch) of {STAMPED_FLOOR_LAUNCHES} empty stamped kernels "
            "queued behind a spin kernel (stream) or as the nodes of one CUDA graph (graph); "
            "launch_spacing_s.stream: 200 empty kernels queued behind a spin kernel, event time "
            f"/ 200, median of 5; launch_spacing_s.graph: one CUDA graph of {GRAPH_FLOOR_NODES} "
            "empty-kernel nodes, event time / nodes, median of 10; peak: "
            f"cuBLASLt matmul f16 in, f32 accumulate/out, {m}^3, 2*n^3 / median CUDA-event "
            f"time of 10 after 3 warm-up; f32_cuda_core: cupy.matmul f32 (SGEMM) {m}^3, median of 5"
        ),
    )


#: Empty-kernel nodes in the graph that measures a graph node's launch floor.
GRAPH_FLOOR_NODES = 1000
#: Empty stamped kernels whose own times give the launch floor.
STAMPED_FLOOR_LAUNCHES = 200


#: The int8 dot-product peak: DP4A (4 multiply-adds = 8 ops on int8 pairs) in 8 independent
#: chains per thread, enough warps to fill every SM.
_DP4A_SRC = r"""
extern "C" __global__ void dp4a_peak(int* out, int iters, int seed) {
    int a[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = (int)(threadIdx.x * (i + 1)) ^ seed;
    const int b = seed * 0x01010101 + (int)blockIdx.x;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = __dp4a(a[i], b, a[i]);
    }
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += a[i];
    if (s == 0x7FFFFFFF) out[0] = s;  // keeps the chains live; never true for these seeds
}
"""
DP4A_ITERS = 4096


def _chain_peak(src: str, name: str, block: int, iters: int, ops_per_thread_iter: int) -> float:
    """op/s of a kernel ``name(out, iters, seed)`` whose threads run independent chains of one
    instruction: 8 blocks per SM, the median of 10 timed launches."""
    import cupy

    fn = cupy.RawKernel(src, name)
    sms = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    grid = 8 * sms
    args = (cupy.zeros(1, cupy.int32), np.int32(iters), np.int32(12345))
    s = median(gpu_times(lambda i: fn((grid,), (block,), args), warmup=2, iters=10))
    return grid * block * iters * ops_per_thread_iter / s


def _dp4a_peak() -> float:
    """int8 op/s of DP4A on this device (8 chains a thread, 8 ops per instruction: 4 products,
    4 adds)."""
    return _chain_peak(_DP4A_SRC, "dp4a_peak", 256, DP4A_ITERS, 8 * 8)


#: The int8 tensor-core peak: mma.sync m16n8k32 (16 x 8 x 32 multiply-adds = 8192 ops per warp
#: instruction) in 8 independent accumulator chains per warp, 4 warps per block, enough blocks to
#: fill every SM. mmq issues the same instruction (and m16n8k16 for 16-value scale groups).
_IMMA_SRC = r"""
extern "C" __global__ void imma_peak(int* out, int iters, int seed) {
    unsigned a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = (threadIdx.x * (i + 3)) ^ (unsigned)seed;
    b[0] = (unsigned)seed * 0x01010101u + blockIdx.x, b[1] = b[0] ^ threadIdx.x;
    int c[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[j][e] = j + e;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
            asm volatile(
                "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+r"(c[j][0]), "+r"(c[j][1]), "+r"(c[j][2]), "+r"(c[j][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 0x7FFFFFFF) out[0] = s;  // keeps the chains live; never true for these seeds
}
"""
IMMA_ITERS = 4096


def _imma_peak() -> float:
    """int8 op/s of mma.sync m16n8k32 on this device (8 chains a warp, 8192 ops per warp
    instruction: 256 per thread)."""
    return _chain_peak(_IMMA_SRC, "imma_peak", 128, IMMA_ITERS, 8 * 8192 // 32)


#: The read floor of a bandwidth-bound kernel: a grid-strided stream of 16-byte loads over a
#: buffer, READ_UNROLL loads in flight a thread, folded with XOR into one word (so no load is
#: dead code, and the result has a NumPy twin: :func:`read_stream_reference`). bench_matvec
#: times it on a matvec's own weight bytes: the fastest a kernel can read those bytes back to
#: back in a stream, which a matvec's "% of copy" is then read against. It is stamped (its last
#: parameter, stamp.cuh), so :func:`gpu_own_times` times it as a trace times a matvec.
_READ_SRC = r"""
#include "stamp.cuh"
// READ_HINT 1: the load skips L1 and asks L2 for the whole 256-byte line group (a prefetch
// hint, sm_80+); 0: the read-only path (__ldg)
__device__ __forceinline__ uint4 read16(const uint4* p) {
#if READ_HINT
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    return __ldg(p);
#endif
}
extern "C" __global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ p,
                                                               long long n16, unsigned* out,
                                                               unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);  // timed by gpu_own_times as a trace times a launch
    unsigned a = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (READ_UNROLL - 1) * stride < n16; i += READ_UNROLL * stride) {
        uint4 v[READ_UNROLL];
#pragma unroll
        for (int u = 0; u < READ_UNROLL; ++u) v[u] = read16(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < READ_UNROLL; ++u) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = read16(p + i);
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a ^= __shfl_xor_sync(0xFFFFFFFFu, a, o);
    if ((threadIdx.x & 31) == 0) atomicXor(out, a);
}
"""


@functools.cache
def read_stream_kernel(unroll: int, hint: bool = False) -> Any:
    """The compiled :data:`_READ_SRC` with ``unroll`` 16-byte loads in flight a thread
    (``hint``: each load with L1 bypassed and a 256-byte L2 prefetch)."""
    import cupy

    if unroll < 1:
        raise ValueError(f"read_stream unroll {unroll} must be >= 1")
    from tracekit.kernels.cuda import options, register_stamped

    register_stamped(["read_stream"])
    opts = (*options("ceilings"), f"-DREAD_UNROLL={unroll}", f"-DREAD_HINT={int(hint)}")
    return cupy.RawKernel(_READ_SRC, "read_stream", options=opts)


def launch_read_stream(fn: Any, buf: Any, out: Any, blocks_per_sm: int) -> None:
    """XOR of ``buf``'s whole 16-byte words into ``out[0]`` (uint32, not reset here), a grid
    of ``blocks_per_sm`` 256-thread blocks an SM. ``buf``: a uint8 CuPy array, 16-byte aligned."""
    from tracekit.kernels.elementwise import sm_count

    if buf.data.ptr % 16:
        raise ValueError(
            f"read_stream buffer starts {buf.data.ptr % 16} bytes past a 16-byte boundary"
        )
    if out.dtype != np.uint32 or out.size < 1:
        raise ValueError(
            f"read_stream out must be uint32 with a word, not {out.dtype} x {out.size}"
        )
    from tracekit.kernels import cuda

    args = (buf, np.int64(buf.nbytes // 16), out, cuda.NO_STAMP)
    cuda.launch(fn, (blocks_per_sm * sm_count(), 1, 1), (256, 1, 1), args)


def read_stream_reference(buf: np.ndarray) -> int:
    """:func:`launch_read_stream`'s word, in NumPy: the XOR of the buffer's whole 16-byte
    words, as uint32 words."""
    words = np.ascontiguousarray(buf[: buf.nbytes // 16 * 16]).view(np.uint32)
    return int(np.bitwise_xor.reduce(words)) if words.size else 0


#: read_stream configurations read_floor tries: (loads in flight a thread, L2 prefetch hint,
#: blocks an SM); the best is the floor.
READ_FLOOR_CONFIGS = tuple((u, h, b) for u in (4, 8, 16) for h in (False, True) for b in (2, 4, 8))


def read_floor(
    raws: list[Any], timers: dict[str, Callable[[Callable[[int], Any]], float]]
) -> dict[str, tuple[float, str]]:
    """The read floor of a weight: per timer (e.g. ``{"queued": ..., "own": ...}``, each
    taking ``fn(i)`` and returning seconds a call), the best read_stream time over
    :data:`READ_FLOOR_CONFIGS` and that configuration in words. Call ``i`` reads ``raws[i %
    len(raws)]`` (copies of the weight's bytes, rotated past the L2). Each variant's XOR is
    checked against :func:`read_stream_reference` first (RuntimeError if it differs)."""
    import cupy

    want = read_stream_reference(cupy.asnumpy(raws[0]))
    word = cupy.zeros(1, cupy.uint32)
    kernels = {(u, h): read_stream_kernel(u, h) for u, h, _ in READ_FLOOR_CONFIGS}
    for (u, h), fn in kernels.items():
        word.fill(0)
        launch_read_stream(fn, raws[0], word, 4)
        got = int(word.get()[0])
        if got != want:
            raise RuntimeError(
                f"read_stream (unroll {u}, hint {h}) XOR {got:#x} != NumPy's {want:#x}"
            )
    best: dict[str, tuple[float, str]] = {}
    for u, h, b in READ_FLOOR_CONFIGS:
        fn = kernels[(u, h)]
        for name, timer in timers.items():
            s = timer(lambda i, fn=fn, b=b: launch_read_stream(fn, raws[i % len(raws)], word, b))
            if name not in best or s < best[name][0]:
                best[name] = (s, f"unroll {u}, {b} blocks/SM{', L2 256B hint' if h else ''}")
    return best


def _read_bandwidth(buf: Any) -> tuple[float, str]:
    """Bytes per second of the fastest read_stream configuration over ``buf`` (read_floor: its
    XOR checked first; CUDA-event medians of 10), and that configuration in words."""
    s, how = read_floor([buf], {"events": lambda fn: median(gpu_times(fn, 2, 10))})["events"]
    return buf.nbytes // 16 * 16 / s, how


def _stamped_floor(graph: bool, launches: int = STAMPED_FLOOR_LAUNCHES) -> float:
    """Median own time (stamp.cuh's LaunchStamp: block 0's entry to the last thread's exit) of
    an empty stamped kernel back to back in a busy stream, or as a CUDA graph's nodes."""
    import cupy

    from tracekit.kernels.elementwise import SLOT_WORDS, launch_empty_stamped, launch_spin

    buf = cupy.zeros(launches * SLOT_WORDS, dtype=cupy.uint64)
    slots = [buf.data.ptr + 8 * SLOT_WORDS * i for i in range(launches)]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        launch_empty_stamped(slots[0])  # compiled and loaded before anything is timed
        stream.synchronize()
        if graph:
            stream.begin_capture()
            try:
                for p in slots:
                    launch_empty_stamped(p)
            finally:
                g = stream.end_capture()
            g.launch(stream)  # upload and warm
            buf.fill(0)
            g.launch(stream)
        else:
            buf.fill(0)
            launch_spin(2_000_000)  # 2 ms: the host queues every launch before the first runs
            for p in slots:
                launch_empty_stamped(p)
        stream.synchronize()
    w = buf.get().reshape(launches, SLOT_WORDS)
    if (w[:, 1] < w[:, 0]).any() or (w[:, 0] == 0).any():
        raise RuntimeError("an empty stamped kernel wrote no start/end stamp")
    return float(np.median(w[:, 1] - w[:, 0])) * 1e-9


def _graph_node_floor(launch: Callable[[], Any], nodes: int) -> float:
    """Seconds per node of a CUDA graph of ``nodes`` back-to-back ``launch()`` kernels."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            for _ in range(nodes):
                launch()
        finally:
            graph = stream.end_capture()
        graph.launch(stream)  # upload and warm
        stream.synchronize()
        times = gpu_times(lambda i: graph.launch(stream), warmup=2, iters=10)
    return median(times) / nodes


def _measure_numpy() -> dict[str, Any]:
    n = CPU_COPY_BYTES // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    copy_s = median(host_times(lambda i: np.copyto(dst, src), warmup=2, iters=7))
    copy_bps = 2 * src.nbytes / copy_s

    a, b, c = np.ones(1, np.float32), np.ones(1, np.float32), np.empty(1, np.float32)
    reps = 2000

    def tiny(_: int) -> None:
        for _ in range(reps):
            np.add(a, b, out=c)

    op_s = median(host_times(tiny, warmup=1, iters=5)) / reps

    m = CPU_GEMM_N
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, m), dtype=np.float32)
    y = rng.standard_normal((m, m), dtype=np.float32)
    mm_s = median(host_times(lambda i: np.matmul(x, y), warmup=1, iters=5))
    return dict(
        copy_bandwidth_Bps=copy_bps,
        launch_overhead_s=op_s,
        launch_floor_s={"host": op_s},
        peak_flops=2 * m**3 / mm_s,
        peak_flops_by_path={"f32_matmul": 2 * m**3 / mm_s},
        method=(
            f"copy: np.copyto of {CPU_COPY_BYTES // 2**20} MiB, bytes read + written / median "
            f"host time of 7 after 2 warm-up; launch: one np.add on 1-element arrays (the cost "
            f"of dispatching a tiny op), median of 5 bursts of {reps}; peak: f32 np.matmul "
            f"{m}^3, 2*n^3 / median host time of 5"
        ),
    )


def _valid(c: Any) -> bool:
    if not (isinstance(c, dict) and all(k in c for k in REQUIRED_KEYS)):
        return False
    # a cupy cache from before the floor was the stamped time (it held the spacing), or before
    # the int8 tensor-core peak was measured (it held null), re-measures
    if c.get("backend") != "cupy":
        return True
    peaks = c.get("peak_flops_by_path")
    return (
        "launch_spacing_s" in c
        and isinstance(peaks, dict)
        and bool(peaks.get("int8_tensor_core"))
        and bool(c.get("read_bandwidth_Bps"))  # (before the read and write streams: re-measure)
    )


def measure_ceilings(backend: Any, force: bool = False) -> dict[str, Any]:
    """The device ceilings of ``backend`` (a Backend or its name), from the cache if present.

    Args:
        backend: a :class:`~tracekit.kernels.backend.Backend` or ``"numpy"``/``"cupy"``/``"auto"``.
        force: re-measure even when a cached file exists (and overwrite it).

    Returns:
        ``copy_bandwidth_Bps``, ``launch_overhead_s``, ``peak_flops``, ``ridge_flop_per_byte``,
        ``measured_at`` (ISO-8601 UTC), ``device``, ``backend``, ``method`` (how each was
        measured); on cupy also ``launch_back_to_back_s`` and ``launch_host_s``.
    """
    from tracekit.kernels.backend import get_backend

    backend = get_backend(backend)
    path = cache_path(backend)
    if not force and path.exists():
        try:
            cached = json.loads(path.read_text())
        except (OSError, ValueError):
            cached = None
        if _valid(cached):
            return cached
    c = _measure_cupy() if backend.name == "cupy" else _measure_numpy()
    c["ridge_flop_per_byte"] = c["peak_flops"] / bandwidth_ceiling(c)[0]
    c["measured_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    c["device"] = backend.device_name()
    c["backend"] = backend.name
    c = {k: _floats(v) for k, v in c.items()}
    _write_atomic(path, c)
    return c


def _floats(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _floats(x) for k, x in v.items()}
    return float(v) if isinstance(v, (float, np.floating)) else v


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON via a temp file + rename; a cache that cannot be written is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
        os.replace(tmp, path)
    except OSError:
        pass

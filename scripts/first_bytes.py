"""When do a launch's first weight bytes arrive: a bulk copy's against plain loads, by how much is
asked for at once. (issue 13: mmvq_st's first tile lands about 4 µs after a block's entry however
its first wave is cut; BENCHMARKS.md, 2026-12-07 13:47)

    PYTHONPATH=$PWD python3 scripts/first_bytes.py [--cases bulk:18432x2,loads:18432x2,...]
        [--blocks-per-sm 2] [--runs 3] [--json out.json]

One launch a case and run, 256 threads a block, ``blocks-per-sm`` blocks on every SM, each block
reading its own ``span`` x ``waves`` bytes of a weight not in L2 (a scratch buffer of twice the
L2 read before each run: L2 holds clean lines, as the matvec bench leaves it). ``bulk``: thread
0 asks for ``waves`` bulk copies of ``span`` bytes into shared memory at entry (sm_90's
cp.async.bulk, each completing its own mbarrier, as mmvq_st's fills do: matvec.cu's
stage_fill); the block notes when the first and when all arrived. ``loads``: every thread loads
16 bytes at a time over the same bytes (the read floor's way); the block notes when thread 0's
first load returned and when all its loads had. Printed per case, in µs from the launch's first
block entry, over blocks: the first bytes' arrival (min/median/max) and all of them (median/max),
and the bytes a launch asked for. bulk:18432x2 is mmvq_st's first wave for Q4_0 at 14336 x
4096 (8 rows of 2304 bytes, two stages, 264 blocks on an H100).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: appended to matvec.cu (its StageBarrier, stage_fill, stage_wait and globaltimer_ns)
SRC = r"""
#define FB_MAX_WAVES 4
#define FB_MARKS 3  // entry, first bytes in, all in
// the global timer read once v has arrived (a predicate on v holds the read back until then)
__device__ __forceinline__ unsigned long long timer_after(unsigned v) {
#if __CUDA_ARCH__
    unsigned long long t = 1;
    asm volatile("{ .reg .pred p; setp.ne.u32 p, %1, 0x9E3779B9; @p mov.u64 %0, %%globaltimer; }"
                 : "+l"(t) : "r"(v) : "memory");
    return t;
#else
    (void)v;
    return globaltimer_ns();
#endif
}

extern "C" __global__ void __launch_bounds__(256)
    first_bytes(const u8* __restrict__ raw, long long span, int waves, int bulk,
                unsigned long long* marks, unsigned* sink) {
    __shared__ StageBarrier bars[FB_MAX_WAVES];
    extern __shared__ int4 fb_smem[];
    const int tid = threadIdx.x, nthreads = blockDim.x;
    if (waves < 1 || waves > FB_MAX_WAVES || span % 16) __trap();
    const long long lo = (long long)blockIdx.x * waves * span, total = lo + waves * span;
    unsigned long long* m = marks + FB_MARKS * blockIdx.x;
    if (tid == 0) m[0] = globaltimer_ns();
    unsigned acc = 0;
    if (bulk) {
        if (tid == 0)
            for (int w = 0; w < waves; ++w) stage_init(&bars[w]);
        __syncthreads();
        u8* dst = reinterpret_cast<u8*>(fb_smem);
        for (int w = 0; w < waves; ++w)
            stage_fill(dst + w * span, raw, lo + w * span, lo + (w + 1) * span, total, &bars[w],
                       tid, nthreads);
        stage_wait(&bars[0], 0);
        if (tid == 0) m[1] = globaltimer_ns();
        for (int w = 1; w < waves; ++w) stage_wait(&bars[w], 0);
        if (tid == 0) m[2] = globaltimer_ns();
        __syncthreads();  // (the host build's copies: every thread's, then read below)
        const unsigned* words = reinterpret_cast<const unsigned*>(fb_smem);
        for (long long i = tid; i < waves * span / 4; i += nthreads) acc += words[i];
    } else {
        const int4* src = reinterpret_cast<const int4*>(raw + lo);
        const long long n16 = waves * span / 16;
        for (long long i = tid; i < n16; i += nthreads) {
            const int4 v = src[i];
            acc += (unsigned)v.x + (unsigned)v.y + (unsigned)v.z + (unsigned)v.w;
            if (i == 0) m[1] = timer_after(acc);
        }
        __syncthreads();
        if (tid == 0) m[2] = globaltimer_ns();
    }
    sink[blockIdx.x * nthreads + tid] = acc;  // every byte read is live
}
"""


def parse_cases(text: str) -> list[tuple[str, int, int]]:
    """``mode:spanxwaves,...`` as (mode, span, waves).

    Raises:
        ValueError: a case that is not bulk or loads, a span not a positive multiple of 16, or
            waves outside 1 to 4 (named).
    """
    cases = []
    for word in text.split(","):
        mode, _, size = word.partition(":")
        span, _, waves = size.partition("x")
        if mode not in ("bulk", "loads") or not span.isdigit() or not waves.isdigit():
            raise ValueError(f"case {word!r}: want bulk|loads:SPANxWAVES, e.g. bulk:18432x2")
        if int(span) <= 0 or int(span) % 16:
            raise ValueError(f"case {word!r}: span {span} must be a positive multiple of 16")
        if not 1 <= int(waves) <= 4:
            raise ValueError(f"case {word!r}: waves {waves} must be 1 to 4")
        cases.append((mode, int(span), int(waves)))
    return cases


def arrivals(marks: np.ndarray) -> dict:
    """One launch's marks [block][entry, first, all] (ns) as µs from the first entry.

    Raises:
        ValueError: a block with a mark missing or out of order.
    """
    marks = marks.astype(np.int64)
    bad = np.flatnonzero((marks <= 1).any(axis=1) | (np.diff(marks, axis=1) < 0).any(axis=1))
    if bad.size:
        raise ValueError(f"block {int(bad[0])}: marks missing or out of order: {marks[bad[0]]}")
    rel = (marks - marks[:, 0].min()) * 1e-3
    return {
        "last_entry_us": float(rel[:, 0].max()),
        "first_us": [float(rel[:, 1].min()), float(np.median(rel[:, 1])), float(rel[:, 1].max())],
        "all_us": [float(np.median(rel[:, 2])), float(rel[:, 2].max())],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", default="bulk:18432x2,bulk:18432x1,bulk:2304x1,loads:18432x2,loads:2304x1"
    )
    ap.add_argument("--blocks-per-sm", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="write every run's arrivals here")
    args = ap.parse_args(argv)
    cases = parse_cases(args.cases)

    import cupy as cp

    from tracekit.kernels import cuda, matvec

    fn = matvec.probe_module(SRC).get_function("first_bytes")
    cuda.allow_dynamic_shared(fn, max(waves * span for _, span, waves in cases))
    attrs = cp.cuda.Device().attributes
    grid = int(attrs["MultiProcessorCount"]) * args.blocks_per_sm
    scratch = cp.zeros(2 * int(attrs.get("L2CacheSize", 64 << 20)), cp.uint8)
    sink = cp.zeros(grid * 256, cp.uint32)
    print(f"{grid} blocks of 256 threads; µs from the first entry, median of {args.runs} runs")
    print("| case | bytes asked | first bytes in (min / median / max) | all in (median / max) |")
    print("|---|---|---|---|")
    rows = []
    for mode, span, waves in cases:
        raw = cp.random.randint(0, 2**31 - 1, grid * waves * span // 4, dtype=cp.int32)
        marks = cp.zeros((grid, 3), cp.uint64)
        runs = []
        for _ in range(args.runs + 1):  # the first compiles and warms the code
            int(scratch.max())  # the weight out of L2, L2 left clean
            marks.fill(0)
            fn((grid,), (256,), (raw, np.int64(span), np.int32(waves), np.int32(mode == "bulk"),
                                 marks, sink), shared_mem=waves * span)  # fmt: skip
            cp.cuda.get_current_stream().synchronize()
            runs.append(arrivals(cp.asnumpy(marks)))
        runs = runs[1:]
        mid = sorted(runs, key=lambda r: r["first_us"][1])[len(runs) // 2]
        first = " / ".join(f"{v:.2f}" for v in mid["first_us"])
        every = " / ".join(f"{v:.2f}" for v in mid["all_us"])
        print(f"| {mode}:{span}x{waves} | {grid * waves * span / 1e6:.2f} MB | {first} | {every} |")
        rows.append({"mode": mode, "span": span, "waves": waves, "grid": grid, "runs": runs})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a timing pass's stamps cost a kernel in a CUDA graph, by grid size (issue 11).

    python scripts/stamp_cost.py [--launches 100] [--reps 20]

One tiny stamped kernel (kernels/stamp.cuh's LaunchStamp around one multiply-add a thread, 256
threads a block) as ``--launches`` programmatic dependent launches of one CUDA graph, captured
twice: untimed (the stamp pointer null, as an untraced step) and timed (a slot each). The cost
of a stamp is (timed - untimed) graph time / launches. Grids of 1 to 4224 blocks: if the cost
grows with the blocks, it is the blocks' end atomics queueing on the slot's one end word. The
header's knobs (STAMP_END_WORDS / STAMP_END_STRIDE: the atomics spread over several words;
STAMP_PROBE=1: start stamp only) are compiled in as variants and timed in the same run; each
row also prints the median stamped kernel time, end = the max of the end words.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KERNELS = Path(__file__).resolve().parents[1] / "tracekit" / "kernels"
SRC = r"""
#include "stamp.cuh"
extern "C" __global__ void __launch_bounds__(256)
    stamp_probe(float* out, int n, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmaf_rn(out[i], 1.0001f, 1.0f);
}
"""
# (main is STAMP_COMPACT=1 since 2026-12-05; the exit count it replaced is STAMP_COMPACT=0, which
# the END_WORDS / EXIT_BARRIER knobs vary)
OLD = ("-DSTAMP_COMPACT=0",)
VARIANTS = {
    "main: exit barrier, one atomic a block": (),
    "exit count (before 2026-12-05)": OLD,
    "exit count, exit barrier up to 1 block (a plain store for the end)": (
        *OLD, "-DSTAMP_EXIT_BARRIER_BLOCKS=1",
    ),
    "exit count, 8 end words, 32 B apart": (*OLD, "-DSTAMP_END_WORDS=8", "-DSTAMP_END_STRIDE=4"),
    "exit count, 32 end words, 128 B apart": (
        *OLD, "-DSTAMP_END_WORDS=32", "-DSTAMP_END_STRIDE=16",
    ),
    "exit barrier (no entry barrier, no shared atomics)": (*OLD, "-DSTAMP_EXIT_BARRIER=1"),
    "exit barrier, 32 end words 128 B apart": (
        *OLD, "-DSTAMP_EXIT_BARRIER=1", "-DSTAMP_END_WORDS=32", "-DSTAMP_END_STRIDE=16",
    ),
    "exit count, exit barrier up to 4 blocks": (*OLD, "-DSTAMP_EXIT_BARRIER_BLOCKS=4"),
    "exit count, exit barrier up to 16 blocks": (*OLD, "-DSTAMP_EXIT_BARRIER_BLOCKS=16"),
    "start only (no end)": (*OLD, "-DSTAMP_PROBE=1"),
    "compact 2: each warp's atomic, no barrier": ("-DSTAMP_COMPACT=2",),
    "compact 3: as 2, predicated (no branch on the slot)": ("-DSTAMP_COMPACT=3",),
    "exit count, 1-block exit barrier, end word a constant (no timer read)": (
        *OLD, "-DSTAMP_EXIT_BARRIER_BLOCKS=1", "-DSTAMP_END_SOURCE=1",
    ),
    "exit count, 1-block exit barrier, end word %clock64": (
        *OLD, "-DSTAMP_EXIT_BARRIER_BLOCKS=1", "-DSTAMP_END_SOURCE=2",
    ),
    "main, end word a constant (no timer read)": ("-DSTAMP_END_SOURCE=1",),
}  # fmt: skip
# --mechanism: what in an end stamp costs, one change at a time (1-block grids; no LaunchStamp:
# each kernel spells out its stores). MODE 0 untimed; 1 start stamp only; 2 two start stores;
# 3 start + end store with no barrier (thread 0 after its own output); 4 start + an end barrier
# and no end store; 5 start + barrier + end store (the 1-block exit-barrier stamp); 6 start +
# barrier + end store into the line thread 0 has just written (out[0..1]); 8 as 5 with 48
# FMAs before the end store (is the cost fetching the timed path's code?). (A slot in
# host-mapped pinned memory cost as 5 did: +0.10 us, H200, 2026-12-05.)
MECHANISM_SRC = r"""
// 48 FMAs in 8 independent chains (~0.04 us to issue): code the timed path alone runs
__device__ __forceinline__ unsigned long long pad48(unsigned long long g) {
    float a[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) a[c] = (float)(g >> (4 * c));
#pragma unroll
    for (int r = 0; r < 6; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) asm volatile("fma.rn.f32 %0, %0, 1.0001, 0.5;" : "+f"(a[c]));
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) s += a[c];
    return s > 1e30f ? 1ull : 0ull;
}
extern "C" __global__ void __launch_bounds__(256)
    mech_probe(float* out, int n, unsigned long long* slot, int mode) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    // modes 9, 10: thread 0 of block 0 told by all six coordinates, as LaunchStamp does
    const bool t0 = mode >= 9 ? (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y
                                 | blockIdx.z) == 0
                              : threadIdx.x == 0 && blockIdx.x == 0;
    unsigned long long g;
    if (mode >= 1 && t0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        slot[0] = g;
        if (mode == 2) slot[2] = g + 1;
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmaf_rn(out[i], 1.0001f, 1.0f);
    if (mode == 3 && t0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        slot[1] = g;
    }
    if (mode >= 4) {
        __syncthreads();
        if (t0 && mode != 4) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
            if (mode == 8) g += pad48(g);  // 48 more instructions (6 new 128-byte lines)
            if (mode == 6) *reinterpret_cast<unsigned long long*>(out) = g;
            else if (mode == 10 && gridDim.x * gridDim.y * gridDim.z > 1) atomicMax(slot + 1, g);
            else slot[1] = g;
        }
    }
}
"""
MECHANISMS = {
    1: "start store only",
    2: "two start stores",
    3: "start + end store, no barrier (thread 0 after its output)",
    4: "start + end barrier, no end store",
    5: "start + barrier + end store (the 1-block stamp)",
    6: "start + barrier + end store into out[0]'s line",
    8: "as 5, 48 more instructions before the end store (timed path only)",
    9: "as 5, thread 0 of block 0 by tid.xyz and ctaid.xyz",
    10: "as 9, and a store if one block, else an atomic max",
}
#: the grid table's variants --mechanism also times (LaunchStamp around its one-block body)
MECHANISM_STAMPS = (
    "main: exit barrier, one atomic a block",
    "exit count (before 2026-12-05)",
    "exit count, exit barrier up to 1 block (a plain store for the end)",
    "exit barrier (no entry barrier, no shared atomics)",
    "compact 2: each warp's atomic, no barrier",
    "compact 3: as 2, predicated (no branch on the slot)",
)
SLOT = 1 + 16 * 32 + 7  # words per launch: room for the widest variant
GRIDS = (1, 2, 3, 14, 33, 132, 396, 1056, 4224)


def pdl_graph(stream, fn, grid: int, arg_lists: list[tuple]):
    """One programmatic dependent launch of ``fn`` (``grid`` blocks of 256 threads) per
    argument tuple, captured into one CUDA graph: (graph, the packed launches, to be kept alive
    while the graph runs)."""
    from tracekit.kernels.packed import PackedLaunch, issue

    objs = [PackedLaunch((fn, (grid,), (256,), a, 0), stream.ptr, True) for a in arg_lists]
    with stream:
        stream.begin_capture()
        issue([o.args for o in objs])
        graph = stream.end_capture()
    return graph, objs


def per_launch_us(stream, graph, launches: int, reps: int) -> float:
    """Device µs a launch of ``graph`` (``launches`` kernels): events around each of ``reps``
    replays after 3 warm-up replays, the median."""
    import cupy as cp

    for _ in range(3):
        graph.launch(stream)
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        graph.launch(stream)
        b.record(stream)
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / launches)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated substrings of VARIANTS labels")
    ap.add_argument(
        "--mechanism",
        action="store_true",
        help="the end stamp's parts one at a time (MECHANISMS), 1-block grids",
    )
    args = ap.parse_args()
    if args.mechanism:
        return mechanism(args)

    import cupy as cp
    import numpy as np

    L = args.launches
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(SLOT * L, cp.uint64)
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {L} pdl launches "
          f"a graph, median of {args.reps} graph launches")  # fmt: skip
    print("| variant | " + " | ".join(f"{g} blocks" for g in GRIDS) + " |")
    print("|---|" + "---|" * len(GRIDS))
    picked = [w for w in args.only.split(",") if w]
    for label, defines in VARIANTS.items():
        if picked and not any(w in label for w in picked):
            continue
        mod = cp.RawModule(code=SRC, options=("-I" + str(KERNELS), "--std=c++17", *defines))
        fn = mod.get_function("stamp_probe")
        cells = []
        for g in GRIDS:
            out = cp.ones(g * 256, cp.float32)

            def args_of(k: int, timed: bool, out=out):
                return (
                    out,
                    np.int32(out.size),
                    buf[SLOT * k : SLOT * (k + 1)] if timed else np.uint64(0),
                )

            plain, keep0 = pdl_graph(stream, fn, g, [args_of(k, False) for k in range(L)])
            timed, keep1 = pdl_graph(stream, fn, g, [args_of(k, True) for k in range(L)])
            buf.fill(0)
            u, t = (per_launch_us(stream, x, L, args.reps) for x in (plain, timed))
            w = buf.get().reshape(L, SLOT).astype(np.int64)
            end = w[:, 1:].max(axis=1)
            no_end = "PROBE" in " ".join(defines) or "END_SOURCE" in " ".join(defines)
            own = "–" if no_end else f"{np.median(end - w[:, 0]) * 1e-3:.2f}"
            # start to start: an upper bound of a launch's time that needs no end stamp
            pitch = f"{np.median(np.diff(w[:, 0])) * 1e-3:.2f}"
            bad = int(((end < w[:, 0]) & (end > 0)).sum())
            flag = f", {bad} ends before their start" if bad else ""
            cells.append(f"+{t - u:.3f} µs (untimed {u:.2f}, own {own}, pitch {pitch}{flag})")
            del keep0, keep1
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


def mechanism(args) -> int:
    import cupy as cp
    import numpy as np

    L = args.launches
    stream = cp.cuda.Stream(non_blocking=True)
    mech = cp.RawModule(code=MECHANISM_SRC, options=("--std=c++17",)).get_function("mech_probe")
    stamped = {  # the production stamp (LaunchStamp) around the same one-block body
        f"LaunchStamp: {label}": cp.RawModule(
            code=SRC, options=("-I" + str(KERNELS), "--std=c++17", *VARIANTS[label])
        ).get_function("stamp_probe")
        for label in MECHANISM_STAMPS
    }
    dev_slot = cp.zeros(SLOT * L, cp.uint64)
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {L} pdl launches "
          f"of one 256-thread block a graph, median of {args.reps} graph launches")  # fmt: skip
    out = cp.ones(256 + 64, cp.float32)

    def args_of(k: int, mode: int | None, stride: int, timed: bool):
        slot = dev_slot[stride * k : stride * k + 4] if timed else np.uint64(0)
        return (
            out,
            np.int32(256),
            slot,
            *(() if mode is None else (np.int32(mode if timed else 0),)),
        )

    rows = [(mech, m, label) for m, label in MECHANISMS.items()]
    rows += [(fn, None, label) for label, fn in stamped.items()]
    print("| what the kernel does | slot stride (words) | + µs a launch over untimed | untimed µs "
          "| start-to-start µs |\n|---|---|---|---|---|")  # fmt: skip
    for rnd in range(2):  # twice, interleaved: the spread between rounds is the noise
        for fn, mode, label in rows:
            for stride in (4, SLOT):
                plain, keep = pdl_graph(
                    stream, fn, 1, [args_of(k, mode, stride, False) for k in range(L)]
                )
                timed, keep2 = pdl_graph(
                    stream, fn, 1, [args_of(k, mode, stride, True) for k in range(L)]
                )
                dev_slot.fill(0)
                u, t = (per_launch_us(stream, x, L, args.reps) for x in (plain, timed))
                cp.cuda.runtime.deviceSynchronize()
                w = dev_slot.get()[: stride * L]
                starts = w.reshape(L, stride)[:, 0].astype(np.int64)
                pitch = np.median(np.diff(starts)) * 1e-3
                print(f"| {label} (round {rnd + 1}) | {stride} | +{t - u:.3f} | {u:.2f} "
                      f"| {pitch:.2f} |", flush=True)  # fmt: skip
                del keep, keep2
    return 0


if __name__ == "__main__":
    sys.exit(main())

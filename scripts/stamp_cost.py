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
VARIANTS = {
    "one end word (main)": (),
    "exit barrier up to 1 block (a plain store for the end)": ("-DSTAMP_EXIT_BARRIER_BLOCKS=1",),
    "8 end words, 32 B apart": ("-DSTAMP_END_WORDS=8", "-DSTAMP_END_STRIDE=4"),
    "32 end words, 128 B apart": ("-DSTAMP_END_WORDS=32", "-DSTAMP_END_STRIDE=16"),
    "exit barrier (no entry barrier, no shared atomics)": ("-DSTAMP_EXIT_BARRIER=1",),
    "exit barrier, 32 end words 128 B apart": (
        "-DSTAMP_EXIT_BARRIER=1",
        "-DSTAMP_END_WORDS=32",
        "-DSTAMP_END_STRIDE=16",
    ),
    "exit barrier up to 4 blocks": ("-DSTAMP_EXIT_BARRIER_BLOCKS=4",),
    "exit barrier up to 16 blocks": ("-DSTAMP_EXIT_BARRIER_BLOCKS=16",),
    "start only (no end)": ("-DSTAMP_PROBE=1",),
}
SLOT = 1 + 16 * 32 + 7  # words per launch: room for the widest variant
GRIDS = (1, 2, 3, 14, 33, 132, 396, 1056, 4224)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import cupy as cp
    import numpy as np

    from tracekit.kernels.packed import PackedLaunch, issue

    L = args.launches
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(SLOT * L, cp.uint64)
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {L} pdl launches "
          f"a graph, median of {args.reps} graph launches")  # fmt: skip
    print("| variant | " + " | ".join(f"{g} blocks" for g in GRIDS) + " |")
    print("|---|" + "---|" * len(GRIDS))
    for label, defines in VARIANTS.items():
        mod = cp.RawModule(code=SRC, options=("-I" + str(KERNELS), "--std=c++17", *defines))
        fn = mod.get_function("stamp_probe")
        cells = []
        for g in GRIDS:
            out = cp.ones(g * 256, cp.float32)

            def graph_of(timed: bool, fn=fn, g=g, out=out):
                objs = [
                    PackedLaunch(
                        (fn, (g,), (256,), (out, np.int32(out.size),
                         buf[SLOT * k : SLOT * (k + 1)] if timed else np.uint64(0)), 0),
                        stream.ptr, True,
                    )
                    for k in range(L)
                ]  # fmt: skip
                with stream:
                    stream.begin_capture()
                    issue([o.args for o in objs])
                    graph = stream.end_capture()
                return graph, objs

            def per_launch_us(graph) -> float:
                for _ in range(3):
                    graph.launch(stream)
                ts = []
                for _ in range(args.reps):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record(stream)
                    graph.launch(stream)
                    b.record(stream)
                    b.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / L)
                return statistics.median(ts)

            plain, keep0 = graph_of(False)
            timed, keep1 = graph_of(True)
            buf.fill(0)
            u, t = per_launch_us(plain), per_launch_us(timed)
            w = buf.get().reshape(L, SLOT).astype(np.int64)
            end = w[:, 1:].max(axis=1)
            own = "–" if "PROBE" in " ".join(defines) else f"{np.median(end - w[:, 0]) * 1e-3:.2f}"
            bad = int(((end < w[:, 0]) & (end > 0)).sum())
            flag = f", {bad} ends before their start" if bad else ""
            cells.append(f"+{t - u:.3f} µs (untimed {u:.2f}, own {own}{flag})")
            del keep0, keep1
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""L2-hit latency by SM and by address window: is a one-block kernel's time a matter of where
its block and its buffers land? (issue 11's graph/stream agreement test, session 12)

    python scripts/sm_l2_latency.py [--windows 16] [--window-kb 4] [--steps 4000]

The agreement test's failing nodes are one-block fused add + norm kernels of ~1.5 µs, steady at
~1.5 µs in one launch mode and ~1.85 in the other, in either direction (BENCHMARKS.md,
session 12). Hypothesis: the L2-hit latency an SM sees depends on which L2 partition holds the
line (H100/H200 have two), so a latency-bound kernel's time depends on its block's SM and its
buffers' addresses, which differ between a graph replay's fixed buffers and stream mode's.

One launch per address window: one thread per SM (the first block to claim its SM by %smid)
chases a random cycle through the window's 128-byte lines with L2-only loads (__ldcg), timed by
clock64. Prints, per window, cycles per load across SMs (min, median, max) and the largest gap
in the sorted per-SM figures: two groups far apart (and a different split for different
windows) support the hypothesis; one tight group refutes it for buffers of this size.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SRC = r"""
extern "C" __global__ void chase_per_sm(const unsigned int* __restrict__ next, int steps,
                                        unsigned int start, unsigned int* claimed,
                                        long long* cycles, unsigned int* sink) {
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (threadIdx.x != 0 || atomicCAS(&claimed[sm], 0u, 1u) != 0u) return;  // one chaser an SM
    unsigned int p = start;
    for (int i = 0; i < 64; ++i) p = __ldcg(next + p);  // the window's lines into this path
    const long long t0 = clock64();
    for (int i = 0; i < steps; ++i) p = __ldcg(next + p);
    const long long t1 = clock64();
    cycles[sm] = t1 - t0;
    sink[sm] = p;  // the chase is live
}
"""

LINE_WORDS = 32  # 128-byte lines of 4-byte words


def chase_table(n_words: int, base_word: int, lines: int, rng: np.random.Generator) -> np.ndarray:
    """A uint32 array of n_words whose entries at the window's line starts form one random cycle
    through its ``lines`` lines (each entry: the word index of the next line's start)."""
    table = np.zeros(n_words, np.uint32)
    order = base_word + LINE_WORDS * rng.permutation(lines)
    table[order] = np.roll(order, -1)
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=16, help="address windows to probe")
    ap.add_argument(
        "--window-kb", type=int, default=4, help="window size (a norm's operand ~3.5 KB)"
    )
    ap.add_argument("--spacing-kb", type=int, default=1024, help="distance between windows")
    ap.add_argument("--steps", type=int, default=4000)
    args = ap.parse_args()

    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    n_sm, clock_khz = props["multiProcessorCount"], props["clockRate"]
    fn = cp.RawModule(code=SRC).get_function("chase_per_sm")
    lines = args.window_kb * 1024 // (4 * LINE_WORDS)
    if lines < 2:
        sys.exit("--window-kb: a window needs at least two 128-byte lines")
    n_words = args.windows * args.spacing_kb * 256
    rng = np.random.default_rng(0)
    claimed = cp.zeros(n_sm, cp.uint32)
    cycles = cp.zeros(n_sm, cp.int64)
    sink = cp.zeros(n_sm, cp.uint32)
    print(f"device {props['name'].decode()}: {n_sm} SMs, {clock_khz / 1e6:.2f} GHz (clockRate); "
          f"{args.windows} windows of {lines} lines, {args.spacing_kb} KB apart, "
          f"{args.steps} L2 loads a chase")  # fmt: skip
    print("| window | min | median | max cycles/load | largest gap (sorted SMs) | SMs above it |")
    print("|---|---|---|---|---|---|")
    per_window = []
    for w in range(args.windows):
        base = w * args.spacing_kb * 256
        table = cp.asarray(chase_table(n_words, base, lines, rng))
        claimed.fill(0)
        cycles.fill(-1)
        # 8 one-warp blocks an SM: every SM gets at least one
        fn(
            (8 * n_sm,),
            (32,),
            (table, np.int32(args.steps), np.uint32(base), claimed, cycles, sink),
        )
        got = cycles.get()
        if (got < 0).any():
            print(f"window {w}: {int((got < 0).sum())} SMs got no block; rerun", file=sys.stderr)
        per = np.where(got >= 0, got / args.steps, np.nan)
        per_window.append(per)
        s = np.sort(per[~np.isnan(per)])
        gaps = np.diff(s)
        k = int(np.argmax(gaps)) if gaps.size else 0
        print(f"| {w} | {s[0]:.0f} | {np.median(s):.0f} | {s[-1]:.0f} | "
              f"{gaps[k] if gaps.size else 0:.0f} | {s.size - k - 1} |")  # fmt: skip
        del table
    m = np.array(per_window)
    # the same SMs slow in every window: the SM's place; a split that moves: the address's
    med = np.nanmedian(m, axis=1, keepdims=True)
    slow = m > med
    agree = np.mean(slow == slow[0], axis=1)
    print(
        "fraction of SMs on the same side of their window's median as in window 0: "
        + ", ".join(f"{a:.2f}" for a in agree)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

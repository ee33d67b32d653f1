"""The bulk-copy read floor: how fast a weight streams through a ring of bulk-copy stages in
shared memory, as mmvq_st's tiles do, with nothing but a read of each tile (and, optionally, a
wait standing in for its dot products). (issue 13: mmvq_st reaches 72-81% of copy on 14336 x
4096 where the plain-load read floor reaches ~90%; this asks whether the staged design itself
can reach 85%, and at which geometry, before any kernel is tuned toward it.)

    PYTHONPATH=$PWD python3 scripts/bulk_floor.py [--bytes 33030144] [--tiles 9216,18432,36864]
        [--stages 2,3,4] [--blocks-per-sm 1,2,3] [--spin-ns-per-kb 0,12,24,47] [--json out.json]

Kernel ``read_bulk`` (appended to matvec.cu: its StageBarrier, stage_fill and stage_wait): tiles
of ``tile`` bytes grid-strided over the blocks (tile j: block j mod grid), ``stages`` of them in
flight a block, each one bulk copy completing its stage's mbarrier; a block waits for its next
tile, XORs its words (every thread), spins on the SM's clock for ``spin-ns-per-kb`` ns a KB of the
tile at the device's clock rate (the stand-in for a tile's compute: mmvq_st computes an 18 KB
Q4_0 tile in ~0.86 µs, ~47 ns a KB, by its timeline), meets, and refills
the stage with its tile ``stages`` tiles on; ``--release early``: it meets and refills right
after the XOR, before the spin, as a kernel would that took its tile into registers first. Every configuration's XOR is checked against
ceilings.read_stream_reference before it is timed. Timed as bench_mmvq_staged.py times mmvq_st:
own device time (ceilings.gpu_own_times, LaunchStamp), copies of the bytes rotated past 3x the
L2; % of copy = bytes / own time / the D2D copy bandwidth measured in the same run, beside the
plain-load read floor (ceilings.read_floor) of the same bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: appended to matvec.cu
SRC = r"""
#define BF_MAX_STAGES 8
extern "C" __global__ void __launch_bounds__(256)
    read_bulk(const u8* __restrict__ raw, long long total, int tile, int stages, int spin_cycles,
              int release_early, unsigned* out, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    __shared__ StageBarrier bars[BF_MAX_STAGES];
    extern __shared__ int4 bf_smem[];
    if (stages < 1 || stages > BF_MAX_STAGES || tile <= 0 || tile % 16 || total % 16) __trap();
    const int tid = threadIdx.x, nthreads = blockDim.x;
    const long long tiles = (total + tile - 1) / tile;
    u8* ring = reinterpret_cast<u8*>(bf_smem);
    if (tid == 0)
        for (int s = 0; s < stages; ++s) stage_init(&bars[s]);
    __syncthreads();
    const auto fill = [&](int s, long long t) {
        if (t < tiles)
            stage_fill(ring + (long long)s * tile, raw, t * tile, min((t + 1) * tile, total),
                       total, &bars[s], tid, nthreads);
    };
    for (int s = 0; s < stages; ++s) fill(s, blockIdx.x + (long long)s * gridDim.x);
    unsigned a = 0;
    int use = 0;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x, ++use) {
        const int s = use % stages;
        stage_wait(&bars[s], (unsigned)(use / stages) & 1u);
        const int words = (int)(min((long long)tile, total - t * tile) / 16);
        const uint4* w = reinterpret_cast<const uint4*>(ring + (long long)s * tile);
        for (int i = tid; i < words; i += nthreads) {
            const uint4 v = w[i];
            a ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        if (release_early) {  // the tile is in registers: its stage refills before the compute
            __syncthreads();
            fill(s, t + (long long)stages * gridDim.x);
        }
#if __CUDA_ARCH__
        if (spin_cycles > 0) {
            const long long until = clock64() + spin_cycles;
            while (clock64() < until) {
            }
        }
#endif
        if (!release_early) {
            __syncthreads();  // every thread is done with stage s: it may be refilled
            fill(s, t + (long long)stages * gridDim.x);
        }
    }
#if __CUDA_ARCH__
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a ^= __shfl_xor_sync(0xFFFFFFFFu, a, o);
    if ((threadIdx.x & 31) == 0) atomicXor(out, a);
#else
    out[blockIdx.x * nthreads + tid] = a;  // (the host build: every thread's own word)
#endif
}
"""


def ints(text: str) -> list[int]:
    """``"1,2,3"`` as ints (ValueError naming a word that is not a non-negative integer)."""
    out = []
    for word in text.split(","):
        if not word.strip().isdigit():
            raise ValueError(f"{word!r} in {text!r} is not a non-negative integer")
        out.append(int(word))
    return out


def configs(
    tiles: list[int], stages: list[int], blocks_per_sm: list[int], spins: list[int],
    smem_per_sm: int, smem_per_block: int, releases: tuple[str, ...] = ("late",),
) -> list[dict]:  # fmt: skip
    """Every (tile, stages, blocks an SM, spin ns a KB, release) whose rings fit the SM's and a
    block's shared memory (1 KB a block kept for the barriers and the stamp).

    Raises:
        ValueError: a tile not a positive multiple of 16, stages outside 1 to 8, blocks an
            SM below 1, or a release not early or late (named).
    """
    for r in releases:
        if r not in ("early", "late"):
            raise ValueError(f"release {r!r} must be early or late")
    for t in tiles:
        if t <= 0 or t % 16:
            raise ValueError(f"tile {t} must be a positive multiple of 16")
    for s in stages:
        if not 1 <= s <= 8:
            raise ValueError(f"stages {s} must be 1 to 8")
    for b in blocks_per_sm:
        if b < 1:
            raise ValueError(f"blocks an SM {b} must be >= 1")
    return [
        {"tile": t, "stages": s, "blocks_per_sm": b, "spin_ns_per_kb": p, "release": r}
        for t in tiles for s in stages for b in blocks_per_sm for p in spins for r in releases
        if t * s <= smem_per_block - 1024 and b * (t * s + 1024) <= smem_per_sm
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=14336 * 4096 // 32 * 18,
                    help="the weight's bytes (default: Q4_0 at 14336 x 4096)")  # fmt: skip
    ap.add_argument("--tiles", default="9216,18432,36864")
    ap.add_argument("--stages", default="2,3,4")
    ap.add_argument("--blocks-per-sm", default="1,2,3")
    ap.add_argument("--spin-ns-per-kb", default="0,12,24,47")
    ap.add_argument("--release", default="late", help="late, early or both (late,early)")
    ap.add_argument("--json", help="write every configuration's time here")
    args = ap.parse_args(argv)
    if args.bytes <= 0 or args.bytes % 16:
        raise SystemExit(f"--bytes {args.bytes} must be a positive multiple of 16")

    import cupy as cp

    from tracekit.kernels import cuda, matvec
    from tracekit.kernels.ceilings import (
        gpu_own_times,
        queued_copy_bandwidth,
        read_floor,
        read_stream_reference,
    )  # fmt: skip
    from tracekit.kernels.elementwise import sm_count

    dev = cp.cuda.Device()
    attrs = dev.attributes
    l2 = int(attrs.get("L2CacheSize", 64 << 20))
    smem_sm = int(attrs["MaxSharedMemoryPerMultiprocessor"])
    smem_block = int(attrs["MaxSharedMemoryPerBlockOptin"])
    clock_ghz = int(attrs["ClockRate"]) / 1e6  # (kHz: the SM clock the spin counts)
    todo = configs(ints(args.tiles), ints(args.stages), ints(args.blocks_per_sm),
                   ints(args.spin_ns_per_kb), smem_sm, smem_block,
                   tuple(args.release.split(",")))  # fmt: skip

    def own(fn) -> float:
        return statistics.median(gpu_own_times(fn, launches=20, reps=5, warmup=3))

    cuda.register_stamped(["read_bulk"])
    fn = matvec.probe_module(SRC).get_function("read_bulk")

    copy_bps = queued_copy_bandwidth()  # (1 GiB D2D, read + write)
    sets = max(1, min(16, -(-3 * l2 // args.bytes)))
    raws = [cp.random.randint(0, 2**31 - 1, args.bytes // 4, dtype=cp.int32).view(cp.uint8)
            for _ in range(sets)]  # fmt: skip
    want = read_stream_reference(cp.asnumpy(raws[0]))
    floor_s, floor_cfg = read_floor(raws, {"own": own})["own"]
    pct = lambda s: 100 * args.bytes / s / copy_bps  # noqa: E731
    print(f"copy {copy_bps / 1e9:.0f} GB/s; {args.bytes} bytes, {sets} copies rotated; "
          f"spins at {clock_ghz:.2f} GHz; "
          f"plain-load read floor ({floor_cfg}): {floor_s * 1e6:.2f} µs own, "
          f"{pct(floor_s):.1f}% of copy", flush=True)  # fmt: skip
    print(
        "| tile | stages | blocks/SM | spin ns/KB | release | own µs | % of copy | ÷ read floor |"
    )
    print("|---|---|---|---|---|---|---|---|")
    word = cp.zeros(1, cp.uint32)
    rows = []
    for c in todo:
        ring = c["tile"] * c["stages"]
        cuda.allow_dynamic_shared(fn, ring)
        grid = (c["blocks_per_sm"] * sm_count(), 1, 1)
        spin = np.int32(c["spin_ns_per_kb"] * c["tile"] // 1024 * clock_ghz)  # cycles

        def call(i, c=c, ring=ring, grid=grid, spin=spin):
            cuda.launch(fn, grid, (256, 1, 1), (raws[i % len(raws)], np.int64(args.bytes),
                        np.int32(c["tile"]), np.int32(c["stages"]), spin,
                        np.int32(c["release"] == "early"), word, cuda.NO_STAMP),
                        shared_mem=ring)  # fmt: skip

        word.fill(0)
        call(0)
        got = int(word.get()[0])
        if got != want:
            raise SystemExit(f"read_bulk {c}: XOR {got:#x} != NumPy's {want:#x}")
        s = own(call)
        rows.append({**c, "own_us": s * 1e6, "pct_copy": pct(s), "of_floor": floor_s / s})
        print(f"| {c['tile']} | {c['stages']} | {c['blocks_per_sm']} | {c['spin_ns_per_kb']} | "
              f"{c['release']} | {s * 1e6:.2f} | {pct(s):.1f} | {floor_s / s:.3f} |", flush=True)  # fmt: skip
    for p, r in sorted({(r["spin_ns_per_kb"], r["release"]) for r in rows}):
        best = max((x for x in rows if (x["spin_ns_per_kb"], x["release"]) == (p, r)),
                   key=lambda x: x["pct_copy"])  # fmt: skip
        print(f"best at spin {p} ns/KB, release {r}: tile {best['tile']}, {best['stages']} "
              f"stages, {best['blocks_per_sm']} blocks/SM: {best['pct_copy']:.1f}% of copy")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"copy_GBps": copy_bps / 1e9, "bytes": args.bytes, "floor_own_us": floor_s * 1e6,
             "floor_config": floor_cfg, "rows": rows}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Quant-path matvec speed: GGUF bytes / device time over the copy bandwidth, per type (issue 13).

    PYTHONPATH=$PWD python3 scripts/bench_matvec.py [--n 14336 --k 4096] [--nt 1,2,8]
        [--sweep] [--json out.json]

For each type of the quant table: a random weight of n x k (the issue's 14336 x 4096: an FFN
up/gate of Llama-3-8B), copies rotated so the working set is > 2x the L2 (each launch reads
its weight from DRAM), x of nt tokens. Device time per launch: tracekit's queued timing (calls
queued behind a spin kernel, so host launch overhead stays out; the median of 5 runs of 20
calls). GB/s counts the weight's GGUF bytes only (x and out are < 0.5% of them); "% of copy"
divides by the D2D copy bandwidth measured in the same run (bytes read + written, as the
tracekit bench). ``--sweep Q4_K,...`` also times every (rows per block, unroll) configuration of those types.
Target: >= 85% of copy for every type at nt = 1. The rows time mmvq (``staged=False``): a type
declared staged (``MmvqConfig.staged``) runs mmvq_st on weights of >= 16M values by default,
which scripts/bench_mmvq_staged.py times against mmvq.

Read floor (every weight, timed the same way): ceilings.read_stream, a grid-strided stream of
16-byte loads over the same rotated weight bytes (4, 8 or 16 in flight a thread, 2, 4 or 8
blocks an SM, with and without an L2 256-byte prefetch hint; the best of the 18), its XOR
checked against NumPy's. The same reader over the 1 GiB copy source is printed once: the
floor of a large read, which the copy bandwidth is. It is the fastest those bytes are
read by a launch back to back in a stream, each launch paying its own ramp and tail; the summary
divides each matvec's time by it ("of floor"). The empty kernel's back-to-back time is printed
too: the part of every launch that no kernel design removes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_PCT = 85.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shapes", default="14336x4096", help="weights n x k, comma-separated (n outputs)"
    )
    ap.add_argument("--nt", default="1,2,8", help="token counts (comma-separated)")
    ap.add_argument("--types", default="", help="comma-separated type names (default: all)")
    ap.add_argument(
        "--sweep", default="", help="types (comma-separated) whose nt=1 row times every config"
    )
    ap.add_argument(
        "--sweep-shapes", default="first", choices=("first", "all"),
        help="the shapes --sweep times every config on (default: the first)",
    )  # fmt: skip
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument(
        "--sweep-small", action="store_true",
        help="every shape, type and nt also times rows per block x warps per row x both variants",
    )  # fmt: skip
    ap.add_argument(
        "--sweep-unroll", action="store_true",
        help="every quantized type (nt=1) also times items in flight a lane (unroll 2, 4) at "
        "min blocks 3, 4, 5 in its default variant (x prequantized or not)",
    )  # fmt: skip
    ap.add_argument(
        "--sweep-rpw", action="store_true",
        help="every quantized type and shape also times rows per warp 1, 2, 4 (nt=1), else default",
    )  # fmt: skip
    ap.add_argument(
        "--repeat", type=int, default=1,
        help="time every configuration this many times, in interleaved rounds (all of a "
        "weight's configurations, then again), and report the median: an A/B in one run",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat} must be >= 1")

    import cupy as cp

    from tracekit.kernels import matvec
    from tracekit.kernels.ceilings import (
        gpu_times_queued,
        launch_read_stream,
        read_floor,
        read_stream_kernel,
    )
    from tracekit.kernels.elementwise import launch_empty
    from tracekit.quants import QUANT_TABLE, quant_type

    dev = cp.cuda.Device()
    l2 = int(dev.attributes.get("L2CacheSize", 64 << 20))
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device {props['name'].decode()}, L2 {l2 >> 20} MiB")

    def timed(fn) -> float:
        return statistics.median(gpu_times_queued(fn, launches=20, reps=5, warmup=3))

    copy_n = 1 << 30
    src = cp.ones(copy_n // 4, cp.float32)
    dst = cp.empty_like(src)
    copy_s = timed(lambda i: dst.data.copy_from_device_async(src.data, src.nbytes))
    copy_bps = 2 * src.nbytes / copy_s
    print(f"copy bandwidth {copy_bps / 1e9:.0f} GB/s (1 GiB D2D, read + write)")
    empty_s = timed(lambda i: launch_empty())
    print(f"empty kernel back to back: {empty_s * 1e6:.2f} us a launch")
    xor_word = cp.zeros(1, cp.uint32)
    reader = read_stream_kernel(8, False)
    big_s = timed(lambda i: launch_read_stream(reader, src.view(cp.uint8), xor_word, 4))
    print(f"read_stream over the 1 GiB copy source: {src.nbytes / big_s / copy_bps * 100:.1f}% "
          "of copy (unroll 8, 4 blocks/SM): the floor of a large read")  # fmt: skip

    shapes = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]
    nts = [int(t) for t in args.nt.split(",")]
    types = (
        [quant_type(t) for t in args.types.split(",")] if args.types else list(QUANT_TABLE.values())
    )
    # rows per warp: one read of x from shared memory serves r rows (ncu: L1 74% busy at r = 1);
    # two items in flight a lane for long rows (k = 14336: 7 items a lane at r = 1); x
    # quantized by its own launch (no prologue per block: 4096 x 14336 ran faster so); wpr 1:
    # one warp a row, as before balanced_wpr
    sweep = (
        [(8, 1, w, m, 0, 1, None, r) for r in (1, 2, 4) for m in (2, 3, 4) for w in (16, 24, 32)]
        + [(8, 2, 24, m, 0, 1, None, r) for r in (1, 2) for m in (2, 3)]
        + [(8, 1, 24, 3, 1, 1, None, r) for r in (1, 2, 4)]
        + [(8, 1, w, 3, 0, 1, 1, r) for r in (1, 2) for w in (24, 32)]
    )
    small = [
        (rpb, 1, None, None, qx, 1, wpr, 1)
        for rpb in (1, 2, 4, 8) for wpr in (1, 2, 4) if rpb * wpr <= 8 for qx in (0, 1)
    ]  # fmt: skip
    sweep_types = {quant_type(t).name for t in args.sweep.split(",") if t}
    rows = []
    floors: dict[tuple[int, int, str], float] = {}  # (n, k, type) -> read floor seconds
    # a K-quant's rows are whole 256-value blocks: SmolLM2's k = 576 has none of that type
    fits = [(sh, qt) for sh in shapes for qt in types if sh[1] % qt.block_size == 0]
    for sh, qt in ((sh, qt) for sh in shapes for qt in types if (sh, qt) not in fits):
        print(f"{qt.name} {sh[0]}x{sh[1]}: skipped (k is not a multiple of {qt.block_size})")
    for (n, k), qt in fits:
        nbytes = qt.nbytes((n, k))
        sets = max(1, min(16, -(-3 * l2 // nbytes)))
        # random bytes: the speed does not depend on the values (no data-dependent branches)
        words = -(-nbytes // 4)
        raws = [
            cp.random.randint(0, 2**31 - 1, words, dtype=cp.int32).view(cp.uint8)[:nbytes]
            for _ in range(sets)
        ]
        floor_s, floor_cfg = read_floor(raws, {"queued": timed})["queued"]
        floors[(n, k, qt.name)] = floor_s
        print(
            f"{qt.name:5s} {n}x{k} read floor ({floor_cfg}): {floor_s * 1e6:7.2f} us "
            f"{nbytes // 16 * 16 / floor_s / 1e9:7.0f} GB/s "
            f"{100 * (nbytes // 16 * 16) / floor_s / copy_bps:5.1f}% of copy",
            flush=True,
        )
        for nt in nts:
            x = cp.random.standard_normal((nt, k), dtype=cp.float32)
            out = cp.empty((nt, n), cp.float32)
            first = args.sweep_shapes == "all" or (n, k) == shapes[0]
            rpb0 = matvec.MMVQ_ROWS_PER_BLOCK if qt.is_quantized else matvec.ROWS_PER_BLOCK
            u0 = matvec.MMVQ_UNROLL if qt.is_quantized else matvec.UNROLL
            qx0 = int(matvec.prequantizes(qt, n, k))
            pf0 = int(matvec.MMVQ_PREFETCH)
            rpw0 = qt.mmvq.rows_per_warp
            default = [(rpb0, u0, qt.mmvq.warps_per_sm, qt.mmvq.min_blocks, qx0, pf0, None, rpw0)]
            if qt.is_quantized:  # the other variant too, each timed with all its launches
                default.append((*default[0][:4], 1 - qx0, pf0, None, rpw0))
            configs = default + (sweep if first and nt == 1 and qt.name in sweep_types else [])
            if args.sweep_small and qt.is_quantized:
                configs = default + small
            if args.sweep_unroll and qt.is_quantized and nt == 1:
                # session 10's ncu: Q8_0 latency-bound at one item in flight a lane
                configs = default + [
                    (rpb0, u, qt.mmvq.warps_per_sm, mb, qx0, pf0, None, rpw0)
                    for u in (2, 4) for mb in (3, 4, 5)
                ]  # fmt: skip
            if args.sweep_rpw and qt.is_quantized and nt == 1:
                configs = (
                    default
                    + [(*default[0][:7], r) for r in (1, 2, 4) if r != rpw0]
                    + [(*default[0][:6], 1, r) for r in (1, 2)]
                )  # wpr 1: before balanced_wpr
            configs = list(dict.fromkeys(configs))  # each configuration once a round
            samples: dict[tuple, list[float]] = {c: [] for c in configs}
            for c in (c for _ in range(args.repeat) for c in configs):  # interleaved rounds
                rpb, unroll, wps, mb, qx, pf, wpr, rpw = c

                def fn(i, rpb=rpb, unroll=unroll, wps=wps, mb=mb, qx=qx, pf=pf, wpr=wpr, x=x,
                       out=out, raws=raws, qt=qt, shape=(n, k), rpw=rpw):  # fmt: skip
                    w = raws[i % len(raws)]
                    return matvec.launch_matvec(
                        x, w, qt, shape, out, rows_per_block=rpb, unroll=unroll, wpr=wpr,
                        warps_per_sm=wps, min_blocks=mb, prequantize=bool(qx), prefetch=bool(pf),
                        rows_per_warp=rpw if qt.is_quantized else None,
                        # mmvq itself: a type declared staged runs mmvq_st at >= 16M values
                        # (scripts/bench_mmvq_staged.py measures that one)
                        staged=False if qt.is_quantized else None,
                    )  # fmt: skip

                samples[c].append(timed(fn))
                if len(samples[c]) < args.repeat:
                    continue
                s = statistics.median(samples[c])
                spread = f" (rounds {min(samples[c]) * 1e6:.2f}-{max(samples[c]) * 1e6:.2f})"
                pct = 100 * nbytes / s / copy_bps
                row = {
                    "type": qt.name, "n": n, "k": k, "nt": nt, "rows_per_block": rpb,
                    "unroll": unroll, "warps_per_sm": wps, "min_blocks": mb, "qx": qx, "prefetch": pf, "wpr": wpr, "rpw": rpw, "us": s * 1e6, "GBps": nbytes / s / 1e9, "pct_copy": pct,
                    "copy_GBps": copy_bps / 1e9, "bytes": nbytes,
                    "rounds_us": [t * 1e6 for t in samples[c]],
                }  # fmt: skip
                rows.append(row)
                print(
                    f"{qt.name:5s} {n}x{k} nt={nt} rpb={rpb} unroll={unroll} wps={wps} mb={mb} qx={qx} pf={pf} wpr={wpr} rpw={rpw}: {s * 1e6:7.2f} us "
                    f"{nbytes / s / 1e9:7.0f} GB/s {pct:5.1f}% of copy"
                    f"{spread if args.repeat > 1 else ''}",
                    flush=True,
                )
        del raws
        cp.get_default_memory_pool().free_all_blocks()

    print(f"\nsummary (default configuration; best of the sweep; target >= {TARGET_PCT}%):")
    staged = sorted({qt.name for (n, k), qt in fits if matvec.stages_weight(qt, n, k)})
    if staged:
        print(f"(mmvq's rows: {', '.join(staged)} run mmvq_st at these shapes by default, "
              "timed by scripts/bench_mmvq_staged.py)")  # fmt: skip
    print(
        "| type | n x k | GGUF MB | nt | µs | GB/s | % of copy | read floor % of copy | "
        "of floor | best % (rows, unroll, warps/SM, min blocks, qx, prefetch, wpr, rows/warp) | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (n, k), qt, nt in ((sh, qt, nt) for sh, qt in fits for nt in nts):
        mine = [r for r in rows if (r["type"], r["n"], r["k"], r["nt"]) == (qt.name, n, k, nt)]
        rpb0 = matvec.MMVQ_ROWS_PER_BLOCK if qt.is_quantized else matvec.ROWS_PER_BLOCK
        u0 = matvec.MMVQ_UNROLL if qt.is_quantized else matvec.UNROLL
        dflt = (rpb0, u0, qt.mmvq.warps_per_sm, qt.mmvq.min_blocks, int(matvec.prequantizes(qt, n, k)),
                int(matvec.MMVQ_PREFETCH), None, qt.mmvq.rows_per_warp)  # fmt: skip
        key = ("rows_per_block", "unroll", "warps_per_sm", "min_blocks", "qx", "prefetch", "wpr",
               "rpw")  # fmt: skip
        d = next(r for r in mine if tuple(r[c] for c in key) == dflt)
        b = min(mine, key=lambda r: r["us"])
        met = "yes" if d["pct_copy"] >= TARGET_PCT else "no"
        cfg = "(" + ", ".join(str(b[c]) for c in key) + ")"
        best = f"{b['pct_copy']:.1f} {cfg}" if b is not d else "–"
        floor_s = floors[(n, k, qt.name)]
        floor_pct = 100 * (d["bytes"] // 16 * 16) / floor_s / d["copy_GBps"] / 1e9
        print(
            f"| {qt.name} | {n}x{k} | {d['bytes'] / 1e6:.1f} | {nt} | {d['us']:.2f} | "
            f"{d['GBps']:.0f} | {d['pct_copy']:.1f} | {floor_pct:.1f} | "
            f"{100 * floor_s / (d['us'] * 1e-6):.0f}% | {best} | {met if nt == 1 else '–'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

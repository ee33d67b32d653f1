"""mmvq_st (the weight staged in shared memory by the bulk-copy engine) against mmvq, % of copy.

    PYTHONPATH=$PWD python3 scripts/bench_mmvq_staged.py [--shapes 14336x4096,4096x14336]
        [--types Q8_0,Q4_K] [--sweep Q8_0,Q4_K] [--json out.json]

Timed as scripts/bench_matvec.py times mmvq (tracekit's queued timing: launches queued behind a
spin kernel, the median of 5 runs of 20; weight copies rotated past 3x the L2, so every launch
reads from DRAM), nt = 1. "% of copy" = the weight's GGUF bytes / time / the D2D copy
bandwidth measured in the same run, for two times of the same launches: "queued" (the time per
call of calls back to back: it includes the ~1.4 us gap from one launch's end to the next one's
start) and "own" (ceilings.gpu_own_times: the sum of a call's launches' LaunchStamp start-to-end
times, the device time a trace gives the launch, stamp costs included). The read floor
(ceilings.read_floor: the best read_stream over the same rotated bytes) is timed both ways too.
The summary's "met" reads the kernel the engine runs for that shape (matvec.stages_weight) at
its own device time against the 85% target. Per type and shape: mmvq as the quant path runs it today
(its declared variant), mmvq_st at its default geometry (staged_geometry, at the type's declared
blocks: quants.StagedShape; --st-shape times others beside it), and for the
``--sweep`` types, on the first shape, every rows-per-tile x stages x blocks-per-SM x
warps-per-row configuration, blocks of 4 and 2 rows (tiles of 1-2 block-rows, 2-4 stages) and
two items a lane at 2-3 stages and blocks. Before timing, each mmvq_st configuration's output is
checked bit for bit against the fused mmvq at the same warps per row (the GPU test's claim,
here at the benchmark's shapes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: issue 13: each quantized matvec >= 85% of copy bandwidth on a 14336 x 4096 weight
TARGET_PCT = 85.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="14336x4096,4096x14336,151936x896")
    ap.add_argument("--types", default="", help="comma-separated (default: every quantized type)")
    ap.add_argument(
        "--sweep", default="Q8_0,Q4_K,Q6_K", help="types whose every configuration is timed"
    )
    ap.add_argument(
        "--rounds", type=int, default=1,
        help="time mmvq and mmvq_st's default this many times each, alternating; the median",
    )  # fmt: skip
    ap.add_argument(
        "--mmvq-unroll", default="",
        help="also time mmvq with these items in flight a lane (comma-separated; default: its own)",
    )  # fmt: skip
    ap.add_argument(
        "--x-hot", action="store_true",
        help="x written just before each call (its 16 KB in L2, as the engine's previous node "
        "leaves it; without it x may be evicted by the rotated weights). The write is not a "
        "stamped launch, so own times exclude it; queued times include it",
    )  # fmt: skip
    ap.add_argument(
        "--st-rpw", default="",
        help="also time mmvq_st with R rows a warp walks together (comma-separated R: 2, 4), at "
        "the default blocks (8 warps, tiles of whole steps of 8 R rows where two stages fit) and "
        "at blocks of 8 / R warps taking the default's tile rows (4 blocks an SM where they fit, "
        "else 2): queued and own times, each checked against mmvq's bits first",
    )  # fmt: skip
    ap.add_argument(
        "--st-shape", default="",
        help="also time mmvq_st at these blocks (comma-separated RxWxB: R rows a warp walks "
        "together, W warps a block, B blocks an SM; quants.StagedShape), e.g. 1x8x2 (the blocks "
        "before a type declared its own) beside the declared ones: queued and own times",
    )  # fmt: skip
    ap.add_argument(
        "--stages", type=int, default=0,
        help="mmvq_st's default at this many stages (an A/B of matvec.STAGED_STAGES; 0: as declared)",
    )  # fmt: skip
    ap.add_argument(
        "--qx", action="store_true",
        help="also time mmvq_st_qx (x quantized by its own launch, quantize_q8_n1, and copied "
        "in): the node (both launches) and the kernel alone (x's runs made once, rewritten "
        "before each call where --x-hot, as the quantize launch leaves them)",
    )  # fmt: skip
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)

    import cupy as cp
    import launch_fixed_cost

    from tracekit.kernels import matvec
    from tracekit.kernels.ceilings import (
        gpu_own_times,
        gpu_times_queued,
        queued_copy_bandwidth,
        read_floor,
    )  # fmt: skip
    from tracekit.quants import QUANTIZED_TYPES, StagedShape, quant_type

    dev = cp.cuda.Device()
    l2 = int(dev.attributes.get("L2CacheSize", 64 << 20))

    def timed(fn) -> float:
        return statistics.median(gpu_times_queued(fn, launches=20, reps=5, warmup=3))

    def own(fn) -> float:
        return statistics.median(gpu_own_times(fn, launches=20, reps=5, warmup=3))

    if args.stages:
        matvec.STAGED_STAGES = args.stages
        print(f"mmvq_st's default here: {args.stages} stages", flush=True)
    copy_bps = queued_copy_bandwidth()
    print(f"copy bandwidth {copy_bps / 1e9:.0f} GB/s (1 GiB D2D, read + write)", flush=True)
    if args.x_hot:
        print("x hot: written before each call (the engine's previous node)", flush=True)

    def time_qx(qt, n, k, x, out, raws, nbytes) -> dict:
        """mmvq_st_qx at its default geometry: bits checked against the fused mmvq_st, then the
        node's own time (quantize_q8 + mmvq_st_qx), the quantize launch's alone and the
        kernel's alone, each as % of copy for the weight's bytes."""
        fused, recs = matvec.launch_matvec(x, raws[0], qt, (n, k), cp.empty_like(out),
                                           staged=True, prequantize=False)  # fmt: skip
        got, qrecs = matvec.launch_matvec(x, raws[0], qt, (n, k), cp.empty_like(out),
                                          staged=True, prequantize=True)  # fmt: skip
        if not (cp.asnumpy(got).view("u4") == cp.asnumpy(fused).view("u4")).all():
            raise SystemExit(f"{qt.name} {n}x{k}: mmvq_st_qx differs from mmvq_st's bits")
        mod = matvec._module(qt.suffix, matvec.STAGED_UNROLL, 0, staged=True)
        xr, _ = matvec._launch_quantize(mod, x)  # (the kernel-alone calls' runs)

        def quantize(i):
            if args.x_hot:
                cp.multiply(x, 1.0, out=x)
            matvec._launch_quantize(mod, x)

        def node(i):
            if args.x_hot:
                cp.multiply(x, 1.0, out=x)
            matvec.launch_matvec(x, raws[i % len(raws)], qt, (n, k), out, staged=True,
                                 prequantize=True)  # fmt: skip

        def kernel(i):
            if args.x_hot:
                cp.bitwise_or(xr, 0, out=xr)  # (not stamped: x's runs in L2, as just written)
            matvec._launch_staged(x, raws[i % len(raws)], qt, (n, k), out, None, None, None,
                                  None, None, None, qx=True, xr=xr)  # fmt: skip

        row = {"type": qt.name, "n": n, "k": k, "kind": "st_qx", "bytes": nbytes,
               "kernels": [r.kernel for r in qrecs]}  # fmt: skip
        for name, fn in (("st", lambda i: matvec.launch_matvec(
                x, raws[i % len(raws)], qt, (n, k), out, staged=True, prequantize=False)),
                ("node", node), ("kernel", kernel), ("quantize", quantize)):  # fmt: skip
            o = own(fn)
            row[f"{name}_own_us"] = o * 1e6
            if name != "quantize":  # (x's launch reads no weight: no % of copy)
                row[f"{name}_own_pct_copy"] = 100 * nbytes / o / copy_bps
        print(f"{qt.name:6s} {n}x{k} mmvq_st_qx: own {row['st_own_pct_copy']:.1f}% (fused) / "
              f"{row['node_own_pct_copy']:.1f}% (node) / {row['kernel_own_pct_copy']:.1f}% "
              f"(kernel alone); quantize {row['quantize_own_us']:.2f} us", flush=True)  # fmt: skip
        return row

    qx_rows: list[dict] = []
    types = [quant_type(t) for t in args.types.split(",")] if args.types else list(QUANTIZED_TYPES)
    sweep = {quant_type(t).name for t in args.sweep.split(",") if t}
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows, summary = [], []
    for n, k in shapes:
        for qt in (t for t in types if k % t.block_size == 0):
            nbytes = qt.nbytes((n, k))
            sets = max(1, min(16, -(-3 * l2 // nbytes)))
            raws = [
                cp.random.randint(0, 2**31 - 1, -(-nbytes // 4), dtype=cp.int32).view(cp.uint8)[:nbytes]
                for _ in range(sets)
            ]  # fmt: skip
            # a real weight's f16 scales: random bytes make NaN/Inf scales, which cost nothing
            # different, but keep the parity check meaningful
            floor = read_floor(raws, {"queued": timed, "own": own})
            for how, (fs, cfg) in floor.items():
                print(f"{qt.name:6s} {n}x{k} read floor, {how} ({cfg}): {fs * 1e6:7.2f} us "
                      f"{100 * (nbytes // 16 * 16) / fs / copy_bps:5.1f}% of copy", flush=True)  # fmt: skip
            rows.append({"type": qt.name, "n": n, "k": k, "kind": "floor",
                         "bytes": nbytes // 16 * 16, "us": floor["queued"][0] * 1e6,
                         "own_us": floor["own"][0] * 1e6})  # fmt: skip
            x = cp.random.standard_normal((1, k), dtype=cp.float32)
            out = cp.empty((1, n), cp.float32)
            # (kind, rows per tile, stages, blocks an SM, unroll, warps a row, rows a block,
            # rows a warp walks together[, StagedShape]); None: default (the type's declared)
            configs: list[tuple] = [("mmvq", None, None, None, None, None, None, None)]
            configs.append(("st", None, None, None, None, None, None, None))
            configs += [
                ("mmvq", None, None, None, int(u), None, None, None)
                for u in args.mmvq_unroll.split(",") if u
            ]  # fmt: skip
            st_rpw = [int(r) for r in args.st_rpw.split(",") if r]
            if st_rpw:
                default_rows = matvec.staged_geometry(n, k, 1, qt, *matvec._device_limits())[4]
            for r in st_rpw:
                # the default blocks with R times the rows a tile, then blocks of 8 / R warps
                # on the default's tiles (the same warps an SM at 4 blocks an SM)
                configs.append(("st", None, None, None, None, None, None, r,
                                StagedShape(r, 8, matvec.STAGED_BLOCKS_PER_SM)))  # fmt: skip
                configs += [("st", default_rows, None, b, None, None, 8 // r, r) for b in (4, 2)]
            configs += [
                ("st", None, None, None, None, None, None, None,
                 StagedShape(*(int(v) for v in spec.split("x"))))
                for spec in args.st_shape.split(",") if spec
            ]  # fmt: skip
            if qt.name in sweep and (n, k) == shapes[0]:
                configs += [
                    ("st", m * rb, s, (16 if w16 else 24) // rb, 1, 1, rb, None)
                    for rb in (4, 2) for w16 in (True, False) for s in (2, 3, 4) for m in (1, 2)
                ] + [
                    ("st", r, s, b, u, w, None, None)
                    for r in (None,) for s in (2, 3, 4) for b in (2, 3, 4) for u in (1,) for w in (1, 2, 4)
                ] + [("st", 16, 2, 2, 1, 1, None, None)] + [
                    ("st", None, s, b, 2, 1, None, None) for s in (2, 3) for b in (2, 3)
                ]  # fmt: skip
                # (blocks of 4 or 2 warps, 16 or 24 an SM: tiles of 1 or 2 block-rows, smaller
                # than the default's 8 rows, so a launch's first and last tiles take less time
                # and more, smaller tiles are in flight while the warps compute;
                # warps a row 2 and 4: tiles of 4 and 2 block-rows, so more, smaller stages
                # fit; unroll 2: two items a lane read from the stage before their dot products)
            best = {}

            def other_kw(c):  # the A/B partner of mmvq (mmvq_st's default) and vice versa;
                # of R rows a warp or other blocks, mmvq_st's default
                return dict(staged=True) if c[7] or c[8:] else dict(staged=c[0] == "mmvq")

            for c in dict.fromkeys(configs):
                kind, rpt, st, bps, unroll, wpr, rb, rpw, *shaped = c
                shape = shaped[0] if shaped else None
                kw = (dict(staged=False, unroll=unroll) if kind == "mmvq" else
                      dict(staged=True, rows_per_tile=rpt, stages=st, blocks_per_sm=bps,
                           unroll=unroll, wpr=wpr, rows_per_block=rb, rows_per_warp=rpw,
                           staged_shape=shape))  # fmt: skip
                try:
                    got, recs = matvec.launch_matvec(x, raws[0], qt, (n, k), out, **kw)
                except (matvec.KernelInputError, ValueError) as e:
                    print(f"{qt.name} {n}x{k} {c}: {e}")
                    continue
                if kind == "st" or unroll:  # the same bits as mmvq's default (one item a lane)
                    same, _ = matvec.launch_matvec(
                        x, raws[0], qt, (n, k), cp.empty_like(out), staged=False,
                        prequantize=None if kind == "mmvq" else False, wpr=recs[-1].block[1],
                    )  # fmt: skip
                    a, b = cp.asnumpy(got).view("u4"), cp.asnumpy(same).view("u4")
                    if not (a == b).all():
                        raise SystemExit(f"{qt.name} {n}x{k} {c}: {int((a != b).sum())} outputs "
                                         "differ from mmvq's bits")  # fmt: skip

                def call(kw2, x=x, raws=raws, qt=qt, shape=(n, k), out=out):
                    def fn(i):
                        if args.x_hot:
                            cp.multiply(x, 1.0, out=x)
                        return matvec.launch_matvec(x, raws[i % len(raws)], qt, shape, out, **kw2)

                    return fn

                own_s = None
                if c in configs[:2] or kind == "mmvq" or rpw or shape:  # A/B rows: queued, own
                    samples, owns = [], []
                    for _ in range(args.rounds):
                        # alternated with its partner only when there is more than one round
                        for kw2 in (kw, other_kw(c)) if args.rounds > 1 else (kw,):
                            t, o = timed(call(kw2)), own(call(kw2))
                            if kw2 is kw:
                                samples.append(t)
                                owns.append(o)
                    s, own_s = statistics.median(samples), statistics.median(owns)
                else:
                    s = timed(call(kw))
                pct = 100 * nbytes / s / copy_bps
                geo = recs[-1]
                row = {"type": qt.name, "n": n, "k": k, "kind": kind, "bytes": nbytes,
                       "default": c in configs[:2],
                       "rows_per_tile": recs[-1].extra.get("rows_per_tile"),
                       "stages": recs[-1].extra.get("stages"),
                       "blocks_per_sm": recs[-1].extra.get("blocks_per_sm", bps),
                       "unroll": unroll, "wpr": geo.block[1], "block": list(geo.block), "grid": list(geo.grid),
                       "rows_per_warp": recs[-1].extra.get("rows_per_warp"),
                       "us": s * 1e6, "pct_copy": pct,
                       "own_us": own_s * 1e6 if own_s else None,
                       "own_pct_copy": 100 * nbytes / own_s / copy_bps if own_s else None,
                       "kernels": [r.kernel for r in recs]}  # fmt: skip
                rows.append(row)
                print(f"{qt.name:6s} {n}x{k} {kind:4s} rpt={row['rows_per_tile']} stages={row['stages']} bps={row['blocks_per_sm']} "
                      f"unroll={unroll} rpw={row['rows_per_warp']} block={tuple(geo.block)}: "
                      f"{s * 1e6:7.2f} us {pct:5.1f}% of copy"
                      + (f", own {own_s * 1e6:7.2f} us {row['own_pct_copy']:5.1f}%" if own_s else ""),
                      flush=True)  # fmt: skip
                key = ("mmvq" if c == configs[0] else "unroll" if kind == "mmvq" else
                       "st" if c == configs[1] else "best")  # fmt: skip
                if key not in best or s * 1e6 < best[key]["us"]:
                    best[key] = row
            if args.qx:
                qx_rows.append(time_qx(qt, n, k, x, out, raws, nbytes))
            del raws
            cp.get_default_memory_pool().free_all_blocks()
            engine = "st" if matvec.stages_weight(qt, n, k) else "mmvq"
            summary.append((qt.name, n, k, best, floor, nbytes, engine))
    print(
        "\n% of copy, queued / own device time. | type | n x k | read floor | mmvq | "
        "mmvq_st default | best mmvq_st queued (rows, stages, blocks/SM, unroll, wpr, rows/block, "
        "rows/warp) | "
        f"engine's kernel, own | >= {TARGET_PCT:.0f}% | best mmvq --mmvq-unroll (unroll) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, k, best, floor, nbytes, engine in summary:
        m, d, b = best.get("mmvq"), best.get("st"), best.get("best")
        if not (m and d):
            print(f"| {name} | {n}x{k} | ? | ? | ? | ? | ? | ? |")
            continue
        fl = " / ".join(f"{100 * (nbytes // 16 * 16) / floor[h][0] / copy_bps:.1f}"
                        for h in ("queued", "own"))  # fmt: skip
        bs = (f"{b['pct_copy']:.1f} ({b['rows_per_tile']}, {b['stages']}, {b['blocks_per_sm']}, {b['unroll']}, {b['wpr']}, {b['block'][2]}, {b['rows_per_warp']})"
              if b and b["us"] < d["us"] else "–")  # fmt: skip
        e = (d if engine == "st" else m)["own_pct_copy"]
        print(f"| {name} | {n}x{k} | {fl} | {m['pct_copy']:.1f} / {m['own_pct_copy']:.1f} | "
              f"{d['pct_copy']:.1f} / {d['own_pct_copy']:.1f} | {bs} | "
              f"{'mmvq_st' if engine == 'st' else 'mmvq'} {e:.1f} | {'yes' if e >= TARGET_PCT else 'no'} | "
              + (f"{u['pct_copy']:.1f} / {u['own_pct_copy']:.1f} ({u['unroll']}) |" if (u := best.get("unroll")) else "– |"))  # fmt: skip
    if qx_rows:
        print("\nmmvq_st_qx, own device time, % of copy: | type | n x k | mmvq_st (fused) | "
              "quantize_q8 + mmvq_st_qx (node) | mmvq_st_qx alone | quantize_q8 us |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for r in qx_rows:
            print(f"| {r['type']} | {r['n']}x{r['k']} | {r['st_own_pct_copy']:.1f} | "
                  f"{r['node_own_pct_copy']:.1f} | {r['kernel_own_pct_copy']:.1f} | "
                  f"{r['quantize_own_us']:.2f} |")  # fmt: skip
    rows += qx_rows
    doc = {"copy_GBps": copy_bps / 1e9, "x_hot": args.x_hot, "rows": rows}
    fits = launch_fixed_cost.table(doc)  # shapes of one k at two sizes or more: fixed + rate
    if len(fits) > 2:
        print("\nown time = fixed + bytes / rate (scripts/launch_fixed_cost.py):")
        print("\n".join(fits))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

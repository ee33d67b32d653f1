"""Where an mmvq_st launch's time goes: its ramp, its steady stream and its tail, block by block.

    PYTHONPATH=$PWD python3 scripts/mmvq_st_timeline.py [--types Q4_0,Q4_K] [--shape 14336x4096]
        [--config rows_per_block=2,rows_per_tile=2,blocks_per_sm=8] [--runs 5] [--x-hot]
        [--evict read|write] [--json out.json]

launch_fixed_cost.py fits a launch's own time as fixed + bytes / rate; this shows what the fixed
part is made of. The kernels are built with MMVQ_ST_TIMELINE=1 (matvec.cu): thread 0 of each
block notes on the global timer when the block entered, had x quantized, saw each of its tiles
arrive in shared memory and had each computed, and when it left. Each run reads a weight not in
L2: a scratch buffer of twice the L2 is read between runs (``--evict read``, the default: L2
holds clean lines, as bench_mmvq_staged.py's rotated weights leave it, so no miss waits on a
write-back) or written (``--evict write``, as the timelines before 2026-12-07 15:00 UTC were
measured: every miss first writes a dirty line back). Printed per run, in µs from the
first block's entry: the last block's entry, x ready (median), the first tile's arrival
(min/median/max over blocks), the last arrival, the end, a tile's compute (median) and a block's
wait for its next tile after computing one (median/p90), and the stream: the tiles' bytes by the
time they arrived, in bins, as % of the copy bandwidth (the trace's ceiling's copy stream,
ceilings.measure_ceilings). An arrival is noted when thread 0 looks, after the tile before: with
no wait, the bytes were there earlier and the bins lag. The instrumented kernel is not the timed
one (its marks cost a global store each); its shape in time is what counts here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: matvec.cu's MMVQ_TL_* layout
TL_BLOCKS, TL_TILES, TL_EVENTS = 2048, 14, 32
TL_ENTRY, TL_X, TL_EXIT = 0, 1, TL_EVENTS - 1


def phases(
    tl: np.ndarray, grid: int, tiles: int, tile_bytes: list[int], copy_bps: float, bin_s: float
) -> dict:
    """One launch's timeline (``tl``: [block][event] global-timer ns, the first ``grid`` blocks
    used; tile j is block j mod grid's (j // grid)-th) as phase times in µs from the first entry
    and the stream's bandwidth per ``bin_s`` bin (% of ``copy_bps``, by arrival time).

    Raises:
        ValueError: a block that ran has an event missing or out of order, or a block has more
            tiles than the timeline notes.
    """
    if grid > TL_BLOCKS:
        raise ValueError(f"grid of {grid} blocks: the timeline notes the first {TL_BLOCKS}")
    if -(-tiles // grid) > TL_TILES:
        raise ValueError(
            f"{tiles} tiles over {grid} blocks is {-(-tiles // grid)} a block: the timeline "
            f"notes {TL_TILES}"
        )
    tl = tl[:grid].astype(np.int64)
    t0 = int(tl[:, TL_ENTRY].min())
    arrive, done, computing, waiting = [], [], [], []
    for b in range(grid):
        mine = len(range(b, tiles, grid))
        ev = [tl[b, TL_ENTRY], tl[b, TL_X]]
        for u in range(mine):
            ev += [tl[b, 2 + 2 * u], tl[b, 3 + 2 * u]]
            arrive.append((int(tl[b, 2 + 2 * u]) - t0, tile_bytes[b + u * grid]))
            computing.append(int(tl[b, 3 + 2 * u]) - int(tl[b, 2 + 2 * u]))
            if u:
                waiting.append(int(tl[b, 2 + 2 * u]) - int(tl[b, 1 + 2 * u]))
        ev.append(tl[b, TL_EXIT])
        ev = np.array(ev)
        if (ev == 0).any() or (np.diff(ev) < 0).any():
            raise ValueError(f"block {b}: events missing or out of order: {ev.tolist()}")
        if mine:
            done.append((int(tl[b, 2]) - t0, int(tl[b, 2 + 2 * (mine - 1)]) - t0))
    arrive.sort()
    t_end = int(tl[:, TL_EXIT].max()) - t0
    first = np.array([f for f, _ in done])
    last_arrival = max(la for _, la in done)
    nbins = max(1, -(-t_end // int(bin_s * 1e9)))
    binned = np.zeros(nbins)
    for t, nbytes in arrive:
        binned[min(nbins - 1, t // int(bin_s * 1e9))] += nbytes
    total = sum(tile_bytes)
    cum = np.cumsum([nb for _, nb in arrive])
    t25 = arrive[int(np.searchsorted(cum, 0.25 * total))][0]
    t75 = arrive[int(np.searchsorted(cum, 0.75 * total))][0]
    steady = 0.5 * total / max(1, t75 - t25) * 1e9
    us = 1e-3
    return {
        "last_entry_us": (int(tl[:, TL_ENTRY].max()) - t0) * us,
        "x_ready_median_us": float(np.median(tl[:, TL_X] - t0)) * us,
        "first_arrival_us": [
            float(first.min()) * us,
            float(np.median(first)) * us,
            float(first.max()) * us,
        ],  # fmt: skip
        "last_arrival_us": last_arrival * us,
        "end_us": t_end * us,
        "tail_us": (t_end - last_arrival) * us,
        "compute_median_us": float(np.median(computing)) * us,
        # a block's wait for its next tile after computing one (none: it had arrived already,
        # so the noted arrival is late and the stream's bins lag)
        "wait_us": [
            float(np.median(waiting)) * us if waiting else 0.0,
            float(np.percentile(waiting, 90)) * us if waiting else 0.0,
        ],  # fmt: skip
        "steady_pct_copy": 100 * steady / copy_bps,
        "whole_pct_copy": 100 * total / (t_end * 1e-9) / copy_bps,
        "bins_pct_copy": [100 * b / bin_s / copy_bps for b in binned],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_0,Q4_K,Q6_K,Q8_0")
    ap.add_argument("--shape", default="14336x4096")
    ap.add_argument(
        "--config", default="",
        help="mmvq_st launch keywords, e.g. rows_per_block=2,rows_per_tile=2,blocks_per_sm=8,stages=3",
    )  # fmt: skip
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--x-hot", action="store_true",
        help="x written just before each launch (in L2, as the engine's previous node leaves it)",
    )  # fmt: skip
    ap.add_argument(
        "--evict", choices=("read", "write"), default="read",
        help="how the weight leaves L2 between runs: a scratch buffer of 2x the L2 read (clean "
        "lines) or written (dirty lines, each miss waits on a write-back)",
    )  # fmt: skip
    ap.add_argument("--bin-us", type=float, default=0.5)
    ap.add_argument("--json", help="write the runs' phases here")
    args = ap.parse_args(argv)
    defines = os.environ.get("TRACEKIT_CUDA_DEFINES", "")
    os.environ["TRACEKIT_CUDA_DEFINES"] = f"{defines} -DMMVQ_ST_TIMELINE=1".strip()

    import cupy as cp

    from tracekit.kernels import matvec
    from tracekit.kernels.ceilings import BANDWIDTH_KEYS, measure_ceilings
    from tracekit.quants import quant_type

    n, k = (int(v) for v in args.shape.split("x"))
    config = {key: int(v) for key, v in (kv.split("=") for kv in args.config.split(",") if kv)}
    ceilings = measure_ceilings("cupy")
    copy_bps = ceilings["copy_bandwidth_Bps"]
    l2 = int(cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20))
    scratch = cp.zeros(2 * l2, cp.uint8)
    streams = ", ".join(f"{key} {ceilings.get(key, 0) / 1e9:.0f} GB/s" for key in BANDWIDTH_KEYS)
    print(f"ceilings: {streams}; {n}x{k}; config {config or 'default'}; L2 evicted by "
          f"{'writing' if args.evict == 'write' else 'reading'}")  # fmt: skip
    out_rows = []
    for name in args.types.split(","):
        qt = quant_type(name)
        nbytes = qt.nbytes((n, k))
        raw = cp.random.randint(0, 2**31 - 1, -(-nbytes // 4), dtype=cp.int32).view(cp.uint8)
        raw = raw[:nbytes]
        x = cp.random.standard_normal((1, k), dtype=cp.float32)
        out = cp.empty((1, n), cp.float32)
        kw = dict(staged=True, **config)
        _, recs = matvec.launch_matvec(x, raw, qt, (n, k), out, **kw)  # compiles
        rec = recs[-1]  # (the geometry every run has)
        rows_per_tile = rec.extra["rows_per_tile"]
        tiles = -(-n // rows_per_tile)
        row_bytes = qt.row_bytes(k)
        tile_bytes = [min(rows_per_tile, n - j * rows_per_tile) * row_bytes for j in range(tiles)]
        mod = matvec._module(qt.suffix, kw.get("unroll") or matvec.STAGED_UNROLL, 0, staged=True)
        ptr = mod.get_global("mmvq_st_timeline")
        tl_dev = cp.ndarray((TL_BLOCKS, TL_EVENTS), cp.uint64, ptr)
        runs = []
        for _ in range(args.runs):
            if args.evict == "write":  # the weight out of L2
                scratch.fill(1)
            else:
                int(scratch.max())  # (a read of every byte: L2 left clean)
            tl_dev.fill(0)
            if args.x_hot:
                x *= 1.0  # (a write: x's 16 KB in L2)
            matvec.launch_matvec(x, raw, qt, (n, k), out, **kw)
            cp.cuda.get_current_stream().synchronize()
            runs.append(phases(cp.asnumpy(tl_dev), rec.grid[0], tiles, tile_bytes, copy_bps,
                               args.bin_us * 1e-6))  # fmt: skip
        geo = f"grid {rec.grid[0]} block {tuple(rec.block)} rows/tile {rows_per_tile} " \
              f"stages {rec.extra.get('stages')} tiles {tiles}"  # fmt: skip
        print(f"\n{qt.name} {n}x{k}: {geo}")
        print("  run  last-entry  x-ready  first-arrival(min/med/max)  last-arrival   end   tail"
              "  compute  wait(med/p90)  steady%  whole%")  # fmt: skip
        for i, p in enumerate(runs):
            fa = "/".join(f"{v:.2f}" for v in p["first_arrival_us"])
            print(f"  {i:3d} {p['last_entry_us']:10.2f} {p['x_ready_median_us']:8.2f} {fa:>27s} "
                  f"{p['last_arrival_us']:12.2f} {p['end_us']:6.2f} {p['tail_us']:6.2f} "
                  f"{p['compute_median_us']:8.2f} {'/'.join(f'{v:.2f}' for v in p['wait_us']):>13s} "
                  f"{p['steady_pct_copy']:7.1f} {p['whole_pct_copy']:7.1f}")  # fmt: skip
        mid = sorted(runs, key=lambda p: p["end_us"])[len(runs) // 2]
        print(f"  median run's stream, % of copy per {args.bin_us} µs: "
              + " ".join(f"{v:.0f}" for v in mid["bins_pct_copy"]))  # fmt: skip
        print(f"  median of runs: end {statistics.median(p['end_us'] for p in runs):.2f} µs, "
              f"tail {statistics.median(p['tail_us'] for p in runs):.2f} µs, first arrival "
              f"{statistics.median(p['first_arrival_us'][1] for p in runs):.2f} µs")  # fmt: skip
        out_rows.append({"type": qt.name, "n": n, "k": k, "config": config, "geometry": geo,
                         "runs": runs})  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out_rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

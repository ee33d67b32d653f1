"""Attention speed: the tiled prefill kernel against the one-block-per-query kernel at the
same shapes, around the switch-over (attention.TileConfig.min_nt) and at a 512-token prefill.

    PYTHONPATH=$PWD python3 scripts/bench_attention.py [--heads 14x2x64,32x8x128,8x4x256]
        [--nt 1,8,12,16,24,32,64,512] [--past 0,512] [--json out.json]

Heads: n_head x n_kv x head_dim (the defaults: Qwen2.5-0.5B's, Llama-3-8B's, a head_dim-256
model's). For each, nt queries at positions n_past .. n_past + nt - 1 over a cache of n_past + nt
rows. Device time per call: tracekit's queued timing (calls queued behind a spin kernel; the
median of 5 runs of 10). Both kernels run every shape (``launch_attention_f32(tiled=True/False)``), so "f32 / tiled" is the time ratio at one shape (> 1: the tiled kernel is
faster) and the launcher's choice can be checked against it; Gflop/s from the record's flops
(QK and PV products of the keys each query sees).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", default="14x2x64,32x8x128,8x4x256")
    ap.add_argument("--nt", default="1,8,12,16,24,32,64,512")
    ap.add_argument("--past", default="0,512")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)

    import cupy as cp

    from tracekit.kernels import attention
    from tracekit.kernels.ceilings import gpu_times_queued

    def timed(fn) -> float:
        return statistics.median(gpu_times_queued(fn, launches=10, reps=5, warmup=2))

    rows = []
    for spec in args.heads.split(","):
        n_head, n_kv, hd = (int(v) for v in spec.split("x"))
        for n_past in (int(v) for v in args.past.split(",")):
            for nt in (int(v) for v in args.nt.split(",")):
                n_ctx = n_past + nt
                q = cp.random.standard_normal((nt, n_head, hd), dtype=cp.float32)
                kc = cp.random.standard_normal((n_ctx, n_kv, hd), dtype=cp.float32)
                vc = cp.random.standard_normal((n_ctx, n_kv, hd), dtype=cp.float32)
                out = cp.empty((nt, n_head * hd), cp.float32)
                call = (q, kc, vc, n_past, hd**-0.5)
                times, flops = {}, 0
                for kind, tiled in (("f32", False), ("tiled", True)):
                    if attention.attention_kernel(nt, hd, tiled) is None and tiled:
                        continue  # a head_dim over every tiled bucket
                    _, rec = attention.launch_attention_f32(*call, out=out, tiled=tiled)
                    flops = rec.flops
                    times[kind] = timed(
                        lambda i, c=call, o=out, t=tiled: attention.launch_attention_f32(
                            *c, out=o, tiled=t
                        )
                    )
                picked = "tiled" if attention.attention_kernel(nt, hd) is not None else "f32"
                row = {
                    "n_head": n_head, "n_kv": n_kv, "head_dim": hd, "n_past": n_past, "nt": nt,
                    "f32_us": times["f32"] * 1e6, "tiled_us": times.get("tiled", float("nan")) * 1e6,
                    "flops": flops, "picked": picked,
                }  # fmt: skip
                row["f32_over_tiled"] = row["f32_us"] / row["tiled_us"]
                best = min(times, key=times.__getitem__)
                row["picked_best"] = picked == best
                rows.append(row)
                print(
                    f"{n_head}x{n_kv}x{hd} past {n_past:5d} nt {nt:4d}: f32 {row['f32_us']:9.1f} us, "
                    f"tiled {row['tiled_us']:9.1f} us (f32 / tiled {row['f32_over_tiled']:5.2f}); "
                    f"{flops / min(times.values()) / 1e9:7.0f} Gflop/s best; launcher picks "
                    f"{picked}{'' if row['picked_best'] else ' (not the faster)'}",
                    flush=True,
                )
                del q, kc, vc, out
        cp.get_default_memory_pool().free_all_blocks()
    mins = ", ".join(f"d{c.d} from {c.min_nt}" for c in attention.TILE_CONFIGS)
    print(f"\nthe launcher's switch-over (attention.TILE_CONFIGS' min_nt): {mins}; "
          f"{sum(r['picked_best'] for r in rows)} of {len(rows)} shapes it picks the faster")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

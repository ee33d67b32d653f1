"""Quant-path prefill speed: mmq (quantize_q8 + mmq_<suffix>) against the int8 tensor-core peak
and the f16 path per call (dequant + convert + cuBLASLt GEMM), per type (issue 13 item 1).

    PYTHONPATH=$PWD python3 scripts/bench_mmq.py [--shapes 14336x4096,4864x896,896x4864]
        [--nt 512] [--types Q4_K,Q6_K] [--json out.json]

For each type and weight n x k (n outputs; the defaults: Llama-3-8B's FFN up/gate, a 0.5B model's
FFN up/gate and down), x of nt tokens. Device time per call: tracekit's queued timing (calls
queued behind a spin kernel; the median of 5 runs of 10), each call every launch of the node:
mmq's two, the f16 path's three. TOPS = 2 nt n k / time; "% int8 peak" divides mmq's by the
measured mma.sync peak (ceilings' int8_tensor_core, measured in this run), "f16 / mmq" is the
f16 path's time over mmq's (> 1: mmq is faster).
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
    ap.add_argument("--shapes", default="14336x4096,4864x896,896x4864", help="weights n x k")
    ap.add_argument("--nt", default="512", help="token counts (comma-separated)")
    ap.add_argument("--types", default="", help="comma-separated type names (default: all)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)

    import cupy as cp
    import numpy as np

    from tests.kernels.test_matvec import finite_raw
    from tracekit.kernels import mmq
    from tracekit.kernels.ceilings import _imma_peak, gpu_times_queued
    from tracekit.kernels.matmul import launch_matmul_dequant_f16
    from tracekit.quants import QUANTIZED_TYPES, quant_type

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    peak = _imma_peak()
    print(f"device {props['name'].decode()}, int8 mma.sync peak {peak / 1e12:.0f} TOPS")
    types = [quant_type(t) for t in args.types.split(",") if t] or list(QUANTIZED_TYPES)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    nts = [int(v) for v in args.nt.split(",")]

    def timed(fn) -> float:
        return statistics.median(gpu_times_queued(fn, launches=10, reps=5, warmup=2))

    rows = []
    for (n, k), qt, nt in ((sh, qt, nt) for sh in shapes for qt in types for nt in nts):
        if k % qt.block_size:
            continue
        # random blocks with finite scales (no dequantized copy: 14336 x 4096 is 470 MB in f64)
        raw = cp.asarray(finite_raw(qt, n * k // qt.block_size, np.random.default_rng(1)))
        x = cp.asarray(cp.random.standard_normal((nt, k), dtype=cp.float32))
        out = cp.empty((nt, n), cp.float32)
        call = (x, raw, qt, (n, k))
        t_mmq = timed(lambda i, a=call, o=out: mmq.launch_mmq(*a, o))
        t_f16 = timed(lambda i, a=call: launch_matmul_dequant_f16(*a))
        flops = 2 * nt * n * k
        row = {
            "type": qt.name, "n": n, "k": k, "nt": nt, "mmq_us": t_mmq * 1e6,
            "f16_per_call_us": t_f16 * 1e6, "mmq_TOPS": flops / t_mmq / 1e12,
            "pct_int8_peak": 100 * flops / t_mmq / peak, "f16_over_mmq": t_f16 / t_mmq,
            "int8_peak_TOPS": peak / 1e12,
        }  # fmt: skip
        rows.append(row)
        print(
            f"{qt.name:6s} {n}x{k} nt={nt}: mmq {t_mmq * 1e6:8.1f} us "
            f"{row['mmq_TOPS']:6.1f} TOPS ({row['pct_int8_peak']:4.1f}% of int8 peak); "
            f"f16 per call {t_f16 * 1e6:8.1f} us (f16 / mmq {row['f16_over_mmq']:.2f})",
            flush=True,
        )
        del raw, x, out, call
        cp.get_default_memory_pool().free_all_blocks()
    print("\n| type | n x k | nt | mmq µs | TOPS | % int8 peak | f16 per call µs | f16 / mmq |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['type']} | {r['n']}x{r['k']} | {r['nt']} | {r['mmq_us']:.1f} | "
            f"{r['mmq_TOPS']:.1f} | {r['pct_int8_peak']:.1f} | {r['f16_per_call_us']:.1f} | "
            f"{r['f16_over_mmq']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

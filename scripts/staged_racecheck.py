"""mmvq_st's launches for compute-sanitizer (``--tool racecheck``: a stage refilled by the bulk
copy while a warp still reads it would be a shared-memory hazard): the fused kernel and
mmvq_st_qx, every quantized type, at a shape whose stage ring wraps (4100 rows: 513 tiles on at
most 264 blocks) and a small one, one and three tokens, each checked bit for bit against mmvq.
Built with whatever TRACEKIT_CUDA_DEFINES says (e.g. -DMMVQ_ST_X_FIRST=1); --rpw R: R rows a
warp walks together (matvec.cu's MMVQ_ST_RPW), on blocks of 8 / R warps.

    compute-sanitizer --tool racecheck python3 scripts/staged_racecheck.py [--types Q4_0,Q4_K]
                                                                          [--rpw 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="", help="comma-separated (default: every quantized type)")
    ap.add_argument(
        "--rpw", type=int, default=None,
        help="rows a warp walks together (1, 2, 4) on blocks of 8 / R warps (default: each "
        "type's declared blocks)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    rows = dict(rows_per_warp=args.rpw, rows_per_block=8 // args.rpw) if args.rpw else {}

    import cupy as cp

    from tests.kernels.test_matvec import weight
    from tracekit.kernels import matvec
    from tracekit.quants import QUANTIZED_TYPES, quant_type

    types = [quant_type(t) for t in args.types.split(",")] if args.types else QUANTIZED_TYPES
    rng = np.random.default_rng(0)
    bad = 0
    for qt in types:
        for n, k in ((4100, 4096), (37, 768 if qt.block_size == 32 else 1024)):
            raw = cp.asarray(weight(qt, n, k, seed=n, tame=True)[0])  # (finite scales)
            for nt in (1, 3):
                x = cp.asarray(rng.standard_normal((nt, k), dtype=np.float32))
                want, recs = matvec.launch_matvec(x, raw, qt, (n, k), staged=False,
                                                  prequantize=False, wpr=1)  # fmt: skip
                for qx in (False, True):
                    got, recs = matvec.launch_matvec(x, raw, qt, (n, k), staged=True,
                                                     prequantize=qx, wpr=1, **rows)  # fmt: skip
                    same = bool((cp.asnumpy(got).view("u4") == cp.asnumpy(want).view("u4")).all())
                    bad += not same
                    print(f"{qt.name} {n}x{k} nt={nt} {recs[-1].kernel}: "
                          f"{'same bits' if same else 'DIFFERENT BITS'}", flush=True)  # fmt: skip
    print("all ok" if not bad else f"BAD: {bad} launches differ from mmvq")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

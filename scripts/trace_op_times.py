"""Where a trace's time goes: GPU time per op, per kernel, and the matmul nodes per path and weight.

    PYTHONPATH=$PWD python3 scripts/trace_op_times.py TRACE.json [--kind prefill]

Averages over the decode steps after the first (the first decode step of a replayed run is the
recording), or the prefill step with ``--kind prefill``. Matmul rows: node count, µs per step, the
launches' bytes and GB/s (bytes / time). Kernel rows: launches, µs per step, the share of the
step's node time.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import argparse

    from tracekit.trace.format import load_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--kind", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--kernels", type=int, default=12, help="kernel rows to print")
    args = ap.parse_args(argv)
    t = load_trace(args.trace)
    topo = {n["id"]: n for n in t["nodes"]}
    of_kind = [s for s in t["steps"] if s["kind"] == args.kind]
    steps = (of_kind[1:] if args.kind == "decode" else of_kind) or of_kind
    if not steps:
        print(f"no {args.kind} steps")
        return 1
    by_op: dict[str, float] = collections.defaultdict(float)
    by_kernel: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    mm: dict[tuple[str, str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for s in steps:
        for n in s["nodes"]:
            node = topo[n["id"]]
            by_op[node["op"]] += n["time_s"] / len(steps)
            for r in n["launches"]:
                k = by_kernel[r["kernel"]]
                k[0] += 1 / len(steps)
                k[1] += (r.get("time_s") or 0.0) / len(steps)
            if node["op"] == "matmul":
                paths = ",".join(
                    sorted({r.get("extra", {}).get("path", "?") for r in n["launches"]})
                )
                key = (paths, str(node.get("weight_type")), "x".join(map(str, n["shape"])))
                row = mm[key]
                row[0] += 1 / len(steps)
                row[1] += n["time_s"] / len(steps)
                row[2] += sum(r["bytes_read"] + r["bytes_written"] for r in n["launches"]) / len(
                    steps
                )
    total = sum(by_op.values())
    run = t["run"]
    span = sum(s.get("span_ns") or 0 for s in steps) / len(steps) * 1e-9
    print(f"{args.trace}: matmul {run.get('matmul')}, replay {run.get('replay')}, "
          f"{len(steps)} {args.kind} step(s) of {steps[0]['n_tokens']} token(s), "
          f"node time {total * 1e3:.3f} ms/step, device span {span * 1e3:.3f} ms")  # fmt: skip
    for op, s in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:12s} {s * 1e6:8.1f} us/step {100 * s / total:5.1f}%")
    print("  matmul nodes by path, weight type, output shape:")
    for (path, wt, shape), (cnt, s, b) in sorted(mm.items(), key=lambda kv: -kv[1][1]):
        print(f"    {path:14s} {wt:5s} [{shape:>10s}] x{cnt:4.0f}: {s * 1e6:8.1f} us/step, "
              f"{s / cnt * 1e6:6.2f} us each, {b / s / 1e9:6.0f} GB/s")  # fmt: skip
    print(f"  the {args.kernels} kernels with the most time:")
    for name, (cnt, s) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[: args.kernels]:
        print(f"    {name:34s} x{cnt:5.0f}: {s * 1e6:9.1f} us/step {100 * s / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a trace's decode time goes: GPU time per op, and the matmul nodes per path and weight.

    PYTHONPATH=$PWD python3 scripts/trace_op_times.py TRACE.json

Averages over the decode steps after the first (the first decode step of a replayed run is the
recording). Matmul rows: node count, µs per step, the launches' bytes and GB/s (bytes / time).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from tracekit.trace.format import load_trace

    args = sys.argv[1:] if argv is None else argv
    t = load_trace(args[0])
    topo = {n["id"]: n for n in t["nodes"]}
    steps = [s for s in t["steps"] if s["kind"] == "decode"][1:] or [
        s for s in t["steps"] if s["kind"] == "decode"
    ]
    if not steps:
        print("no decode steps")
        return 1
    by_op: dict[str, float] = collections.defaultdict(float)
    mm: dict[tuple[str, str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for s in steps:
        for n in s["nodes"]:
            node = topo[n["id"]]
            by_op[node["op"]] += n["time_s"] / len(steps)
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
    print(f"{args[0]}: matmul {run.get('matmul')}, replay {run.get('replay')}, "
          f"{len(steps)} decode steps, node time {total * 1e3:.3f} ms/step")  # fmt: skip
    for op, s in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:12s} {s * 1e6:8.1f} us/step {100 * s / total:5.1f}%")
    print("  matmul nodes by path, weight type, output shape:")
    for (path, wt, shape), (cnt, s, b) in sorted(mm.items(), key=lambda kv: -kv[1][1]):
        print(f"    {path:14s} {wt:5s} [{shape:>10s}] x{cnt:4.0f}: {s * 1e6:8.1f} us/step, "
              f"{s / cnt * 1e6:6.2f} us each, {b / s / 1e9:6.0f} GB/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

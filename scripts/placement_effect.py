"""Is the graph/stream disagreement of one-block nodes the launch mode, or where the buffers lie?

    python scripts/placement_effect.py [demo] [--steps 10] [--runs 2]

The agreement test (tests/runner/test_bound_gpu.py) records a demo trace without CUDA graphs
and one with, and finds a few one-block fused add + norm nodes ~1.5 µs in one and ~1.8 µs in
the other, steady in every sample, the slower mode differing from node to node (session 12:
4 of 4 runs). Each recording is its own session, with its own buffers. This script records
``--runs`` timing traces of each mode in one process (stream, graph, stream, graph, ...; each
session's buffers freed before the next, and a 1-64 MiB allocation held in between so that the
next session's buffers lie elsewhere) and compares the per-node medians (over the replayed
decode steps) of every pair of traces: same mode, other buffers; other mode, other buffers.
If the same-mode pairs disagree as often and by as much as the cross-mode pairs, a node's time
follows its buffers, not who launched it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PROMPT = [3, 17, 42, 7, 99]


def node_medians(t: dict) -> tuple[list[str], list[float]]:
    steps = [s for s in t["steps"] if s["kind"] == "decode"][1:]  # the replays
    names = [t["nodes"][n["id"]]["name"] for n in steps[0]["nodes"]]
    meds = [statistics.median(s["nodes"][i]["time_s"] for s in steps) for i in range(len(names))]
    return names, meds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=None, help="GGUF path or synthetic name (demo)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()

    import cupy as cp
    from decode_speed import resolve

    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    model = None if args.model in (None, "demo") else str(resolve(args.model))
    traces: list[tuple[str, dict]] = []
    held = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.runs):
            for graph in (False, True):
                t = load_trace(record_trace(
                    model, tokens=PROMPT, steps=args.steps, backend="cupy", capture="timing",
                    output=Path(d) / f"t{r}{int(graph)}.json", cuda_graph=graph, progress=False,
                ))  # fmt: skip
                traces.append((f"{'graph' if graph else 'stream'}{r}", t))
                cp.get_default_memory_pool().free_all_blocks()
                held.append(cp.empty((1 + 21 * len(held)) << 20, cp.uint8))  # shift the next
    names, _ = node_medians(traces[0][1])
    meds = {label: node_medians(t)[1] for label, t in traces}
    launches = [len(n["launches"]) for n in traces[0][1]["steps"][-1]["nodes"]]
    print(
        f"{len(names)} nodes; per pair: nodes whose medians differ by > 15% (of the ones with a launch)"
    )
    print("| pair | same mode | > 15% | > 10% | max |ratio - 1| | worst node |")
    print("|---|---|---|---|---|---|")
    for (la, a), (lb, b) in combinations(meds.items(), 2):
        q = [
            (x / y, names[i])
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            if launches[i] and y > 0
        ]
        dev = [(abs(r - 1), n, r) for r, n in q]
        worst = max(dev)
        print(f"| {la} vs {lb} | {'yes' if la[:-1] == lb[:-1] else 'no'} | "
              f"{sum(d > 0.15 for d, _, _ in dev)} | {sum(d > 0.10 for d, _, _ in dev)} | "
              f"{worst[0]:.3f} | {worst[1]} ({worst[2]:.3f}) |")  # fmt: skip
    print("\nthe nodes past 15% in any pair, medians in µs per trace:")
    flagged = sorted({
        i for (_, a), (_, b) in combinations(meds.items(), 2)
        for i, (x, y) in enumerate(zip(a, b, strict=True)) if launches[i] and y > 0 and abs(x / y - 1) > 0.15
    })  # fmt: skip
    print("| node | " + " | ".join(meds) + " |")
    print("|---|" + "---|" * len(meds))
    for i in flagged:
        print(f"| {names[i]} | " + " | ".join(f"{m[i] * 1e6:.2f}" for m in meds.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

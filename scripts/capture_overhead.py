"""Capture overhead in one run: an untraced decode step vs the same step traced.

    python scripts/capture_overhead.py [MODEL.gguf | qwen2-0.5b ...] [--backend cupy] [--steps 16]

For each model and replay mode (cupy: ``plan`` and ``graph``; numpy: ``off``): the median wall
time of an untraced decode step (Session.run_step, synchronized), then a `record_trace` of the
same prompt and number of steps in full capture (``cuda_graph`` for the graph mode), whose steps
carry the timing pass's and the full pass's wall times. Prints timing/untraced (issue 4:
<= 1.05x) and full/timing (<= 1.3x) over the decode steps; ``--rounds N`` repeats the pair N
times in turn and prints the ratios' medians too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from decode_speed import resolve

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import Session, load_model
    from tracekit.runner.record import record_trace

    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument(
        "--rounds", type=int, default=1,
        help="repeat (untraced steps, then the trace) this many times per model and mode, and "
        "print each round's ratios and their medians: one round's ratio moved 1.03-1.08x on "
        "the 0.5B shape from run to run (H200, sessions 12-13)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds} must be >= 1")
    paths = [resolve(m) for m in args.models or ["demo"]]  # resolve knows "demo"
    be = get_backend(args.backend)
    print(f"backend {be.name}: {be.device_name()}")
    modes = [("plan", False), ("graph", True)] if be.name == "cupy" else [("off", False)]
    for path in paths:
        model = load_model(path)
        n = len(model.graph.nodes)
        prompt = [1, 2, 3, 4]
        for mode, graph in modes:
            s = Session(model, be, replay=mode)
            s.generate(prompt, 3, stop_at_eos=False)  # warm-up and the recorded decode step
            ratios = []
            for r in range(args.rounds):
                s.reset()
                token = int(s.run_step(prompt)[-1].argmax())
                times = []
                for _ in range(args.steps):
                    be.synchronize()
                    t0 = time.perf_counter()
                    logits = s.run_step([token])
                    be.synchronize()
                    times.append(time.perf_counter() - t0)
                    token = int(logits[-1].argmax())
                untraced = statistics.median(times)
                out = Path("/tmp") / f"capture-overhead-{path.stem}-{mode}.json"
                record_trace(model, tokens=prompt, steps=args.steps, backend=be, capture="full",
                             output=out, progress=False, cuda_graph=graph)  # fmt: skip
                steps = json.loads(out.read_text())["steps"][1:]
                timing = statistics.median(st["timing_wall_s"] for st in steps)
                full = statistics.median(st["full_wall_s"] for st in steps)
                ratios.append((timing / untraced, full / timing))
                print(
                    f"{path.name} [replay {mode}]"
                    f"{f' round {r + 1}' if args.rounds > 1 else ''}: untraced "
                    f"{untraced * 1e3:.3f} ms/step ({untraced / n * 1e6:.2f} us/node), timing "
                    f"pass {timing * 1e3:.3f} ms ({timing / untraced:.3f}x untraced), full pass "
                    f"{full * 1e3:.3f} ms ({full / timing:.3f}x timing), {n} nodes",
                    flush=True,
                )
            if args.rounds > 1:
                tu, ft = (statistics.median(q) for q in zip(*ratios, strict=True))
                print(
                    f"{path.name} [replay {mode}] over {args.rounds} rounds: timing / untraced "
                    + ", ".join(f"{a:.3f}" for a, _ in ratios)
                    + f" (median {tu:.3f}x); full / timing "
                    + ", ".join(f"{b:.3f}" for _, b in ratios)
                    + f" (median {ft:.3f}x)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

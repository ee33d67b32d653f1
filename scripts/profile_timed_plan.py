"""Where the host time of a plan-replay timing pass goes (issue 11: without graphs, per-launch
timing may cost at most 1.1x the timing pass the issue was filed against).

    python scripts/profile_timed_plan.py [MODEL.gguf | qwen2-0.5b] [--steps 48] [--rounds 3]

Records timing-only traces of the same prompt in plan replay (no CUDA graph), alternating
with and without NVTX ranges, and prints each variant's median timing-pass wall per decode step
and per node; then one more recording under cProfile, its functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def timing_walls(model: object, be: object, steps: int, nvtx: bool, out: Path) -> list[float]:
    from tracekit.runner.record import record_trace

    record_trace(model, tokens=[1, 2, 3, 4], steps=steps, backend=be, capture="timing",
                 output=out, progress=False, cuda_graph=False, nvtx=nvtx)  # fmt: skip
    return [st["timing_wall_s"] for st in json.loads(out.read_text())["steps"][1:]]


def main() -> int:
    from decode_speed import resolve

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="qwen2-0.5b")
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    be = get_backend(args.backend)
    model = load_model(resolve(args.model))
    n = len(model.graph.nodes)
    out = Path("/tmp/profile-timed-plan.json")
    walls: dict[str, list[float]] = {"nvtx": [], "no-nvtx": []}
    for _ in range(args.rounds):
        for variant in walls:
            walls[variant].append(
                statistics.median(timing_walls(model, be, args.steps, variant == "nvtx", out))
            )
    for variant, w in walls.items():
        m = statistics.median(w)
        print(f"{variant}: timing pass " + ", ".join(f"{x * 1e3:.3f}" for x in w)
              + f" ms/step (median {m * 1e3:.3f}, {m / n * 1e6:.2f} us/node, {n} nodes)")  # fmt: skip
    # the profiler runs only inside the passes (begin_step to end_step): not the warm-up,
    # formatting, validation or writing of the trace
    from tracekit.runner.record import Tracer

    prof = cProfile.Profile()
    begin, end = Tracer.begin_step, Tracer.end_step

    def profiled_begin(self: Tracer, *a: object, **k: object) -> None:
        prof.enable()
        begin(self, *a, **k)

    def profiled_end(self: Tracer) -> None:
        end(self)
        prof.disable()

    Tracer.begin_step, Tracer.end_step = profiled_begin, profiled_end  # type: ignore[method-assign]
    try:
        timing_walls(model, be, args.steps, True, out)
    finally:
        Tracer.begin_step, Tracer.end_step = begin, end  # type: ignore[method-assign]
    print(f"== cProfile inside the passes: prefill + {args.steps} decode steps, timing only")
    st = pstats.Stats(prof).sort_stats("tottime")
    st.print_stats(args.top)
    st.print_callers("_handle_fromlist")
    st.print_callees("record.py:.*__call__")
    return 0


if __name__ == "__main__":
    sys.exit(main())

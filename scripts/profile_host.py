"""Where the host time of a step goes: cProfile over untraced and traced decode steps, over
untraced prefills of N tokens (``--prefill N``), or inside the passes of a plan-replay timing
recording (``--plan-timing``).

python scripts/profile_host.py [MODEL.gguf | qwen2-0.5b] [--backend cupy] [--steps 16] [--prefill N]
python scripts/profile_host.py qwen2-0.5b --backend cupy --plan-timing [--steps 48] [--rounds 3]

``--plan-timing`` (issue 11: without graphs, per-launch timing may cost at most 1.1x the timing
pass the issue was filed against): timing-only recordings of the same prompt in plan replay (no
CUDA graph), alternating with and without NVTX ranges, each variant's median timing-pass wall
per decode step and per node; then one more recording with cProfile on only inside the passes
(begin_step to end_step: not the warm-up, formatting, validation or writing of the trace).
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


def main() -> int:
    from tracekit.kernels.backend import get_backend
    from tracekit.model.demo import demo_model_path
    from tracekit.runner.execute import Session, load_model
    from tracekit.runner.record import record_trace

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prefill", type=int, default=0, help="profile prefills of this many tokens")
    ap.add_argument("--plan-timing", action="store_true", help="profile plan-replay timing passes")
    ap.add_argument("--rounds", type=int, default=3, help="--plan-timing: recordings per variant")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from decode_speed import resolve

    path = resolve(args.model) if args.model else demo_model_path()
    be = get_backend(args.backend)
    model = load_model(path)
    if args.plan_timing:
        return plan_timing(model, be, args.steps, args.rounds)
    if args.prefill:
        import time

        import numpy as np

        ids = [
            int(i) for i in np.random.default_rng(0).integers(0, model.config.n_vocab, args.prefill)
        ]
        s = Session(model, be, n_ctx=min(model.config.n_ctx, args.prefill + 8))
        s.run_step(ids)  # compiles the prefill shapes
        s.reset()
        be.synchronize()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(args.steps):
            s.reset()
            s.launch_step(ids)
        prof.disable()
        t1 = time.perf_counter()
        be.synchronize()
        t2 = time.perf_counter()
        print(f"== untraced: {args.steps} prefills of {args.prefill} tokens, "
              f"{len(model.graph.nodes)} nodes each: host issue {(t1 - t0) / args.steps * 1e3:.2f} "
              f"ms per prefill (profiled), GPU drained {(t2 - t1) * 1e3:.2f} ms after")  # fmt: skip
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    s = Session(model, be)
    s.run_step([1, 2, 3, 4])
    s.run_step([5])
    be.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for t in range(args.steps):
        s.run_step([6 + t])
    be.synchronize()
    prof.disable()
    print(f"== untraced: {args.steps} decode steps, {len(model.graph.nodes)} nodes each")
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    prof = cProfile.Profile()
    prof.enable()
    record_trace(
        model,
        tokens=[1, 2, 3],
        steps=4,
        backend=be,
        capture="timing",
        output="/tmp/profile-trace.json",
        progress=False,
    )
    prof.disable()
    print("== traced (timing capture): prefill + 4 decode steps")
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    return 0


def timing_walls(model: object, be: object, steps: int, nvtx: bool, out: Path) -> list[float]:
    """A timing-only plan-replay recording's timing-pass walls, one a decode step."""
    from tracekit.runner.record import record_trace

    record_trace(model, tokens=[1, 2, 3, 4], steps=steps, backend=be, capture="timing",
                 output=out, progress=False, cuda_graph=False, nvtx=nvtx)  # fmt: skip
    return [st["timing_wall_s"] for st in json.loads(out.read_text())["steps"][1:]]


def plan_timing(model: object, be: object, steps: int, rounds: int, top: int = 30) -> int:
    from tracekit.runner.record import Tracer

    n = len(model.graph.nodes)  # type: ignore[attr-defined]
    out = Path("/tmp/profile-timed-plan.json")
    walls: dict[str, list[float]] = {"nvtx": [], "no-nvtx": []}
    for _ in range(rounds):
        for variant in walls:
            walls[variant].append(
                statistics.median(timing_walls(model, be, steps, variant == "nvtx", out))
            )
    for variant, w in walls.items():
        m = statistics.median(w)
        print(f"{variant}: timing pass " + ", ".join(f"{x * 1e3:.3f}" for x in w)
              + f" ms/step (median {m * 1e3:.3f}, {m / n * 1e6:.2f} us/node, {n} nodes)")  # fmt: skip
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
        timing_walls(model, be, steps, True, out)
    finally:
        Tracer.begin_step, Tracer.end_step = begin, end  # type: ignore[method-assign]
    print(f"== cProfile inside the passes: prefill + {steps} decode steps, timing only")
    st = pstats.Stats(prof).sort_stats("tottime")
    st.print_stats(top)
    st.print_callers("_handle_fromlist")
    st.print_callees("record.py:.*__call__")
    return 0


if __name__ == "__main__":
    sys.exit(main())

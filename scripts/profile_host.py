"""Where the host time of a step goes: cProfile over untraced and traced decode steps, or over
untraced prefills of N tokens (``--prefill N``).

python scripts/profile_host.py [MODEL.gguf | qwen2-0.5b] [--backend cupy] [--steps 16] [--prefill N]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
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
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from decode_speed import resolve

    path = resolve(args.model) if args.model else demo_model_path()
    be = get_backend(args.backend)
    model = load_model(path)
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


if __name__ == "__main__":
    sys.exit(main())

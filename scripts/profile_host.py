"""Where the host time of a decode step goes: cProfile over untraced and traced decode steps.

python scripts/profile_host.py [MODEL.gguf] [--backend cupy] [--steps 16]
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
    args = ap.parse_args()
    path = Path(args.model) if args.model else demo_model_path()
    be = get_backend(args.backend)
    model = load_model(path)
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

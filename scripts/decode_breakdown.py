"""Where an untraced decode step's wall time goes, on the cupy backend: the step's device span
(CUDA events around the graph or plan replay), the host's issue time, the logits readback and
the host argmax, each the median over ``--steps`` greedy steps after a warm-up.

    python3 scripts/decode_breakdown.py [MODEL.gguf | qwen2-0.5b | llama3-8b] [--steps 64]
        [--replay graph|plan] [--fuse on|off|both] [--pdl on|off|both]

``--fuse both`` runs each model unfused, then fused (q/k/v and gate/up as one matmul each,
runner/graph.py ``fusion_plan``), and prints each line with its kernel launches per step.
``--pdl both`` runs each graph without, then with programmatic dependent launches
(``Session(pdl=True)``, graph replay only).

The GPU is idle while the host reads the logits back, picks the next token and issues the next
step, so ``wall - device span`` is what a decode loop loses to the host per token; llama-bench's
tg test pays the readback too (it copies the last row's logits to the host every step) but no
argmax (it feeds a random token).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    import cupy as cp
    import numpy as np
    from decode_speed import resolve

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import Session, load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--replay", default="graph", choices=("graph", "plan"))
    ap.add_argument("--fuse", default="on", choices=("on", "off", "both"))
    ap.add_argument("--pdl", default="off", choices=("on", "off", "both"))
    args = ap.parse_args(argv)
    be = get_backend("cupy")
    both = {"on": [True], "off": [False], "both": [False, True]}
    runs = [(n, f, p) for n in args.models for f in both[args.fuse] for p in both[args.pdl]]
    for name, fuse, pdl in runs:
        model = load_model(resolve(name), fuse=fuse)
        s = Session(model, be, n_ctx=2 * args.steps + 16, replay=args.replay, pdl=pdl)
        tok = int(np.argmax(s.run_step([1])[-1]))
        s.generate([tok], 3, stop_at_eos=False)  # compiles, records the decode step
        s.reset()
        tok = int(np.argmax(s.run_step([1])[-1]))
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        stream = cp.cuda.get_current_stream()
        rows: dict[str, list[float]] = {k: [] for k in ("wall", "issue", "span", "read", "argmax")}
        for _ in range(args.steps):
            be.synchronize()
            a = time.perf_counter()
            e0.record(stream)
            out = s.launch_step([tok])
            e1.record(stream)
            b = time.perf_counter()
            logits = be.to_host(out)  # waits for the step
            c = time.perf_counter()
            tok = int(np.argmax(logits[-1]))
            d = time.perf_counter()
            rows["wall"].append(d - a)
            rows["issue"].append(b - a)
            rows["span"].append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
            rows["read"].append(c - b)
            rows["argmax"].append(d - c)
        # the same steps back to back, as a decode loop runs them (no synchronize in between)
        be.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            tok = int(np.argmax(s.run_step([tok])[-1]))
        loop = (time.perf_counter() - t0) / args.steps
        med = {k: statistics.median(v) * 1e6 for k, v in rows.items()}
        assert s.replay is not None
        launches = sum(len(r) for r in s.replay.records)  # the recorded decode step's
        print(
            f"{Path(name).name} ({args.replay}, fuse {'on' if fuse else 'off'}, "
            f"pdl {'on' if pdl else 'off'}, "
            f"{len(model.graph.nodes)} nodes, {launches} launches): loop "
            f"{loop * 1e6:.0f} us/token ({1 / loop:.1f} tok/s) | per step, median us: wall "
            f"{med['wall']:.0f} = issue {med['issue']:.0f} + wait and read back "
            f"{med['read']:.0f} + argmax {med['argmax']:.0f}; device span {med['span']:.0f}, "
            f"host-only {med['wall'] - med['span']:.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

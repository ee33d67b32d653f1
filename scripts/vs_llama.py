"""tracekit vs llama.cpp on the same GGUF files, same GPU, one run: decode and prefill tok/s.

    python3 scripts/vs_llama.py --llama-bench /root/llama/llama.cpp/build/bin/llama-bench \
        [--prefill 512] [--steps 128] MODEL_OR_SYNTHETIC_NAME ...

For each model: ``llama-bench -ngl 99 -p PREFILL -n STEPS -r 3 -o json`` (pp = prompt processing
of PREFILL tokens, tg = STEPS generated tokens, both tok/s averaged over 3 repetitions), then
tracekit untraced on the cupy backend with CUDA-graph decode replay: prefill of PREFILL seeded
random token ids (the last position's logits only, as llama-bench computes; the median of 3
after a warm-up) twice — through the dispatch chain (``pp chain``: any prompt) and replayed
(``pp replay``: Session's prefill_replay, a prefill of the recorded length at the recorded
position, recorded in the warm-up, as a CUDA graph) —, then, from an empty cache again (as tg is
measured), STEPS decode steps as llama-bench's tg runs them (each step's logits read back to the
host, the next token a random id) and STEPS greedy ones (plus the host's argmax). Prints the
ratios tracekit ÷ llama.cpp.
Extra ``--tk-arg KEY=VALUE`` pairs are passed to ``Session`` (e.g. ``replay=plan``,
``pdl=on``: on/off are booleans).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_speed import resolve  # noqa: E402  (the synthetic names, written once into the cache)


def llama_bench(exe: str, path: Path, prefill: int, steps: int) -> dict[str, float]:
    out = subprocess.run(
        [exe, "-m", str(path), "-ngl", "99", "-p", str(prefill), "-n", str(steps), "-r", "3",
         "-o", "json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = json.loads(out)
    pp = next(r for r in rows if r["n_prompt"] == prefill and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] == steps and r["n_prompt"] == 0)
    return {"pp": float(pp["avg_ts"]), "tg": float(tg["avg_ts"])}


def _value(v: str) -> object:
    """A --tk-arg value: on/off/true/false as a bool (``pdl=on``), an integer, else the text."""
    low = v.lower()
    if low in ("on", "true", "yes", "off", "false", "no"):
        return low in ("on", "true", "yes")
    return int(v) if v.lstrip("-").isdigit() else v


def tracekit_speed(path: Path, prefill: int, steps: int, session_kw: dict) -> dict[str, float]:
    import numpy as np

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import Session, load_model

    model = load_model(path)
    be = get_backend("cupy")
    n_ctx = min(model.config.n_ctx, prefill + steps + 16)
    s = Session(model, be, n_ctx=n_ctx, replay=session_kw.pop("replay", "graph"), **session_kw)
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(0, model.config.n_vocab, prefill)]
    s.generate(ids[:8], 3, stop_at_eos=False)  # warm-up: compilation, the recorded decode step
    s.reset()

    def pp_of(replayed: bool) -> float:
        s.prefill_replay = replayed
        times = []
        for _ in range(4):  # the first compiles the prefill shapes, or records the replay
            s.reset()
            be.synchronize()
            t0 = time.perf_counter()
            s.run_step(ids)  # to_host of the last logits row synchronises
            times.append(time.perf_counter() - t0)
        return prefill / statistics.median(times[1:])

    pp_chain = pp_of(False)
    pp = pp_of(s.replay_mode != "off")
    s.prefill_replay = False
    # decode from an empty cache, as llama-bench's tg test does (no prompt): after the 512
    # prefill each step's attention would read 512+ cached positions more. Two loops: llama-
    # bench's (each step's logits read back to the host, the next token a random id: it
    # samples nothing) and a greedy one (the host's argmax over the vocabulary too).
    feed = [int(i) for i in rng.integers(0, model.config.n_vocab, steps)]
    tg = {}
    for kind in ("tg", "tg_greedy"):
        s.reset()
        tok = int(np.argmax(s.run_step(ids[:1])[-1]))
        be.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            logits = s.run_step([tok if kind == "tg_greedy" else feed[i]])[-1]
            if kind == "tg_greedy":
                tok = int(np.argmax(logits))
        tg[kind] = steps / (time.perf_counter() - t0)
    return {"pp": pp, "pp_chain": pp_chain, **tg}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--tk-arg", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    kw = {k: _value(v) for k, v in (a.split("=", 1) for a in args.tk_arg)}
    rows = []
    for m in args.models:
        path = resolve(m)
        ll = llama_bench(args.llama_bench, path, args.prefill, args.steps)
        tk = tracekit_speed(path, args.prefill, args.steps, dict(kw))
        rows.append((path.name, ll, tk))
        print(f"{path.name}: llama.cpp pp{args.prefill} {ll['pp']:.0f} tg{args.steps} "
              f"{ll['tg']:.1f} tok/s | tracekit pp replay {tk['pp']:.0f}, pp chain "
              f"{tk['pp_chain']:.0f}, tg {tk['tg']:.1f} (greedy {tk['tg_greedy']:.1f})",
              flush=True)  # fmt: skip
    print(f"\n| model | llama.cpp pp{args.prefill} | tracekit pp replay | ratio | pp chain | ratio "
          f"| llama.cpp tg{args.steps} | tracekit | ratio | greedy | ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, ll, tk in rows:
        print(f"| {name} | {ll['pp']:.0f} | {tk['pp']:.0f} | {tk['pp'] / ll['pp']:.2f}x "
              f"| {tk['pp_chain']:.0f} | {tk['pp_chain'] / ll['pp']:.2f}x "
              f"| {ll['tg']:.1f} | {tk['tg']:.1f} | {tk['tg'] / ll['tg']:.2f}x "
              f"| {tk['tg_greedy']:.1f} | {tk['tg_greedy'] / ll['tg']:.2f}x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

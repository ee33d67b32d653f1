"""Where a full capture's extra time goes, with CUDA graphs: device times of one decode step.

    python scripts/full_pass_cost.py [MODEL.gguf | qwen2-0.5b | demo ...] [--reps 50]

For each model, a graph-replay Session's decode step captured as its ``plain``, ``timed`` and
``full`` graphs (the ones record_trace --cuda-graph replays), each replayed ``--reps`` times back
to back behind a spin kernel (ceilings.gpu_times_queued: device time per replay, the host's
launch overlapped; the median of 5 rounds), and the full graph's statistics batch alone (its
memset and two kernels, ``PreparedStats.enqueue``, on the same tensors) the same way. Prints each, the full graph's cost over the timed one, and how
much of it the statistics batch is. The pdl state of each graph is printed with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _per_replay_s(fn, reps: int) -> float:
    """Device seconds per call of ``fn`` back to back (ceilings.gpu_times_queued: the calls
    queued behind a spin kernel, so the host's launches overlap), the median of 5 rounds."""
    from tracekit.kernels.ceilings import gpu_times_queued, median

    return median(gpu_times_queued(lambda i: fn(), launches=reps))


def _pass_walls(session, tracer, reps: int) -> dict[str, dict[str, float]]:
    """Host wall of a timed and a full graph pass, each as ``record._graph_run`` times it:
    after ``prime``, the launch (``replay_graph`` returning), then ``read_pass`` (the one
    device-to-host copy, which waits for the graph, and the unpacking). Run back to back by
    kind, and alternating timed/full as a recording does, so host work between passes shows."""
    import time

    import numpy as np

    from tracekit.kernels.ceilings import median
    from tracekit.kernels.cuda import pinned_array

    replay = session.replay
    # each pass copies into pinned memory as record_trace does; "... pageable": the same pass
    # into a pageable buffer (what it did before session 12)
    bufs = {}
    for k in ("timed", "full"):
        bufs[k] = pinned_array(replay.staging_words(k), np.uint64)
        bufs[f"{k} pageable"] = np.zeros(replay.staging_words(k), np.uint64)

    def one(kind: str) -> tuple[float, float]:
        replay.prime(1, session.n_past)
        t0 = time.perf_counter()
        graph = kind.split()[0]
        session.replay_graph([1], graph, tracer.stats_spec if graph == "full" else None)
        t1 = time.perf_counter()
        replay.read_pass(bufs[kind])
        t2 = time.perf_counter()
        session.n_past -= 1  # the same position every time (the cache slot is rewritten)
        return t1 - t0, t2 - t0

    out = {}
    kinds = ("timed", "timed pageable", "full", "full pageable")
    for label, order in (("back to back", sum(((k,) * reps for k in kinds), ())),
                         ("alternating", kinds * reps)):  # fmt: skip
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        for kind in order[:6]:  # warm-up
            one(kind)
        for kind in order:
            got[kind].append(one(kind))
        for kind, xs in got.items():
            out[f"{label}, {kind}"] = {"launch": median([x[0] for x in xs]),
                                       "pass": median([x[1] for x in xs])}  # fmt: skip
    return out


def main() -> int:
    from decode_speed import resolve

    from tracekit.kernels.backend import get_backend
    from tracekit.runner.execute import Session, load_model
    from tracekit.runner.record import Ranges, Tracer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    be = get_backend("cupy")
    print(f"backend {be.name}: {be.device_name()}")
    for path in [resolve(m) for m in args.models or ["demo"]]:
        model = load_model(path)
        s = Session(model, be, replay="graph")
        prompt = [1, 2, 3, 4]
        s.generate(prompt, 3, stop_at_eos=False)  # records the decode step
        s.reset()
        s.run_step(prompt)
        replay = s.replay
        tracer = Tracer(be, model.graph.nodes, Ranges(False))
        graphs = {k: replay.capture_graph(k, tracer.stats_spec if k == "full" else None)
                  for k in ("plain", "timed", "full")}  # fmt: skip
        stream = replay._graph_stream
        times = {}
        with stream:
            replay.prime(1, s.n_past)
            for kind, g in graphs.items():
                times[kind] = _per_replay_s(lambda g=g, st=stream: g.launch(st), args.reps)
            prepared = replay._prepared
            times["stats batch"] = _per_replay_s(prepared.enqueue, args.reps)
            for k in prepared._launches:  # each kernel of the batch alone, on the same tables
                times[f"  {k.name}"] = _per_replay_s(k.issue, args.reps)
        walls = _pass_walls(s, tracer, args.reps)
        snaps = len(replay._snaps.get("full", {}))
        print(f"statistics batch: {prepared.T} tensors, {prepared.n_red} reduction blocks, "
              f"{prepared.n_heat} heatmap blocks")  # fmt: skip
        print(f"{path.name}: {len(model.graph.nodes)} nodes, pdl {replay.pdl}, "
              f"{snaps} snapshot copies in the full graph")  # fmt: skip
        for kind, t in times.items():
            print(f"  {kind:12s} {t * 1e6:9.1f} us")
        extra = times["full"] - times["timed"]
        print(f"  full - timed {extra * 1e6:9.1f} us, of which the statistics batch "
              f"{times['stats batch'] * 1e6:.1f} us ({100 * times['stats batch'] / extra:.0f}%)")  # fmt: skip
        print(
            "  wall of a pass as record_trace times it (prime, launch, one copy back), median us:"
        )
        for label, w in walls.items():
            print(f"    {label:34s} " + "  ".join(f"{k} {v * 1e6:7.1f}" for k, v in w.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a replayed decode step's graph launch takes after host work (H200 VM finding).

    python scripts/graph_launch_cold.py [demo | qwen2-0.5b | MODEL.gguf ...]

For each kind of host work between passes (none, touching 64 MB, building 20,000 dicts, 5 ms
of sleep, 5 ms of spinning) and each remedy before the clock starts (none, uploading the graph,
re-uploading the step's inputs and waiting = StepReplay.prime, an event round trip), the
median host time of the timed graph's launch call and of the whole pass (launch to readback),
after a full-graph pass as in a full capture. BENCHMARKS.md ("Capture overhead") quotes it.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402


def main() -> int:
    from tracekit.kernels.backend import get_backend

    be = get_backend("cupy")
    junk = [np.random.rand(1 << 20) for _ in range(8)]
    work = {
        "none": None,
        "touch 64 MB": lambda: sum(float(a.sum()) for a in junk),
        "20k dicts": lambda: [dict(a=i, b=str(i)) for i in range(20000)],
        "sleep 5 ms": lambda: time.sleep(0.005),
        "spin 5 ms": lambda: _spin(0.005),
    }
    for name in sys.argv[1:] or ["demo"]:
        _one_model(name, be, work)
    return 0


def _one_model(name: str, be: Any, work: dict[str, Any]) -> None:
    import cupy
    from decode_speed import resolve

    from tracekit.runner.execute import Session, load_model
    from tracekit.runner.record import Ranges, Tracer

    model = load_model(resolve(name))
    s = Session(model, be, replay="graph")
    s.generate([1, 2, 3, 4], 3, stop_at_eos=False)
    r = s.replay
    n_past = s.n_past - 1
    tracer = Tracer(be, list(model.graph), Ranges(False, None))
    graph = r.capture_graph("timed")
    r.capture_graph("full", tracer.stats_spec)
    cur = cupy.cuda.get_current_stream()
    remedies = {
        "-": None,
        "upload": lambda: (graph.upload(r._graph_stream), r._graph_stream.synchronize()),
        "prime": lambda: r.prime(7, n_past),
        "event": lambda: (r._ev_in.record(cur), r._ev_in.synchronize()),
    }
    print(f"{name}: {len(r.nodes)} nodes")
    for wname, w in work.items():
        for rname, fix in remedies.items():
            launches, walls = [], []
            for _ in range(40):
                r.run_graph(7, n_past, "full")
                r.read_pass()
                if w:
                    w()
                if fix:
                    fix()
                be.synchronize()
                t0 = time.perf_counter()
                r.run_graph(7, n_past, "timed")
                t1 = time.perf_counter()
                r.read_pass()
                launches.append(t1 - t0)
                walls.append(time.perf_counter() - t0)
            print(f"  {wname:12s} {rname:7s} launch {statistics.median(launches) * 1e6:7.1f} us"
                  f"  pass {statistics.median(walls) * 1e6:8.1f} us")  # fmt: skip


def _spin(seconds: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


if __name__ == "__main__":
    sys.exit(main())

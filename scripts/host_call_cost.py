"""Host cost of the calls a timed plan-replay pass makes per node (issue 11), one by one.

    python scripts/host_call_cost.py [--calls 20000] [--rounds 5]

Each call is made ``--calls`` times in a tight loop on a stream the GPU keeps up with, and the
median over ``--rounds`` of the host wall per call is printed: a packed ``globaltimer_stamp``
launch (cuLaunchKernel, the node's marker), the same through ``packed.issue``, a CUDA event
record (what the timer before per-launch stamps recorded twice a node), an NVTX push/pop pair
and an empty Python call (the floor of any call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call(fn: Callable[[], None], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    walls = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        walls.append((time.perf_counter() - t0) / calls)
    sync()
    return statistics.median(walls)


def main() -> int:
    import cupy
    import nvtx

    from tracekit.kernels.packed import PackedLaunch, issue, launch_kernel
    from tracekit.runner.stamps import stamp_entry

    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    stream = cupy.cuda.Stream(non_blocking=True)
    buf = cupy.zeros(16, cupy.uint64)
    with stream:
        p = PackedLaunch(stamp_entry(buf, 3), stream.ptr)
        launch = launch_kernel()
        packed = p.args
        one = [packed]
        ev = cupy.cuda.Event()
        record = cupy.cuda.runtime.eventRecord
        domain = nvtx.get_domain("tracekit-bench")
        attrs = domain.get_event_attributes(message="node", color=0xFF7F7F7F)

        def nvtx_pair() -> None:
            domain.push_range(attrs)
            domain.pop_range()

        def nothing() -> None:
            pass

        cases: list[tuple[str, Callable[[], None]]] = [
            ("stamp launch (driver.launchKernel)", lambda: launch(*packed)),
            ("stamp launch (packed.issue)", lambda: issue(one)),
            ("event record (runtime.eventRecord)", lambda: record(ev.ptr, stream.ptr)),
            ("NVTX push + pop", nvtx_pair),
            ("empty Python call", nothing),
        ]
        for name, fn in cases:
            us = per_call(fn, args.calls, args.rounds, stream.synchronize) * 1e6
            print(f"{name:40s} {us:7.3f} us/call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

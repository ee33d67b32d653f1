"""Does a kernel's device time depend on how it was launched? (issue 11: graph/stream agreement)

    python scripts/mode_effect.py [--reps 200] [--idle-us 50]

The graph/stream agreement test (tests/runner/test_bound_gpu.py) finds a few one-block
kernels (``token_embd``, ``add_rms_norm_f32`` at one token) 0.2-0.4 µs apart between a stream
and a graph decode step, in every sample (a mode effect, not noise), and the sign changed with
programmatic dependent launches. This script takes the decode step's context away: one pair
of real tracekit launches, a matvec of the 0.5B shape's ``blk.N.attn_output`` (Q8_0, 896 x 896) then
the fused residual add + norm (1 x 896), both stamped (kernels/stamp.cuh), run REPS times in
each launch mode:

- ``graph``: one CUDA graph of REPS pairs (the decode step's case);
- ``graph-pdl``: the same with programmatic dependent launches (sm_90; the default since
  session 9);
- ``stream-busy``: the pairs queued into a stream behind ~2 ms of copies, so the host has
  queued them all before the GPU reaches the first (it never runs dry);
- ``stream-idle``: each pair after the GPU has been idle for ``--idle-us`` (synchronize, then
  spin on the host): a host-bound decode step's case.

Prints, per mode and kernel, the median and the 10th/90th percentiles of the stamped time in
µs. If ``stream-idle`` alone differs, a kernel launched onto an idle GPU runs longer (or
shorter), and the stream trace's node times are true for the step they were measured in but
not comparable with a graph's; if both graphs differ from both streams, the graph itself
changes the kernel's time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--idle-us", type=float, default=50.0)
    args = ap.parse_args()

    import cupy as cp
    import numpy as np

    from tracekit.kernels import cuda, matvec, norm
    from tracekit.kernels.packed import PackedLaunch, issue
    from tracekit.quants import quant_type
    from tracekit.runner.stamps import SLOT_WORDS, timed_entries

    qt, e = quant_type("Q8_0"), 896
    rng = np.random.default_rng(0)
    raw = cp.asarray(rng.integers(0, 255, qt.nbytes((e, e)), dtype=np.uint8))
    x = cp.asarray(rng.standard_normal((1, e), dtype=np.float32))
    resid = cp.asarray(rng.standard_normal((1, e), dtype=np.float32))
    w = cp.asarray(rng.standard_normal(e, dtype=np.float32))
    mv_out = cp.empty((1, e), cp.float32)
    both = cp.empty((2, 1, e), cp.float32)
    tape = cuda.LaunchTape()
    with cuda.recording(tape):  # the launchers' own entries, every gate checked once
        matvec.launch_matvec(x, raw, qt, (e, e), mv_out)
        norm.launch_add_rms_norm_f32(mv_out, resid, w, 1e-6, both)
    names = [getattr(fn, "name", str(fn)) for fn, *_ in tape.entries]
    per = len(tape.entries)
    reps = args.reps
    buf = cp.zeros(SLOT_WORDS * per * reps, cp.uint64)
    stream = cp.cuda.Stream(non_blocking=True)
    src = cp.ones(1 << 27, cp.float32)
    dst = cp.empty_like(src)

    def packed(pdl: bool) -> tuple[list, list]:
        objs = [
            PackedLaunch(t, stream.ptr, pdl)
            for r in range(reps)
            for k, entry in enumerate(tape.entries)
            for t in timed_entries(entry, r * per + k, buf, ("kernel", "kernel"))
        ]
        return objs, [o.args for o in objs]

    def times() -> dict[str, np.ndarray]:
        words = buf.get().reshape(reps, per, SLOT_WORDS).astype(np.int64)
        d = (words[:, :, 1] - words[:, :, 0]) * 1e-3  # µs
        return {names[k]: d[:, k] for k in range(per)}

    results: dict[str, dict[str, np.ndarray]] = {}
    cc = int(cp.cuda.Device().compute_capability)
    for mode in ("graph", "graph-pdl", "stream-busy", "stream-idle"):
        if mode == "graph-pdl" and cc < 90:
            continue
        objs, entries = packed(mode == "graph-pdl")
        for _ in range(2):  # the second run is the measured one (modules loaded, clocks up)
            buf.fill(0)
            cp.cuda.Device().synchronize()
            if mode.startswith("graph"):
                with stream:
                    stream.begin_capture()
                    issue(entries)
                    graph = stream.end_capture()
                graph.launch(stream)
            elif mode == "stream-busy":
                with stream:  # 8 x 512 MiB copies (~2 ms): the queue fills behind them
                    for _ in range(8):
                        dst.data.copy_from_device_async(src.data, src.nbytes)
                issue(entries)
            else:
                for r in range(reps):
                    stream.synchronize()
                    t0 = time.perf_counter()
                    while time.perf_counter() - t0 < args.idle_us * 1e-6:
                        pass
                    issue(entries[r * per : (r + 1) * per])
            stream.synchronize()
        del objs
        results[mode] = times()

    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {reps} pairs a mode")
    print("| kernel | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for k in names:
        cells = []
        for mode in results:
            d = results[mode][k]
            p10, med, p90 = np.percentile(d, [10, 50, 90])
            cells.append(f"{med:.2f} ({p10:.2f}–{p90:.2f})")
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

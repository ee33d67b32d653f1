"""The gate before a cuBLAS launch's before-stamp, on the GPU (tracekit/kernels/hostflag.py,
tracekit/runner/stamps.py): with the host slow between queuing the before-stamp and issuing the
GEMM (a busy wait inside the host call, before cublasLtMatmul), the GEMM's stream-mode time
stays near its CUDA-graph time with the gate and does not without it; a recorded trace's plan
replay goes through the gate too. The CPU side is tests/runner/test_streamwait.py."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.hostflag import SEQ_MASK

pytestmark = pytest.mark.gpu

#: host time injected between queuing the before-stamp and issuing the GEMM (s)
HOST_DELAY_S = 200e-6
REPEATS = 15
GEMM = "cublaslt_matmul_f16_f32"


def _busy(seconds: float) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


@pytest.fixture(scope="module")
def gemm() -> tuple[Any, Any]:
    """A cuBLASLt GEMM (1 x 4096 f16 @ 4096 x 4096 f16: 32 MiB of weights) as the tracer
    issues it (a host call taking the stream), and a non-blocking stream to run it on."""
    import cupy

    from tracekit.kernels.matmul import _GemmCall

    rng = np.random.default_rng(11)
    x16 = cupy.asarray(rng.standard_normal((1, 4096)).astype(np.float16))
    w16 = cupy.asarray((rng.standard_normal((4096, 4096)) * 0.02).astype(np.float16))
    out = cupy.empty((1, 4096), cupy.float32)
    call = _GemmCall(x16, w16, out)
    stream = cupy.cuda.Stream(non_blocking=True)
    call(stream.ptr)  # the algorithm chosen, the workspace allocated
    stream.synchronize()
    return call, stream


def _graph_ns(call: Any, stream: Any) -> float:
    """Median GEMM time in a CUDA graph (a stamp kernel either side, all queued at once)."""
    import cupy

    from tracekit.kernels.elementwise import launch_stamp

    buf = cupy.zeros(2, cupy.uint64)
    with stream:
        stream.begin_capture()
        launch_stamp(buf, 0)
        call(stream.ptr)
        launch_stamp(buf, 1)
        graph = stream.end_capture()
    times = []
    for _ in range(REPEATS):
        graph.launch(stream)
        stream.synchronize()
        w = buf.get().astype(np.int64)
        times.append(w[1] - w[0])
    return float(np.median(times))


def _stream_ns(call: Any, stream: Any, gated: bool) -> list[float]:
    """GEMM times in stream mode (StampTimer.issue, as the dispatch chain times it), the GPU
    idle when each step starts and the host slow before the cuBLASLt call."""
    from tracekit.runner.stamps import StampTimer

    timer = StampTimer(1, gated=gated)
    assert (timer.gate is not None) == gated, timer.gate_note

    def slow(stream_ptr: int) -> None:
        _busy(HOST_DELAY_S)  # the before-stamp is queued; the GEMM is not yet
        call(stream_ptr)

    times = []
    with stream:
        for _ in range(REPEATS):
            stream.synchronize()  # the GPU runs dry: the host is now behind it
            timer.begin()
            timer.start(0)
            timer.issue(slow)
            timer.stop(0)
            timer.end()
            (s, e), *_ = timer.timing(1).launches
            times.append(e - s)
    return times


def test_the_gate_keeps_the_host_issue_time_out_of_the_gemm(gemm: tuple[Any, Any]) -> None:
    call, stream = gemm
    graph = _graph_ns(call, stream)
    gated = float(np.median(_stream_ns(call, stream, gated=True)))
    # without the gate the host's delay lies between the stamps: the test shows the gate
    # matters. The longest of the repeats: another process on the GPU (a parallel test
    # worker) can hold an ungated before-stamp until the GEMM is queued too (H200, session
    # 11: the median was then 11.5 us against 9.7 in a graph)
    ungated = max(_stream_ns(call, stream, gated=False))
    got = f"graph {graph:.0f} ns, gated median {gated:.0f} ns, ungated max {ungated:.0f} ns"
    assert gated < 2 * graph, got
    assert ungated > 2 * graph and ungated > HOST_DELAY_S * 1e9 / 2, got


def test_a_recorded_trace_gates_every_cublas_launch_in_stream_mode(tmp_path) -> None:
    """Dispatch chain (prefill, first decode step) and plan replay (later decode steps): one
    gated hold per cuBLAS launch of every timed pass (capture="timing": one pass a step). No
    warm-up: its untraced passes would gate their GEMMs too and blur the count."""
    import cupy

    from tracekit.kernels import matmul
    from tracekit.runner import stamps
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    gate, note = stamps.device_gate(cupy.cuda.Device().id)
    assert gate is not None, note
    seq0, cold0 = gate.seq, gate.cold
    t = load_trace(record_trace(None, tokens=[3, 17, 42, 7], steps=3, backend="cupy",
                                capture="timing", output=tmp_path / "t.json", progress=False,
                                matmul="f16", w16_cache="on", warmup=False))  # fmt: skip
    # the device has a gate: the only such note is the one for plans first run unheld, if any
    cold = gate.cold - cold0
    noted = [n for n in t["run"]["notes"] if n.startswith("cuBLAS launch starts")]
    assert noted == ([stamps.cold_gate_note(cold)] if cold else []), noted
    per_step = [
        sum(la["kernel"] == GEMM for r in s["nodes"] for la in r["launches"]) for s in t["steps"]
    ]
    assert all(s["launch_mode"] == "stream" for s in t["steps"])
    assert len(per_step) == 4 and per_step[3] > 0, per_step  # step 3: a plan replay
    # at least one hold per timed GEMM; the H200 counted one step's worth more (145 holds for
    # 116 timed GEMMs, session 10: an untraced pass of the recording also gates, which costs
    # host time only), never fewer
    # a plan's first run in the process runs unheld (GateHold: its kernels may load), once
    gated = (gate.seq - seq0) & SEQ_MASK
    assert cold <= len(matmul._PLANS_RUN), (cold, matmul._PLANS_RUN)
    assert sum(per_step) <= gated + cold <= sum(per_step) + max(per_step), (gated, cold, per_step)


#: A fresh process's first gated GEMMs (every cuBLASLt kernel not yet loaded): before session
#: 11 a hold before one never opened, as loading the kernel waited for the held stream
_FRESH = """
import sys
from tracekit.runner import stamps
from tracekit.runner.record import record_trace
import cupy
gate, note = stamps.device_gate(cupy.cuda.Device().id)
assert gate is not None, note
record_trace(None, tokens=[3, 17, 42, 7], steps=2, backend="cupy", capture="timing",
             output=sys.argv[1], progress=False, matmul="f16", w16_cache="on", warmup=False)
print("cold", gate.cold, "held", gate.seq)
"""


def test_a_fresh_process_records_a_gated_trace_without_deadlock(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, CUDA_MODULE_LOADING="LAZY")
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    try:
        r = subprocess.run(
            [sys.executable, "-c", _FRESH, str(tmp_path / "t.json")], env=env, cwd=root,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the gated recording hung (no return in {e.timeout} s): {e.stderr!r}")
    assert r.returncode == 0, r.stderr[-3000:]
    cold, held = (int(v) for v in r.stdout.split()[-3::2])
    assert cold > 0 and held > 0, r.stdout

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


def _stream_ns(call: Any, stream: Any, gated: bool) -> float:
    """Median GEMM time in stream mode (StampTimer.issue, as the dispatch chain times it), the
    GPU idle when each step starts and the host slow before the cuBLASLt call."""
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
    return float(np.median(times))


def test_the_gate_keeps_the_host_issue_time_out_of_the_gemm(gemm: tuple[Any, Any]) -> None:
    call, stream = gemm
    graph = _graph_ns(call, stream)
    gated = _stream_ns(call, stream, gated=True)
    ungated = _stream_ns(call, stream, gated=False)
    got = f"graph {graph:.0f} ns, gated {gated:.0f} ns, ungated {ungated:.0f} ns"
    assert gated < 2 * graph, got
    # without the gate the host's delay lies between the stamps: the test shows the gate matters
    assert ungated > 2 * graph and ungated > HOST_DELAY_S * 1e9 / 2, got


def test_a_recorded_trace_gates_every_cublas_launch_in_stream_mode(tmp_path) -> None:
    """Dispatch chain (prefill, first decode step) and plan replay (later decode steps): one
    gated hold per cuBLAS launch of every timed pass (capture="timing": one pass a step). No
    warm-up: its untraced passes would gate their GEMMs too and blur the count."""
    import cupy

    from tracekit.runner import stamps
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    gate, note = stamps.device_gate(cupy.cuda.Device().id)
    assert gate is not None, note
    seq0 = gate.seq
    t = load_trace(record_trace(None, tokens=[3, 17, 42, 7], steps=3, backend="cupy",
                                capture="timing", output=tmp_path / "t.json", progress=False,
                                matmul="f16", w16_cache="on", warmup=False))  # fmt: skip
    assert not [n for n in t["run"]["notes"] if n.startswith("cuBLAS launch starts")]
    per_step = [
        sum(la["kernel"] == GEMM for r in s["nodes"] for la in r["launches"]) for s in t["steps"]
    ]
    assert all(s["launch_mode"] == "stream" for s in t["steps"])
    assert len(per_step) == 4 and per_step[3] > 0, per_step  # step 3: a plan replay
    # at least one hold per timed GEMM; the H200 counted one step's worth more (145 holds for
    # 116 timed GEMMs, session 10: an untraced pass of the recording also gates, which costs
    # host time only), never fewer
    gated = (gate.seq - seq0) & SEQ_MASK
    assert sum(per_step) <= gated <= sum(per_step) + max(per_step), (gated, per_step)

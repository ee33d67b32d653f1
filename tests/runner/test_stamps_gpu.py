"""Per-launch device times on the GPU (tracekit/runner/stamps.py): every launch of a recorded demo
trace timed on the GPU clock in each mode (dispatch chain: the prefill; plan replay and CUDA
graph: the decode steps), cuBLAS GEMMs included."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.runner.record import record_trace
from tracekit.trace.format import load_trace

pytestmark = pytest.mark.gpu

PROMPT = [3, 17, 42, 7, 99]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict]:
    d = tmp_path_factory.mktemp("stamps")
    return {
        g: load_trace(
            # the cached f16 path: a matmul node launches a convert and a cuBLAS GEMM (two rows)
            record_trace(None, tokens=PROMPT, steps=3, backend="cupy", capture="full",
                         output=d / f"t{int(g)}.json", cuda_graph=g, progress=False,
                         matmul="f16", w16_cache="on")
        )
        for g in (False, True)
    }  # fmt: skip


@pytest.mark.parametrize("graph", [False, True])
def test_every_launch_is_timed_and_the_node_is_their_sum(traces: dict, graph: bool) -> None:
    gemms = 0
    for s in traces[graph]["steps"]:
        for rec in s["nodes"]:
            las = rec["launches"]
            if not las:  # a plane view of add_rms_norm launches nothing
                assert traces[graph]["nodes"][rec["id"]]["op"] == "plane"
                assert rec["time_s"] == 0
                continue
            assert all(la["time_s"] > 0 for la in las), (s["name"], rec["id"], las)
            total = sum(la["end_ns"] - la["start_ns"] for la in las) * 1e-9
            assert rec["time_s"] == pytest.approx(total, rel=1e-4, abs=2e-9)
            assert rec["start_ns"] == las[0]["start_ns"] and rec["end_ns"] == las[-1]["end_ns"]
            names = [la["kernel"] for la in las]
            if "cublaslt_matmul_f16_f32" in names:  # the matmul: two rows (+ its bias), timed
                gemm = ["convert_f32_f16", "cublaslt_matmul_f16_f32"]
                assert names in (gemm, [*gemm, "add_bias_f32"]), names
                gemms += 1
    assert gemms > 0


@pytest.mark.parametrize("graph", [False, True])
def test_launch_stamps_are_monotone_and_inside_their_step(traces: dict, graph: bool) -> None:
    for s in traces[graph]["steps"]:
        prev = 0
        stream = s["launch_mode"] == "stream"
        for rec in s["nodes"]:
            for la in rec["launches"]:
                assert prev <= la["start_ns"] < la["end_ns"] <= s["span_ns"], (s["name"], la)
                # in a stream a launch starts after the previous one ended; in a graph only the
                # starts are ordered (an unstamped launch ends at the next one's start)
                prev = la["end_ns"] if stream else la["start_ns"]
            if stream:  # the marker: the node's work was queued before its first launch ran
                assert 0 <= rec["queued_ns"] <= rec["start_ns"]


def test_full_and_timing_passes_agree_on_kernel_times(traces: dict) -> None:
    # the statistics work sits outside every launch: a GEMM's time is the same in both passes
    for s in traces[True]["steps"][1:]:
        t = np.array([r["time_s"] for r in s["nodes"] if r["launches"]])
        f = np.array([r["full_time_s"] for r in s["nodes"] if r["launches"]])
        assert np.median(np.abs(f / t - 1)) < 0.15

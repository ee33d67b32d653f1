"""The bound model on hand-built launch records: each class, the flag above 1, a two-launch
node, floors per launch mode, math paths, CPU ceilings, legacy (v1) ceilings; the graph/stream
ratios of an alternating trace."""

from __future__ import annotations

import pytest

from tracekit.kernels.launch import LaunchRecord, grid_1d
from tracekit.trace.perf import (
    RULE,
    TOLERANCE,
    alternating_mode_ratios,
    annotate,
    bounds,
    classification,
    fmt_bytes,
    fmt_time,
    launch_bound,
    time_label,
)

# H200-like ceilings: 4.2 TB/s copy, 600 Tflop/s f16 tensor core, 60 Tflop/s f32, floors of
# 1.3 µs (a kernel in a busy stream) and 0.9 µs (a graph node).
H200 = {
    "copy_bandwidth_Bps": 4.2e12,
    "launch_overhead_s": 8.6e-6,
    "peak_flops": 6.0e14,
    "peak_flops_by_path": {"f16_tensor_core": 6.0e14, "f32_cuda_core": 6.0e13, "int8": None},
    "launch_floor_s": {"stream": 1.3e-6, "graph": 0.9e-6},
    "backend": "cupy",
}


def _rec(nbytes_r: int, nbytes_w: int, flops: int, n: int = 1, **extra) -> LaunchRecord:
    return LaunchRecord.of(
        "k", grid_1d(n), bytes_read=nbytes_r, bytes_written=nbytes_w, flops=flops, **extra
    )


def test_seed_embed_is_launch_bound() -> None:
    # 30-token embed of a 896-wide Q4_0 table: 840 threads x (18 B read + 128 B written).
    r = _rec(840 * 18, 840 * 128, 0, 840)
    p = annotate([r], 2e-6, H200, "stream")
    assert p["bound"] == "launch" and p["bytes"] == 840 * 146
    assert p["t_star_s"] == pytest.approx(1.3e-6)
    assert p["efficiency"] == pytest.approx(1.3 / 2)
    assert p["reason"].startswith("launch-bound: stream launch floor 1.3 µs >= 123 KB at 4.2 TB/s")
    assert "efficiency 65%" in p["reason"] and p["flag"] is None
    g = annotate([r], 2e-6, H200, "graph")  # the same launch as a graph node: its own floor
    assert g["t_star_s"] == pytest.approx(0.9e-6) and "graph launch floor 0.9 µs" in g["reason"]


def test_residual_add_is_bandwidth_bound() -> None:
    n = 64 * 2**20 // 4  # 3 x 64 MB moved, 1 flop per element
    p = annotate([_rec(2 * 4 * n, 4 * n, n, n)], 60e-6, H200)
    assert p["bound"] == "bandwidth"
    assert p["intensity"] == pytest.approx(1 / 12)
    assert p["achieved_Bps"] == pytest.approx(12 * n / 60e-6)
    assert p["t_star_s"] == pytest.approx(12 * n / 4.2e12)
    assert p["fraction_of_ceiling"] == pytest.approx(p["achieved_Bps"] / 4.2e12)
    assert p["reason"].startswith("bandwidth-bound: 201 MB at 4.2 TB/s (copy) = 47.9 µs >= ")


def test_the_bandwidth_is_the_fastest_measured_stream() -> None:
    """A read stream faster than the copy (the H100's large reads ran 1-3% above it) is the
    ceiling: a weight-streaming launch at the copy's rate is then under 100%, not clipped to
    it; ceilings without the read and write streams (older traces) keep the copy."""
    n = 64 * 2**20  # 64 MB read, nothing written
    fast = {**H200, "read_bandwidth_Bps": 4.4e12, "write_bandwidth_Bps": 4.0e12}
    b = bounds(fast)
    assert (b["bandwidth_Bps"], b["bandwidth_stream"]) == (4.4e12, "read")
    p = annotate([_rec(n, 0, 0)], n / 4.2e12, fast)  # ran at the copy's rate
    assert p["efficiency"] == pytest.approx(4.2 / 4.4)
    assert "at 4.4 TB/s (read)" in p["reason"]
    assert classification(fast)["ridge_flop_per_byte"] == pytest.approx(6e14 / 4.4e12)
    assert bounds(H200)["bandwidth_stream"] == "copy"
    assert bounds({**H200, "write_bandwidth_Bps": 5e12})["bandwidth_stream"] == "write"


def test_gemm_on_the_tensor_cores_is_compute_bound() -> None:
    m = 4096  # f16 weights, f32 activations/out: 2*m^3 flop over ~100 MB
    nbytes = 2 * m * m + 4 * m * m + 4 * m * m
    r = _rec(nbytes - 4 * m * m, 4 * m * m, 2 * m**3, math_path="f16_tensor_core")
    p = annotate([r], 0.5e-3, H200)
    assert p["bound"] == "compute"
    assert p["efficiency"] == pytest.approx(2 * m**3 / 6e14 / 0.5e-3)
    assert "137 Gflop at 600 Tflop/s (f16_tensor_core) = 229 µs" in p["reason"]


def test_math_path_picks_the_peak_and_unknown_paths_fall_back_to_the_highest() -> None:
    r32 = _rec(10, 10, 6 * 10**7, math_path="f32_cuda_core")
    assert launch_bound(r32, bounds(H200), "stream")["t_compute_s"] == pytest.approx(1e-6)
    # int8 slot present but not measured: the highest peak keeps T* a lower bound, said so
    r8 = _rec(10, 10, 6 * 10**8, math_path="int8")
    lb = launch_bound(r8, bounds(H200), "stream")
    assert lb["t_compute_s"] == pytest.approx(1e-6)
    assert "no int8 peak measured: the highest peak, f16_tensor_core" in lb["reason"]
    r = _rec(10, 10, 6 * 10**8)  # no path recorded
    assert "no math path recorded" in launch_bound(r, bounds(H200), "stream")["reason"]


def test_efficiency_above_one_is_flagged_and_never_shown_above_100() -> None:
    # 50 MB "read" in 5 µs = 10 TB/s: more than HBM gives; the weights sat in L2
    r = _rec(50 * 10**6, 0, 0)
    p = annotate([r], 5e-6, H200)
    assert p["efficiency"] == pytest.approx(50e6 / 4.2e12 / 5e-6)  # 2.38
    assert p["fraction_of_ceiling"] == 1.0
    assert p["flag"] and "exceeds the measured 5 µs" in p["flag"] and "238%" in p["flag"]
    assert "FLAGGED" in p["reason"]
    # inside the tolerance: shown as 100%, not flagged
    t = 50e6 / 4.2e12 / (1 + TOLERANCE / 2)
    q = annotate([r], t, H200)
    assert q["fraction_of_ceiling"] == 1.0 and q["flag"] is None


def test_two_launch_node_is_time_weighted() -> None:
    # a convert (bandwidth) and a GEMM (compute), each timed on the device
    conv = _rec(4 * 10**8, 2 * 10**8, 0)  # T* 142.9 µs
    conv_d = {**conv.to_json(), "kernel": "convert_f32_f16", "time_s": 200e-6}
    gemm_d = {
        **_rec(10**6, 10**6, 6 * 10**11, math_path="f16_tensor_core").to_json(),
        "kernel": "cublaslt_matmul_f16_f32",
        "time_s": 1.5e-3,
    }  # T* 1 ms
    p = annotate([conv_d, gemm_d], 99.0, H200)  # the node time is ignored: launches are timed
    assert p["launches"] == 2
    assert p["efficiency"] == pytest.approx((6e8 / 4.2e12 + 1e-3) / 1.7e-3)
    assert p["bound"] == "compute"  # 1.5 of 1.7 ms in the GEMM
    assert p["per_launch"][0]["bound"] == "bandwidth"
    assert p["per_launch"][0]["efficiency"] == pytest.approx(6e8 / 4.2e12 / 200e-6)
    assert "deciding: cublaslt_matmul_f16_f32" in p["reason"]
    assert "88% of the measured time in compute-bound launches" in p["reason"]
    assert "ran 1.7 ms (sum of its launches)" in p["reason"]
    # without per-launch times the bound's own terms weigh, and the node's time is used
    conv_d.pop("time_s"), gemm_d.pop("time_s")
    q = annotate([conv_d, gemm_d], 2e-3, H200)
    assert q["efficiency"] == pytest.approx((6e8 / 4.2e12 + 1e-3) / 2e-3)
    assert "of the bound in compute-bound launches" in q["reason"]


def test_launch_intervals_are_launch_times() -> None:
    d = {**_rec(100, 100, 0).to_json(), "start_ns": 1000, "end_ns": 3600}
    p = annotate([d], None, H200)
    assert p["efficiency"] == pytest.approx(1.3e-6 / 2.6e-6)


def test_no_launch_and_no_time() -> None:
    p = annotate([], 1e-6, H200)
    assert p["bound"] is None and p["bytes"] == 0 and "no kernel launches" in p["reason"]
    q = annotate([_rec(10**9, 10**9, 10)], None, H200)
    assert q["bound"] == "bandwidth" and q["achieved_Bps"] is None
    assert q["fraction_of_ceiling"] is None and q["efficiency"] is None and q["flag"] is None


def test_cpu_ceilings_and_label() -> None:
    cpu = {
        "copy_bandwidth_Bps": 2e10,
        "launch_overhead_s": 1e-6,
        "peak_flops": 1e11,
        "peak_flops_by_path": {"f32_matmul": 1e11},
        "launch_floor_s": {"host": 1e-6},
        "backend": "numpy",
    }
    # a 4.24 ms CPU attention over 20 MB: 1 ms at 20 GB/s, far above the 1 µs call floor
    p = annotate([_rec(2 * 10**7, 0, 10**8)], 4.24e-3, cpu, "host")
    assert p["bound"] == "bandwidth" and p["efficiency"] == pytest.approx(1e-3 / 4.24e-3)
    assert time_label("numpy") == "CPU time" and time_label("cupy") == "GPU time"


def test_legacy_ceilings_use_the_back_to_back_floor() -> None:
    v1 = {"copy_bandwidth_Bps": 4.2e12, "launch_overhead_s": 8.6e-6, "peak_flops": 6e14,
          "launch_back_to_back_s": 1.4e-6}  # fmt: skip
    b = bounds(v1)
    assert b["floors"]["stream"] == 1.4e-6 and b["peaks"] == {"f16_tensor_core": 6e14}
    assert bounds({**v1, "launch_back_to_back_s": None})["floors"]["stream"] == 8.6e-6


def test_classification_states_rule_and_ridge() -> None:
    c = classification(H200)
    assert c["rule"] == RULE and "T* = max(" in c["rule"]
    assert c["ridge_flop_per_byte"] == pytest.approx(6e14 / 4.2e12)
    assert c["launch_floor_s"] == {"stream": 1.3e-6, "graph": 0.9e-6}
    assert c["peak_flops_by_path"] == {"f16_tensor_core": 6e14, "f32_cuda_core": 6e13}


def test_formatters() -> None:
    assert fmt_bytes(122_640) == "123 KB" and fmt_bytes(12) == "12 B"
    assert fmt_time(6.7e-6) == "6.7 µs" and fmt_time(2.5e-3) == "2.5 ms"


def _alternating(times: list[list[float]], modes: list[str]) -> dict:
    """A hand-built --alternate-modes trace: decode step k's node times ``times[k]`` (node 0 a
    view: time 0), launched in ``modes[k]``; step 0 is the recording (left out)."""
    steps = [
        {"kind": "decode", "launch_mode": m,
         "nodes": [{"id": i, "time_s": t} for i, t in enumerate(ts)]}
        for ts, m in zip(times, modes, strict=True)
    ]  # fmt: skip
    return {"run": {"alternate_modes": True, "backend": "cupy"}, "steps": steps}


def test_alternating_ratios_pair_each_stream_step_with_its_graph_neighbours() -> None:
    """Node 1 grows 5% a position (attention over the cache), the same in both modes: each
    stream step is one position after the graph step before it and one before the next, so the
    median of the pairs is 1. Node 2 is 1.2x slower in every stream step: 1.2. Node 3 is 1.6x
    slower in one graph step (a slow sample): it moves two of eight pairs, and the median
    stays 1. Node 0, a view (no time), is left out."""
    modes = ["graph"] + ["graph", "stream"] * 4 + ["graph"]
    times = [
        [0.0, 1e-6 * (1 + 0.05 * k), 2e-6 * (1.2 if m == "stream" else 1.0),
         1e-6 * (1.6 if k == 5 else 1.0)]
        for k, m in enumerate(modes)
    ]  # fmt: skip
    r = alternating_mode_ratios(_alternating(times, modes))
    assert set(r) == {1, 2, 3}
    assert r[1] == pytest.approx(1.0, abs=0.005)
    assert r[2] == pytest.approx(1.2) and r[3] == pytest.approx(1.0)
    # each stream step against its neighbours' mean, node 1 still 1; node 3's slow sample
    # would move two of four stream steps (0.77x) and leave the median at 0.88x


def test_alternating_ratios_refuse_a_trace_that_did_not_alternate() -> None:
    t = _alternating([[0.0, 1e-6]] * 3, ["graph"] * 3)
    t["run"]["alternate_modes"] = False
    with pytest.raises(ValueError, match="alternate_modes"):
        alternating_mode_ratios(t)

"""Bound classification: the seed's three examples land in their classes, with their numbers."""

from __future__ import annotations

from tracekit.kernels.launch import LaunchRecord, grid_1d
from tracekit.runner.perf import RULE, annotate, classification, fmt_bytes, fmt_time

# H200-like ceilings: 4.2 TB/s copy, 6.7 µs per launch, ~600 TFLOP/s f16.
H200 = {"copy_bandwidth_Bps": 4.2e12, "launch_overhead_s": 6.7e-6, "peak_flops": 6.0e14}


def _rec(nbytes_r: int, nbytes_w: int, flops: int, n: int = 1) -> LaunchRecord:
    return LaunchRecord.of(
        "k", grid_1d(n), bytes_read=nbytes_r, bytes_written=nbytes_w, flops=flops
    )


def test_seed_embed_is_launch_bound() -> None:
    # 30-token embed of a 896-wide Q4_0 table: 840 threads x (18 B read + 128 B written).
    r = _rec(840 * 18, 840 * 128, 0, 840)
    p = annotate([r], 8e-6, H200)
    assert p["bound"] == "launch"
    assert p["bytes"] == 840 * 146
    assert "123 KB at 4.2 TB/s would take 0.029 µs" in p["reason"]
    assert "under the 6.7 µs launch cost: launch-bound" in p["reason"]
    assert abs(p["fraction_of_ceiling"] - 6.7 / 8) < 1e-9


def test_residual_add_is_bandwidth_bound() -> None:
    n = 64 * 2**20 // 4  # 3 x 64 MB moved, 1 flop per element
    p = annotate([_rec(2 * 4 * n, 4 * n, n, n)], 60e-6, H200)
    assert p["bound"] == "bandwidth"
    assert abs(p["intensity"] - 1 / 12) < 1e-12
    assert abs(p["achieved_Bps"] - 12 * n / 60e-6) < 1
    assert abs(p["fraction_of_ceiling"] - p["achieved_Bps"] / 4.2e12) < 1e-12
    assert "0.0833 flop/B < 143 ridge" in p["reason"] and "bandwidth-bound" in p["reason"]
    assert "% of copy BW" in p["reason"]


def test_big_gemm_is_compute_bound() -> None:
    m = 4096  # f16 weights, f32 activations/out: 2*m^3 flop over ~100 MB
    nbytes = 2 * m * m + 4 * m * m + 4 * m * m
    p = annotate([_rec(nbytes - 4 * m * m, 4 * m * m, 2 * m**3)], 0.5e-3, H200)
    assert p["bound"] == "compute"
    assert p["intensity"] > 600e12 / 4.2e12
    assert abs(p["fraction_of_ceiling"] - (2 * m**3 / 0.5e-3) / 6e14) < 1e-12
    assert "compute-bound" in p["reason"] and "% of peak" in p["reason"]


def test_several_launches_share_the_launch_floor() -> None:
    p = annotate([_rec(1000, 1000, 0), _rec(1000, 1000, 0)], 20e-6, H200)
    assert p["bound"] == "launch" and p["launches"] == 2
    assert "under 2 launches' 13.4 µs" in p["reason"]


def test_no_launch_and_no_time() -> None:
    p = annotate([], 1e-6, H200)
    assert p["bound"] is None and p["bytes"] == 0 and "no kernel launches" in p["reason"]
    q = annotate([_rec(10**9, 10**9, 10)], None, H200)
    assert q["bound"] == "bandwidth" and q["achieved_Bps"] is None
    assert q["fraction_of_ceiling"] is None


def test_classification_states_rule_and_ridge() -> None:
    c = classification(H200)
    assert c["rule"] == RULE and "launch-bound" in c["rule"]
    assert abs(c["ridge_flop_per_byte"] - 6e14 / 4.2e12) < 1e-9


def test_formatters() -> None:
    assert fmt_bytes(122_640) == "123 KB" and fmt_bytes(12) == "12 B"
    assert fmt_time(6.7e-6) == "6.7 µs" and fmt_time(2.5e-3) == "2.5 ms"

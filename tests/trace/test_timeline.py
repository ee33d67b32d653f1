"""The idle breakdown's arithmetic on hand-built intervals (tracekit.trace.timeline)."""

from __future__ import annotations

import pytest

from tracekit.trace.timeline import TOLERANCE, breakdown, intervals, step_breakdown


def test_gaps_split_into_host_wait_and_other() -> None:
    # node 0 runs 0-10 µs; node 1 was queued at 4 µs (while 0 ran) and starts at 12 µs: a
    # 2 µs gap with work queued (other); node 2 queued at 30 µs, after node 1 ended at 20:
    # the GPU sat idle 10 µs waiting for the host, then 1 µs of launch latency (other).
    ivals = [(0, 10_000, 0, 0), (12_000, 20_000, 4_000, 1), (31_000, 40_000, 30_000, 2)]
    b = breakdown(ivals, span_ns=45_000)
    assert b["kernel_s"] == pytest.approx(27e-6)
    assert b["host_wait_s"] == pytest.approx(10e-6)
    assert b["other_gap_s"] == pytest.approx(2e-6 + 1e-6 + 5e-6)  # + the 5 µs tail
    assert b["residual_s"] == 0 and b["within_tolerance"]
    assert b["host_wait_by_node"] == {2: pytest.approx(10e-6)}


def test_unknown_queue_time_is_never_host_wait() -> None:
    # a CUDA graph: everything queued at launch (queued unknown); gaps are the graph's own
    b = breakdown([(0, 5, None, 0), (8, 10, None, 1)])
    assert b["host_wait_s"] == 0 and b["other_gap_s"] == pytest.approx(3e-9)
    assert b["span_s"] == pytest.approx(10e-9)


def test_leading_gap_and_cpu_style_intervals() -> None:
    # CPU: a node runs when the host calls it (queued = start): every gap is host work
    b = breakdown([(100, 300, 100, 0), (350, 400, 350, 1)], span_ns=500)
    assert b["host_wait_s"] == pytest.approx(150e-9)
    assert b["host_wait_by_node"] == {0: pytest.approx(100e-9), 1: pytest.approx(50e-9)}
    assert b["kernel_s"] + b["host_wait_s"] + b["other_gap_s"] == pytest.approx(b["span_s"])


def test_overlapping_stamps_leave_a_residual_outside_the_tolerance() -> None:
    # two "launches" of one stream claiming the same 100 ns: the stamps disagree
    b = breakdown([(0, 100, 0, 0), (0, 100, 0, 1)])
    assert b["residual_s"] == pytest.approx(-100e-9)
    assert not b["within_tolerance"]
    small = breakdown([(0, 1000, 0, 0), (990, 2000, 990, 1)])  # 10 ns of 2 µs: 0.5%
    assert small["within_tolerance"] and abs(small["residual_s"]) < TOLERANCE * 2e-6


def test_step_records_launch_intervals_win_over_node_intervals() -> None:
    step = {
        "span_ns": 50,
        "nodes": [
            {"id": 0, "start_ns": 0, "end_ns": 20, "queued_ns": 0, "launches": []},
            {
                "id": 1, "start_ns": 20, "end_ns": 50, "launches": [
                    {"start_ns": 25, "end_ns": 30, "queued_ns": 25},
                    {"start_ns": 40, "end_ns": 45},
                ],
            },
        ],
    }  # fmt: skip
    assert [i[:2] for i in intervals(step)] == [(0, 20), (25, 30), (40, 45)]
    b = step_breakdown(step)
    assert b["kernel_s"] == pytest.approx(30e-9)
    assert b["host_wait_s"] == pytest.approx(5e-9) and b["other_gap_s"] == pytest.approx(15e-9)
    assert step_breakdown({"nodes": [{"id": 0, "launches": []}]}) is None  # a v1 step

"""Per-launch device times from stamps (tracekit/runner/stamps.py) on hand-built stamp buffers,
and the NumPy backend's per-launch host times. The GPU side is tests/runner/test_stamps_gpu.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.cuda import STAMPED
from tracekit.runner import stamps
from tracekit.runner.record import launch_json, record_trace
from tracekit.runner.stamps import SLOT_WORDS, launch_plan, layout, read_timing, timed_entries
from tracekit.trace.format import load_trace
from tracekit.trace.timeline import step_breakdown

K = frozenset({"convert_f32_f16", "add_f32", "rms_norm_f32"})  # stand-ins for cuda.STAMPED
T0 = 1_700_000_000_000_000_000  # a globaltimer-like origin (ns)
S = SLOT_WORDS  # words per launch slot: launch k's start at S k, its end at S k + 1


def _words(n_launch: int, n_nodes: int, values: dict[int, int]) -> np.ndarray:
    w = np.zeros(layout(n_launch, n_nodes)["words"], np.uint64)
    for i, v in values.items():
        w[i] = T0 + v
    return w


def test_plans_per_mode() -> None:
    names = ["rms_norm_f32", "convert_f32_f16", None, None, "add_f32"]
    assert launch_plan(names, "stream", K) == [("kernel", "kernel"), ("kernel", "kernel"),
                                               ("stamp", "stamp"), ("stamp", "stamp"),
                                               ("kernel", "kernel")]  # fmt: skip
    # in a graph no stamp kernel goes next to a GEMM that follows a self-timed kernel
    assert launch_plan(names, "graph", K) == [("kernel", "kernel"), ("kernel", "kernel"),
                                              ("prev_end", "next_start"),
                                              ("stamp", "next_start"),
                                              ("kernel", "kernel")]  # fmt: skip
    assert launch_plan([None], "graph", K) == [("stamp", "next_start")]
    with pytest.raises(ValueError, match="'off' is not stream or graph"):
        launch_plan(names, "off", K)
    # the default set is the one derived from the sources (every node-first kernel is in it)
    assert launch_plan(["add_f32", "attention_f32", None], "stream") == [
        ("kernel", "kernel"), ("kernel", "kernel"), ("stamp", "stamp")]  # fmt: skip
    assert "attention_f32" in STAMPED and "empty_stamped" in STAMPED


def test_stream_step_rows_sums_and_host_wait() -> None:
    # node 0: a matmul (convert self-timed, GEMM between stamp kernels); node 1: an add that
    # the host handed over late (its marker runs 30 µs after the GEMM's end stamp)
    plan = launch_plan(["convert_f32_f16", None, "add_f32"], "stream", K)
    lay = layout(3, 2)
    w = _words(3, 2, {
        lay["begin"]: 0, lay["marker"]: 1_000,
        0: 2_000, 1: 3_000,  # convert 1.0 µs (launch k's start and end: words S k, S k + 1)
        S: 3_700, S + 1: 9_700,  # GEMM 6.0 µs (its before- and after-stamps)
        lay["marker"] + 1: 40_000,
        2 * S: 41_000, 2 * S + 1: 42_300,  # add 1.3 µs
        lay["end"]: 43_000,
    })  # fmt: skip
    t = read_timing(w, plan, [(0, 2), (2, 3)], "stream")
    assert t.launches == [(2_000, 3_000), (3_700, 9_700), (41_000, 42_300)]
    assert t.node_time_s == pytest.approx([7.0e-6, 1.3e-6])  # the sum of its launches'
    assert t.nodes == [(2_000, 9_700, 1_000), (41_000, 42_300, 40_000)]
    assert t.span_ns == 43_000
    rows = t.launch_json(0)
    assert [r["time_s"] for r in rows] == [1e-6, 6e-6]
    assert rows[0]["queued_ns"] == 1_000 and "queued_ns" not in rows[1]
    # the idle breakdown of the step, from the launch rows: 1 µs of host wait before the
    # matmul (the begin stamp to its marker), 30.3 µs before the add
    step = {"span_ns": t.span_ns, "nodes": [
        {"id": i, "launches": t.launch_json(i), "start_ns": t.nodes[i][0], "end_ns": t.nodes[i][1]}
        for i in range(2)
    ]}  # fmt: skip
    b = step_breakdown(step)
    assert b["kernel_s"] == pytest.approx(8.3e-6)
    assert b["host_wait_s"] == pytest.approx(31.3e-6)
    assert b["host_wait_by_node"] == {0: pytest.approx(1e-6), 1: pytest.approx(30.3e-6)}
    # marker -> convert, convert -> GEMM's before-stamp, marker -> add, add -> end stamp
    assert b["other_gap_s"] == pytest.approx((1_000 + 700 + 1_000 + 700) * 1e-9)
    assert b["within_tolerance"] and b["residual_s"] == pytest.approx(0)


def test_graph_step_gemm_runs_from_the_convert_end_to_the_next_start() -> None:
    # a matmul (convert, GEMM), then a GEMM after a GEMM (its own before-stamp) and an add
    plan = launch_plan(["convert_f32_f16", None, None, "add_f32"], "graph", K)
    assert plan[2] == ("stamp", "next_start")
    lay = layout(4, 2)
    w = _words(4, 2, {
        0: 500, 1: 1_400,  # convert 0.9 µs
        2 * S: 4_000,  # the second GEMM's before-stamp: the first ran 1.4 -> 4.0 µs
        3 * S: 7_500, 3 * S + 1: 8_700,  # the add; the second GEMM ran 4.0 -> 7.5 µs
        lay["end"]: 15_000,
    })  # fmt: skip
    t = read_timing(w, plan, [(0, 2), (2, 4)], "graph")
    assert t.launches == [(0, 900), (900, 3_500), (3_500, 7_000), (7_000, 8_200)]
    assert t.nodes == [(0, 3_500, None), (3_500, 8_200, None)]
    assert t.node_time_s == pytest.approx([3.5e-6, 4.7e-6])
    assert t.span_ns == 14_500  # from the first launch's start
    assert "queued_ns" not in t.launch_json(0)[0]


def test_a_stamp_not_written_is_an_error() -> None:
    plan = launch_plan(["add_f32"], "stream", K)
    lay = layout(1, 1)
    w = _words(1, 1, {lay["begin"]: 0, lay["marker"]: 10, 0: 100, lay["end"]: 900})
    with pytest.raises(RuntimeError, match=r"launch 0's end was not written \(word 1 is 0\)"):
        read_timing(w, plan, [(0, 1)], "stream")
    with pytest.raises(ValueError, match=f"stamp buffer of 3 words, the step needs {lay['words']}"):
        read_timing(w[:3], plan, [(0, 1)], "stream")
    ok = {0: 1, 1: 2, lay["marker"]: 1, lay["begin"]: 1, lay["end"]: 3}
    with pytest.raises(ValueError, match=r"node 0's launches \[1, 0\) are not a range"):
        read_timing(_words(1, 1, ok), plan, [(1, 0)], "stream")


@pytest.mark.parametrize("mode", ["stream", "graph"])
def test_a_node_without_launches_is_an_empty_interval(mode: str) -> None:
    # an add, a slice that is a view (no launch), an add: the view takes no time and sits where
    # the GPU was when it ran (its marker in stream mode, the previous launch's end in a graph)
    plan = launch_plan(["add_f32", "add_f32"], mode, K)
    lay = layout(2, 3)
    w = _words(2, 3, {
        lay["begin"]: 0, lay["marker"]: 100, 0: 200, 1: 1_200,
        lay["marker"] + 1: 1_500, lay["marker"] + 2: 1_600,
        S: 1_700, S + 1: 2_700, lay["end"]: 3_000,
    })  # fmt: skip
    if mode == "graph":  # no markers or begin stamp in a graph
        for k in (lay["begin"], lay["marker"], lay["marker"] + 1, lay["marker"] + 2):
            w[k] = 0
    t = read_timing(w, plan, [(0, 1), (1, 1), (1, 2)], mode)
    assert t.node_time_s == pytest.approx([1e-6, 0.0, 1e-6])
    assert t.launch_json(1) == []
    if mode == "stream":
        assert t.nodes[1] == (1_500, 1_500, 1_500)
    else:  # the clock starts at the first launch: the add ended at 1.0 us
        assert t.nodes[1] == (1_000, 1_000, None)
    assert t.nodes[2][0] >= t.nodes[1][1] >= t.nodes[0][1]


def test_timed_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamps, "stamp_entry", lambda buf, word: ("stamp", word))
    buf = np.zeros(layout(2, 1)["words"], np.uint64)
    kern = ("fn", (1, 1, 1), (256, 1, 1), ("x", "y", np.uint64(0)), 0)
    (e,) = timed_entries(kern, 1, buf, ("kernel", "kernel"))
    slot = e[3][-1]
    assert e[3][:2] == ("x", "y") and slot.size == SLOT_WORDS
    assert np.shares_memory(slot, buf[SLOT_WORDS : 2 * SLOT_WORDS])

    with pytest.raises(RuntimeError, match=r"launch 0 \(None\): its launcher does not pass"):
        timed_entries(("fn", (1,), (1,), ("x", "y"), 0), 0, buf, ("kernel", "kernel"))

    def gemm(stream: int) -> None:
        return None

    assert timed_entries(gemm, 1, buf, ("stamp", "stamp")) == [("stamp", S), gemm, ("stamp", S + 1)]
    assert timed_entries(gemm, 1, buf, ("prev_end", "next_start")) == [gemm]


def test_launch_rows_pair_with_records_or_not_at_all() -> None:
    from tracekit.kernels.launch import LaunchRecord

    recs = [LaunchRecord.of("a", None), LaunchRecord.of("b", None)]
    timed = [{"time_s": 1e-6, "start_ns": 0, "end_ns": 1000}, {"time_s": 2e-6, "start_ns": 1000,
                                                                "end_ns": 3000}]  # fmt: skip
    assert [d["time_s"] for d in launch_json(recs, timed)] == [1e-6, 2e-6]
    assert all("time_s" not in d for d in launch_json(recs, timed[:1]))


def test_numpy_launches_carry_host_clock_times(tmp_path: Path) -> None:
    t = load_trace(record_trace(None, tokens=[3, 17, 42], steps=2, backend="numpy",
                                capture="timing", output=tmp_path / "t.json",
                                ceilings={"copy_bandwidth_Bps": 2e10, "launch_overhead_s": 1e-6,
                                          "peak_flops": 1e11}, progress=False))  # fmt: skip
    singles = 0
    for s in t["steps"]:
        for rec in s["nodes"]:
            las: list[dict[str, Any]] = rec["launches"]
            if len(las) == 1:  # one call, one launch: the call's host interval
                (la,) = las
                assert la["start_ns"] == rec["start_ns"] and la["end_ns"] == rec["end_ns"]
                assert la["time_s"] == pytest.approx(rec["time_s"], rel=1e-4)
                assert la["queued_ns"] == la["start_ns"]
                singles += 1
            else:  # several records of one call: the host clock cannot split it
                assert all("time_s" not in la for la in las)
    assert singles > 0

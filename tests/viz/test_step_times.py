"""What the step line and the timeline title sum (issue 11's leftover: the README screenshot
read "nodes 119 µs GPU time" above a timeline titled "144 µs in all" for the same step)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tracekit.trace.format import load_trace
from tracekit.trace.perf import derive_trace
from tracekit.viz import data as d
from tracekit.viz import figures as f

ROOT = Path(__file__).resolve().parents[2]
H200 = [ROOT / "traces" / "demo-h200.json", ROOT / "traces" / "demo-h200-graph.json"]


@pytest.fixture(scope="module", params=H200, ids=lambda p: p.stem)
def h200(request: pytest.FixtureRequest) -> dict:
    return load_trace(request.param)


def _check(t: dict, j: int) -> dict:
    s, tt = t["steps"][j], d.step_times(t, j)
    recs = s["nodes"]
    launches = [la["time_s"] for r in recs for la in r["launches"] if la.get("time_s") is not None]
    assert tt["kernel_s"] == pytest.approx(s["gpu_s"], rel=1e-5)
    assert tt["kernel_s"] == pytest.approx(s["breakdown"]["kernel_s"], rel=1e-5)
    if len(launches) == sum(len(r["launches"]) for r in recs):  # every launch timed
        assert tt["kernel_s"] == pytest.approx(sum(launches), rel=1e-5)
    assert tt["bars_s"] == pytest.approx(sum(r["end_ns"] - r["start_ns"] for r in recs) * 1e-9)
    # (a CPU node's time_s is rounded to 5 digits: its bar may be 1 ns shorter, never a gap)
    assert tt["inside_s"] == pytest.approx(max(tt["bars_s"] - tt["kernel_s"], 0.0), abs=1e-12)
    parts = tt["kernel_s"] + tt["host_wait_s"] + tt["other_gap_s"]
    assert parts == pytest.approx(tt["span_s"], rel=s["breakdown"]["tolerance"])
    assert tt["bars_s"] <= tt["span_s"] * (1 + 1e-9)
    info, title = d.step_info(t, j), f.timeline_title(t, j)
    dev = d.device_word(t)
    k, span = d.fmt_time(tt["kernel_s"]), d.fmt_time(tt["span_s"])
    # the step line and the title both say kernel time, and the same span; the bars' sum only
    # appears named as the bars'
    assert f"kernel time {k} of a {span} {dev} span" in info
    assert f"{dev} span {span} = kernel time {k} + host wait " in title
    assert f"sum to {d.fmt_time(tt['bars_s'])}" in title and "in all" not in title
    assert "nodes " not in info.split("·")[2]  # no bare "nodes 119 µs" any more
    return tt


def test_the_h200_demo_labels_add_up(h200):
    for j in range(len(h200["steps"])):
        _check(h200, j)
    # decode 1 of the eager demo is the README's: 119 µs of kernels, bars 144 µs, the 25 µs
    # between the attention node's kv_store and attention launches (stamp kernels between)
    tt = d.step_times(h200, 1)
    assert tt["bars_s"] > tt["kernel_s"]
    inside = sum(
        (r["end_ns"] - r["start_ns"]) * 1e-9 - r["time_s"] for r in h200["steps"][1]["nodes"]
    )
    assert tt["inside_s"] == pytest.approx(inside, abs=1e-12)
    assert f"+ {d.fmt_time(inside)} between a node's own launches" in f.timeline_title(h200, 1)


def test_the_labels_follow_the_trace(h200):
    """A launch made 50 µs longer (and its node's end with it) moves the kernel time in both
    labels and the bars' sum; the gaps inside nodes stay what they were."""
    t = copy.deepcopy(h200)
    j = 1
    before = d.step_times(t, j)
    rec = max(t["steps"][j]["nodes"], key=lambda r: r["time_s"])
    la = rec["launches"][-1]
    la["end_ns"] += 50_000
    la["time_s"] += 50e-6
    rec["time_s"] += 50e-6
    rec["end_ns"] += 50_000
    t["steps"][j]["gpu_s"] += 50e-6
    # the following work starts no earlier than this end: shift it, and the span, by 50 µs
    for r in t["steps"][j]["nodes"][rec["id"] + 1 :]:
        for x in (r, *r["launches"]):
            for key in ("start_ns", "end_ns", "queued_ns"):
                if x.get(key) is not None:
                    x[key] += 50_000
    t["steps"][j]["span_ns"] += 50_000
    derive_trace(t)
    after = _check(t, j)
    assert after["kernel_s"] == pytest.approx(before["kernel_s"] + 50e-6, rel=1e-6)
    assert after["bars_s"] == pytest.approx(before["bars_s"] + 50e-6, rel=1e-6)
    assert after["inside_s"] == pytest.approx(before["inside_s"], abs=1e-9)
    assert d.fmt_time(after["kernel_s"]) in d.step_info(t, j)


def test_a_cpu_trace_says_cpu_and_has_no_gaps_inside_nodes(demo_trace):
    for j in range(len(demo_trace["steps"])):
        tt = _check(demo_trace, j)
        title = f.timeline_title(demo_trace, j)
        if tt["inside_s"] < 1e-9:
            assert "no gaps inside nodes" in title and "between a node's own" not in title
    assert "CPU span" in d.step_info(demo_trace, 0)


def test_a_trace_without_intervals_lays_bars_end_to_end_and_says_so(demo_trace):
    t = copy.deepcopy(demo_trace)
    for s in t["steps"]:
        s["breakdown"] = None
        for r in s["nodes"]:
            r.pop("start_ns", None)
            r.pop("end_ns", None)
    tt = d.step_times(t, 1)
    assert tt["inside_s"] is None and tt["span_s"] is None
    assert (
        tt["bars_s"]
        == tt["kernel_s"]
        == pytest.approx(sum(r["time_s"] for r in t["steps"][1]["nodes"]))
    )
    assert "node bars end to end (v1 trace)" in f.timeline_title(t, 1)
    assert d.step_info(t, 1).split(" · ")[2] == f"kernel time {d.fmt_time(tt['kernel_s'])} (CPU)"


def test_the_step_line_names_its_launch_mode() -> None:
    """Each step's line says how its kernels were launched (its ``launch_mode``): the prefill
    of a CUDA-graph trace in the stream, its decode steps as the graph; an alternating run's
    steps each their own (here the graph trace with one decode step relabelled stream, as
    --alternate-modes records it); the capture row says the run alternated."""
    t = load_trace(H200[1])
    assert t["run"]["cuda_graph"]
    assert d.step_info(t, 0).startswith("prefill (stream) · ")
    assert d.step_info(t, 1).startswith("decode 1 (graph) · ")
    alt = copy.deepcopy(t)
    alt["run"]["alternate_modes"] = True
    alt["steps"][2]["launch_mode"] = "stream"
    assert d.step_info(alt, 2).startswith(f"{alt['steps'][2]['name']} (stream) · ")
    assert d.capture_summary(alt)["alternate_modes"] and not d.capture_summary(t)["alternate_modes"]


def test_an_alternating_trace_reports_its_graph_and_stream_agreement() -> None:
    """The overview's row for an --alternate-modes trace: per node, the stream steps' median
    against the graph steps'. The graph trace relabelled (its replayed steps alternating) with
    one node 1.5x slower in the stream steps: that node is the farthest and outside 15%; a
    trace that did not alternate has no row."""
    t = load_trace(H200[1])
    assert d.mode_agreement(t) is None
    alt = copy.deepcopy(t)
    alt["run"]["alternate_modes"] = True
    decode = [s for s in alt["steps"] if s["kind"] == "decode"][1:]
    for j, s in enumerate(decode):
        s["launch_mode"] = "graph" if j % 2 == 0 else "stream"
        for x, y in zip(s["nodes"], decode[0]["nodes"], strict=True):
            x["time_s"] = y["time_s"]  # every step alike: all agree
    m = d.mode_agreement(alt)
    assert m["within"] == m["nodes"] > 0 and sum(m["steps"]) == len(decode)
    for s in decode:
        if s["launch_mode"] == "stream":
            s["nodes"][3]["time_s"] *= 1.5
    m = d.mode_agreement(alt)
    name = alt["nodes"][decode[0]["nodes"][3]["id"]]["name"]
    assert m["within"] == m["nodes"] - 1 and m["worst"][0] == (name, pytest.approx(1.5))

"""Chrome Trace Event export: valid JSON that Perfetto's importer accepts, nesting intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trace.test_format import make_trace
from tracekit.trace.export import chrome_events, export_chrome

_PH = {"X", "C", "M"}


def _check_event(e: dict) -> None:
    assert e["ph"] in _PH, e
    assert isinstance(e["name"], str) and e["name"], e
    assert isinstance(e["pid"], int), e
    if e["ph"] == "X":
        assert isinstance(e["tid"], int) and e["ts"] >= 0 and e["dur"] > 0, e
        assert isinstance(e["cat"], str) and isinstance(e["args"], dict), e
    if e["ph"] == "C":
        assert e["ts"] >= 0 and e["args"], e
        assert all(isinstance(v, (int, float)) for v in e["args"].values()), e


def test_export_is_valid_chrome_json(tmp_path: Path) -> None:
    t = make_trace(n_layer=3, n_decode=2)
    out = export_chrome(t, tmp_path / "x.chrome.json")
    doc = json.loads(out.read_text())  # strict JSON: no NaN literal could have been written
    events = doc["traceEvents"]
    for e in events:
        _check_event(e)
    # every node of every step is a slice named after the node, family as category
    nodes = [e for e in events if e["ph"] == "X" and e["cat"] not in ("step", "layer")]
    assert len(nodes) == len(t["nodes"]) * len(t["steps"])
    first = nodes[0]
    assert (first["name"], first["cat"]) == (t["nodes"][0]["name"], t["nodes"][0]["family"])
    assert first["args"]["bound"] == t["steps"][0]["nodes"][0]["perf"]["bound"]
    # a process per step, named like the NVTX step range
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"prefill", "decode 1", "decode 2"}
    # counter tracks: absmax / mean / nan+inf per node with stats
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"absmax", "mean", "nan+inf"}
    assert len(counters) == 3 * len(nodes)


def test_slices_are_end_to_end_and_nest() -> None:
    t = make_trace(n_layer=2, n_decode=1)
    events = chrome_events(t)["traceEvents"]
    for pid in (1, 2):
        xs = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        step = next(e for e in xs if e["cat"] == "step")
        nodes = sorted((e for e in xs if e["cat"] not in ("step", "layer")), key=lambda e: e["ts"])
        for a, b in zip(nodes, nodes[1:], strict=False):
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=1e-6)  # laid end to end
        assert nodes[0]["ts"] == pytest.approx(step["ts"])
        end = nodes[-1]["ts"] + nodes[-1]["dur"]
        assert end == pytest.approx(step["ts"] + step["dur"], abs=1e-6)
        for layer in (e for e in xs if e["cat"] == "layer"):
            inside = [n for n in nodes if n["args"]["layer"] == int(layer["name"][4:])]
            assert inside and all(
                layer["ts"] - 1e-9 <= n["ts"]
                and n["ts"] + n["dur"] <= layer["ts"] + layer["dur"] + 1e-6
                for n in inside
            )
    # steps follow each other on one clock
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["pid"])
    assert steps[1]["ts"] == pytest.approx(steps[0]["ts"] + steps[0]["dur"])


def test_timing_trace_exports_without_counters() -> None:
    events = chrome_events(make_trace(stats=False))["traceEvents"]
    assert not [e for e in events if e["ph"] == "C"]
    assert [e for e in events if e["ph"] == "X"]


def test_device_intervals_place_slices_and_gaps_show() -> None:
    """v2: each node slice sits at its recorded start; a host wait is a gap on the node thread
    and a slice of the wait thread, ending where the node starts."""
    from tracekit.trace.perf import derive_trace

    t = make_trace(n_layer=1, n_decode=0)
    step = t["steps"][0]
    clock = 0
    for i, rec in enumerate(step["nodes"]):
        clock += 3000 if i == 2 else 0  # the device idles 3 µs before node 2, nothing queued
        rec["start_ns"], rec["end_ns"], rec["queued_ns"] = clock, clock + 1000, clock
        clock += 1000
    step["span_ns"] = clock + 500
    derive_trace(t)
    events = chrome_events(t)["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    nodes = [e for e in xs if e["tid"] == 1 and e["cat"] not in ("step", "layer")]
    assert [n["ts"] for n in nodes[:4]] == [0.0, 1.0, 5.0, 6.0]  # µs: the 3 µs gap stays
    waits = [e for e in xs if e["cat"] == "idle"]
    assert len(waits) == 1 and waits[0]["ts"] == 2.0 and waits[0]["dur"] == 3.0
    assert waits[0]["args"]["before"] == t["nodes"][2]["name"]
    stepx = next(e for e in xs if e["cat"] == "step")
    assert stepx["dur"] == pytest.approx(clock / 1000 + 0.5)
    assert stepx["args"]["host_wait_us"] == pytest.approx(3.0)
    assert stepx["args"]["kernel_us"] == pytest.approx(len(nodes))

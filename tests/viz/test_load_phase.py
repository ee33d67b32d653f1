"""The load phase (the w16 cache's warm-up, issue 13) in the dashboard and the Perfetto export,
and the matmul path of every node: pure data, figure and layout functions, no browser."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.matmul import PATHS
from tracekit.trace.export import chrome_events
from tracekit.viz import app as viz_app
from tracekit.viz import data as d
from tracekit.viz import figures as f


def _walk(c: Any):
    yield c
    kids = getattr(c, "children", None)
    for k in kids if isinstance(kids, list | tuple) else [kids]:
        if k is not None and not isinstance(k, str | int | float):
            yield from _walk(k)


def _by_id(items: list[Any], cid: str) -> Any:
    return next(c for top in items for c in _walk(top) if getattr(c, "id", None) == cid)


def _links(c: Any) -> list[tuple[str, str | None, str]]:
    """(data-node, data-step or None, label) of every node link under ``c``."""
    out = []
    for x in _walk(c):
        if getattr(x, "className", None) == "tk-link":
            props = x.to_plotly_json()["props"]
            out.append((props["data-node"], props.get("data-step"), x.children))
    return out


# -- the load view -----------------------------------------------------------------------------
def test_the_load_view_is_a_step_of_one_dequant_node_per_weight(load_trace):
    lv = d.load_view(load_trace)
    (step,) = lv["steps"]
    loads = load_trace["load"]["nodes"]
    assert step["name"] == "load" and step["kind"] == "load"
    assert [n["name"] for n in lv["nodes"]] == [n["weight"] for n in loads]
    assert step["gpu_s"] == pytest.approx(sum(n["time_s"] for n in loads))
    for k, (node, rec, src) in enumerate(zip(lv["nodes"], step["nodes"], loads, strict=True)):
        assert node["id"] == rec["id"] == k and node["op"] == "dequant"
        assert node["layer"] == (
            int(src["weight"].split(".")[1]) if "blk." in src["weight"] else None
        )
        assert rec["launches"] == src["launches"] and rec["time_s"] == src["time_s"]
        assert rec["stats"] is None
    # the graph view: one coloured cell per weight, laid out by layer
    fig = f.graph_figure(lv, 0, "time", 0)
    assert int(np.isfinite(np.asarray(fig.data[0].z, dtype=float)).sum()) == len(loads)
    assert fig.layout.title.text.startswith("load ·")
    with pytest.raises(ValueError, match="no load phase"):
        d.load_view({**load_trace, "load": None})


def test_a_load_node_lists_its_dequant_launch_bytes_bandwidth_and_bound(load_trace):
    lv = d.load_view(load_trace)
    rec, src = lv["steps"][0]["nodes"][0], load_trace["load"]["nodes"][0]
    (row,) = d.launch_rows(rec, "numpy")
    la = src["launches"][0]
    assert row["kernel"] == la["kernel"] and row["kernel"].startswith("dequant_")
    assert row["read"] == d.fmt_bytes(la["bytes_read"])
    assert row["written"] == d.fmt_bytes(la["bytes_written"])
    assert row["path"] == "f16-cached" == d.node_path(rec)
    rows = dict(d.perf_rows(lv, rec))
    assert rows["CPU time (dequant at load)"] == d.fmt_time(src["time_s"])
    assert rows["achieved bandwidth"].startswith(d.fmt_rate(src["perf"]["achieved_Bps"], "B/s"))
    assert rows["efficiency (T* / time)"] == d.fmt_efficiency(src["perf"])
    # a load node was timed once: no timing/full passes, no host wait before it
    assert not any("full pass" in k or "host wait" in k for k in rows)


def test_selection_ids_resolve_across_the_load_phase_and_the_steps(load_trace):
    t, n = load_trace, len(load_trace["nodes"])
    loads = t["load"]["nodes"]
    for k, ln in enumerate(loads):
        reader = d.resolve_node(t, 0, n + k)  # a load node, shown at the prefill
        assert f"weight:{ln['weight']}" in t["nodes"][reader]["inputs"]
        assert reader == d.weight_consumers(t, ln["weight"])[0]
        assert d.resolve_node(t, d.LOAD, reader) == k  # and back
        assert d.resolve_node(t, d.LOAD, n + k) == k
        assert d.global_node(t, d.LOAD, k) == n + k
    norm = next(x["id"] for x in t["nodes"] if x["op"] == "rms_norm")
    slow = max(range(len(loads)), key=lambda k: loads[k]["time_s"])
    assert d.resolve_node(t, d.LOAD, norm) == slow  # reads no cached weight
    assert d.resolve_node(t, 1, norm) == norm and d.global_node(t, 1, norm) == norm
    recs = t["steps"][1]["nodes"]
    assert d.resolve_node(t, 1, n + len(loads)) == max(range(n), key=lambda i: recs[i]["time_s"])


def test_the_load_node_detail_says_there_are_no_statistics_and_links_its_readers(load_trace):
    t, n = load_trace, len(load_trace["nodes"])
    lv = d.load_view(t)
    k = 3
    head, body, heat, hist = viz_app._detail_views(t, lv, d.LOAD, n + k)
    weight = t["load"]["nodes"][k]["weight"]
    assert _by_id(head, "detail-name").children == weight
    assert "· load" in _by_id(head, "detail-where").children
    assert "load phase: no statistics" in _by_id(body, "detail-nostats").children
    assert "load phase: no statistics" in heat.layout.annotations[0].text
    assert not heat.data and not hist.data
    readers = d.weight_consumers(t, weight)
    links = _links(_by_id(head, "detail-consumers"))
    assert links == [(str(r), "0", t["nodes"][r]["name"]) for r in readers]
    # and a matmul at a step links its weight to the load node that dequantized it
    head, _ = viz_app._detail(t, lv, 1, readers[0])
    (link,) = [x for x in _links(_by_id(head, "detail-inputs")) if x[2].startswith("weight")]
    assert link[:2] == (str(n + k), str(d.LOAD)) and weight in link[2]


def test_the_step_selector_starts_at_the_load_phase(load_trace, load_trace_path, demo_trace):
    n = len(load_trace["nodes"])
    lv = d.load_view(load_trace)
    lay, lay_load = d.grid_layout(load_trace["nodes"]), d.grid_layout(lv["nodes"])
    meta = viz_app._meta(load_trace, lay, lay_load)
    assert meta["step_min"] == d.LOAD and meta["n_load"] == len(lv["nodes"])
    assert meta["n_nodes"] == n
    assert len(meta["info"]) == len(load_trace["steps"]) + 1
    assert meta["info"][0].startswith("load · w16 cache warm-up")
    assert meta["info"][1].startswith("prefill")
    for k, (r, c) in lay_load.cell.items():
        assert meta["load_cells"][r][c] == k
    app = viz_app.create_app([load_trace_path])
    slider = next(c for c in _walk(app.layout) if getattr(c, "id", None) == "step")
    assert slider.min == d.LOAD and slider.marks[d.LOAD] == "load" and slider.marks[0] == "prefill"
    # a trace without a load phase starts at the prefill, as before
    plain = viz_app._meta(demo_trace, d.grid_layout(demo_trace["nodes"]))
    assert plain["step_min"] == 0 and plain["n_load"] == 0 and plain["load_cells"] == []


def test_the_timeline_and_roofline_cover_the_load_nodes(load_trace):
    lv = d.load_view(load_trace)
    loads = load_trace["load"]["nodes"]
    tl = f.timeline_figure(lv, 0, 2)
    bars = [tr for tr in tl.data if tr.type == "bar"]
    ids = sorted(i for tr in bars for i in tr.customdata)
    assert ids == list(range(len(loads)))
    widths = {i: w for tr in bars for i, w in zip(tr.customdata, tr.x, strict=True)}
    assert sum(widths.values()) == pytest.approx(sum(n["time_s"] for n in loads) * 1e6)
    starts = sorted((b, i) for tr in bars for i, b in zip(tr.customdata, tr.base, strict=True))
    assert [i for _, i in starts] == list(range(len(loads)))  # end to end, in load order
    assert "timed one by one at load" in tl.layout.xaxis.title.text
    assert "timed one by one at load" in tl.layout.title.text
    roof = f.roofline_figure(lv, 0, 0)
    pts = sorted(i for tr in roof.data if tr.customdata is not None for i in tr.customdata)
    with_flops = [k for k, n in enumerate(loads) if n["perf"]["flops"] > 0]
    assert pts == with_flops and pts


def test_the_overview_names_the_load_phase(load_trace, load_trace_path, demo_trace):
    text = d.load_summary(load_trace)
    loads = load_trace["load"]["nodes"]
    assert text.startswith(f"{len(loads)} weights dequantized into the w16 cache")
    assert d.fmt_time(sum(n["time_s"] for n in loads)) in text
    assert d.fmt_time(load_trace["load"]["seconds"]) in text
    ov = viz_app._overview(load_trace, load_trace_path)
    cells = [x.children for x in _walk(ov) if type(x).__name__ in ("Td", "Th")]
    assert "load phase" in cells and text in cells
    assert d.load_summary(demo_trace) is None


def test_the_tokens_and_compare_views_at_the_load_phase_say_why_they_are_empty(
    load_trace_path, tmp_path
):
    import shutil

    b = tmp_path / "b.json"
    shutil.copy(load_trace_path, b)
    app = viz_app.create_app([load_trace_path, b])
    tokens = next(v for k, v in app.callback_map.items() if "topk.figure" in k)
    compare = next(v for k, v in app.callback_map.items() if "compare-summary" in k)
    topk, _, _, text = tokens["callback"].__wrapped__([d.LOAD])
    assert "load phase chooses no token" in topk.layout.annotations[0].text
    summary, fig, *_ = compare["callback"].__wrapped__([d.LOAD, 0])
    assert "not compared" in summary.children
    assert "not compared" in fig.layout.annotations[0].text


# -- export ----------------------------------------------------------------------------------
def test_the_chrome_export_holds_the_load_phase_before_the_steps(load_trace, demo_trace):
    ev = chrome_events(load_trace)["traceEvents"]
    loads = load_trace["load"]["nodes"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert procs[0] == "load" and procs[1] == "prefill"
    dq = [e for e in ev if e["pid"] == 0 and e["ph"] == "X" and e["cat"] == "dequant"]
    assert [e["name"] for e in dq] == [n["weight"] for n in loads]
    for e, n in zip(dq, loads, strict=True):
        assert e["dur"] == pytest.approx(n["time_s"] * 1e6, abs=1e-3)
        assert e["args"]["kernels"] == [la["kernel"] for la in n["launches"]]
        assert e["args"]["path"] == ["f16-cached"]
    for a, b in zip(dq, dq[1:], strict=False):  # end to end
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=1e-3)
    (whole,) = [e for e in ev if e["pid"] == 0 and e["ph"] == "X" and e["cat"] == "step"]
    end = whole["ts"] + whole["dur"]
    assert end == pytest.approx(dq[-1]["ts"] + dq[-1]["dur"], abs=1e-3)
    assert min(e["ts"] for e in ev if e["pid"] > 0 and e["ph"] == "X") >= end
    assert not any(e["pid"] == 0 for e in chrome_events(demo_trace)["traceEvents"])


# -- the matmul path -------------------------------------------------------------------------
def test_colour_by_matmul_path(load_trace):
    t = load_trace
    v = d.measure_values(t, 1, "path")
    for n, rec in zip(t["nodes"], t["steps"][1]["nodes"], strict=True):
        if n["op"] == "matmul":
            assert v[n["id"]] == PATHS.index(d.node_path(rec)) == PATHS.index("f16-cached")
        else:
            assert np.isnan(v[n["id"]])
    fig = f.graph_figure(t, 1, "path", 0)
    assert list(fig.data[0].colorbar.ticktext) == list(PATHS)
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-0.5, len(PATHS) - 0.5)
    mm = next(n for n in t["nodes"] if n["op"] == "matmul")
    r, c = d.grid_layout(t["nodes"]).cell[mm["id"]]
    assert "path f16-cached" in fig.data[0].hovertext[r][c]
    assert "matmul path" in [o["label"] for o in _measure_options(t)]


def _measure_options(trace: dict[str, Any]) -> list[dict[str, str]]:
    return [{"label": d.measure_label(trace, k), "value": k} for k in d.MEASURES]


def test_the_path_over_the_steps_names_where_it_changes(load_trace, demo_trace):
    t = copy.deepcopy(load_trace)
    mm = next(n["id"] for n in t["nodes"] if n["op"] == "matmul")
    assert d.paths_by_step(t, mm) == "f16-cached"
    for s in t["steps"][1:]:  # as a long prefill on the f16 path, decode on quant
        for la in s["nodes"][mm]["launches"]:
            la.setdefault("extra", {})["path"] = "quant"
    assert d.paths_by_step(t, mm) == "f16-cached (prefill), quant (decode)"
    norm = next(n["id"] for n in t["nodes"] if n["op"] == "rms_norm")
    assert d.paths_by_step(t, norm) is None
    slow = viz_app._overview(t, "x.json")
    table = next(c for c in _walk(slow) if getattr(c, "id", None) == "slowest-nodes")
    heads = [x.children for x in _walk(table) if type(x).__name__ == "Th"]
    assert "matmul path" in heads

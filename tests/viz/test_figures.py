"""Pure figure builders, checked on the figure objects (no browser).

The traces come from the synthetic ``make_trace`` fixture (tests/viz/conftest.py), whose values
are random but whose structure is the schema's, so every number a figure shows can be checked
against the trace it was built from.
"""

from __future__ import annotations

import base64
import html
import math

import numpy as np
import plotly.graph_objects as go
import pytest

from tests.viz.conftest import make_trace
from tracekit.viz import data as d
from tracekit.viz import figures as f


def _heatmap(fig):
    return fig.data[0]


# -- graph view ------------------------------------------------------------------------------
def test_graph_figure_one_cell_per_node_with_its_time(small_trace):
    lay = d.grid_layout(small_trace["nodes"])
    fig = f.graph_figure(small_trace, 1, "time")
    hm = _heatmap(fig)
    z = np.asarray(hm.z, dtype=float)
    assert z.shape == (len(lay.rows), len(lay.cols))
    assert np.isfinite(z).sum() == len(small_trace["nodes"])
    for i, (r, c) in lay.cell.items():
        t_us = small_trace["steps"][1]["nodes"][i]["time_s"] * 1e6
        assert z[r, c] == pytest.approx(math.log10(t_us))
        assert small_trace["nodes"][i]["name"] in hm.hovertext[r][c]
    assert "decode 1" in fig.layout.title.text


def test_graph_figure_rows_are_layers_and_stay_readable_at_24_layers():
    tr = make_trace(n_layer=24, n_decode=1, n_prompt=2, n_embd=8)
    fig = f.graph_figure(tr, 0, "time")
    ticks = list(fig.layout.yaxis.ticktext)
    # layer rows by name; the rows outside layers name their nodes
    assert ticks == ["token_embd"] + [f"blk.{i}" for i in range(24)] + ["output_norm · output"]
    # a row per layer, ~18 px each: the whole model fits a screen without a scrollbar
    assert fig.layout.height <= 140 + 18 * 26
    # one heatmap trace and no shapes: the figure does not grow with the node count
    assert len(fig.data) == 1 and not fig.layout.shapes
    # a selection adds a handful of outlines, not one shape per node
    sel = f.graph_figure(tr, 0, "time", selected=len(tr["nodes"]) // 2)
    assert len(sel.data) == 1 and len(sel.layout.shapes) <= 8


def test_graph_figure_bound_colouring_matches_the_classes(small_trace):
    lay = d.grid_layout(small_trace["nodes"])
    z = np.asarray(_heatmap(f.graph_figure(small_trace, 0, "bound")).z, dtype=float)
    for i, (r, c) in lay.cell.items():
        bound = small_trace["steps"][0]["nodes"][i]["perf"]["bound"]
        assert d.BOUND_CLASSES[int(z[r, c])] == bound
    seen = {int(v) for v in z[np.isfinite(z)]}
    assert seen == {0, 1, 2}  # the fixture's prefill has all three classes


def test_graph_figure_nonfinite_measure_marks_poisoned_nodes():
    tr = make_trace(nan_from="blk.1.attn")
    lay = d.grid_layout(tr["nodes"])
    z = np.asarray(_heatmap(f.graph_figure(tr, 1, "nonfinite")).z, dtype=float)
    first = next(n["id"] for n in tr["nodes"] if n["name"] == "blk.1.attn")
    for i, (r, c) in lay.cell.items():
        assert (z[r, c] > 0) == (i >= first)
    z0 = np.asarray(_heatmap(f.graph_figure(tr, 0, "nonfinite")).z, dtype=float)
    assert np.nansum(z0) == 0


def test_graph_figure_outlines_selection_inputs_and_consumers(small_trace):
    lay = d.grid_layout(small_trace["nodes"])
    sel = next(n["id"] for n in small_trace["nodes"] if n["name"] == "blk.0.ffn_mul")
    fig = f.graph_figure(small_trace, 0, "time", selected=sel)
    shapes = fig.layout.shapes

    def centre(s):
        return (round((s.y0 + s.y1) / 2), round((s.x0 + s.x1) / 2))

    ins = [s for s in shapes if s.line.color == f.INPUT_COLOUR]
    outs = [s for s in shapes if s.line.color == f.CONSUMER_COLOUR]
    assert sorted(map(centre, ins)) == sorted(lay.cell[i] for i in d.input_ids(small_trace, sel))
    assert sorted(map(centre, outs)) == sorted(
        lay.cell[i] for i in d.consumer_ids(small_trace, sel)
    )
    assert shapes[-1].name == str(sel) and centre(shapes[-1]) == lay.cell[sel]
    # each outline stays inside its cell
    assert all(s.x1 - s.x0 < 1 and s.y1 - s.y0 < 1 for s in shapes)
    # the shapes alone are what a node change patches
    assert [s.to_plotly_json() for s in shapes] == [
        go.layout.Shape(x).to_plotly_json() for x in f.selection_shapes(small_trace, lay, sel)
    ]
    assert f.selection_shapes(small_trace, lay, None) == []


def test_graph_figure_cells_map_back_to_nodes(small_trace):
    """A click reports (x, y) = (column, row); the cell map the browser uses names the node."""
    from tracekit.viz.app import _meta

    lay = d.grid_layout(small_trace["nodes"])
    cells = _meta(small_trace, lay)["cells"]
    hm = _heatmap(f.graph_figure(small_trace, 0, "time"))
    for i, (r, c) in lay.cell.items():
        assert cells[r][c] == i
        assert small_trace["nodes"][i]["name"] in hm.hovertext[r][c]
    assert sum(v >= 0 for row in cells for v in row) == len(small_trace["nodes"])


def test_graph_figure_timing_capture_has_no_absmax(small_trace):
    tr = make_trace(capture="timing")
    z = np.asarray(_heatmap(f.graph_figure(tr, 0, "absmax")).z, dtype=float)
    assert not np.isfinite(z).any()
    z = np.asarray(_heatmap(f.graph_figure(tr, 0, "time")).z, dtype=float)
    assert np.isfinite(z).sum() == len(tr["nodes"])


def test_graph_figure_escapes_node_names(small_trace):
    tr = make_trace(n_layer=1)
    tr["nodes"][0]["name"] = "<img src=x onerror=alert(1)>"
    fig = f.graph_figure(tr, 0, "time")
    text = " ".join(str(t) for row in _heatmap(fig).hovertext for t in row)
    text += " ".join(fig.layout.yaxis.ticktext)
    assert "<img" not in text and "&lt;img" in text


def test_figures_start_with_margins_that_fit_their_labels(small_trace):
    # plotly's automargin draws a figure twice when a margin has to grow: start wide enough
    assert f.text_px(["blk.1", "a &amp; b"]) == 7 * 5  # escaped text counts as shown
    lay = d.grid_layout(small_trace["nodes"])
    fig = f.graph_figure(small_trace, 0, "time", None, lay)
    longest = max(len(html.unescape(x)) for x in f.row_labels(small_trace, lay))
    assert fig.layout.margin.l >= 7 * longest and fig.layout.margin.r >= 140
    assert f.heatmap_figure(small_trace["steps"][0]["nodes"][1]["stats"]).layout.margin.r >= 100
    fams = d.families(small_trace)
    tl = f.timeline_figure(small_trace, 0)
    assert tl.layout.margin.l >= 7 * max(map(len, fams))
    assert tl.layout.margin.r >= 7 * max(map(len, fams)) + 60  # the legend


def test_log_ticks_are_1_2_5_within_the_range():
    assert f.log_ticks(0.0, 2.0) == [1, 2, 5, 10, 20, 50, 100]
    assert f.log_ticks(-1.0, 3.5) == [0.1, 1, 10, 100, 1000]  # wide: decades only
    assert len(f.log_ticks(1.01, 1.02)) == 2


def test_row_labels_shorten_long_rows():
    tr = make_trace(n_layer=1)
    lay = d.grid_layout(tr["nodes"])
    assert f.row_labels(tr, lay, width=8) == ["token_e…", "blk.0", "output_…"]


# -- node detail -----------------------------------------------------------------------------
def _hm_stats(codes: list[int], rows: int, cols: int, lo: float, hi: float) -> dict:
    raw = base64.b64encode(bytes(codes)).decode()
    hm = dict(
        rows=rows,
        cols=cols,
        axes=["tokens", "features"],
        source_shape=[rows, cols],
        lo=lo,
        hi=hi,
        codes=raw,
    )
    return dict(heatmap=hm, hist=None)


def test_heatmap_figure_decodes_codes_onto_lo_hi_and_255_as_nonfinite():
    stats = _hm_stats([0, 127, 254, 255, 0, 254], 2, 3, -2.0, 2.0)
    fig = f.heatmap_figure(stats)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z[0, 0] == -2.0 and z[0, 2] == 2.0 and z[1, 2] == 2.0
    assert z[0, 1] == pytest.approx(-2.0 + 127 * 4.0 / 254)
    assert np.isnan(z[1, 0])
    assert fig.layout.plot_bgcolor == f.NONFINITE_COLOUR
    assert "tokens" in fig.layout.yaxis.title.text and "features" in fig.layout.xaxis.title.text


def test_heatmap_figure_of_a_real_node_keeps_its_layout(small_trace):
    stats = small_trace["steps"][0]["nodes"][5]["stats"]
    z = np.asarray(f.heatmap_figure(stats).data[0].z, dtype=float)
    hm = stats["heatmap"]
    assert z.shape == (hm["rows"], hm["cols"])
    assert np.nanmin(z) == pytest.approx(hm["lo"]) and np.nanmax(z) == pytest.approx(hm["hi"])


def test_heatmap_figure_without_stats_says_why():
    fig = f.heatmap_figure(None)
    assert not fig.data and "timing capture" in fig.layout.annotations[0].text


def test_histogram_figure_bars_span_the_edges(small_trace):
    hist = small_trace["steps"][0]["nodes"][3]["stats"]["hist"]
    bar = f.histogram_figure(hist).data[0]
    e = np.asarray(hist["edges"])
    assert np.allclose(bar.x, (e[:-1] + e[1:]) / 2)
    assert np.allclose(bar.width, np.diff(e))
    assert list(bar.y) == hist["counts"]
    assert not f.histogram_figure(None).data


# -- timeline --------------------------------------------------------------------------------
def test_timeline_bars_are_back_to_back_in_execution_order(small_trace):
    fig = f.timeline_figure(small_trace, 0, selected=4)
    recs = small_trace["steps"][0]["nodes"]
    t = np.array([r["time_s"] for r in recs]) * 1e6
    start = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert [b.name for b in bars] == d.families(small_trace)
    ids = []
    for b in bars:
        for i, x, base in zip(b.customdata, b.x, b.base, strict=True):
            assert small_trace["nodes"][i]["family"] == b.name
            assert x == pytest.approx(t[i]) and base == pytest.approx(start[i])
            ids.append(i)
    assert sorted(ids) == list(range(len(recs)))
    marker = fig.data[-1]
    assert marker.x[0] == pytest.approx(start[4] + t[4] / 2)


# -- roofline --------------------------------------------------------------------------------
def test_roofline_roof_and_points(small_trace):
    c = small_trace["ceilings"]
    fig = f.roofline_figure(small_trace, 0, selected=None)
    roof = fig.data[0]
    ridge = c["peak_flops"] / c["copy_bandwidth_Bps"]
    assert roof.x[1] == pytest.approx(ridge) and roof.y[1] == pytest.approx(c["peak_flops"])
    assert roof.y[0] == pytest.approx(c["copy_bandwidth_Bps"] * roof.x[0])
    assert roof.y[2] == pytest.approx(c["peak_flops"])
    recs = small_trace["steps"][0]["nodes"]
    shown = []
    for tr in fig.data[1:]:
        bound = tr.name.removesuffix("-bound")
        for i, x, y in zip(tr.customdata, tr.x, tr.y, strict=True):
            p = recs[i]["perf"]
            assert p["bound"] == bound
            assert (x, y) == (p["intensity"], p["achieved_flops"])
            shown.append(i)
    assert shown and all(recs[i]["perf"]["flops"] > 0 for i in shown)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_roofline_marks_the_selected_node(small_trace):
    sel = next(n["id"] for n in small_trace["nodes"] if n["op"] == "matmul")
    fig = f.roofline_figure(small_trace, 0, selected=sel)
    assert fig.data[-1].name == small_trace["nodes"][sel]["name"]


# -- overview and tokens ---------------------------------------------------------------------
def test_family_time_figure_stacks_to_the_step_totals(small_trace):
    fig = f.family_time_figure(small_trace)
    assert fig.layout.barmode == "stack"
    total = np.sum([np.asarray(tr.y) for tr in fig.data], axis=0)
    want = [sum(r["time_s"] for r in s["nodes"]) * 1e3 for s in small_trace["steps"]]
    assert np.allclose(total, want)


def test_topk_figure_highlights_the_chosen_token(small_trace):
    fig = f.topk_figure(small_trace, 1)
    lg = small_trace["steps"][1]["logits"]
    bar = fig.data[0]
    assert list(bar.x) == [t["prob"] for t in lg["top_k"]]
    k = [t["id"] for t in lg["top_k"]].index(lg["chosen"]["id"])
    assert bar.marker.color[k] != bar.marker.color[(k + 1) % len(lg["top_k"])]


def test_topk_figure_escapes_token_text(small_trace):
    tr = make_trace(n_layer=1)
    tr["steps"][0]["logits"]["top_k"][0]["text"] = "<b>x</b>"
    labels = " ".join(f.topk_figure(tr, 0).data[0].y)
    assert "<b>" not in labels


def test_entropy_figure_marks_the_step(small_trace):
    fig = f.entropy_figure(small_trace, 2)
    assert list(fig.data[0].y) == d.entropies(small_trace)
    assert fig.data[1].x[0] == "decode 2"


# -- compare ---------------------------------------------------------------------------------
def test_compare_figure_flags_divergence_from_the_scaled_node_on():
    a = make_trace(seed=3)
    b = make_trace(seed=3, scale={"blk.1.attn_q": 1.5})
    deltas = d.compare_step(a, b, 1)
    fig = f.compare_figure(deltas)
    colours = fig.data[0].marker.color
    k = [x.name for x in deltas].index("blk.1.attn_q")
    assert all(c == "#4c72b0" for c in colours[:k])
    assert all(c == "#d62728" for c in colours[k:])
    vlines = [s for s in fig.layout.shapes if s.x0 == s.x1 and s.x0 == k]
    assert vlines


def test_compare_figure_identical_traces_all_within_tolerance():
    a, b = make_trace(seed=4), make_trace(seed=4)
    deltas = d.compare_step(a, b, 0)
    fig = f.compare_figure(deltas)
    assert np.allclose(fig.data[1].y, 1.0)
    # bit-identical nodes: a trace of their own, hovered as such, never as the floor value
    assert all(x.rel_diff == 0 for x in deltas)
    assert all(y is None for y in fig.data[0].y)
    same = fig.data[2]
    assert len(same.x) == len(deltas) and "bit-identical" in same.hovertemplate
    assert "%{y" not in same.hovertemplate


def test_nonfinite_colour_scale_has_both_ends() -> None:
    # a healthy trace (no NaN/Inf anywhere) is painted at the scale's bottom, not mid-red
    _, spec = f._colour_spec("nonfinite", np.zeros(5))
    assert spec["zmin"] == 0 and spec["zmax"] == 1
    _, spec = f._colour_spec("nonfinite", np.array([0.0, 7.0, np.nan]))
    assert spec["zmax"] == 7


def test_roofline_ticks_are_rates(small_trace) -> None:
    fig = f.roofline_figure(small_trace, 0)
    text = list(fig.layout.yaxis.ticktext)
    assert text and all(t.endswith("flop/s") for t in text)
    assert any(t.startswith("10 ") or t.startswith("100 ") or t.startswith("1 ") for t in text)
    vals = list(fig.layout.yaxis.tickvals)
    assert all(np.log10(v) == round(np.log10(v)) for v in vals)


def test_shared_range_spans_both_heatmaps(small_trace):
    s1 = small_trace["steps"][0]["nodes"][1]["stats"]
    s2 = small_trace["steps"][0]["nodes"][2]["stats"]
    lo, hi = f.shared_range(s1, s2)
    assert lo == min(s1["heatmap"]["lo"], s2["heatmap"]["lo"])
    assert hi == max(s1["heatmap"]["hi"], s2["heatmap"]["hi"])
    assert f.shared_range(None, None) is None


# -- what the browser's plotly.js can draw ---------------------------------------------------
#: Trace types of plotly.js's cartesian partial bundle (tracekit/viz/assets), the only ones
#: the page can draw: no scattergl, no 3-D, maps or tables.
CARTESIAN_TYPES = {
    "bar",
    "box",
    "contour",
    "heatmap",
    "histogram",
    "histogram2d",
    "histogram2dcontour",
    "image",
    "pie",
    "scatter",
    "scatterternary",
    "violin",
}


def test_every_figure_uses_only_trace_types_of_the_cartesian_bundle(small_trace):
    t = small_trace
    stats = t["steps"][0]["nodes"][1]["stats"]
    b = make_trace(seed=3, scale={"blk.1.attn_q": 1.5})
    figs = [f.graph_figure(t, 0, m, 1) for m in d.MEASURES] + [
        f.heatmap_figure(stats),
        f.histogram_figure(stats["hist"]),
        f.timeline_figure(t, 1, 1),
        f.roofline_figure(t, 1, 1),
        f.family_time_figure(t),
        f.topk_figure(t, 1),
        f.entropy_figure(t, 1),
        f.logit_hist_figure(t, 1),
        f.compare_figure(d.compare_step(t, b, 1), selected=1),
        f.empty_figure("nothing"),
    ]
    types = {tr.type for fig in figs for tr in fig.data}
    assert types and types <= CARTESIAN_TYPES, types - CARTESIAN_TYPES
    # the bundle the page loads says it is the cartesian one
    from tracekit.viz.app import ASSETS

    (bundle,) = ASSETS.glob("plotly-cartesian-*.min.js")
    assert "plotly.js (cartesian - minified)" in bundle.read_text()[:200]

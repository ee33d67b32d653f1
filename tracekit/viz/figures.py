"""Pure figure builders: trace data in, ``plotly.graph_objects.Figure`` out (no Dash here).

Figures stay light so a step or node change re-renders in a few tens of ms: the graph view is
one heatmap (one cell per node) plus a handful of outline shapes for the selection, never one
shape per node; the timeline is one bar trace per kernel family; the roofline one scatter trace
per bound class. Selectable points carry the node id in ``customdata`` (heatmap cells map back
through their (row, col) with :class:`tracekit.viz.data.GridLayout`).

Each figure is built from one ``{data, layout}`` spec in a single ``go.Figure`` call: every
``update_layout``/``update_xaxes`` on a built figure re-validates it (~10 ms each), which at
five calls per figure was most of a node change's server time.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from tracekit.viz import data as d

Trace = Mapping[str, Any]

#: One colour per bound class (launch = amber, bandwidth = blue, compute = green).
BOUND_COLOURS = {"launch": "#e69f00", "bandwidth": "#0072b2", "compute": "#009e73"}
#: One colour per matmul path (tracekit.kernels.matmul.PATHS: quant, f16-per-call, f16-cached,
#: f32); nodes that name no path stay grey (empty cells).
PATH_COLOURS = ("#d55e00", "#cc79a7", "#56b4e9", "#999933")
#: Colour-blind-safe qualitative palette for kernel families (Okabe-Ito, then extras).
FAMILY_PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#000000",
    "#999999",
    "#882255",
)
INPUT_COLOUR = "#00b8ff"  # outlines in the graph view: bright enough on dark and light cells
CONSUMER_COLOUR = "#ff2a2a"
NONFINITE_COLOUR = "#ff00ff"  # heatmap cells whose block held a NaN/Inf (shows as the bg)
_MARGIN = dict(l=50, r=20, t=40, b=40)
# ticklabeloverflow "allow": plotly's default for linear axes ("hide past div") measures every
# tick label against the div once per label drawn (quadratic in the labels, a forced layout
# each); with automargin nothing overflows, and the graph view redraws in half the time.
_ALLOW = dict(ticklabeloverflow="allow")
_AXIS = dict(
    gridcolor="#ebebeb", zeroline=False, linecolor="#cccccc", ticks="", automargin=True, **_ALLOW
)
# A small template built once: naming plotly's "plotly_white" makes plotly deep-copy and
# validate the whole template on every figure (~15 ms each, most of a node change's budget).
_TEMPLATE = go.layout.Template(
    data=dict(heatmap=[dict(colorbar=_ALLOW)]),
    layout=dict(
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
        font=dict(family="system-ui, sans-serif", size=12, color="#2a3f5f"),
        xaxis=_AXIS,
        yaxis=_AXIS,
        hoverlabel=dict(align="left"),
    ),
)


def plain(text: Any) -> str:
    """Text from a trace as Plotly shows it: as text. Plotly renders a subset of HTML (links,
    bold, line breaks) in every title, tick, legend and hover label it draws, so a node name
    ``<a href=...>`` would be a live link; every trace string goes through here first."""
    return html.escape(str(text))


def text_px(texts: Iterable[str]) -> int:
    """A generous width in px of the longest of ``texts`` in the 12 px font (7 px a character).

    Figures start with margins that fit their tick labels, colour bars and legends: plotly's
    automargin only ever widens a margin, and when it does it draws the whole figure again (on
    the first draw, and on every update whose margins start narrower than they end). It stays
    on, as the safety net for a label wider than estimated.
    """
    return 7 * max((len(html.unescape(t)) for t in texts), default=0)


def _rotated_ticks(labels: Sequence[str], width_px: int) -> bool:
    """Whether plotly will turn the category labels of an x axis ``width_px`` wide (they do
    not fit side by side): the bottom margin then has to hold them slanted."""
    return len(labels) * (text_px(labels) + 10) > width_px


def _figure(
    data: Sequence[Any], layout: dict[str, Any], title: str, height: int | None = None
) -> go.Figure:
    """The figure of ``data`` (trace dicts or objects) under the house layout + ``layout``."""
    base: dict[str, Any] = dict(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14)),
        template=_TEMPLATE,
        margin=_MARGIN,
        height=height,
        # Keep the user's zoom/pan across updates of the same view.
        uirevision="keep",
    )
    for k, v in layout.items():
        base[k] = dict(base[k], **v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return go.Figure(dict(data=list(data), layout=base))


def empty_figure(message: str, height: int | None = 200) -> go.Figure:
    """A blank figure that says why there is nothing to show."""
    note = dict(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    hidden = dict(visible=False)
    return _figure([], dict(annotations=[note], xaxis=hidden, yaxis=hidden), "", height)


def family_colours(trace: Trace) -> dict[str, str]:
    return {f: FAMILY_PALETTE[i % len(FAMILY_PALETTE)] for i, f in enumerate(d.families(trace))}


# -- graph view ------------------------------------------------------------------------------
def _colour_spec(
    measure: str, values: np.ndarray, label: str | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """z values and heatmap colour arguments for ``measure`` (log scale for times, absmax);
    ``label``: the colour bar's title (default the measure's)."""
    if measure == "bound":
        c = [BOUND_COLOURS[b] for b in d.BOUND_CLASSES]
        scale = [[0, c[0]], [1 / 3, c[0]], [1 / 3, c[1]], [2 / 3, c[1]], [2 / 3, c[2]], [1, c[2]]]
        bar = dict(tickvals=[0, 1, 2], ticktext=list(d.BOUND_CLASSES), title="bound")
        return values, dict(colorscale=scale, zmin=-0.5, zmax=2.5, colorbar=bar)
    if measure == "path":
        from tracekit.kernels.matmul import PATHS

        assert len(PATH_COLOURS) == len(PATHS), "one colour per matmul path"
        n = len(PATHS)
        scale = [[(k + e) / n, c] for k, c in enumerate(PATH_COLOURS) for e in (0, 1)]
        bar = dict(tickvals=list(range(n)), ticktext=list(PATHS), title="matmul path")
        return values, dict(colorscale=scale, zmin=-0.5, zmax=n - 0.5, colorbar=bar)
    if measure in ("time", "absmax"):
        # Node times and magnitudes span decades: colour by log10, label the bar in real units.
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)
        finite = z[np.isfinite(z)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        ticks = log_ticks(lo, hi)
        bar = dict(
            tickvals=[math.log10(t) for t in ticks],
            ticktext=[f"{t:g}" for t in ticks],
            title=label or d.MEASURES[measure],
        )
        return z, dict(colorscale="Viridis", colorbar=bar)
    if measure == "nonfinite":
        bar = dict(title="NaN/Inf")
        # both ends fixed: with zmin alone a healthy trace (all 0) was painted mid-red
        finite = values[np.isfinite(values)]
        top = max(1.0, float(finite.max())) if finite.size else 1.0
        return values, dict(colorscale="Reds", zmin=0, zmax=top, colorbar=bar)
    return values, dict(colorscale="Viridis", zmin=0, zmax=100, colorbar=dict(title="% of ceiling"))


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values between 10**lo and 10**hi: 1-2-5 per decade over up to two decades, powers
    of ten beyond (a short colour bar stays legible), at least the two ends."""
    mantissas = (1, 2, 5) if hi - lo <= 2 else (1,)
    ticks = [
        m * 10.0**k
        for k in range(math.floor(lo), math.ceil(hi) + 1)
        for m in mantissas
        if lo - 1e-9 <= math.log10(m * 10.0**k) <= hi + 1e-9
    ]
    if len(ticks) < 2:
        ticks = sorted({float(f"{10.0**lo:.3g}"), float(f"{10.0**hi:.3g}")})
    return ticks


def selection_shapes(
    trace: Trace, layout: d.GridLayout, selected: int | None
) -> list[dict[str, Any]]:
    """Outlines for the graph view: the selected node (black), its inputs (cyan, dashed) and
    its consumers (red, dotted). Layout shapes, so a node change redraws only these few
    outlines (Plotly treats a shape edit as a redraw of the shapes, not a recalc of the data).
    """
    if selected is None or selected not in layout.cell:
        return []

    def box(i: int, colour: str, width: int, dash: str) -> dict[str, Any]:
        r, c = layout.cell[i]
        pad = 0.5 - 0.06 * width  # keep the outline inside its own cell
        return dict(
            type="rect",
            x0=c - pad,
            x1=c + pad,
            y0=r - pad,
            y1=r + pad,
            line=dict(color=colour, width=width, dash=dash),
            name=str(i),
        )

    out = [box(i, INPUT_COLOUR, 2, "dash") for i in dict.fromkeys(d.input_ids(trace, selected))]
    out += [box(i, CONSUMER_COLOUR, 2, "dot") for i in d.consumer_ids(trace, selected)]
    out.append(box(selected, "#000000", 3, "solid"))
    return out


def row_labels(trace: Trace, layout: d.GridLayout, width: int = 22) -> list[str]:
    """Y labels of the graph view: ``blk.N`` for a layer; for the input/output rows the names
    of their nodes (they have no column kind), shortened to ``width`` characters."""
    out = []
    for r, row in enumerate(layout.rows):
        if row.startswith("blk."):
            out.append(row)
            continue
        names = [trace["nodes"][i]["name"] for (rr, _), i in sorted(layout.at.items()) if rr == r]
        text = " · ".join(names)
        out.append(html.escape(text if len(text) <= width else text[: width - 1] + "…"))
    return out


def graph_figure(
    trace: Trace,
    j: int,
    measure: str = "time",
    selected: int | None = None,
    layout: d.GridLayout | None = None,
) -> go.Figure:
    """Every node of step ``j`` as one heatmap cell: a row per layer, a column per node kind.

    Args:
        trace: the trace dict; j: step position; measure: a :data:`tracekit.viz.data.MEASURES`
            key; selected: node id to outline, with its inputs and consumers
            (:func:`selection_shapes`); layout: a precomputed
            :func:`tracekit.viz.data.grid_layout`.

    Returns:
        The figure: one heatmap trace whose ``customdata`` holds each cell's node id (-1 for an
        empty cell), so a click names its node directly.
    """
    nodes = trace["nodes"]
    lay = layout or d.grid_layout(nodes)
    values = d.measure_values(trace, j, measure)
    recs = trace["steps"][j]["nodes"]
    nr, nc = len(lay.rows), len(lay.cols)
    z = np.full((nr, nc), np.nan)
    ids = np.full((nr, nc), -1, dtype=np.int32)
    hover = np.full((nr, nc), "", dtype=object)
    zvals, colour = _colour_spec(measure, values, d.measure_label(trace, measure))
    labels = row_labels(trace, lay)
    for i, (r, c) in lay.cell.items():
        z[r, c] = zvals[i]
        ids[r, c] = i
        n, rec = nodes[i], recs[i]
        bound = rec["perf"]["bound"] or "—"
        nf = d.nonfinite(rec["stats"])
        path = d.node_path(rec)
        hover[r, c] = (
            f"<b>{plain(n['name'])}</b><br>{plain(n['op'])} · {plain(n['family'])}"
            + ("" if path is None else f" · path {plain(path)}")
            + f"<br>{d.fmt_time(rec['time_s'])} · {bound}-bound · "
            f"{d.fmt_efficiency(rec['perf'])} of ceiling"
            + (
                ""
                if nf is None
                else f"<br>absmax {d.fmt_num(rec['stats']['absmax'])}, NaN/Inf {nf}"
            )
        )
    heat = dict(
        type="heatmap",
        z=z,
        x=list(range(nc)),
        y=list(range(nr)),
        hovertext=hover,
        hoverinfo="text",
        hoverongaps=False,
        **colour,
    )
    # Cell borders: minor grid lines on the cell edges, drawn above the heatmap.
    edges = dict(showgrid=True, gridcolor="#ffffff", gridwidth=1)
    layout = dict(
        xaxis=dict(
            tickvals=list(range(nc)),
            ticktext=[plain(c) for c in lay.cols],
            tickangle=-45,
            side="top",
            showgrid=False,
            zeroline=False,
            range=[-0.5, nc - 0.5],
            minor=dict(tickvals=[c + 0.5 for c in range(nc - 1)], **edges),
            layer="above traces",
        ),
        yaxis=dict(
            tickvals=list(range(nr)),
            ticktext=labels,
            autorange="reversed",
            showgrid=False,
            zeroline=False,
            minor=dict(tickvals=[r + 0.5 for r in range(nr - 1)], **edges),
            layer="above traces",
        ),
        plot_bgcolor="#f4f4f4",
        showlegend=False,
        clickmode="event",
        shapes=selection_shapes(trace, lay, selected),
        # left: the row labels; right: the colour bar with its title (the widest, GPU time,
        # for every measure, so the cells stay put when the measure changes)
        margin=dict(l=14 + text_px(labels), r=145, t=130, b=20),
        title=dict(y=0.995, yanchor="top"),
    )
    title = f"{trace['steps'][j]['name']} · coloured by {d.measure_label(trace, measure)}"
    # 18-36 px per row: a 30-layer model stays legible without scrolling past the fold, and
    # a small one does not shrink to a strip.
    row_px = min(36, max(18, 480 // nr))
    return _figure([heat], layout, title, height=140 + row_px * nr)


# -- node detail -----------------------------------------------------------------------------
def heatmap_figure(
    stats: Mapping[str, Any] | None,
    title: str = "values",
    zrange: tuple[float, float] | None = None,
) -> go.Figure:
    """A node's downsampled value heatmap, in the tensor's layout (rows = its first axis).

    Cells whose source block held a NaN/Inf are left empty over a magenta background.
    """
    grid = d.heatmap_grid(stats)
    if grid is None:
        why = "no statistics (timing capture)" if stats is None else "empty tensor"
        return empty_figure(f"no heatmap: {why}")
    hm = stats["heatmap"]  # type: ignore[index]
    axes = list(hm["axes"]) + ["", ""]
    src = "×".join(map(str, hm["source_shape"]))
    heat: dict[str, Any] = dict(
        type="heatmap",
        z=grid,
        colorscale="RdBu_r",
        hoverongaps=True,
        hovertemplate="row %{y}, col %{x}: %{z:.4g}<extra></extra>",
    )
    if zrange is not None:
        heat.update(zmin=zrange[0], zmax=zrange[1])
    else:
        heat.update(zmid=0.0)
    layout = dict(
        yaxis=dict(
            autorange="reversed",
            title=dict(text=f"{axes[0]} ({hm['rows']} cells)"),
            dtick=max(1, hm["rows"] // 4),  # integer rows, even for a one-row decode tensor
        ),
        xaxis=dict(title=dict(text=f"{axes[1]} ({hm['cols']} cells)")),
        plot_bgcolor=NONFINITE_COLOUR if np.isnan(grid).any() else "#ffffff",
        margin=dict(r=110, b=45),  # the colour bar; the x title under the tick labels
    )
    return _figure([heat], layout, f"{title} · block means of {src}", height=260)


def histogram_figure(hist: Mapping[str, Any] | None, title: str = "histogram") -> go.Figure:
    """Bars of a histogram given by ``edges`` (bins + 1) and ``counts``."""
    if not hist or not hist["counts"]:
        return empty_figure("no histogram (no finite values, or a timing capture)")
    e = np.asarray(hist["edges"], dtype=np.float64)
    bar = dict(
        type="bar",
        x=(e[:-1] + e[1:]) / 2,
        y=hist["counts"],
        width=np.diff(e),
        marker_color="#4c72b0",
        hovertemplate="%{x:.4g}: %{y}<extra></extra>",
    )
    layout = dict(yaxis=dict(title=dict(text="count")), margin=dict(l=60))
    return _figure([bar], layout, title, height=220)


# -- timeline --------------------------------------------------------------------------------
def timeline_figure(trace: Trace, j: int, selected: int | None = None) -> go.Figure:
    """Gantt chart of step ``j``, one lane per family, plus a lane of host waits.

    v2 traces place each node at its recorded device interval (``start_ns``/``end_ns``), so a
    gap is a gap, and the device's waits for the host are bars of their own lane; v1 traces
    hold no intervals: their nodes are laid back to back by node time (gaps not in the trace).
    """
    nodes, recs = trace["nodes"], trace["steps"][j]["nodes"]
    timed = all("start_ns" in r for r in recs)
    if timed:
        start = np.array([r["start_ns"] for r in recs], dtype=float) * 1e-3  # µs
        t = np.array([r["end_ns"] for r in recs], dtype=float) * 1e-3 - start
    else:
        t = np.array([r["time_s"] for r in recs]) * 1e6  # µs
        start = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    colours = family_colours(trace)
    data: list[dict[str, Any]] = []
    waits = [i for i, r in enumerate(recs) if timed and (r.get("host_wait_s") or 0) > 0]
    if waits:
        w = np.array([recs[i]["host_wait_s"] for i in waits]) * 1e6
        data.append(
            dict(
                type="bar",
                x=w,
                base=start[waits] - w,
                y=["host wait"] * len(waits),
                orientation="h",
                name="host wait",
                marker=dict(color="#bbbbbb", line=dict(width=0)),
                customdata=waits,
                hovertext=[
                    f"device idle {d.fmt_time(recs[i]['host_wait_s'])} before "
                    f"{html.escape(nodes[i]['name'])}"
                    for i in waits
                ],
                hoverinfo="text",
            )
        )
    for fam in d.families(trace):
        ids = [i for i, n in enumerate(nodes) if n["family"] == fam]
        data.append(
            dict(
                type="bar",
                x=t[ids],
                base=start[ids],
                y=[plain(fam)] * len(ids),
                orientation="h",
                name=plain(fam),
                marker=dict(color=colours[fam], line=dict(width=0)),
                customdata=ids,
                hovertext=[
                    f"{html.escape(nodes[i]['name'])}: {d.fmt_time(recs[i]['time_s'])}" for i in ids
                ],
                hoverinfo="text",
            )
        )
    if selected is not None:
        data.append(
            dict(
                type="scatter",
                x=[start[selected] + t[selected] / 2],
                y=[plain(nodes[selected]["family"])],
                mode="markers",
                marker=dict(symbol="triangle-down", size=14, color="#000000"),
                name=html.escape(nodes[selected]["name"]),
                hoverinfo="skip",
            )
        )
    fams = d.families(trace)
    if timed:
        axis = (
            "µs from the step's device start · a bar: a node's first launch's start to its "
            "last launch's end"
        )
    elif trace["steps"][j]["kind"] == "load":
        axis = "µs, nodes back to back (timed one by one at load: no device intervals)"
    else:
        axis = "µs, nodes back to back (v1 trace)"
    layout = dict(
        barmode="overlay",
        bargap=0.3,
        clickmode="event",
        xaxis=dict(title=dict(text=axis)),
        yaxis=dict(autorange="reversed"),
        # left: a lane per family; right: the legend of families; top: a two-line title
        margin=dict(l=14 + text_px(fams), r=75 + text_px(fams), t=64, b=45),
    )
    return _figure(data, layout, timeline_title(trace, j), 380)


def timeline_title(trace: Trace, j: int) -> str:
    """What the timeline's bars sum and how the step's device span divides
    (:func:`tracekit.viz.data.step_times`), in words that keep the two apart: the bars run from
    a node's first launch's start to its last launch's end (the x axis says so), so they hold
    the gaps between a node's own launches, which kernel time (launches summed, the step
    line's) does not."""
    tt, name, dev = d.step_times(trace, j), trace["steps"][j]["name"], d.device_word(trace)
    kern = f"kernel time {d.fmt_time(tt['kernel_s'])}"
    if tt["inside_s"] is None:
        how = "timed one by one at load" if trace["steps"][j]["kind"] == "load" else "v1 trace"
        title = f"{name} · node bars end to end ({how}): {kern} ({dev})"
    elif tt["inside_s"] < 1e-9:  # whole ns on the clock: nothing between a node's launches
        bars = d.fmt_time(tt["bars_s"])
        title = f"{name} · node bars sum to {bars}, the {kern}: no gaps inside nodes"
    else:
        title = (
            f"{name} · node bars sum to {d.fmt_time(tt['bars_s'])} = {kern} + "
            f"{d.fmt_time(tt['inside_s'])} between a node's own launches"
        )
    if tt["span_s"] is not None:
        title += (
            f"<br>{dev} span {d.fmt_time(tt['span_s'])} = {kern} + host wait "
            f"{d.fmt_time(tt['host_wait_s'])} + other gaps {d.fmt_time(tt['other_gap_s'])}"
            + (" (gaps inside nodes included)" if (tt["inside_s"] or 0) >= 1e-9 else "")
        )
    return title


# -- roofline --------------------------------------------------------------------------------
def roofline_figure(trace: Trace, j: int, selected: int | None = None) -> go.Figure:
    """Each node of step ``j`` at (intensity, achieved flop/s), log-log, under the measured
    roofs: bandwidth (the fastest measured stream) × intensity up to the ridge, peak flop/s
    beyond it.

    Nodes without flops (pure data movement) have no place on a flop/s axis and are counted in
    the title instead.
    """
    c = trace["ceilings"]
    bw, peak = d.bandwidth_ceiling(c)[0], float(c["peak_flops"])
    ridge = peak / bw
    nodes, recs = trace["nodes"], trace["steps"][j]["nodes"]
    pts = [
        i
        for i, r in enumerate(recs)
        if r["perf"]["intensity"] and r["perf"]["achieved_flops"] and r["perf"]["flops"] > 0
    ]
    xs = [recs[i]["perf"]["intensity"] for i in pts] or [ridge]
    lo, hi = min(min(xs), ridge) / 4, max(max(xs), ridge) * 4
    data: list[dict[str, Any]] = [
        dict(
            type="scatter",
            x=[lo, ridge, hi],
            y=[bw * lo, peak, peak],
            mode="lines",
            line=dict(color="#555555", width=2),
            name=f"roof: {d.fmt_rate(bw, 'B/s')}, {d.fmt_rate(peak, 'flop/s')}",
            hoverinfo="skip",
        )
    ]
    for bound in (*d.BOUND_CLASSES, None):
        ids = [i for i in pts if recs[i]["perf"]["bound"] == bound]
        if not ids:
            continue
        data.append(
            dict(
                type="scatter",
                x=[recs[i]["perf"]["intensity"] for i in ids],
                y=[recs[i]["perf"]["achieved_flops"] for i in ids],
                mode="markers",
                name=f"{bound}-bound" if bound else "unclassified",
                marker=dict(color=BOUND_COLOURS.get(bound or "", "#999999"), size=7, opacity=0.8),
                customdata=ids,
                hovertext=[
                    f"{html.escape(nodes[i]['name'])}<br>{recs[i]['perf']['intensity']:.3g} "
                    f"flop/B, {d.fmt_rate(recs[i]['perf']['achieved_flops'], 'flop/s')}"
                    for i in ids
                ],
                hoverinfo="text",
            )
        )
    if selected is not None and selected in pts:
        p = recs[selected]["perf"]
        data.append(
            dict(
                type="scatter",
                x=[p["intensity"]],
                y=[p["achieved_flops"]],
                mode="markers",
                marker=dict(symbol="circle-open", size=18, color="#000000", line=dict(width=2)),
                name=html.escape(nodes[selected]["name"]),
                hoverinfo="skip",
            )
        )
    ys = [peak, bw * lo] + [recs[i]["perf"]["achieved_flops"] for i in pts]
    decades = range(math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys))) + 1)
    layout = dict(
        xaxis=dict(type="log", title=dict(text="arithmetic intensity (flop/byte)")),
        yaxis=dict(
            type="log",
            title=dict(text="achieved flop/s"),
            # plotly's own labels read "10B"; a rate reads "10 Gflop/s"
            tickvals=[10.0**k for k in decades],
            ticktext=[d.fmt_rate(10.0**k, "flop/s") for k in decades],
        ),
        clickmode="event",
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=60, b=100),  # the legend under the x axis
    )
    skipped = len(recs) - len(pts)
    note = f" · {skipped} nodes without flops not shown" if skipped else ""
    title = f"{trace['steps'][j]['name']} · roofline (ridge {ridge:.3g} flop/B){note}"
    return _figure(data, layout, title, 420)


# -- overview --------------------------------------------------------------------------------
def family_time_figure(trace: Trace) -> go.Figure:
    """Node time per step, stacked by kernel family (ms)."""
    colours = family_colours(trace)
    names = [s["name"] for s in trace["steps"]]
    data = [
        dict(
            type="bar",
            x=names,
            y=[t * 1e3 for t in times],
            name=plain(fam),
            marker_color=colours[fam],
            hovertemplate=f"{plain(fam)}: %{{y:.4g}} ms<extra>%{{x}}</extra>",
        )
        for fam, times in d.family_times(trace).items()
    ]
    fams = d.families(trace)
    layout = dict(
        barmode="stack",
        yaxis=dict(title=dict(text="node time (ms)")),
        # right: the legend of families; bottom: the step names, slanted when they crowd
        margin=dict(l=60, r=75 + text_px(fams), b=85 if _rotated_ticks(names, 650) else 45),
    )
    return _figure(data, layout, "time per step and kernel family", height=320)


# -- tokens ----------------------------------------------------------------------------------
def _token_label(text: str) -> str:
    return html.escape(repr(text))


def topk_figure(trace: Trace, j: int) -> go.Figure:
    """The step's top-k tokens with probabilities; the chosen one highlighted."""
    lg = trace["steps"][j]["logits"]
    top = lg["top_k"]
    if not top:
        return empty_figure("no top-k tokens recorded")
    chosen = lg["chosen"]["id"]
    labels = [f"{_token_label(t['text'])} ({t['id']})" for t in top]
    bar = dict(
        type="bar",
        x=[t["prob"] for t in top],
        y=labels,
        orientation="h",
        marker_color=["#d55e00" if t["id"] == chosen else "#4c72b0" for t in top],
        hovertemplate="%{y}: p=%{x:.4f}<extra></extra>",
    )
    layout = dict(
        yaxis=dict(autorange="reversed"),
        xaxis=dict(title=dict(text="probability"), range=[0, 1]),
        # the title is long and the panel narrow: Plotly's toolbar (top right) covered it
        modebar=dict(orientation="v"),
        margin=dict(l=14 + text_px(labels), r=40, b=45),
    )
    title = (
        f"{trace['steps'][j]['name']} · top-{len(top)} "
        f"(chosen {_token_label(lg['chosen']['text'])})"
    )
    return _figure([bar], layout, title, height=max(220, 60 + 22 * len(top)))


def entropy_figure(trace: Trace, j: int | None = None) -> go.Figure:
    """Entropy of the next-token distribution over the steps (nats); step ``j`` marked."""
    names = [s["name"] for s in trace["steps"]]
    ent = d.entropies(trace)
    data: list[dict[str, Any]] = [
        dict(type="scatter", x=names, y=ent, mode="lines+markers", name="entropy")
    ]
    if j is not None:
        data.append(
            dict(
                type="scatter",
                x=[names[j]],
                y=[ent[j]],
                mode="markers",
                marker=dict(size=14, color="#d55e00"),
                name=names[j],
            )
        )
    layout = dict(
        yaxis=dict(title=dict(text="entropy (nats)"), rangemode="tozero"),
        showlegend=False,
        margin=dict(b=85 if _rotated_ticks(names, 350) else 45),
    )
    return _figure(data, layout, "entropy over steps", height=260)


def logit_hist_figure(trace: Trace, j: int) -> go.Figure:
    return histogram_figure(trace["steps"][j]["logits"]["hist"], "logit histogram")


# -- compare ---------------------------------------------------------------------------------
def compare_figure(
    deltas: Sequence[d.NodeDelta],
    rtol: float = d.RTOL,
    atol: float = d.ATOL,
    selected: int | None = None,
) -> go.Figure:
    """Per node (A's execution order): relative statistic difference (log) and time ratio B/A.

    Nodes beyond the tolerance (``atol + rtol × absmax``, or a different NaN/Inf count) are
    red, the first one marked by a vertical line; the dashed line is ``rtol``. Two stacked
    panels on one shared x axis (A's node order).
    """
    if not deltas:
        return empty_figure("no nodes in common at this step")
    x = list(range(len(deltas)))
    names = [html.escape(x_.name) for x_ in deltas]
    ids = [x_.id_a for x_ in deltas]
    floor = rtol * 1e-4  # where exact agreement is drawn on the log axis, under the tolerance
    same = [x_.rel_diff == 0 for x_ in deltas]
    rel = [
        None if x_.rel_diff is None or z else max(x_.rel_diff, floor)
        for x_, z in zip(deltas, same, strict=True)
    ]
    bad = [x_.diverges(rtol, atol) for x_ in deltas]
    data = [
        dict(
            type="scatter",
            x=x,
            y=rel,
            mode="markers",
            marker=dict(color=["#d62728" if b else "#4c72b0" for b in bad], size=6),
            customdata=ids,
            hovertext=names,
            hovertemplate="%{hovertext}: %{y:.3g}<extra></extra>",
            name="rel diff",
        ),
        dict(
            type="scatter",
            x=x,
            y=[x_.time_ratio for x_ in deltas],
            mode="markers",
            marker=dict(color="#555555", size=5),
            customdata=ids,
            hovertext=names,
            hovertemplate="%{hovertext}: %{y:.3g}×<extra></extra>",
            name="time ratio",
            xaxis="x",
            yaxis="y2",
        ),
        dict(
            type="scatter",
            x=[k for k, z in zip(x, same, strict=True) if z],
            y=[floor for z in same if z],
            mode="markers",
            marker=dict(color="#2ca02c", size=7, symbol="line-ew-open", line=dict(width=2)),
            customdata=[i for i, z in zip(ids, same, strict=True) if z],
            hovertext=[n for n, z in zip(names, same, strict=True) if z],
            hovertemplate="%{hovertext}: bit-identical<extra></extra>",
            name="bit-identical (0, drawn at the axis floor)",
        ),
    ]

    def vline(k: int, colour: str, dash: str) -> dict[str, Any]:
        return dict(
            type="line",
            x0=k,
            x1=k,
            y0=0,
            y1=1,
            xref="x",
            yref="paper",
            line=dict(color=colour, width=1, dash=dash),
        )

    shapes = [
        dict(
            type="line",
            x0=0,
            x1=1,
            y0=rtol,
            y1=rtol,
            xref="paper",
            yref="y",
            line=dict(color="#d62728", dash="dash", width=1),
        )
    ]
    first = d.first_divergence(deltas, rtol, atol)
    if first is not None:
        shapes.append(vline(deltas.index(first), "#d62728", "solid"))
    if selected is not None and selected in ids:
        shapes.append(vline(ids.index(selected), "#000000", "dot"))
    layout = dict(
        xaxis=dict(title=dict(text="node (execution order)"), anchor="y2"),
        yaxis=dict(type="log", domain=[0.54, 1.0], title=dict(text="|B − A| ÷ absmax")),
        yaxis2=dict(type="log", domain=[0.0, 0.46], title=dict(text="time B ÷ A")),
        shapes=shapes,
        showlegend=False,
        clickmode="event",
    )
    return _figure(data, layout, f"per-node deltas (tolerance {atol:g} + {rtol:g} × absmax)", 420)


def shared_range(*stats: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """One colour range over several heatmaps, so side-by-side panels compare by colour."""
    los = [
        s["heatmap"]["lo"]
        for s in stats
        if s and s.get("heatmap") and s["heatmap"]["lo"] is not None
    ]
    his = [
        s["heatmap"]["hi"]
        for s in stats
        if s and s.get("heatmap") and s["heatmap"]["hi"] is not None
    ]
    if not los:
        return None
    return min(los), max(his)

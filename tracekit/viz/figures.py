"""Pure figure builders: trace data in, ``plotly.graph_objects.Figure`` out (no Dash here).

Figures stay light so a step or node change re-renders in a few tens of ms: the graph view is
one heatmap (one cell per node) plus a handful of marker points, never one shape per node; the
timeline is one bar trace per kernel family; the roofline one scatter trace per bound class.
Selectable points carry the node id in ``customdata`` (heatmap cells are mapped back through
their (row, col) with :class:`tracekit.viz.data.GridLayout`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tracekit.viz import data as d

Trace = Mapping[str, Any]

#: One colour per bound class (launch = amber, bandwidth = blue, compute = green).
BOUND_COLOURS = {"launch": "#e69f00", "bandwidth": "#0072b2", "compute": "#009e73"}
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
NONFINITE_COLOUR = "#ff00ff"  # heatmap cells whose block held a NaN/Inf (shows as the bg)
_MARGIN = dict(l=50, r=20, t=40, b=40)


def _base(fig: go.Figure, title: str, height: int | None = None) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14)),
        template="plotly_white",
        margin=_MARGIN,
        height=height,
        # Keep the user's zoom/pan across updates of the same view.
        uirevision="keep",
    )
    return fig


def empty_figure(message: str, height: int | None = 200) -> go.Figure:
    """A blank figure that says why there is nothing to show."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base(fig, "", height)


def family_colours(trace: Trace) -> dict[str, str]:
    return {f: FAMILY_PALETTE[i % len(FAMILY_PALETTE)] for i, f in enumerate(d.families(trace))}


# -- graph view ------------------------------------------------------------------------------
def _colour_spec(measure: str, values: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """z values and heatmap colour arguments for ``measure`` (log scale for times, absmax)."""
    if measure == "bound":
        c = [BOUND_COLOURS[b] for b in d.BOUND_CLASSES]
        scale = [[0, c[0]], [1 / 3, c[0]], [1 / 3, c[1]], [2 / 3, c[1]], [2 / 3, c[2]], [1, c[2]]]
        bar = dict(tickvals=[0, 1, 2], ticktext=list(d.BOUND_CLASSES), title="bound")
        return values, dict(colorscale=scale, zmin=-0.5, zmax=2.5, colorbar=bar)
    if measure in ("time", "absmax"):
        # Node times and magnitudes span decades: colour by log10, label the bar in real units.
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)
        finite = z[np.isfinite(z)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        ticks = list(range(math.floor(lo), math.ceil(hi) + 1)) or [0]
        bar = dict(
            tickvals=ticks,
            ticktext=[f"{10.0**t:g}" for t in ticks],
            title=d.MEASURES[measure],
        )
        return z, dict(colorscale="Viridis", colorbar=bar)
    if measure == "nonfinite":
        bar = dict(title="NaN/Inf")
        return values, dict(colorscale="Reds", zmin=0, colorbar=bar)
    return values, dict(colorscale="Viridis", zmin=0, colorbar=dict(title="% of ceiling"))


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
            key; selected: node id to outline, with its inputs (circles) and consumers
            (diamonds) marked; layout: a precomputed :func:`tracekit.viz.data.grid_layout`.

    Returns:
        The figure; trace 0 is the heatmap (click: ``x`` = column, ``y`` = row).
    """
    nodes = trace["nodes"]
    lay = layout or d.grid_layout(nodes)
    values = d.measure_values(trace, j, measure)
    recs = trace["steps"][j]["nodes"]
    nr, nc = len(lay.rows), len(lay.cols)
    z = np.full((nr, nc), np.nan)
    hover = np.full((nr, nc), "", dtype=object)
    label = np.full((nr, nc), "", dtype=object)
    zvals, colour = _colour_spec(measure, values)
    for i, (r, c) in lay.cell.items():
        z[r, c] = zvals[i]
        n, rec = nodes[i], recs[i]
        bound = rec["perf"]["bound"] or "—"
        nf = d.nonfinite(rec["stats"])
        hover[r, c] = (
            f"<b>{html.escape(n['name'])}</b><br>{n['op']} · {n['family']}<br>"
            f"{d.fmt_time(rec['time_s'])} · {bound}-bound · "
            f"{d.fmt_pct(rec['perf']['fraction_of_ceiling'])} of ceiling"
            + (
                ""
                if nf is None
                else f"<br>absmax {d.fmt_num(rec['stats']['absmax'])}, NaN/Inf {nf}"
            )
        )
        if n["layer"] is None:
            label[r, c] = html.escape(n["name"])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(nc)),
            y=list(range(nr)),
            hovertext=hover,
            hoverinfo="text",
            text=label,
            texttemplate="%{text}",
            textfont=dict(size=9),
            xgap=1,
            ygap=1,
            hoverongaps=False,
            **colour,
        )
    )
    if selected is not None and selected in lay.cell:
        _mark(fig, lay, d.input_ids(trace, selected), "circle", "#1f77b4", 9, "inputs")
        _mark(fig, lay, d.consumer_ids(trace, selected), "diamond", "#d62728", 9, "consumers")
        _mark(fig, lay, [selected], "square-open", "#000000", 18, "selected")
    step = trace["steps"][j]
    fig.update_xaxes(
        tickvals=list(range(nc)),
        ticktext=list(lay.cols),
        tickangle=-45,
        side="top",
        showgrid=False,
        zeroline=False,
        range=[-0.5, nc - 0.5],
    )
    fig.update_yaxes(
        tickvals=list(range(nr)),
        ticktext=list(lay.rows),
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    fig.update_layout(
        plot_bgcolor="#f4f4f4",
        showlegend=False,
        clickmode="event",
    )
    # ~18 px per row keeps a 30-layer model legible without scrolling past the fold.
    _base(fig, f"{step['name']} · coloured by {d.MEASURES[measure]}", height=140 + 18 * nr)
    fig.update_layout(margin=dict(l=70, r=20, t=130, b=20), title=dict(y=0.995, yanchor="top"))
    return fig


def _mark(
    fig: go.Figure,
    lay: d.GridLayout,
    ids: Sequence[int],
    symbol: str,
    colour: str,
    size: int,
    name: str,
) -> None:
    pts = [lay.cell[i] for i in ids if i in lay.cell]
    if not pts:
        return
    fig.add_trace(
        go.Scatter(
            x=[c for _, c in pts],
            y=[r for r, _ in pts],
            mode="markers",
            marker=dict(symbol=symbol, size=size, color=colour, line=dict(width=2, color=colour)),
            name=name,
            hoverinfo="skip",
        )
    )


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
    kw: dict[str, Any] = {}
    if zrange is not None:
        kw = dict(zmin=zrange[0], zmax=zrange[1])
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            colorscale="RdBu_r",
            zmid=None if zrange else 0.0,
            hoverongaps=True,
            hovertemplate="row %{y}, col %{x}: %{z:.4g}<extra></extra>",
            **kw,
        )
    )
    fig.update_yaxes(autorange="reversed", title=f"{axes[0]} ({hm['rows']} cells)")
    fig.update_xaxes(title=f"{axes[1]} ({hm['cols']} cells)")
    fig.update_layout(plot_bgcolor=NONFINITE_COLOUR if np.isnan(grid).any() else "#ffffff")
    return _base(fig, f"{title} · block means of {src}", height=260)


def histogram_figure(hist: Mapping[str, Any] | None, title: str = "histogram") -> go.Figure:
    """Bars of a histogram given by ``edges`` (bins + 1) and ``counts``."""
    if not hist or not hist["counts"]:
        return empty_figure("no histogram (no finite values, or a timing capture)")
    e = np.asarray(hist["edges"], dtype=np.float64)
    fig = go.Figure(
        go.Bar(
            x=(e[:-1] + e[1:]) / 2,
            y=hist["counts"],
            width=np.diff(e),
            marker_color="#4c72b0",
            hovertemplate="%{x:.4g}: %{y}<extra></extra>",
        )
    )
    fig.update_yaxes(title="count")
    return _base(fig, title, height=220)


# -- timeline --------------------------------------------------------------------------------
def timeline_figure(trace: Trace, j: int, selected: int | None = None) -> go.Figure:
    """Gantt chart of step ``j``: nodes back to back in execution order, one lane per family.

    The nodes run one after another, so each starts where the previous one ended (node times
    only: host gaps between nodes are not in the trace).
    """
    nodes, recs = trace["nodes"], trace["steps"][j]["nodes"]
    t = np.array([r["time_s"] for r in recs]) * 1e6  # µs
    start = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    colours = family_colours(trace)
    fig = go.Figure()
    for fam in d.families(trace):
        ids = [i for i, n in enumerate(nodes) if n["family"] == fam]
        fig.add_trace(
            go.Bar(
                x=t[ids],
                base=start[ids],
                y=[fam] * len(ids),
                orientation="h",
                name=fam,
                marker=dict(color=colours[fam], line=dict(width=0)),
                customdata=ids,
                hovertext=[f"{nodes[i]['name']}: {d.fmt_time(recs[i]['time_s'])}" for i in ids],
                hoverinfo="text",
            )
        )
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[start[selected] + t[selected] / 2],
                y=[nodes[selected]["family"]],
                mode="markers",
                marker=dict(symbol="triangle-down", size=14, color="#000000"),
                name=nodes[selected]["name"],
                hoverinfo="skip",
            )
        )
    fig.update_layout(barmode="overlay", bargap=0.3, clickmode="event")
    fig.update_xaxes(title="µs from the step's first node")
    fig.update_yaxes(autorange="reversed")
    total = d.fmt_time(float(t.sum()) / 1e6)
    return _base(fig, f"{trace['steps'][j]['name']} · node times, {total} in all", height=360)


# -- roofline --------------------------------------------------------------------------------
def roofline_figure(trace: Trace, j: int, selected: int | None = None) -> go.Figure:
    """Each node of step ``j`` at (intensity, achieved flop/s), log-log, under the measured
    roofs: copy bandwidth × intensity up to the ridge, peak flop/s beyond it.

    Nodes without flops (pure data movement) have no place on a flop/s axis and are counted in
    the title instead.
    """
    c = trace["ceilings"]
    bw, peak = float(c["copy_bandwidth_Bps"]), float(c["peak_flops"])
    ridge = peak / bw
    nodes, recs = trace["nodes"], trace["steps"][j]["nodes"]
    fig = go.Figure()
    pts = [
        i
        for i, r in enumerate(recs)
        if r["perf"]["intensity"] and r["perf"]["achieved_flops"] and r["perf"]["flops"] > 0
    ]
    xs = [recs[i]["perf"]["intensity"] for i in pts] or [ridge]
    lo, hi = min(min(xs), ridge) / 4, max(max(xs), ridge) * 4
    fig.add_trace(
        go.Scatter(
            x=[lo, ridge, hi],
            y=[bw * lo, peak, peak],
            mode="lines",
            line=dict(color="#555555", width=2),
            name=f"roof: {d.fmt_rate(bw, 'B/s')}, {d.fmt_rate(peak, 'flop/s')}",
            hoverinfo="skip",
        )
    )
    for bound in (*d.BOUND_CLASSES, None):
        ids = [i for i in pts if recs[i]["perf"]["bound"] == bound]
        if not ids:
            continue
        fig.add_trace(
            go.Scatter(
                x=[recs[i]["perf"]["intensity"] for i in ids],
                y=[recs[i]["perf"]["achieved_flops"] for i in ids],
                mode="markers",
                name=f"{bound}-bound" if bound else "unclassified",
                marker=dict(color=BOUND_COLOURS.get(bound or "", "#999999"), size=7, opacity=0.8),
                customdata=ids,
                hovertext=[
                    f"{nodes[i]['name']}<br>{recs[i]['perf']['intensity']:.3g} flop/B, "
                    f"{d.fmt_rate(recs[i]['perf']['achieved_flops'], 'flop/s')}"
                    for i in ids
                ],
                hoverinfo="text",
            )
        )
    if selected is not None and selected in pts:
        p = recs[selected]["perf"]
        fig.add_trace(
            go.Scatter(
                x=[p["intensity"]],
                y=[p["achieved_flops"]],
                mode="markers",
                marker=dict(symbol="circle-open", size=18, color="#000000", line=dict(width=2)),
                name=nodes[selected]["name"],
                hoverinfo="skip",
            )
        )
    fig.update_xaxes(type="log", title="arithmetic intensity (flop/byte)")
    fig.update_yaxes(type="log", title="achieved flop/s")
    fig.update_layout(clickmode="event", legend=dict(orientation="h", y=-0.2))
    skipped = len(recs) - len(pts)
    note = f" · {skipped} nodes without flops not shown" if skipped else ""
    return _base(
        fig, f"{trace['steps'][j]['name']} · roofline (ridge {ridge:.3g} flop/B){note}", 420
    )


# -- overview --------------------------------------------------------------------------------
def family_time_figure(trace: Trace) -> go.Figure:
    """Node time per step, stacked by kernel family (ms)."""
    colours = family_colours(trace)
    names = [s["name"] for s in trace["steps"]]
    fig = go.Figure()
    for fam, times in d.family_times(trace).items():
        fig.add_trace(
            go.Bar(
                x=names,
                y=[t * 1e3 for t in times],
                name=fam,
                marker_color=colours[fam],
                hovertemplate=f"{fam}: %{{y:.4g}} ms<extra>%{{x}}</extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="node time (ms)")
    return _base(fig, "time per step and kernel family", height=320)


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
    fig = go.Figure(
        go.Bar(
            x=[t["prob"] for t in top],
            y=labels,
            orientation="h",
            marker_color=["#d55e00" if t["id"] == chosen else "#4c72b0" for t in top],
            hovertemplate="%{y}: p=%{x:.4f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="probability", range=[0, 1])
    title = f"{trace['steps'][j]['name']} · top-{len(top)} (chosen {_token_label(lg['chosen']['text'])})"
    return _base(fig, title, height=max(220, 60 + 22 * len(top)))


def entropy_figure(trace: Trace, j: int | None = None) -> go.Figure:
    """Entropy of the next-token distribution over the steps (nats); step ``j`` marked."""
    names = [s["name"] for s in trace["steps"]]
    ent = d.entropies(trace)
    fig = go.Figure(go.Scatter(x=names, y=ent, mode="lines+markers", name="entropy"))
    if j is not None:
        fig.add_trace(
            go.Scatter(
                x=[names[j]],
                y=[ent[j]],
                mode="markers",
                marker=dict(size=14, color="#d55e00"),
                name=names[j],
            )
        )
    fig.update_yaxes(title="entropy (nats)", rangemode="tozero")
    fig.update_layout(showlegend=False)
    return _base(fig, "entropy over steps", height=260)


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
    red, the first one marked by a vertical line; the dashed line is ``rtol``.
    """
    if not deltas:
        return empty_figure("no nodes in common at this step")
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("|B − A| ÷ absmax (statistics and heatmap)", "time B ÷ A"),
    )
    x = list(range(len(deltas)))
    names = [x_.name for x_ in deltas]
    floor = rtol * 1e-4  # plot exact agreement on the log axis, well under the tolerance
    rel = [max(x_.rel_diff, floor) if x_.rel_diff is not None else None for x_ in deltas]
    bad = [x_.diverges(rtol, atol) for x_ in deltas]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=rel,
            mode="markers",
            marker=dict(color=["#d62728" if b else "#4c72b0" for b in bad], size=6),
            customdata=[x_.id_a for x_ in deltas],
            hovertext=names,
            hovertemplate="%{hovertext}: %{y:.3g}<extra></extra>",
            name="rel diff",
        ),
        row=1,
        col=1,
    )
    fig.add_hline(y=rtol, line=dict(color="#d62728", dash="dash"), row=1, col=1)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[x_.time_ratio for x_ in deltas],
            mode="markers",
            marker=dict(color="#555555", size=5),
            customdata=[x_.id_a for x_ in deltas],
            hovertext=names,
            hovertemplate="%{hovertext}: %{y:.3g}×<extra></extra>",
            name="time ratio",
        ),
        row=2,
        col=1,
    )
    first = d.first_divergence(deltas, rtol, atol)
    if first is not None:
        fig.add_vline(x=deltas.index(first), line=dict(color="#d62728", width=1))
    if selected is not None:
        at = [k for k, x_ in enumerate(deltas) if x_.id_a == selected]
        if at:
            fig.add_vline(x=at[0], line=dict(color="#000000", width=1, dash="dot"))
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title="node (execution order)", row=2, col=1)
    fig.update_layout(showlegend=False, clickmode="event")
    return _base(fig, f"per-node deltas (tolerance {atol:g} + {rtol:g} × absmax)", height=420)


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

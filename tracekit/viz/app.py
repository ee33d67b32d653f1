"""The Dash app that replays a trace: ``create_app(paths)`` and ``tracekit viz``.

Security: the traces are read once, at start-up, from the paths given on the command line;
no callback takes a path (or anything but node ids, step positions and view names) from the
browser, the server binds 127.0.0.1 unless told otherwise, and trace content is only ever
parsed as JSON (``load_trace``) and shown as text (HTML-escaped in figure hover labels).

Callbacks are registered once per app, in :func:`create_app`, and stay thin. Navigation (step
buttons, clicks on cells, bars, points and node links, playback) runs in the browser
(``assets/tracekit.js``), and so do the gates that recompute a view only while its tab is shown;
the server callbacks read the traces closed over here and call the pure builders of
:mod:`tracekit.viz.figures` and :mod:`tracekit.viz.data`.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dash
import plotly.graph_objects as go
from dash import ClientsideFunction, Input, Output, Patch, State, dcc, html

from tracekit.kernels.ceilings import BANDWIDTH_KEYS
from tracekit.trace.diff import DiffReport, diff_traces
from tracekit.trace.format import TraceError, load_trace
from tracekit.viz import data as d
from tracekit.viz import figures as f

ASSETS = Path(__file__).with_name("assets")
#: Playback: one node per tick (ms); a node change renders in well under this.
PLAY_INTERVAL_MS = 600
_GRAPH_CONFIG = {"displaylogo": False, "scrollZoom": False}
_SMALL_CONFIG = {"displayModeBar": False}

Trace = Mapping[str, Any]


# -- small layout helpers --------------------------------------------------------------------
def _kv_table(rows: Sequence[tuple[str, Any]], cls: str = "tk-kv") -> html.Table:
    return html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows], className=cls)


# Markdown that dcc.Markdown's parser (remark, GitHub mode) would read as markup: the characters
# it lets a backslash escape, and, as character references (decoded back to the same text), "&"
# (so no reference in the text is decoded), "<" (so nothing can open HTML; dcc.Markdown shows
# HTML as text anyway) and ":" (so no "http://..." in the text turns into a link).
_MD_ESCAPE = re.compile(r"([\\`*{}\[\]()#+\-.!_>~|])")
_MD_REFS = (("&", "&amp;"), ("<", "&lt;"), (":", "&#58;"))


def md_text(x: Any) -> str:
    """``str(x)`` as Markdown that renders as exactly that text, never as markup; line breaks
    become spaces (a table row is one line)."""
    out = _MD_ESCAPE.sub(r"\\\1", " ".join(str(x).splitlines()))
    for ch, ref in _MD_REFS:
        out = out.replace(ch, ref)
    return out


def md_table(
    rows: Sequence[Sequence[Any]],
    header: Sequence[Any] | None = None,
    cls: str = "tk-kv",
    **kw: Any,
) -> dcc.Markdown:
    """A table as ONE Dash component (a GitHub-style Markdown table) instead of one per row and
    cell: the node detail's tables are re-rendered on every step and node change, and the
    renderer's cost grows with the number of components replaced times the number mounted.

    Every cell is :func:`md_text` (trace text stays text; Markdown's HTML is off). Without a
    ``header`` the table gets an empty one, hidden by the ``tk-md`` CSS with a ``tk-kv``
    class, whose first column then looks like row headers."""
    ncol = len(header) if header is not None else max((len(r) for r in rows), default=1)

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(md_text(c) for c in cells) + " |"

    lines = [line(header if header is not None else [""] * ncol), "|" + " --- |" * ncol]
    lines += [line(r) for r in rows]
    return dcc.Markdown("\n".join(lines), className=f"tk-md {cls}", **kw)


def _goto(node_id: int, label: str, src: str, step: int | None = None) -> html.Button:
    """A link-styled button that selects ``node_id`` (a global id, :func:`d.resolve_node`) and
    step position ``step`` (None: stay at this step; ``d.LOAD`` is the load phase); ``src``
    names the panel it sits in.

    No Dash id: one click listener in assets/tracekit.js reads the ``data-`` attributes and
    sets the ``goto`` store. (A pattern-matching id per link made every detail render
    re-register the links with the renderer and re-run the navigation callback.)
    """
    attrs = {"data-node": str(node_id), "data-src": src}
    if step is not None:
        attrs["data-step"] = str(step)
    return html.Button(label, className="tk-link", **attrs)


def _graph(gid: str, small: bool = False, figure: Any = None, **kw: Any) -> dcc.Graph:
    config = _SMALL_CONFIG if small else _GRAPH_CONFIG
    fig = f.empty_figure("") if figure is None else figure
    return dcc.Graph(id=gid, figure=fig, config=config, **kw)


def _step_marks(n: int, load: bool = False) -> dict[int, str]:
    every = max(1, -(-n // 10))
    marks = {j: ("prefill" if j == 0 else str(j)) for j in range(0, n, every)}
    return {d.LOAD: "load", **marks} if load else marks


def _nan_alert(trace: Trace, where: str) -> html.Div | None:
    at = d.first_nonfinite(trace)
    if at is None:
        return None
    j, i = at
    name, step = trace["nodes"][i]["name"], trace["steps"][j]["name"]
    rec = trace["steps"][j]["nodes"][i]["stats"]
    return html.Div(
        [
            html.Strong("NaN/Inf: "),
            f"the first node whose output held a NaN or an Inf is {name} at {step} "
            f"({rec['nan']} NaN, {rec['pos_inf']} +Inf, {rec['neg_inf']} −Inf). ",
            _goto(i, f"select {name}", where, step=j),
        ],
        id=f"nan-alert-{where}",
        className="tk-alert",
    )


# -- overview --------------------------------------------------------------------------------
def _arch_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """Rope type and factors, soft-caps, window per layer (traces before issue 14 have none)."""
    from tracekit.trace.arch_settings import describe_arch

    settings = m.get("arch_settings")
    return describe_arch(settings) if isinstance(settings, dict) else []


def _mode_row(trace: Trace) -> str | None:
    """An --alternate-modes trace's per-node stream / graph agreement, in words (else None)."""
    m = d.mode_agreement(trace)
    if m is None:
        return None
    worst = ", ".join(f"{n} {q:.3g}×" for n, q in m["worst"])
    return (
        f"{m['within']} of {m['nodes']} nodes' stream / graph times within "
        f"{100 * d.MODE_AGREEMENT:.0f}% (median over each stream step against the graph steps "
        f"beside it; {m['steps'][0]} stream, {m['steps'][1]} graph steps); "
        f"farthest: {worst}"
    )


def _overview(trace: Trace, path: Path) -> html.Div:
    m, run, c = trace["model"], trace["run"], trace["ceilings"]
    cap = d.capture_summary(trace)
    model_rows = [
        ("file", str(path)),
        ("model", f"{m['name']} ({m['architecture']})"),
        (
            "size",
            f"{m['n_layer']} layers, n_embd {m['n_embd']}, heads {m['n_head']}/"
            f"{m['n_head_kv']} × {m['head_dim']}, n_ff {m['n_ff']}, vocab {m['n_vocab']}",
        ),
        (
            "weights",
            ", ".join(f"{k} × {v}" for k, v in m["tensor_types"].items())
            + f" · {d.fmt_bytes(m['file_bytes'])}",
        ),
        *_arch_rows(m),
        *(("note", str(n)) for n in run.get("notes", [])),
        ("device", f"{run['device']} ({run['backend']} backend)"),
        (
            "prompt",
            repr(run["prompt"])
            if run["prompt"] is not None
            else f"token ids {run['prompt_tokens']}",
        ),
        ("generated", repr(run["generated_text"])),
        (
            "steps",
            f"prefill + {len(trace['steps']) - 1} decode (requested "
            f"{run['steps_requested']})"
            + ("" if trace["complete"] else " · INCOMPLETE: run interrupted"),
        ),
        ("matmul", f"{run.get('matmul') or '—'} · w16 cache {run.get('w16_cache') or '—'}"),
        *((("load phase", x),) if (x := d.load_summary(trace)) else ()),
    ]
    method = c["method"]
    method_txt = (
        "; ".join(f"{k}: {v}" for k, v in method.items()) if isinstance(method, dict) else method
    )
    bw_ceil = d.bandwidth_ceiling(c)  # the bound model's bandwidth (trace/perf.py)
    ceil_rows = [
        *(
            (f"{k.split('_')[0]} bandwidth", d.fmt_rate(c[k], "B/s"))
            for k in BANDWIDTH_KEYS  # copy first: every trace has it
            if c.get(k)
        ),
        (
            "bandwidth ceiling (the fastest stream)",
            f"{bw_ceil[1]} stream, {d.fmt_rate(bw_ceil[0], 'B/s')}",
        ),
        ("launch overhead (idle device, host latency)", d.fmt_time(c["launch_overhead_s"])),
        (
            "launch floor per mode",
            ", ".join(
                f"{k} {d.fmt_time(v)}" for k, v in trace["classification"]["launch_floor_s"].items()
            ),
        ),
        (
            "peak compute per math path",
            ", ".join(
                f"{k} {d.fmt_rate(v, 'flop/s')}"
                for k, v in trace["classification"]["peak_flops_by_path"].items()
            ),
        ),
        ("ridge point", f"{c['ridge_flop_per_byte']:.3g} flop/B"),
        ("measured", f"{c['measured_at']} · {method_txt}"),
        ("bound rule", trace["classification"]["rule"]),
    ]
    worst = cap["worst_cost"]

    def ratio(x: float | None) -> str:
        return "—" if x is None else f"{x:.3g}×"

    cap_rows = [
        (
            "capture",
            f"{cap['capture']} · CUDA graph {'on' if cap['cuda_graph'] else 'off'}"
            + (" (programmatic dependent launches)" if cap["pdl"] else "")
            + (
                " · decode steps alternating graph and stream replays of one recorded step"
                if cap["alternate_modes"]
                else ""
            )
            + f" · NVTX {'on' if cap['nvtx'] else 'off'}",
        ),
        (
            "capture cost per node",
            "— (no statistics pass)"
            if cap["median_cost"] is None
            else f"median {cap['median_cost']:.3g}×, worst {worst[0]:.3g}× ({worst[1]}) host time",
        ),
        ("full ÷ timing pass: host time", ratio(cap["host_ratio"])),
        ("full ÷ timing pass: node time", ratio(cap["time_ratio"])),
        ("full ÷ timing pass: step wall time", ratio(cap["wall_ratio"])),
        *((("graph vs stream, same buffers", x),) if (x := _mode_row(trace)) else ()),
    ]
    counts = d.bound_counts(trace)
    bound_table = html.Table(
        [
            html.Tr(
                [html.Th("node records")]
                + [html.Th(f"{b}-bound") for b in d.BOUND_CLASSES]
                + [html.Th("no launch")]
            )
        ]
        + [
            html.Tr([html.Td(kind)] + [html.Td(str(v[b])) for b in (*d.BOUND_CLASSES, "none")])
            for kind, v in counts.items()
        ],
        className="tk-grid",
        id="bound-counts",
    )
    slow = d.slowest_nodes(trace, 10)
    slow_table = html.Table(
        [
            html.Tr(
                [
                    html.Th(h)
                    for h in (
                        "node",
                        "family",
                        "matmul path",
                        "prefill",
                        "decode (mean)",
                        "all steps",
                        "share",
                    )
                ]
            )
        ]
        + [
            html.Tr(
                [
                    html.Td(_goto(r["id"], r["name"], "slowest")),
                    html.Td(r["family"]),
                    html.Td(d.paths_by_step(trace, r["id"]) or "—"),
                    html.Td(d.fmt_time(r["prefill_s"])),
                    html.Td(d.fmt_time(r["decode_mean_s"])),
                    html.Td(d.fmt_time(r["total_s"])),
                    html.Td(d.fmt_pct(r["share"])),
                ]
            )
            for r in slow
        ],
        className="tk-grid",
        id="slowest-nodes",
    )
    alert = _nan_alert(trace, "overview")
    return html.Div(
        [
            alert
            if alert is not None
            else html.Div(
                "No node produced a NaN or an Inf."
                if d.has_stats(trace)
                else "Timing capture: no statistics, so NaN/Inf were not checked.",
                className="tk-ok",
            ),
            html.Div(
                [
                    html.Div(
                        [html.H3("model and run"), _kv_table(model_rows)], className="tk-card"
                    ),
                    html.Div(
                        [
                            html.H3("measured ceilings"),
                            _kv_table(ceil_rows),
                            html.H3("capture"),
                            _kv_table(cap_rows),
                        ],
                        className="tk-card",
                    ),
                ],
                className="tk-row",
            ),
            dcc.Graph(figure=f.family_time_figure(trace), config=_GRAPH_CONFIG, id="family-time"),
            html.Div(
                [
                    html.Div([html.H3("slowest nodes"), slow_table], className="tk-card"),
                    html.Div([html.H3("bound classes"), bound_table], className="tk-card"),
                ],
                className="tk-row",
            ),
        ],
        id="overview",
    )


# -- node detail -----------------------------------------------------------------------------
def _weight_link(a: Trace, w: str, wtype: str | None, loaded: Mapping[str, int]) -> Any:
    """A weight input: a link to its load node (the load phase) where the w16 cache's warm-up
    dequantized it, else its name."""
    label = f"weight {w}" + (f" ({wtype})" if wtype else "")
    if w not in loaded:
        return html.Span(label, className="tk-weight")
    return _goto(d.global_node(a, d.LOAD, loaded[w]), label, "weights", step=d.LOAD)


def _detail(a: Trace, lv: Trace | None, step: int, node_id: int) -> tuple[list[Any], list[Any]]:
    """The detail panel of the dashboard's selection ``node_id`` (a global id) at step position
    ``step`` (``d.LOAD``: a node of the load phase, drawn from the load view ``lv``)."""
    trace, j = d.view(a, step, lv)
    i = d.resolve_node(a, step, node_id)
    load = step == d.LOAD
    node, rec = trace["nodes"][i], trace["steps"][j]["nodes"][i]
    p = rec["perf"]
    ins, outs = d.input_ids(trace, i), d.consumer_ids(trace, i)
    weights = d.weight_inputs(trace, i)
    others = d.other_inputs(trace, i)
    shape = "×".join(map(str, rec["shape"])) or "scalar"
    loaded = (
        {}
        if load or not d.has_load(a)
        else {n["weight"]: k for k, n in enumerate(a["load"]["nodes"])}
    )
    if load:  # a load node is read by the graph nodes that read its weight, at every step
        readers = d.weight_consumers(a, node["name"])
        read_by = [html.Span("read by (every step): ", className="tk-label")] + [
            _goto(k, a["nodes"][k]["name"], "consumers", step=0) for k in readers
        ]
        consumers = read_by + ([] if readers else [html.Span("no graph node")])
    else:
        consumers = (
            [html.Span("consumers: ", className="tk-label")]
            + [_goto(k, trace["nodes"][k]["name"], "consumers") for k in outs]
            + ([] if outs else [html.Span("none (a graph output)")])
        )
    head = [
        html.H2(node["name"], id="detail-name"),
        html.Div(
            f"{node['op']} · {node['family']} · "
            + ("no layer" if node["layer"] is None else f"layer {node['layer']}")
            + f" · {shape} {rec['dtype']} · {trace['steps'][j]['name']}",
            className="tk-sub",
            id="detail-where",
        ),
        html.Div(
            [html.Span("inputs: ", className="tk-label")]
            + [_goto(k, trace["nodes"][k]["name"], "inputs") for k in dict.fromkeys(ins)]
            + [_weight_link(a, w, node["weight_type"], loaded) for w in weights]
            + [html.Span(f"step input {x}", className="tk-weight") for x in others]
            + ([] if ins or weights or others else [html.Span("none")]),
            className="tk-nav",
            id="detail-inputs",
        ),
        html.Div(consumers, className="tk-nav", id="detail-consumers"),
    ]
    attrs = node.get("attrs") or {}
    if attrs:
        head.append(
            html.Div(
                "; ".join(f"{k} {v}" for k, v in attrs.items()),
                className="tk-sub",
                id="detail-attrs",
            )
        )
    bound = p["bound"]
    body: list[Any] = [
        html.Div(
            [
                html.Span(
                    f"{bound}-bound" if bound else "no launch",
                    className=f"tk-badge tk-{bound or 'none'}",
                ),
                html.Span(p["reason"], className="tk-reason"),
            ],
            id="detail-bound",
        ),
        md_table(d.perf_rows(trace, rec), id="detail-perf"),
    ]
    path = d.node_path(rec)
    if path is not None:  # the matmul path the node ran on, as its launch records name it
        body.append(html.Div(f"matmul path: {path}", className="tk-sub", id="detail-path"))
    launches = d.launch_rows(rec, trace["run"]["backend"])
    if launches:
        cols = (
            "kernel", "grid", "block", "threads", "read", "written", "flops", "path", "notes",
            "time",
        )  # fmt: skip
        heads = tuple("threads working of launched" if c == "threads" else c for c in cols)
        body.append(
            md_table(
                [[r[k] for k in cols] for r in launches],
                heads,
                cls="tk-grid",
                id="detail-launches",
            )
        )
    stats = rec["stats"]
    if stats is None:
        body.append(html.Div(_no_stats(load), className="tk-sub", id="detail-nostats"))
    else:
        body.append(md_table(d.stats_rows(stats), cls="tk-kv tk-stats", id="detail-stats"))
    return head, body


def _no_stats(load: bool) -> str:
    if load:
        return "load phase: no statistics (the dequantized weights' values are not recorded)"
    return "timing capture: no statistics for this node"


def _detail_views(
    a: Trace, lv: Trace | None, step: int, node_id: int
) -> tuple[Any, Any, go.Figure, go.Figure]:
    head, body = _detail(a, lv, step, node_id)
    trace, j = d.view(a, step, lv)
    stats = trace["steps"][j]["nodes"][d.resolve_node(a, step, node_id)]["stats"]
    if stats is None and step == d.LOAD:  # say why, not "timing capture"
        why = f"no heatmap: {_no_stats(True)}"
        return head, body, f.empty_figure(why), f.empty_figure("no histogram (load phase)")
    hist = None if stats is None else stats["hist"]
    return head, body, f.heatmap_figure(stats), f.histogram_figure(hist)


# -- compare ---------------------------------------------------------------------------------
def compare_report(a: Trace, b: Trace, paths: Sequence[Path]) -> DiffReport:
    """What ``tracekit diff A B`` reports: calibrated tolerances, tensor sidecars compared when
    both traces have one. A sidecar that cannot be used, or a path without a calibrated
    tolerance, is said in the report's notes (statistics at the dashboard's RTOL then)."""
    from tracekit.trace.tensors import load_tensors

    notes: list[str] = []
    tensors: list[Any] = []
    for t, p in zip((a, b), paths, strict=True):
        try:
            tensors.append(load_tensors(t, p))
        except TraceError as e:
            tensors.append(None)
            notes.append(f"tensor sidecar not used: {e}")
    try:
        report = diff_traces(a, b, tensors_a=tensors[0], tensors_b=tensors[1])
    except ValueError as e:  # no calibrated tolerance for the path: the dashboard's, said so
        report = diff_traces(a, b, rtol=d.RTOL, atol=d.ATOL)
        notes.append(f"{e}; shown at rtol {d.RTOL:g}, atol {d.ATOL:g}")
    report.notes += notes
    return report


def _compare_summary(
    a: Trace,
    b: Trace,
    j: int,
    deltas: Sequence[d.NodeDelta],
    report: DiffReport,
    paths: Sequence[Path],
) -> list[Any]:
    """The whole-trace verdict of ``tracekit diff`` (same rule), then this step's first
    diverging node with a link that selects it."""
    out: list[Any] = [
        html.Div(
            f"A: {paths[0]} ({a['run']['device']}, {a['run']['backend']}, {a['run']['capture']})"
        ),
        html.Div(
            f"B: {paths[1]} ({b['run']['device']}, {b['run']['backend']}, {b['run']['capture']})"
        ),
        html.Pre(report.text(), className="tk-text", id="diff-report"),
    ]
    fd = report.first_divergence
    by_name = {n["name"]: n["id"] for n in a["nodes"]}
    if fd is not None and fd.node in by_name:
        k = next(i for i, s in enumerate(a["steps"]) if s["name"] == fd.step)
        out.append(
            html.Div(
                [
                    f"first divergence over the whole trace: {fd.node} at {fd.step}. ",
                    _goto(by_name[fd.node], f"select {fd.node} at {fd.step}", "diff", step=k),
                ],
                className="tk-alert",
                id="first-divergence",
            )
        )
    fi = report.tensors.first_introduced if report.tensors is not None else None
    if fi is not None and fi.node in by_name:
        k = next(i for i, s in enumerate(a["steps"]) if s["name"] == fi.step)
        out.append(
            html.Div(
                [
                    f"the node that broke it (first to introduce error, tensors compared): "
                    f"{fi.node} at {fi.step}. ",
                    _goto(by_name[fi.node], f"select {fi.node} at {fi.step}", "diff", step=k),
                ],
                className="tk-alert",
                id="first-introduced",
            )
        )
    if j >= len(b["steps"]):
        out.append(html.Div(f"B has no {a['steps'][j]['name']}: nothing to compare here"))
        return out
    first = d.first_divergence(deltas, report.rtol, report.atol)
    step = a["steps"][j]["name"]
    if first is None:
        out.append(
            html.Div(f"{step}: every common node agrees within the tolerance.", className="tk-ok")
        )
    else:
        out.append(
            html.Div(
                [
                    f"{step}: first diverging node {first.name}. ",
                    _goto(first.id_a, "select it", "step-diff"),
                ],
                className="tk-warn",
                id="step-divergence",
            )
        )
    return out


def _compare_node_table(a: Trace, b: Trace, j: int, i: int) -> dcc.Markdown | html.Div:
    name = a["nodes"][i]["name"]
    ib = next((n["id"] for n in b["nodes"] if n["name"] == name), None)
    if ib is None or j >= len(b["steps"]):
        return html.Div(f"{name} is not in B at this step")
    ra, rb = a["steps"][j]["nodes"][i], b["steps"][j]["nodes"][ib]
    keys = ("min", "max", "mean", "std", "absmax", "nan", "pos_inf", "neg_inf", "zeros")
    ta, tb = ra["time_s"], rb["time_s"]
    sign = "+" if tb >= ta else "−"  # B − A signed: a faster B reads negative
    rows = [["time", d.fmt_time(ta), d.fmt_time(tb), f"{sign}{d.fmt_time(abs(tb - ta))}"]]
    sa, sb = ra["stats"], rb["stats"]
    for k in keys:
        va = None if sa is None else sa[k]
        vb = None if sb is None else sb[k]
        delta = None if va is None or vb is None else vb - va
        rows.append([k, d.fmt_num(va), d.fmt_num(vb), d.fmt_num(delta)])
    return md_table(rows, [name, "A", "B", "B − A"], cls="tk-grid", id="compare-node")


# -- the app ---------------------------------------------------------------------------------
def _error_layout(failures: Sequence[tuple[Path, str]]) -> html.Div:
    return html.Div(
        [
            html.H1("tracekit could not open a trace"),
            html.Ul([html.Li([html.Code(str(p)), ": ", msg]) for p, msg in failures]),
            html.P(
                "Nothing else was read. Fix or re-record the file, then restart "
                "`tracekit viz`; this server keeps running."
            ),
        ],
        id="load-error",
        className="tk-error",
    )


def _load(paths: Sequence[Path]) -> tuple[list[dict[str, Any]], list[tuple[Path, str]]]:
    traces, failures = [], []
    for p in paths:
        try:
            t = load_trace(p)
        except TraceError as e:
            # load_trace's messages start with the path already.
            msg = str(e)
            failures.append((p, msg[len(str(p)) + 2 :] if msg.startswith(f"{p}: ") else msg))
            continue
        if not t["steps"]:
            failures.append(
                (
                    p,
                    "the trace holds no steps (the run was interrupted before its "
                    "prefill finished)",
                )
            )
            continue
        traces.append(t)
    return traces, failures


#: Loopback names a browser on this machine uses for the server; any IP literal is allowed too
#: (a DNS-rebinding page reaches the server under its own domain name, never an IP literal).
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")

#: The largest request body the server reads. Callback payloads carry node ids, step positions
#: and view names (a few KB); a 50 MB POST is refused with 413 before its body is read.
MAX_REQUEST_BYTES = 1 << 20


def host_allowed(host_header: str, allowed: Sequence[str] = ()) -> bool:
    """Whether a request's Host header names this server: an IP literal, a loopback name, or
    one of ``allowed`` (``--host``'s name); case-insensitive, port ignored."""
    host = host_header.strip().lower()
    if host.startswith("["):  # [v6]:port
        name = host[1 : host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name in LOOPBACK_NAMES or name in {a.lower().rstrip(".") for a in allowed}


def _refuse_big_bodies(wsgi_app: Any) -> Any:
    """413 for a body over :data:`MAX_REQUEST_BYTES` (411 for one of unknown length), decided
    on the headers. Werkzeug's server drains an unread body after its 413 in 10 MB reads (so
    the client sees the 413): eight 50 MB POSTs grew the server by ~140 MB. Shutting the
    socket's read side first makes that drain end at once; the client may then see a reset."""
    import socket

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        length = environ.get("CONTENT_LENGTH") or ""
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        too_big = length.isdigit() and int(length) > MAX_REQUEST_BYTES
        if not (too_big or chunked):
            return wsgi_app(environ, start_response)
        sock = environ.get("werkzeug.socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        status = "413 Request Entity Too Large" if too_big else "411 Length Required"
        start_response(status, [("Content-Type", "text/plain"), ("Connection", "close")])
        return [f"{status}: request bodies are limited to {MAX_REQUEST_BYTES} bytes\n".encode()]

    return app


def _guard_server(app: dash.Dash, allowed_hosts: Sequence[str]) -> None:
    """Host check (DNS rebinding) and request size limit on the Flask server under the app."""
    import flask

    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    server.wsgi_app = _refuse_big_bodies(server.wsgi_app)  # type: ignore[method-assign]

    @server.before_request
    def _check_host() -> Any:
        if not host_allowed(flask.request.headers.get("Host", ""), allowed_hosts):
            # nothing of the trace: a fixed body, no echo of the header
            return flask.Response(
                "400 Bad Request: this server answers to localhost, an IP address or its "
                "--host name only\n",
                status=400,
                mimetype="text/plain",
            )
        return None


def create_app(trace_paths: Sequence[Path | str], allowed_hosts: Sequence[str] = ()) -> dash.Dash:
    """Build the dashboard over one trace (or two: A and B, to compare).

    Args:
        trace_paths: one or two trace files; they are read here, once, and never again.
        allowed_hosts: Host header names answered besides loopback names and IP literals
            (``tracekit viz --host NAME`` adds NAME); any other Host gets 400 and no content.

    Returns:
        The Dash app. A file that fails :func:`tracekit.trace.format.load_trace` gives an app
        whose only page names the file and the problem (the server still runs).

    Raises:
        ValueError: not one or two paths.
    """
    paths = [Path(p) for p in trace_paths]
    if not 1 <= len(paths) <= 2:
        raise ValueError(f"viz takes one or two trace files, got {len(paths)}")
    app = dash.Dash(
        __name__,
        assets_folder=str(ASSETS),
        title="tracekit viz",
        update_title=None,
        serve_locally=True,
    )
    _guard_server(app, allowed_hosts)
    traces, failures = _load(paths)
    if failures:
        app.layout = _error_layout(failures)
        return app
    # plotly.js is assets/plotly-cartesian-*.min.js, the cartesian partial bundle (1.5 MB:
    # heatmap, bar, scatter and the rest of the 2-D traces; dcc.Graph uses a window.Plotly that
    # is already there instead of fetching Dash's full 4.8 MB bundle, whose parse and compile
    # was a third of a cold first render). The lazy chunks of the first view's components
    # download while the page boots instead of after the layout asks for them.
    suites = "/_dash-component-suites/dash/dcc"
    preload = "".join(
        f'<link rel="preload" as="script" href="{suites}/async-{c}.js">'
        for c in ("graph", "markdown", "slider", "dropdown")
    )
    app.index_string = app.index_string.replace("{%css%}", "{%css%}" + preload)
    a = traces[0]
    b = traces[1] if len(traces) == 2 else None
    # the load phase (the w16 cache's warm-up) as a one-step trace of its own, built once
    lv = d.load_view(a) if d.has_load(a) else None
    lay = d.grid_layout(a["nodes"])
    lay_load = d.grid_layout(lv["nodes"]) if lv is not None else None
    n_steps, n_nodes = len(a["steps"]), len(a["nodes"])
    first_node = max(range(n_nodes), key=lambda i: a["steps"][0]["nodes"][i]["time_s"])
    meta = _meta(a, lay, lay_load)
    # The first view is rendered into the layout itself: the page draws without waiting for
    # a round of callbacks (those start at the first click).
    graph0 = f.graph_figure(a, 0, "time", first_node, lay)
    head0, body0, heat0, hist0 = _detail_views(a, lv, 0, first_node)

    tabs = [
        dcc.Tab(label="Overview", value="overview", children=_overview(a, paths[0])),
        dcc.Tab(label="Graph", value="graph", children=_graph("graph", figure=graph0)),
        dcc.Tab(label="Timeline", value="timeline", children=_graph("timeline")),
        dcc.Tab(label="Roofline", value="roofline", children=_graph("roofline")),
        dcc.Tab(
            label="Tokens",
            value="tokens",
            children=html.Div(
                [
                    html.Div(id="gen-text", className="tk-text"),
                    html.Div([_graph("topk"), _graph("entropy")], className="tk-row"),
                    _graph("logit-hist"),
                ]
            ),
        ),
    ]
    if b is not None:
        tabs.append(
            dcc.Tab(
                label="Compare",
                value="compare",
                children=html.Div(
                    [
                        html.Div(id="compare-summary"),
                        _graph("compare"),
                        html.Div(
                            [_graph("compare-heat-a", True), _graph("compare-heat-b", True)],
                            className="tk-row",
                        ),
                        html.Div(id="compare-table"),
                    ]
                ),
            )
        )
    alert = _nan_alert(a, "banner")
    files = " vs ".join(str(p) for p in paths)
    app.layout = html.Div(
        [
            html.Div(
                [
                    html.Span("tracekit", className="tk-brand"),
                    html.Span(
                        f"{a['model']['name']} · {a['run']['device']} · {d.time_label(a)} · "
                        f"{files}",
                        className="tk-files",
                    ),
                    html.Span("" if a["complete"] else "INCOMPLETE RUN", className="tk-warn"),
                ],
                className="tk-header",
            ),
            html.Div(
                [
                    html.Button("◀", id="step-prev", className="tk-btn", title="previous step"),
                    html.Div(
                        dcc.Slider(
                            id="step",
                            min=d.first_step(a),
                            max=n_steps - 1,
                            step=1,
                            value=0,
                            marks=_step_marks(n_steps, lv is not None),
                            updatemode="mouseup",
                        ),
                        className="tk-slider",
                    ),
                    html.Button("▶", id="step-next", className="tk-btn", title="next step"),
                    html.Span(
                        meta["info"][-meta["step_min"]], id="step-info", className="tk-stepinfo"
                    ),
                    html.Label("colour by", className="tk-label"),
                    dcc.Dropdown(
                        id="measure",
                        options=[{"label": d.measure_label(a, k), "value": k} for k in d.MEASURES],
                        value="time",
                        clearable=False,
                        className="tk-measure",
                    ),
                    html.Button(
                        "play",
                        id="play",
                        className="tk-btn",
                        title="walk the nodes in execution order",
                    ),
                    dcc.Interval(id="play-timer", interval=PLAY_INTERVAL_MS, disabled=True),
                ],
                className="tk-controls",
            ),
            alert if alert is not None else html.Div(),
            html.Div(
                [
                    html.Div(
                        dcc.Tabs(id="tabs", value="graph", children=tabs), className="tk-views"
                    ),
                    html.Div(
                        [
                            html.Div(head0, id="detail-head"),
                            html.Div(
                                [
                                    _graph("detail-heatmap", True, heat0),
                                    _graph("detail-hist", True, hist0),
                                ]
                            ),
                            html.Div(body0, id="detail-body"),
                        ],
                        className="tk-detail",
                        id="node-detail",
                    ),
                ],
                className="tk-main",
            ),
            dcc.Store(id="node", data=first_node),
            dcc.Store(id="meta", data=meta),
            dcc.Store(id="goto"),
            *[dcc.Store(id=f"{v}-key") for v in _GATED],
        ],
        className="tk-app",
    )
    _register(app, a, b, lv, lay, lay_load, paths)
    return app


#: Views computed on the server only while their tab is shown: view -> (its tab, what its
#: figures depend on besides the tab). The clientside ``route`` callback sets the view's key
#: store (``<view>-key``, the list of those values) when one of them, or the tab, changes
#: while the tab is shown; the view's server callback listens to that store.
_GATED: dict[str, tuple[str, tuple[str, ...]]] = {
    "graph": ("graph", ("step", "measure")),
    # a node change only moves the graph view's outlines (a Patch, not a new figure)
    "graph-sel": ("graph", ("node",)),
    "timeline": ("timeline", ("step", "node")),
    "roofline": ("roofline", ("step", "node")),
    "tokens": ("tokens", ("step",)),
    "compare": ("compare", ("step", "node")),
}
#: The component property behind each dependency name of :data:`_GATED`.
_DEPS = {"step": ("step", "value"), "measure": ("measure", "value"), "node": ("node", "data")}


def _cells(lay: d.GridLayout | None) -> list[list[int]]:
    if lay is None:
        return []
    cells = [[-1] * len(lay.cols) for _ in lay.rows]
    for i, (r, c) in lay.cell.items():
        cells[r][c] = i
    return cells


def _meta(trace: Trace, lay: d.GridLayout, lay_load: d.GridLayout | None = None) -> dict[str, Any]:
    """What the clientside callbacks need: sizes (``n_nodes`` graph nodes; the load phase's
    ``n_load`` nodes have the global ids after them), the first step position (``step_min``:
    ``d.LOAD`` when the trace has a load phase), the cell -> node maps of the graph view
    (``load_cells``: the load view's, local ids), the step info lines (``info[j - step_min]``),
    the gated views ([view, tab, [dependency names]], :data:`_GATED`'s order) and the
    property behind each dependency name (in ``route``'s input order)."""
    step_min = d.first_step(trace)
    lv = d.load_view(trace) if step_min == d.LOAD else None
    info = [d.step_info(*d.view(trace, j, lv)) for j in range(step_min, len(trace["steps"]))]
    return {
        "n_steps": len(trace["steps"]),
        "n_nodes": len(trace["nodes"]),
        "n_load": len(lv["nodes"]) if lv is not None else 0,
        "step_min": step_min,
        "cells": _cells(lay),
        "load_cells": _cells(lay_load),
        "info": info,
        "views": [[v, tab, list(deps)] for v, (tab, deps) in _GATED.items()],
        "deps": {k: f"{cid}.{prop}" for k, (cid, prop) in _DEPS.items()},
    }


def _register(
    app: dash.Dash,
    a: Trace,
    b: Trace | None,
    lv: Trace | None,
    lay: d.GridLayout,
    lay_load: d.GridLayout | None,
    paths: Sequence[Path],
) -> None:
    """The callbacks, registered once on ``app``: clientside navigation and gates
    (assets/tracekit.js), thin server callbacks that call the figure builders. A step
    position ``d.LOAD`` draws the load view ``lv``; node ids from the browser are global
    (:func:`d.resolve_node`)."""

    def at(j: int, node: int) -> tuple[Trace, int, int]:
        # (the trace to draw, its step position, the selection's id in it)
        t, jj = d.view(a, j, lv)
        return t, jj, d.resolve_node(a, j, node)

    cs = ClientsideFunction
    app.clientside_callback(
        cs("tracekit", "navigate"),
        Output("step", "value"),
        Output("node", "data"),
        Output("tabs", "value"),
        Output("play-timer", "disabled", allow_duplicate=True),
        Output("play", "children", allow_duplicate=True),
        Input("step-prev", "n_clicks"),
        Input("step-next", "n_clicks"),
        Input("graph", "clickData"),
        Input("timeline", "clickData"),
        Input("roofline", "clickData"),
        Input("goto", "data"),
        Input("play-timer", "n_intervals"),
        State("step", "value"),
        State("node", "data"),
        State("meta", "data"),
        prevent_initial_call=True,
    )
    app.clientside_callback(
        cs("tracekit", "togglePlay"),
        Output("play-timer", "disabled"),
        Output("play", "children"),
        Input("play", "n_clicks"),
        State("play-timer", "disabled"),
        prevent_initial_call=True,
    )
    # One callback for the step line and every view's gate: each callback run costs the
    # renderer a round of store updates over the whole page, whatever it returns.
    app.clientside_callback(
        cs("tracekit", "route"),
        Output("step-info", "children"),
        *[Output(f"{v}-key", "data") for v in _GATED],
        Input("tabs", "value"),
        *[Input(*_DEPS[k]) for k in _DEPS],
        State("meta", "data"),
        # the first graph and detail are in the layout; other tabs start at their first
        # visit (a change of `tabs`)
        prevent_initial_call=True,
    )

    @app.callback(
        Output("graph", "figure"),
        Input("graph-key", "data"),
        State("node", "data"),
        prevent_initial_call=True,
    )
    def update_graph(key: list[Any], node: int) -> Any:
        j, measure = key
        t, jj, i = at(j, node)
        return f.graph_figure(t, jj, measure, i, lay_load if j == d.LOAD else lay)

    @app.callback(
        Output("graph", "figure", allow_duplicate=True),
        Input("graph-sel-key", "data"),
        State("step", "value"),
        prevent_initial_call=True,
    )
    def update_selection(key: list[Any], j: int) -> Any:
        # A node change only moves the outlines: patch the shapes, keep the heatmap.
        patch = Patch()
        t, _, i = at(j, key[0])
        patch["layout"]["shapes"] = f.selection_shapes(t, lay_load if j == d.LOAD else lay, i)
        return patch

    @app.callback(
        Output("detail-head", "children"),
        Output("detail-body", "children"),
        Output("detail-heatmap", "figure"),
        Output("detail-hist", "figure"),
        Input("step", "value"),
        Input("node", "data"),
        prevent_initial_call=True,
    )
    def update_detail(j: int, node: int) -> tuple[Any, Any, Any, Any]:
        return _detail_views(a, lv, j, node)

    @app.callback(
        Output("timeline", "figure"), Input("timeline-key", "data"), prevent_initial_call=True
    )
    def update_timeline(key: list[int]) -> Any:
        return f.timeline_figure(*at(*key))

    @app.callback(
        Output("roofline", "figure"), Input("roofline-key", "data"), prevent_initial_call=True
    )
    def update_roofline(key: list[int]) -> Any:
        return f.roofline_figure(*at(*key))

    @app.callback(
        Output("topk", "figure"),
        Output("entropy", "figure"),
        Output("logit-hist", "figure"),
        Output("gen-text", "children"),
        Input("tokens-key", "data"),
        prevent_initial_call=True,
    )
    def update_tokens(key: list[int]) -> tuple[Any, Any, Any, Any]:
        (j,) = key
        if j == d.LOAD:
            none = f.empty_figure("the load phase chooses no token")
            return none, f.entropy_figure(a), none, "load phase: no tokens yet"
        prompt = a["run"]["prompt"] or ""
        text = [
            html.Span(f"text through {a['steps'][j]['name']}: ", className="tk-label"),
            html.Span(prompt, className="tk-prompt"),
            html.Span(d.generated_text(a, j), className="tk-gen"),
        ]
        return f.topk_figure(a, j), f.entropy_figure(a, j), f.logit_hist_figure(a, j), text

    if b is None:
        return

    @functools.cache
    def diff_report() -> DiffReport:
        # Computed on the first visit to the compare tab, then kept (the traces never change):
        # the report of `tracekit diff A B`, tensor sidecars included.
        return compare_report(a, b, paths)

    @app.callback(
        Output("compare-summary", "children"),
        Output("compare", "figure"),
        Output("compare-heat-a", "figure"),
        Output("compare-heat-b", "figure"),
        Output("compare-table", "children"),
        Input("compare-key", "data"),
        prevent_initial_call=True,
    )
    def update_compare(key: list[int]) -> tuple[Any, ...]:
        j, node = key
        if j == d.LOAD:
            none = f.empty_figure("the load phase is not compared (tracekit diff compares steps)")
            return html.Div("load phase: not compared"), none, none, none, html.Div()
        node = d.resolve_node(a, j, node)
        deltas = d.compare_step(a, b, j)
        name = a["nodes"][node]["name"]
        ib = next((n["id"] for n in b["nodes"] if n["name"] == name), None)
        sa = a["steps"][j]["nodes"][node]["stats"]
        sb = b["steps"][j]["nodes"][ib]["stats"] if ib is not None and j < len(b["steps"]) else None
        rng = f.shared_range(sa, sb)
        return (
            _compare_summary(a, b, j, deltas, diff_report(), paths),
            f.compare_figure(deltas, diff_report().rtol, diff_report().atol, selected=node),
            f.heatmap_figure(sa, f"A: {f.plain(name)}", rng),
            f.heatmap_figure(sb, f"B: {f.plain(name)}", rng),
            _compare_node_table(a, b, j, node),
        )

    app.clientside_callback(
        cs("tracekit", "compareClick"),
        Output("node", "data", allow_duplicate=True),
        Input("compare", "clickData"),
        prevent_initial_call=True,
    )


# -- CLI -------------------------------------------------------------------------------------
def _host_names(host: str) -> list[str]:
    """Host header names to answer for ``--host``: the name itself; for a wildcard bind
    (0.0.0.0, ::) this machine's names too (IP literals are always answered)."""
    import socket

    names = [host]
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        names += [socket.gethostname(), socket.getfqdn()]
    return names


def _bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served, in one line (werkzeug prints four and exits 1)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        return f"cannot serve on host {host!r}: {getattr(e, 'strerror', None) or e}"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug's server
        try:
            sock.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use: stop the other server or give --port"
            return f"cannot serve on {host}:{port}: {e.strerror or e}"
    return None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tracekit viz",
        description="Replay a trace (or compare two) in the browser.",
    )
    p.add_argument("trace", type=Path, help="trace file (record-trace -o ...)")
    p.add_argument("trace_b", type=Path, nargs="?", help="a second trace to compare against")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    return p


def viz_main(argv: Sequence[str] | None = None) -> int:
    """``tracekit viz TRACE [TRACE_B] [--host 127.0.0.1] [--port 8050]``: serve until Ctrl-C.

    Returns:
        0 after Ctrl-C; 2 (one line on stderr) for a missing file, a bad port, a port in use
        or a host that cannot be bound.
    """
    args = _parser().parse_args(argv)
    paths = [p for p in (args.trace, args.trace_b) if p is not None]
    for p in paths:
        if not p.is_file():
            print(f"tracekit viz: {p}: no such trace file", file=sys.stderr)
            return 2
    if not 0 < args.port < 65536:
        print(f"tracekit viz: port {args.port} is not in 1..65535", file=sys.stderr)
        return 2
    problem = _bind_problem(args.host, args.port)
    if problem is not None:
        print(f"tracekit viz: {problem}", file=sys.stderr)
        return 2
    app = create_app(paths, allowed_hosts=_host_names(args.host))
    if app.layout is not None and getattr(app.layout, "id", None) == "load-error":
        print(
            f"tracekit viz: could not load {' or '.join(map(str, paths))}; the page says why",
            file=sys.stderr,
        )
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        print(
            f"tracekit viz: serving on {args.host}: other machines can read these traces",
            file=sys.stderr,
        )
    print(f"tracekit viz: http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    try:
        app.run(host=args.host, port=args.port, debug=False)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(viz_main())

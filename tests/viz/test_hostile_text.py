"""Issue 16: text from a trace (node names, families, ops, token text) reaches Plotly only
escaped. Plotly renders a subset of HTML in every text it draws (titles, ticks, legends,
hover labels, annotations): an unescaped ``<a href>`` from a trace became a live link."""

from __future__ import annotations

from typing import Any

import plotly.io as pio

from tests.viz.conftest import make_trace
from tracekit.viz import app as viz_app
from tracekit.viz import data as d
from tracekit.viz import figures as f

EVIL = "<a href='https://evil.example/'>x</a>"


def _hostile(seed: int = 0) -> dict[str, Any]:
    t = make_trace(seed=seed)
    for i, n in enumerate(t["nodes"]):
        n["name"] = f"{n['name']}{EVIL}{i}"  # still unique, still "blk.L." prefixed
        n["family"] = f"fam{EVIL}"
        n["op"] = f"op{EVIL}"
    return t


def _figures(a: dict[str, Any], b: dict[str, Any]) -> list[Any]:
    lay = d.grid_layout(a["nodes"])
    name = a["nodes"][3]["name"]
    st = a["steps"][1]["nodes"][3]["stats"]
    figs = [f.graph_figure(a, 1, m, 3, lay) for m in d.MEASURES]
    figs += [
        f.timeline_figure(a, 1, 3),
        f.roofline_figure(a, 1, 3),
        f.family_time_figure(a),
        f.topk_figure(a, 1),
        f.entropy_figure(a, 1),
        f.logit_hist_figure(a, 1),
        f.compare_figure(d.compare_step(a, b, 1), selected=3),
        f.heatmap_figure(st, f.plain(f"A: {name}")),
        f.histogram_figure(st["hist"], f.plain(name)),
    ]
    return figs


def test_no_trace_text_reaches_a_figure_unescaped() -> None:
    a, b = _hostile(0), _hostile(1)
    for fig in _figures(a, b):
        text = pio.to_json(fig, validate=False)
        assert "<a" not in text, text[text.index("<a") - 200 : text.index("<a") + 100]
        assert "&lt;a href" in text or fig.layout.title.text  # the text is there, as text


def test_node_detail_views_escape_figure_titles() -> None:
    a = _hostile(0)
    _, _, heat, hist = viz_app._detail_views(a, None, 1, 3)
    for fig in (heat, hist):
        assert "<a" not in pio.to_json(fig, validate=False)

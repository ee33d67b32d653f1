"""The app factory and ``tracekit viz`` without a browser (Flask's test client, argparse)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.viz import app as viz_app


def _layout_text(app) -> str:
    resp = app.server.test_client().get("/_dash-layout")
    assert resp.status_code == 200
    # re-dumped: the served JSON may escape "/" and non-ASCII characters
    return json.dumps(json.loads(resp.get_data(as_text=True)), ensure_ascii=False)


def test_app_over_a_recorded_trace_serves_its_layout(demo_trace_path: Path, demo_trace):
    app = viz_app.create_app([demo_trace_path])
    text = _layout_text(app)
    assert demo_trace["model"]["name"] in text
    assert str(demo_trace_path) in text
    # the index page and the component bundles are served locally (no CDN): every script and
    # stylesheet URL is a path on this server (not the page's text: Dash's random ids in its
    # config may spell "cdn", as a clean-clone CI run found)
    import re

    index = app.server.test_client().get("/").get_data(as_text=True)
    urls = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"', index)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    assert "unpkg" not in index.lower()
    # the preloaded bundles exist at the URLs the page names

    for url in re.findall(r'rel="preload" as="script" href="([^"]+)"', index):
        assert app.server.test_client().get(url).status_code == 200, url


def test_truncated_trace_gives_an_error_page_naming_file_and_problem(
    demo_trace_path: Path, tmp_path: Path
):
    bad = tmp_path / "cut.json"
    raw = demo_trace_path.read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    app = viz_app.create_app([bad])
    flat = _layout_text(app)
    assert "load-error" in flat and str(bad) in flat and "not valid JSON" in flat
    # the server still answers after serving the error
    assert app.server.test_client().get("/").status_code == 200


def test_second_trace_failing_names_that_file(demo_trace_path: Path, tmp_path: Path):
    newer = tmp_path / "newer.json"
    t = json.loads(demo_trace_path.read_text())
    t["version"] = 99
    newer.write_text(json.dumps(t))
    flat = _layout_text(viz_app.create_app([demo_trace_path, newer]))
    assert str(newer) in flat and "newer" in flat
    assert str(demo_trace_path) not in flat  # only the failing file is named


def test_create_app_takes_one_or_two_traces(demo_trace_path: Path):
    with pytest.raises(ValueError, match="one or two trace files, got 3"):
        viz_app.create_app([demo_trace_path] * 3)


def test_callbacks_take_no_path_from_the_browser(demo_trace_path: Path):
    app = viz_app.create_app([demo_trace_path, demo_trace_path])
    inputs = [
        i["id"] + "." + i["property"]
        for cb in app.callback_map.values()
        for i in cb["inputs"] + cb.get("state", [])
    ]
    props = {x.rsplit(".", 1)[1] for x in inputs}
    # clicks, selections and the step/measure/tab values only: nothing that could name a file
    assert props <= {"n_clicks", "clickData", "value", "data", "n_intervals", "disabled"}


def test_viz_main_missing_file_is_one_line_exit_2(tmp_path: Path, capsys):
    assert viz_app.viz_main([str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.json: no such trace file" in err


def test_viz_main_bad_port_exit_2(demo_trace_path: Path, capsys):
    assert viz_app.viz_main([str(demo_trace_path), "--port", "70000"]) == 2
    assert "port 70000" in capsys.readouterr().err


def test_viz_main_binds_loopback_by_default(demo_trace_path: Path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr("dash.Dash.run", lambda self, **kw: seen.update(kw))
    assert viz_app.viz_main([str(demo_trace_path), "--port", "8123"]) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8123 and seen["debug"] is False
    assert "other machines" not in capsys.readouterr().err
    viz_app.viz_main([str(demo_trace_path), "--host", "0.0.0.0"])
    assert seen["host"] == "0.0.0.0"
    assert "other machines can read these traces" in capsys.readouterr().err


# -- the node detail: few components, trace text as text -------------------------------------
def _components(x) -> int:
    from dash.development.base_component import Component

    if isinstance(x, (list, tuple)):
        return sum(_components(y) for y in x)
    if isinstance(x, Component):
        return 1 + _components(getattr(x, "children", None))
    return 0


def test_md_text_escapes_every_markup_character():
    s = "a_b *c* `d` [e](f) <g> h|i \\ #j !k ~l~ 1.5 +m -n >o {p} http://q &amp;"
    want = (
        r"a\_b \*c\* \`d\` \[e\]\(f\) &lt;g\> h\|i \\ \#j \!k \~l\~ 1\.5 \+m \-n \>o \{p\} "
        r"http&#58;//q &amp;amp;"
    )
    assert viz_app.md_text(s) == want
    assert viz_app.md_text("a\nb\r\nc") == "a b c"  # a table row stays one line
    assert viz_app.md_text(0.5) == r"0\.5"


def test_md_table_is_one_component_with_a_row_per_line():
    t = viz_app.md_table([("time", "6.7 µs"), ("a|b", "c")], id="t")
    lines = t.children.split("\n")
    assert len(lines) == 4 and lines[1] == "| --- | --- |"
    assert lines[0] == "|  |  |"  # key-value tables: an empty header (hidden by the CSS)
    assert lines[3] == "| a\\|b | c |"
    assert "tk-md" in t.className and "tk-kv" in t.className
    g = viz_app.md_table([[1, 2, 3]], header=["x", "y", "z"], cls="tk-grid")
    assert g.children.split("\n")[0] == "| x | y | z |" and "tk-grid" in g.className


def test_node_detail_is_a_few_components(demo_trace):
    # Every step and node change replaces the detail: the renderer's cost grows with the
    # components replaced times the components mounted (one store update per new component),
    # so its tables are one Markdown component each, not one per cell.
    for i in range(len(demo_trace["nodes"])):
        head, body = viz_app._detail(demo_trace, None, 1, i)
        assert _components(body) <= 8, demo_trace["nodes"][i]["name"]
        n_links = len(set(viz_app.d.input_ids(demo_trace, i)))
        n_links += len(viz_app.d.consumer_ids(demo_trace, i))
        assert _components(head) <= 12 + n_links + len(viz_app.d.weight_inputs(demo_trace, i))


def test_route_callback_inputs_match_the_meta_it_reads(demo_trace_path: Path, demo_trace):
    # assets/tracekit.js `route(tab, step, measure, node, meta)` maps its arguments through
    # meta.deps and sets one key per meta.views entry, in the callback's output order
    app = viz_app.create_app([demo_trace_path])
    meta = viz_app._meta(demo_trace, viz_app.d.grid_layout(demo_trace["nodes"]))
    (key, cb) = next((k, c) for k, c in app.callback_map.items() if "step-info.children" in k)
    inputs = [f"{i['id']}.{i['property']}" for i in cb["inputs"]]
    assert inputs == ["tabs.value", *meta["deps"].values()]
    assert list(meta["deps"]) == ["step", "measure", "node"]
    keys = [f"{v}-key.data" for v, _, _ in meta["views"]]
    assert key.strip(".").split("...") == ["step-info.children", *keys]
    for _, tab, deps in meta["views"]:
        assert set(deps) <= set(meta["deps"]) and tab in viz_app._GATED


def test_an_alternating_trace_shows_its_mode_agreement_in_the_overview(tmp_path: Path) -> None:
    """An --alternate-modes trace (here the shipped graph trace relabelled so) gets the
    overview row comparing its stream and graph steps; the capture row says it alternated."""
    import json

    from tracekit.trace.format import load_trace

    src = Path(__file__).resolve().parents[2] / "traces" / "demo-h200-graph.json"
    t = json.loads(src.read_text())
    t["run"]["alternate_modes"] = True
    decode = [s for s in t["steps"] if s["kind"] == "decode"][1:]
    for j, s in enumerate(decode):
        s["launch_mode"] = "graph" if j % 2 == 0 else "stream"
    path = tmp_path / "alt.json"
    path.write_text(json.dumps(t))
    load_trace(path)  # valid under the schema
    text = _layout_text(viz_app.create_app([path]))
    assert "graph vs stream, same buffers" in text and " nodes' stream / graph times " in text
    assert "alternating graph and stream replays of one recorded step" in text
    plain = _layout_text(viz_app.create_app([src]))
    assert "graph vs stream, same buffers" not in plain

"""NaN/Inf in the data (issue 6): models with planted NaN/Inf weights record traces whose
statistics count them; ``tracekit diff`` and the dashboard name the first bad node; nothing
crashes; the JSON text never holds a NaN/Infinity literal.

The models are the synthetic llama (written by ``gguf.GGUFWriter``; 3 layers, n_embd 128, vocab
304) with one value overwritten in place through ``gguf.GGUFReader(mode="r+")``:

- ``nan_embd``: a NaN in row 7 (column 5) of the F16 ``token_embd.weight``; the prompt holds
  token 7 once, so the prefill's ``token_embd`` output holds exactly one NaN;
- ``inf_norm``: a +Inf in element 9 of the F32 ``blk.1.attn_norm.weight``: ``blk.1.attn_norm``
  is the first bad node, one +/-Inf per token (column 9), and nothing before it is touched. The
  graph computes that norm in the fused ``blk.0.ffn_residual_norm`` (add_rms_norm), whose plane
  1 ``blk.1.attn_norm`` is a view: the fused node's record is the first that holds the Infs,
  and the report names the view (the norm), as it does for the unfused graph (``--fuse off``);
- ``nan_q8``: the f16 scale of the first Q8_0 block of row 11 of ``output.weight`` set to NaN:
  only logit 11 of the last position is NaN (the sampler and the logit summary must cope).

Every trace is recorded by the real ``record-trace`` entry point (NumPy backend).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tracekit.cli import main, record_trace_main
from tracekit.trace.format import load_trace

# the dashboard half needs dash, which a GPU host running `pytest -m gpu` may not have: skip the
# module there instead of failing its collection
pytest.importorskip("dash")
from tracekit.viz import data as d  # noqa: E402
from tracekit.viz.app import create_app  # noqa: E402

PROMPT = [3, 7, 40, 41]  # token 7 at position 1
STEPS = 2
N_EMBD = 128
#: case -> (first bad node, step, expected nan, +inf + -inf counts there)
CASES = {
    "nan_embd": ("token_embd", "prefill", 1, 0),
    "inf_norm": ("blk.1.attn_norm", "prefill", 0, len(PROMPT)),
    "nan_q8": ("output", "prefill", 1, 0),
}
#: A NaN/Infinity literal outside a JSON string (base64 heatmap codes may spell "NaN").
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LITERAL = re.compile(r"-?\b(?:NaN|Infinity)\b")


def non_finite_literals(text: str) -> list[str]:
    """The NaN/Infinity literals of a JSON text, strings blanked out first."""
    return _LITERAL.findall(_STRING.sub('""', text))


def test_the_literal_scan_finds_literals() -> None:
    """Control for the scan: it finds bare literals and ignores them inside strings."""
    assert non_finite_literals('{"a": NaN, "b": [-Infinity, Infinity]}') == [
        "NaN", "-Infinity", "Infinity",
    ]  # fmt: skip
    assert non_finite_literals('{"codes": "AANaNInfinity/+", "t": "say \\"NaN\\""}') == []


def _plant(src: Path, dst: Path, case: str) -> Path:
    shutil.copyfile(src, dst)
    r = gguf.GGUFReader(dst, "r+")
    t = {t.name: t for t in r.tensors}
    if case == "nan_embd":
        emb = t["token_embd.weight"]
        assert emb.tensor_type == gguf.GGMLQuantizationType.F16
        emb.data.reshape(-1, N_EMBD)[7, 5] = np.float16("nan")
    elif case == "inf_norm":
        norm = t["blk.1.attn_norm.weight"]
        assert norm.tensor_type == gguf.GGMLQuantizationType.F32
        norm.data.reshape(-1)[9] = np.float32("inf")
    else:
        out = t["output.weight"]
        assert out.tensor_type == gguf.GGMLQuantizationType.Q8_0
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0]
        row = np.asarray(out.data).reshape(-1).view(np.uint8)
        at = 11 * (N_EMBD // block) * size  # row 11, block 0: its f16 scale comes first
        row[at : at + 2] = np.array([np.float16("nan")]).view(np.uint8)
    r.data.flush()
    del r
    return dst


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The clean trace and one per planted case, recorded by `record-trace`."""
    from tracekit.model.synthetic import write_synthetic_model

    tmp = tmp_path_factory.mktemp("nan")
    clean = write_synthetic_model(tmp / "clean.gguf", "llama")
    models = {"clean": clean} | {c: _plant(clean, tmp / f"{c}.gguf", c) for c in CASES}
    out = {}
    for name, model in models.items():
        path = tmp / f"{name}.json"
        argv = [str(model), "--tokens", ",".join(map(str, PROMPT)), "--steps", str(STEPS),
                "--backend", "numpy", "--no-progress", "--no-nvtx", "-o", str(path)]  # fmt: skip
        assert record_trace_main(argv) == 0, name
        out[name] = path
    # the graph without the add_rms_norm fusion (nor any other), for the report's name
    path = tmp / "inf_norm_unfused.json"
    argv = [str(models["inf_norm"]), "--tokens", ",".join(map(str, PROMPT)), "--steps",
            str(STEPS), "--backend", "numpy", "--no-progress", "--no-nvtx", "--fuse", "off",
            "-o", str(path)]  # fmt: skip
    assert record_trace_main(argv) == 0
    out["inf_norm_unfused"] = path
    return out


def _computed_at(t: dict[str, Any], node: str) -> int:
    """The id of the node whose launch wrote ``node``'s values: the node itself, or the fused
    node that a ``plane`` view reads."""
    by_name = {n["name"]: n for n in t["nodes"]}
    n = by_name[node]
    return by_name[n["inputs"][0]]["id"] if n["op"] == "plane" else n["id"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_never_holds_a_nan_literal(case: str, traces: dict[str, Path]) -> None:
    text = traces[case].read_text(encoding="utf-8")
    assert non_finite_literals(text) == []

    def refuse(name: str) -> Any:
        raise AssertionError(f"literal {name} in the trace")

    json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("case", sorted(CASES))
def test_statistics_count_them_at_the_first_bad_node(case: str, traces: dict[str, Path]) -> None:
    node, step, nan, inf = CASES[case]
    t = load_trace(traces[case])
    assert t["complete"] and len(t["steps"]) == STEPS + 1  # nothing crashed, every step ran
    ids = {n["name"]: n["id"] for n in t["nodes"]}
    j = [s["name"] for s in t["steps"]].index(step)
    recs = t["steps"][j]["nodes"]
    s = recs[ids[node]]["stats"]
    assert (s["nan"], s["pos_inf"] + s["neg_inf"]) == (nan, inf)
    src = _computed_at(t, node)
    assert all(d.nonfinite(r["stats"]) == 0 for r in recs[:src])
    assert d.nonfinite(recs[src]["stats"]) == nan + inf  # a fused node's: in one plane only
    if case == "inf_norm":  # computed by a fused node, named at its plane view
        assert t["nodes"][src]["op"] == "add_rms_norm" and src < ids[node]
    assert d.first_nonfinite(t) == (j, ids[node])
    # the heatmap marks the cells that held them (code 255 -> NaN in the decoded grid)
    assert np.isnan(d.heatmap_grid(s)).any()
    # the finite statistics stay finite (counted, never folded into min/max/mean)
    assert all(np.isfinite(s[k]) for k in ("min", "max", "mean", "std", "absmax"))
    if case == "nan_embd":  # the NaN spreads over exactly one token's row of the next norm
        assert recs[ids["blk.0.attn_norm"]]["stats"]["nan"] == N_EMBD
    if case == "nan_q8":  # the sampler and the logit summary cope with a NaN logit
        lg = t["steps"][j]["logits"]
        assert all(np.isfinite(x["prob"]) for x in lg["top_k"]) and np.isfinite(lg["entropy"])


def _named(t: dict[str, Any]) -> tuple[str, str, int, int, int]:
    at = d.first_nonfinite(t)
    assert at is not None
    j, i = at
    s = t["steps"][j]["nodes"][i]["stats"]
    return t["steps"][j]["name"], t["nodes"][i]["name"], s["nan"], s["pos_inf"], s["neg_inf"]


def test_a_fused_node_is_named_at_its_plane_that_holds_them(traces: dict[str, Path]) -> None:
    """The first NaN/Inf of an add_rms_norm is named at its plane view that holds them (the
    norm's name here, as in the unfused graph's trace); the sum's view when both planes do (it
    comes first, as the add did); the fused node itself when its views kept no statistics."""
    node, step, nan, inf = CASES["inf_norm"]
    t = load_trace(traces["inf_norm"])
    unfused = load_trace(traces["inf_norm_unfused"])
    assert "add_rms_norm" not in {n["op"] for n in unfused["nodes"]}
    assert _named(t) == _named(unfused)
    assert _named(t)[:3] == (step, node, nan)
    by_name = {n["name"]: n for n in t["nodes"]}
    fused = by_name[by_name[node]["inputs"][0]]
    views = [n for n in t["nodes"] if n["op"] == "plane" and n["inputs"] == [fused["name"]]]
    assert [v["attrs"]["plane"] for v in views] == [0, 1] and views[1]["name"] == node
    j = [s["name"] for s in t["steps"]].index(step)
    recs = t["steps"][j]["nodes"]
    recs[views[0]["id"]]["stats"]["nan"] = 1  # the sum held one too
    assert d.first_nonfinite(t) == (j, views[0]["id"])
    for v in views:
        recs[v["id"]]["stats"] = None  # no statistics on the views
    assert d.first_nonfinite(t) == (j, fused["id"])


def test_clean_trace_is_clean(traces: dict[str, Path]) -> None:
    t = load_trace(traces["clean"])
    assert d.first_nonfinite(t) is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_diff_names_the_first_bad_node(
    case: str, traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    node, step, nan, inf = CASES[case]
    rc = main(["diff", str(traces["clean"]), str(traces[case])])
    out = capsys.readouterr()
    assert rc == 1, out  # diverged, like diff(1)
    assert "first NaN/Inf in A: none" in out.out
    assert re.search(
        rf"first NaN/Inf in B: {step} / {re.escape(node)} \(nan {nan}, \+inf \d+, -inf \d+\)",
        out.out,
    ), out.out
    assert out.err == ""
    assert main(["diff", "--json", str(traces["clean"]), str(traces[case])]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["nonfinite_a"] is None
    assert (rep["nonfinite_b"]["node"], rep["nonfinite_b"]["step"]) == (node, step)


def _texts(component: Any) -> str:
    """Every string in a Dash component tree, joined (what the page shows as text)."""
    if isinstance(component, str):
        return component
    if isinstance(component, (list, tuple)):
        return " ".join(_texts(c) for c in component)
    children = getattr(component, "children", None)
    return "" if children is None else _texts(children)


def _find(component: Any, cid: str) -> Any:
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for c in children if isinstance(children, (list, tuple)) else [children]:
        if c is not None and not isinstance(c, str):
            hit = _find(c, cid)
            if hit is not None:
                return hit
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_dashboard_names_the_first_bad_node(case: str, traces: dict[str, Path]) -> None:
    node, step, nan, inf = CASES[case]
    app = create_app([traces[case]])
    want = f"the first node whose output held a NaN or an Inf is {node} at {step}"
    for where in ("banner", "overview"):
        alert = _find(app.layout, f"nan-alert-{where}")
        assert alert is not None and want in _texts(alert), where
        assert f"({nan} NaN," in _texts(alert)
    # the server sends it (the page's layout request), and serves it again afterwards
    client = app.server.test_client()
    for _ in range(2):
        r = client.get("/_dash-layout")
        assert r.status_code == 200 and want in _strings(r.get_json())
    # the graph view coloured by NaN/Inf count shows the node
    t = load_trace(traces[case])
    ids = {n["name"]: n["id"] for n in t["nodes"]}
    j = [s["name"] for s in t["steps"]].index(step)
    assert d.measure_values(t, j, "nonfinite")[ids[node]] == nan + inf


def test_clean_dashboard_has_no_alert(traces: dict[str, Path]) -> None:
    app = create_app([traces["clean"]])
    assert _find(app.layout, "nan-alert-banner") is None
    assert "No node produced a NaN or an Inf." in _texts(_find(app.layout, "overview"))


def _post(client: Any, app: Any, output: str, inputs: list[tuple[str, str, Any]]) -> Any:
    """The request the browser sends for a server callback (Dash's /_dash-update-component)."""
    spec = app.callback_map[output]
    outs = [{"id": o.split(".")[0], "property": o.split(".")[1]}
            for o in output.strip(".").split("...")]  # fmt: skip
    body = {
        "output": output,
        "outputs": outs if output.startswith("..") else outs[0],
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [f"{i}.{p}" for i, p, _ in inputs],
        "state": [{"id": s["id"], "property": s["property"]} for s in spec.get("state", [])],
    }
    return client.post("/_dash-update-component", json=body)


def _strings(obj: Any) -> str:
    """Every string of a parsed JSON response, joined (Dash escapes "/" as \\u002f)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        return " ".join(_strings(v) for v in obj.values())
    if isinstance(obj, list):
        return " ".join(_strings(v) for v in obj)
    return ""


@pytest.mark.parametrize("case", sorted(CASES))
def test_compare_view_names_the_first_bad_node(case: str, traces: dict[str, Path]) -> None:
    """The two-trace app, through its server callback (the request the compare tab sends)."""
    node, step, nan, inf = CASES[case]
    app = create_app([traces["clean"], traces[case]])
    t = load_trace(traces[case])
    i = {n["name"]: n["id"] for n in t["nodes"]}[node]
    output = next(k for k in app.callback_map if k.startswith("..compare-summary."))
    r = _post(app.server.test_client(), app, output, [("compare-key", "data", [0, i])])
    assert r.status_code == 200, r.get_data(as_text=True)[:500]
    body = _strings(r.get_json())
    assert f"first NaN/Inf in B: {step} / {node} (nan {nan}" in body
    assert "first NaN/Inf in A: none" in body
    # the node's detail (statistics table, heatmap with its NaN cells) renders too
    output = next(k for k in app.callback_map if k.startswith("..detail-head."))
    r = _post(app.server.test_client(), app, output, [("step", "value", 0), ("node", "data", i)])
    assert r.status_code == 200 and node in _strings(r.get_json())


@pytest.mark.slow
@pytest.mark.browser
def test_browser_shows_the_alert_and_selects_the_node(traces: dict[str, Path]) -> None:
    """In headless Chromium: the banner names the first bad node; its link selects it."""
    from tests.viz.conftest import browser_missing, chromium_options

    why = browser_missing()
    if why is not None:
        pytest.skip(f"no headless browser: {why}")
    from dash.testing.application_runners import ThreadedRunner
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    node = CASES["inf_norm"][0]
    runner = ThreadedRunner()
    runner.start(create_app([traces["inf_norm"]]))
    driver = webdriver.Chrome(options=chromium_options())
    try:
        driver.get(runner.url)
        # Dash re-renders the banner while the page settles: an element found a moment ago can
        # be replaced, so every lookup (and the click) is retried until it holds.
        wait = WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,))
        wait.until(lambda drv: node in drv.find_element(By.ID, "nan-alert-banner").text)

        def click_link(drv: Any) -> bool:
            drv.find_element(By.CSS_SELECTOR, "#nan-alert-banner button").click()
            return True

        wait.until(click_link)
        wait.until(lambda drv: drv.find_element(By.ID, "detail-name").text == node)
        assert "prefill" in driver.find_element(By.ID, "detail-where").text
    finally:
        driver.quit()
        runner.stop()

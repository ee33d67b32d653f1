"""README screenshots of every dashboard view, taken by the same headless Chromium the tests use.

Opens the app over a trace (and a second one for the compare view), selects a node, and saves
one PNG per view into ``docs/img/`` (``viz-overview.png``, ``viz-graph.png``, …), so the
pictures in the README are of the app as it is. Without ``TRACE`` arguments it records the
bundled demo model twice on the NumPy backend (prefill + 6 decode steps) and compares the two.

Usage::

    .venv/bin/python scripts/screenshots.py [TRACE [TRACE_B]] [--out docs/img]
        [--node NAME] [--step N] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Import this checkout's tracekit (run as a script, sys.path[0] is scripts/, and the editable
# install's finder can then resolve `tracekit` as a bare namespace package without __init__).
sys.path.insert(0, str(ROOT))
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--hide-scrollbars",
    "--window-size=1500,950",
)
VIEWS = ("Overview", "Graph", "Timeline", "Roofline", "Tokens", "Compare")
# Hide plotly's hover toolbars: a screenshot is not hovering.
_CSS = "const s = document.createElement('style'); s.textContent = '.modebar{display:none}';"
_CSS += "document.head.appendChild(s);"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo_traces(folder: Path) -> list[Path]:
    from tracekit.runner.record import record_trace

    out = []
    for name in ("demo-a.json", "demo-b.json"):
        out.append(
            Path(
                record_trace(
                    None, steps=6, backend="numpy", output=folder / name, progress=False, nvtx=False
                )
            )
        )
    return out


def _wait(driver: Any, js: str, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if driver.execute_script(js):
            # two frames for the paint, then a little for plotly's transitions
            time.sleep(0.4)
            return
        time.sleep(0.05)
    raise RuntimeError(f"screenshot view not ready within {timeout} s: {js}")


_IDLE = "return !document.querySelector('[data-dash-is-loading=\"true\"]');"


def shoot(paths: list[Path], out: Path, node: str | None, step: int, chromium: str) -> list[Path]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from werkzeug.serving import make_server

    from tracekit.trace.format import load_trace
    from tracekit.viz.app import create_app

    trace = load_trace(paths[0])
    app = create_app(paths)
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = Options()
    opts.binary_location = chromium
    for flag in FLAGS:
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        _wait(driver, "return !!document.querySelector('#graph .main-svg');")
        driver.execute_script(_CSS)
        for _ in range(step):
            driver.find_element("css selector", "#step-next").click()
        if step:
            name = trace["steps"][step]["name"]
            _wait(
                driver,
                f"return document.querySelector('#step-info').textContent.startsWith({json.dumps(name)});",
            )
        if node is not None:
            ids = {n["name"]: n["id"] for n in trace["nodes"]}
            if node not in ids:
                raise SystemExit(f"screenshots: no node named {node!r} in {paths[0]}")
            # the same store a click sets (Dash's clientside set_props)
            driver.execute_script(
                "window.dash_clientside.set_props('node', {data: arguments[0]});", ids[node]
            )
            _wait(
                driver,
                f"return document.querySelector('#detail-name').textContent === {json.dumps(node)};",
            )
        for view in VIEWS:
            tabs = [e for e in driver.find_elements("css selector", ".tab") if e.text == view]
            if not tabs:
                continue
            tabs[0].click()
            time.sleep(0.2)
            _wait(driver, _IDLE)
            path = out / f"viz-{view.lower()}.png"
            driver.save_screenshot(str(path))
            written.append(path)
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if logs:
            raise RuntimeError(f"browser errors: {logs}")
    finally:
        driver.quit()
        server.shutdown()
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", type=Path, nargs="*", help="one or two traces (default: demo)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    p.add_argument("--node", help="node to select (default: the prefill's slowest)")
    p.add_argument("--step", type=int, default=1, help="step to show (0 = prefill)")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    args = p.parse_args(argv)
    if len(args.traces) > 2:
        p.error("one or two traces")
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        paths = list(args.traces)
        if not paths:
            _demo_traces(Path(tmp))
            # relative names, so the pictures show "demo-a.json", not a temp folder
            os.chdir(tmp)
            paths = [Path("demo-a.json"), Path("demo-b.json")]
        try:
            written = shoot(paths, out, args.node, args.step, args.chromium)
        finally:
            os.chdir(ROOT)
    for w in written:
        print(w.relative_to(ROOT) if w.is_relative_to(ROOT) else w)
    return 0


if __name__ == "__main__":
    sys.exit(main())

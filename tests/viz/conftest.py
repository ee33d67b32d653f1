"""Fixtures of the viz tests: a synthetic trace for the pure figure tests, Chromium set-up.

``make_trace`` is a TEST FIXTURE: it builds a schema-conforming trace dict programmatically
(random tensors through the real ``tensor_stats`` and ``perf.annotate``), so the figure and data
functions can be tested on shapes a recorded trace does not have (NaN from a chosen node, a
timing capture, two traces that diverge). Its times and ceilings are made up. The browser tests
use a trace recorded from the demo model instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.launch import LaunchRecord, grid_1d
from tracekit.kernels.stats import tensor_stats
from tracekit.trace.format import validate_trace
from tracekit.trace.perf import annotate, classification

CHROMIUM = Path(os.environ.get("TRACEKIT_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--window-size=1400,1000",
)

# Made-up ceilings of the synthetic trace, scaled to its tiny tensors so that all three bound
# classes occur: decode elementwise nodes launch-bound, prefill ones bandwidth-bound (intensity
# 1/8 flop/B), matmuls compute-bound (intensity 8 flop/B > ridge 4).
_CEILINGS = {
    "copy_bandwidth_Bps": 1.0e9,
    "launch_overhead_s": 2.0e-6,
    "peak_flops": 4.0e9,
    "ridge_flop_per_byte": 4.0,
    "measured_at": "2025-01-01T00:00:00Z",
    "method": "synthetic test fixture: not measured",
}

# (kind, op, family, inputs (kinds of this layer, or "prev" = the layer's input), weight?)
_LAYER = [
    ("attn_norm", "rms_norm", "norm", ["prev"], "F32"),
    ("attn_q", "matmul", "matmul", ["attn_norm"], "Q4_0"),
    ("attn_k", "matmul", "matmul", ["attn_norm"], "Q4_0"),
    ("attn_v", "matmul", "matmul", ["attn_norm"], "Q8_0"),
    ("rope_q", "rope", "rope", ["attn_q"], None),
    ("rope_k", "rope", "rope", ["attn_k"], None),
    ("attn", "attention", "attention", ["rope_q", "rope_k", "attn_v"], None),
    ("attn_output", "matmul", "matmul", ["attn"], "Q4_K"),
    ("attn_residual", "add", "elementwise", ["prev", "attn_output"], None),
    ("ffn_norm", "rms_norm", "norm", ["attn_residual"], "F32"),
    ("ffn_gate", "matmul", "matmul", ["ffn_norm"], "Q4_K"),
    ("ffn_up", "matmul", "matmul", ["ffn_norm"], "Q4_K"),
    ("ffn_act", "silu", "elementwise", ["ffn_gate"], None),
    ("ffn_mul", "mul", "elementwise", ["ffn_act", "ffn_up"], None),
    ("ffn_down", "matmul", "matmul", ["ffn_mul"], "Q6_K"),
    ("ffn_residual", "add", "elementwise", ["attn_residual", "ffn_down"], None),
]
_VOCAB = ["the", " cat", " sat", " on", " a", " mat", ".", "\n", " dog", " ran"]


def _topology(n_layer: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []

    def add(name: str, op: str, family: str, layer: int | None, inputs: list[str], wt: Any) -> None:
        nodes.append(
            dict(
                id=len(nodes),
                name=name,
                op=op,
                family=family,
                layer=layer,
                inputs=inputs,
                weight_type=wt,
            )
        )

    add("token_embd", "embed", "embed", None, ["weight:token_embd.weight"], "Q8_0")
    prev = "token_embd"
    for L in range(n_layer):
        for kind, op, fam, ins, wt in _LAYER:
            names = [prev if x == "prev" else f"blk.{L}.{x}" for x in ins]
            if wt:
                names.append(f"weight:blk.{L}.{kind}.weight")
            add(f"blk.{L}.{kind}", op, fam, L, names, wt)
        prev = f"blk.{L}.ffn_residual"
    add("output_norm", "rms_norm", "norm", None, [prev, "weight:output_norm.weight"], "F32")
    add("output", "matmul", "matmul", None, ["output_norm", "weight:output.weight"], "Q8_0")
    return nodes


def _width(node: dict[str, Any], n_embd: int) -> int:
    if node["name"] == "output":
        return len(_VOCAB)
    if node["op"] in ("silu", "mul") or node["name"].endswith(("ffn_gate", "ffn_up")):
        return 3 * n_embd
    return n_embd


def make_trace(
    n_layer: int = 2,
    n_decode: int = 2,
    n_prompt: int = 4,
    n_embd: int = 32,
    nan_from: str | None = None,
    capture: str = "full",
    seed: int = 0,
    scale: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A schema-valid synthetic trace (test fixture; numbers are random, ceilings made up).

    Args:
        n_layer, n_decode, n_prompt, n_embd: model and run size.
        nan_from: a node name; its output and every later node's output holds a NaN from the
            first decode step on (prefill stays finite), so the first non-finite record is
            (step 1, that node).
        capture: ``full`` (statistics on every node) or ``timing`` (``stats`` null).
        seed: the random seed (same seed, same values: two traces compare equal).
        scale: node name -> factor applied to its output from that node on in execution order
            (to make a second trace diverge at a known node).
    """
    rng = np.random.default_rng(seed)
    nodes = _topology(n_layer)
    steps = []
    tokens = list(range(n_prompt))
    for j in range(n_decode + 1):
        nt = n_prompt if j == 0 else 1
        poisoned = False
        factor = 1.0
        recs = []
        for n in nodes:
            w = _width(n, n_embd)
            x = rng.standard_normal((nt, w)).astype(np.float32)
            if scale and n["name"] in scale:
                factor = scale[n["name"]]
            x *= factor
            if nan_from is not None and j >= 1 and n["name"] == nan_from:
                poisoned = True
            if poisoned:
                x[0, 0] = np.nan
                x[-1, -1] = np.inf
            k = n_embd if n["op"] == "matmul" else 0
            geo = grid_1d(nt * w)
            launch = LaunchRecord.of(
                f"{n['op']}_f32",
                geo,
                reads=[x] * max(1, len(n["inputs"])),
                writes=[x],
                flops=2 * nt * w * k if k else nt * w,
            )
            c = _CEILINGS
            t = max(
                c["launch_overhead_s"] * rng.uniform(1.0, 2.0),
                (launch.bytes_read + launch.bytes_written)
                / c["copy_bandwidth_Bps"]
                * rng.uniform(1.2, 3.0),
                launch.flops / c["peak_flops"] * rng.uniform(1.2, 3.0),
            )
            cost = float(rng.uniform(1.0, 1.5))
            host = t * 1.1
            recs.append(
                dict(
                    id=n["id"],
                    shape=[nt, w],
                    dtype="f32",
                    time_s=t,
                    timing_time_s=t,
                    full_time_s=None if capture == "timing" else t * 1.02,
                    host_s=host,
                    full_host_s=None if capture == "timing" else host * cost,
                    capture_cost=None if capture == "timing" else cost,
                    launches=[launch.to_json()],
                    perf=annotate([launch], t, _CEILINGS),
                    stats=None if capture == "timing" else tensor_stats(x, ("tokens", "features")),
                )
            )
        p = rng.dirichlet(np.ones(len(_VOCAB)))
        order = np.argsort(-p)[:5]
        top = [dict(id=int(i), text=_VOCAB[i], prob=float(p[i])) for i in order]
        logits = rng.standard_normal(len(_VOCAB))
        counts, edges = np.histogram(logits, bins=8)
        steps.append(
            dict(
                index=j,
                kind="prefill" if j == 0 else "decode",
                name="prefill" if j == 0 else f"decode {j}",
                n_tokens=nt,
                n_past=0 if j == 0 else n_prompt + j - 1,
                input_tokens=tokens[-nt:],
                wall_s=sum(r["time_s"] for r in recs) * 1.2,
                full_wall_s=None if capture == "timing" else sum(r["time_s"] for r in recs) * 1.5,
                gpu_s=sum(r["time_s"] for r in recs),
                nodes=recs,
                logits=dict(
                    top_k=top,
                    entropy=float(-(p * np.log(p)).sum()),
                    hist=dict(edges=edges.tolist(), counts=counts.tolist()),
                    chosen=dict(id=top[0]["id"], text=top[0]["text"]),
                ),
            )
        )
        tokens.append(top[0]["id"])
    trace = dict(
        format="tracekit-trace",
        version=1,
        complete=True,
        created="2025-01-01T00:00:00Z",
        tool=dict(name="tracekit", version="0.1.0"),
        model=dict(
            name="synthetic-fixture",
            path=None,
            architecture="llama",
            n_layer=n_layer,
            n_embd=n_embd,
            n_head=4,
            n_head_kv=2,
            head_dim=n_embd // 4,
            n_ff=3 * n_embd,
            n_vocab=len(_VOCAB),
            n_ctx=64,
            file_bytes=0,
            tensor_types={"Q4_K": 4 * n_layer},
        ),
        run=dict(
            backend="numpy",
            device="synthetic",
            capture=capture,
            cuda_graph=False,
            nvtx=False,
            prompt="the cat",
            prompt_tokens=tokens[:n_prompt],
            steps_requested=n_decode,
            sampling=dict(mode="greedy"),
            generated_tokens=tokens[n_prompt:],
            generated_text="".join(s["logits"]["chosen"]["text"] for s in steps),
        ),
        ceilings=dict(_CEILINGS),
        classification=classification(_CEILINGS),
        nodes=nodes,
        steps=steps,
    )
    return validate_trace(trace, source="make_trace fixture")


@pytest.fixture(scope="session")
def small_trace() -> dict[str, Any]:
    return make_trace()


# -- Chromium for dash.testing ---------------------------------------------------------------
def chromium_options() -> Any:
    """Selenium Chrome options for the system's headless Chromium (Debian ``chromium``)."""
    from selenium.webdriver.chrome.options import Options

    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    return opts


def pytest_setup_options() -> Any:
    # dash.testing's hook: the options its `dash_duo` fixture starts Chrome with.
    return chromium_options()


def browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is absent (apt-get install chromium chromium-driver)"
    if shutil.which("chromedriver") is None:
        return "chromedriver is not on PATH (apt-get install chromium-driver)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = browser_missing()
    if why is None:
        return
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"no headless browser: {why}"))


# -- a trace recorded from the demo model (the app and browser tests use this one) -----------
@pytest.fixture(scope="session")
def demo_trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prefill + 3 decode steps of the bundled demo model on the NumPy backend, written by
    ``record_trace`` (the real recorder: measured ceilings, real statistics)."""
    from tracekit.runner.record import record_trace

    out = tmp_path_factory.mktemp("traces") / "demo-numpy.json"
    return Path(
        record_trace(None, steps=3, backend="numpy", output=out, progress=False, nvtx=False)
    )


@pytest.fixture(scope="session")
def demo_trace(demo_trace_path: Path) -> dict[str, Any]:
    from tracekit.trace.format import load_trace

    return load_trace(demo_trace_path)


@pytest.fixture(scope="session")
def load_trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model on NumPy with ``--matmul f16 --w16-cache on``: a trace with a load phase
    (one dequant node per matmul weight), prefill + 2 decode steps."""
    from tracekit.runner.record import record_trace

    out = tmp_path_factory.mktemp("traces") / "demo-load.json"
    return Path(
        record_trace(None, tokens=[1, 2, 3], steps=2, backend="numpy", matmul="f16",
                     w16_cache="on", output=out, progress=False, nvtx=False)
    )  # fmt: skip


@pytest.fixture(scope="session")
def load_trace(load_trace_path: Path) -> dict[str, Any]:
    from tracekit.trace.format import load_trace as read

    return read(load_trace_path)

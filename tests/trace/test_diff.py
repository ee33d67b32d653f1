"""tracekit diff: finds a planted divergence and a planted NaN, and nothing in identical traces."""

from __future__ import annotations

import base64
import copy

import numpy as np
import pytest

from tests.trace.test_format import make_trace
from tracekit.trace.diff import diff_traces


def test_identical_traces_do_not_diverge() -> None:
    t = make_trace()
    r = diff_traces(t, copy.deepcopy(t))
    assert not r.diverged and r.first_divergence is None
    assert r.node_records_compared == len(t["nodes"]) * len(t["steps"])
    assert r.nonfinite_a is None and r.nonfinite_b is None
    assert "first divergence: none within tolerance" in r.text()


def test_planted_divergence_is_found_with_its_numbers() -> None:
    a = make_trace()
    b = copy.deepcopy(a)
    rec = b["steps"][1]["nodes"][4]
    rec["stats"]["mean"] += 0.01 * rec["stats"]["absmax"]  # 1% of the tensor's magnitude
    b["steps"][2]["nodes"][2]["stats"]["max"] += 1.0  # a later one must not be reported first
    r = diff_traces(a, b, rtol=1e-3, atol=1e-5)
    d = r.first_divergence
    assert r.diverged and d is not None
    assert (d.step, d.node, d.metric) == ("decode 1", a["nodes"][4]["name"], "mean")
    assert d.tolerance == pytest.approx(1e-5 + 1e-3 * rec["stats"]["absmax"])
    assert f"decode 1 / {a['nodes'][4]['name']}: mean" in r.text()
    # within a looser tolerance the same change passes
    assert diff_traces(a, b, rtol=0.02).first_divergence.step == "decode 2"


def test_rounding_sized_differences_pass() -> None:
    a = make_trace()
    b = copy.deepcopy(a)
    for s in b["steps"]:
        for rec in s["nodes"]:
            for k in ("min", "max", "mean", "std", "absmax"):
                rec["stats"][k] *= 1 + 1e-6
    assert not diff_traces(a, b).diverged


def test_heatmap_divergence_is_found() -> None:
    a = make_trace()
    b = copy.deepcopy(a)
    hm = b["steps"][0]["nodes"][3]["stats"]["heatmap"]
    codes = bytearray(base64.b64decode(hm["codes"]))
    codes[7] = (codes[7] + 128) % 255  # half the value range away
    hm["codes"] = base64.b64encode(bytes(codes)).decode()
    d = diff_traces(a, b).first_divergence
    assert d is not None and d.node == a["nodes"][3]["name"] and d.metric.startswith("heatmap cell")


def _plant_nan(t: dict, step: int, start: int, count: int) -> None:
    for rec in t["steps"][step]["nodes"][start : start + count]:
        s = rec["stats"]
        s["nan"] = 3
        hm = s["heatmap"]
        codes = np.frombuffer(base64.b64decode(hm["codes"]), np.uint8).copy()
        codes[0] = 255
        hm["codes"] = base64.b64encode(codes.tobytes()).decode()


def test_planted_nan_first_node_and_spread() -> None:
    a = make_trace(n_layer=2, n_decode=3)
    b = copy.deepcopy(a)
    _plant_nan(b, 1, 5, 4)  # decode 1: nodes 5..8 hold NaN
    _plant_nan(b, 3, 0, 1)  # and one node of decode 3
    r = diff_traces(a, b)
    assert r.nonfinite_a is None
    nf = r.nonfinite_b
    assert nf is not None and (nf.step, nf.node, nf.nan) == ("decode 1", b["nodes"][5]["name"], 3)
    assert nf.later_in_step == 3 and nf.nodes_after_in_step == len(b["nodes"]) - 6
    assert nf.later_steps_affected == 1
    assert r.first_divergence is not None and r.first_divergence.metric == "nan"
    assert f"first NaN/Inf in B: decode 1 / {b['nodes'][5]['name']}" in r.text()


def test_token_mismatch_and_step_count() -> None:
    a = make_trace(n_decode=3)
    b = copy.deepcopy(a)
    b["steps"][2]["logits"]["chosen"]["id"] += 1
    b["steps"].pop()
    r = diff_traces(a, b)
    assert r.first_token_mismatch == ("decode 2", a["steps"][2]["logits"]["chosen"]["id"],
                                      a["steps"][2]["logits"]["chosen"]["id"] + 1)  # fmt: skip
    assert r.steps_compared == 3 and any("comparing 3" in n for n in r.notes)


def test_timing_traces_are_noted() -> None:
    r = diff_traces(make_trace(stats=False), make_trace(stats=False))
    assert r.node_records_compared == 0 and any("timing capture" in n for n in r.notes)


def test_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        diff_traces(make_trace(), make_trace(), rtol=-1)


# -- calibrated tolerances and the largest deviation (issue 15) --------------------------------
def test_tolerance_is_calibrated_per_path() -> None:
    from tracekit.trace.diff import PATHS, run_path

    cpu = make_trace()
    gpu = copy.deepcopy(cpu)
    gpu["run"]["backend"] = "cupy"
    assert run_path(cpu) == "f32-cpu" and run_path(gpu) == "f16-gemm-gpu"
    r = diff_traces(cpu, copy.deepcopy(cpu))
    assert (r.rtol, r.atol, r.path.name) == (
        PATHS["f32-cpu"].rtol,
        PATHS["f32-cpu"].atol,
        "f32-cpu",
    )
    r = diff_traces(gpu, cpu)  # the looser path of the pair
    assert r.path.name == "f16-gemm-gpu" and r.rtol == PATHS["f16-gemm-gpu"].rtol
    assert r.text().startswith("path: f16-gemm-gpu (calibration: ")
    m = copy.deepcopy(gpu)
    m["run"]["matmul"] = "quant"  # a quant-path trace from before mmvq: f32 decode (matvec_*)
    assert run_path(m) == "f16-gemm-gpu"
    q = copy.deepcopy(m)  # one that ran mmvq: 8-bit activations
    q["steps"][-1]["nodes"][0]["launches"] = [{"kernel": "mmvq_q4_k_n1"}]
    assert run_path(q) == "quant-act-gpu"
    qm = copy.deepcopy(q)  # --matmul mmq: the same 8-bit activations (mmq in its prefill)
    qm["run"]["matmul"] = "mmq"
    qm["steps"][0]["nodes"][0]["launches"] = [{"kernel": "mmq_q4_k"}]
    assert run_path(qm) == "quant-act-gpu"
    # two runs of the quant path, GPU and the NumPy backend's ref_mmvq: the same roundings,
    # but a flipped 8-bit code drifts as far as the quantization (the quant-act logits
    # tolerance); a node's own error is held to the f16 path's tensor tolerance
    qc = copy.deepcopy(q)
    qc["run"]["backend"] = "numpy"
    pair = diff_traces(q, qc)
    assert pair.path.name == "quant-act-pair" and pair.rtol == 0.35
    assert PATHS["quant-act-pair"].tensor_rtol == PATHS["f16-gemm-gpu"].tensor_rtol
    r = diff_traces(q, cpu)  # calibrated on the H200 against CPU f32 recordings
    assert r.path.name == "quant-act-gpu" and r.rtol == PATHS["quant-act-gpu"].rtol == 0.35
    assert diff_traces(q, cpu, rtol=1e-2).rtol == 1e-2


def test_largest_deviation_is_always_reported() -> None:
    a = make_trace()
    b = copy.deepcopy(a)
    rec = b["steps"][2]["nodes"][5]
    rec["stats"]["std"] += 0.3e-3 * rec["stats"]["absmax"]  # within rtol 1e-3: no divergence
    r = diff_traces(a, b, rtol=1e-3, atol=1e-5)
    assert not r.diverged and r.largest is not None
    assert (r.largest.step, r.largest.node, r.largest.metric) == (
        b["steps"][2]["name"], a["nodes"][5]["name"], "std"
    )  # fmt: skip
    assert 0.25 < r.largest.fraction < 0.35
    assert f"largest deviation: {b['steps'][2]['name']} / {a['nodes'][5]['name']}: std" in r.text()
    same = diff_traces(a, copy.deepcopy(a))
    assert same.largest is None and "largest deviation: none" in same.text()
    # past the first divergence the largest is still looked for
    b["steps"][0]["nodes"][1]["stats"]["mean"] += (
        0.01 * b["steps"][0]["nodes"][1]["stats"]["absmax"]
    )
    rec["stats"]["std"] += 0.5 * rec["stats"]["absmax"]
    r = diff_traces(a, b, rtol=1e-3, atol=1e-5)
    assert (
        r.first_divergence.node == a["nodes"][1]["name"] and r.largest.node == a["nodes"][5]["name"]
    )


def test_quant_path_vs_f16_path_shows_where_and_how_much(tmp_path) -> None:
    """Issue 13 item 3 on the CPU: the same prompt through the quant path (8-bit activations,
    ref_mmvq) and the f16 path (dequant per call, f16 operands): the diff names the quant-act
    calibration, finds no divergence at it, and reports the largest deviation at a node
    downstream of a matmul with a nonzero size; a tighter tolerance makes the first divergence
    a matmul's or after one (the 3-token prefill is a matvec too: <= MAX_NT tokens)."""
    from tracekit.cli import main
    from tracekit.trace.format import load_trace

    paths = {}
    for mode in ("quant", "f16"):
        out = tmp_path / f"{mode}.json"
        args = ["record-trace", "--backend", "numpy", "--matmul", mode, "--w16-cache", "off",
                "--prompt", "The kernel reads", "--steps", "3", "--no-progress", "-o", str(out)]  # fmt: skip
        assert main(args) == 0
        paths[mode] = load_trace(out)
    q, f = paths["quant"], paths["f16"]
    r = diff_traces(q, f)
    assert r.path.name == "quant-act-gpu" and not r.diverged, r.text()
    assert r.largest is not None and 0.0 < r.largest.fraction < 1.0
    tight = diff_traces(q, f, rtol=1e-3)
    assert tight.diverged
    order = [n["name"] for n in q["nodes"]]
    ops = {n["name"]: n["op"] for n in q["nodes"]}
    first = tight.first_divergence
    i = order.index(first.node)
    assert any(ops[n] == "matmul" for n in order[: i + 1]), tight.text()


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_a_glu_nodes_input_differences_bound_its_output_difference(act: str) -> None:
    """tracekit diff judges a glu node (act(g) u of x = [g | u]) element by element: the bound it
    derives from the input's differences covers what the op makes of them (it could fail if
    |act(g)| <= |g| or the 1.2 slope were wrong), and is 0 for identical inputs."""
    from tracekit.kernels import elementwise
    from tracekit.trace import diff

    f = {"silu": elementwise._silu, "gelu_tanh": elementwise._gelu_tanh}[act]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 2 * 37)).astype(np.float32) * 4
    b = a + rng.standard_normal(a.shape).astype(np.float32) * np.float32(1e-2)

    def glu(x: np.ndarray) -> np.ndarray:
        return f(x[:, :37].astype(np.float64)) * x[:, 37:]

    bound = diff._explained("glu", {"act": act}, [(a.astype(np.float64), b.astype(np.float64))])
    assert bound.shape == (5, 37)
    assert (np.abs(glu(a) - glu(b)) <= bound + 1e-12).all()
    assert not diff._explained("glu", {}, [(a.astype(np.float64), a.astype(np.float64))]).any()

"""The trace's ``load`` phase: the w16 cache's warm-up, one node per weight (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.runner.record import record_trace
from tracekit.trace.format import TraceError, load_trace

CEIL = {"copy_bandwidth_Bps": 1e10, "launch_overhead_s": 1e-6, "peak_flops": 1e11}


def _trace(tmp_path: Path, name: str, **kw) -> Path:
    return record_trace(None, tokens=[1, 2, 3], steps=1, backend="numpy", progress=False,
                        nvtx=False, ceilings=CEIL, output=tmp_path / name, **kw)  # fmt: skip


def test_a_warmed_w16_cache_is_a_load_phase_of_dequant_nodes(tmp_path: Path) -> None:
    t = load_trace(_trace(tmp_path, "on.json", matmul="f16", w16_cache="on"))
    mm = {
        i.removeprefix("weight:")
        for n in t["nodes"]
        if n["op"] == "matmul"
        for i in n["inputs"]
        if i.startswith("weight:") and i.removeprefix("weight:") != n["attrs"].get("bias")
    }  # a projection's bias is a vector, not a matmul weight
    load = t["load"]
    assert {n["weight"] for n in load["nodes"]} == mm
    total = 0.0
    for n in load["nodes"]:
        (la,) = n["launches"]
        assert la["kernel"] == f"dequant_{n['weight_type'].lower()}_f16"
        assert la["extra"]["path"] == "f16-cached"
        rows, cols = n["shape"]
        assert la["bytes_written"] == 2 * rows * cols  # the f16 copy
        assert n["time_s"] > 0 and n["perf"]["bytes"] == la["bytes_read"] + la["bytes_written"]
        total += n["time_s"]
    assert total <= load["seconds"]
    # the steps then read the cache: no dequant in any matmul node
    for s in t["steps"]:
        for r in s["nodes"]:
            assert not any(la["kernel"].startswith("dequant_") for la in r["launches"])


def test_no_load_phase_without_the_cache(tmp_path: Path) -> None:
    assert "load" not in load_trace(_trace(tmp_path, "off.json", matmul="f16", w16_cache="off"))
    assert "load" not in load_trace(_trace(tmp_path, "f32.json"))


def test_the_schema_checks_the_load_phase(tmp_path: Path) -> None:
    p = _trace(tmp_path, "on.json", matmul="f16", w16_cache="on")
    t = json.loads(p.read_text())
    t["load"]["nodes"][0]["time_s"] = "fast"
    p.write_text(json.dumps(t))
    with pytest.raises(TraceError, match="load"):
        load_trace(p)


def test_a_fused_projection_is_one_load_node(tmp_path: Path) -> None:
    """A fused weight (runner/graph.py fusion_plan) is warmed once, under its fused name, with
    its parts' rows stacked; its parts are not nodes of the load phase."""
    from gguf import GGMLQuantizationType as T

    from tracekit.model.synthetic import SPECS, write_synthetic_model

    types = {**SPECS["qwen2"].types, **{r: T.Q8_0 for r in ("attn_q", "attn_k", "attn_v")}}
    p = write_synthetic_model(tmp_path / "q.gguf", "qwen2", seed=1, types=types)
    out = record_trace(p, tokens=[1, 2, 3], steps=1, backend="numpy", progress=False,
                       nvtx=False, ceilings=CEIL, output=tmp_path / "f.json", matmul="f16",
                       w16_cache="on")  # fmt: skip
    t = load_trace(out)
    nodes = {n["weight"]: n for n in t["load"]["nodes"]}
    cfg = t["model"]
    q, kv = cfg["n_head"] * cfg["head_dim"], cfg["n_head_kv"] * cfg["head_dim"]
    for il in range(cfg["n_layer"]):
        n = nodes[f"blk.{il}.attn_qkv.weight"]
        assert n["shape"] == [q + 2 * kv, cfg["n_embd"]] and n["weight_type"] == "Q8_0"
        assert not {f"blk.{il}.attn_{p}.weight" for p in "qkv"} & set(nodes)
        assert f"blk.{il}.ffn_gate.weight" in nodes  # IQ4_NL and Q2_K: kept apart

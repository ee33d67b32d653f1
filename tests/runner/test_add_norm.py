"""A residual add and the rms_norm that reads it as one node (runner/graph.py ``fuse_add_norms``):
``blk.N.<add>_norm`` (op ``add_rms_norm``, [2, nt, e]) and the two views of its planes, named as
the unfused add and norm. CPU, NumPy backend; the GPU variant is test_add_norm_gpu.py, whose
checks run here on NumPy too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tests.runner.test_fusion import PROMPT, ROLES, _file, logged_steps
from tracekit.model.demo import write_demo_model
from tracekit.runner.execute import Session, load_model
from tracekit.runner.graph import build_graph, fuse_add_norms, overwritten_in_place
from tracekit.trace.format import load_trace

ARCHS = Path(__file__).resolve().parent.parent / "data" / "archs"
STEPS = 4


def without_add_norm(m: Any) -> Any:
    """``m`` with the graph before add_rms_norm: an add node and an rms_norm node per pair."""
    types = {n: t.qtype.name for n, t in m.tensors.items()}
    m.graph = build_graph(m.config, types, fuse=m.fuse, add_norm=False)
    return m


def run(
    m: Any, matmul: str, backend: str = "numpy"
) -> tuple[np.ndarray, list[dict[str, list[str]]], list[dict[str, int]]]:
    """Logits of the prefill (every position) and STEPS greedy decode steps through the dispatch
    chain on ``backend``'s ``matmul`` path, each step's kernels per node and each step's output
    pointer per node."""
    s = Session(m, m.backend(backend, matmul), n_ctx=len(PROMPT) + STEPS, replay="off")
    ptrs: list[dict[str, int]] = []
    logits, launched = logged_steps(s, STEPS, ptrs)
    return logits, launched, ptrs


def check(path: Path, matmul: str, backend: str) -> None:
    """The add_rms_norm graph against the graph of separate add and rms_norm nodes on
    ``backend`` (cupy in test_add_norm_gpu.py): the logits bit for bit over a prefill and STEPS
    decode steps, one launch fewer per fused pair on every step, each pair's one launch, and the
    planes views of the fused output (pointers into it) that the next nodes read in place."""
    m, before = load_model(path), without_add_norm(load_model(path))
    c, n = m.config, m.config.n_layer
    fused = [x for x in m.graph if x.op == "add_rms_norm"]
    pairs = 2 * n - 1  # every residual add but the last layer's (read by gather_rows)
    assert len(fused) == pairs and not any(x.op == "add_rms_norm" for x in before.graph)
    assert len(m.graph) == len(before.graph) + pairs
    got, launched, ptrs = run(m, matmul, backend)
    want, launched_before, _ = run(before, matmul, backend)
    # the same f32 add, then the norm's arithmetic on the same sums: bits
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    for step in range(STEPS + 1):
        now, then = launched[step], launched_before[step]
        nt = len(PROMPT) if step == 0 else 1
        assert sum(map(len, then.values())) - sum(map(len, now.values())) == pairs
        p = ptrs[step]
        for f in fused:
            add, norm = f.name.removesuffix("_norm"), m.graph.consumers(f.name)[1]
            assert m.graph.consumers(f.name) == [add, norm]
            assert now[f.name] == ["add_rms_norm_f32"]
            assert then[add] == ["add_f32"] and then[norm] == ["rms_norm_f32"]
            assert now[add] == now[norm] == []  # views: no launch on any step
            assert p[add] == p[f.name] and p[norm] == p[f.name] + 4 * nt * c.n_embd


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("addnorm")
    return {
        "qwen2": _file(d, "qwen2", **{r: T.Q8_0 for r in ROLES}),  # biases (in the matmul)
        "qwen2-mixed": _file(d, "qwen2"),  # nothing fused but the adds and norms
        "llama3": ARCHS / "llama3" / "llama3-q8_0.gguf",
        "phi3": ARCHS / "phi3" / "phi3-q8_0.gguf",
        "gemma2": ARCHS / "gemma2" / "gemma2-q8_0.gguf",  # post norms, soft-caps
        "gemma2-f32": ARCHS / "gemma2" / "gemma2-f32.gguf",
        "demo": write_demo_model(d / "demo.gguf"),
    }


@pytest.mark.parametrize("matmul", ["f32", "quant"])
@pytest.mark.parametrize(
    "name", ["qwen2", "qwen2-mixed", "llama3", "phi3", "gemma2", "gemma2-f32", "demo"]
)
def test_add_norm_logits_equal_the_unfused_graphs_bit_for_bit(
    files: dict[str, Path], name: str, matmul: str
) -> None:
    check(files[name], matmul, "numpy")


def test_add_norm_nodes(files: dict[str, Path]) -> None:
    m = load_model(files["gemma2"])
    c, g = m.config, m.graph
    f = g["blk.0.attn_residual_norm"]
    assert (f.op, f.family, f.layer, f.shape) == ("add_rms_norm", "norm", 0, (2, "nt", c.n_embd))
    # the add's inputs (gemma2: the post-attention norm and the residual), then the norm's weight
    assert f.inputs == ("blk.0.post_attention_norm", "token_embd.scale",
                        "weight:blk.0.ffn_norm.weight")  # fmt: skip
    assert f.attrs == {"eps": c.rms_eps} and f.weight_type == "F32"
    a, y = g["blk.0.attn_residual"], g["blk.0.ffn_norm"]
    assert (a.op, a.attrs, a.inputs, a.shape) == (
        "plane",
        {"plane": 0},
        (f.name,),
        ("nt", c.n_embd),
    )
    assert (y.op, y.attrs, y.inputs) == ("plane", {"plane": 1}, (f.name,))
    # the sum's other reader, the next residual add (here fused with layer 1's attn_norm)
    assert g["blk.0.ffn_residual_norm"].data_inputs == ("blk.0.post_ffw_norm", a.name)
    assert g["blk.1.attn_norm"].inputs == ("blk.0.ffn_residual_norm",)
    assert g["blk.1.attn_norm"].layer == 1  # where the norm was
    # the last residual is gathered before the output norm: an add still
    last = g[f"blk.{c.n_layer - 1}.ffn_residual"]
    assert last.op == "add" and g.consumers(last.name) == ["output_rows"]
    # per-head Q/K norms and the post norms read no add: untouched
    assert g["blk.0.post_attention_norm"].op == "rms_norm"
    qwen3 = load_model(ARCHS / "qwen3" / "qwen3-q8_0.gguf").graph
    assert qwen3["blk.0.attn_q_norm"].op == "rms_norm" and qwen3["blk.0.attn_q_norm"].attrs["heads"]
    assert qwen3["blk.0.ffn_norm"].op == "plane"


def test_add_norm_off_is_the_graph_before(files: dict[str, Path]) -> None:
    m = load_model(files["llama3"])
    types = {n: t.qtype.name for n, t in m.tensors.items()}
    plain = build_graph(m.config, types, add_norm=False)
    assert not any(x.op in ("add_rms_norm", "plane") for x in plain)
    assert plain["blk.0.attn_residual"].op == "add" and plain["blk.0.ffn_norm"].op == "rms_norm"
    # the fused graph is the plain one with the pairs rewritten: nothing else moves
    assert [x.to_json() for x in fuse_add_norms(list(plain))] == m.graph.to_json()
    # fuse=False (--fuse off) is the graph of no fusion at all, add_norm=True forces it
    assert not any(x.op == "add_rms_norm" for x in load_model(files["llama3"], fuse=False).graph)
    forced = build_graph(m.config, types, fuse=False, add_norm=True)
    assert forced["blk.0.attn_residual_norm"].op == "add_rms_norm"


def test_a_norm_of_two_inputs_or_of_heads_is_not_fused(files: dict[str, Path]) -> None:
    from dataclasses import replace

    plain = list(build_graph(load_model(files["demo"]).config, add_norm=False))
    i = next(k for k, x in enumerate(plain) if x.name == "blk.0.ffn_norm")
    for changed in ({"attrs": {**plain[i].attrs, "heads": 2}}, {"shape": ("nt", 2, 32)}):
        nodes = [*plain[:i], replace(plain[i], **changed), *plain[i + 1 :]]
        out = fuse_add_norms(nodes)
        assert "blk.0.attn_residual_norm" not in {x.name for x in out}
        assert len(out) == len(nodes) + sum(x.op == "add_rms_norm" for x in out)


def test_no_in_place_writer_reads_a_plane_and_a_pair_with_one_stays_apart(
    files: dict[str, Path],
) -> None:
    from dataclasses import replace

    for name in ("qwen2", "llama3", "phi3", "gemma2", "demo"):
        g = load_model(files[name]).graph
        assert not any(x.attrs.get("inplace") and g[x.data_inputs[0]].op == "plane" for x in g)
    plain = list(build_graph(load_model(files["demo"]).config, add_norm=False))
    k = next(i for i, x in enumerate(plain) if x.data_inputs[:1] == ("blk.0.ffn_norm",))
    writer = replace(plain[k], attrs={**plain[k].attrs, "inplace": True})
    out = {x.name: x.op for x in fuse_add_norms([*plain[:k], writer, *plain[k + 1 :]])}
    assert out["blk.0.attn_residual"] == "add" and out["blk.0.ffn_norm"] == "rms_norm"
    assert out["blk.0.ffn_residual"] == "plane"  # the other pairs are fused still


def test_an_in_place_write_into_a_plane_marks_the_fused_node(files: dict[str, Path]) -> None:
    from dataclasses import replace

    g = list(load_model(files["demo"]).graph)
    assert not any(overwritten_in_place(g))
    # a reader of the normed plane that writes its input in place writes the fused node's
    # buffer: both must be copied for statistics right after they ran
    k = next(i for i, x in enumerate(g) if x.data_inputs[:1] == ("blk.0.ffn_norm",))
    writer = replace(g[k], attrs={**g[k].attrs, "inplace": True})
    over = overwritten_in_place([*g[:k], writer, *g[k + 1 :]])
    assert {g[i].name for i, o in enumerate(over) if o} == {
        "blk.0.ffn_norm", "blk.0.attn_residual_norm"
    }  # fmt: skip


def test_the_op_arms_check_their_inputs(files: dict[str, Path]) -> None:
    from tracekit.kernels.backend import get_backend
    from tracekit.runner.ops import OpError, StepContext, add_rms_norm, plane

    m = load_model(files["demo"])
    e = m.config.n_embd
    be = get_backend("numpy")
    st = StepContext(0, 2, 1, {}, [], [], m.weights(m.backend("numpy")))
    node = m.graph["blk.0.attn_residual_norm"]
    x = np.ones((2, e), np.float32)
    with pytest.raises(OpError, match=rf"node blk.0.attn_residual_norm \(add_rms_norm\): inputs "
                       rf"have shapes \(2, {e}\) and \(3, {e}\)"):  # fmt: skip
        add_rms_norm(be, node, st, x, np.ones((3, e), np.float32))
    with pytest.raises(OpError, match=rf"input \(2, 7\) is not \[nt, {e}\]"):
        add_rms_norm(be, node, st, x[:, :7].copy(), x[:, :7].copy())
    out = add_rms_norm(be, node, st, x, x)
    be.take_records()
    view = m.graph["blk.0.ffn_norm"]
    y = plane(be, view, st, out)
    assert np.shares_memory(y, out) and y.flags.c_contiguous and be.take_records() == []
    np.testing.assert_array_equal(y, out[1])
    with pytest.raises(OpError, match=r"node blk.0.ffn_norm \(plane\): input \(2, 64\) has no "
                       r"plane 1"):  # fmt: skip
        plane(be, view, st, np.zeros((2, 64), np.float32))


@pytest.mark.parametrize("capture", ["full", "timing"])
def test_trace_of_add_norm_pairs_with_the_unfused_trace(
    files: dict[str, Path], tmp_path: Path, capture: str
) -> None:
    """A trace of the fused graph validates, its views have no launches and (full) the
    statistics of the plane they show; against a trace of the graph before, ``tracekit diff``
    pairs every node of that graph by name (the views with the add and the norm) and finds
    nothing (bit for bit on the f32 path)."""
    from tracekit.kernels.stats import tensor_stats
    from tracekit.runner.record import compact_stats, heatmap_axes, record_trace
    from tracekit.trace.diff import diff_traces
    from tracekit.trace.tensors import load_tensors, step_key

    def rec(m: Any, out: Path) -> dict[str, Any]:
        path = record_trace(m, tokens=PROMPT, steps=2, backend="numpy", capture=capture,
                            output=out, progress=False, nvtx=False,
                            dump=r"blk\.[01]\..*" if capture == "full" else None)  # fmt: skip
        return load_trace(path), path

    m = load_model(files["qwen2"])
    (t, tp), (u, up) = (
        rec(m, tmp_path / "f.json"),
        rec(without_add_norm(load_model(files["qwen2"])), tmp_path / "u.json"),
    )
    ops = {x["name"]: x["op"] for x in t["nodes"]}
    assert ops["blk.0.attn_residual_norm"] == "add_rms_norm" and ops["blk.0.ffn_norm"] == "plane"
    names = {x["name"] for x in u["nodes"]}
    assert names == {x for x in ops if ops[x] != "add_rms_norm"}
    for j, step in enumerate(t["steps"]):
        recs = dict(zip(ops, step["nodes"], strict=True))
        nt = len(PROMPT) if j == 0 else 1
        assert [la["kernel"] for la in recs["blk.0.attn_residual_norm"]["launches"]] == [
            "add_rms_norm_f32"
        ]
        assert recs["blk.0.attn_residual_norm"]["shape"] == [2, nt, t["model"]["n_embd"]]
        for v in ("blk.0.attn_residual", "blk.0.ffn_norm"):
            assert recs[v]["launches"] == [] and recs[v]["shape"] == [nt, t["model"]["n_embd"]]
    if capture != "full":
        return
    ta, tb = load_tensors(t, tp), load_tensors(u, up)
    assert ta is not None and tb is not None
    for j in range(3):
        both = ta[step_key(j, "blk.0.attn_residual_norm")]
        for p, v in enumerate(("blk.0.attn_residual", "blk.0.ffn_norm")):
            np.testing.assert_array_equal(ta[step_key(j, v)], both[p])
            np.testing.assert_array_equal(ta[step_key(j, v)], tb[step_key(j, v)])
    # the statistics of a view are those of its plane
    want = compact_stats(tensor_stats(both[1], axes=heatmap_axes(m.graph["blk.0.ffn_norm"])))
    assert t["steps"][2]["nodes"][list(ops).index("blk.0.ffn_norm")]["stats"] == want
    r = diff_traces(t, u, tensors_a=ta, tensors_b=tb)
    assert not r.diverged, r.text()
    assert r.tensors is not None and r.tensors.compared > 0 and r.tensors.largest.rel == 0.0


def test_diff_judges_a_plane_as_the_copy_it_is() -> None:
    """plane is a view of one plane of an add_rms_norm output: its error is that plane's, so a
    plane introduces nothing (a sum's plane is much larger than the normed one's)."""
    from tracekit.trace.diff import _ELEMENTWISE, _explained

    assert "plane" in _ELEMENTWISE and "add_rms_norm" not in _ELEMENTWISE
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 8))
    y = x + rng.standard_normal(x.shape) * 1e-3
    for p in (0, 1):
        b = _explained("plane", {"plane": p}, [(x, y)])
        assert b.shape == (3, 8) and np.array_equal(b, np.abs(x - y)[p])

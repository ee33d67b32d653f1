"""Traced execution on the demo model (NumPy backend; the cupy variant is marked gpu)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.backend import NumpyBackend
from tracekit.kernels.stats import tensor_stats
from tracekit.runner import record as record_mod
from tracekit.runner.execute import GenerationError, Session, load_model
from tracekit.runner.record import (
    CUDA_GRAPH_NOTE,
    RecordInterrupted,
    compact_stats,
    heatmap_axes,
    overwritten_in_place,
    record_trace,
)
from tracekit.trace.diff import diff_traces
from tracekit.trace.format import load_trace

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
#: Fixed ceilings for tests that do not measure (CPU-like numbers).
CEIL = {"copy_bandwidth_Bps": 2e10, "launch_overhead_s": 1e-6, "peak_flops": 1e11}


@pytest.fixture(scope="module")
def demo() -> Any:
    from tracekit.model.demo import demo_model_path

    return load_model(demo_model_path())


def _record(model: Any, out: Path, **kw: Any) -> dict[str, Any]:
    kw.setdefault("tokens", [5, 17, 99, 300])
    kw.setdefault("steps", 3)
    kw.setdefault("backend", "numpy")
    kw.setdefault("ceilings", CEIL)
    kw.setdefault("progress", False)
    return load_trace(record_trace(model, output=out, **kw))


class RecordingDomain:
    """Stands in for nvtx's Domain: records pushes/pops and checks their nesting."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.node_stacks: dict[str, list[list[str]]] = {}
        self.pushes = 0

    def get_event_attributes(self, message: str, color: Any, category: Any, payload: Any) -> Any:
        return (message, category, payload)

    def push_range(self, attrs: Any) -> None:
        self.pushes += 1
        self.stack.append(attrs[0])
        if attrs[1] not in ("step", "layer"):
            self.node_stacks.setdefault(attrs[0], []).append(list(self.stack))

    def pop_range(self) -> None:
        assert self.stack, "pop without push"
        self.stack.pop()


def test_full_capture_trace(demo: Any, tmp_path: Path) -> None:
    t = _record(demo, tmp_path / "t.json")
    g = demo.graph
    assert t["complete"] and t["run"]["stop_reason"] in ("steps", "eos")
    assert [n["name"] for n in t["nodes"]] == g.names()
    assert len(t["steps"]) == 4 and [s["name"] for s in t["steps"]][:2] == ["prefill", "decode 1"]
    assert t["steps"][0]["n_tokens"] == 4 and t["steps"][1]["n_past"] == 4
    ops = [n.op for n in g]
    for s in t["steps"]:
        for op, rec in zip(ops, s["nodes"], strict=True):
            assert rec["stats"] is not None and rec["stats"]["count"] == int(np.prod(rec["shape"]))
            if op == "plane":  # a view of add_rms_norm's output: no launch, no bound
                assert rec["launches"] == [] and rec["perf"]["bound"] is None
                continue
            assert rec["launches"] and rec["perf"]["bound"] in ("launch", "bandwidth", "compute")
            assert rec["time_s"] > 0 and rec["capture_cost"] > 0 and rec["full_host_s"] > 0
            assert rec["stats"]["heatmap"]["rows"] == min(32, int(np.prod(rec["shape"][:-1])))
        assert s["logits"]["top_k"][0]["prob"] >= s["logits"]["top_k"][-1]["prob"]
        assert s["logits"]["chosen"]["id"] == s["logits"]["top_k"][0]["id"]  # greedy
        assert sum(s["logits"]["hist"]["counts"]) == demo.config.n_vocab
    last = t["steps"][0]["nodes"][-1]
    assert last["shape"] == [1, demo.config.n_vocab]
    assert t["run"]["generated_tokens"] == [s["logits"]["chosen"]["id"] for s in t["steps"]]
    assert t["run"]["generated_text"] == demo.detokenize(t["run"]["generated_tokens"])
    assert t["steps"][1]["input_tokens"] == [t["steps"][0]["logits"]["chosen"]["id"]]
    assert t["classification"]["rule"].startswith("per launch T* = max(")


def test_cpu_trace_has_device_intervals_and_a_breakdown(demo: Any, tmp_path: Path) -> None:
    """v2 measurements of a NumPy run: node intervals on the step's host clock, in order and
    inside the step; the breakdown adds up to the span; verdicts say CPU time."""
    t = _record(demo, tmp_path / "t.json")
    assert t["version"] == 2 and t["derived"] == {
        "time_label": "CPU time", "legacy": False, "note": None
    }  # fmt: skip
    assert t["classification"]["launch_floor_s"].keys() >= {"host"}
    for s in t["steps"]:
        assert s["launch_mode"] == "host" and s["span_ns"] > 0
        prev = 0
        for rec in s["nodes"]:
            assert prev <= rec["start_ns"] <= rec["end_ns"] <= s["span_ns"]
            assert rec["queued_ns"] == rec["start_ns"]
            # the interval is the node's timer reading, to the ns (time_s keeps 5 digits)
            assert (rec["end_ns"] - rec["start_ns"]) * 1e-9 == pytest.approx(rec["time_s"], 1e-4)
            prev = rec["end_ns"]
            p = rec["perf"]
            assert p["fraction_of_ceiling"] is None or p["fraction_of_ceiling"] <= 1.0
            assert p["flag"] is None or p["efficiency"] > 1.0
        b = s["breakdown"]
        assert b["within_tolerance"] and b["residual_s"] == 0
        assert b["kernel_s"] == pytest.approx(sum(r["time_s"] for r in s["nodes"]), 1e-3)
        assert b["host_wait_s"] > 0  # the tracer's own work between nodes shows as gaps
        assert sum(r["host_wait_s"] for r in s["nodes"]) == pytest.approx(b["host_wait_s"])


def _outputs(model: Any, steps: list[list[int]]) -> list[dict[str, np.ndarray]]:
    """Per step: a copy of every node's output taken right after the node ran (an untraced
    NumPy session: the values the statistics must describe)."""
    s = Session(model, "numpy", n_ctx=sum(len(t) for t in steps))
    out: list[dict[str, np.ndarray]] = []
    for feed in steps:
        seen: dict[str, np.ndarray] = {}

        def hook(node: Any, thunk: Any, seen: dict[str, np.ndarray] = seen) -> Any:
            y = thunk()
            seen[node.name] = np.array(y, copy=True)
            return y

        s.run_step(feed, node_hook=hook)
        out.append(seen)
    return out


def test_batched_stats_equal_tensor_stats_of_each_output(demo: Any, tmp_path: Path) -> None:
    """The full pass's batched statistics are exactly tensor_stats of every node's output as it
    was when the node ran (the per-node computation they replace), in prefill and decode."""
    steps: list[dict[str, Any]] = []
    t = _record(demo, tmp_path / "t.json", steps=2, on_step=steps.append)
    feeds = [[5, 17, 99, 300]] + [s["input_tokens"] for s in t["steps"][1:]]
    for step, outs in zip(steps, _outputs(demo, feeds), strict=True):
        for node, rec in zip(demo.graph, step["nodes"], strict=True):
            want = compact_stats(tensor_stats(outs[node.name], axes=heatmap_axes(node)))
            assert rec["stats"] == want, (step["name"], node.name)
        assert step["stats_collects"] == 1 and step["stats_launches"] == 0  # NumPy: no kernels
        assert 0 < step["stats_s"] <= step["full_wall_s"] and step["stats_format_s"] > 0
        assert step["timing_wall_s"] == step["wall_s"] > 0


def test_a_biased_matmul_node_is_its_product_plus_the_bias(demo: Any, tmp_path: Path) -> None:
    """qwen2's q/k/v biases are part of their matmul nodes (mmvq's epilogue on the GPU): the
    node's output, and its statistics, are x W^T + b, and nothing overwrites them later."""
    from tracekit.kernels.dequant import ref_dequantize_f32

    g = list(demo.graph)
    assert not any(overwritten_in_place(g))
    steps: list[dict[str, Any]] = []
    _record(demo, tmp_path / "t.json", steps=0, on_step=steps.append)
    (outs,) = _outputs(demo, [[5, 17, 99, 300]])
    node = demo.graph["blk.0.attn_q"]
    t = demo.tensors[node.weight]
    w, _ = ref_dequantize_f32(t.raw(), t.qtype, t.shape)
    b = demo.tensors[node.attrs["bias"]].raw().view(np.float32)
    x = outs["blk.0.attn_norm"]
    assert np.abs(b).max() > 0  # the bias changes the values: the test can fail
    np.testing.assert_allclose(outs["blk.0.attn_q"], x @ w.T + b, rtol=1e-5, atol=1e-5)
    rec = {n.name: r for n, r in zip(g, steps[0]["nodes"], strict=True)}
    axes = heatmap_axes(node)
    assert rec["blk.0.attn_q"]["stats"] == compact_stats(
        tensor_stats(outs["blk.0.attn_q"], axes=axes)
    )


def test_a_bias_after_a_fused_projection_is_in_place(demo: Any) -> None:
    """A fused q/k/v (phi3's attn_qkv) with biases keeps them as add_bias nodes after the
    slices, in place: the full pass snapshots the slices' outputs (record.overwritten_in_place),
    and the fused matmul's too (a one-row step's slice is a view of it)."""
    import dataclasses

    from tracekit.runner.graph import build_graph

    cfg = dataclasses.replace(demo.config, fused_qkv=True, qkv_bias=True)
    g = list(build_graph(cfg))
    over = [n.name for n, c in zip(g, overwritten_in_place(g), strict=True) if c]
    assert over == [f"blk.{il}.attn_{p}" for il in range(cfg.n_layer) for p in ("qkv", *"qkv")]
    assert [g_.op for g_ in g if g_.name in over] == ["matmul", *["slice_cols"] * 3] * cfg.n_layer


def test_no_in_place_nodes_without_biases(tmp_path: Path) -> None:
    from tracekit.model.synthetic import write_synthetic_model

    m = load_model(write_synthetic_model(tmp_path / "l.gguf", "llama"))
    assert not any(overwritten_in_place(list(m.graph)))


def test_early_collection_between_nodes(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 1-byte cap every node's output is collected right after it: the statistics are
    the same, each collection is outside every node's NVTX range, and the step says so."""
    ref = _record(demo, tmp_path / "a.json", steps=1)
    dom = RecordingDomain()
    stacks: list[list[str]] = []
    collect = record_mod.StatsBatch.collect

    def spy(self: Any) -> Any:
        stacks.append(list(dom.stack))
        return collect(self)

    monkeypatch.setattr(record_mod, "STATS_BATCH_BYTES", 1)
    monkeypatch.setattr(record_mod.StatsBatch, "collect", spy)
    t = _record(demo, tmp_path / "b.json", steps=1, nvtx_domain=dom)
    n = len(demo.graph)
    for a, b in zip(ref["steps"], t["steps"], strict=True):
        assert [r["stats"] for r in a["nodes"]] == [r["stats"] for r in b["nodes"]]
        assert a["stats_collects"] == 1 and b["stats_collects"] == n
    node_names = set(demo.graph.names())
    assert len(stacks) == 2 * n + 1  # + the warm-up's batch (no ranges open)
    assert all(not st or st[-1] not in node_names for st in stacks)
    assert all(st[0] in ("prefill", "decode 1") for st in stacks[1:])


def test_step_timing_keys_are_optional_and_typed(demo: Any, tmp_path: Path) -> None:
    from tracekit.trace.format import TraceError, validate_trace

    t = _record(demo, tmp_path / "t.json", steps=0, capture="timing")
    s = t["steps"][0]
    assert s["timing_wall_s"] == s["wall_s"] and s["full_wall_s"] is None
    assert s["stats_s"] is None and s["stats_collects"] is None and s["stats_launches"] is None
    old = json.loads(json.dumps(t))
    for k in ("timing_wall_s", "stats_s", "stats_collects", "stats_launches", "stats_format_s"):
        del old["steps"][0][k]
    validate_trace(old)  # traces written before these keys still load
    old["steps"][0]["stats_launches"] = "two"
    with pytest.raises(TraceError, match="stats_launches"):
        validate_trace(old)


def test_double_pass_matches_untraced_generation(demo: Any, tmp_path: Path) -> None:
    """The timing pass re-runs each step after rewinding n_past: the tokens and final logits
    must be those of a plain, untraced generation."""
    t = _record(demo, tmp_path / "t.json", steps=5)
    s = Session(demo, "numpy", n_ctx=9)
    assert (
        s.generate([5, 17, 99, 300], 5, stop_at_eos=False)[: len(t["steps"])]
        == t["run"]["generated_tokens"]
    )


def test_timing_capture_has_no_stats(demo: Any, tmp_path: Path) -> None:
    full = _record(demo, tmp_path / "f.json")
    t = _record(demo, tmp_path / "t.json", capture="timing")
    assert t["run"]["capture"] == "timing"
    for s in t["steps"]:
        for rec in s["nodes"]:
            assert rec["stats"] is None and rec["capture_cost"] is None
            assert rec["full_time_s"] is None and rec["time_s"] > 0
        assert s["full_wall_s"] is None
    assert t["run"]["generated_tokens"] == full["run"]["generated_tokens"]


def test_nvtx_ranges_nest_and_do_not_change_results(demo: Any, tmp_path: Path) -> None:
    dom = RecordingDomain()
    on = _record(demo, tmp_path / "on.json", nvtx_domain=dom)
    off = _record(demo, tmp_path / "off.json", nvtx=False)
    assert dom.stack == []  # every push popped
    node = "blk.2.ffn_up"
    # 4 steps x 2 passes, each inside its step and layer range
    assert dom.node_stacks[node] == [[s, "blk.2", node] for s in on_steps(on) for _ in (0, 1)]
    assert dom.node_stacks["token_embd"][0] == ["prefill", "token_embd"]
    assert dom.node_stacks["output"][-1] == ["decode 3", "output"]
    assert on["run"]["nvtx"] and not off["run"]["nvtx"]
    for a, b in zip(on["steps"], off["steps"], strict=True):
        assert a["logits"] == b["logits"]
        assert [r["stats"] for r in a["nodes"]] == [r["stats"] for r in b["nodes"]]
    assert not diff_traces(on, off, rtol=0, atol=0).diverged


def on_steps(t: dict[str, Any]) -> list[str]:
    return [s["name"] for s in t["steps"]]


def test_ctrl_c_between_steps_saves_complete_steps(demo: Any, tmp_path: Path) -> None:
    def stop(step: dict[str, Any]) -> None:
        if step["index"] == 1:
            raise KeyboardInterrupt

    out = tmp_path / "t.json"
    with pytest.raises(RecordInterrupted) as ei:
        record_trace(demo, tokens=[1, 2, 3], steps=5, backend="numpy", output=out,
                     ceilings=CEIL, progress=False, on_step=stop)  # fmt: skip
    assert ei.value.path == out and ei.value.steps == 2
    t = load_trace(out)
    assert not t["complete"] and t["run"]["stop_reason"] == "interrupted"
    assert [s["name"] for s in t["steps"]] == ["prefill", "decode 1"]
    assert len(t["run"]["generated_tokens"]) == 2


#: The ops of the residual adds, one backend call per node and pass: an add alone, or fused
#: with the rms_norm that reads it (runner/graph.py fuse_add_norms).
RESIDUAL_OPS = ("add", "add_rms_norm")


def _residuals(model: Any) -> int:
    """Residual adds per pass of a step (the calls InterruptingBackend counts), at least 4, so
    that 3 more of them end inside a step."""
    n = sum(1 for n in model.graph if n.op in RESIDUAL_OPS)
    assert n > 3, f"{n} residual adds a pass: 3 more would not end mid-step"
    return n


class InterruptingBackend(NumpyBackend):
    """Ctrl-C arrives inside the n-th residual add (mid-step, inside a node's NVTX range)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.left = after

    def _count(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt

    def add_f32(self, x: Any, y: Any) -> Any:
        self._count()
        return super().add_f32(x, y)

    def add_rms_norm_f32(self, a: Any, b: Any, w: Any, eps: float) -> Any:
        self._count()
        return super().add_rms_norm_f32(a, b, w, eps)


def test_ctrl_c_mid_step_saves_earlier_steps_and_pops_ranges(demo: Any, tmp_path: Path) -> None:
    dom = RecordingDomain()
    out = tmp_path / "t.json"
    be = InterruptingBackend(after=2 * _residuals(demo) * 2 + 3)  # 2 steps x 2 passes, 3 more
    with pytest.raises(RecordInterrupted):
        record_trace(demo, tokens=[1, 2, 3], steps=5, backend=be, output=out, ceilings=CEIL,
                     progress=False, nvtx_domain=dom, warmup=False)  # fmt: skip
    assert dom.stack == []
    t = load_trace(out)
    assert not t["complete"] and len(t["steps"]) == 2


def _strip_times(t: dict[str, Any]) -> list[Any]:
    """A trace's steps without what varies run to run: times (``*_s``, ``*_ns``) and what
    derives from them (a node's perf verdict and capture cost, a step's breakdown)."""

    def keep(k: str) -> bool:
        return not k.endswith(("_s", "_ns")) and k not in ("perf", "capture_cost", "breakdown")

    def node(n: dict[str, Any]) -> dict[str, Any]:  # launches carry their own times too
        return {a: [{c: d for c, d in la.items() if keep(c)} for la in b] if a == "launches"
                else b for a, b in n.items() if keep(a)}  # fmt: skip

    return [
        {k: [node(n) for n in v] if k == "nodes" else v for k, v in st.items() if keep(k)}
        for st in t["steps"]
    ]


def test_deferred_step_records_equal_immediate_ones(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA-graph runs build the step records after the run (record._defers_records): the
    # records must be those built step by step
    now = _record(demo, tmp_path / "a.json", steps=4)
    seen: list[int] = []
    monkeypatch.setattr(record_mod, "_defers_records", lambda session: True)
    later = _record(demo, tmp_path / "b.json", steps=4, on_step=lambda st: seen.append(st["index"]))
    assert _strip_times(later) == _strip_times(now) and later["complete"]
    assert seen == [0, 1, 2, 3, 4]


def test_interrupt_with_deferred_records_saves_the_completed_steps(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_mod, "_defers_records", lambda session: True)
    out = tmp_path / "t.json"
    be = InterruptingBackend(after=3 * _residuals(demo) * 2 + 3)  # 3 steps x 2 passes, 3 more
    with pytest.raises(RecordInterrupted) as ei:
        record_trace(demo, tokens=[1, 2, 3], steps=5, backend=be, output=out, ceilings=CEIL,
                     progress=False, warmup=False)  # fmt: skip
    t = load_trace(out)
    assert ei.value.steps == 3 and [s["index"] for s in t["steps"]] == [0, 1, 2]
    assert t["run"]["generated_tokens"] == [s["logits"]["chosen"]["id"] for s in t["steps"]]


def test_interrupt_inside_a_deferred_flush_keeps_each_step_once(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_mod, "_defers_records", lambda session: True)

    def stop(step: dict[str, Any]) -> None:
        # from the flush at the end of the run, steps 2.. still pending; and again whenever
        # called after that, as the CLI's Ctrl-C watch does (its flag stays set)
        if step["index"] >= 1:
            raise KeyboardInterrupt

    out = tmp_path / "t.json"
    with pytest.raises(RecordInterrupted) as ei:
        record_trace(demo, tokens=[1, 2, 3], steps=3, backend="numpy", output=out,
                     ceilings=CEIL, progress=False, on_step=stop)  # fmt: skip
    t = load_trace(out)
    assert [s["index"] for s in t["steps"]] == [0, 1, 2, 3] and ei.value.steps == 4
    assert not t["complete"] and t["run"]["stop_reason"] == "interrupted"


def test_interrupt_between_a_step_and_its_record_saves_it_once(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C after a step's passes, before its record is built (here: in the progress bar's
    # update after step 2), with an on_step that raises whenever called after a Ctrl-C, as the
    # CLI's watch does: the step is saved once, and on_step is not called from the handler
    calls: list[int] = []
    interrupted = False

    def watch(step: dict[str, Any]) -> None:
        calls.append(step["index"])
        if interrupted:
            raise KeyboardInterrupt

    import tqdm

    real_update = tqdm.tqdm.update
    updates = 0

    def update(self: Any, n: int = 1) -> Any:
        nonlocal interrupted, updates
        updates += 1
        if updates == 3:  # step 2's
            interrupted = True
            raise KeyboardInterrupt
        return real_update(self, n)

    monkeypatch.setattr(tqdm.tqdm, "update", update)
    out = tmp_path / "t.json"
    try:
        record_trace(demo, tokens=[1, 2, 3], steps=5, backend="numpy", output=out,
                     ceilings=CEIL, progress=False, on_step=watch)  # fmt: skip
    except RecordInterrupted as e:
        assert e.steps == 3
    except KeyboardInterrupt:  # caught here: escaping, it would stop the whole pytest session
        pytest.fail("a plain KeyboardInterrupt escaped record_trace: the trace was not saved")
    else:
        pytest.fail("record_trace was not interrupted")
    t = load_trace(out)
    assert [s["index"] for s in t["steps"]] == [0, 1, 2]
    assert calls == [0, 1]


def test_interrupt_before_any_step_keeps_the_previous_trace(demo: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    out.write_text("previous trace")  # whatever was at the path must survive
    with pytest.raises(RecordInterrupted) as ei:
        record_trace(demo, tokens=[1, 2], steps=2, backend=InterruptingBackend(after=0),
                     output=out, ceilings=CEIL, progress=False, warmup=False)  # fmt: skip
    assert ei.value.path is None and ei.value.steps == 0
    assert out.read_text() == "previous trace"


class NaNBackend(NumpyBackend):
    """Plants a NaN in the output of the k-th mul (SwiGLU of one layer)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.calls = 0

    def mul_f32(self, x: Any, y: Any) -> Any:
        out = super().mul_f32(x, y)
        if self.calls == self.k:
            out = out.copy()
            out[0, 3] = np.nan
        self.calls += 1
        return out


def test_diff_names_planted_nan_node(demo: Any, tmp_path: Path) -> None:
    a = _record(demo, tmp_path / "a.json", steps=1)
    # the prefill's full pass runs muls 0..3, then its timing pass 4..7: k=1 is layer 1, full
    b = _record(demo, tmp_path / "b.json", steps=1, backend=NaNBackend(k=1), warmup=False)
    r = diff_traces(a, b)
    assert r.nonfinite_a is None
    nf = r.nonfinite_b
    assert nf is not None and (nf.step, nf.node) == ("prefill", "blk.1.ffn_mul") and nf.nan == 1
    assert nf.later_in_step > 0  # it spread downstream
    assert r.first_divergence is not None and r.first_divergence.node == "blk.1.ffn_mul"
    assert json.dumps(b)  # still strict JSON


def test_bad_inputs_fail_before_running(demo: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    with pytest.raises(ValueError, match="out of range"):
        record_trace(demo, tokens=[1, 10**6], output=out, backend="numpy", ceilings=CEIL)
    with pytest.raises(ValueError, match="more than the model's context"):
        record_trace(demo, tokens=[1], steps=10**5, output=out, backend="numpy", ceilings=CEIL)
    with pytest.raises(ValueError, match="capture"):
        record_trace(demo, tokens=[1], capture="all", output=out, backend="numpy")
    assert not out.exists()


def test_cuda_graph_on_numpy_is_refused_before_anything_runs(demo: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    with pytest.raises(ValueError, match="needs the cupy backend"):
        _record(demo, out, capture="timing", cuda_graph=True, steps=1)
    assert not out.exists()
    assert "CUDA graph" in CUDA_GRAPH_NOTE


def test_pdl_needs_a_cuda_graph_and_is_recorded(demo: Any, tmp_path: Path, capsys) -> None:
    """--pdl without --cuda-graph is refused by name before anything runs (on any backend);
    a trace says whether its decode graph was made of programmatic dependent launches."""
    from tracekit.cli import main

    out = tmp_path / "t.json"
    with pytest.raises(GenerationError, match="--pdl needs --cuda-graph"):
        _record(demo, out, capture="timing", pdl=True, steps=1)
    assert not out.exists()
    assert main(["record-trace", str(demo.path), "--backend", "numpy", "--pdl", "--steps", "1",
                 "--no-progress", "-o", str(out)]) != 0  # fmt: skip
    assert "--pdl needs --cuda-graph" in capsys.readouterr().err and not out.exists()
    for flag in ("on", "off", "auto"):  # --pdl alone is on; auto (the default) off numpy's way
        argv = ["record-trace", str(demo.path), "--backend", "numpy", "--pdl", flag, "--steps",
                "1", "--capture", "timing", "--no-progress", "-o", str(out)]  # fmt: skip
        assert (main(argv) != 0) is (flag == "on")
    assert load_trace(out)["run"]["pdl"] is False
    assert _record(demo, out, capture="timing", steps=1)["run"]["pdl"] is False


def test_alternate_modes_needs_a_cuda_graph_and_is_recorded(
    demo: Any, tmp_path: Path, capsys
) -> None:
    """--alternate-modes without --cuda-graph is refused by name before anything runs; a
    trace without it says so (run.alternate_modes False, valid under the schema)."""
    from tracekit.cli import main

    out = tmp_path / "t.json"
    with pytest.raises(GenerationError, match="alternating launch modes needs --cuda-graph"):
        _record(demo, out, capture="timing", alternate_modes=True, steps=1)
    assert not out.exists()
    argv = ["record-trace", str(demo.path), "--backend", "numpy", "--alternate-modes", "--steps",
            "1", "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(argv) != 0
    assert "alternating launch modes needs --cuda-graph" in capsys.readouterr().err
    assert not out.exists()
    assert _record(demo, out, capture="timing", steps=1)["run"]["alternate_modes"] is False


def test_sampling_is_seeded_and_recorded(demo: Any, tmp_path: Path) -> None:
    s = {"temperature": 1.5, "top_k": 5, "seed": 7}
    a = _record(demo, tmp_path / "a.json", sampling=s, capture="timing")
    b = _record(demo, tmp_path / "b.json", sampling=s, capture="timing")
    assert a["run"]["sampling"] == {"mode": "sample", **s}
    assert a["run"]["generated_tokens"] == b["run"]["generated_tokens"]


def test_cli_record_trace_default_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from tracekit.cli import record_trace_main

    monkeypatch.setenv("TRACEKIT_CACHE", str(tmp_path / "cache"))  # measures its own ceilings
    out = tmp_path / "t.json"
    rc = record_trace_main(["--prompt", "The kernel reads", "--steps", "2", "--backend", "numpy",
                            "--no-progress", "-o", str(out)])  # fmt: skip
    assert rc == 0 and capsys.readouterr().out.strip() == str(out)
    t = load_trace(out)
    assert t["run"]["prompt"] == "The kernel reads" and t["model"]["architecture"] == "qwen2"
    assert t["ceilings"]["copy_bandwidth_Bps"] > 0 and t["ceilings"]["method"]


@pytest.mark.parametrize(
    "backend",
    [pytest.param("numpy", marks=pytest.mark.slow), pytest.param("cupy", marks=pytest.mark.gpu)],
)
def test_trace_size_24_layers_32_decode_steps(backend: str, tmp_path: Path) -> None:
    """docs/trace-format.md's compactness figure: 24 layers x (prefill + 32 decode steps),
    statistics and heatmaps on every node, must stay under 20 MB."""
    from tracekit.model.synthetic import write_synthetic_model

    p = write_synthetic_model(tmp_path / "m24.gguf", "qwen2", n_layer=24)
    out = _record(
        load_model(p), tmp_path / "t.json", tokens=list(range(1, 17)), steps=32, backend=backend,
        ceilings=CEIL if backend == "numpy" else None,
    )  # fmt: skip
    assert len(out["steps"]) == 33 or out["run"]["stop_reason"] == "eos"
    size = (tmp_path / "t.json").stat().st_size
    n_records = len(out["nodes"]) * len(out["steps"])
    print(f"24-layer trace ({backend}): {size / 1e6:.2f} MB, {len(out['nodes'])} nodes x "
          f"{len(out['steps'])} steps, {size / n_records:.0f} B per node record")  # fmt: skip
    assert size <= 20e6


@pytest.mark.gpu
def test_record_on_cupy(demo: Any, tmp_path: Path) -> None:
    t = _record(demo, tmp_path / "gpu.json", backend="cupy", ceilings=None, steps=4)
    assert t["run"]["backend"] == "cupy" and t["ceilings"]["launch_overhead_s"] > 0
    for s in t["steps"]:
        assert s["gpu_s"] > 0
        # the batched statistics: one collection of two kernel launches per step
        assert s["stats_collects"] == 1 and s["stats_launches"] == 2
        print(f"{s['name']}: full pass {s['full_wall_s'] * 1e3:.2f} ms = "
              f"{s['full_wall_s'] / s['timing_wall_s']:.2f}x the timing pass "
              f"({s['timing_wall_s'] * 1e3:.2f} ms); statistics {s['stats_s'] * 1e3:.2f} ms, "
              f"formatting after the pass {s['stats_format_s'] * 1e3:.2f} ms")  # fmt: skip
        for rec in s["nodes"]:
            assert rec["stats"] is not None
            if not rec["launches"]:  # a plane view of add_rms_norm launches nothing
                assert t["nodes"][rec["id"]]["op"] == "plane"
                assert rec["time_s"] == rec["full_time_s"] == 0
                continue
            assert rec["time_s"] > 0 and rec["full_time_s"] > 0
            assert all(la["grid"] is None or len(la["grid"]) == 3 for la in rec["launches"])
    timing = _record(demo, tmp_path / "gpu-t.json", backend="cupy", ceilings=None, steps=4,
                     capture="timing")  # fmt: skip
    assert timing["run"]["generated_tokens"] == t["run"]["generated_tokens"]
    cpu = _record(demo, tmp_path / "cpu.json", steps=4)
    # f16 GEMM inputs (11-bit mantissa) against the f32 CPU graph: 1% of each tensor's absmax
    r = diff_traces(cpu, t, rtol=1e-2, atol=1e-3)
    print(r.text("numpy", "cupy"))
    assert r.nonfinite_a is None and r.nonfinite_b is None


@pytest.mark.slow
def test_sigint_to_record_trace_saves_incomplete_trace(tmp_path: Path) -> None:
    """A real SIGINT to a running `record-trace`: exit 130, a valid trace marked incomplete."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tracekit.kernels.ceilings import measure_ceilings
    from tracekit.model.demo import demo_model_path

    env = {**os.environ, "TRACEKIT_CACHE": str(tmp_path / "cache")}
    os.environ["TRACEKIT_CACHE"], old = env["TRACEKIT_CACHE"], os.environ.get("TRACEKIT_CACHE")
    try:  # the child finds the demo model and the ceilings cached: it starts recording at once
        demo_model_path()
        measure_ceilings("numpy")
    finally:
        if old is None:
            del os.environ["TRACEKIT_CACHE"]
        else:
            os.environ["TRACEKIT_CACHE"] = old
    out = tmp_path / "t.json"
    child = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "record-trace", "--steps", "500", "--backend", "numpy",
         "--no-progress", "-o", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a shell's background job (`cmd &`) starts with SIGINT ignored, and children inherit
        # that: Python then installs no KeyboardInterrupt handler. The child gets the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    # mid-run: 500 steps take ~5 s on a quiet 2-core box, after ~1.5 s of start-up (a signal in
    # the final write, which held it, would report a complete trace instead)
    time.sleep(3)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Traceback" not in err and err.startswith("interrupted: saved "), err
    t = load_trace(out)
    assert not t["complete"] and t["run"]["stop_reason"] == "interrupted"
    assert f"saved {len(t['steps'])} complete step(s)" in err
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_remeasure_forces_new_ceilings(
    demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracekit.kernels.ceilings as ceilings

    calls: list[bool] = []

    def fake(backend: Any, force: bool = False) -> dict[str, Any]:
        calls.append(force)
        return dict(CEIL, method="fake", measured_at="now")

    monkeypatch.setattr(ceilings, "measure_ceilings", fake)
    t = _record(demo, tmp_path / "a.json", ceilings=None, capture="timing", steps=0)
    _record(demo, tmp_path / "b.json", ceilings=None, capture="timing", steps=0, remeasure=True)
    assert calls == [False, True] and t["ceilings"]["method"] == "fake"
    assert len(t["steps"]) == 1  # steps=0: the prefill alone


def test_prefill_replay_is_refused_without_a_replay_mode(demo: Any) -> None:
    from tracekit.runner.execute import GenerationError, Session

    with pytest.raises(GenerationError, match="prefill replay needs replay 'plan' or 'graph'"):
        Session(demo, "numpy", replay="off", prefill_replay=True)
    s = Session(demo, "numpy")  # off by default: numpy prefills run the dispatch chain
    assert not s.prefill_replay and s.run_step([1, 2, 3]).shape == (1, demo.config.n_vocab)


def test_a_trace_of_the_mmq_path_names_it(demo: Any, tmp_path: Path) -> None:
    """--matmul mmq on the NumPy backend: a 10-token prefill's matmuls run quantize_q8 + mmq
    (the quant path), and the trace validates and says so."""
    out = record_trace(
        demo, tokens=list(range(3, 13)), steps=1, backend="numpy", capture="timing",
        output=tmp_path / "t.json", progress=False, matmul="mmq",
    )  # fmt: skip
    t = load_trace(out)
    assert t["run"]["matmul"] == "mmq"
    ops = {n["id"]: n["op"] for n in t["nodes"]}
    prefill = next(s for s in t["steps"] if s["kind"] == "prefill")
    biased = {n["id"] for n in t["nodes"] if n["attrs"].get("bias")}
    kernels, bias_adds = set(), set()
    for n in prefill["nodes"]:
        if ops[n["id"]] != "matmul" or n["shape"][0] == 1:
            continue
        names = [r["kernel"] for r in n["launches"]]
        kernels |= {k.rsplit("_", 2)[0] if k.startswith("numpy_mmq") else k for k in names}
        # after mmq a bias is the node's last launch (mmvq adds it in its epilogue)
        if n["id"] in biased:
            assert names[-1] == "add_bias_f32", names
            bias_adds.add(n["id"])
        else:
            assert "add_bias_f32" not in names, names
    assert kernels == {"numpy_quantize_q8", "numpy_mmq", "add_bias_f32"}, kernels
    assert bias_adds == biased and biased

"""A residual add and its rms_norm as one node (runner/graph.py, ``add_rms_norm``) on CuPy (H200
only).

Run on a GPU host:  python -m pytest -m gpu tests/runner/test_add_norm_gpu.py
The fused graph against the graph of an add node and an rms_norm node per pair
(``build_graph(add_norm=False)``) on the device, over a prefill and 4 greedy decode steps through
the dispatch chain: the logits bit for bit (the kernel is add_f32 then rms_norm_f32's arithmetic),
one launch fewer per pair on every step, the planes pointers into the fused output read in place
(test_add_norm.check; its checks run on NumPy in test_add_norm). Then the replays (plan and CUDA
graph) of the fused graph give the unfused dispatch chain's logits, and a ``--cuda-graph
--capture full`` trace has the plan trace's statistics on every node, the views included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tests.runner.test_add_norm import ARCHS, PROMPT, check, without_add_norm
from tests.runner.test_fusion import ROLES, _file
from tracekit.model.demo import write_demo_model
from tracekit.runner.execute import Session, load_model

pytestmark = pytest.mark.gpu


def _models(tmp: Path) -> dict[str, Path]:
    return {
        "qwen2": _file(tmp, "qwen2", **{r: T.Q8_0 for r in ROLES}),  # biases in the matmul
        "llama3": ARCHS / "llama3" / "llama3-q8_0.gguf",
        "phi3": ARCHS / "phi3" / "phi3-q8_0.gguf",
        "gemma2": ARCHS / "gemma2" / "gemma2-q8_0.gguf",  # post norms
        "demo": write_demo_model(tmp / "demo.gguf"),
    }


@pytest.mark.parametrize("matmul", ["quant", "f16"])
@pytest.mark.parametrize("name", ["qwen2", "llama3", "phi3", "gemma2", "demo"])
def test_add_norm_on_the_device(tmp_path: Path, name: str, matmul: str) -> None:
    check(_models(tmp_path)[name], matmul, "cupy")


@pytest.mark.parametrize("replay", ["plan", "graph"])
def test_replayed_add_norm_steps_are_the_unfused_chain(tmp_path: Path, replay: str) -> None:
    path = _models(tmp_path)["qwen2"]
    m, before = load_model(path), without_add_norm(load_model(path))

    def logits(model, mode: str) -> np.ndarray:
        s = Session(model, model.backend("cupy"), n_ctx=32, replay=mode)
        out = [s.run_step(PROMPT)[-1]]
        for k in range(8):
            out.append(s.run_step([(7 * k + 3) % model.config.n_vocab])[-1])
        return np.stack(out)

    got, want = logits(m, replay), logits(before, "off")
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_cuda_graph_full_capture_of_the_views(tmp_path: Path) -> None:
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    m = load_model(_models(tmp_path)["qwen2"])
    kw = dict(tokens=PROMPT, steps=3, backend="cupy", capture="full", progress=False)
    g = load_trace(record_trace(m, output=tmp_path / "g.json", cuda_graph=True, **kw))
    p = load_trace(record_trace(m, output=tmp_path / "p.json", **kw))
    ops = [n["op"] for n in g["nodes"]]
    assert "plane" in ops and "add_rms_norm" in ops
    for sg, sp in zip(g["steps"][1:], p["steps"][1:], strict=True):
        for op, ng, np_ in zip(ops, sg["nodes"], sp["nodes"], strict=True):
            assert ng["stats"] == np_["stats"], ng
            if op == "plane":  # never a launch (the decode step's slices neither)
                assert ng["launches"] == []
            # no launch: an empty interval, time 0
            assert (ng["time_s"] > 0) == bool(ng["launches"]), ng

"""The converted llama3 / mistral / qwen3 / phi3 / gemma2 files on CuPy (H200 only).

Run on a GPU host:  python -m pytest -m gpu tests/runner/test_archs_gpu.py
Node by node against the NumPy backend within test_gpu_parity's RTOL (the GPU runs the seed's
f16 weight cache, so 1e-4 of HF fp32 is a CPU-only bound), and every file's logits against HF
fp32 on the file's weights: top-1 at every position and <= 5e-2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runner.test_gpu_parity import compare
from tracekit.runner.execute import load_model

pytestmark = pytest.mark.gpu

# as in test_archs, which needs torch: the node-by-node test must run on a host without it
DATA = Path(__file__).resolve().parent.parent / "data" / "archs"
ARCHS = ("llama3", "mistral", "qwen3", "phi3", "gemma2")
PROMPT = [1, 17, 100, 200, 33, 7, 8, 9, 150, 12, 44, 45]


def gguf_path(name: str, ftype: str) -> Path:
    return DATA / name / f"{name}-{ftype}.gguf"


@pytest.mark.parametrize("name", ARCHS)
def test_gpu_matches_cpu_node_by_node(name: str) -> None:
    compare(load_model(gguf_path(name, "q8_0")), PROMPT)


@pytest.mark.parametrize("ftype", ["f32", "q8_0", "bf16"])
@pytest.mark.parametrize("name", ARCHS)
def test_gpu_logits_match_hf(name: str, ftype: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.runner.test_archs import QUANT_ATOL, check, file_state_dict, hf_logits, hf_model

    path = gguf_path(name, ftype)
    ours = load_model(path).logits(PROMPT, backend="cupy")
    model = hf_model(name)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        model.load_state_dict(file_state_dict(name, path))
        ref = hf_logits(model, PROMPT)
    finally:
        model.load_state_dict(original)
    check(ours, ref, QUANT_ATOL)


@pytest.mark.parametrize("name", ["llama3", "phi3", "gemma2"])
def test_cuda_graph_trace_of_the_new_ops(tmp_path: Path, name: str) -> None:
    """rope with factors and softcap as the first launch of a node in a timed CUDA graph replay
    (each takes a timestamp slot), slice_cols as a node of no launch there (a view of the fused
    q/k/v or gate/up output: an empty interval, time 0), all of them plain launches in the
    prefill."""
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    out = record_trace(gguf_path(name, "q8_0"), tokens=PROMPT, steps=4, backend="cupy",
                       cuda_graph=True, output=tmp_path / f"{name}.json", progress=False,
                       nvtx=False)  # fmt: skip
    t = load_trace(out)
    assert t["complete"] and t["run"]["cuda_graph"] and len(t["steps"]) == 5
    ops = {n["op"] for n in t["nodes"]}
    assert ops & {"softcap", "slice_cols"} or name == "llama3"
    for step in t["steps"]:
        assert all(r["time_s"] is not None and r["time_s"] >= 0 for r in step["nodes"])
    slices = [n["id"] for n in t["nodes"] if n["op"] == "slice_cols"]
    assert slices  # llama3 and gemma2 fused at load (one type per group), phi3 in its file
    for i in slices:
        assert [la["kernel"] for la in t["steps"][0]["nodes"][i]["launches"]] == ["slice_cols_f32"]
        for step in t["steps"][1:]:
            assert step["nodes"][i]["launches"] == [] and step["nodes"][i]["time_s"] == 0

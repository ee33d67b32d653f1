"""One rope node for q and k (runner/graph.py, ``rope_qk``) on CuPy (H200 only).

Run on a GPU host:  python -m pytest -m gpu tests/runner/test_rope_qk_gpu.py
The rope_qk graph against the graph of two ropes (``build_graph(rope_qk=False)``) on the device,
over a prefill and 4 greedy decode steps: the logits bit for bit (the same kernels on the same
values; the rope's angle depends on the token and the pair, not the head), one launch fewer per
layer per decode step, and on decode no copy anywhere: the rope reads the fused row in place and
attention's q and k are views of the rope's output (pointers into it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tests.runner.test_fusion import PROMPT, ROLES, _file, _two_ropes, logged_steps, ptr
from tracekit.runner.execute import Session, load_model

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parent.parent / "data" / "archs"
STEPS = 4


def _run(
    m: Any, matmul: str, backend: str = "cupy"
) -> tuple[np.ndarray, list[dict[str, list[str]]], list[dict[str, Any]]]:
    """Logits of the prefill (every position) and STEPS decode steps on ``backend``'s
    ``matmul`` path, each step's kernels per node, and each step's output pointer per node
    (``rope_in``: the pointers the rope launches read)."""
    be = m.backend(backend, matmul)
    # the dispatch chain on every step (cupy's default replays decode steps: no op runs there)
    s = Session(m, be, n_ctx=len(PROMPT) + STEPS, replay="off")
    ptrs: list[dict[str, Any]] = []
    rope = be.rope_f32

    def rope_seen(x: Any, *a: Any, **k: Any) -> Any:
        ptrs[-1].setdefault("rope_in", []).append(ptr(x))
        return rope(x, *a, **k)

    be.rope_f32 = rope_seen  # the instance's, for this run
    try:
        logits, launched = logged_steps(s, STEPS, ptrs)
    finally:
        del be.rope_f32
    return logits, launched, ptrs


def _models(tmp: Path) -> dict[str, Path]:
    return {
        "qwen2": _file(tmp, "qwen2", **{r: T.Q8_0 for r in ROLES}),  # biases in the matmul
        "llama3": DATA / "llama3" / "llama3-q8_0.gguf",  # rope factors
        "phi3": DATA / "phi3" / "phi3-q8_0.gguf",  # q/k/v fused in the file
    }


@pytest.mark.parametrize("matmul", ["quant", "f16"])
@pytest.mark.parametrize("name", ["qwen2", "llama3", "phi3"])
def test_rope_qk_on_the_device(tmp_path: Path, name: str, matmul: str) -> None:
    check(_models(tmp_path)[name], matmul, "cupy")


def check(path: Path, matmul: str, backend: str) -> None:
    """The checks above on ``backend`` (the CPU's NumPy runs them too: test_fusion.py)."""
    m, before = load_model(path), _two_ropes(load_model(path))
    c, n = m.config, m.config.n_layer
    assert [x.name for x in m.graph if x.op == "rope"] == [f"blk.{il}.rope_qk" for il in range(n)]
    got, launched, ptrs = _run(m, matmul, backend)
    want, launched_before, _ = _run(before, matmul, backend)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    for step in range(1, STEPS + 1):
        now, then = launched[step], launched_before[step]
        assert sum(map(len, then.values())) - sum(map(len, now.values())) == n
        p = ptrs[step]
        assert len(p["rope_in"]) == n  # one rope launch a layer
        for il in range(n):
            b = f"blk.{il}."
            assert now[b + "rope_qk"] == ["rope_f32"]
            assert now[b + "attn_qk"] == now[b + "rope_q"] == now[b + "rope_k"] == []
            # the rope reads the fused row where the matmul wrote it; q and k are its output
            assert p["rope_in"][il] == p[b + "attn_qk"] == p[b + "attn_qkv"]
            assert p[b + "rope_q"] == p[b + "rope_qk"]
            assert p[b + "rope_k"] == p[b + "rope_qk"] + 4 * c.q_dim
    assert sum(map(len, launched[0].values())) == sum(map(len, launched_before[0].values()))

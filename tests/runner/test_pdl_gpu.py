"""Programmatic dependent launches in the decode graph (Session(pdl=True), H200 only).

Run on a GPU host:  python3 -m pytest -m gpu tests/runner/test_pdl_gpu.py
The same kernels launched so that each may start while the one before it runs (its threads
wait in stamp.cuh's griddepcontrol.wait): the logits of a prefill and 8 greedy decode steps are
bit for bit those of the plain graph; a timed graph with pdl has every launch's stamps inside
the step and in launch order (a kernel's start is after its wait: never before the previous
kernel's end), and refusals name what is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.runner.test_fusion import PROMPT, ROLES, _file
from tracekit.model.demo import write_demo_model
from tracekit.runner.execute import GenerationError, Session, load_model

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parent.parent / "data" / "archs"
STEPS = 8


def _model(tmp: Path, name: str):
    from gguf import GGMLQuantizationType as T

    path = {
        "demo": lambda: write_demo_model(tmp / "demo.gguf"),
        "llama3": lambda: DATA / "llama3" / "llama3-q8_0.gguf",
        "qwen2": lambda: _file(tmp, "qwen2", **{r: T.Q8_0 for r in ROLES}),
    }[name]()
    return load_model(path)


def _decode(m, pdl: bool, matmul: str) -> tuple[np.ndarray, Session]:
    be = m.backend("cupy", matmul)
    s = Session(m, be, n_ctx=len(PROMPT) + STEPS + 2, replay="graph", pdl=pdl)
    rows = [np.asarray(be.to_host(s.run_step(PROMPT))[-1])]
    for _ in range(STEPS):
        rows.append(np.asarray(be.to_host(s.run_step([int(np.argmax(rows[-1]))]))[-1]))
    return np.stack(rows), s


@pytest.mark.parametrize("matmul", ["quant", "f16"])
@pytest.mark.parametrize("name", ["demo", "llama3", "qwen2"])
def test_pdl_graph_is_the_plain_graph_bit_for_bit(tmp_path: Path, name: str, matmul: str):
    m = _model(tmp_path, name)
    want, plain = _decode(m, False, matmul)
    got, s = _decode(m, True, matmul)
    assert s.replay is not None and s.replay.pdl and s.replay.graph_launches >= STEPS - 1
    assert plain.replay is not None and not plain.replay.pdl
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_a_timed_pdl_graph_keeps_its_launches_in_order(tmp_path: Path):
    m = _model(tmp_path, "llama3")
    _, s = _decode(m, True, "quant")
    r = s.replay
    tok = int(np.argmax(np.asarray(s.backend.to_host(s.replay_graph([1], "timed")))[-1]))
    assert tok >= 0
    _, stamp_words, _ = r.read_pass()
    timing, _ = r.node_times(s.n_past, stamp_words)
    prev_end = 0
    for start, end in timing.launches:
        assert 0 <= prev_end <= start <= end <= timing.span_ns  # waited for the one before
        prev_end = end
    assert all(t >= 0 for t in timing.node_time_s) and sum(timing.node_time_s) > 0


def test_pdl_is_refused_off_graph_replay(tmp_path: Path):
    m = _model(tmp_path, "demo")
    with pytest.raises(GenerationError, match="pdl.*needs replay 'graph'.*not replay 'plan'"):
        Session(m, "cupy", n_ctx=16, replay="plan", pdl=True)


@pytest.mark.parametrize("name", ["demo", "qwen2"])
def test_a_full_pdl_graph_gives_the_plain_full_graphs_statistics(tmp_path: Path, name: str):
    """A full graph that copies no output is captured with pdl too (replay.capture_graph): its
    node statistics and logits are those of the plain full graph, value for value."""
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    m = _model(tmp_path, name)
    got = {}
    for pdl in (False, True):
        t = load_trace(record_trace(m, tokens=PROMPT, steps=3, backend="cupy", capture="full",
                                    output=tmp_path / f"{pdl}.json", progress=False,
                                    cuda_graph=True, pdl=pdl))  # fmt: skip
        assert t["run"]["pdl"] is pdl
        got[pdl] = [
            ([r["stats"] for r in s["nodes"]], s["logits"]["top_k"]) for s in t["steps"][1:]
        ]
    assert got[True] == got[False]
    assert all(st is not None for stats, _ in got[True] for st in stats)

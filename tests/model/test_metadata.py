"""Issue 16: GGUF metadata values typed and ranged with the model's other checks, before any
weight loads; names from the file escaped when printed and cut in messages."""

from __future__ import annotations

import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

import tracekit
from tests.model.test_config import problems_of, rewrite
from tracekit.cli import main
from tracekit.model.config import ModelError
from tracekit.model.synthetic import write_synthetic_model
from tracekit.runner.execute import load_model


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("meta")
    return {a: write_synthetic_model(d / f"{a}.gguf", a, seed=3) for a in ("llama", "gemma3")}


EOS = "tokenizer.ggml.eos_token_id"


@pytest.mark.parametrize(
    "value, needle",
    [
        (("2", V.STRING), "= '2' is not an integer"),
        ((float("nan"), V.FLOAT32), "= nan is not an integer"),
        ((1.7, V.FLOAT32), "is not an integer"),
        (([1, 2], V.ARRAY), "is not an integer"),
        ((-1, V.INT32), "must be >= 0"),
        ((10**6, V.UINT32), "= 1000000 is outside the vocabulary [0, "),
    ],
)
def test_bad_eos_id_is_refused_before_weights_load(
    synth: dict[str, Path],
    tmp_path: Path,
    value: tuple,
    needle: str,
) -> None:
    bad = rewrite(synth["llama"], tmp_path / "m.gguf", meta={EOS: value})
    t0 = time.monotonic()
    problems = problems_of(bad)
    assert time.monotonic() - t0 < 5
    assert any(EOS in p and needle in p for p in problems), problems


def test_bos_id_out_of_range_is_refused(synth: dict[str, Path], tmp_path: Path) -> None:
    bad = rewrite(
        synth["llama"], tmp_path / "m.gguf", meta={"tokenizer.ggml.bos_token_id": (99999, V.UINT32)}
    )
    assert any("bos_token_id = 99999 is outside the vocabulary" in p for p in problems_of(bad))


def test_fewer_tokens_than_embedding_rows_is_refused(
    synth: dict[str, Path], tmp_path: Path
) -> None:
    r = gguf.GGUFReader(synth["llama"])
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    scores = r.fields.get("tokenizer.ggml.scores")
    types = r.fields.get("tokenizer.ggml.token_type")
    keep = len(tokens) - 40
    meta = {"tokenizer.ggml.tokens": (tokens[:keep], V.ARRAY)}
    if scores is not None:
        meta["tokenizer.ggml.scores"] = (scores.contents()[:keep], V.ARRAY)
    if types is not None:
        meta["tokenizer.ggml.token_type"] = (types.contents()[:keep], V.ARRAY)
    bad = rewrite(synth["llama"], tmp_path / "m.gguf", meta=meta)
    ps = problems_of(bad)
    assert any(f"the tokenizer has {keep:,} tokens but token_embd.weight has" in p for p in ps), ps


@pytest.mark.parametrize(
    "value, needle",
    [
        ((["true"] * 6, V.ARRAY), "must be 6 booleans (one per layer), got 6 values of type str"),
        (([True] * 5, V.ARRAY), "must be 6 booleans (one per layer), got 5 values"),
        (([1, 0, 1, 0, 1, 0], V.ARRAY), "of type int"),
        (("x", V.STRING), "must be a list of booleans or a positive integer"),
    ],
)
def test_sliding_window_pattern_must_be_booleans(
    synth: dict[str, Path], tmp_path: Path, value: tuple, needle: str
) -> None:
    key = "gemma3.attention.sliding_window_pattern"
    bad = rewrite(synth["gemma3"], tmp_path / "g.gguf", meta={key: value})
    ps = problems_of(bad)
    assert any(key in p and needle in p for p in ps), ps


def test_sliding_window_pattern_of_booleans_is_read(synth: dict[str, Path], tmp_path: Path) -> None:
    key = "gemma3.attention.sliding_window_pattern"
    pat = [True, False, True, True, False, True]
    ok = rewrite(synth["gemma3"], tmp_path / "g.gguf", meta={key: (pat, V.ARRAY)})
    assert load_model(ok).config.swa_layers == tuple(pat)


def test_info_escapes_control_characters_in_the_name(
    synth: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = rewrite(
        synth["llama"],
        tmp_path / "m.gguf",
        meta={"general.name": ("evil\x1b[2J\x07name", V.STRING)},
    )
    assert main(["info", str(m)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b[2J\\x07name" in out


def test_a_huge_tensor_name_is_cut_in_the_message(synth: dict[str, Path], tmp_path: Path) -> None:
    name = "blk.0." + "x" * 100_000
    bad = rewrite(
        synth["llama"],
        tmp_path / "m.gguf",
        tensors={name: (np.zeros((4, 32), dtype=np.float32), T.F32)},
    )
    with pytest.raises(ModelError) as e:
        load_model(bad)
    msg = str(e.value)
    assert "(100,006 characters)" in msg and max(len(x) for x in msg.splitlines()) < 400, msg[:500]


def test_model_error_is_exported_at_top_level() -> None:
    assert tracekit.ModelError is ModelError
    assert "ModelError" in tracekit.__all__

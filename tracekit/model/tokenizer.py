"""The GGUF's own tokenizer, rebuilt with the `tokenizers` library from `tokenizer.ggml.*`.

A GGUF carries no `tokenizer.json`: it stores the vocabulary, the merges (or per-token scores) and
the special ids as metadata under llama.cpp's key names. Two vocabularies are supported, built the
way transformers' GGUF converter builds them (`transformers/integrations/gguf/
gguf_tokenizer_mapping.py`):

- `gpt2`: byte-level BPE with the file's merges (SmolLM2, Qwen2, Llama 3). Text is split by the
  regex named by `tokenizer.ggml.pre` (llama.cpp's table), then mapped to the GPT-2 byte alphabet.
- `llama`: SentencePiece-style BPE (Llama 2, Gemma). The file has no merges; they are recovered
  from the vocabulary, ordered by score (by file position for Gemma, whose scores do not follow the
  merge order). Spaces become `▁` (U+2581); characters outside the vocabulary fall back to the
  `<0xNN>` byte tokens.

Control tokens (token_type 3) are matched whole in the input as special tokens, user-defined ones
(token_type 4) as plain added tokens, as llama.cpp does when it parses special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

__all__ = ["GGUFTokenizer", "TokenizerError", "load_tokenizer"]

_META = "\u2581"  # SentencePiece's visible space
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token_type values

# Split regexes of the byte-level vocabularies, keyed by `tokenizer.ggml.pre` (llama.cpp's names).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# (individual digits first?, main split regex)
_BYTE_LEVEL_PRE: dict[str, tuple[bool, str]] = {
    "default": (False, _GPT2_SPLIT),
    "gpt2": (False, _GPT2_SPLIT),
    # llama.cpp's SMOLLM/STARCODER/REFACT/COMMAND_R: every digit alone, then the GPT-2 regex.
    "smollm": (True, _GPT2_SPLIT),
    "starcoder": (True, _GPT2_SPLIT),
    "refact": (True, _GPT2_SPLIT),
    "command-r": (True, _GPT2_SPLIT),
    "llama-bpe": (False, _LLAMA3_SPLIT),
    "llama3": (False, _LLAMA3_SPLIT),
    "llama-v3": (False, _LLAMA3_SPLIT),
    "smaug-bpe": (False, _LLAMA3_SPLIT),
    "dbrx": (False, _LLAMA3_SPLIT),
    "falcon3": (False, _LLAMA3_SPLIT),
    "qwen2": (False, _QWEN2_SPLIT),
    "deepseek-r1-qwen": (False, _QWEN2_SPLIT),
    "megrez": (False, _QWEN2_SPLIT),
    "gpt-4o": (False, _GPT4O_SPLIT),
    "llama4": (False, _GPT4O_SPLIT),
}


class TokenizerError(ValueError):
    """The GGUF's tokenizer metadata is missing, malformed or of an unsupported kind."""


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's byte alphabet: printable bytes stand for themselves, the other 68 are shifted past
    # U+0100 so that every byte has a visible, non-space character.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    table = {b: chr(b) for b in keep}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


_BYTE_CHAR = _bytes_to_unicode()
_CHAR_BYTE = {c: b for b, c in _BYTE_CHAR.items()}


def _field(reader: gguf.GGUFReader, key: str) -> gguf.ReaderField | None:
    return reader.fields.get(key)


def _scalar(reader: gguf.GGUFReader, key: str, kinds: tuple[type, ...]) -> Any:
    field = _field(reader, key)
    if field is None:
        return None
    if not field.types or field.types[0] == gguf.GGUFValueType.ARRAY:
        raise TokenizerError(f"{key} must be a scalar, got an array")
    try:
        value = field.contents()
    except Exception as exc:  # gguf-py raises assorted errors on corrupt fields
        raise TokenizerError(f"{key} cannot be read: {exc}") from exc
    if isinstance(value, bool) and bool not in kinds:
        raise TokenizerError(f"{key} must be {kinds[0].__name__}, got bool {value}")
    if not isinstance(value, kinds):
        raise TokenizerError(f"{key} must be {kinds[0].__name__}, got {type(value).__name__}")
    return value


def _array(reader: gguf.GGUFReader, key: str, item: gguf.GGUFValueType) -> list[Any] | None:
    field = _field(reader, key)
    if field is None:
        return None
    if len(field.types) != 2 or field.types[0] != gguf.GGUFValueType.ARRAY:
        raise TokenizerError(f"{key} must be an array of {item.name}, got {field.types}")
    if field.types[1] != item:
        raise TokenizerError(f"{key} must be an array of {item.name}, not {field.types[1].name}")
    try:
        values = field.contents()
    except Exception as exc:
        raise TokenizerError(f"{key} cannot be read: {exc}") from exc
    return list(values)


def _token_id(reader: gguf.GGUFReader, key: str, n_vocab: int) -> int | None:
    value = _scalar(reader, key, (int,))
    if value is not None and not 0 <= value < n_vocab:
        raise TokenizerError(f"{key} = {value} is outside the vocabulary [0, {n_vocab})")
    return value


class GGUFTokenizer:
    """Encode text to token ids and back with the vocabulary a GGUF file carries."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        tokens: list[str],
        *,
        model: str,
        bos_id: int | None,
        eos_id: int | None,
        add_bos: bool,
        special_ids: frozenset[int],
    ) -> None:
        self._tok = tokenizer
        self._tokens = tokens
        self.model = model
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_bos = add_bos
        self._special = special_ids

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`.

        Args:
            text: the prompt; control tokens spelled in it (`<|im_start|>`) are kept whole.
            add_bos: prepend the BOS id; None follows the file's `tokenizer.ggml.add_bos_token`.

        Raises:
            TokenizerError: BOS requested but the file names no BOS token.
        """
        ids = self._tok.encode(text, add_special_tokens=False).ids
        bos = self.add_bos if add_bos is None else add_bos
        if bos:
            if self.bos_id is None:
                raise TokenizerError("add_bos requested but tokenizer.ggml.bos_token_id is missing")
            ids = [self.bos_id, *ids]
        return ids

    def _check(self, ids: Sequence[int]) -> list[int]:
        out = [int(i) for i in ids]
        for i in out:
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(
                    f"token id {i} is outside the vocabulary [0, {self.vocab_size})"
                )
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, special tokens included as written.

        Raises:
            TokenizerError: an id outside [0, vocab_size).
        """
        return self._tok.decode(self._check(ids), skip_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (a lone UTF-8 fragment for byte tokens)."""
        (token_id,) = self._check([token_id])
        piece = self._tokens[token_id]
        if token_id in self._special:
            return piece.encode("utf-8")
        if self.model == "gpt2":
            if all(c in _CHAR_BYTE for c in piece):
                return bytes(_CHAR_BYTE[c] for c in piece)
            return piece.encode("utf-8")
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace(_META, " ").encode("utf-8")

    def token_text(self, token_id: int) -> str:
        """Display text of one token: its text, with bytes that are not whole UTF-8 as `\\xNN`."""
        return self.token_bytes(token_id).decode("utf-8", errors="backslashreplace")


def _byte_level(tokens: list[str], merges: list[str] | None, pre: str) -> Tokenizer:
    if merges is None:
        raise TokenizerError("tokenizer.ggml.merges is missing (required for a gpt2 vocabulary)")
    if pre not in _BYTE_LEVEL_PRE:
        raise TokenizerError(
            f"tokenizer.ggml.pre {pre!r} is not supported; supported: {sorted(_BYTE_LEVEL_PRE)}"
        )
    # A token written outside the byte alphabet (a mislabelled special) is respelled byte-wise,
    # as transformers does, so that every vocabulary entry can be reached.
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if not all(c in _CHAR_BYTE for c in token):
            token = "".join(_BYTE_CHAR[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)
    pairs: list[tuple[str, str]] = []
    for n, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"tokenizer.ggml.merges[{n}] = {merge!r} is not two tokens")
        pairs.append((parts[0], parts[1]))
    tok = Tokenizer(BPE(vocab=vocab, merges=pairs, fuse_unk=False, dropout=None))
    digits, split = _BYTE_LEVEL_PRE[pre]
    steps: list[pre_tokenizers.PreTokenizer] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    steps.append(pre_tokenizers.Split(Regex(split), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(
    tokens: list[str],
    scores: list[float] | None,
    *,
    gemma: bool,
    add_space_prefix: bool,
    unk: str | None,
) -> Tokenizer:
    if gemma:
        # Gemma stores a token of several spaces as real spaces; the BPE looks it up as "▁▁".
        tokens = [_META * len(t) if t and not t.strip(" ") else t for t in tokens]
        rank: dict[str, float] = {}
        for index, token in enumerate(tokens):
            rank.setdefault(token, -index)  # earlier in the file = merged first
    else:
        if scores is None:
            raise TokenizerError(
                "tokenizer.ggml.scores is missing (required for a llama vocabulary)"
            )
        if len(scores) != len(tokens):
            raise TokenizerError(
                f"tokenizer.ggml.scores has {len(scores)} entries, tokens has {len(tokens)}"
            )
        rank = {}
        for token, score in zip(tokens, scores, strict=True):
            rank.setdefault(token, float(score))
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    # Recover the merges: every split of a token into two vocabulary pieces, best merged token
    # first (transformers' generate_merges, the order SentencePiece's BPE applies them in).
    found: list[tuple[float, int, int, int, int, str, str]] = []
    for token, score in rank.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                found.append(
                    (-score, len(left), len(right), vocab[left], vocab[right], left, right)
                )
    found.sort()
    merges = [(f[5], f[6]) for f in found]
    tok = Tokenizer(
        BPE(
            vocab=vocab,
            merges=merges,
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
            dropout=None,
        )
    )
    steps: list[decoders.Decoder] = [decoders.Replace(_META, " "), decoders.ByteFallback()]
    steps.append(decoders.Fuse())
    if gemma or not add_space_prefix:
        tok.normalizer = normalizers.Replace(" ", _META)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement=_META, prepend_scheme="first", split=False
        )
        steps.append(decoders.Strip(content=" ", left=1))
    tok.decoder = decoders.Sequence(steps)
    return tok


def load_tokenizer(reader: gguf.GGUFReader) -> GGUFTokenizer:
    """Build the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.

    Args:
        reader: an open `gguf.GGUFReader`.

    Returns:
        A `GGUFTokenizer` whose ids index the model's embedding rows.

    Raises:
        TokenizerError: metadata missing, of the wrong type, inconsistent, or of an unsupported
            tokenizer model.
    """
    model = _scalar(reader, "tokenizer.ggml.model", (str,))
    if model is None:
        raise TokenizerError("tokenizer.ggml.model is missing: the file carries no tokenizer")
    tokens = _array(reader, "tokenizer.ggml.tokens", gguf.GGUFValueType.STRING)
    if not tokens:
        raise TokenizerError("tokenizer.ggml.tokens is missing or empty")
    n_vocab = len(tokens)
    token_type = _array(reader, "tokenizer.ggml.token_type", gguf.GGUFValueType.INT32)
    if token_type is not None and len(token_type) != n_vocab:
        raise TokenizerError(
            f"tokenizer.ggml.token_type has {len(token_type)} entries, tokens has {n_vocab}"
        )
    bos_id = _token_id(reader, "tokenizer.ggml.bos_token_id", n_vocab)
    eos_id = _token_id(reader, "tokenizer.ggml.eos_token_id", n_vocab)
    unk_id = _token_id(reader, "tokenizer.ggml.unknown_token_id", n_vocab)
    add_bos = _scalar(reader, "tokenizer.ggml.add_bos_token", (bool,))
    arch = _scalar(reader, "general.architecture", (str,)) or ""

    try:
        if model == "gpt2":
            pre = _scalar(reader, "tokenizer.ggml.pre", (str,)) or "default"
            merges = _array(reader, "tokenizer.ggml.merges", gguf.GGUFValueType.STRING)
            tok = _byte_level(tokens, merges, pre)
            add_bos = bool(add_bos)  # llama.cpp: BPE vocabularies add no BOS unless told
        elif model == "llama":
            scores = _array(reader, "tokenizer.ggml.scores", gguf.GGUFValueType.FLOAT32)
            prefix = _scalar(reader, "tokenizer.ggml.add_space_prefix", (bool,))
            tok = _sentencepiece(
                tokens,
                scores,
                gemma=arch.startswith("gemma"),
                add_space_prefix=True if prefix is None else prefix,
                unk=None if unk_id is None else tokens[unk_id],
            )
            add_bos = True if add_bos is None else add_bos  # llama.cpp's SPM default
        else:
            raise TokenizerError(
                f"tokenizer.ggml.model {model!r} is not supported; supported: 'gpt2', 'llama'"
            )
    except TokenizerError:
        raise
    except Exception as exc:  # the tokenizers library rejects inconsistent vocabularies
        raise TokenizerError(f"cannot build the {model!r} tokenizer: {exc}") from exc

    special: set[int] = set()
    if token_type is not None:
        control = [i for i, t in enumerate(token_type) if t == _CONTROL]
        user = [i for i, t in enumerate(token_type) if t == _USER_DEFINED]
        if model == "gpt2":  # a "control" token outside the byte alphabet is a llama.cpp mislabel
            control = [i for i in control if all(c in _CHAR_BYTE for c in tokens[i])]
        tok.add_special_tokens(
            [AddedToken(tokens[i], special=True, normalized=False) for i in control]
        )
        vocab = tok.get_vocab(with_added_tokens=False)
        tok.add_tokens(
            [
                AddedToken(tokens[i], special=False, normalized=False)
                for i in user
                if tokens[i] in vocab
            ]
        )
        special = set(control)
    if add_bos and bos_id is None:
        raise TokenizerError("tokenizer.ggml.add_bos_token is set but bos_token_id is missing")
    return GGUFTokenizer(
        tok,
        tokens,
        model=model,
        bos_id=bos_id,
        eos_id=eos_id,
        add_bos=bool(add_bos),
        special_ids=frozenset(special),
    )

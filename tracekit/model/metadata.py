"""Checks of GGUF metadata values that the model's shape checks do not cover, run with them in
``model.config.read_config`` (before any weight is read): token ids in the vocabulary, a tokenizer
that matches the embedding, a sliding-window pattern of booleans. Each takes the loader's
typed accessor (``model.config._Meta``: ``get``/``int``, problems collected, not raised) so every
metadata value is read and typed in one place.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

#: Token-id keys a tokenizer may carry; each must be an integer id of the vocabulary.
TOKEN_ID_KEYS = (
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id",  # sic: gguf's spelling
)

#: A message quotes at most this many characters of a value from the file.
QUOTE_CHARS = 80


class Meta(Protocol):
    problems: list[str]

    def get(self, key: str, default: Any = ...) -> Any: ...

    def int(self, key: str, default: Any = ..., minimum: int = 1) -> int | None: ...


def shorten(text: str, keep: int = QUOTE_CHARS) -> str:
    """``text`` cut to ``keep`` characters with its length said (a 100 KB tensor name made a
    100,120-character error line)."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text):,} characters)"


def shorten_words(text: str, keep: int = QUOTE_CHARS) -> str:
    """Every run of more than ``keep`` non-space characters in ``text`` (a name quoted from the
    file) shortened as :func:`shorten` does; the rest of the message stays whole."""
    return re.sub(rf"\S{{{keep + 1},}}", lambda w: shorten(w.group(), keep), text)


def printable(text: str) -> str:
    """``text`` with control and other non-printable characters escaped (``\\x1b``): a
    ``general.name`` with terminal escape sequences is shown, not obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def check_token_ids(m: Meta, n_vocab: int) -> None:
    """Each token-id key present is an integer in [0, n_vocab) (1.7 was read as 1, a string
    or NaN failed after the weights loaded)."""
    for key in TOKEN_ID_KEYS:
        if m.get(key, None) is None:
            continue
        v = m.int(key, minimum=0)
        if v is not None and v >= n_vocab:
            m.problems.append(f"metadata {key} = {v} is outside the vocabulary [0, {n_vocab})")


def check_vocab(m: Meta, n_tokens: int | None, n_rows: int | None) -> None:
    """The tokenizer has one token per embedding row (llama.cpp requires it too: its
    token_embd must be [n_embd, n_vocab] with n_vocab the token count)."""
    if n_tokens is not None and n_rows is not None and n_tokens < n_rows:
        m.problems.append(
            f"the tokenizer has {n_tokens:,} tokens but token_embd.weight has {n_rows:,} rows "
            "(one token per row expected)"
        )


def sliding_window_layers(m: Meta, key: str, n_layer: int, default_every: int) -> tuple[bool, ...]:
    """Per layer: whether it uses the sliding window. ``key`` holds one boolean per layer, or
    (older files) an integer period N (every Nth layer global); absent: ``default_every``."""
    pattern = m.get(key, None)
    if pattern is None:
        n_pat = default_every
    elif isinstance(pattern, list):
        if len(pattern) != n_layer or not all(isinstance(x, bool) for x in pattern):
            kinds = sorted({type(x).__name__ for x in pattern})
            m.problems.append(
                f"metadata {key} must be {n_layer} booleans (one per layer), got {len(pattern)} "
                f"values of type {', '.join(kinds) or 'none'}"
            )
            return (False,) * n_layer
        return tuple(pattern)
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        n_pat = pattern
    else:
        m.problems.append(
            f"metadata {key} = {shorten(repr(pattern))} must be a list of booleans or a "
            "positive integer"
        )
        return (False,) * n_layer
    return tuple(il % n_pat < n_pat - 1 for il in range(n_layer))

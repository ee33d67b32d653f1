"""Small deterministic GGUF models of each architecture, written with ``gguf.GGUFWriter``.

They are random but well scaled (activations O(1), logits spread over a few units, so the
top-1 token is never a near tie), carry a real tokenizer (a byte-level BPE vocabulary learned
deterministically from a fixed text) and use every tensor type of tracekit's quant table
somewhere, so the parity tests against Hugging Face transformers cover every dequant path.
The file layout is llama.cpp's converter's: tensor names, metadata keys, llama's Q/K row
permutation, gemma3's norm weights with the +1 folded in.

gguf-py quantizes Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 itself; it has no quantizer for the K-quants and
the IQ4 types, so ``quantize_<type>`` below pack Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS
(a plain min/max or max-magnitude fit, not llama.cpp's search: valid blocks that decode close
to the input are all the tests need; ``gguf.quants.dequantize`` is the decoder they are checked
against).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

from tracekit.model.archs import ARCHS
from tracekit.quants import QUANT_TABLE

QK_K = 256

# -- K-quant and IQ4 packers (gguf-py has dequantizers only) ----------------------------------


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _pack_k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 12 bytes of eight 6-bit scales and mins per block (gguf-py's get_scale_min).

    bytes 0-3: sc[0:4] | (sc[4:8] >> 4) << 6      bytes 4-7: mn[0:4] | (mn[4:8] >> 4) << 6
    bytes 8-11: (sc[4:8] & 15) | (mn[4:8] & 15) << 4
    """
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    return out


def _fit_min_max(x: np.ndarray, levels: int) -> tuple[np.ndarray, ...]:
    """Per 32-value sub-block: y = d*sc*q - dmin*m with q in [0, levels]; returns the codes."""
    nb = x.shape[0]
    xs = x.reshape(nb, 8, 32)
    lo = np.minimum(xs.min(axis=-1), 0.0)  # llama.cpp clamps the min at 0 too
    hi = xs.max(axis=-1)
    scale = (hi - lo) / levels
    mins = -lo
    d = _f16(scale.max(axis=-1) / 63)
    dmin = _f16(mins.max(axis=-1) / 63)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 63)
        m = np.where(dmin32 > 0, np.rint(mins / dmin32), 0).clip(0, 63)
        step = (d32 * sc)[..., None]
        q = np.where(step > 0, np.rint((xs + (dmin32 * m)[..., None]) / step), 0)
    return d, dmin, sc, m, q.clip(0, levels).astype(np.uint8).reshape(nb, QK_K)


def _blocks(data: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    data = np.asarray(data, dtype=np.float32)
    if data.shape[-1] % QK_K:
        raise ValueError(f"row length {data.shape[-1]} is not a multiple of {QK_K}")
    return data.reshape(-1, QK_K), data.shape


def _nibbles(q: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K qs: element 64p + 32h + l is nibble h of byte 32p + l."""
    q = q.reshape(-1, 4, 2, 32) & 0x0F
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)


def quantize_q4_k(data: np.ndarray) -> np.ndarray:
    """Pack float rows (length a multiple of 256) as Q4_K blocks; returns uint8 [rows, bytes]."""
    x, shape = _blocks(data)
    d, dmin, sc, m, q = _fit_min_max(x, 15)
    out = np.concatenate(
        [d[:, None].view(np.uint8), dmin[:, None].view(np.uint8), _pack_k_scales(sc, m),
         _nibbles(q)], axis=1)  # fmt: skip
    return out.reshape(*shape[:-1], -1)


def quantize_q5_k(data: np.ndarray) -> np.ndarray:
    """Pack float rows as Q5_K blocks (Q4_K's layout + 32 bytes of 5th bits: bit g of byte l
    is element 32g + l's)."""
    x, shape = _blocks(data)
    d, dmin, sc, m, q = _fit_min_max(x, 31)
    hi = ((q.reshape(-1, 8, 32) >> 4) & 1).astype(np.uint8)
    qh = np.zeros((x.shape[0], 32), dtype=np.uint8)
    for g in range(8):
        qh |= hi[:, g] << g
    out = np.concatenate(
        [d[:, None].view(np.uint8), dmin[:, None].view(np.uint8), _pack_k_scales(sc, m), qh,
         _nibbles(q)], axis=1)  # fmt: skip
    return out.reshape(*shape[:-1], -1)


def quantize_q6_k(data: np.ndarray) -> np.ndarray:
    """Pack float rows as Q6_K blocks: ql 128 B, qh 64 B, 16 int8 scales, f16 d (210 B).

    Element 128h + 64s + l (l < 64): low nibble s of ql[64h + l]; element 128h + 32g + l
    (l < 32): 2 high bits at bit 2g of qh[32h + l]; value d * scale[e // 16] * (q - 32).
    """
    x, shape = _blocks(data)
    nb = x.shape[0]
    xs = x.reshape(nb, 16, 16)
    s = np.abs(xs).max(axis=-1) / 31
    d = _f16(s.max(axis=-1) / 127)
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(s / d32), 0).clip(0, 127)
        step = (d32 * sc)[..., None]
        q = np.where(step > 0, np.rint(xs / step), 0).clip(-32, 31)
    q = (q + 32).astype(np.uint8).reshape(nb, 2, 128)
    lo = q & 0x0F
    ql = (lo[:, :, 0:64] | (lo[:, :, 64:128] << 4)).reshape(nb, 128)
    hi = (q >> 4).reshape(nb, 2, 4, 32)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    out = np.concatenate(
        [ql, qh.reshape(nb, 64), sc.astype(np.int8).view(np.uint8), d[:, None].view(np.uint8)],
        axis=1,
    )
    return out.reshape(*shape[:-1], -1)


def _bit_planes(q: np.ndarray, bits: int, planes: int) -> np.ndarray:
    """Pack codes [n, planes, w] (each < 2**bits) into bytes [n, w]: plane p at bit bits * p."""
    out = np.zeros((q.shape[0], q.shape[2]), np.uint8)
    for p in range(planes):
        out |= (q[:, p] << (bits * p)).astype(np.uint8)
    return out


def quantize_q2_k(data: np.ndarray) -> np.ndarray:
    """Pack float rows as Q2_K blocks: scales[16] (4-bit sc | 4-bit m << 4), qs[64] (value
    128h + 32s + l at bits 2s of qs[32h + l]), f16 d, f16 dmin (84 B); x = d sc q - dmin m."""
    x, shape = _blocks(data)
    nb = x.shape[0]
    xs = x.reshape(nb, 16, 16)
    lo = np.minimum(xs.min(axis=-1), 0.0)
    scale, mins = (xs.max(axis=-1) - lo) / 3, -lo
    d, dmin = _f16(scale.max(axis=-1) / 15), _f16(mins.max(axis=-1) / 15)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 15)
        m = np.where(dmin32 > 0, np.rint(mins / dmin32), 0).clip(0, 15)
        step = (d32 * sc)[..., None]
        q = np.where(step > 0, np.rint((xs + (dmin32 * m)[..., None]) / step), 0)
    q = q.clip(0, 3).astype(np.uint8).reshape(nb, 2, 4, 32)
    qs = np.concatenate([_bit_planes(q[:, h], 2, 4) for h in range(2)], axis=1)
    scales = sc.astype(np.uint8) | (m.astype(np.uint8) << 4)
    out = np.concatenate(
        [scales, qs, d[:, None].view(np.uint8), dmin[:, None].view(np.uint8)], axis=1
    )
    return out.reshape(*shape[:-1], -1)


def quantize_q3_k(data: np.ndarray) -> np.ndarray:
    """Pack float rows as Q3_K blocks: hmask[32], qs[64], scales[12], f16 d (110 B). Value
    e = 32g + l (g = 4h + s): code c = q + 4 in [0, 8), bits 0-1 at bits 2s of qs[32h + l],
    bit 2 at bit g of hmask[l]; 6-bit scale u = sc + 32: low 4 bits in the nibble j // 8 of
    scales[j % 8], bits 4-5 at bits 2 (j // 4) of scales[8 + j % 4]; x = d sc q."""
    x, shape = _blocks(data)
    nb = x.shape[0]
    xs = x.reshape(nb, 16, 16)
    s = np.abs(xs).max(axis=-1) / 4
    d = _f16(s.max(axis=-1) / 31)
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(s / d32), 0).clip(-32, 31)
        step = (d32 * sc)[..., None]
        q = np.where(step > 0, np.rint(xs / step), 0).clip(-4, 3)
    c = (q + 4).astype(np.uint8).reshape(nb, 8, 32)  # [n, g, l]
    hmask = _bit_planes(c >> 2, 1, 8)
    low = (c & 3).reshape(nb, 2, 4, 32)
    qs = np.concatenate([_bit_planes(low[:, h], 2, 4) for h in range(2)], axis=1)
    u = (sc + 32).astype(np.uint8)
    scales = np.empty((nb, 12), np.uint8)
    scales[:, :8] = (u[:, :8] & 15) | ((u[:, 8:] & 15) << 4)
    scales[:, 8:] = _bit_planes(((u >> 4) & 3).reshape(nb, 4, 4), 2, 4)
    out = np.concatenate([hmask, qs, scales, d[:, None].view(np.uint8)], axis=1)
    return out.reshape(*shape[:-1], -1)


#: IQ4_NL/IQ4_XS's levels (gguf-py's table).
_IQ4_LEVELS = np.array(gguf.quants.IQ4_NL.kvalues, np.float32)


def _iq4_codes(x: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The nearest of the 16 levels to x / step (step 0: the level nearest 0), as uint8."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(step != 0, x / step, 0.0)
    return np.abs(t[..., None] - _IQ4_LEVELS).argmin(axis=-1).astype(np.uint8)


def _iq4_scale(xs: np.ndarray) -> np.ndarray:
    """Per run of the last axis: the step that maps its largest-magnitude value to -127."""
    ext = np.take_along_axis(xs, np.abs(xs).argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return -ext / 127


def quantize_iq4_nl(data: np.ndarray) -> np.ndarray:
    """Pack float rows (length a multiple of 32) as IQ4_NL blocks: f16 d, qs[16] nibbles as
    Q4_0's (18 B); x = d LEVELS[q]."""
    x = np.asarray(data, dtype=np.float32)
    if x.shape[-1] % 32:
        raise ValueError(f"row length {x.shape[-1]} is not a multiple of 32")
    xs = x.reshape(-1, 32)
    d = _f16(_iq4_scale(xs))
    q = _iq4_codes(xs, d.astype(np.float32)[:, None])
    out = np.concatenate([d[:, None].view(np.uint8), q[:, :16] | (q[:, 16:] << 4)], axis=1)
    return out.reshape(*x.shape[:-1], -1)


def quantize_iq4_xs(data: np.ndarray) -> np.ndarray:
    """Pack float rows as IQ4_XS blocks: f16 d, u16 scales_h, scales_l[4], qs[128] (136 B).
    Sub-block j of 32 has the 6-bit scale u = ls + 32 (low 4 bits: nibble j % 2 of
    scales_l[j // 2], bits 4-5 at bits 2j of scales_h) and 16 bytes of nibbles as IQ4_NL's;
    x = d ls LEVELS[q]."""
    x, shape = _blocks(data)
    nb = x.shape[0]
    xs = x.reshape(nb, 8, 32)
    s = _iq4_scale(xs)
    d = _f16(np.abs(s).max(axis=-1) / 31)
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.where(d32 > 0, np.rint(s / d32), 0).clip(-32, 31)
    q = _iq4_codes(xs, (d32 * ls)[..., None])
    qs = (q[:, :, :16] | (q[:, :, 16:] << 4)).reshape(nb, 128)
    u = (ls + 32).astype(np.uint16)
    scales_l = ((u[:, 0::2] & 15) | ((u[:, 1::2] & 15) << 4)).astype(np.uint8)
    scales_h = np.zeros((nb, 1), np.uint16)
    for j in range(8):
        scales_h[:, 0] |= ((u[:, j] >> 4) & 3) << (2 * j)
    out = np.concatenate([d[:, None].view(np.uint8), scales_h.view(np.uint8), scales_l, qs], axis=1)
    return out.reshape(*shape[:-1], -1)


_K_QUANTIZERS: dict[T, Callable[[np.ndarray], np.ndarray]] = {
    T.Q2_K: quantize_q2_k,
    T.Q3_K: quantize_q3_k,
    T.Q4_K: quantize_q4_k,
    T.Q5_K: quantize_q5_k,
    T.Q6_K: quantize_q6_k,
    T.IQ4_NL: quantize_iq4_nl,
    T.IQ4_XS: quantize_iq4_xs,
}


def quantize(data: np.ndarray, qtype: T) -> np.ndarray:
    """Encode float data as ``qtype`` (gguf-py's quantizers, plus the packers above)."""
    if qtype in _K_QUANTIZERS:
        return _K_QUANTIZERS[qtype](data)
    return gguf.quants.quantize(np.asarray(data, dtype=np.float32), qtype)


# -- a byte-level BPE vocabulary, learned deterministically -----------------------------------------
CORPUS = """\
The kernel reads one block of weights, scales each value and writes the result back to memory.
A residual add is bandwidth bound: it reads two vectors and writes one, so its time is bytes
over bandwidth. The embedding gather reads one row per token; with thirty tokens it is launch
bound, because the launch costs more than the memory traffic. The matmul of a prefill is compute
bound, the matmul of a decode step reads every weight once for a single token and is bandwidth
bound again. Every node of the graph runs inside a range: the profiler shows the range name, the
trace shows what the node did to the data. The tokenizer splits the prompt into tokens, the
model turns the tokens into logits, and the sampler picks the next token from the logits.
We read the kernels the way a contributor should: the source, line by line, then the CPU
counterpart, then the arithmetic of bytes and flops. The quantized weights are stored in blocks
of thirty-two or two hundred fifty-six values with a scale per block; the dequant kernel turns
them into half precision once, at load, and the cache keeps them for every later call.
"""

#: GPT-2's pre-tokenizer regex (split words, numbers, punctuation, spaces).
_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _byte_alphabet() -> list[str]:
    """GPT-2's bytes_to_unicode, as a list indexed by byte value."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int
    eos_id: int

    def padded(self, n_vocab: int) -> Vocab:
        """Padded to ``n_vocab`` with ``[PAD{i}]`` tokens of type 5 (unused), as llama.cpp's
        converter pads a vocabulary to the model's embedding rows."""
        n = n_vocab - len(self.tokens)
        if n < 0:
            raise ValueError(f"vocabulary of {len(self.tokens)} tokens exceeds n_vocab {n_vocab}")
        return Vocab(
            self.tokens + [f"[PAD{i}]" for i in range(len(self.tokens), n_vocab)],
            self.token_types + [5] * n,
            self.merges,
            self.bos_id,
            self.eos_id,
        )


def byte_level_vocab(n_merges: int, corpus: str = CORPUS) -> Vocab:
    """256 byte tokens (id = byte value), ``n_merges`` learned merges, then the specials.

    The merges are learned by plain BPE on ``corpus`` split by GPT-2's regex: each round merges
    the most frequent adjacent pair, ties broken by the pair's text, so the result is the same
    on every machine and every run.
    """
    from tokenizers import Regex, pre_tokenizers

    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    words = Counter(w for w, _ in pre.pre_tokenize_str(corpus))
    seqs = {w: list(w) for w in words}
    tokens = _byte_alphabet()
    merges: list[str] = []
    while len(merges) < n_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:], strict=False):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    n_normal = len(tokens)
    tokens += list(SPECIAL_TOKENS)
    types = [1] * n_normal + [3] * len(SPECIAL_TOKENS)  # 1 normal, 3 control (llama.cpp)
    return Vocab(tokens, types, merges, bos_id=n_normal, eos_id=n_normal)


# -- model writer ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SyntheticSpec:
    """A synthetic model: architecture, dimensions, tensor types, seed.

    ``types`` maps a role (``attn_q``, ``ffn_down``, ``token_embd``, ``output``, ...) to one type
    or a list of types cycled over the layers.
    """

    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    types: dict[str, T | tuple[T, ...]]
    n_ctx: int = 512
    n_merges: int = 45
    n_vocab: int | None = None  # pad the vocabulary to this many tokens
    rope_base: float = 10000.0
    rms_eps: float = 1e-6
    tied: bool = False
    sliding_window: int = 0
    pre: str = "gpt2"
    name: str = "tracekit synthetic"
    embd_std: float | None = None  # None: 1 untied; logit_gain / sqrt(n_embd) tied
    logit_gain: float = 3.0
    extra_meta: dict[str, object] = field(default_factory=dict)
    rope_freqs: tuple[float, ...] = ()  # llama 3: written as an F32 rope_freqs.weight
    #: Quantized weights as random valid blocks (codes uniform, f16 scales set so values have
    #: about the std asked for) instead of quantized normal draws: seconds instead of minutes
    #: for a multi-GB speed-benchmark file; the logits mean nothing.
    random_blocks: bool = False

    def type_of(self, role: str, il: int = 0) -> T:
        t = self.types.get(role, T.F32)
        return t[il % len(t)] if isinstance(t, tuple) else t


def _llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation of Q/K rows (HF rotate-half -> ggml adjacent pairs)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def llama3_rope_factors(
    base: float,
    head_dim: int,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_context: int = 8192,
) -> tuple[float, ...]:
    """The per-pair divisors llama.cpp's converter writes for HF's ``rope_type: llama3``."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < original_context / high_freq_factor:
            out.append(1.0)
        elif wavelen > original_context / low_freq_factor:
            out.append(factor)
        else:
            smooth = (original_context / wavelen - low_freq_factor) / (
                high_freq_factor - low_freq_factor
            )
            out.append(1 / ((1 - smooth) / factor + smooth))
    return tuple(out)


@dataclass(frozen=True)
class _Lazy:
    """A normal draw not made yet: the shape and std of a weight ``put`` may write as random
    blocks instead (``SyntheticSpec.random_blocks``)."""

    shape: tuple[int, ...]
    std: float


def random_blocks(
    rng: np.random.Generator, shape: tuple[int, ...], std: float, qtype: T
) -> np.ndarray:
    """Valid random ``qtype`` blocks for a ``shape`` weight (``[rows, row bytes]`` uint8, as
    :func:`quantize` returns): uniform code bytes, every f16 field of a block the same positive
    scale, varying by block within a factor of 3, chosen so that the decoded values' std is
    about ``std`` whatever the type's code width and sub-scales (a value is linear in a
    block's f16 fields: scale, offset or minimum), so no block holds a NaN or Inf."""
    qt = QUANT_TABLE[qtype]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    raw = rng.integers(0, 256, size=(rows, qt.row_bytes(cols)), dtype=np.uint8)
    blocks = raw.reshape(-1, qt.type_size)
    spread = rng.uniform(0.5, 1.5, blocks.shape[0])

    def set_fields(scale: np.ndarray) -> None:
        d = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
        for off in qt.f16_fields:
            blocks[:, off : off + 2] = d

    set_fields(spread)  # unit scale: measure what the type's codes spread to
    sample = blocks[: min(len(blocks), 256)]
    values = np.empty((len(sample), qt.block_size), np.float32)
    qt.decode(sample, values)
    unit_std = float(values.std()) or 1.0
    set_fields(spread * (std / unit_std))
    return raw


def write_model(path: str | os.PathLike[str], spec: SyntheticSpec, seed: int) -> Path:
    """Write ``spec`` as a GGUF file with weights drawn from ``seed``; returns the path.

    The layout follows the architecture's declaration (tracekit.model.archs): Q/K rows permuted
    for adjacent-pair rope, biases, Q/K norms, post-norms, gemma's window metadata.

    Raises:
        ValueError: an undeclared architecture, one with fused tensors (not written here), or
            rope factors for one that takes none.
    """
    s = spec
    arch = ARCHS.get(s.arch)
    if arch is None:
        raise ValueError(f"unsupported architecture {s.arch!r} (supported: {', '.join(ARCHS)})")
    if arch.fused_qkv or arch.fused_gate_up:
        raise ValueError(f"the synthetic writer does not write {s.arch}'s fused tensors")
    if s.rope_freqs and not arch.rope_freqs:
        raise ValueError(f"{s.arch} takes no rope_freqs.weight (rope_freqs must be empty)")
    rng = np.random.default_rng(seed)
    vocab = byte_level_vocab(s.n_merges)
    if s.n_vocab is not None:
        vocab = vocab.padded(s.n_vocab)
    n_vocab = len(vocab.tokens)
    e, f, hd = s.n_embd, s.n_ff, s.head_dim
    qd, kvd = s.n_head * hd, s.n_head_kv * hd

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)
        return x

    def norm_weight(n: int) -> np.ndarray:
        # gemma stores 1 + w (HF's x * (1 + w)); others store w near 1 directly.
        return 1.0 + normal((n,), 0.1)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), s.arch)
    w.add_name(s.name)
    w.add_block_count(s.n_layer)
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(e)
    w.add_feed_forward_length(f)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_rope_freq_base(s.rope_base)
    if arch.sliding_window is not None:  # gemma's converter writes these, no rope dimension
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(s.sliding_window)
    else:
        w.add_rope_dimension_count(hd)
        if hd != e // s.n_head:
            w.add_key_length(hd)
            w.add_value_length(hd)
    w.add_vocab_size(n_vocab)
    w.add_file_type(1)  # informational only (llama.cpp's "mostly F16"); tensors carry types
    for k, v in s.extra_meta.items():
        if isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        else:
            w.add_string(k, str(v))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(s.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.token_types)
    w.add_token_merges(vocab.merges)
    w.add_bos_token_id(vocab.bos_id)
    w.add_eos_token_id(vocab.eos_id)
    w.add_pad_token_id(vocab.eos_id)
    w.add_add_bos_token(False)

    def put(name: str, data: np.ndarray, qtype: T) -> None:
        if isinstance(data, _Lazy):
            if s.random_blocks and QUANT_TABLE[qtype].is_quantized:
                w.add_tensor(name, random_blocks(rng, data.shape, data.std, qtype), raw_dtype=qtype)
                return
            data = normal(data.shape, data.std)
        if qtype == T.F32:
            w.add_tensor(name, data.astype(np.float32))
        elif qtype == T.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    embd_std = s.embd_std if s.embd_std is not None else (s.logit_gain * e**-0.5 if s.tied else 1.0)
    emb = _Lazy((n_vocab, e), embd_std)
    put("token_embd.weight", emb, s.type_of("token_embd"))
    for il in range(s.n_layer):
        b = f"blk.{il}."
        put(b + "attn_norm.weight", norm_weight(e), T.F32)
        wq, wk = _Lazy((qd, e), e**-0.5), _Lazy((kvd, e), e**-0.5)
        if not arch.rope_neox and not s.random_blocks:
            wq, wk = normal(wq.shape, wq.std), normal(wk.shape, wk.std)
            wq, wk = _llama_permute(wq, s.n_head), _llama_permute(wk, s.n_head_kv)
        put(b + "attn_q.weight", wq, s.type_of("attn_q", il))
        put(b + "attn_k.weight", wk, s.type_of("attn_k", il))
        put(b + "attn_v.weight", _Lazy((kvd, e), e**-0.5), s.type_of("attn_v", il))
        if arch.qkv_bias:
            put(b + "attn_q.bias", normal((qd,), 0.5), T.F32)
            put(b + "attn_k.bias", normal((kvd,), 0.5), T.F32)
            put(b + "attn_v.bias", normal((kvd,), 0.2), T.F32)
        if arch.qk_norm:
            put(b + "attn_q_norm.weight", norm_weight(hd), T.F32)
            put(b + "attn_k_norm.weight", norm_weight(hd), T.F32)
        put(b + "attn_output.weight", _Lazy((e, qd), 0.5 * qd**-0.5), s.type_of("attn_output", il))
        if arch.post_norms:
            put(b + "post_attention_norm.weight", norm_weight(e), T.F32)
        put(b + "ffn_norm.weight", norm_weight(e), T.F32)
        put(b + "ffn_gate.weight", _Lazy((f, e), e**-0.5), s.type_of("ffn_gate", il))
        put(b + "ffn_up.weight", _Lazy((f, e), e**-0.5), s.type_of("ffn_up", il))
        put(b + "ffn_down.weight", _Lazy((e, f), 0.5 * f**-0.5), s.type_of("ffn_down", il))
        if arch.post_norms:
            put(b + "post_ffw_norm.weight", norm_weight(e), T.F32)
    put("output_norm.weight", norm_weight(e), T.F32)
    if s.rope_freqs:
        put("rope_freqs.weight", np.array(s.rope_freqs, dtype=np.float32), T.F32)
    if not s.tied:
        out: np.ndarray | _Lazy = _Lazy((n_vocab, e), s.logit_gain * e**-0.5)
        if not (s.random_blocks and QUANT_TABLE[s.type_of("output")].is_quantized):
            out = normal(out.shape, out.std)
            out[vocab.bos_id :] *= 0.1  # untrained special tokens: rarely chosen
        put("output.weight", out, s.type_of("output"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


#: The synthetic models of the parity tests. Across the three, every type of the quant table is
#: used for some matmul weight or the embedding (K-quants only where rows are 256-multiples).
SPECS: dict[str, SyntheticSpec] = {
    "llama": SyntheticSpec(
        arch="llama",
        n_layer=3,
        n_embd=128,
        n_ff=256,
        n_head=4,
        n_head_kv=2,
        head_dim=32,
        types={
            "token_embd": T.F16,
            "attn_q": (T.Q4_0, T.Q8_0, T.Q4_1),
            "attn_k": (T.Q4_1, T.Q5_0, T.F32),
            "attn_v": (T.Q5_0, T.BF16, T.Q8_0),
            "attn_output": (T.Q5_1, T.Q4_0, T.F16),
            "ffn_gate": (T.Q8_0, T.Q5_1, T.Q4_0),
            "ffn_up": (T.BF16, T.Q4_1, T.Q5_0),
            "ffn_down": (T.Q5_K, T.Q4_K, T.Q6_K),
            "output": T.Q8_0,
        },
        rope_base=10000.0,
        rms_eps=1e-5,
        pre="smollm",
    ),
    "qwen2": SyntheticSpec(
        arch="qwen2",
        n_layer=2,
        n_embd=256,
        n_ff=512,
        n_head=4,
        n_head_kv=2,
        head_dim=64,
        types={
            "token_embd": T.Q4_K,
            "attn_q": (T.Q4_K, T.Q3_K),
            "attn_k": (T.Q5_K, T.Q6_K),
            "attn_v": (T.Q6_K, T.Q8_0),
            "attn_output": (T.Q4_0, T.IQ4_XS),
            "ffn_gate": (T.IQ4_NL, T.Q6_K),
            "ffn_up": (T.Q2_K, T.Q5_1),
            "ffn_down": (T.Q6_K, T.Q4_1),
        },
        tied=True,
        rope_base=1000000.0,
        pre="qwen2",
    ),
    "gemma3": SyntheticSpec(
        arch="gemma3",
        n_layer=6,  # layer 5 is the global one (every 6th)
        n_embd=128,
        n_ff=256,
        n_head=2,
        n_head_kv=1,
        head_dim=256,  # = HF's default query_pre_attn_scalar, so both scale by 1/16
        types={
            "token_embd": T.IQ4_NL,
            "attn_q": (T.Q4_0, T.Q8_0),
            "attn_k": (T.Q8_0, T.Q4_1),
            "attn_v": (T.Q4_1, T.F16),
            "attn_output": (T.Q4_K, T.Q6_K, T.Q5_K),
            "ffn_gate": (T.F16, T.Q5_1),
            "ffn_up": (T.Q5_1, T.BF16),
            "ffn_down": (T.Q6_K, T.Q4_K),
        },
        tied=True,
        rope_base=1000000.0,
        sliding_window=4,
        embd_std=0.25,  # x sqrt(128) at the input: O(1) activations, logits spread ~3
    ),
}


#: Benchmark-sized synthetic models (not part of the parity tests: too big for CI).
BENCH_SPECS: dict[str, SyntheticSpec] = {
    # Qwen2.5-0.5B's shape (the seed's model): 24 layers, n_embd 896, 14 heads / 2 KV heads,
    # n_ff 4864, vocab 151936, tied output; Q4_0 everywhere but norms and biases, like the
    # seed's 0.5B Q4_0 file (its Q4_0 embedding is 76.6 MB). 896 is not a multiple of 256, so
    # no K-quants. About 280 MB on disk; writing it takes tens of seconds (host quantization).
    "qwen2-0.5b": SyntheticSpec(
        arch="qwen2",
        name="tracekit synthetic qwen2 0.5B-shape",
        n_layer=24,
        n_embd=896,
        n_ff=4864,
        n_head=14,
        n_head_kv=2,
        head_dim=64,
        n_ctx=4096,
        n_merges=253,
        n_vocab=151936,
        types={
            r: T.Q4_0
            for r in (
                "token_embd",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            )
        },  # fmt: skip
        tied=True,
        rope_base=1000000.0,
        pre="qwen2",
    ),
}


_LLAMA3_TYPES: dict[str, T | tuple[T, ...]] = {
    r: T.Q4_K
    for r in ("token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
              "ffn_down")
}  # fmt: skip
_LLAMA3_TYPES["output"] = T.Q6_K  # as llama.cpp's Q4_K_M keeps it
# Llama-3.1-8B's shape: 32 layers, n_embd 4096, 32 heads / 8 KV heads of 128, n_ff 14336, vocab
# 128256, untied output, rope base 500000 with llama3 frequency factors (factor 8, original
# context 8192); Q4_K weights (Q6_K output) as random blocks (4.6 GB, written in about a minute;
# a speed benchmark: its logits mean nothing).
BENCH_SPECS["llama3-8b"] = SyntheticSpec(
    arch="llama",
    name="tracekit synthetic llama3 8B-shape",
    n_layer=32,
    n_embd=4096,
    n_ff=14336,
    n_head=32,
    n_head_kv=8,
    head_dim=128,
    n_ctx=8192,
    n_merges=253,
    n_vocab=128256,
    types=_LLAMA3_TYPES,
    rope_base=500000.0,
    rms_eps=1e-5,
    pre="smollm",
    rope_freqs=llama3_rope_factors(500000.0, 128),
    random_blocks=True,
)


def write_synthetic_model(
    path: str | os.PathLike[str], arch: str, seed: int = 0, **changes: object
) -> Path:
    """Write the synthetic model ``arch`` (a key of ``SPECS`` or ``BENCH_SPECS``; fields
    overridable) to ``path``.

    Raises:
        ValueError: a name without a synthetic spec.
    """
    specs = {**SPECS, **BENCH_SPECS}
    if arch not in specs:
        raise ValueError(f"no synthetic model {arch!r} (have: {', '.join(specs)})")
    spec = specs[arch]
    if changes:
        from dataclasses import replace

        spec = replace(spec, **changes)  # type: ignore[arg-type]
    return write_model(path, spec, seed)

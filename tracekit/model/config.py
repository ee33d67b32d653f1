"""A GGUF model file: its configuration from metadata and its tensors, read and checked.

Loading never parses GGUF by hand: ``gguf.GGUFReader`` memory-maps the file and tracekit reads
its fields and tensor views. Everything is checked before anything runs — architecture,
metadata, every expected tensor's presence, shape and type, the data layout (in the file,
aligned, back to back in tensor-info order as ggml requires) — and all problems are reported together in one :class:`ModelError`.

Architectures: one declaration each in :mod:`tracekit.model.archs` (its GGUF name, the metadata
it reads, the tensors and graph features it adds); :func:`read_config` reads a file by its
declaration and writes the features into the :class:`ModelConfig` that :func:`expected_tensors`
and the graph builder read.

Shapes: the reader gives ``ne`` in ggml order ``[in, out]``; tracekit uses NumPy order
``(out, in)`` everywhere (a matmul weight is ``[n, k]``, one row per output).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from tracekit.model.archs import ARCHS, Arch
from tracekit.model.metadata import (
    check_token_ids,
    check_vocab,
    shorten_words,
    sliding_window_layers,
)
from tracekit.quants import QUANT_TABLE, QuantType, supported_names

#: The declared architectures' names (tracekit.model.archs), in declaration order.
SUPPORTED_ARCHS = tuple(ARCHS)
#: Rope scalings tracekit runs: ``rope.scaling.type`` values, and ``llama3`` (rope_freqs.weight).
SUPPORTED_ROPE_SCALINGS = ("none", "linear", "llama3")
#: The tensor of llama 3's per-pair rope frequency divisors.
ROPE_FREQS = "rope_freqs.weight"

#: Tensor types a 1-D tensor (norm weight, bias) may have; converted to f32 once at load.
_VECTOR_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


class ModelError(ValueError):
    """A model file tracekit cannot run; ``problems`` lists everything wrong, one per line."""

    def __init__(self, problems: list[str], path: str | os.PathLike[str] | None = None) -> None:
        # a value quoted from the file (a 100 KB tensor name) is cut in the message
        self.problems = [shorten_words(p) for p in problems] or ["unknown problem"]
        self.path = None if path is None else str(path)
        where = f"{Path(self.path).name}: " if self.path else ""
        super().__init__("\n".join(where + p for p in self.problems))


@dataclass(frozen=True)
class ModelConfig:
    """What the graph needs to know, read from the GGUF metadata (``{arch}.*`` keys)."""

    arch: str
    name: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx: int  # the model's trained context length ({arch}.context_length)
    n_vocab: int
    rms_eps: float
    rope_base: float
    rope_base_swa: float
    rope_freq_scale: float  # 1 / linear scaling factor (1.0: none)
    rope_neox: bool  # NeoX pairs (i, i + d/2) vs ggml's normal adjacent pairs (2i, 2i+1)
    qkv_bias: bool
    qk_norm: bool
    post_norms: bool
    embed_scale: float  # 1.0: none
    ffn_act: str  # "silu" | "gelu_tanh"
    attn_scale: float
    sliding_window: int  # 0: no sliding-window layers
    swa_layers: tuple[bool, ...]
    tied_output: bool
    rope_scaling: str = "none"  # one of SUPPORTED_ROPE_SCALINGS
    rope_freq_factors: tuple[float, ...] = ()  # llama3: rope_freqs.weight, one per pair
    attn_softcap: float = 0.0  # gemma2: cap * tanh(s / cap) on the scaled scores (0: none)
    final_softcap: float = 0.0  # gemma2: the same on the logits (0: none)
    fused_qkv: bool = False  # phi3: one attn_qkv matmul, split into q, k, v
    fused_gate_up: bool = False  # phi3: one ffn_up matmul holding [gate | up]
    notes: tuple[str, ...] = ()  # how this file is run where that differs from its metadata

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim

    def layer_window(self, il: int) -> int:
        """The attention window of layer ``il`` (0: full causal attention)."""
        return self.sliding_window if self.swa_layers[il] else 0

    def layer_rope_base(self, il: int) -> float:
        return self.rope_base_swa if self.swa_layers[il] else self.rope_base

    def layer_rope_freq_scale(self, il: int) -> float:
        # llama.cpp: rope_freq_scale_train_swa = 1 for gemma3's local layers (no scaling there).
        return 1.0 if self.swa_layers[il] else self.rope_freq_scale

    def summary(self) -> dict[str, Any]:
        """The architecture-specific settings, for ``tracekit info``, the trace and the UI."""
        out: dict[str, Any] = {
            "rope": "neox" if self.rope_neox else "normal",
            "rope_base": self.rope_base,
            "rope_scaling": self.rope_scaling,
        }
        if self.rope_scaling == "linear":
            out["rope_scaling_factor"] = 1.0 / self.rope_freq_scale
        if self.rope_freq_factors:
            out["rope_freq_factors"] = [float(f) for f in self.rope_freq_factors]
        if any(self.swa_layers):
            out["rope_base_swa"] = self.rope_base_swa
        out["window_per_layer"] = [self.layer_window(il) for il in range(self.n_layer)]
        out["attn_scale"] = self.attn_scale
        out["attn_softcap"] = self.attn_softcap
        out["final_softcap"] = self.final_softcap
        out["qk_norm"] = self.qk_norm
        out["qkv_bias"] = self.qkv_bias
        out["post_norms"] = self.post_norms
        out["fused_qkv"] = self.fused_qkv
        out["fused_gate_up"] = self.fused_gate_up
        out["ffn_act"] = self.ffn_act
        out["embed_scale"] = self.embed_scale
        out["tied_output"] = self.tied_output
        if self.notes:
            out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the file: name, type, NumPy shape and its memory-mapped data."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    nbytes: int
    offset: int
    data: np.ndarray = field(repr=False, compare=False)

    @property
    def quant(self) -> QuantType:
        return QUANT_TABLE[self.qtype]

    def raw(self) -> np.ndarray:
        """The tensor's bytes as a 1-D uint8 view of the memory map (no copy)."""
        return np.asarray(self.data).reshape(-1).view(np.uint8)


# -- reading -----------------------------------------------------------------------------------
class _CheckedReader(gguf.GGUFReader):
    """GGUFReader that checks tensor extents and types before it builds the tensor views.

    The stock reader fails on a truncated file with a reshape error that names no tensor; here
    every tensor whose data runs past the file end (or whose type id is unknown) is listed, and
    the data layout is checked as ggml's ``gguf.cpp`` checks it: offsets aligned, tensors back
    to back in tensor-info order, no two sharing bytes.
    """

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
        # The stock reader hands back an empty view past the end of the file and carries on, so
        # a fuzzed array count of 2^61 loops (nearly) forever: every read must fit the file.
        itemsize = np.dtype(dtype).itemsize
        end = int(offset) + itemsize * int(count)
        if int(offset) < 0 or end > int(self.data.shape[0]):
            raise ValueError(
                f"a {np.dtype(dtype).name} x {int(count)} read at byte {int(offset)} runs past "
                f"the file end ({int(self.data.shape[0])} bytes)"
            )
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
        if raw_type == gguf.GGUFValueType.ARRAY:
            # Bound the item count by the bytes left before looping over it: each item takes at
            # least its scalar size (8 bytes of length for a string).
            itype = int(self._get(orig_offs, np.uint32)[0])
            count = int(self._get(orig_offs + 4, np.uint64)[0])
            try:
                vtype = gguf.GGUFValueType(itype)
            except ValueError:
                raise ValueError(f"array of unknown value type {itype}") from None
            np_t = self.gguf_scalar_to_np.get(vtype)
            least = np.dtype(np_t).itemsize if np_t is not None else 8
            left = int(self.data.shape[0]) - (orig_offs + 12)
            if count * least > left:
                raise ValueError(
                    f"an array of {count} {vtype.name} items needs at least {count * least} "
                    f"bytes, but only {left} are left in the file"
                )
        return super()._get_field_parts(orig_offs, raw_type)

    def _build_tensors(self, start_offs: int, fields: list[gguf.ReaderField]) -> None:
        problems = []
        size = int(self.data.shape[0])
        align = int(self.alignment)
        extents: list[tuple[int, int, str]] = []
        # ggml's gguf.cpp requires the tensors' data to be back to back in tensor-info order:
        # the first at offset 0, each next one at the end of the one before rounded up to the
        # alignment (GGUFWriter and llama.cpp write files so). That catches what the extent
        # checks cannot, e.g. a type changed to a smaller one whose bytes still fit. Checked up
        # to the first tensor that breaks the chain: later offsets have no defined expectation.
        expected: int | None = 0
        before = ""
        for f in fields:
            _name_len, name_data, _n_dims, dims, raw_dtype, offset = f.parts
            name = bytes(name_data).decode("utf-8", errors="replace")
            try:
                qtype = GGMLQuantizationType(int(raw_dtype[0]))
            except ValueError:
                problems.append(f"tensor {name} has unknown tensor type id {int(raw_dtype[0])}")
                expected = None
                continue
            block, tsize = GGML_QUANT_SIZES[qtype]
            n = math.prod(int(d) for d in dims)  # Python ints: a fuzzed dim cannot wrap
            if n % block:
                problems.append(
                    f"tensor {name} has {n} elements, not a multiple of {qtype.name} "
                    f"block size {block}"
                )
                expected = None
                continue
            off = int(offset[0])
            nbytes = n // block * tsize
            start = int(start_offs) + off
            end = start + nbytes
            if end > size:
                problems.append(
                    f"tensor {name} data [{start}, {end}) runs past the file end ({size} bytes)"
                )
            if off % align:  # llama.cpp refuses these too
                problems.append(
                    f"tensor {name} data offset {off} is not a multiple of the "
                    f"file's alignment {align}"
                )
                expected = None
            elif expected is not None and off != expected:
                after = (
                    f"the aligned end of the tensor before it ({before})"
                    if before
                    else "the start of the data section (it is the first tensor)"
                )
                problems.append(
                    f"tensor {name} data offset {off} is not the expected offset {expected}, "
                    f"{after}: GGUF tensor data must be stored back to back in tensor-info "
                    f"order, as ggml requires"
                )
                expected = None
            if expected is not None:
                expected = off + -(-nbytes // align) * align
                before = name
            extents.append((start, end, name))
        extents.sort()
        for (_, a_end, a), (b_start, _, b) in zip(extents, extents[1:], strict=False):
            if b_start < a_end:  # two tensors claiming the same bytes: one holds garbage
                problems.append(f"tensor {b} data starts at {b_start}, inside tensor {a}'s data")
        if problems:
            raise ModelError(problems)
        super()._build_tensors(start_offs, fields)


def open_reader(path: str | os.PathLike[str]) -> gguf.GGUFReader:
    """Open a GGUF file (memory-mapped); any reader failure becomes a :class:`ModelError`."""
    p = Path(path)
    if not p.exists():
        raise ModelError([f"no such file: {p}"], p)
    if not p.is_file():
        raise ModelError([f"not a file: {p}"], p)
    try:
        return _CheckedReader(p)
    except ModelError as e:
        raise ModelError(e.problems, p) from None
    except Exception as e:  # the reader raises ValueError/IndexError/KeyError on malformed input
        raise ModelError([f"not a readable GGUF file ({type(e).__name__}: {e})"], p) from None


_MISSING = object()


class _Meta:
    """Typed access to metadata fields, collecting problems instead of raising at the first."""

    def __init__(self, reader: gguf.GGUFReader, problems: list[str]) -> None:
        self.reader = reader
        self.problems = problems

    def get(self, key: str, default: Any = _MISSING) -> Any:
        f = self.reader.fields.get(key)
        if f is None:
            if default is _MISSING:
                self.problems.append(f"metadata {key} is missing")
                return None
            return default
        try:
            return f.contents()
        except Exception as e:
            self.problems.append(f"metadata {key} cannot be read ({e})")
            return None

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int | None:
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.problems.append(f"metadata {key} = {v!r} is not an integer")
            return None
        if v < minimum:
            self.problems.append(f"metadata {key} = {v} must be >= {minimum}")
            return None
        return v

    def float(self, key: str, default: Any = _MISSING, positive: bool = True) -> float | None:
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.problems.append(f"metadata {key} = {v!r} is not a number")
            return None
        if not math.isfinite(v) or (positive and v <= 0):
            self.problems.append(f"metadata {key} = {v} must be a positive finite number")
            return None
        return float(v)

    def str(self, key: str, default: Any = _MISSING) -> str | None:
        v = self.get(key, default)
        if v is not None and not isinstance(v, str):
            self.problems.append(f"metadata {key} = {v!r} is not a string")
            return None
        return v


def read_config(
    reader: gguf.GGUFReader, tensors: Mapping[str, TensorSpec]
) -> tuple[ModelConfig | None, list[str]]:
    problems: list[str] = []
    m = _Meta(reader, problems)
    arch = m.str("general.architecture")
    if arch is None:
        return None, problems
    decl = ARCHS.get(arch)
    if decl is None:
        return None, [f"unsupported architecture {arch!r} (supported: {', '.join(ARCHS)})"]
    a = arch
    n_layer = m.int(f"{a}.block_count")
    n_embd = m.int(f"{a}.embedding_length")
    n_ff = m.int(f"{a}.feed_forward_length")
    n_ctx = m.int(f"{a}.context_length")
    n_head = m.int(f"{a}.attention.head_count")
    n_head_kv = m.int(f"{a}.attention.head_count_kv", n_head)
    rms_eps = m.float(f"{a}.attention.layer_norm_rms_epsilon")
    rope_base = m.float(f"{a}.rope.freq_base", 10000.0)
    head_dim = None
    if n_embd and n_head:
        default_hd = n_embd // n_head if n_embd % n_head == 0 else _MISSING
        head_dim = m.int(f"{a}.attention.key_length", default_hd)
        head_dim_v = m.int(f"{a}.attention.value_length", head_dim)
        if head_dim and head_dim_v and head_dim_v != head_dim:
            problems.append(
                f"metadata {a}.attention.value_length {head_dim_v} differs from key_length "
                f"{head_dim} (unsupported)"
            )
        if head_dim:
            n_rot = m.int(f"{a}.rope.dimension_count", head_dim)
            if n_rot and n_rot != head_dim:
                problems.append(
                    f"metadata {a}.rope.dimension_count {n_rot} differs from head_dim {head_dim} "
                    "(partial rotary embeddings are not supported)"
                )
            if head_dim % 2:
                problems.append(f"head_dim {head_dim} must be even for rope")
    if n_layer:
        # Checked before anything loops over the layers (a corrupt count could be 2^32 - 1).
        blocks = {int(n.split(".")[1]) for n in tensors if n.split(".")[0] == "blk" and
                  n.split(".")[1].isdigit()}  # fmt: skip
        n_file = max(blocks) + 1 if blocks else 0
        if n_layer != n_file:
            problems.append(
                f"metadata {a}.block_count = {n_layer} but the file has tensors for {n_file} blocks"
            )
            n_layer = None
    if n_head and n_head_kv and n_head % n_head_kv:
        problems.append(
            f"attention.head_count {n_head} is not a multiple of head_count_kv {n_head_kv}"
        )

    scaling = m.str(f"{a}.rope.scaling.type", "none") or "none"
    freq_scale = 1.0
    freq_factors: tuple[float, ...] = ()
    if scaling == "linear":
        factor = m.float(f"{a}.rope.scaling.factor")
        freq_scale = 1.0 / factor if factor else 1.0
    elif scaling != "none":
        problems.append(
            f"rope scaling type {scaling!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ROPE_SCALINGS)})"
        )
    ff = tensors.get(ROPE_FREQS)
    if ff is not None and decl.rope_freqs:  # elsewhere: an unexpected tensor (check_tensors)
        if scaling != "none":
            problems.append(f"tensor {ROPE_FREQS} together with rope scaling {scaling!r}")
        scaling = "llama3"  # its shape and type are checked with the other tensors
        if head_dim and ff.shape == (head_dim // 2,) and ff.qtype in _VECTOR_TYPES:
            host = gguf.quants.dequantize(ff.raw(), ff.qtype).astype(np.float32).reshape(-1)
            freq_factors = tuple(float(v) for v in host)
            if not all(math.isfinite(v) and v > 0 for v in freq_factors):
                problems.append(f"tensor {ROPE_FREQS} holds a factor that is not finite and > 0")
    for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
        if name in tensors:  # phi3 128k: LongRoPE picks a factor set by context, with mscale
            problems.append(
                f"tensor {name} (long-context LongRoPE) is not supported "
                f"(supported rope scalings: {', '.join(SUPPORTED_ROPE_SCALINGS)})"
            )
    notes: list[str] = []
    sliding_window, swa_layers, rope_base_swa = _read_window(m, decl, n_layer, rope_base, notes)
    attn_softcap, final_softcap = _read_softcaps(m, decl)
    if n_layer and not swa_layers:
        swa_layers = (False,) * n_layer

    emb = tensors.get("token_embd.weight")
    n_vocab = emb.shape[0] if emb is not None and len(emb.shape) == 2 else None
    if emb is None:
        problems.append("tensor token_embd.weight is missing")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None and n_vocab is not None and len(tokens.data) > n_vocab:
        problems.append(
            f"the tokenizer has {len(tokens.data)} tokens but token_embd.weight has only "
            f"{n_vocab} rows"
        )
    if n_vocab is None and tokens is not None:
        n_vocab = len(tokens.data)
    check_vocab(m, None if tokens is None else len(tokens.data), n_vocab)
    if n_vocab:
        check_token_ids(m, n_vocab)

    if problems or None in (n_layer, n_embd, n_ff, n_ctx, n_head, n_head_kv, head_dim, rms_eps):
        return None, problems or ["incomplete metadata"]
    assert n_layer and n_embd and n_ff and n_ctx and n_head and n_head_kv and head_dim
    assert rms_eps and rope_base and n_vocab

    if n_layer in decl.attn_scale_n_embd_at:  # gemma's 27B: llama.cpp's query_pre_attn_scalar
        attn_scale = 1.0 / math.sqrt(n_embd / n_head)
    else:
        attn_scale = 1.0 / math.sqrt(head_dim)
    cfg = ModelConfig(
        arch=arch,
        name=m.str("general.name", "") or "",
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ctx=n_ctx,
        n_vocab=n_vocab,
        rms_eps=rms_eps,
        rope_base=rope_base,
        rope_base_swa=rope_base_swa,
        rope_freq_scale=freq_scale,
        rope_neox=decl.rope_neox,
        qkv_bias=decl.qkv_bias or "blk.0.attn_q.bias" in tensors,
        qk_norm=decl.qk_norm,
        post_norms=decl.post_norms,
        embed_scale=math.sqrt(n_embd) if decl.embed_scale else 1.0,
        ffn_act=decl.ffn_act,
        attn_scale=attn_scale,
        sliding_window=sliding_window,
        swa_layers=swa_layers,
        tied_output="output.weight" not in tensors,
        rope_scaling=scaling,
        rope_freq_factors=freq_factors,
        attn_softcap=attn_softcap,
        final_softcap=final_softcap,
        fused_qkv=decl.fused_qkv,
        fused_gate_up=decl.fused_gate_up,
        notes=tuple(notes),
    )
    return cfg, []


def _read_window(
    m: _Meta, decl: Arch, n_layer: int | None, rope_base: float | None, notes: list[str]
) -> tuple[int, tuple[bool, ...], float]:
    """The sliding window, which layers use it and their rope base, as ``decl`` reads them;
    a window key that ``decl`` ignores is noted."""
    a = decl.name
    sliding_window, swa_layers = 0, ()
    rope_base_swa = rope_base or 10000.0
    sw = decl.sliding_window
    if sw is not None and n_layer:
        sliding_window = m.int(f"{a}.attention.sliding_window", 0, minimum=0) or 0
        if sliding_window > 0:
            if sw.pattern_key:
                swa_layers = sliding_window_layers(
                    m, f"{a}.attention.sliding_window_pattern", n_layer, sw.period
                )
            else:
                swa_layers = tuple(il % sw.period < sw.period - 1 for il in range(n_layer))
            if sw.rope_base_swa is not None:
                rope_base_swa = m.float(f"{a}.rope.freq_base_swa", sw.rope_base_swa)
    window = label = None
    if decl.window_ignored_as:
        window = m.int(f"{a}.attention.sliding_window", 0, minimum=0)
    if decl.label_notes:
        label = " ".join(str(m.get(k, "") or "") for k in ("general.name", "general.basename"))
    if window:  # llama.cpp's graph for these has no sliding window either
        notes.append(
            f"{a}.attention.sliding_window = {window} is not applied: full causal attention, "
            f"as llama.cpp runs {decl.window_ignored_as}"
        )
    elif label is not None:
        notes += [note for part, note in decl.label_notes if part in label.lower()]
    return sliding_window, swa_layers, rope_base_swa


def _read_softcaps(m: _Meta, decl: Arch) -> tuple[float, float]:
    """(attention, final) logit soft-caps as ``decl`` reads them (0: none)."""
    a = decl.name
    if decl.softcap == "read":
        keys = ("attn_logit_softcapping", "final_logit_softcapping")
        caps = [m.float(f"{a}.{key}", 0.0, positive=False) or 0.0 for key in keys]
        for key, v in zip(keys, caps, strict=True):
            if v < 0:
                m.problems.append(f"metadata {a}.{key} = {v} must be >= 0 (0: no soft-capping)")
        return caps[0], caps[1]
    if decl.softcap == "refused":
        softcap = m.float(f"{a}.final_logit_softcapping", 0.0, positive=False)
        if softcap:
            m.problems.append(f"final logit soft-capping ({softcap}) is not supported")
        softcap = m.float(f"{a}.attn_logit_softcapping", 0.0, positive=False)
        if softcap:
            m.problems.append(f"attention logit soft-capping ({softcap}) is not supported for {a}")
    return 0.0, 0.0


# -- the expected tensors -------------------------------------------------------------------------
#: Kinds of tensors: a matmul weight (any table type), a vector (f32 at load), the embedding.
MATMUL, VECTOR, EMBED = "matmul", "vector", "embed"


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor the graph reads: name -> (kind, NumPy shape)."""
    e, f, q, kv = cfg.n_embd, cfg.n_ff, cfg.q_dim, cfg.kv_dim
    out: dict[str, tuple[str, tuple[int, ...]]] = {
        "token_embd.weight": (EMBED, (cfg.n_vocab, e)),
    }
    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        out[b + "attn_norm.weight"] = (VECTOR, (e,))
        if cfg.fused_qkv:
            out[b + "attn_qkv.weight"] = (MATMUL, (q + 2 * kv, e))
        else:
            out[b + "attn_q.weight"] = (MATMUL, (q, e))
            out[b + "attn_k.weight"] = (MATMUL, (kv, e))
            out[b + "attn_v.weight"] = (MATMUL, (kv, e))
        if cfg.qkv_bias:
            out[b + "attn_q.bias"] = (VECTOR, (q,))
            out[b + "attn_k.bias"] = (VECTOR, (kv,))
            out[b + "attn_v.bias"] = (VECTOR, (kv,))
        if cfg.qk_norm:
            out[b + "attn_q_norm.weight"] = (VECTOR, (cfg.head_dim,))
            out[b + "attn_k_norm.weight"] = (VECTOR, (cfg.head_dim,))
        out[b + "attn_output.weight"] = (MATMUL, (e, q))
        if cfg.post_norms:
            out[b + "post_attention_norm.weight"] = (VECTOR, (e,))
        out[b + "ffn_norm.weight"] = (VECTOR, (e,))
        if cfg.fused_gate_up:
            out[b + "ffn_up.weight"] = (MATMUL, (2 * f, e))
        else:
            out[b + "ffn_gate.weight"] = (MATMUL, (f, e))
            out[b + "ffn_up.weight"] = (MATMUL, (f, e))
        out[b + "ffn_down.weight"] = (MATMUL, (e, f))
        if cfg.post_norms:
            out[b + "post_ffw_norm.weight"] = (VECTOR, (e,))
    out["output_norm.weight"] = (VECTOR, (e,))
    if cfg.rope_scaling == "llama3":
        out[ROPE_FREQS] = (VECTOR, (cfg.head_dim // 2,))
    if not cfg.tied_output:
        out["output.weight"] = (MATMUL, (cfg.n_vocab, e))
    return out


def check_tensors(cfg: ModelConfig, tensors: Mapping[str, TensorSpec]) -> list[str]:
    problems = []
    expected = expected_tensors(cfg)
    for name, (kind, shape) in expected.items():
        t = tensors.get(name)
        if t is None:
            problems.append(f"tensor {name} is missing")
            continue
        if t.shape != shape:
            problems.append(
                f"tensor {name} has shape {list(t.shape)}, expected {list(shape)} from the metadata"
            )
        if kind == VECTOR:
            if t.qtype not in _VECTOR_TYPES:
                problems.append(
                    f"tensor {name} has type {t.qtype.name}; a norm/bias vector must be F32, F16 "
                    "or BF16"
                )
        elif t.qtype not in QUANT_TABLE:
            problems.append(
                f"tensor {name} has type {t.qtype.name}, not supported "
                f"(supported: {', '.join(supported_names())})"
            )
        elif t.shape == shape and shape[-1] % QUANT_TABLE[t.qtype].block_size:
            problems.append(
                f"tensor {name} row length {shape[-1]} is not a multiple of {t.qtype.name} "
                f"block size {QUANT_TABLE[t.qtype].block_size}"
            )
    for name in tensors:
        if name not in expected:
            problems.append(f"unexpected tensor {name} (not used by a {cfg.arch} model)")
    return problems


def read_tensors(reader: gguf.GGUFReader) -> dict[str, TensorSpec]:
    out = {}
    for t in reader.tensors:
        shape = tuple(int(s) for s in reversed(t.shape.tolist()))
        out[t.name] = TensorSpec(
            t.name, t.tensor_type, shape, int(t.n_bytes), int(t.data_offset), t.data
        )
    return out

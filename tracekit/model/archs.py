"""The one declaration of every architecture tracekit runs (in the spirit of ``tracekit/quants.py``).

An architecture is one :class:`Arch` entry, registered in :data:`ARCHS` when it is declared and
keyed by its ``general.architecture`` value exactly as GGUF writes it (``llama``, ``gemma2``).
It says, as data, what differs from the plain pre-norm transformer (RMSNorm, Q/K/V and output
projections, rope on Q and K, causal attention, SiLU-gated FFN, adjacent-pair rope): which
metadata keys it reads beyond the common ``{arch}.*`` ones (sliding windows, soft-caps), their
defaults, the tensors its features add, and the graph features ``read_config`` copies into the
:class:`~tracekit.model.config.ModelConfig` that ``expected_tensors`` and the graph builder
(``runner/graph.py``) read. No other module branches on an architecture's name: the error for an
unknown one, the README's supported list and the synthetic writer's layout come from here.

Files are read as llama.cpp's converter writes them (``convert_hf_to_gguf.py``) and run as
llama.cpp runs them (``llama-model.cpp``). Shared by every architecture (not declared): Q/K/V
biases are read when the file has them (``blk.0.attn_q.bias``); the output is tied to
``token_embd`` when ``output.weight`` is absent; linear rope scaling; partial rotary embeddings,
value heads unlike key heads and LongRoPE are refused.

Adding an architecture: one entry below (and a converted file under ``tests/data/archs/`` or a
synthetic spec, checked against Hugging Face).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

#: The table: GGUF architecture name -> its declaration, in declaration (display) order.
ARCHS: dict[str, Arch] = {}

#: FFN activations a declaration may name (graph ops of ``runner/ops.py``).
FFN_ACTS = ("silu", "gelu_tanh")


@dataclass(frozen=True)
class SlidingWindow:
    """Layers attending within ``{arch}.attention.sliding_window`` tokens (absent or 0: none).

    Layer ``il`` is local (windowed) unless ``il % period == period - 1``, as llama.cpp's
    ``set_swa_pattern(period)``; with ``pattern_key`` the file's
    ``{arch}.attention.sliding_window_pattern`` (one boolean per layer, or a period) overrides
    the period. The local layers use ``rope_base_swa`` (``{arch}.rope.freq_base_swa``, this its
    default; None: the global rope base, and the key is not read) with no rope scaling.
    """

    period: int
    pattern_key: bool = False
    rope_base_swa: float | None = None


@dataclass(frozen=True)
class Arch:
    """One architecture. Fields left at their defaults are the plain transformer's.

    Fields:
        name: ``general.architecture`` as GGUF writes it; the metadata keys' prefix.
        doc: what the architecture is and how its files are read and run.
        models: the models people run as this architecture (the README's list).
        runs: what tracekit runs for it, in a line (the README's list).
        rope_neox: rope pairs ``(i, i + d/2)`` (NeoX) instead of ggml's adjacent ``(2i, 2i+1)``
            (llama's converter permutes Q/K rows for those).
        qkv_bias: Q/K/V biases required (any file that has them uses them).
        qk_norm: per-head RMSNorm of Q and K before rope (``attn_q_norm``/``attn_k_norm``).
        post_norms: RMSNorm after attention and after the FFN, before each residual add
            (``post_attention_norm``/``post_ffw_norm``).
        embed_scale: the embedding multiplied by sqrt(n_embd).
        ffn_act: the gate's activation, one of :data:`FFN_ACTS`.
        fused_qkv: one ``attn_qkv`` matmul whose rows are [q | k | v], split after it.
        fused_gate_up: one ``ffn_up`` matmul whose rows are [gate | up], split after it.
        rope_freqs: accepts Llama 3's F32 ``rope_freqs.weight`` (per-pair angle divisors; the
            converter writes no ``rope.scaling.*`` key for them).
        sliding_window: which layers are local, or None (the window key is not read).
        window_ignored_as: if set, ``{arch}.attention.sliding_window`` is read and not applied
            (full causal attention, as llama.cpp runs ``window_ignored_as``), which the trace
            notes.
        label_notes: (substring, note): the note added when ``general.name`` or
            ``general.basename`` contains the substring (case-insensitive) and no window note
            was.
        softcap: ``{arch}.attn_logit_softcapping`` / ``final_logit_softcapping``: ``"read"``
            (``cap * tanh(x / cap)`` on the scaled scores / the logits; 0: none),
            ``"refused"`` (a file setting either is refused) or ``"none"`` (not read).
        attn_scale_n_embd_at: block counts at which queries are scaled by
            1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim): llama.cpp's reading of the
            27B models' ``query_pre_attn_scalar``, which the converter does not write.
    """

    name: str
    doc: str
    models: str
    runs: str
    rope_neox: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    embed_scale: bool = False
    ffn_act: str = "silu"
    fused_qkv: bool = False
    fused_gate_up: bool = False
    rope_freqs: bool = False
    sliding_window: SlidingWindow | None = None
    window_ignored_as: str = ""
    label_notes: tuple[tuple[str, str], ...] = ()
    softcap: Literal["none", "read", "refused"] = "none"
    attn_scale_n_embd_at: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "doc", " ".join(self.doc.split()))  # one paragraph
        if self.ffn_act not in FFN_ACTS:
            raise ValueError(f"{self.name}: ffn_act {self.ffn_act!r} is not one of {FFN_ACTS}")
        if self.softcap not in ("none", "read", "refused"):
            raise ValueError(f"{self.name}: softcap {self.softcap!r} is not none/read/refused")
        if self.sliding_window is not None and self.window_ignored_as:
            raise ValueError(f"{self.name}: a sliding window cannot be both applied and ignored")
        if self.sliding_window is not None and self.sliding_window.period < 1:
            raise ValueError(f"{self.name}: sliding-window period must be >= 1")


def declare(arch: Arch) -> Arch:
    """Register ``arch`` in :data:`ARCHS` (once per name); returns it."""
    if arch.name in ARCHS:
        raise ValueError(f"architecture {arch.name} is declared twice")
    ARCHS[arch.name] = arch
    return arch


def supported_names() -> tuple[str, ...]:
    """The declared architecture names, in declaration order."""
    return tuple(ARCHS)


def markdown_table() -> str:
    """The README's table of supported architectures (tests/model/test_archs.py keeps it so)."""
    rows = ["| architecture | models | what tracekit runs |", "|---|---|---|"]
    rows += [f"| `{a.name}` | {a.models} | {a.runs} |" for a in ARCHS.values()]
    return "\n".join(rows) + "\n"


def feature_defaults() -> dict[str, object]:
    """Each feature field of :class:`Arch` -> its default (the plain transformer's value)."""
    return {
        f.name: f.default for f in fields(Arch) if f.name not in ("name", "doc", "models", "runs")
    }


# -- the architectures -------------------------------------------------------------------------
LLAMA = declare(
    Arch(
        name="llama",
        doc="""Llama 2/3, SmolLM2 and Mistral. Q/K rows permuted by the converter so that
        adjacent pairs (ggml's "normal" rope) rotate together. Llama 3's rope scaling is an F32
        rope_freqs.weight of per-pair angle divisors (no rope.scaling.* keys); rope divides by
        them. Mistral: the converter writes it as arch llama with no sliding-window key; run,
        as llama.cpp runs it, with full causal attention (noted when the name says Mistral);
        a window key in a llama file is noted, not applied, likewise.""",
        models="Llama 2/3.x, SmolLM2, Mistral 7B (the converter writes it as `llama`)",
        runs="adjacent-pair rope; Llama 3 `rope_freqs.weight` factors; linear rope scaling; "
        "Mistral with full attention, as llama.cpp runs it (noted in the trace)",
        rope_freqs=True,
        window_ignored_as="arch llama",
        label_notes=(
            (
                "mistral",
                "Mistral stored as arch llama (the converter writes no sliding window): full "
                "causal attention, as llama.cpp runs it",
            ),
        ),
    )
)

QWEN2 = declare(
    Arch(
        name="qwen2",
        doc="Qwen2 / Qwen2.5: Q/K/V biases; NeoX rope (pairs i and i + head_dim/2).",
        models="Qwen2 / Qwen2.5",
        runs="Q/K/V biases, NeoX rope",
        rope_neox=True,
        qkv_bias=True,
    )
)

QWEN3 = declare(
    Arch(
        name="qwen3",
        doc="Qwen3 (dense): per-head RMSNorm of Q and K (weights as stored), no biases; NeoX rope.",
        models="Qwen3 (dense)",
        runs="per-head Q/K RMSNorm, no biases",
        rope_neox=True,
        qk_norm=True,
    )
)

PHI3 = declare(
    Arch(
        name="phi3",
        doc="""Phi-3 / Phi-3.5 mini (4k): fused attn_qkv ([q | k | v] rows) and fused ffn_up
        ([gate | up] rows), split after the matmul; NeoX rope; its sliding_window key is
        ignored, as llama.cpp ignores it (full attention, noted in the trace). Long-context
        (rope_factors_long) files are refused.""",
        models="Phi-3 / Phi-3.5 mini (4k)",
        runs="fused `attn_qkv` and gate/up; its sliding-window key ignored, as llama.cpp does "
        "(noted)",
        rope_neox=True,
        fused_qkv=True,
        fused_gate_up=True,
        window_ignored_as="phi3",
    )
)

GEMMA2 = declare(
    Arch(
        name="gemma2",
        doc="""Gemma 2: embedding scaled by sqrt(n_embd); norm weights stored with the +1 of
        Gemma's x * (1 + w) already added (applied as stored); norms after attention and after
        the FFN; GELU-tanh gated FFN; NeoX rope, one rope base; attention-logit and
        final-logit soft-capping (cap * tanh(x / cap)); even layers sliding-window (llama.cpp's
        swa pattern 2); attention scale 1/sqrt(head_dim) (llama.cpp's reading of
        query_pre_attn_scalar, which the converter does not write; n_embd / n_head for the
        46-layer 27B).""",
        models="Gemma 2",
        runs="attention and final logit soft-capping, even layers sliding-window, "
        "post-attention/FFW norms",
        rope_neox=True,
        post_norms=True,
        embed_scale=True,
        ffn_act="gelu_tanh",
        sliding_window=SlidingWindow(period=2),
        softcap="read",
        attn_scale_n_embd_at=(46,),
    )
)

GEMMA3 = declare(
    Arch(
        name="gemma3",
        doc="""Gemma 3 (text): as gemma2 without soft-capping (a file asking for it is
        refused), plus per-head RMSNorm of Q and K; every 6th layer global, the others
        sliding-window with their own rope base (rope.freq_base_swa, default 10000, llama.cpp's
        rope_freq_base_train_swa) and no rope scaling; the window pattern may be given per
        layer (attention.sliding_window_pattern); n_embd / n_head query scale for the 62-layer
        27B.""",
        models="Gemma 3 (text)",
        runs="Q/K norms, 5 local : 1 global layers with their own rope base",
        rope_neox=True,
        qk_norm=True,
        post_norms=True,
        embed_scale=True,
        ffn_act="gelu_tanh",
        sliding_window=SlidingWindow(period=6, pattern_key=True, rope_base_swa=10000.0),
        softcap="refused",
        attn_scale_n_embd_at=(62,),
    )
)

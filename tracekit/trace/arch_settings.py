"""A model's architecture settings as readable rows: a trace's ``model.arch_settings`` (what
``ModelConfig.summary()`` writes into it), for the dashboard's overview and ``tracekit info``.

Here, on the trace side, because the dashboard reads traces only (it must not import the GGUF
loader); ``tracekit info MODEL.gguf`` passes a loaded config's ``summary()``, the same dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _runs(values: list[Any], fmt: Any = "{:g}".format) -> str:
    """``[1, 1, 1, 8, 8]`` -> ``1 ×3, 8 ×2``: long per-pair / per-layer lists stay readable."""
    out: list[str] = []
    for v in values:
        text = fmt(v)
        if out and out[-1].split(" ×")[0] == text:
            head, _, n = out[-1].partition(" ×")
            out[-1] = f"{head} ×{int(n or 1) + 1}"
        else:
            out.append(text)
    return ", ".join(out)


def describe_arch(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows of :meth:`ModelConfig.summary` (or a trace's ``model.arch_settings``):
    what ``tracekit info`` prints and the dashboard's overview shows."""
    s = settings
    rope = f"{s['rope']} pairs, base {s['rope_base']:g}"
    if "rope_base_swa" in s:
        rope += f" (sliding-window layers {s['rope_base_swa']:g})"
    scaling = s.get("rope_scaling", "none")
    if scaling == "linear":
        rope += f", linear scaling x{s['rope_scaling_factor']:g}"
    elif scaling == "llama3":
        factors = _runs(s.get("rope_freq_factors", []), "{:.4g}".format)
        rope += f", llama3 frequency factors [{factors}]"
    attn = f"scale {s['attn_scale']:.6g}"
    if s.get("attn_softcap"):
        attn += f", logit soft-cap {s['attn_softcap']:g}"
    windows = s.get("window_per_layer", [])
    window = _runs(windows, lambda w: str(w) if w else "full") if windows else "full"
    rows = [("rope", rope), ("attention", attn), ("window/layer", window)]
    parts = [k for k in ("qk_norm", "qkv_bias", "post_norms", "fused_qkv", "fused_gate_up")
             if s.get(k)]  # fmt: skip
    extra = f"ffn {s.get('ffn_act', 'silu')}" + (f", {', '.join(parts)}" if parts else "")
    if s.get("embed_scale", 1.0) != 1.0:
        extra += f", embedding x{s['embed_scale']:.6g}"
    rows.append(("blocks", extra))
    if s.get("final_softcap"):
        rows.append(("logits", f"soft-cap {s['final_softcap']:g}"))
    return rows

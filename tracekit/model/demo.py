"""The embedded demo model: a small qwen2 that tracekit writes itself (no download).

4 layers, n_embd 256, 4 query heads sharing 2 KV heads (head_dim 64), n_ff 512, context 512,
a 512-token byte-level BPE vocabulary, Q/K/V biases, an untied output, and a llama.cpp
"Q4_K_M"-like mix of tensor types (Q4_K, Q6_K, Q5_K, Q8_0, Q4_0, Q4_1, Q5_0; norms and biases
F32; the embedding Q4_K). The weights are random (seed 0) but scaled so activations stay O(1)
and the logits are peaked, so greedy decoding is not a coin toss. Generated deterministically:
the same bytes on every machine with the same NumPy and gguf versions.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gguf import GGMLQuantizationType as T

from tracekit.model.synthetic import SyntheticSpec, write_model

#: Bump when the generator changes, so a cached file of an older generator is not reused.
DEMO_VERSION = 1
DEMO_SEED = 0
DEMO_FILENAME = f"tracekit-demo-qwen2-v{DEMO_VERSION}.gguf"

DEMO_SPEC = SyntheticSpec(
    arch="qwen2",
    name="tracekit demo (qwen2, random weights)",
    n_layer=4,
    n_embd=256,
    n_ff=512,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_ctx=512,
    n_merges=512 - 256 - 3,  # 256 byte tokens + merges + 3 specials = 512
    types={
        "token_embd": T.Q4_K,
        "attn_q": T.Q4_K,
        "attn_k": T.Q4_K,
        "attn_v": (T.Q6_K, T.Q8_0),
        "attn_output": (T.Q4_0, T.Q4_K),
        "ffn_gate": (T.Q4_K, T.Q5_0),
        "ffn_up": (T.Q8_0, T.Q4_1),
        "ffn_down": (T.Q6_K, T.Q5_K),
        "output": T.Q6_K,
    },
    rope_base=1000000.0,
    rms_eps=1e-6,
    tied=False,
    pre="qwen2",
)


def write_demo_model(path: str | os.PathLike[str]) -> Path:
    """Write the demo model to ``path`` (deterministic: seed 0); returns the path."""
    return write_model(path, DEMO_SPEC, DEMO_SEED)


def cache_dir() -> Path:
    """``$TRACEKIT_CACHE`` or ``~/.cache/tracekit``."""
    env = os.environ.get("TRACEKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tracekit"


def demo_model_path() -> Path:
    """The demo model's path in the cache, generated there first if it is absent.

    Written to a temporary file and renamed, so a concurrent reader never sees half a file.
    """
    d = cache_dir()
    p = d / DEMO_FILENAME
    if p.is_file() and p.stat().st_size > 0:
        return p
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".demo-", suffix=".gguf", dir=d)
    os.close(fd)
    try:
        write_demo_model(tmp)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p

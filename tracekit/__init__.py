"""tracekit: run a GGUF transformer's forward pass through its own kernels, trace every node.

Public API (besides the ``tracekit`` / ``record-trace`` commands), defined in
:mod:`tracekit.api` and imported from there on first use, so ``import tracekit`` stays light
(no NumPy, gguf or kernel import until a name below is touched):

- :func:`dequantize` — a GGUF tensor's bytes to an f16 array (the seed's ``dequant_*_f16``).
- :func:`embed` — gather token rows out of a (quantized) embedding table as f32 (``embed_rows_*``).
- :func:`load_model` — a GGUF model (:class:`Model`) with ``logits()``, ``tokenize()``,
  ``detokenize()``, ``config`` (:class:`ModelConfig`) and ``graph``.
- :class:`ModelError` — what :func:`load_model` raises for a file it cannot run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit._version import __version__

if TYPE_CHECKING:
    from tracekit.api import Model, ModelConfig, ModelError, dequantize, embed, load_model

__all__ = ["Model", "ModelConfig", "ModelError", "__version__", "dequantize", "embed", "load_model"]

_LAZY = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from tracekit import api

        value = getattr(api, name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)

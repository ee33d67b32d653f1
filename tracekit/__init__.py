"""tracekit: run a GGUF transformer's forward pass through its own kernels, trace every node.

Public API (besides the ``tracekit`` / ``record-trace`` commands):

- :func:`dequantize` — a GGUF tensor's bytes to an f16 array (the seed's ``dequant_*_f16``).
- :func:`embed` — gather token rows out of a (quantized) embedding table as f32 (``embed_rows_*``).
- :func:`load_model` — a GGUF model with ``logits()``, ``tokenize()``, ``detokenize()``.
- :class:`ModelError` — what :func:`load_model` raises for a file it cannot run.
"""

from __future__ import annotations

from typing import Any

from tracekit._version import __version__

__all__ = ["ModelError", "__version__", "dequantize", "embed", "load_model"]


def __getattr__(name: str) -> Any:
    # ``tracekit.ModelError`` (what load_model raises), imported on first use: ``import
    # tracekit`` stays light (no gguf/numpy import until a model is touched).
    if name == "ModelError":
        from tracekit.model.config import ModelError

        return ModelError
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")


def dequantize(raw: Any, qtype: Any, shape: tuple[int, ...], backend: Any = "auto") -> Any:
    """Dequantize a tensor's packed bytes to f16.

    Args:
        raw: the tensor's bytes as a uint8 array (NumPy, or CuPy on the cupy backend).
        qtype: a ``gguf.GGMLQuantizationType`` or its name (``"Q4_K"``).
        shape: the tensor's shape in NumPy order, e.g. ``(rows, row_length)``.
        backend: ``"numpy"``, ``"cupy"`` or ``"auto"`` (cupy when a GPU is usable).

    Returns:
        An f16 array of ``shape``: NumPy on the numpy backend, CuPy on the cupy backend.

    Raises:
        ValueError: an unsupported type, a byte count that does not match ``shape``, a row
            length that is not a multiple of the type's block (the message names the values).
    """
    from tracekit.kernels.backend import get_backend
    from tracekit.quants import quant_type

    be = get_backend(backend)
    return be.dequantize_f16(be.asarray(raw), quant_type(qtype), tuple(int(s) for s in shape))


def embed(raw: Any, qtype: Any, shape: tuple[int, int], ids: Any, backend: Any = "auto") -> Any:
    """Gather rows ``ids`` of an embedding table stored as ``qtype``, as f32 ``[len(ids), shape[1]]``.

    Args:
        raw: the table's bytes as a uint8 array; shape: ``(rows, n_embd)``; ids: int token ids.

    Raises:
        ValueError: as :func:`dequantize`, and a token id < 0 or >= rows (id and position named).
    """
    import numpy as np

    from tracekit.kernels.backend import get_backend
    from tracekit.quants import quant_type

    be = get_backend(backend)
    if not hasattr(ids, "__cuda_array_interface__"):
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int32)
    return be.embed_rows(
        be.asarray(raw), quant_type(qtype), (int(shape[0]), int(shape[1])), be.asarray(ids)
    )


def load_model(path: Any) -> Any:
    """Load a GGUF model (llama, qwen2, gemma3); see :class:`tracekit.api.Model`."""
    from tracekit.api import load_model as _load

    return _load(path)

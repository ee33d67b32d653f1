"""The public API, defined here once: ``tracekit.load_model``, ``tracekit.dequantize``,
``tracekit.embed`` (``tracekit/__init__.py`` re-exports these names on first use).

Scripted use, besides the ``record-trace`` command::

    import tracekit
    model = tracekit.load_model("SmolLM2-135M-Instruct.Q4_1.gguf")
    ids = model.tokenize("The capital of France is")
    logits = model.logits(ids, backend="numpy")      # float32 [len(ids), n_vocab]
    print(model.detokenize([int(logits[-1].argmax())]))

That is also how another engine's outputs are compared with tracekit's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.model.config import ModelConfig, ModelError
from tracekit.runner.execute import Model, load_model

__all__ = ["Model", "ModelConfig", "ModelError", "dequantize", "embed", "load_model"]


def dequantize(raw: Any, qtype: Any, shape: tuple[int, ...], backend: Any = "auto") -> Any:
    """Dequantize a tensor's packed bytes to f16 with the dequant kernels (``dequant_*_f16``).

    Args:
        raw: the tensor's bytes as a uint8 array (NumPy, or CuPy on the cupy backend).
        qtype: a ``gguf.GGMLQuantizationType`` or its name (``"Q4_K"``).
        shape: the tensor's shape in NumPy order, e.g. ``(rows, row_length)``.
        backend: ``"numpy"``, ``"cupy"``, ``"auto"`` (cupy when a GPU is usable) or a Backend
            instance.

    Returns:
        An f16 array of ``shape``: NumPy on the numpy backend, CuPy on the cupy backend.

    Raises:
        ValueError: an unsupported type, a byte count that does not match ``shape``, a row
            length that is not a multiple of the type's block (the message names the values).
    """
    from tracekit.kernels.backend import get_backend
    from tracekit.quants import quant_type

    be = get_backend(backend)
    out = be.dequantize_f16(be.asarray(raw), quant_type(qtype), tuple(int(s) for s in shape))
    be.take_records()  # a backend kept by the caller does not accumulate launch records
    return out


def embed(raw: Any, qtype: Any, shape: tuple[int, int], ids: Any, backend: Any = "auto") -> Any:
    """Gather rows ``ids`` of an embedding table stored as ``qtype``, as f32 ``[len(ids), n_embd]``
    (the ``embed_rows_*`` kernels).

    Args:
        raw: the table's bytes as a uint8 array; qtype: its type; shape: ``(rows, n_embd)``.
        ids: integer token ids (a sequence, NumPy or CuPy array).
        backend: ``"numpy"``, ``"cupy"``, ``"auto"`` or a Backend instance.

    Returns:
        An f32 array ``[len(ids), n_embd]`` on the backend (NumPy or CuPy).

    Raises:
        ValueError: as :func:`dequantize`, non-integer ids, or an id < 0 or >= rows (the id and
            its position named).
    """
    from tracekit.kernels.backend import get_backend
    from tracekit.quants import quant_type

    be = get_backend(backend)
    if not hasattr(ids, "__cuda_array_interface__"):
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int32)
    out = be.embed_rows(
        be.asarray(raw), quant_type(qtype), (int(shape[0]), int(shape[1])), be.asarray(ids)
    )
    be.take_records()
    return out

"""A model's tensors in one backend's compute form: the records ``Model.weights`` makes and the
ops read (``StepContext.weights``). Data only: making them is the runner's
(:meth:`tracekit.runner.execute.Model.weights`), which times the w16 cache's warm-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.quants import QuantType

if TYPE_CHECKING:
    from tracekit.kernels.backend import Backend
    from tracekit.kernels.launch import LaunchRecord


@dataclass
class PackedTensor:
    """A tensor kept in its GGUF encoding on a backend (the embedding table: gathered per id)."""

    raw: Any
    qtype: QuantType
    shape: tuple[int, int]


@dataclass
class Weights:
    """A model's tensors in one backend's compute form, made once and cached per backend.

    ``matmul`` holds each matmul weight as ``backend.matmul_weight`` made it (a
    ``kernels.matmul.MatmulWeight``: the packed bytes, plus the w16 cache's f16 copy when it is
    on, or NumPy's exact f32 copy on the f32 path), keyed by the tensor name (a tied output's weight is
    made from the embedding table, under ``token_embd.weight``); ``embed`` keeps the table packed
    for the gather; ``vectors`` holds norms and biases as f32. A fused projection
    (``Graph.fused``: ``blk.N.attn_qkv.weight``, ``blk.N.ffn_gate_up.weight`` and a fused
    ``blk.N.attn_qkv.bias``) is held under its fused name only, made from its parts' GGUF bytes
    concatenated row-wise; its parts are not held.
    """

    backend: Backend
    embed: PackedTensor
    matmul: dict[str, Any]
    vectors: dict[str, Any]
    load_records: list[LaunchRecord]
    load_seconds: float
    #: the w16 cache's warm-up, one entry per weight dequantized into it: ``weight`` (name),
    #: ``shape``, ``weight_type``, ``time_s`` (device time of its launch), ``launches`` (JSON)
    load_nodes: list[dict[str, Any]] = field(default_factory=list)

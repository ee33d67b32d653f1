"""The one table of tensor types tracekit knows.

Every dequant and embed dispatcher, every byte count and every test reads this table.
Block and byte sizes come from ``gguf.GGML_QUANT_SIZES`` (never retyped here) and dispatch
is keyed by ``gguf.GGMLQuantizationType`` (never by a bare integer): the seed's §2.1 trap
was two dispatch tables with two numberings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType


@dataclass(frozen=True)
class QuantType:
    """One tensor type: its GGUF enum and the suffix of its kernels (``dequant_<suffix>_f16``)."""

    qtype: GGMLQuantizationType
    suffix: str

    @property
    def name(self) -> str:
        return self.qtype.name

    @property
    def block_size(self) -> int:
        """Elements per block (32 for Q4_0, 256 for the K-quants, 1 for F32/F16/BF16)."""
        return GGML_QUANT_SIZES[self.qtype][0]

    @property
    def type_size(self) -> int:
        """Bytes per block (18 for Q4_0, 210 for Q6_K, 4 for F32)."""
        return GGML_QUANT_SIZES[self.qtype][1]

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    def row_bytes(self, row_len: int) -> int:
        """Bytes of one row of ``row_len`` elements; raises if the row does not fill whole blocks."""
        if row_len <= 0:
            raise ValueError(f"row length {row_len} must be positive")
        if row_len % self.block_size:
            raise ValueError(
                f"row length {row_len} is not a multiple of {self.name} block size {self.block_size}"
            )
        return row_len // self.block_size * self.type_size

    def nbytes(self, shape: tuple[int, ...]) -> int:
        """Packed bytes of a tensor of ``shape`` (NumPy order: the last axis is the row)."""
        shape = tuple(int(s) for s in shape)
        if not shape:
            raise ValueError("shape must have at least one dimension")
        if any(s <= 0 for s in shape):
            raise ValueError(f"shape {shape} has a non-positive dimension")
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        return rows * self.row_bytes(shape[-1])


_T = GGMLQuantizationType

#: The table. Order is the display order; the key is the GGUF enum.
QUANT_TABLE: dict[GGMLQuantizationType, QuantType] = {
    t.qtype: t
    for t in (
        QuantType(_T.F32, "f32"),
        QuantType(_T.F16, "f16"),
        QuantType(_T.BF16, "bf16"),
        QuantType(_T.Q8_0, "q8_0"),
        QuantType(_T.Q4_0, "q4_0"),
        QuantType(_T.Q4_1, "q4_1"),
        QuantType(_T.Q5_0, "q5_0"),
        QuantType(_T.Q5_1, "q5_1"),
        QuantType(_T.Q4_K, "q4_k"),
        QuantType(_T.Q5_K, "q5_k"),
        QuantType(_T.Q6_K, "q6_k"),
    )
}

#: The block-quantized types (everything but the float pass-through types).
QUANTIZED_TYPES: tuple[QuantType, ...] = tuple(t for t in QUANT_TABLE.values() if t.is_quantized)


def quant_type(qtype: QuantType | GGMLQuantizationType | str) -> QuantType:
    """Look a type up by its enum, its GGML name (``"Q4_K"``) or pass a QuantType through.

    Raises:
        ValueError: the type is not in the table (its name and the supported names are given).
    """
    if isinstance(qtype, QuantType):
        return qtype
    if isinstance(qtype, str):
        try:
            qtype = GGMLQuantizationType[qtype.upper()]
        except KeyError:
            raise ValueError(
                f"unknown tensor type {qtype!r}; supported: {', '.join(supported_names())}"
            ) from None
    if not isinstance(qtype, GGMLQuantizationType):
        raise TypeError(
            f"tensor type must be a gguf.GGMLQuantizationType or its name, not {type(qtype).__name__}"
        )
    try:
        return QUANT_TABLE[qtype]
    except KeyError:
        raise ValueError(
            f"tensor type {qtype.name} is not supported; supported: {', '.join(supported_names())}"
        ) from None


def supported_names() -> list[str]:
    return [t.name for t in QUANT_TABLE.values()]

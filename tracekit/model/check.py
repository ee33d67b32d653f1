"""``tracekit check MODEL.gguf``: scan every tensor of a GGUF file for bad blocks.

Per tensor, vectorized over its blocks (a block's f16 scale fields are read as one strided
column of the memory map): non-finite scales (Inf/NaN in a block's ``d``, ``dmin`` or ``m``:
every value it decodes is non-finite) and all-zero blocks (all its scale fields 0: every value
it decodes is 0, as when a block's bytes were zeroed); for float tensors (F32/F16/BF16) every
value is checked for Inf/NaN. The first bad block is named by tensor, block index, row and byte
offset in the file; counts are kept per tensor. Shapes and types are checked against the
metadata as loading does (:func:`~tracekit.model.config.check_tensors`). A type without a row in
:data:`SCALE_FIELDS` (from the quant table) is listed as not scanned, never guessed at.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from tracekit.quants import QUANT_TABLE

_T = GGMLQuantizationType

#: Byte offsets of the f16 scale fields inside one block, per quantized type: the quant table's
#: declaration (``QuantType.f16_fields``, tracekit/quants.py), never retyped here. A block
#: decodes to 0 everywhere when all of them are 0, and to non-finite values when any is Inf/NaN
#: (every other field is an integer: sub-scales, quants). A type outside the table is listed
#: as not scanned.
SCALE_FIELDS: dict[GGMLQuantizationType, tuple[int, ...]] = {
    q: t.f16_fields for q, t in QUANT_TABLE.items() if t.is_quantized
}
#: Float types: every element is checked (block = element).
FLOAT_TYPES = (_T.F32, _T.F16, _T.BF16)


@dataclass
class BadBlock:
    tensor: str
    kind: str  # "non-finite scale", "all-zero block", "non-finite value"
    block: int  # block index in the tensor (element index for float types)
    row: int
    byte_offset: int  # of the block in the file

    def text(self) -> str:
        return (
            f"{self.tensor}: {self.kind} at block {self.block} (row {self.row}, "
            f"file byte offset {self.byte_offset})"
        )


@dataclass
class TensorCheck:
    name: str
    type: str
    shape: list[int]
    blocks: int
    scanned: bool
    nonfinite: int = 0
    zero_blocks: int = 0
    first_bad: BadBlock | None = None
    note: str | None = None


@dataclass
class CheckReport:
    path: str
    file_bytes: int
    tensors: list[TensorCheck]
    metadata_problems: list[str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bad_tensors(self) -> list[TensorCheck]:
        return [t for t in self.tensors if t.nonfinite or t.zero_blocks]

    @property
    def found(self) -> bool:
        return bool(self.bad_tensors or self.metadata_problems)

    @property
    def first_bad(self) -> BadBlock | None:
        return next((t.first_bad for t in self.tensors if t.first_bad), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["found"] = self.found
        out["first_bad"] = None if self.first_bad is None else asdict(self.first_bad)
        return out

    def text(self) -> str:
        scanned = sum(t.scanned for t in self.tensors)
        lines = [
            f"{self.path}: {len(self.tensors)} tensors, {scanned} scanned in {self.seconds:.2f} s"
        ]
        fb = self.first_bad
        lines.append(f"first bad block: {fb.text() if fb else 'none'}")
        for t in self.bad_tensors:
            lines.append(
                f"  {t.name} ({t.type}, {t.blocks} blocks): {t.nonfinite} non-finite, "
                f"{t.zero_blocks} all-zero; first: {t.first_bad.text() if t.first_bad else '-'}"
            )
        for t in self.tensors:
            if not t.scanned:
                lines.append(f"  not scanned: {t.name} ({t.type}): {t.note}")
        lines += [f"metadata: {p}" for p in self.metadata_problems]
        lines += [f"note: {n}" for n in self.notes]
        lines.append("verdict: " + ("PROBLEMS FOUND" if self.found else "no problems found"))
        return "\n".join(lines)


def _scan_quantized(spec: Any, start: int, row_len: int) -> TensorCheck:
    qt = spec.qtype
    block, size = GGML_QUANT_SIZES[qt]
    n_blocks = spec.nbytes // size
    t = TensorCheck(spec.name, qt.name, list(spec.shape), n_blocks, True)
    raw = np.asarray(spec.data).reshape(-1).view(np.uint8)[: n_blocks * size]
    blocks = raw.reshape(n_blocks, size)
    bad = np.zeros(n_blocks, bool)
    zero = np.ones(n_blocks, bool)
    for off in SCALE_FIELDS[qt]:
        bits = blocks[:, off : off + 2].view(np.uint16).reshape(-1)  # strided: one f16 column
        bad |= (bits & 0x7C00) == 0x7C00  # exponent all ones: Inf or NaN
        zero &= (bits & 0x7FFF) == 0  # +0 or -0
    t.nonfinite, t.zero_blocks = int(bad.sum()), int(zero.sum())
    per_row = row_len // block
    for mask, kind in ((bad, "non-finite scale"), (zero, "all-zero block")):
        if mask.any():
            b = int(np.argmax(mask))
            cand = BadBlock(spec.name, kind, b, b // per_row, start + b * size)
            if t.first_bad is None or cand.block < t.first_bad.block:
                t.first_bad = cand
    return t


def _scan_float(spec: Any, start: int, row_len: int) -> TensorCheck:
    qt = spec.qtype
    n = spec.nbytes // GGML_QUANT_SIZES[qt][1]
    t = TensorCheck(spec.name, qt.name, list(spec.shape), n, True)
    raw = np.asarray(spec.data).reshape(-1).view(np.uint8)[: spec.nbytes]
    if qt == _T.F32:
        bad = (raw.view(np.uint32) & 0x7F800000) == 0x7F800000
        item = 4
    else:  # F16 and BF16: the exponent field is 5 and 8 bits wide
        mask = 0x7C00 if qt == _T.F16 else 0x7F80
        bad = (raw.view(np.uint16) & mask) == mask
        item = 2
    t.nonfinite = int(bad.sum())
    if t.nonfinite:
        e = int(np.argmax(bad))
        t.first_bad = BadBlock(spec.name, "non-finite value", e, e // row_len, start + e * item)
    return t


def check_model(path: str | os.PathLike[str]) -> CheckReport:
    """Scan every tensor of the GGUF file at ``path`` (module docstring).

    Raises:
        ModelError: the file cannot be read as GGUF (missing, truncated, malformed layout).
    """
    from tracekit.model.config import check_tensors, open_reader, read_config, read_tensors

    t0 = time.perf_counter()
    p = Path(path)
    reader = open_reader(p)
    specs = read_tensors(reader)
    cfg, problems = read_config(reader, specs)
    notes: list[str] = []
    if cfg is not None:
        problems = []
        for prob in check_tensors(cfg, specs):
            # a type tracekit cannot run yet is not a defect of the file
            (notes if "not supported (supported:" in prob else problems).append(prob)
    out = []
    for spec in specs.values():
        row_len = spec.shape[-1] if spec.shape else 1
        start = int(spec.offset)  # the reader's data_offset: from the start of the file
        if spec.qtype in SCALE_FIELDS:
            out.append(_scan_quantized(spec, start, row_len))
        elif spec.qtype in FLOAT_TYPES:
            out.append(_scan_float(spec, start, row_len))
        else:
            blocks = spec.nbytes // GGML_QUANT_SIZES[spec.qtype][1]
            out.append(TensorCheck(spec.name, spec.qtype.name, list(spec.shape), blocks, False,
                                   note="no scale layout known for this type"))  # fmt: skip
    return CheckReport(str(p), p.stat().st_size, out, problems, notes, time.perf_counter() - t0)

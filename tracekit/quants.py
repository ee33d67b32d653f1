"""The one declaration of every tensor type tracekit knows (in the spirit of gguf-py's quants.py).

A type is one class, registered in :data:`QUANT_TABLE` when it is defined. Its docstring is an
ASCII drawing of its block layout; its class arguments name its GGUF enum, the byte offsets of
its f16 fields, its one CUDA block decoder (a ``struct`` of ``kernels/quant_decoders.cuh``
named exactly as GGML names the type) and the dequant kernel's tuning; its ``decode`` is the
fast CPU decoder. Everything else is derived from it: block and byte sizes come from
``gguf.GGML_QUANT_SIZES`` (never retyped, and passed to the CUDA structs as -D defines by
:func:`cuda_defines`); kernel names from the GGML name; the dequant and embed kernels'
instantiations, the stamp list and the CPU dispatch from this table. Dispatch is keyed by
``gguf.GGMLQuantizationType`` (never by a bare integer): the seed's §2.1 trap was two dispatch
tables with two numberings.

Adding a type: one class here (with its ``decode`` and ``int_parts``), one ``struct`` in
quant_decoders.cuh and its ``Codes<T>`` in quant_codes.cuh (the quant path's matvec).
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_T = GGMLQuantizationType


class IntParts(NamedTuple):
    """A block-quantized tensor as small integers and per-16-value factors (``int_parts``)."""

    codes: np.ndarray  #: int8 [n, block_size]: the code minus its offset (Q4_0: q - 8)
    a: np.ndarray  #: f32 [n, block_size // 16]: the scale of each group of 16 values
    b: np.ndarray | None  #: f32 like ``a``: the group's offset (Q4_1's m, -dmin m), or None


#: Values per group of :class:`IntParts` (every quant type's scales cover 16 or 32 values).
INT_GROUP = 16


def _per16(f: np.ndarray, run: int) -> np.ndarray:
    """Per-block factors f [n, QK / run] (one per run of ``run`` values) as [n, QK / 16]."""
    return np.repeat(f, run // INT_GROUP, axis=1) if run != INT_GROUP else f


class DequantConfig(NamedTuple):
    """How ``dequant_<suffix>_f16`` runs (``kernels/dequant.py`` names the variants)."""

    variant: int  #: dequant.VARIANTS: staged tile, staged + word-wise, direct
    block: int  #: threads per block
    chunks: int  #: 16-byte output chunks per thread per tile


#: The tuning of a type nobody has swept yet: the direct variant (it won for every swept type).
UNSWEPT = DequantConfig(2, 128, 4)


class StagedShape(NamedTuple):
    """mmvq_st's blocks (``kernels/matvec.py``; ``scripts/bench_mmvq_staged.py --st-shape``)."""

    #: consecutive rows of a tile a warp walks together (matvec.cu's MMVQ_ST_RPW: each read of
    #: x serves them all): 1, 2 or 4
    rows_per_warp: int = 1
    #: warps a block (its rows: this / the warps a row)
    block_warps: int = 8
    #: resident blocks an SM (each takes 1 / this of the SM's shared memory)
    blocks_per_sm: int = 2


class MmvqConfig(NamedTuple):
    """How ``mmvq_<suffix>`` runs (``kernels/matvec.py``; ``scripts/bench_matvec.py --sweep``)."""

    min_blocks: int  #: resident 256-thread blocks per SM (the register cap: 64K / (256 x it))
    warps_per_sm: int  #: the fused kernel's grid, in warps per SM (each block quantizes x)
    prequantize: bool  #: x quantized by its own launch (quantize_q8 + mmvq_qx_*), not fused
    #: consecutive rows a warp walks together (each activation read from shared memory serves
    #: them all): 1, 2 or 4
    rows_per_warp: int = 1
    #: large weights (matvec.STAGED_MIN_VALUES) run mmvq_st: tiles staged in shared memory by
    #: the bulk-copy engine (sm_90+), where scripts/bench_mmvq_staged.py measured it faster
    staged: bool = False
    #: ... and only rows of at least this many values (k): a shorter row's tile ran slower
    #: staged for some types (Q4_0 at k = 896, below)
    staged_min_k: int = 0
    #: mmvq_st with one token: values of x a lane holds in registers, read once a block
    #: (matvec.cu's MMVQ_ST_XREG; 0: none, x read from shared memory for every row)
    staged_x_held: int = 0
    #: mmvq_st's blocks (rows a warp walks together, warps a block, blocks an SM)
    staged_shape: StagedShape = StagedShape()


#: mmvq's configuration where a type declares none (H200 sweep, 2026-12-01: the best for most).
MMVQ_DEFAULT = MmvqConfig(4, 32, False)
#: The K-quants' 64-value items need more registers: 3 blocks of 24 warps per SM (H200 sweep,
#: 2026-12-01 15:08 UTC: Q4_K 44.9 -> 47.5, Q5_K 47.1 -> 49.3, Q6_K 45.1 -> 46.0% of copy).
MMVQ_K = MmvqConfig(3, 24, False)
#: Types whose loop is short enough that a grid without prologues wins (same sweep: Q8_0 55.4
#: -> 58.3, Q4_1 48.5 -> 50.0, Q5_1 51.0 -> 53.4, IQ4_NL 36.9 -> 37.4% of copy).
MMVQ_PREQUANTIZED = MmvqConfig(4, 32, True)
#: With large weights staged by the bulk-copy engine (``staged``: mmvq_st), for the types where
#: it measured faster (H200, 2026-12-02 05:33 UTC, ``scripts/bench_mmvq_staged.py --rounds
#: 3``: medians of 3 alternated rounds, % of copy, mmvq -> mmvq_st at 14336 x 4096 / 4096 x
#: 14336 / 151936 x 896): Q8_0 57.5 -> 67.4 / 48.5 -> 58.3 / 64.0 -> 75.5; Q4_0 44.9 -> 49.4 /
#: 33.6 -> 42.2 / 49.3 -> 45.9; Q4_1 48.3 -> 56.0 / 41.8 -> 47.4 / 43.8 -> 57.1; Q5_0 46.7 ->
#: 53.5 / 36.4 -> 41.4 / 49.1 -> 50.3; Q5_1 52.0 -> 59.9 / 45.4 -> 46.8 / 48.1 -> 60.1; Q4_K
#: 46.6 -> 45.5 / 34.3 -> 39.6; Q5_K 50.0 -> 54.0 / 36.9 -> 42.4; Q6_K 45.1 -> 51.4 / 35.0 ->
#: 38.8; IQ4_XS 32.1 -> 36.0 / 26.4 -> 31.8. Not Q2_K (24.9 -> 23.1 / 19.2 -> 22.3), Q3_K
#: (27.4 -> 26.9 / 21.6 -> 22.2), IQ4_NL then (37.1 -> 36.1 / 31.4 -> 31.8 / 31.0 -> 33.3): their
#: loops, not their loads, set their time (since changed for all three: below).
MMVQ_STAGED = MMVQ_DEFAULT._replace(staged=True)
#: Q4_0 stages rows of k >= 1024 only: at the 0.5B shape's 151936 x 896 output mmvq was faster
#: on both cards (H200 05:33 above: 49.3 against 45.9% of copy; H100, 2026-12-02 20:39 UTC,
#: ``bench_mmvq_staged.py --shapes 151936x896 --rounds 2``: 69.4 against 63.2% queued, 74.1
#: against 67.4% at own device time), while at k = 4096 and 14336 mmvq_st wins (above).
MMVQ_STAGED_LONG_ROWS = MMVQ_STAGED._replace(staged_min_k=1024)
MMVQ_K_STAGED = MMVQ_K._replace(staged=True)
#: Q3_K (MMVQ_K_STAGED) and Q2_K stage since their half-block items read x's runs without bank
#: conflicts (2026-12-07: their loops got short enough that the loads count). H100, 2026-12-07
#: 11:51 UTC, ``bench_mmvq_staged.py --shapes 14336x4096,4096x14336 --types Q3_K,Q2_K --sweep=
#: --rounds 2``, own device time, % of copy, mmvq -> mmvq_st at 14336 x 4096 / 4096 x 14336:
#: Q3_K 53.4 -> 57.3 / 38.2 -> 43.6; Q2_K 54.8 -> 47.7 / 38.5 -> 43.3 (so Q2_K then staged rows
#: of k >= 8192 only; since x held, k >= 4096: MMVQ_K2_STAGED below). A K-quant has no
#: 151936 x 896 row (896 is not a multiple of 256).
MMVQ_PREQUANTIZED_STAGED = MMVQ_PREQUANTIZED._replace(staged=True)
#: x held in registers (128 values a lane: a 4096-value row's at one warp a row) for the types
#: the H100 timed faster with it, 14336 x 4096, own device time, % of copy, each against a
#: baseline in the same call of 2 rounds (BENCHMARKS.md): 2026-12-07 22:36 UTC, Q4_0 73.7 ->
#: 75.6 (75.5 in a second call), Q4_K 73.9 -> 75.3 (75.2), Q8_0 83.9 -> 85.9 (85.9); 23:40 UTC,
#: Q4_1 78.9 -> 81.2, Q3_K 57.6 -> 60.4, Q6_K 77.7 -> 78.4 (78.5 at 22:37), IQ4_NL 70.0 -> 72.3,
#: IQ4_XS 67.6 -> 72.3, Q2_K 47.5 -> 59.1 (59.0 at 22:36; its mmvq 54.4). Not Q5_0 (76.9 ->
#: 75.4), Q5_1 (80.4 -> 79.8), Q5_K (77.0 -> 77.3). GPU parity: every type built so; racecheck:
#: Q4_0, Q4_K, Q8_0, Q6_K, Q2_K, IQ4_XS.
X_HELD = 128
MMVQ_PREQUANTIZED_STAGED_X_HELD = MMVQ_PREQUANTIZED_STAGED._replace(staged_x_held=X_HELD)
#: ... and two rows a warp walks together where that was faster again, with x held (same calls,
#: own % of copy): on 4-warp blocks, 4 an SM, Q4_0 75.6 -> 77.0, Q4_K 75.3 -> 78.1, IQ4_XS
#: 72.3 -> 73.8, Q5_K 77.3 -> 78.0 (77.0 as it was); 2 an SM (4 leave no room for two of its
#: 8-row stages), Q6_K 78.4 -> 80.3; on 8-warp blocks (16-row tiles), Q2_K 59.1 -> 61.6 (59.0
#: -> 62.0 at 22:36), Q3_K 60.4 -> 61.7. Not Q8_0 (85.9 -> 85.2), Q4_1, Q5_0, Q5_1, IQ4_NL.
TWO_ROWS_QUARTER_BLOCKS = StagedShape(rows_per_warp=2, block_warps=4, blocks_per_sm=4)
TWO_ROWS_HALF_BLOCKS = StagedShape(rows_per_warp=2, block_warps=4, blocks_per_sm=2)
TWO_ROWS = StagedShape(rows_per_warp=2)
MMVQ_STAGED_LONG_ROWS_TWO_ROWS = MMVQ_STAGED_LONG_ROWS._replace(
    staged_x_held=X_HELD, staged_shape=TWO_ROWS_QUARTER_BLOCKS
)
MMVQ_STAGED_TWO_ROWS = MMVQ_STAGED._replace(
    staged_x_held=X_HELD, staged_shape=TWO_ROWS_QUARTER_BLOCKS
)
MMVQ_K_STAGED_X_HELD = MMVQ_K_STAGED._replace(staged_x_held=X_HELD)
MMVQ_K_STAGED_TWO_ROWS = MMVQ_K_STAGED_X_HELD._replace(staged_shape=TWO_ROWS_QUARTER_BLOCKS)
MMVQ_K_STAGED_TWO_ROWS_HALF = MMVQ_K_STAGED_X_HELD._replace(staged_shape=TWO_ROWS_HALF_BLOCKS)
MMVQ_K_STAGED_TWO_ROWS_FULL = MMVQ_K_STAGED_X_HELD._replace(staged_shape=TWO_ROWS)
#: Q2_K's mmvq_st, x held and two rows a warp, ran ahead of its mmvq at both lengths timed
#: (4096 above; 14336 by 43.3 to 38.5 before either knob), so it stages rows of k >= 4096;
#: shorter ones were not timed.
MMVQ_K2_STAGED = MMVQ_K_STAGED_TWO_ROWS_FULL._replace(staged_min_k=4096)
#: IQ4_NL stages since its codes became two DP4A addends in x's nibble order (2026-12-06):
#: its loop got short enough that the loads set its time (H100, 2026-12-07 00:48 UTC,
#: ``bench_mmvq_staged.py --shapes 14336x4096,4096x14336,151936x896 --types IQ4_NL --rounds
#: 3``, own device time, % of copy, mmvq -> mmvq_st: 67.5 -> 71.8 / 57.9 -> 62.2 / 50.2 ->
#: 64.1; the day before, 14336 x 4096: 67.6 -> 71.1). The H200's last comparison (2026-12-06
#: 20:36, mmvq ahead 52.7 against 49.9) ran before the nibble order; not re-run since.

#: The table: GGUF enum -> its declaration, in declaration (display) order.
QUANT_TABLE: dict[GGMLQuantizationType, QuantType] = {}


class QuantType:
    """One tensor type. Subclass it once per type (see the module docstring); the table holds
    the one instance of each subclass.

    Class arguments:
        qtype: its ``gguf.GGMLQuantizationType``.
        f16_fields: byte offsets of the f16 fields of a block (scales, mins; F16: the value).
        device: the CUDA decoder struct (quant types: the GGML name, in quant_decoders.cuh;
            float types: the ``Src*`` reader).
        dequant: its :class:`DequantConfig` (quant types; :data:`UNSWEPT` if not given).
        scale_group: values that share one scale (and offset) in ``int_parts``: 32, or 16 for
            Q2_K, Q3_K and Q6_K; mmvq sums each group's integer dot product before scaling it.
    """

    qtype: ClassVar[GGMLQuantizationType]
    f16_fields: ClassVar[tuple[int, ...]]
    device: ClassVar[str]
    dequant: ClassVar[DequantConfig | None]
    scale_group: ClassVar[int]
    mmvq: ClassVar[MmvqConfig]

    def __init_subclass__(
        cls,
        *,
        qtype: GGMLQuantizationType,
        f16_fields: tuple[int, ...] = (),
        device: str | None = None,
        dequant: DequantConfig | None = None,
        scale_group: int = 32,
        mmvq: MmvqConfig = MMVQ_DEFAULT,
    ) -> None:
        super().__init_subclass__()
        if cls.__name__ != qtype.name:
            raise TypeError(
                f"quant class {cls.__name__} must be named as GGML names it: {qtype.name}"
            )
        if qtype in QUANT_TABLE:
            raise TypeError(f"{qtype.name} is declared twice")
        cls.qtype = qtype
        cls.f16_fields = tuple(f16_fields)
        quantized = GGML_QUANT_SIZES[qtype][0] > 1
        cls.device = device or qtype.name
        cls.dequant = (dequant or UNSWEPT) if quantized else None
        if scale_group not in (16, 32):
            raise TypeError(f"{qtype.name}: scale_group {scale_group} must be 16 or 32")
        cls.scale_group = scale_group
        cls.mmvq = mmvq
        QUANT_TABLE[qtype] = cls()

    def __repr__(self) -> str:
        return f"QuantType({self.name})"

    @property
    def name(self) -> str:
        return self.qtype.name

    @property
    def suffix(self) -> str:
        """The kernels' name part: ``dequant_<suffix>_f16``, ``embed_rows_<suffix>``."""
        return self.qtype.name.lower()

    @property
    def layout(self) -> str:
        """The ASCII drawing of a block (the class docstring)."""
        return self.__doc__ or ""

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

    @property
    def dequant_kernel(self) -> str:
        """The GPU dequant kernel (``dequant.cu``, instantiated from this declaration)."""
        return f"dequant_{self.suffix}_f16"

    @property
    def embed_kernel(self) -> str:
        """The GPU embedding gather (``embed.cu``); an F32 table is gathered as plain f32 rows."""
        return "gather_rows_f32" if self.qtype == _T.F32 else f"embed_rows_{self.suffix}"

    def decode(self, blocks: np.ndarray, out: np.ndarray) -> None:
        """Decode blocks uint8 [n, type_size] into out f32 [n, block_size], bit-equal to
        ``gguf.quants.dequantize`` (the same products, in the same order, rounded alike)."""
        raise NotImplementedError(f"{self.name} declares no CPU decoder")

    def int_parts(self, blocks: np.ndarray) -> IntParts:
        """The integer view of blocks uint8 [n, type_size] that the q8 matvec (``mmvq``) works
        on: x = a[g] * codes + b[g] over groups g of 16 values, with ``a * codes + b`` rounded
        as f32 bit-equal to ``gguf.quants.dequantize`` (tests/test_quants.py checks it). Its
        CUDA twin is ``Codes<T>`` in kernels/quant_codes.cuh."""
        raise NotImplementedError(f"{self.name} declares no integer view")

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


# -- helpers of the CPU decoders (each type's decode writes f32 into out[n_blocks, block_size]) -
# NumPy pays ~8 ns per inner loop, so a loop over 16-byte rows costs more than the arithmetic.
# The decoders therefore keep every loop long: byte fields are gathered into contiguous arrays
# with one void-dtype copy (``_cols``), nibbles and high bits are split eight at a time on
# uint64 words, codes are laid out in output order with void-dtype copies or (K-quants, Q6_K)
# by repeating each packed run once per sub-block it feeds (one ``np.repeat`` of 32/64-byte
# items) and shifting every word by its own amount from a tiled table (no Python loop over
# sub-blocks), cast to f32 in one pass and scaled (and offset) by per-block factors repeated
# to full length, scale and offset in one repeat. The arithmetic (which products, in which
# order, rounded where) is exactly gguf-py's.
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)  # the low nibble of every byte of a word
_M2 = np.uint64(0x0303030303030303)  # bits 0-1 of every byte
_B80 = np.uint64(0x8080808080808080)
#: Every f16 bit pattern -> its f32 value (256 KB; NumPy's own f16 -> f32 cast is scalar, ~3 ns).
_F16_TO_F32 = (
    np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
)
#: A qh byte -> 8 bytes, byte i = (bit i of the qh byte) << 4: Q5_0/Q5_1's 5th bits in place.
_QH_SPREAD = np.array(
    [sum(((v >> i) & 1) << (8 * i + 4) for i in range(8)) for v in range(256)], np.uint64
)


def _cols(b: np.ndarray, start: int, width: int) -> np.ndarray:
    """Bytes ``[start, start + width)`` of every block, as a contiguous uint8 [n, width]."""
    out = np.empty((b.shape[0], width), np.uint8)
    out.view(f"V{width}")[...] = b[:, start : start + width].view(f"V{width}")
    return out


def _f16(b: np.ndarray, offset: int, count: int = 1) -> np.ndarray:
    """The ``count`` f16 fields from byte ``offset`` of every block, as f32 [count, n]."""
    return np.take(_F16_TO_F32, _cols(b, offset, 2 * count).view(np.uint16).T)


def _nibble_codes(q: np.ndarray, group: int) -> np.ndarray:
    """4-bit codes of the bytes q [n, w] in gguf's order: for each run of ``group`` bytes, the
    low nibbles, then the high nibbles. Returns uint8 [n, 2 w]."""
    n, w = q.shape
    q64 = q.view(np.uint64)
    codes = np.empty((n, 2 * w), np.uint8)
    cv = codes.view(f"V{group}")  # [n, 2 w / group]: runs of lo, hi, lo, hi, ...
    lo = q64 & _M4
    cv[:, 0::2] = lo.view(f"V{group}")
    np.right_shift(q64, np.uint64(4), out=lo)
    lo &= _M4
    cv[:, 1::2] = lo.view(f"V{group}")
    return codes


def _to_signed(codes: np.ndarray, offset: int) -> np.ndarray:
    """uint8 codes in [0, 2 offset) minus ``offset``, as int8 (eight bytes per uint64 op: adding
    0x80 - offset never carries out of a byte, and flipping bit 7 recentres it)."""
    c64 = codes.view(np.uint64)
    c64 += np.uint64((0x80 - offset) * 0x0101010101010101)
    c64 ^= _B80
    return codes.view(np.int8)


def _scale(o: np.ndarray, s: np.ndarray, run: int) -> None:
    """o (flat order) *= each value of s repeated ``run`` times."""
    np.multiply(o.reshape(-1), np.repeat(s.reshape(-1), run), out=o.reshape(-1))


def _affine(o: np.ndarray, codes: np.ndarray, f: np.ndarray, run: int, sign: int) -> None:
    """o (flat order) = codes * f[0] +/- f[1], each value of f [2, k] repeated ``run`` times
    (one repeat for both rows); the product and the sum rounded as gguf-py's."""
    of = o.reshape(-1)
    np.copyto(of, codes.reshape(-1), casting="unsafe")
    r = np.repeat(f.reshape(-1), run).reshape(2, -1)
    of *= r[0]
    (np.add if sign > 0 else np.subtract)(of, r[1], out=of)


_M1 = np.uint64(0x0101010101010101)  # bit 0 of every byte
#: IQ4_NL/IQ4_XS's 16 non-linear levels (gguf-py's IQ4_NL.kvalues), as f32 for one np.take.
_IQ4_LEVELS = np.array(
    (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113), np.float32
)
_IQ4_LEVELS_I8 = _IQ4_LEVELS.astype(np.int8)


def _q5_codes(b: np.ndarray, qh_at: int, qs_at: int) -> np.ndarray:
    # 5-bit codes [n, 32]: low 4 bits from the nibbles of qs, bit 4 = bit j of the u32 qh
    codes = _nibble_codes(_cols(b, qs_at, 16), 16)
    hi = np.take(_QH_SPREAD, _cols(b, qh_at, 4))  # [n, 4] uint64 = [n, 32] bytes, 0 or 16
    codes.view(np.uint64)[...] |= hi
    return codes


def _take(lut: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    # mode="wrap" skips NumPy's buffered bounds check (every index is < len(lut))
    np.take(lut, idx, out=out, mode="wrap")


#: Per u64 word of a K-quant block's 256 codes (8 sub-blocks j of 4 words): the right shift
#: that brings sub-block j's nibble to bits 0-3 (0 for even j, 4 for odd), and the left then
#: right shift that brings bit j of a qh byte to bit 4 (Q5_K).
_KJ = np.repeat(np.arange(8), 4)
_K_SHIFTS = (4 * (_KJ % 2), np.maximum(4 - _KJ, 0), np.maximum(_KJ - 4, 0))
_M16 = np.uint64(0x1010101010101010)  # bit 4 of every byte
_M63 = np.uint64(0x3F3F3F3F3F3F3F3F)  # bits 0-5 of every byte
_M48 = np.uint64(0x3030303030303030)  # bits 4-5 of every byte
_LO32 = np.uint64(0xFFFFFFFF)
_HI32 = np.uint64(0xFFFFFFFF00000000)


@functools.lru_cache(maxsize=4)
def _k_shifts(n: int) -> tuple[np.ndarray, ...]:
    """:data:`_K_SHIFTS` tiled over ``n`` blocks (uint64 [32 n] each, read-only)."""
    out = tuple(np.tile(s.astype(np.uint64), n) for s in _K_SHIFTS)
    for a in out:
        a.flags.writeable = False
    return out


@functools.lru_cache(maxsize=4)
def _q6_shifts(n: int) -> tuple[np.ndarray, ...]:
    """Q6_K's per-word shifts over ``n`` blocks (uint64 [32 n] each, read-only): nibble
    (0 or 4 for each 64-byte run), then left and right shifts taking bits 2s, 2s + 1 of the
    qh copy s to bits 4, 5."""
    s = np.repeat(np.arange(4), 4)  # copy s of a 32-byte qh half: 4 words
    pats = (np.repeat([0, 4, 0, 4], 8), np.tile(np.maximum(4 - 2 * s, 0), 2))
    pats += (np.tile(np.maximum(2 * s - 4, 0), 2),)
    out = tuple(np.tile(p.astype(np.uint64), n) for p in pats)
    for a in out:
        a.flags.writeable = False
    return out


def _k_codes(b: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 4-bit codes in output order, as uint64 [32 n] (= uint8 [n, 256]).

    Sub-block j is nibble j % 2 of the 32-byte run j // 2 of qs: each run is repeated twice
    (one long ``np.repeat`` of 32-byte items) and every word shifted by its sub-block's amount.
    """
    n = b.shape[0]
    shn = _k_shifts(n)[0]
    q = np.repeat(_cols(b, b.shape[1] - 128, 128).view("V32").reshape(-1), 2).view(np.uint64)
    q >>= shn
    q &= _M4
    return q


def _k_scales(b: np.ndarray) -> np.ndarray:
    """f32 [2, 8 n]: d * sc[j] (row 0) and dmin * m[j] (row 1) of every sub-block, in order.

    The 6-bit scales/mins packed in bytes 4..16: bytes 0-3 hold sc[0..3] (low 6 bits) and the
    top 2 bits of sc[4..7]; bytes 4-7 the same for the mins; bytes 8-11 the low 4 bits of
    sc[4..7] (low nibble) and m[4..7] (high nibble). Worked on as uint64 words, eight 6-bit
    fields at a time, into one [2, n] word array of sc[0..7] / m[0..7] bytes.
    """
    n = b.shape[0]
    a = _cols(b, 4, 8).view(np.uint64).reshape(n)  # sc[0..3] | m[0..3] << 32 (low 6 bits)
    hi = np.empty(n, np.uint64)
    np.copyto(hi, _cols(b, 12, 4).view(np.uint32).reshape(n))
    lo = a & _M63
    t = hi << np.uint64(28)  # the high nibbles of bytes 8-11 -> low nibbles of bytes 4-7
    hi |= t
    hi &= _M4
    a >>= np.uint64(2)
    a &= _M48
    hi |= a  # sc[4..7] | m[4..7] << 32
    s = np.empty((2, n), np.uint64)
    np.left_shift(hi, np.uint64(32), out=t)
    np.bitwise_and(lo, _LO32, out=s[0])
    s[0] |= t  # sc[0..7]
    lo >>= np.uint64(32)
    hi &= _HI32
    np.bitwise_or(lo, hi, out=s[1])  # m[0..7]
    f = s.view(np.uint8).astype(np.float32)  # [2, 8 n]
    f *= np.repeat(_f16(b, 0, 2).reshape(-1), 8).reshape(2, -1)  # d, dmin
    return f


@functools.lru_cache(maxsize=4)
def _k2_shifts(n: int) -> tuple[np.ndarray, ...]:
    """Q2_K/Q3_K's per-word shifts over ``n`` blocks (uint64 [32 n] each, read-only). A block's
    codes are 8 copies c = 4 h + s of a 32-byte run (4 words each): the 2-bit field s of run
    h of qs is at bits 2 s, and Q3_K's high bit of copy c is bit c of hmask."""
    c = np.repeat(np.arange(8), 4)
    out = tuple(np.tile(s.astype(np.uint64), n) for s in (2 * (c % 4), c))
    for a in out:
        a.flags.writeable = False
    return out


def _runs(b: np.ndarray, start: int, width: int, run: int, copies: int) -> np.ndarray:
    """Bytes [start, start + width) of every block as runs of ``run`` bytes, each repeated
    ``copies`` times (one long ``np.repeat``), as uint64 words."""
    q = _cols(b, start, width).view(f"V{run}").reshape(-1)
    return np.repeat(q, copies).view(np.uint64)


# -- the declarations ---------------------------------------------------------------------------
# Drawings: byte offsets under the fields; x = the decoded f32 value, in gguf-py's arithmetic.


class F32(QuantType, qtype=_T.F32, device="SrcF32"):
    """F32: 1 value in 4 bytes (IEEE binary32, little-endian).

    +-----+
    | f32 |
    +-----+
    0     4
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        o[...] = b.view(np.float32)


class F16(QuantType, qtype=_T.F16, f16_fields=(0,), device="SrcF16"):
    """F16: 1 value in 2 bytes (IEEE binary16).

    +-----+
    | f16 |
    +-----+
    0     2
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _take(_F16_TO_F32, b.view(np.uint16), o)


class BF16(QuantType, qtype=_T.BF16, device="SrcBF16"):
    """BF16: 1 value in 2 bytes (the top half of an f32).

    +------+
    | bf16 |
    +------+
    0      2
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        ob = o.view(np.uint32)  # widen the bits, shift up 16
        ob[...] = b.view(np.uint16)
        ob <<= np.uint32(16)


class Q8_0(
    QuantType,
    qtype=_T.Q8_0,
    f16_fields=(0,),
    dequant=DequantConfig(2, 256, 4),
    mmvq=MMVQ_PREQUANTIZED_STAGED_X_HELD,
):
    """Q8_0: 32 values in 34 bytes;  x[j] = qs[j] * d.

    +-------+--------------+
    | d f16 | qs[32] int8  |
    +-------+--------------+
    0       2              34
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        np.copyto(o, b[:, 2:34].view(np.int8), casting="unsafe")  # cast straight from the blocks
        _scale(o, _f16(b, 0), 32)

    def int_parts(self, b: np.ndarray) -> IntParts:
        return IntParts(b[:, 2:34].view(np.int8).copy(), _per16(_f16(b, 0).T, 32), None)


class Q4_0(
    QuantType,
    qtype=_T.Q4_0,
    f16_fields=(0,),
    dequant=DequantConfig(2, 256, 4),
    mmvq=MMVQ_STAGED_LONG_ROWS_TWO_ROWS,
):
    """Q4_0: 32 values in 18 bytes;  x = d * (q - 8).

    +-------+----------------------------------------------------+
    | d f16 | qs[16]: q[j] = low nibble of qs[j], q[j+16] = high |
    +-------+----------------------------------------------------+
    0       2                                                    18
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        np.copyto(o, _to_signed(_nibble_codes(_cols(b, 2, 16), 16), 8), casting="unsafe")
        _scale(o, _f16(b, 0), 32)

    def int_parts(self, b: np.ndarray) -> IntParts:
        codes = _to_signed(_nibble_codes(_cols(b, 2, 16), 16), 8)
        return IntParts(codes, _per16(_f16(b, 0).T, 32), None)


class Q4_1(
    QuantType,
    qtype=_T.Q4_1,
    f16_fields=(0, 2),
    dequant=DequantConfig(2, 256, 4),
    mmvq=MMVQ_PREQUANTIZED_STAGED_X_HELD,
):
    """Q4_1: 32 values in 20 bytes;  x = d * q + m.

    +-------+-------+------------------------------+
    | d f16 | m f16 | qs[16]: nibbles as Q4_0      |
    +-------+-------+------------------------------+
    0       2       4                              20
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _affine(o, _nibble_codes(_cols(b, 4, 16), 16), _f16(b, 0, 2), 32, +1)

    def int_parts(self, b: np.ndarray) -> IntParts:
        dm = _f16(b, 0, 2)
        codes = _nibble_codes(_cols(b, 4, 16), 16).view(np.int8)
        return IntParts(codes, _per16(dm[0][:, None], 32), _per16(dm[1][:, None], 32))


class Q5_0(
    QuantType, qtype=_T.Q5_0, f16_fields=(0,), dequant=DequantConfig(2, 128, 2), mmvq=MMVQ_STAGED
):
    """Q5_0: 32 values in 22 bytes;  x = d * (q - 16), bit 4 of q[j] = bit j of qh.

    +-------+----------+--------------------------+
    | d f16 | qh u32   | qs[16]: nibbles as Q4_0  |
    +-------+----------+--------------------------+
    0       2          6                          22
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        np.copyto(o, _to_signed(_q5_codes(b, 2, 6), 16), casting="unsafe")
        _scale(o, _f16(b, 0), 32)

    def int_parts(self, b: np.ndarray) -> IntParts:
        return IntParts(_to_signed(_q5_codes(b, 2, 6), 16), _per16(_f16(b, 0).T, 32), None)


class Q5_1(
    QuantType,
    qtype=_T.Q5_1,
    f16_fields=(0, 2),
    dequant=DequantConfig(2, 128, 4),
    mmvq=MMVQ_PREQUANTIZED_STAGED,
):
    """Q5_1: 32 values in 24 bytes;  x = d * q + m, the 5-bit q as Q5_0's.

    +-------+-------+--------+-------------------------+
    | d f16 | m f16 | qh u32 | qs[16]: nibbles as Q4_0 |
    +-------+-------+--------+-------------------------+
    0       2       4        8                         24
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _affine(o, _q5_codes(b, 4, 8), _f16(b, 0, 2), 32, +1)

    def int_parts(self, b: np.ndarray) -> IntParts:
        dm = _f16(b, 0, 2)
        codes = _q5_codes(b, 4, 8).view(np.int8)
        return IntParts(codes, _per16(dm[0][:, None], 32), _per16(dm[1][:, None], 32))


class Q2_K(
    QuantType,
    qtype=_T.Q2_K,
    f16_fields=(80, 82),
    dequant=DequantConfig(2, 128, 2),
    scale_group=16,
    mmvq=MMVQ_K2_STAGED,
):
    """Q2_K: 256 values in 84 bytes, 16 sub-blocks j of 16;  x = (d sc[j]) q - dmin m[j].

    +-------------------------+-------------------------------+-------+----------+
    | scales[16]: sc[j] = low | qs[64]: value 128h + 32s + l  | d f16 | dmin f16 |
    | nibble, m[j] = high     | = bits 2s, 2s+1 of qs[32h+l]  |       |          |
    +-------------------------+-------------------------------+-------+----------+
    0                         16                              80      82         84
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        n = b.shape[0]
        q = _runs(b, 16, 64, 32, 4)
        q >>= _k2_shifts(n)[0]
        q &= _M2
        sc = _cols(b, 0, 16)
        f = np.empty((2, n, 16), np.float32)
        np.copyto(f[0], sc & np.uint8(15), casting="unsafe")
        np.copyto(f[1], sc >> np.uint8(4), casting="unsafe")
        f *= _f16(b, 80, 2)[:, :, None]  # d * sc[j], dmin * m[j]: exact
        _affine(o, q.view(np.uint8), f, 16, -1)

    def int_parts(self, b: np.ndarray) -> IntParts:
        n = b.shape[0]
        q = _runs(b, 16, 64, 32, 4)
        q >>= _k2_shifts(n)[0]
        q &= _M2
        sc = _cols(b, 0, 16)
        dm = _f16(b, 80, 2)
        a = (sc & np.uint8(15)).astype(np.float32) * dm[0][:, None]
        m = -((sc >> np.uint8(4)).astype(np.float32) * dm[1][:, None])
        return IntParts(q.view(np.int8).reshape(n, 256), a, m)


class Q3_K(
    QuantType,
    qtype=_T.Q3_K,
    f16_fields=(108,),
    dequant=DequantConfig(3, 256, 4),  # warp-staged (dequant.WARP_STEPS): 96.0% of copy
    scale_group=16,
    mmvq=MMVQ_K_STAGED_TWO_ROWS_FULL,
):
    """Q3_K: 256 values in 110 bytes, 16 sub-blocks j of 16;  x = (d (sc[j] - 32)) (q - 4).

    +---------------------+-------------------+----------------------+-------+
    | hmask[32]: bit 2 of | qs[64]: bits 0-1, | scales[12]: 6-bit    |       |
    | value 32c+l = bit c | as Q2_K's qs      | sc[j]: low 4 bits in | d f16 |
    | of hmask[l]         |                   | 0-7, high 2 in 8-11  |       |
    +---------------------+-------------------+----------------------+-------+
    0                     32                  96                     108     110

    scales (gguf-py's drawing): bytes 0-7 hold sc[0..7] in the low and sc[8..15] in the high
    nibbles; byte 8 + (j % 4) holds bits 4-5 of sc[j] at bit 2 (j // 4).
    """

    def _codes_scales(self, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """codes q - 4 as int8 [n, 256] and d (sc[j] - 32) as f32 [n, 16]."""
        n = b.shape[0]
        sq, sh = _k2_shifts(n)
        q = _runs(b, 32, 64, 32, 4)
        q >>= sq
        q &= _M2
        h = _runs(b, 0, 32, 32, 8)  # hmask once per copy c, its bit c moved to bit 2
        h >>= sh
        h &= _M1
        h <<= np.uint64(2)
        q |= h
        codes = _to_signed(q.view(np.uint8), 4).reshape(n, 256)
        s = _cols(b, 96, 12)
        sc = np.empty((n, 2, 8), np.uint8)
        np.bitwise_and(s[:, :8], np.uint8(15), out=sc[:, 0])
        np.right_shift(s[:, :8], np.uint8(4), out=sc[:, 1])
        hi = (s[:, None, 8:12] >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & np.uint8(3)
        sc = sc.reshape(n, 16) | (hi.reshape(n, 16) << np.uint8(4))
        dl = sc.astype(np.float32)
        dl -= np.float32(32)
        dl *= _f16(b, 108).reshape(n, 1)
        return codes, dl

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        codes, dl = self._codes_scales(b)
        np.copyto(o, codes, casting="unsafe")
        _scale(o, dl, 16)

    def int_parts(self, b: np.ndarray) -> IntParts:
        return IntParts(*self._codes_scales(b), None)


class Q4_K(
    QuantType,
    qtype=_T.Q4_K,
    f16_fields=(0, 2),
    dequant=DequantConfig(2, 128, 4),
    mmvq=MMVQ_K_STAGED_TWO_ROWS,
):
    """Q4_K: 256 values in 144 bytes, 8 sub-blocks j of 32;  x = (d sc[j]) q - dmin m[j].

    +-------+----------+---------------------------+-------------------------------------+
    | d f16 | dmin f16 | scales[12]: 6-bit sc[j],  | qs[128]: sub-block j = nibble j % 2 |
    |       |          | m[j] (get_scale_min_k4)   | of qs[32 (j // 2) ..]               |
    +-------+----------+---------------------------+-------------------------------------+
    0       2          4                           16                                    144
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _affine(o, _k_codes(b).view(np.uint8), _k_scales(b), 32, -1)

    def int_parts(self, b: np.ndarray) -> IntParts:
        n = b.shape[0]
        f = _k_scales(b).reshape(2, n, 8)
        codes = _k_codes(b).view(np.int8).reshape(n, 256)
        return IntParts(codes, _per16(f[0], 32), _per16(-f[1], 32))


class Q5_K(
    QuantType,
    qtype=_T.Q5_K,
    f16_fields=(0, 2),
    dequant=DequantConfig(2, 128, 4),
    mmvq=MMVQ_K_STAGED_TWO_ROWS,
):
    """Q5_K: 256 values in 176 bytes;  Q4_K's with a 5th bit: bit 4 of value l of sub-block j
    is bit j of qh[l].

    +-------+----------+------------+--------+-------------------+
    | d f16 | dmin f16 | scales[12] | qh[32] | qs[128] as Q4_K's |
    +-------+----------+------------+--------+-------------------+
    0       2          4            16       48                  176
    """

    def _codes(self, b: np.ndarray) -> np.ndarray:
        # qh (32 bytes) is repeated once per sub-block and each copy's bit j moved to bit 4
        n = b.shape[0]
        _, sl, sr = _k_shifts(n)
        q = _k_codes(b)
        h = _runs(b, 16, 32, 32, 8)
        h <<= sl
        h >>= sr
        h &= _M16
        q |= h
        return q

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _affine(o, self._codes(b).view(np.uint8), _k_scales(b), 32, -1)

    def int_parts(self, b: np.ndarray) -> IntParts:
        n = b.shape[0]
        f = _k_scales(b).reshape(2, n, 8)
        codes = self._codes(b).view(np.int8).reshape(n, 256)
        return IntParts(codes, _per16(f[0], 32), _per16(-f[1], 32))


class Q6_K(
    QuantType,
    qtype=_T.Q6_K,
    f16_fields=(208,),
    dequant=DequantConfig(2, 128, 1),
    scale_group=16,
    mmvq=MMVQ_K_STAGED_TWO_ROWS_HALF,
):
    """Q6_K: 256 values in 210 bytes;  x = (d scales[e // 16]) (q - 32).

    +---------------------------+----------------------------+------------+-------+
    | ql[128]: low 4 bits of    | qh[64]: bits 4-5 of        | scales[16] | d f16 |
    | value 128h+r = nibble     | value 128h+r = bits        | int8       |       |
    | r // 64 of ql[64h + r%64] | 2 (r//32) of qh[32h+r%32]  |            |       |
    +---------------------------+----------------------------+------------+-------+
    0                           128                          192          208     210
    """

    # (4 chunks per thread swept at 87.1% of copy; 1 chunk: 92.4%)

    def _codes_scales(self, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """codes q - 32 as int8 [n, 256] and d scales[j] as f32 [n, 16]."""
        n = b.shape[0]
        shn, sl, sr = _q6_shifts(n)
        q = _runs(b, 0, 128, 64, 2)  # each 64-byte half of ql twice (low, then high nibbles)
        q >>= shn
        q &= _M4
        h = _runs(b, 128, 64, 32, 4)  # each 32-byte half of qh 4 times, bits 2s, 2s + 1 -> 4, 5
        h <<= sl
        h >>= sr
        h &= _M48
        q |= h
        codes = _to_signed(q.view(np.uint8), 32).reshape(n, 256)
        dsc = _cols(b, 192, 16).view(np.int8).astype(np.float32)
        dsc *= _f16(b, 208).reshape(n, 1)
        return codes, dsc

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        codes, dsc = self._codes_scales(b)
        np.copyto(o, codes, casting="unsafe")
        _scale(o, dsc, 16)

    def int_parts(self, b: np.ndarray) -> IntParts:
        return IntParts(*self._codes_scales(b), None)


class IQ4_NL(
    QuantType,
    qtype=_T.IQ4_NL,
    f16_fields=(0,),
    dequant=DequantConfig(2, 128, 2),
    mmvq=MMVQ_PREQUANTIZED_STAGED_X_HELD,
):
    """IQ4_NL: 32 values in 18 bytes;  x = d * LEVELS[q], the nibbles laid out as Q4_0's.

    +-------+----------------------------------------------------+
    | d f16 | qs[16]: q[j] = low nibble of qs[j], q[j+16] = high |
    +-------+----------------------------------------------------+
    0       2                                                    18
    """

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _take(_IQ4_LEVELS, _nibble_codes(_cols(b, 2, 16), 16), o)
        _scale(o, _f16(b, 0), 32)

    def int_parts(self, b: np.ndarray) -> IntParts:
        codes = np.take(_IQ4_LEVELS_I8, _nibble_codes(_cols(b, 2, 16), 16))
        return IntParts(codes, _per16(_f16(b, 0).T, 32), None)


class IQ4_XS(
    QuantType,
    qtype=_T.IQ4_XS,
    f16_fields=(0,),
    dequant=DequantConfig(2, 128, 4),
    mmvq=MMVQ_STAGED_TWO_ROWS,
):
    """IQ4_XS: 256 values in 136 bytes, 8 sub-blocks j of 32;  x = (d (ls[j] - 32)) LEVELS[q].

    +-------+---------------+---------------+-----------------------------------+
    | d f16 | scales_h u16: | scales_l[4]:  | qs[128]: sub-block j = 16 bytes,  |
    |       | bits 4-5 of   | bits 0-3 of   | low nibbles then high (as IQ4_NL) |
    |       | ls[j] at 2j   | ls[j]: nibble |                                   |
    |       |               | j%2 of [j//2] |                                   |
    +-------+---------------+---------------+-----------------------------------+
    0       2               4               8                                   136
    """

    def _scales(self, b: np.ndarray) -> np.ndarray:
        """d (ls[j] - 32) as f32 [n, 8]."""
        n = b.shape[0]
        sl = _cols(b, 4, 4)
        ls = np.empty((n, 4, 2), np.uint8)
        np.bitwise_and(sl, np.uint8(15), out=ls[:, :, 0])
        np.right_shift(sl, np.uint8(4), out=ls[:, :, 1])
        hi = (_cols(b, 2, 2).view(np.uint16) >> np.arange(0, 16, 2, dtype=np.uint16)) & 3
        ls = ls.reshape(n, 8) | (hi.astype(np.uint8) << np.uint8(4))
        dl = ls.astype(np.float32)
        dl -= np.float32(32)
        dl *= _f16(b, 0).reshape(n, 1)
        return dl

    def decode(self, b: np.ndarray, o: np.ndarray) -> None:
        _take(_IQ4_LEVELS, _nibble_codes(_cols(b, 8, 128), 16), o)
        _scale(o, self._scales(b), 32)

    def int_parts(self, b: np.ndarray) -> IntParts:
        codes = np.take(_IQ4_LEVELS_I8, _nibble_codes(_cols(b, 8, 128), 16))
        return IntParts(codes, _per16(self._scales(b), 32), None)


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


def cuda_defines() -> tuple[str, ...]:
    """The block sizes of every quant type's CUDA struct, from ``GGML_QUANT_SIZES``:
    ``-DTK_<NAME>_QK=<values> -DTK_<NAME>_TS=<bytes>`` (quant_decoders.cuh's QUANT_SIZES)."""
    out = ["-DTK_QUANT_SIZES"]
    for t in QUANTIZED_TYPES:
        out += [f"-DTK_{t.device}_QK={t.block_size}", f"-DTK_{t.device}_TS={t.type_size}"]
        out += [f"-DTK_{t.device}_SG={t.scale_group}"]
    return tuple(out)


if (
    __name__ == "__main__"
):  # nvcc flags for a local compile check: nvcc $(python -m tracekit.quants)
    print(" ".join(cuda_defines()))

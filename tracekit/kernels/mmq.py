"""The quant path's matrix product for prefill-sized batches (issue 13; llama.cpp's MMQ).

    quantize_q8(x) -> runs [nt, run_row_ints(k)]         x to 8 bits per run of 32 values
    mmq_<suffix>(raw, runs) -> f32 [nt, n]              int8 tensor-core MMA per scale group

A MatMul of more than ``matvec.MAX_NT`` tokens on the quant path, with a block-quantized weight,
is these two launches (:func:`launch_mmq`). They compute what mmvq computes for a few tokens:
x quantized as :func:`~tracekit.kernels.matvec.quantize_q8` (bit for bit), each scale group's
integer dot product exact, each group's term ``(a dx) s + (b dx) qsum`` rounded as
:func:`~tracekit.kernels.matvec.q8_product` rounds it, so the GPU and the NumPy backend
(:func:`ref_mmq`) differ only in the order the terms are summed.

GPU layout (mmq.cu's grid contract, :func:`geometry`): a block computes ``BM`` weight rows x
``BN`` tokens, one warp per 32 x 32 sub-tile, k stepped ``KS`` values at a time through shared
memory (:func:`shared_bytes`); grid = (ceil(nt / BN), ceil(n / BM)). Kernels are generated per
type from the quant table (``MMQ_KERNELS(<suffix>, <struct>)`` appended to mmq.cu) and compiled
on first use of that type.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tracekit.kernels import cuda
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.launch import MAX_GRID_YZ, Geometry, LaunchRecord, ceil_div, grid_1d
from tracekit.kernels.matvec import (
    MATH_FLOAT,
    MAX_NT,
    PATH,
    RUN_BYTES,
    block_sizes,
    check,
    q8_product,
    ref_quantize_record,
    run_bytes,
    run_row_ints,
)
from tracekit.quants import QUANTIZED_TYPES, QuantType, quant_type

FAMILY = "mmq"
#: The tile: weight rows and tokens per block (multiples of 32: one warp per 32 x 32), and the
#: values of k per shared-memory step (a multiple of 256, whole blocks of every type).
BM, BN, KS = 64, 64, 256
THREADS = 32 * (BM // 32) * (BN // 32)
#: __launch_bounds__' resident blocks per SM (ptxas: 99-139 registers at 2, no spills)
MIN_BLOCKS = 2
#: The math path of the mmq records (the bound model's peak, ``ceilings.peak_flops_by_path``).
MATH_MMQ = "int8_tensor_core"
#: The quantize launch of an mmq node (mmq.cu; quantize_q8_n<nt> in matvec.cu is mmvq's).
QUANTIZE = "quantize_q8"


def kernel_name(qt: QuantType) -> str:
    return f"mmq_{quant_type(qt).suffix}"


def kernel_names() -> frozenset[str]:
    """Every mmq kernel name (each times itself when given a stamp slot: cuda.STAMPED)."""
    return frozenset({kernel_name(qt) for qt in QUANTIZED_TYPES} | {QUANTIZE})


cuda.register_stamped(kernel_names())


def runs_mmq(qt: QuantType, nt: int) -> bool:
    """Whether a quant-path MatMul of ``nt`` tokens runs mmq (else mmvq / matvec): a
    block-quantized weight and more tokens than one matvec launch takes. Float weights
    (F32/F16/BF16) past MAX_NT have no quant kernel: ``matmul.choose_path`` sends them to the
    f16 path, and says so in the trace."""
    return quant_type(qt).is_quantized and nt > MAX_NT


def shared_bytes(qt: QuantType) -> int:
    """mmq's dynamic shared memory (mmq.cu's MmqLayout): the two int8 tiles (rows of KS + 32
    bytes), the weight's f32 factors per scale group (a; b for types with an offset), the
    tokens' d per run and qsum per scale group (each row padded by one word)."""
    qt = quant_type(qt)
    rw, gs, rs = KS // 4 + 8, KS // qt.scale_group + 1, KS // 32 + 1
    has_min = qt.int_parts(np.zeros((1, qt.type_size), np.uint8)).b is not None
    words = (BM + BN) * rw + BM * gs * (2 if has_min else 1) + BN * rs + BN * gs
    return 4 * words


def geometry(n: int, nt: int) -> Geometry:
    """block = THREADS (one warp per 32 x 32 sub-tile), grid = (ceil(nt / BN), ceil(n / BM)).

    Raises:
        KernelInputError: n needs more than 65535 row tiles (grid.y's limit).
    """
    if n < 1 or nt < 1:
        raise ValueError(f"mmq shape n={n}, nt={nt} must be positive")
    gy = ceil_div(n, BM)
    if gy > MAX_GRID_YZ:
        raise KernelInputError(f"mmq weight rows n={n} need {gy} row tiles, over grid.y's 65535")
    return Geometry((ceil_div(nt, BN), gy, 1), (THREADS, 1, 1), THREADS * ceil_div(nt, BN) * gy)


def quantize_geometry(nt: int, k: int) -> Geometry:
    """One thread per run of 32 values (quantize_q8's grid-stride loop covers a clamp)."""
    return grid_1d(nt * (k // 32), 256)


def _check(x: Any, raw: Any, qt: QuantType, shape: tuple[int, int]) -> tuple[int, int, int]:
    qt = quant_type(qt)
    nt, n, k = check(x, raw, qt, shape, max_nt=None)
    if not qt.is_quantized:
        raise KernelInputError(f"mmq takes block-quantized weights, not {qt.name}")
    return nt, n, k


def ref_mmq(
    x: np.ndarray, raw: np.ndarray, qt: QuantType, shape: tuple[int, int], *, bound: bool = False
) -> tuple[np.ndarray, list[LaunchRecord]] | tuple[np.ndarray, list[LaunchRecord], np.ndarray]:
    """NumPy reference of quantize_q8 + ``mmq_<suffix>`` (any number of tokens):
    :func:`~tracekit.kernels.matvec.q8_product`, with the records of the two launches (the
    same bytes as the GPU's).

    Returns:
        (out [nt, n] f32, [quantize record, ``numpy_mmq_<suffix>`` record]), and with
        ``bound=True`` sum(|term|) per output (the scale of the summation order's rounding)

    Raises:
        KernelInputError: a gate failed, or the type is not block-quantized.
    """
    qt = quant_type(qt)
    nt, n, k = _check(x, raw, qt, shape)
    out, mag = q8_product(x, raw, qt, shape, bound=bound)
    rec = LaunchRecord.of(
        f"numpy_mmq_{qt.suffix}", None, bytes_read=int(raw.nbytes) + run_bytes(nt, k),
        writes=[out], flops=2 * nt * n * k, path=PATH, math_path=MATH_MMQ,
    )  # fmt: skip
    recs = [ref_quantize_record(x), rec]
    return (out, recs, mag) if bound else (out, recs)


def defines() -> tuple[str, ...]:
    """mmq.cu's -D options: the run record and the tile this module computes grids with."""
    return (
        f"-DRUN_INTS={RUN_BYTES // 4}", f"-DMMQ_BM={BM}", f"-DMMQ_BN={BN}", f"-DMMQ_KS={KS}",
        f"-DMMQ_MIN_BLOCKS={MIN_BLOCKS}",
    )  # fmt: skip


cuda.defines(FAMILY, defines)


@functools.cache
def _module(suffix: str) -> Any:
    """mmq.cu with the kernel of one type (from the quant table), compiled once."""
    import cupy

    qt = quant_type(suffix)
    src = (cuda._HERE / f"{FAMILY}.cu").read_text() + f"\nMMQ_KERNELS({qt.suffix}, {qt.device})\n"
    return cupy.RawModule(code=src, options=cuda.options(FAMILY))


@functools.cache
def _kernel(suffix: str, name: str) -> Any:
    fn = _module(suffix).get_function(name)
    if name != QUANTIZE:
        cuda.allow_dynamic_shared(fn, shared_bytes(quant_type(suffix)))
    return fn


def launch_mmq(
    x: Any, raw: Any, qt: QuantType, shape: tuple[int, int], out: Any = None
) -> tuple[Any, list[LaunchRecord]]:
    """``x [nt, k] @ W [n, k]ᵀ`` on the GPU, W block-quantized in ``raw``: quantize_q8 (x to
    8-bit runs in global memory) then ``mmq_<suffix>`` (as :func:`ref_mmq`).

    Args:
        x: CuPy f32 [nt, k] (any nt >= 1), contiguous, 16-byte aligned.
        raw: CuPy uint8, the weight's GGUF bytes (``qt.nbytes(shape)``), 16-byte aligned.
        qt, shape: the weight's type and shape [n, k] (k a multiple of the block size).
        out: optional CuPy f32 [nt, n] to write into.

    Returns:
        (out, [quantize record, mmq record], both with ``extra.path == "quant"``)

    Raises:
        KernelInputError: a gate failed, host arrays, a float weight type, or a misaligned x or
            raw.
    """
    import cupy

    from tracekit.kernels.elementwise import device_out, require_device

    qt = quant_type(qt)
    nt, n, k = _check(x, raw, qt, shape)
    require_device(x, "mmq x")
    require_device(raw, "mmq weight")
    for a, what in ((x, "x"), (raw, "weight")):
        if a.data.ptr % 16:
            raise KernelInputError(
                f"mmq {what} starts {a.data.ptr % 16} bytes past a 16-byte boundary; it must be "
                "aligned"
            )
    o = device_out(out, (nt, n), np.float32, "mmq out")
    geo = geometry(n, nt)  # (its gates before any launch)
    xr = cupy.empty((nt, run_row_ints(k)), cupy.int32)  # the quantized runs
    qgeo = quantize_geometry(nt, k)
    qfn = _kernel(qt.suffix, QUANTIZE)
    cuda.launch(qfn, qgeo.grid, qgeo.block, (x, np.int32(nt), np.int32(k), xr, cuda.NO_STAMP))
    qrec = LaunchRecord.of(QUANTIZE, qgeo, reads=[x], bytes_written=run_bytes(nt, k), flops=3 * nt * k,
                           path=PATH, math_path=MATH_FLOAT)  # fmt: skip
    ts, qk = block_sizes(qt)
    smem = shared_bytes(qt)
    fn = _kernel(qt.suffix, kernel_name(qt))
    args = (
        raw, xr, o, np.int32(n), np.int32(nt), np.int32(k), np.int32(ts), np.int32(qk),
        cuda.NO_STAMP,
    )  # fmt: skip
    cuda.launch(fn, geo.grid, geo.block, args, shared_mem=smem)
    rec = LaunchRecord.of(kernel_name(qt), geo, bytes_read=int(raw.nbytes) + run_bytes(nt, k), writes=[o],
                          flops=2 * nt * n * k, path=PATH, math_path=MATH_MMQ,
                          shared_bytes=smem)  # fmt: skip
    return o, [qrec, rec]

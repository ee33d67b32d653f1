"""The matrix-vector products of decode's MatMul on the quant path (seed §3.2).

    mmvq_<suffix>_n<nt>(raw, x) -> f32 [nt, n]     block-quantized weights, nt in 1..8
    mmvq_st_<suffix>_n<nt>(raw, x) -> f32 [nt, n]  the same, the weight staged by sm_90's
                                                   bulk-copy engine (large weights of the
                                                   types that declare it: MmvqConfig.staged)
    matvec_<suffix>_n<nt>(raw, x) -> f32 [nt, n]   F32/F16/BF16 weights

``out = x @ W.T`` with ``W`` [n, k] read straight from its GGUF blocks (``raw``): no dequantized
copy of the weight is ever written.

``mmvq`` (as llama.cpp's MMVQ): x is quantized to 8 bits per run of 32 values
(:func:`quantize_q8`: d = amax / 127, q = rint(x 127 / amax)), the weight is read as small integer codes
with an f32 scale (and offset) per group of 16 values (``QuantType.int_parts``; on the GPU
``Codes<T>`` in ``quant_codes.cuh``), and each group's dot product is four DP4A. Every group's
term ``(a dx) s + (b dx) qsum`` is rounded identically by :func:`ref_mmvq` and the kernel, so the
two differ only in the order the terms are summed. The activation quantization is what makes it
differ from the f32 product: :func:`ref_matvec` (the exact weights times the exact x) bounds it.

``matvec`` (float weights): each value decoded to f32 and FMA'd with x, as :func:`ref_matvec`.

GPU layout of both (the grid contract, :func:`geometry`): one warp per weight row (WPR warps when the
matrix has few rows), ``ROWS_PER_BLOCK`` rows per block, grid = ceil(n / rows per block). A row's 8-value chunks are dealt to the lanes
round-robin (mmvq: its work items of 32 or 64 values); ``UNROLL`` per lane are loaded before
their dot products. mmvq's grid is at most about one wave (rows grid-strided), since each block
first quantizes all of x into shared memory (:func:`mmvq_shared_bytes`). ``mmvq_st``
(:func:`staged_geometry`) has each block's weight rows brought into shared memory in tiles,
two in flight, and computes them with mmvq's per-row code: the same bits as mmvq at the same
warps a row. Kernels are generated per type from the quant table
(``MMVQ_KERNELS``/``MMVQ_ST_KERNELS``/``MATVEC_KERNELS(<suffix>, <struct>)``, appended to
matvec.cu), one per token count, and compiled on first use of that type.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tracekit.kernels import cuda, dequant
from tracekit.kernels.checks import KernelInputError, require_array
from tracekit.kernels.launch import Geometry, LaunchRecord, ceil_div, grid_1d
from tracekit.quants import (
    MMVQ_DEFAULT,
    QUANT_TABLE,
    QUANTIZED_TYPES,
    QuantType,
    StagedShape,
    quant_type,
)

FAMILY = "matvec"
#: The most tokens one matvec launch takes (decode and speculative-sized batches); larger
#: batches (a prefill) run quantize_q8 + mmq on the quant path (``kernels/mmq.py``).
MAX_NT = 8
#: Weight rows per thread block (one warp each, or WPR: :func:`warps_per_row`) and 8-value
#: chunks decoded per lane before their FMAs: scripts/bench_matvec.py's sweep picks them.
ROWS_PER_BLOCK = 4
UNROLL = 4
#: mmvq's: items loaded per lane before their dot products (each item's codes stay in
#: registers until used, so more means fewer resident warps)
MMVQ_UNROLL = 1
#: Warps a launch aims to run (about half of an H200's 132 SMs x 64 warp slots): rows fewer than
#: this get several warps each.
TARGET_WARPS = 4096
#: A matvec launch reads, per weight value, its packed bits once; per output, 2 flops per k.
_INT32_MAX = 2**31 - 1
#: The path name a matvec launch records (the node's path in the trace).
PATH = "quant"


def block_sizes(qt: QuantType) -> tuple[int, int]:
    """(bytes, values) of the kernel's block: the quant table's, 8 values for F32/F16/BF16."""
    return (qt.type_size, qt.block_size) if qt.is_quantized else (8 * qt.type_size, 8)


def kernel_name(qt: QuantType, nt: int) -> str:
    return f"{'mmvq' if qt.is_quantized else 'matvec'}_{qt.suffix}_n{nt}"


def qx_kernel_name(qt: QuantType, nt: int) -> str:
    """mmvq's variant that reads x already quantized (by ``quantize_q8_n<nt>``)."""
    return f"mmvq_qx_{qt.suffix}_n{nt}"


def staged_kernel_name(qt: QuantType, nt: int, qx: bool = False) -> str:
    """mmvq's variant whose weight tiles the bulk-copy engine stages in shared memory (``qx``:
    the one that copies x's runs in, quantized by ``quantize_q8_n<nt>``)."""
    return f"mmvq_st_{'qx_' if qx else ''}{qt.suffix}_n{nt}"


def kernel_names() -> frozenset[str]:
    """Every matvec kernel name (each times itself when given a stamp slot: cuda.STAMPED)."""
    nts = range(1, MAX_NT + 1)
    names = {kernel_name(qt, nt) for qt in QUANT_TABLE.values() for nt in nts}
    names |= {qx_kernel_name(qt, nt) for qt in QUANTIZED_TYPES for nt in nts}
    names |= {staged_kernel_name(qt, nt, qx) for qt in QUANTIZED_TYPES for nt in nts
              for qx in (False, True)}  # fmt: skip
    return frozenset(names | {f"quantize_q8_n{nt}" for nt in nts})


cuda.register_stamped(kernel_names())


def warps_per_row(n: int, k: int) -> int:
    """WPR: warps sharing a row, so that about TARGET_WARPS warps run (a power of 2, <= 8, and
    no more lanes than the row has 8-value chunks)."""
    wpr = 1
    while wpr < 8 and n * wpr < TARGET_WARPS and 64 * wpr <= k // 8:
        wpr *= 2
    return wpr


def geometry(
    n: int, k: int, rows_per_block: int = ROWS_PER_BLOCK, wpr: int | None = None
) -> Geometry:
    """block = (32, WPR, rows per block) (at most 8 warps), grid = ceil(n / rows per block)."""
    wpr = warps_per_row(n, k) if wpr is None else wpr
    if wpr not in (1, 2, 4, 8):
        raise ValueError(f"warps per row {wpr} must be 1, 2, 4 or 8")
    rows = max(1, min(rows_per_block, 8 // wpr))
    if not 1 <= rows_per_block <= 8:
        raise ValueError(f"rows per block {rows_per_block} must be in [1, 8] (256 threads)")
    if n < 1:
        raise ValueError(f"row count {n} must be positive")
    return Geometry((ceil_div(n, rows), 1, 1), (32, wpr, rows), 32 * wpr * n)


def check(
    x: Any, raw: Any, qt: QuantType, shape: tuple[int, int], max_nt: int | None = MAX_NT
) -> tuple[int, int, int]:
    """The gates of the reference and the launcher (``max_nt``: the most tokens, None for any:
    mmq's); returns (nt, n, k)."""
    if len(shape) != 2:
        raise KernelInputError(f"matvec weight shape {shape} must be 2-D [n, k]")
    n, k = (int(s) for s in shape)
    dequant.check_raw(raw, qt, (n, k), "matvec weight")
    require_array(x, np.float32, "matvec x", ndim=2)
    nt, kx = (int(s) for s in x.shape)
    if kx != k:
        raise KernelInputError(f"matvec k mismatch: x {tuple(x.shape)} vs weight [{n}, {k}]")
    if nt < 1 or (max_nt is not None and nt > max_nt):
        raise KernelInputError(f"matvec takes 1..{max_nt or 'any'} tokens, got x with {nt} rows")
    if k % 8:
        raise KernelInputError(f"matvec row length k={k} must be a multiple of 8")
    if max(n, k) > _INT32_MAX:
        raise KernelInputError(f"matvec dims n={n}, k={k} exceed the int32 limit")
    return nt, n, k


#: The math path of each kernel (the bound model's peak, ``ceilings.peak_flops_by_path``).
MATH_MMVQ, MATH_FLOAT = "int8_dp4a", "f32_cuda_core"


def _record(
    name: str,
    geo: Geometry | None,
    raw: Any,
    x: Any,
    out: Any,
    math: str,
    bias: Any = None,
    x_bytes: int | None = None,
    **extra: Any,
) -> LaunchRecord:
    """A matvec launch's record; x gives the shape, ``x_bytes`` (default x's) the activation
    bytes read (mmvq_qx reads x's quantized runs: :func:`run_bytes`)."""
    nt, k = (int(s) for s in x.shape)
    n = int(out.shape[1])
    if bias is not None:  # the epilogue's add: one more read stream, one flop an output
        extra["epilogue"] = "bias"
    read = int(raw.nbytes) + (int(x.nbytes) if x_bytes is None else x_bytes)
    return LaunchRecord.of(
        name, geo, reads=(), writes=[out], flops=2 * nt * n * k + (nt * n if bias is not None else 0),
        bytes_read=read + (int(bias.nbytes) if bias is not None else 0), path=PATH,
        math_path=math, **extra,
    )  # fmt: skip


def check_bias(bias: Any, n: int) -> None:
    """A matmul bias is f32 [n] (one value per output row), or None."""
    if bias is None:
        return
    if bias.dtype != np.float32 or tuple(bias.shape) != (n,):
        raise KernelInputError(
            f"matmul bias is {bias.dtype} {tuple(bias.shape)}, expected float32 ({n},): one "
            "value per weight row"
        )


def _with_bias(out: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    # the kernels' epilogue: one f32 add per output, as add_bias_f32 makes it
    return out if bias is None else (out + bias[None, :]).astype(np.float32)


def quantize_q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x f32 [nt, k] (k a multiple of 32) as mmvq quantizes it, bit for bit.

    Returns:
        (q int8 [nt, k], d f32 [nt, k / 32], qsum int32 [nt, k / 16]): per run of 32 values
        d = amax / 127 and q = rint(x * (127 / amax)) (q = 0 where amax = 0; the reciprocal is
        taken once per run, so the kernel multiplies instead of dividing); a run holding a NaN or an
        Inf gets d = NaN and q = 0, so every output it feeds is NaN; qsum = the sums of q over
        each half run.
    """
    nt, k = x.shape
    r = x.reshape(nt, k // 32, 32)
    finite = np.isfinite(r).all(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        amax = np.where(finite, np.abs(r).max(axis=-1), np.float32(0))
        d = (amax / np.float32(127)).astype(np.float32)
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.where((amax > 0)[..., None], np.rint(r * inv[..., None]), np.float32(0))
    q = q.astype(np.int8).reshape(nt, k)
    d = np.where(finite, d, np.float32(np.nan)).astype(np.float32)
    qsum = q.reshape(nt, k // 16, 16).sum(axis=-1, dtype=np.int32)
    return q, d, qsum


def ref_mmvq(
    x: np.ndarray,
    raw: np.ndarray,
    qt: QuantType,
    shape: tuple[int, int],
    *,
    bound: bool = False,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, LaunchRecord] | tuple[np.ndarray, LaunchRecord, np.ndarray]:
    """NumPy reference of ``mmvq_<suffix>`` (1..MAX_NT tokens): :func:`q8_product`, plus
    ``bias`` (f32 [n]) when given, as the kernel's epilogue adds it.

    With ``bound=True`` also returns sum(|term|) per output [nt, n]: the scale against which the
    summation order's rounding is bounded (tests: |gpu - ref| <= 1e-5 of it).

    Raises:
        KernelInputError: a gate failed (see :func:`check`), or the type is not block-quantized.
    """
    qt = quant_type(qt)
    check(x, raw, qt, shape)
    check_bias(bias, int(shape[0]))
    out, mag = q8_product(x, raw, qt, shape, bound=bound)
    out = _with_bias(out, bias)
    rec = _record(f"numpy_mmvq_{qt.suffix}", None, raw, x, out, MATH_MMVQ, bias)
    return (out, rec, mag) if bound else (out, rec)


def q8_product(
    x: np.ndarray, raw: np.ndarray, qt: QuantType, shape: tuple[int, int], *, bound: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """x [nt, k] (any nt) times a block-quantized W [n, k]ᵀ as mmvq and mmq compute it: the same
    group terms, rounded alike, summed.

    Per scale group g of ``qt.scale_group`` values (codes c, factors a, b from
    ``qt.int_parts``), token t: ``s = sum(c q8)`` (exact), term = ``(a dx) s + (b dx) qsum``
    in f32 (b absent: the first product only); the output is the f32 sum of a row's terms (the
    kernels sum them in another order).

    Returns:
        (out [nt, n] f32, sum(|term|) [nt, n] when ``bound`` else None)

    Raises:
        KernelInputError: a gate failed (see :func:`check`, any nt), or the type is not
            block-quantized.
    """
    qt = quant_type(qt)
    nt, n, k = check(x, raw, qt, shape, max_nt=None)
    if not qt.is_quantized:
        raise KernelInputError(f"the q8 product takes block-quantized weights, not {qt.name}")
    blocks = np.ascontiguousarray(raw).reshape(-1, qt.type_size)
    q, d, qsum = quantize_q8(x)
    sg = qt.scale_group
    per = sg // 16  # int_parts' 16-value groups in one scale group
    dx = np.repeat(d, 32 // sg, axis=1)  # per scale group
    groups = k // sg
    qg = q.reshape(nt, groups, sg).astype(np.float32).transpose(1, 0, 2)  # [g, t, j]
    qsf = qsum.reshape(nt, groups, per).sum(axis=2, dtype=np.int32).astype(np.float32)
    out = np.empty((nt, n), np.float32)
    mag = np.empty((nt, n), np.float32) if bound else None
    rows = max(1, (1 << 22) // k)  # ~16 MB of f32 codes per chunk
    bpr = k // qt.block_size
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        parts = qt.int_parts(blocks[r0 * bpr : r1 * bpr])
        cg = parts.codes.reshape(r1 - r0, groups, sg).astype(np.float32).transpose(1, 2, 0)
        a = parts.a.reshape(r1 - r0, groups, per)[:, :, 0]  # equal within a scale group
        b = None if parts.b is None else parts.b.reshape(r1 - r0, groups, per)[:, :, 0]
        tokens = max(1, (1 << 22) // ((r1 - r0) * groups))  # ~16 MB of f32 sums per chunk
        for t0 in range(0, nt, tokens):
            t1 = min(nt, t0 + tokens)
            # s [t, r, g]: integer products and sums < 2^24 in magnitude, exact in f32 in any
            # order (a batched matmul over the groups)
            s = np.matmul(qg[:, t0:t1], cg).transpose(1, 2, 0)
            with np.errstate(invalid="ignore", over="ignore"):
                term = (a[None] * dx[t0:t1, None]) * s
                if b is not None:
                    term += (b[None] * dx[t0:t1, None]) * qsf[t0:t1, None]
            out[t0:t1, r0:r1] = term.sum(axis=2)
            if mag is not None:
                mag[t0:t1, r0:r1] = np.abs(term).sum(axis=2)
    return out, mag


def ref_matvec(
    x: np.ndarray,
    raw: np.ndarray,
    qt: QuantType,
    shape: tuple[int, int],
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, LaunchRecord]:
    """NumPy reference: ``x @ W.T`` in f32, W the exact f32 values gguf-py dequantizes to,
    plus ``bias`` (f32 [n]) when given.

    This is the float weights' kernel's reference, and for a quantized weight the exact product
    mmvq's activation quantization departs from.

    Returns:
        (out [nt, n] float32, record ``numpy_matvec_<suffix>``, path ``quant``)

    Raises:
        KernelInputError: a gate failed (see :func:`check`).
    """
    qt = quant_type(qt)
    check(x, raw, qt, shape)
    check_bias(bias, int(shape[0]))
    w, _ = dequant.ref_dequantize_f32(raw, qt, tuple(int(s) for s in shape))
    out = _with_bias(np.matmul(x, w.T), bias)
    return out, _record(f"numpy_matvec_{qt.suffix}", None, raw, x, out, MATH_FLOAT, bias)


# Per type (its declaration's ``mmvq``, quants.MmvqConfig): whether mmvq takes x quantized by
# its own launch (quantize_q8, then mmvq_qx: two launches per node, full grid) or quantizes it
# in every block's prologue (one launch, a capped grid), the __launch_bounds__ minimum of
# resident blocks per SM (caps its registers) and the fused kernel's grid cap:
# scripts/bench_matvec.py measures them.


#: mmvq: prefetch each row's bytes into L2 with one bulk prefetch (matvec.cu's MMVQ_PREFETCH)
MMVQ_PREFETCH = True


def module_source(
    suffix: str,
    unroll: int,
    min_blocks: int,
    prefetch: bool = MMVQ_PREFETCH,
    rpw: int = 1,
    staged: bool = False,
) -> tuple[str, tuple[str, ...]]:
    """matvec.cu with the kernels of one type (from the quant table) appended, and the nvcc
    options it compiles with (``staged``: its mmvq_st kernels only, ``unroll`` their items in
    flight a lane, ``rpw`` the rows a warp walks together in a tile): what :func:`_module`
    compiles and scripts/mmvq_sass.py disassembles."""
    qt = quant_type(suffix)
    # the type's CUDA decoder (its declaration's ``device``): mmvq reads its Codes<T> view;
    # float types' is a Src* reader
    src = (cuda._HERE / f"{FAMILY}.cu").read_text()
    if staged:
        src += f"\nMMVQ_ST_KERNELS({qt.suffix}, {qt.device})\n"
        opts = (*cuda._OPTIONS, f"-DMMVQ_ST_UNROLL={unroll}", f"-DRUN_INTS={RUN_BYTES // 4}",
                f"-DMMVQ_MAX_STAGES={STAGED_MAX_STAGES}", f"-DMMVQ_ST_RPW={_check_rpw(rpw)}",
                *x_held_option(qt))  # fmt: skip
        return src, opts
    if qt.is_quantized:
        src += f"\nMMVQ_KERNELS({qt.suffix}, {qt.device})\n"
    else:
        src += f"\nMATVEC_KERNELS({qt.suffix}, FloatBlock<{qt.device}>)\n"
    opts = (*cuda._OPTIONS, f"-DMV_UNROLL={unroll}", f"-DMMVQ_MIN_BLOCKS={min_blocks}",
            f"-DRUN_INTS={RUN_BYTES // 4}",
            f"-DMMVQ_PREFETCH={int(prefetch)}", f"-DMMVQ_RPW={rpw}")  # fmt: skip
    return src, opts


def _x_held_set_by_environment() -> int | None:
    """MMVQ_ST_XREG as $TRACEKIT_CUDA_DEFINES sets it (a measurement's A/B), or None."""
    env = [d for d in cuda.EXTRA_DEFINES if d.startswith("-DMMVQ_ST_XREG=")]
    return int(env[-1].split("=")[1]) if env else None


def x_held(qt: QuantType) -> int:
    """Values of x a lane of mmvq_st holds in registers with one token (matvec.cu's
    MMVQ_ST_XREG): as $TRACEKIT_CUDA_DEFINES sets it, else as the type declares it
    (``MmvqConfig.staged_x_held``)."""
    env = _x_held_set_by_environment()
    return qt.mmvq.staged_x_held if env is None else env


def x_held_option(qt: QuantType) -> tuple[str, ...]:
    """:func:`x_held`'s nvcc option for a staged module (none where the environment sets it)."""
    if _x_held_set_by_environment() is not None or not qt.mmvq.staged_x_held:
        return ()
    return (f"-DMMVQ_ST_XREG={qt.mmvq.staged_x_held}",)


@functools.cache
def _module(*args: Any, **kwargs: Any) -> Any:
    """:func:`module_source` (its arguments), compiled once."""
    import cupy

    src, opts = module_source(*args, **kwargs)
    return cupy.RawModule(code=src, options=opts)


def probe_module(source: str) -> Any:
    """matvec.cu with ``source`` appended, compiled (a script's probe kernel that uses its
    StageBarrier, stage_fill and stage_wait: scripts/first_bytes.py, scripts/bulk_floor.py)."""
    import cupy

    src = (cuda._HERE / f"{FAMILY}.cu").read_text() + source
    return cupy.RawModule(code=src, options=(*cuda._OPTIONS, f"-DRUN_INTS={RUN_BYTES // 4}"))


@functools.cache
def _kernel(
    suffix: str,
    nt: int,
    unroll: int,
    min_blocks: int,
    prefetch: bool = MMVQ_PREFETCH,
    rpw: int = 1,
) -> Any:
    fn_name = kernel_name(quant_type(suffix), nt)
    return _module(suffix, unroll, min_blocks, prefetch, rpw).get_function(fn_name)


#: Bytes of one quantized run of 32 activations as mmvq reads it (matvec.cu's RUN_INTS ints):
#: 32 int8 values, d, the two half sums, and both sums again as one int's 16-bit halves.
RUN_BYTES = 48
#: Ints after each group of 8 runs in a token's row (q8_runs.cuh's RUN_GAP: consecutive
#: 256-value blocks' runs start on different shared-memory banks).
RUN_GAP = 4


def run_row_ints(k: int) -> int:
    """One token's quantized runs, in ints (q8_runs.cuh's run_row_ints): k / 32 runs and a gap
    of :data:`RUN_GAP` after each group of 8."""
    runs = k // 32
    return runs * (RUN_BYTES // 4) + -(-runs // 8) * RUN_GAP


def run_bytes(nt: int, k: int) -> int:
    """The bytes of x's quantized runs a kernel writes or reads: the runs, not the gaps."""
    return nt * (k // 32) * RUN_BYTES


def runs_of(xr: np.ndarray, nt: int, k: int) -> np.ndarray:
    """The runs [nt, k / 32, RUN_INTS] of a quantized x as the kernels store it (flat or
    [nt, run_row_ints]: the gaps dropped)."""
    row = np.asarray(xr).reshape(nt, run_row_ints(k))
    r = np.arange(k // 32)
    at = r * (RUN_BYTES // 4) + (r // 8) * RUN_GAP
    return row[:, at[:, None] + np.arange(RUN_BYTES // 4)]


def mmvq_shared_bytes(nt: int, k: int) -> int:
    """mmvq's dynamic shared memory: x quantized, :func:`run_row_ints` ints a token."""
    return nt * run_row_ints(k) * 4


#: mmvq_st (matvec.cu): at most this many tiles in flight a block (a barrier of 8 bytes each).
STAGED_MAX_STAGES = 8
#: mmvq's static shared memory, at most: matvec.cu's ``part[MV_MAX_WARPS][NT]`` floats (NT <=
#: MAX_NT), LaunchStamp's exit counter (stamp.cuh's STAMP_COMPACT=0 knob), aligned, and mmvq_st's stage barriers: the
#: dynamic part may use the opt-in limit less this.
MMVQ_STATIC_SHARED = 8 * MAX_NT * 4 + 16 + 8 * STAGED_MAX_STAGES


@functools.cache
def _device_limits() -> tuple[int, int]:
    """(SM count, shared memory per block left for mmvq's quantized x) of the current device:
    the opt-in limit less :data:`MMVQ_STATIC_SHARED`."""
    import cupy

    attrs = cupy.cuda.Device().attributes
    smem = int(attrs["MaxSharedMemoryPerBlockOptin"]) - MMVQ_STATIC_SHARED
    return int(attrs["MultiProcessorCount"]), smem


#: mmvq: weight rows per block (8 warps: few blocks, so x is quantized few times); the warps
#: per SM its grid fills is per type (a block quantizes all of x before its rows; more blocks
#: per SM repeat that work, fewer leave the loads too few warps): quants.MmvqConfig.
MMVQ_ROWS_PER_BLOCK = 8

#: A type declared ``prequantize`` (x quantized by its own launch) takes that launch pair only
#: for weights of at least this many values; smaller ones run the one fused launch. The pair
#: won at 14336 x 4096 (H200 sweep, 2026-12-01 15:08 UTC: Q8_0 55.4 -> 58.3% of copy), where the
#: per-block prologue it saves is repeated by ~400 blocks; a small decode matvec (SmolLM2's 576 x
#: 576 Q4_1) is a few microseconds, about what the extra launch and its gap in the graph cost.
#: 16M values: 4096 x 4096 and larger. A guess between the one measured size and the small
#: shapes, to be set by ``bench_matvec.py --sweep-small`` (not yet run with it).
PREQUANTIZE_MIN_VALUES = 1 << 24


def prequantizes(qt: QuantType, n: int, k: int, prequantize: bool | None = None) -> bool:
    """Whether mmvq runs as quantize_q8 + mmvq_qx_* (two launches) for an [n, k] weight of
    ``qt``: ``prequantize`` when given, else the type's declaration for large weights only."""
    if prequantize is not None:
        return prequantize
    return qt.mmvq.prequantize and n * k >= PREQUANTIZE_MIN_VALUES


#: mmvq_st (the weight staged by the bulk-copy engine, sm_90+) for weights of at least this
#: many values, where a block's tiles pipeline; smaller ones keep mmvq.
STAGED_MIN_VALUES = 1 << 24


@functools.cache
def _has_bulk_copy() -> bool:
    """Whether the current device has sm_90's bulk-copy engine (mmvq_st's copies)."""
    return cuda.compute_capability() >= 90


#: False: no weight takes mmvq_st unless a launch asks (scripts/decode_speed.py --staged off,
#: an A/B of the declarations); None: the declarations. The launch records name the kernel.
STAGED_OVERRIDE: bool | None = None


def stages_weight(qt: QuantType, n: int, k: int, staged: bool | None = None) -> bool:
    """Whether mmvq runs as mmvq_st for an [n, k] weight of ``qt``: ``staged`` when given, else
    the type's declaration (``MmvqConfig.staged``: where scripts/bench_mmvq_staged.py measured
    it faster) for weights of at least :data:`STAGED_MIN_VALUES` values and rows of at least
    ``MmvqConfig.staged_min_k`` values, on an sm_90+ device."""
    if staged is not None:
        return staged
    if STAGED_OVERRIDE is False:
        return False
    return (
        qt.mmvq.staged
        and n * k >= STAGED_MIN_VALUES
        and k >= qt.mmvq.staged_min_k
        and _has_bulk_copy()
    )


def mmvq_geometry(
    n: int,
    k: int,
    nt: int,
    sms: int,
    rows_per_block: int = MMVQ_ROWS_PER_BLOCK,
    wpr: int | None = None,
    warps_per_sm: int = MMVQ_DEFAULT.warps_per_sm,
    rows_per_warp: int = MMVQ_DEFAULT.rows_per_warp,
) -> tuple[Geometry, int]:
    """matvec's block shape over the row groups (``rows_per_warp`` consecutive rows a warp);
    grid.x capped at ``warps_per_sm`` warps on each of ``sms`` SMs (rows are grid-strided),
    since every block first quantizes x; ``wpr`` None: the :func:`balanced_wpr` of the row
    groups for that cap. Returns (geometry, shared bytes)."""
    groups = ceil_div(n, _check_rpw(rows_per_warp))
    smem = mmvq_shared_bytes(nt, k)

    def blocks_per_sm(threads: int) -> int:
        return max(1, min(32 * warps_per_sm // threads, (228 * 1024) // (smem + 1024)))

    if wpr is None and rows_per_block == MMVQ_ROWS_PER_BLOCK:  # 8 warps a block, any wpr
        wpr = balanced_wpr(groups, k, sms * blocks_per_sm(256) * 8)
    geo = geometry(groups, k, rows_per_block, wpr)
    per_sm = blocks_per_sm(geo.block[0] * geo.block[1] * geo.block[2])
    grid = min(geo.grid[0], sms * per_sm)
    return Geometry((grid, 1, 1), geo.block, geo.work_items), smem


def _check_rpw(rpw: int) -> int:
    if rpw not in (1, 2, 4):
        raise ValueError(f"mmvq rows per warp {rpw} must be 1, 2 or 4")
    return rpw


def balanced_wpr(n: int, k: int, capacity: int) -> int:
    """Warps a row for a grid of ``capacity`` warps (rows grid-strided): the warp with the most
    row shares sets the launch's time, so from :func:`warps_per_row`'s count, more warps a row
    where that evens the last round out: the cost ceil(n w / capacity) / w (in rows a warp)
    falls, e.g. 4096 rows on 3168 warps: 2 rows a warp at w = 1, 1.5 at w = 2. Each lane keeps
    at least one 64-value chunk of its row share (2048 w <= k); ties keep fewer warps."""
    best = warps_per_row(n, k)
    cost = -(-n * best // capacity) / best
    w = 2 * best
    while w <= 8 and 2048 * w <= k:
        c = -(-n * w // capacity) / w
        if c < cost:
            best, cost = w, c
        w *= 2
    return best


def launch_matvec(
    x: Any,
    raw: Any,
    qt: QuantType,
    shape: tuple[int, int],
    out: Any = None,
    *,
    rows_per_block: int | None = None,
    unroll: int | None = None,
    wpr: int | None = None,
    warps_per_sm: int | None = None,
    min_blocks: int | None = None,
    prequantize: bool | None = None,
    prefetch: bool = MMVQ_PREFETCH,
    bias: Any = None,
    rows_per_warp: int | None = None,
    staged: bool | None = None,
    rows_per_tile: int | None = None,
    stages: int | None = None,
    blocks_per_sm: int | None = None,
    staged_shape: StagedShape | None = None,
) -> tuple[Any, list[LaunchRecord]]:
    """``x [nt, k] @ W [n, k]ᵀ`` on the GPU, W packed in ``raw``: ``mmvq_<suffix>_n<nt>`` for a
    block-quantized W (as :func:`ref_mmvq`), ``matvec_<suffix>_n<nt>`` for F32/F16/BF16 (as
    :func:`ref_matvec`).

    Args:
        x: CuPy f32 [nt, k], 1 <= nt <= MAX_NT, contiguous, 16-byte aligned.
        raw: CuPy uint8, the weight's GGUF bytes (``qt.nbytes(shape)`` of them); 16-byte aligned
            for mmvq.
        qt, shape: the weight's type and shape [n, k] (k a multiple of the block size and of 8).
        out: optional CuPy f32 [nt, n] to write into.
        bias: optional CuPy f32 [n], added to every output row in the kernel's epilogue.
        rows_per_block, unroll, wpr, warps_per_sm, min_blocks, prequantize, rows_per_warp: the
            kernel configuration (the bench sweeps them; None: ROWS_PER_BLOCK /
            MMVQ_ROWS_PER_BLOCK, wpr :func:`warps_per_row`, the others the type's ``mmvq``
            (quants.MmvqConfig)).
        staged: run mmvq_st (the weight's tiles staged in shared memory by the bulk-copy
            engine; None: :func:`stages_weight`), with ``rows_per_tile``, ``stages``,
            ``blocks_per_sm``, ``unroll``, ``wpr`` (None: 1, or more where a long row's
            block-row leaves no room for x), ``blocks_per_sm``, ``rows_per_block`` and
            ``rows_per_warp`` (None: as ``staged_shape`` gives them) as
            :func:`staged_geometry` takes them.
        staged_shape: mmvq_st's blocks (None: the type's ``mmvq.staged_shape``).

    Returns:
        (out, launch records with ``extra.path == "quant"``: one, or for mmvq one per group of
        tokens whose quantized x fits in a block's shared memory)

    Raises:
        KernelInputError: a gate failed, host arrays, or a misaligned x or (mmvq) raw.
    """
    from tracekit.kernels.elementwise import device_out, require_device

    qt = quant_type(qt)
    nt, n, k = check(x, raw, qt, shape)
    require_device(x, "matvec x")
    require_device(raw, "matvec weight")
    if x.data.ptr % 16:
        raise KernelInputError(
            f"matvec x starts {x.data.ptr % 16} bytes past a 16-byte boundary; it must be aligned"
        )
    o = device_out(out, (nt, n), np.float32, "matvec out")
    check_bias(bias, n)
    if bias is not None:
        require_device(bias, "matvec bias")
    b = cuda.NULL if bias is None else bias
    ts, qk = block_sizes(qt)
    if not qt.is_quantized:
        geo = geometry(n, k, rows_per_block or ROWS_PER_BLOCK, wpr)
        fast = np.int32(raw.data.ptr % 16 == 0)  # Fast<T> decoders need 16-byte aligned blocks
        args = (
            raw, x, o, np.int32(n), np.int32(k), np.int32(ts), np.int32(qk), fast, b,
            cuda.NO_STAMP,
        )  # fmt: skip
        fn = _kernel(qt.suffix, nt, unroll or UNROLL, qt.mmvq.min_blocks)  # (mmvq's only)
        cuda.launch(fn, geo.grid, geo.block, args)
        return o, [_record(kernel_name(qt, nt), geo, raw, x, o, MATH_FLOAT, bias)]
    if raw.data.ptr % 16:
        raise KernelInputError(
            f"mmvq weight starts {raw.data.ptr % 16} bytes past a 16-byte boundary; it must be "
            "aligned (each type's fields are read at their block's fixed alignment)"
        )
    cfg = qt.mmvq
    min_blocks = cfg.min_blocks if min_blocks is None else min_blocks
    warps_per_sm = cfg.warps_per_sm if warps_per_sm is None else warps_per_sm
    rpw = _check_rpw(cfg.rows_per_warp if rows_per_warp is None else rows_per_warp)
    if stages_weight(qt, n, k, staged):
        return o, _launch_staged(
            x, raw, qt, (n, k), o, bias, rows_per_tile, stages, blocks_per_sm, unroll, wpr,
            rows_per_block, qx=staged_prequantizes(prequantize), rows_per_warp=rows_per_warp,
            blocks=staged_shape,
        )  # fmt: skip
    if prequantizes(qt, n, k, prequantize):
        return o, _launch_qx(
            x, raw, qt, (n, k), o, rows_per_block, unroll, wpr, min_blocks, prefetch, bias, rpw
        )
    sms, smem_max = _device_limits()
    per_launch = max(1, min(nt, smem_max // mmvq_shared_bytes(1, k)))
    if mmvq_shared_bytes(1, k) > smem_max:
        raise KernelInputError(
            f"mmvq row length k={k} needs {mmvq_shared_bytes(1, k)} bytes of shared memory per "
            f"token, over the device's {smem_max}"
        )
    recs = []
    for t0 in range(0, nt, per_launch):
        t1 = min(nt, t0 + per_launch)
        xs, os_ = x[t0:t1], o[t0:t1]
        geo, smem = mmvq_geometry(
            n, k, t1 - t0, sms, rows_per_block or MMVQ_ROWS_PER_BLOCK, wpr, warps_per_sm, rpw
        )
        fn = _kernel(qt.suffix, t1 - t0, unroll or MMVQ_UNROLL, min_blocks, prefetch, rpw)
        cuda.allow_dynamic_shared(fn, smem)
        args = (
            raw, xs, os_, np.int32(n), np.int32(k), np.int32(ts), np.int32(qk), b, cuda.NO_STAMP,
        )  # fmt: skip
        cuda.launch(fn, geo.grid, geo.block, args, shared_mem=smem)
        recs.append(
            _record(kernel_name(qt, t1 - t0), geo, raw, xs, os_, MATH_MMVQ, bias, shared_bytes=smem)
        )
    return o, recs


#: mmvq_st (matvec.cu): its default items in flight a lane, read from shared memory (H200,
#: 2026-12-02, 14336 x 4096: unroll 1 beat 2 and 4 for Q8_0, Q4_K and Q6_K).
STAGED_UNROLL = 1
#: Shared memory an SM has for its blocks (H100/H200: 228 KB, 1 KB of it reserved per block).
_SM_SHARED = 228 * 1024
_BLOCK_RESERVED = 1024


def _per_block_shared(blocks_per_sm: int) -> int:
    """Dynamic shared memory a block may take when ``blocks_per_sm`` share an SM."""
    return _SM_SHARED // blocks_per_sm - _BLOCK_RESERVED - MMVQ_STATIC_SHARED


def mmvq_stage_bytes(span: int) -> int:
    """A stage's bytes for a tile of ``span`` weight bytes: from its first byte rounded down to
    16 to its end rounded up (the bulk copy's 16-byte granules), i.e. up to 30 bytes more."""
    return (span + 30) // 16 * 16


#: mmvq_st's default geometry: tiles of about this many bytes (2 stages of them a block, 2
#: blocks an SM), one warp a row. H200, 2026-12-02 (scripts/bench_mmvq_staged.py): fewer,
#: smaller stages ran faster (Q8_0 14336 x 4096: 2 stages 67.5%, 6 stages 54.1% of copy): the
#: launch's first tiles all arrive together, so the more bytes asked for at once, the later
#: the warps start.
STAGED_TILE_BYTES = 32 * 1024
STAGED_STAGES = 2
#: (A type declares its blocks, rows a warp walks together included: quants.StagedShape.)
STAGED_BLOCKS_PER_SM = StagedShape().blocks_per_sm


def staged_geometry(
    n: int,
    k: int,
    nt: int,
    qt: QuantType,
    sms: int,
    smem_max: int,
    rows_per_tile: int | None = None,
    stages: int | None = None,
    blocks_per_sm: int = STAGED_BLOCKS_PER_SM,
    warps_per_row: int = 1,
    rows_per_block: int | None = None,
    rows_per_warp: int = 1,
) -> tuple[Geometry, int, int, int, int]:
    """mmvq_st's launch: block = (32, W, R) (``warps_per_row`` W, ``rows_per_block`` R; None:
    8 / W, W R <= 8), tiles of ``rows_per_tile`` rows (a multiple of R x ``rows_per_warp``,
    the rows each warp walks together; None: the most that fit :data:`STAGED_TILE_BYTES` and,
    ``stages`` of them, the block's shared memory beside x; at least that step), grid = at
    most ``blocks_per_sm`` blocks on each of ``sms`` SMs (tiles grid-strided), ``stages``
    tiles in flight a block (None: :data:`STAGED_STAGES`). Returns (geometry, dynamic shared
    bytes, stages, stage bytes, rows per tile).

    Raises:
        KernelInputError: the stages and x do not fit a block's shared memory.
    """
    if warps_per_row not in (1, 2, 4, 8):
        raise ValueError(f"mmvq_st warps per row {warps_per_row} must be 1, 2, 4 or 8")
    rb = 8 // warps_per_row if rows_per_block is None else rows_per_block
    if not 1 <= rb * warps_per_row <= 8:
        raise ValueError(
            f"mmvq_st rows per block {rb} at {warps_per_row} warps a row must make 1 to 8 warps"
        )
    step = rb * _check_rpw(rows_per_warp)  # a tile's rows: whole steps of the block's warps
    row_bytes = qt.row_bytes(k)
    xbytes = mmvq_shared_bytes(nt, k)
    budget = min(smem_max, _per_block_shared(blocks_per_sm)) - xbytes
    stages = STAGED_STAGES if stages is None else stages
    if rows_per_tile is None:
        # about STAGED_TILE_BYTES, and no more than the stages and x leave room for (smaller
        # blocks, more of them an SM: Q4_K's 4-warp blocks at 4 an SM on rows of 14336)
        fit = (budget // max(1, stages) - 30) // max(1, row_bytes)
        rows_per_tile = min(STAGED_TILE_BYTES // max(1, row_bytes), fit) // step * step
        rows_per_tile = max(step, min(rows_per_tile, -(-n // step) * step))  # <= the matrix's
    if rows_per_tile < step or rows_per_tile % step:
        raise ValueError(
            f"mmvq_st rows per tile {rows_per_tile} must be a positive multiple of {step} "
            f"(the block's rows, {rb}, times the rows a warp walks together, {rows_per_warp})"
        )
    stage = mmvq_stage_bytes(rows_per_tile * row_bytes)
    most = min(STAGED_MAX_STAGES, budget // stage)
    if not 2 <= stages <= most:
        raise KernelInputError(
            f"mmvq_st: {stages} stages of {stage} bytes ({rows_per_tile} rows of {row_bytes}) "
            f"and x's {xbytes} bytes do not fit the {budget + xbytes} bytes of shared memory a "
            f"block has at {blocks_per_sm} blocks an SM (2 to {STAGED_MAX_STAGES} stages)"
        )
    tiles = ceil_div(n, rows_per_tile)
    geo = Geometry(
        (min(tiles, sms * blocks_per_sm), 1, 1), (32, warps_per_row, rb), 32 * warps_per_row * n
    )
    return geo, xbytes + stages * stage, stages, stage, rows_per_tile


#: mmvq_st with x quantized by its own launch (quantize_q8_n<nt> + mmvq_st_qx_*) unless a
#: launch says (``prequantize``). False: the fused mmvq_st, faster at 14336 x 4096 (H100,
#: 2026-12-07 17:00 UTC, own time, % of copy: Q4_0 73.6 fused against 68.2 for mmvq_st_qx alone
#: and 64.4 with its quantize launch; Q4_K, Q8_0 and Q6_K alike).
STAGED_PREQUANTIZE = False


def staged_prequantizes(prequantize: bool | None = None) -> bool:
    """Whether a staged weight's node runs quantize_q8 + mmvq_st_qx (two launches):
    ``prequantize`` when given, else :data:`STAGED_PREQUANTIZE`."""
    return STAGED_PREQUANTIZE if prequantize is None else prequantize


def staged_blocks(
    qt: QuantType, nt: int, k: int, smem_max: int, wpr: int | None = None,
    rows_per_block: int | None = None, blocks_per_sm: int | None = None,
    rows_per_warp: int | None = None, blocks: StagedShape | None = None,
) -> tuple[int, int, int, int, int]:  # fmt: skip
    """mmvq_st's blocks for ``nt`` tokens of rows of ``k``: (blocks an SM, rows a warp walks
    together, warps a row, rows a block, tokens a launch). Each left None comes from ``blocks``
    (None: the type's ``mmvq.staged_shape``); the warps a row (None) are the fewest of 1, 2, 4,
    8 whose block-row's two stages leave room for one token's x, the rows a block the declared
    warps over them (at least one); a launch takes as many tokens as that room holds. A type's
    declared blocks that would need more than one warp a row (rows longer than those they were
    timed on; ``wpr`` not given) give way to ``StagedShape()``, the blocks timed on such rows."""
    shape = blocks or qt.mmvq.staged_shape
    rpw = shape.rows_per_warp if rows_per_warp is None else rows_per_warp
    bps = shape.blocks_per_sm if blocks_per_sm is None else blocks_per_sm
    row_bytes = qt.row_bytes(k)
    x_bytes = mmvq_shared_bytes(1, k)

    def rows_a_block(w: int) -> int:
        return rows_per_block or max(1, shape.block_warps // w)

    def room(w: int) -> int:  # shared memory left for x next to two stages of a block-row
        rb = rows_a_block(w)
        return min(smem_max, _per_block_shared(bps)) - 2 * mmvq_stage_bytes(rb * rpw * row_bytes)

    fewest = wpr or next((w for w in (1, 2, 4, 8) if room(w) >= x_bytes), None)
    if blocks is None and wpr is None and shape != StagedShape() and fewest != 1:
        # a row too long for the declared blocks at one warp a row (where they were timed):
        # the blocks every type had before declaring its own (timed at 4096 x 14336)
        return staged_blocks(qt, nt, k, smem_max, wpr, rows_per_block, blocks_per_sm,
                             rows_per_warp, StagedShape())  # fmt: skip
    w = fewest or 8
    per_launch = max(1, min(nt, room(w) // max(1, x_bytes)))
    return bps, rpw, w, rows_a_block(w), per_launch


def _launch_staged(
    x: Any, raw: Any, qt: QuantType, shape: tuple[int, int], o: Any, bias: Any,
    rows_per_tile: int | None, stages: int | None, blocks_per_sm: int | None,
    unroll: int | None, wpr: int | None, rows_per_block: int | None = None, qx: bool = False,
    xr: Any = None, rows_per_warp: int | None = None, blocks: StagedShape | None = None,
) -> list[LaunchRecord]:  # fmt: skip
    """mmvq_st_<suffix>_n<nt>, one launch per group of tokens whose x fits next to the stages
    (two of one block-row each); ``qx``: quantize_q8_n<nt> first (all tokens, one launch),
    then mmvq_st_qx_<suffix>_n<nt> per group, each copying its tokens' runs in (``xr``: those
    runs already made, int32 [nt, run_row_ints(k)], and no quantize launch: the benchmark's
    time of the kernel alone). ``blocks`` (None: the type's) gives ``blocks_per_sm``,
    ``rows_per_warp`` and the rows a block (its warps / the warps a row) left None."""
    n, k = shape
    nt = int(x.shape[0])
    sms, smem_max = _device_limits()
    ts, qk = block_sizes(qt)
    b = cuda.NULL if bias is None else bias
    bps, rpw, w, rb, per_launch = staged_blocks(
        qt, nt, k, smem_max, wpr, rows_per_block, blocks_per_sm, rows_per_warp, blocks
    )
    mod = _module(qt.suffix, unroll or STAGED_UNROLL, 0, rpw=rpw, staged=True)
    recs = []
    if qx and xr is None:
        xr, qrec = _launch_quantize(mod, x)
        recs.append(qrec)
    for t0 in range(0, nt, per_launch):
        t1 = min(nt, t0 + per_launch)
        xs, os_ = x[t0:t1], o[t0:t1]
        geo, smem, st, stage, rpt = staged_geometry(
            n, k, t1 - t0, qt, sms, smem_max, rows_per_tile, stages, bps, w, rb, rpw
        )
        name = staged_kernel_name(qt, t1 - t0, qx)
        fn = mod.get_function(name)
        cuda.allow_dynamic_shared(fn, smem)
        args = (raw, xr[t0:t1] if qx else xs, os_, np.int32(n), np.int32(k), np.int32(ts),
                np.int32(qk), b, np.int32(st), np.int32(stage), np.int32(rpt), cuda.NO_STAMP)  # fmt: skip
        cuda.launch(fn, geo.grid, geo.block, args, shared_mem=smem)
        # (qx: the bulk copy reads a token's runs with their gaps, mmvq_shared_bytes)
        recs.append(_record(name, geo, raw, xs, os_, MATH_MMVQ, bias,
                            x_bytes=mmvq_shared_bytes(t1 - t0, k) if qx else None,
                            shared_bytes=smem, stages=st, rows_per_tile=rpt,
                            rows_per_warp=rpw, blocks_per_sm=bps,
                            x_held=x_held(qt) if t1 - t0 == 1 and (unroll or STAGED_UNROLL) == 1
                            else 0))  # fmt: skip
    return recs


def _launch_quantize(mod: Any, x: Any) -> tuple[Any, LaunchRecord]:
    """quantize_q8_n<nt> of ``mod`` (one type's mmvq or mmvq_st module: x's runs in that type's
    order): x [nt, k] -> its runs int32 [nt, run_row_ints(k)], one thread a run; and its record."""
    import cupy

    nt, k = (int(v) for v in x.shape)
    xr = cupy.empty((nt, run_row_ints(k)), cupy.int32)
    qgeo = grid_1d(nt * (k // 32), 256)
    cuda.launch(mod.get_function(f"quantize_q8_n{nt}"), qgeo.grid, qgeo.block,
                (x, np.int32(k), xr, cuda.NO_STAMP))  # fmt: skip
    return xr, LaunchRecord.of(f"quantize_q8_n{nt}", qgeo, reads=[x],
                               bytes_written=run_bytes(nt, k), flops=3 * nt * k, path=PATH,
                               math_path=MATH_FLOAT)  # fmt: skip


def _launch_qx(
    x: Any, raw: Any, qt: QuantType, shape: tuple[int, int], o: Any,
    rows_per_block: int | None, unroll: int | None, wpr: int | None, min_blocks: int,
    prefetch: bool, bias: Any, rpw: int = 1,
) -> list[LaunchRecord]:  # fmt: skip
    """quantize_q8_n<nt> (x -> 8 bits in global memory, one thread per run of 32) then
    mmvq_qx_<suffix>_n<nt> (no prologue, a full grid): the node's two launches."""
    nt, k = (int(v) for v in x.shape)
    n = int(shape[0])
    mod = _module(qt.suffix, unroll or MMVQ_UNROLL, min_blocks, prefetch, rpw)
    xr, qrec = _launch_quantize(mod, x)
    geo = geometry(ceil_div(n, rpw), k, rows_per_block or MMVQ_ROWS_PER_BLOCK, wpr)
    ts, qk = block_sizes(qt)
    fn = mod.get_function(qx_kernel_name(qt, nt))
    b = cuda.NULL if bias is None else bias
    args = (raw, xr, o, np.int32(n), np.int32(k), np.int32(ts), np.int32(qk), b, cuda.NO_STAMP)
    cuda.launch(fn, geo.grid, geo.block, args)
    return [
        qrec,
        _record(qx_kernel_name(qt, nt), geo, raw, x, o, MATH_MMVQ, bias, x_bytes=run_bytes(nt, k)),
    ]


def ref_quantize_record(x: np.ndarray) -> LaunchRecord:
    """The NumPy backend's record of quantize_q8 (its values are :func:`quantize_q8`'s, which
    :func:`ref_mmvq` computes): the same bytes as the GPU launch's."""
    nt, k = (int(v) for v in x.shape)
    written = run_bytes(nt, k)
    return LaunchRecord.of("numpy_quantize_q8", None, reads=[x], bytes_written=written,
                           flops=3 * nt * k, path=PATH, math_path=MATH_FLOAT)  # fmt: skip

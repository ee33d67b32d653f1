"""Dequantize GGUF tensors (seed §3.2): packed blocks -> f16 on the GPU, exact f32 on the CPU.

    dequant_<suffix>_f16(raw) -> f16 [rows, row_len]   every type of the quant table

Layouts, nibble orders and the arithmetic are gguf-py's (``gguf/quants.py``); every product of
an f16 scale with a type's small integer codes is exact in f32, so the results equal
``gguf.quants.dequantize`` bit for bit, and the f16 output is that value rounded once to
nearest even (STYLE.md, "Dequant parity can be exact").

GPU layout (``dequant.cu``). The seed ran one thread per 32-element block, each writing 64 B
of scattered f16: 5.4% of copy bandwidth on an H200. Here a thread block owns a *tile* of
``BLOCK * CHUNKS_PER_THREAD`` 16-byte output chunks (4096 f16 = 8 KB of output): it stages the
tile's packed bytes (2.3 KB for Q4_0 and Q4_K) into shared memory with aligned 16-byte loads,
then each thread decodes 8 consecutive values per chunk and writes them with one 16-byte
store, so a warp writes 512 contiguous bytes per instruction. Tiles are walked by a
grid-stride loop over 64-bit indices, so a grid clamped by :func:`grid_1d` drops no work.
F32/F16/BF16 use a plain 8-elements-per-thread kernel. (That staged design is variant 0/1; the
types run the direct variant, see :data:`VARIANTS`; the warp variant, a candidate for Q3_K's
110-byte, 2-byte aligned blocks, stages per warp and pipelines its loads: :data:`WARP_STEPS`.)

CPU references. Each type's block decoder is its ``decode`` in ``tracekit/quants.py`` (its
declaration); here they are driven. NumPy pays ~1 µs per call and ~5-8 ns per inner loop, more
than the arithmetic of a 16-byte row, so the decoders keep every loop long (see the helpers'
comment in quants.py) and are given a chunk of :data:`CPU_CHUNK_ELEMS` values at a time,
chunks spread over the CPU cores:
f32 output ran 3.2-5.8x the throughput of ``gguf.quants.dequantize`` on the 2-core CI VM
(:func:`cpu_speedup_vs_gguf`; 16 MB tensors, load average 5-6 from other jobs; 0.46-0.92 ns
a value a chunk on one core; BENCHMARKS.md). First writes to a fresh output cost ~0.3 ns a value there (page
faults), a floor both pay. The f16 output adds the rounding, which NumPy's cast does in
scalar code (~2.5-3.7 ns a value in its x86-64 baseline build); :func:`f32_to_f16` does it in
~1.2 ns in per-thread scratch, so f16 runs at ~1.3-3.8x gguf-py's f32 throughput there.

The GPU kernels are instantiated from the declarations (:func:`instantiations`, one line per
type, its variant and chunks from :data:`CONFIG`), not listed in dequant.cu.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType

from tracekit.kernels import cuda
from tracekit.kernels.checks import KernelInputError, require_array, require_contiguous
from tracekit.kernels.cuda import is_device_array
from tracekit.kernels.launch import MAX_GRID_X, Geometry, LaunchRecord, ceil_div, grid_1d
from tracekit.kernels.registry import KernelOp, declare, flops
from tracekit.quants import QUANT_TABLE, QUANTIZED_TYPES, DequantConfig, QuantType, quant_type

FAMILY = "dequant"
#: Threads per block of the F32/F16/BF16 kernels, and of the quant kernels unless CONFIG says.
BLOCK = 128
#: f16 values per thread per chunk: 8 x 2 B = one 16-byte store.
CHUNK_ELEMS = 8
#: Chunks each thread decodes per tile unless CONFIG says (more packed bytes in flight).
CHUNKS_PER_THREAD = 8


#: A type's kernel configuration (variant, block, chunks), declared with the type in quants.py.
KernelConfig = DequantConfig
#: dequant.cu's variants: staged tile + byte-wise decoders; staged tile + word-wise decoders
#: (when raw % 16 == 0); no shared memory, word-wise decoders straight from global memory; each
#: warp stages its own steps of blocks (one coalesced 16-byte load a lane per 512 B, the next
#: step's loads in flight during this one's decode), word-wise where raw % Fast<T>::ALIGN == 0;
#: the warp variant capped at 32 registers (64 warps an SM; blocks of at most 256 threads).
VARIANTS = {0: "stage", 1: "stage_w", 2: "direct", 3: "warp", 4: "warp_occ"}
#: The variants that stage per warp (WARP_STEPS, warp_slice_bytes apply), and the largest block
#: each allows (warp_occ's __launch_bounds__ in dequant.cu).
WARP_VARIANTS = {"warp": 1024, "warp_occ": 256}
#: The warp variant's steps per run: a warp decodes this many consecutive steps of
#: ``32 * chunks`` chunks each (step k + 1's loads issued before step k's decode), then moves a
#: grid's worth of runs on. Its threads do ``chunks * WARP_STEPS`` chunks each (geometry).
#: scripts/sweep_dequant.py overrides it (SWEEP_WARP_STEPS); the build reads it. Measured on the
#: H200 (2026-12-01 17:07 UTC, Q3_K, 4 chunks, 256 threads): 96.0% of copy at 1 step, 88.1% at 4,
#: 86.3% at 16 (more chunks in flight per thread beat the next step's loads in flight).
WARP_STEPS = 1
#: Per-type kernel configurations, read by geometry, shared memory size, the generated
#: instantiations and launch. Built from the declarations (quants.py, where each swept type
#: carries its winner: scripts/sweep_dequant.py on the H200, 2026-11-30, % of copy bandwidth at
#: 256 MB packed; the direct variant won for every type); the sweep script rewrites it in place.
CONFIG: dict[GGMLQuantizationType, KernelConfig] = {t.qtype: t.dequant for t in QUANTIZED_TYPES}
#: Elements the CPU reference decodes per step: large enough that the ~1.5 µs of Python per
#: NumPy call is noise, small enough that the temporaries (1 MB of f32) stay in cache.
CPU_CHUNK_ELEMS = 1 << 18
#: Threads the CPU reference decodes chunks on (NumPy releases the GIL in its loops).
CPU_THREADS = max(1, min(8, os.cpu_count() or 1))


# -- gates (shared with embed.py: both backends reject the same inputs) ------------------------
def check_raw(raw: Any, qt: QuantType, shape: tuple[int, ...], what: str = "raw") -> int:
    """Gate a packed tensor: uint8, C-contiguous, exactly ``qt.nbytes(shape)`` bytes.

    Returns:
        The element count of ``shape``.

    Raises:
        KernelInputError: wrong dtype, strides, byte count, or a row that is not whole blocks.
    """
    require_array(raw, np.uint8, what)
    try:
        need = qt.nbytes(shape)
    except ValueError as e:
        raise KernelInputError(f"{qt.name} tensor of shape {shape}: {e}") from None
    if int(raw.size) != need:
        raise KernelInputError(
            f"{what} has {int(raw.size)} bytes, but a {qt.name} tensor of shape {shape} "
            f"needs exactly {need} bytes"
        )
    return int(np.prod(shape, dtype=np.int64))


def _check_host(a: Any, what: str) -> None:
    if is_device_array(a):
        raise KernelInputError(f"{what} is a CuPy array; the NumPy reference needs a host array")


def _shape(shape: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in shape)


_U = np.uint32
#: Scratch of up to this many values a row is kept per thread for its next call: a fresh page
#: costs ~1.4 µs on its first write on the 2-core CI VM (0.35 ns a value of f32), and the f16
#: path's four chunk-sized temporaries came back fresh from malloc often enough to cost 2-3x.
_WORK_MAX = 1 << 21
_TLS = threading.local()


def _work(n: int, count: int) -> np.ndarray:
    """uint32 [count, n] of scratch (each row contiguous), this thread's own and reused by its
    later calls when ``n`` <= :data:`_WORK_MAX` (4 MB a thread at the default chunk size)."""
    if n > _WORK_MAX:
        return np.empty((count, n), _U)
    w = getattr(_TLS, "work", None)
    if w is None or w.shape[0] < count or w.shape[1] < n:
        size = max(n, 0 if w is None else w.shape[1])
        w = _TLS.work = np.empty((max(count, 0 if w is None else w.shape[0]), size), _U)
    return w[:count, :n]


def f32_to_f16(x: np.ndarray, out: np.ndarray) -> None:
    """Round f32 values to f16, to nearest even, bit-identical to NumPy's cast (NaN payloads
    included; checked on all 2^32 inputs) at ~1.2 ns a value, NumPy's scalar cast ~2.5-3.7 ns.

    Adding C = 1.5 * 2^(e + 13), e the exponent of |x| (clamped to the f16 normal range), puts
    the f16 ulp of |x| at C's last mantissa bit, so the f32 add rounds exactly where f16 must;
    the mantissa bits of the sum minus C's are then the f16 significand, and the exponent field
    follows from e. Overflow saturates to inf. ``x`` and ``out`` are contiguous, of one size.
    Works :data:`CPU_CHUNK_ELEMS` values at a time in reused scratch.
    """
    xf, of = x.reshape(-1), out.reshape(-1).view(np.uint16)
    step = CPU_CHUNK_ELEMS
    for s in range(0, xf.size, step):
        xs = xf[s : s + step]
        _f32_to_f16_chunk(xs, of[s : s + step], _work(xs.size, 3))


def _f32_to_f16_chunk(x: np.ndarray, o16: np.ndarray, work: np.ndarray) -> None:
    # x f32 [n] (left as it was), o16 uint16 [n], work uint32 [>= 3, n]. Every step is one
    # contiguous SIMD ufunc pass (np.clip, not np.minimum with a scalar: 3x faster here)
    u = x.view(_U)
    a, c, h = work[0], work[1], work[2]
    np.bitwise_and(u, _U(0x7FFFFFFF), out=a)  # |x|
    has_nan = bool(a.max(initial=0) > 0x7F800000)
    np.bitwise_and(a, _U(0x7F800000), out=c)  # e << 23, e the biased f32 exponent
    np.clip(c, _U(113 << 23), _U(143 << 23), out=c)  # 113: f16 subnormals share 2^-14's step
    np.add(c, _U((13 << 23) | 0x400000), out=h)  # C
    f = a.view(np.float32)
    with np.errstate(invalid="ignore"):  # a signalling NaN in x is data, not an error
        np.add(f, h.view(np.float32), out=f)  # |x| + C, rounded to nearest even at the f16 ulp
    a -= h
    c >>= _U(13)
    a += c  # the f16 bits of |x|, plus 113 << 10
    np.clip(a, _U(0), _U(0x7C00 + (113 << 10)), out=a)  # overflow -> inf
    np.right_shift(u, _U(16), out=h)
    h &= _U(0x8000)
    a += h  # the sign (an add: the bits are < 0x8000 once 113 << 10 is off)
    np.copyto(o16, a, casting="unsafe")
    o16 -= np.uint16((113 << 10) & 0xFFFF)  # mod 2^16, on the half-size array
    if has_nan:  # NumPy keeps a NaN's top 10 payload bits (and a NaN stays a NaN)
        nan = np.isnan(x)
        nv = ((u[nan] >> _U(13)) & _U(0x3FF)) | _U(0x7C00)
        nv[nv == 0x7C00] |= _U(1)
        nv |= (u[nan] >> _U(16)) & _U(0x8000)
        o16[nan] = nv


_POOL: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    # NumPy releases the GIL inside its loops, so chunks decode in parallel on the CPU cores.
    # One pool per process id: a forked child must not wait on its parent's (absent) threads.
    pid = os.getpid()
    if pid not in _POOL:
        _POOL.clear()
        _POOL[pid] = ThreadPoolExecutor(CPU_THREADS, thread_name_prefix="tracekit-dequant")
    return _POOL[pid]


def decode_into(raw: np.ndarray, qt: QuantType, out: np.ndarray) -> None:
    """Decode gated bytes into a preallocated f32 or f16 array of the same element count.

    Works a chunk of :data:`CPU_CHUNK_ELEMS` at a time, chunks spread over
    :data:`CPU_THREADS` threads; an f16 ``out`` gets the exact f32 value rounded once (to
    nearest even). NaN/Inf scales are data, not errors: no warnings.
    """
    dec = qt.decode
    ts, qk = qt.type_size, qt.block_size
    blocks = raw.reshape(-1, ts)
    o = out.reshape(-1, qk)
    step = max(1, CPU_CHUNK_ELEMS // qk)

    def work(s: int) -> None:
        e = min(len(o), s + step)
        with np.errstate(all="ignore"):
            if out.dtype == np.float32:
                dec(blocks[s:e], o[s:e])
            else:  # decode into this thread's scratch (no fresh pages), then round
                w = _work((e - s) * qk, 4)
                scratch = w[3].view(np.float32).reshape(e - s, qk)
                dec(blocks[s:e], scratch)
                _f32_to_f16_chunk(scratch.reshape(-1), o[s:e].reshape(-1).view(np.uint16), w)

    starts = range(0, len(o), step)
    if CPU_THREADS > 1 and len(starts) > 1:
        # one task per thread, each taking the next chunk from a shared iterator (a range
        # iterator's next() is atomic under the GIL): balanced like a task per chunk, without
        # a future per chunk (on the loaded 2-core VM that hand-off cost 5-15% of Q5_K's time)
        it = iter(starts)

        def drain(_: int) -> None:
            for s in it:
                work(s)

        list(_pool().map(drain, range(min(CPU_THREADS, len(starts)))))
    else:
        for s in starts:
            work(s)


def _ref(raw: Any, qt: Any, shape: Any, dtype: Any) -> tuple[np.ndarray, LaunchRecord]:
    qt, shape = quant_type(qt), _shape(shape)
    _check_host(raw, "raw")
    n = check_raw(raw, qt, shape)
    out = np.empty(shape, dtype)
    decode_into(raw, qt, out)
    name = f"dequant_{qt.suffix}_{np.dtype(dtype).name.replace('float', 'f')}"
    rec = LaunchRecord.of(
        name,
        None,
        bytes_read=raw.nbytes,
        bytes_written=out.nbytes,
        flops=flops("dequantize_f16", n),  # f32 out: the same decode
    )
    return out, rec


def ref_dequantize_f32(
    raw: np.ndarray, qt: QuantType, shape: tuple[int, ...]
) -> tuple[np.ndarray, LaunchRecord]:
    """Dequantize on the CPU to the exact f32 values ``gguf.quants.dequantize`` gives.

    Args:
        raw: the tensor's packed bytes (uint8, C-contiguous, exactly ``qt.nbytes(shape)``).
        qt: its type (a QuantType, ``gguf.GGMLQuantizationType`` or name).
        shape: the tensor shape in NumPy order; the last axis is the row.

    Returns:
        (f32 array of ``shape``, launch record ``dequant_<suffix>_f32``).

    Raises:
        KernelInputError: a gate failed (dtype, contiguity, byte count, row not whole blocks).
    """
    return _ref(raw, qt, shape, np.float32)


def ref_dequantize_f16(
    raw: np.ndarray, qt: QuantType, shape: tuple[int, ...]
) -> tuple[np.ndarray, LaunchRecord]:
    """As :func:`ref_dequantize_f32`, then one f32 -> f16 round to nearest even.

    Returns:
        (f16 array of ``shape``, launch record ``dequant_<suffix>_f16``).
    """
    return _ref(raw, qt, shape, np.float16)


# -- GPU launcher ------------------------------------------------------------------------------
def config(qt: QuantType) -> KernelConfig:
    """The kernel configuration of a quant type (float types: plain 8-per-thread, BLOCK)."""
    return CONFIG.get(qt.qtype, KernelConfig(-1, BLOCK, 1))


def steps(qt: QuantType) -> int:
    """Steps per warp run of a type's kernel: :data:`WARP_STEPS` for the warp variants, else 1."""
    return WARP_STEPS if VARIANTS.get(config(qt).variant) in WARP_VARIANTS else 1


def chunks_per_thread(qt: QuantType) -> int:
    """16-byte output chunks one thread of ``dequant_<suffix>_f16`` decodes (1: float types)."""
    return config(qt).chunks * steps(qt) if qt.is_quantized else 1


def instantiations() -> str:
    """The kernels dequant.cu compiles, one line per type of the quant table, the variant and
    chunks per thread from :data:`CONFIG` (:func:`cuda.source` appends them to dequant.cu)."""
    lines = []
    for t in QUANT_TABLE.values():
        if t.is_quantized:
            c = CONFIG[t.qtype]
            line = f"{t.dequant_kernel}, {t.device}, {c.variant}, {c.chunks}, {steps(t)}"
            occ = "_OCC" if VARIANTS[c.variant] == "warp_occ" else ""
            lines.append(f"DEQUANT_KERNEL{occ}({line})")
        else:
            lines.append(f"FLOAT_DEQUANT_KERNEL({t.dequant_kernel}, {t.device})")
    return "\n".join(lines)


cuda.generate(FAMILY, instantiations)


def _kernel(name: str) -> Any:
    return cuda.kernel(FAMILY, name)


def kernel_name(qt: QuantType) -> str:
    return qt.dequant_kernel


def geometry(qt: QuantType, n_elements: int, max_grid: int = MAX_GRID_X) -> Geometry:
    """The launch geometry of ``dequant_<suffix>_f16`` over ``n_elements`` outputs.

    Quant types: one work item per thread of a tile, i.e. :func:`chunks_per_thread` 8-value
    chunks (``config(qt).chunks``, times :data:`WARP_STEPS` for the warp variants),
    ``config(qt).block`` threads per block; F32/F16/BF16: one 8-value chunk per thread
    (the last one may be partial), BLOCK threads.
    """
    chunks = ceil_div(n_elements, CHUNK_ELEMS)
    cfg = config(qt)
    v = VARIANTS.get(cfg.variant)
    if v in WARP_VARIANTS and (cfg.block % 32 or cfg.block > WARP_VARIANTS[v]):
        raise ValueError(
            f"{qt.name}: the {v} variant needs whole warps, at most {WARP_VARIANTS[v]} threads, "
            f"not block {cfg.block}"
        )
    return grid_1d(ceil_div(chunks, chunks_per_thread(qt)), cfg.block, max_grid)


def tile_smem_bytes(qt: QuantType) -> int:
    """Shared memory of one staged tile: its packed blocks, plus 16 B of alignment head and
    16 B of slack for the 4-byte-word reads past an unaligned 8-byte field."""
    cfg = config(qt)
    tile_blocks = cfg.block * cfg.chunks * CHUNK_ELEMS // qt.block_size
    return tile_blocks * qt.type_size + 32


def warp_slice_bytes(qt: QuantType) -> int:
    """Shared memory of one warp of the warp variant (dequant.cu's WarpSlice<T, CPT>::BYTES, which
    the kernel checks against its launch): a step's ``32 * chunks / (block_size / 8)`` blocks at
    any offset mod 16 (+15 B), 16 B of slack for word reads past a block's end, in 16-byte words."""
    cpb = qt.block_size // CHUNK_ELEMS
    chunks = 32 * config(qt).chunks
    if chunks % cpb:
        raise ValueError(
            f"{qt.name}: a warp step of {chunks} chunks is not whole {cpb}-chunk blocks"
        )
    return 16 * ceil_div(chunks // cpb * qt.type_size + 31, 16)


def launch_smem_bytes(qt: QuantType) -> int:
    """Dynamic shared memory of a launch: a staged tile, a slice per warp, or none (direct)."""
    v = VARIANTS[config(qt).variant]
    if v == "direct":
        return 0
    if v in WARP_VARIANTS:
        return config(qt).block // 32 * warp_slice_bytes(qt)
    return tile_smem_bytes(qt)


def check_out(out: Any, shape: tuple[int, ...], dtype: Any, what: str = "out") -> None:
    """Gate a caller's ``out=``: a CuPy array of ``shape`` and ``dtype``, contiguous, and
    16-byte aligned (the kernels store 16 bytes at a time)."""
    if not is_device_array(out):
        raise KernelInputError(f"{what} must be a CuPy array, not {type(out).__name__}")
    require_array(out, dtype, what)
    if tuple(out.shape) != shape:
        raise KernelInputError(f"{what} has shape {tuple(out.shape)}, expected {shape}")
    if out.data.ptr % 16:
        raise KernelInputError(
            f"{what} starts at an address {out.data.ptr % 16} bytes past a 16-byte boundary; "
            "the kernels need 16-byte aligned outputs"
        )


def to_device(a: Any) -> Any:
    """A CuPy array of ``a`` (NumPy input is copied to the device; CuPy passes through)."""
    import cupy

    if is_device_array(a):
        return a
    require_contiguous(a, "host array")
    return cupy.asarray(a)


def launch_dequantize_f16(
    raw: Any,
    qt: QuantType,
    shape: tuple[int, ...],
    out: Any = None,
    *,
    max_grid: int = MAX_GRID_X,
) -> tuple[Any, LaunchRecord]:
    """Dequantize on the GPU with ``dequant_<suffix>_f16``: bit-equal to
    :func:`ref_dequantize_f16`.

    Args:
        raw: packed bytes (NumPy, copied to the device, or CuPy uint8), gated as in the reference.
        qt: the type; its ``suffix`` names the kernel.
        shape: the tensor shape, NumPy order.
        out: optional CuPy f16 array of ``shape`` (contiguous, 16-byte aligned) to write into.
        max_grid: grid x cap (tests lower it to exercise the grid-stride loop).

    Returns:
        (CuPy f16 array of ``shape``, launch record).

    Raises:
        KernelInputError: a gate failed (see :func:`check_raw`, :func:`check_out`).
    """
    import cupy

    qt, shape = quant_type(qt), _shape(shape)
    n = check_raw(raw, qt, shape)
    if out is None:
        out = cupy.empty(shape, cupy.float16)
    else:
        check_out(out, shape, np.float16)
    raw_d = to_device(raw)
    name = kernel_name(qt)
    geo = geometry(qt, n, max_grid)
    if qt.is_quantized:
        args = (
            raw_d,
            out,
            np.int64(raw_d.size // qt.type_size),
            np.int32(qt.type_size),
            np.int32(qt.block_size),
        )
        cuda.launch(_kernel(name), geo.grid, geo.block, args, launch_smem_bytes(qt))
    else:
        vec = np.int32(raw_d.data.ptr % 16 == 0)  # 16-byte loads only from aligned bytes
        cuda.launch(_kernel(name), geo.grid, geo.block, (raw_d, out, np.int64(n), vec))
    rec = LaunchRecord.of(
        name,
        geo,
        bytes_read=raw_d.nbytes,
        bytes_written=out.nbytes,
        flops=flops("dequantize_f16", n),
    )
    return out, rec


# -- CPU throughput versus gguf-py (read by the bench) ----------------------------------------
def random_blocks(qt: QuantType, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """``n_blocks`` random blocks of ``qt`` whose f16 fields are finite (an all-ones f16
    exponent is moved to 15: the bytes stay random otherwise)."""
    raw = rng.integers(0, 256, (n_blocks, qt.type_size), dtype=np.uint8)
    for off in f16_field_offsets(qt):
        u = raw[:, off : off + 2].view(np.uint16)
        u ^= np.where((u & 0x7C00) == 0x7C00, np.uint16(0x4000), np.uint16(0))
    return raw.reshape(-1)


def f16_field_offsets(qt: QuantType) -> tuple[int, ...]:
    """Byte offsets of a block's f16 fields (for F16, the whole element): the declaration's."""
    return qt.f16_fields


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@functools.cache
def _gguf_dequantize() -> Callable[[np.ndarray, GGMLQuantizationType], np.ndarray]:
    from gguf.quants import dequantize

    return dequantize


def cpu_speedup_vs_gguf(
    qt: QuantType | str,
    n_bytes: int,
    out_dtype: Any = np.float32,
    repeat: int = 5,
    row_len: int = 4096,
) -> float:
    """Throughput of the CPU reference over ``gguf.quants.dequantize`` on this machine.

    Both decode the same random tensor of about ``n_bytes`` packed bytes, shaped as a weight
    matrix of ``row_len``-value rows (gguf-py gets it as ``GGUFReader`` hands tensors over:
    [rows, row bytes]). They are timed alternately ``repeat`` times, so a busy machine slows
    both alike, and the best time of each is kept. ``out_dtype`` picks the reference: f32 (the
    output gguf-py makes too; the CPU backend's ``matmul_weight``) or f16 (its
    ``dequantize_f16``: the same plus the f32 -> f16 rounding).

    Returns:
        gguf-py's time divided by ours (> 1: ours is faster).
    """
    qt = quant_type(qt)
    row_bytes = qt.row_bytes(row_len)
    rows = max(1, int(n_bytes) // row_bytes)
    raw = random_blocks(qt, rows * row_bytes // qt.type_size, np.random.default_rng(0))
    raw = raw.reshape(rows, row_bytes)
    shape = (rows, row_len)
    ref = ref_dequantize_f16 if np.dtype(out_dtype) == np.float16 else ref_dequantize_f32
    deq = _gguf_dequantize()
    t_gguf = t_ours = float("inf")
    with np.errstate(all="ignore"):
        for _ in range(max(1, repeat)):
            t_gguf = min(t_gguf, _seconds(lambda: deq(raw, qt.qtype)))
            t_ours = min(t_ours, _seconds(lambda: ref(raw, qt, shape)))
    return t_gguf / t_ours


# -- the op declaration (tracekit/kernels/registry.py) ----------------------------------------
declare(
    [
        # a multiply and an add/subtract per value; one kernel per type of the quant table
        KernelOp("dequantize_f16", FAMILY, ref_dequantize_f16, launch_dequantize_f16,
                 kernels=tuple(kernel_name(t) for t in QUANT_TABLE.values()), flops=2),
    ]
)  # fmt: skip

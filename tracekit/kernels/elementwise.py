"""Elementwise kernels (seed §2.2, §3.1, §3.4): the residual stream and the small glue ops.

    add_f32(x, y)          z = x + y                       1 flop/element
    add_bias_f32(y, b)     y[t, :] += b  (in place)        1 flop/element
    mul_f32(x, y)          z = x * y                       1 flop/element
    silu_f32(x)            x / (1 + exp(-x))               3 flops/element (exp counted as 1)
    gelu_tanh_f32(x)       0.5 x (1 + tanh(c (x + 0.044715 x^3)))   9 flops/element (tanh as 1)
    scale_f32(x, s)        x * s                           1 flop/element
    softcap_f32(x, cap)    cap * tanh(x / cap)  (gemma2)   3 flops/element (tanh as 1)
    glu_f32(x, act)        act(x[:, :n]) * x[:, n:] for x = [gate | up] [nt, 2n]: act's flops + 1
                           (kernels glu_silu_f32, glu_gelu_tanh_f32)
    slice_cols_f32(x, a, w)  x[:, a:a+w] made contiguous (phi3's fused outputs), 0 flops
    f32_bits_to_i32(x)     the I32-as-f32 id bit patterns reinterpreted as int32, 0 flops
    convert_f32_f16(x)     round to nearest even f16 (__float2half_rn), 0 flops

Every op has a NumPy reference ``ref_<op>`` (the CPU backend, and the oracle for the kernel)
and a launcher ``launch_<op>`` (CuPy arrays, optional ``out=``). Both run the same gates and
return ``(output, LaunchRecord)`` with the same byte counts: each input read once, each output
written once, from the real arrays.

The streaming kernels (add, mul, silu, gelu, scale, bits, glu) move float4s (4 elements; two per
input per thread per iteration) in a grid-stride loop over 64-bit indices, block 256,
grid clamped to a few waves of the device (``BLOCKS_PER_SM``); the ``n % 4`` tail is done by
the first threads after the loop. When any pointer is not 16-byte aligned (a view such as
``x[1:]``) the launcher picks the scalar loop instead, so no alignment is ever assumed.
``glu_f32`` reads a fused [gate | up] matmul output (row stride 2n) and writes [nt, n] (row stride
n), one launch for what the act and mul kernels did in two, bit for bit theirs: the same f32
operations in the same order (the act, then one rounded product). Its float4 path needs
``n % 4 == 0`` besides the alignment (a row's up half starts n floats in).
``convert_f32_f16`` moves 8 elements per thread: two float4 loads (32 B) and one 16-byte store.

``add_bias_f32`` keeps the seed's row-count contract (§3.1): one block row per token,
``grid = (nt, ceil(d / 64))`` from :func:`grid_rows`, 64 threads per block. The kernel is
told the ROW COUNT nt and the row length d, never the element count nt * d (passing the
element count launches nt * d block rows and writes far past the buffer); the bias length
must equal d.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tracekit.kernels import cuda
from tracekit.kernels.checks import (
    KernelInputError,
    require_array,
    require_nonempty,
    require_same_shape,
)
from tracekit.kernels.cuda import NO_STAMP
from tracekit.kernels.launch import Geometry, LaunchRecord, ceil_div, grid_1d, grid_rows
from tracekit.kernels.registry import KERNEL_OPS, KernelOp, declare, flops

FAMILY = "elementwise"
#: Threads per block of the streaming kernels (a multiple of the warp width).
BLOCK = 256
#: Threads per block of add_bias_f32 (one block row per token, seed §3.1; the seed used 64
#: threads of one float each, which measured 20% of copy bandwidth on the H200).
BIAS_BLOCK = 128
#: Grid cap of the streaming kernels, in blocks per SM (a grid-stride loop covers the rest).
#: Measured on the H200 (scripts/sweep_elementwise.py, 2026-11-30): capping at 8-64 blocks
#: per SM cost 2-6% against one uncapped wave of short-lived blocks (add 1.004x torch.add), so
#: the cap is only the grid's x limit.
BLOCKS_PER_SM = 2**31 // 132
#: float4s per input each thread has in flight in add/mul/silu/gelu/scale (UNROLL in
#: elementwise.cu, passed as -DUNROLL; scripts/sweep_elementwise.py measures the choice against
#: torch.add).
STREAM_UNROLL = 2
#: Evict-first loads/stores in the streaming kernels (-DSTREAM_HINTS; swept as above).
STREAM_HINTS = 0
#: f16 values convert_f32_f16 writes per work item: one 16-byte store (-DCONVERT_ELEMS).
CONVERT_ELEMS = 8


def kernel_defines() -> tuple[str, ...]:
    """The geometry constants elementwise.cu's bodies read, from the values above."""
    return (
        f"-DUNROLL={STREAM_UNROLL}",
        f"-DSTREAM_HINTS={STREAM_HINTS}",
        f"-DCONVERT_ELEMS={CONVERT_ELEMS}",
    )


cuda.defines(FAMILY, kernel_defines)


def elems_per_item(name: str) -> int:
    """Elements one work item of the streaming kernel ``name`` covers when vectorized (the
    kernel's loop step: its declaration's ``per_item``, from the same constants as
    :func:`kernel_defines`)."""
    per_item = KERNEL_OPS[name].per_item
    if per_item is None:
        raise ValueError(f"{name} is not a streaming kernel (its declaration has no per_item)")
    return per_item()


def _unrolled() -> int:  # add, mul, silu, gelu, scale, softcap, glu: UNROLL float4s per iteration
    return 4 * STREAM_UNROLL


def _convert_item() -> int:
    return CONVERT_ELEMS


_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_GELU_C = np.float32(0.044715)


# -- gates (shared by the references and the launchers: both backends reject the same inputs) --
def _check_unary(x: Any, what: str) -> None:
    require_array(x, np.float32, what)
    require_nonempty(x, what)


def _check_binary(x: Any, y: Any, op: str) -> None:
    _check_unary(x, f"{op} x")
    _check_unary(y, f"{op} y")
    require_same_shape(x, y, f"{op} x", f"{op} y")


def _check_bias(y: Any, b: Any) -> tuple[int, int]:
    """Returns (nt, d): the row count the grid is built from, and the row length."""
    require_array(y, np.float32, "add_bias y", ndim=2)
    require_array(b, np.float32, "add_bias bias", ndim=1)
    require_nonempty(y, "add_bias y")
    nt, d = (int(s) for s in y.shape)
    if int(b.size) != d:
        raise KernelInputError(
            f"bias length {int(b.size)} is not the row length {d} of y {tuple(y.shape)}"
        )
    return nt, d


def _record(name: str, geometry: Geometry | None, reads: Any, writes: Any, n: int, **extra: Any):
    return LaunchRecord.of(
        name, geometry, reads=reads, writes=writes, flops=flops(name, n), **extra
    )


# -- NumPy references ---------------------------------------------------------------------------
def ref_add_f32(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """z = x + y elementwise (float32, same shape, C-contiguous).

    Raises:
        KernelInputError: wrong dtype, non-contiguous, empty, or shapes differ.
    """
    _check_binary(x, y, "add_f32")
    z = np.add(x, y)
    return z, _record("add_f32", None, (x, y), (z,), z.size)


def ref_add_bias_f32(y: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """y[t, :] += b for every token row t, IN PLACE; returns y.

    Args:
        y: float32 [nt, d], C-contiguous; modified in place.
        b: float32 [d].

    Raises:
        KernelInputError: wrong dtype/rank/contiguity, empty y, or ``b.size != d``.
    """
    nt, d = _check_bias(y, b)
    np.add(y, b, out=y)
    return y, _record("add_bias_f32", None, (y, b), (y,), y.size, rows=nt, cols=d)


def ref_mul_f32(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """z = x * y elementwise (float32, same shape, C-contiguous)."""
    _check_binary(x, y, "mul_f32")
    z = np.multiply(x, y)
    return z, _record("mul_f32", None, (x, y), (z,), z.size)


def _silu(x: np.ndarray) -> np.ndarray:  # ref_silu_f32's and ref_glu_f32's arithmetic
    with np.errstate(over="ignore"):
        return x / (np.float32(1) + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:  # ref_gelu_tanh_f32's and ref_glu_f32's
    with np.errstate(over="ignore", invalid="ignore"):
        inner = _SQRT_2_OVER_PI * (x + _GELU_C * (x * x * x))
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))


def ref_silu_f32(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """silu(x) = x / (1 + exp(-x)) in float32 (exp(-x) overflows to inf for x < -88.7: -> -0)."""
    _check_unary(x, "silu_f32 x")
    z = _silu(x)
    return z, _record("silu_f32", None, (x,), (z,), z.size)


def ref_gelu_tanh_f32(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in float32."""
    _check_unary(x, "gelu_tanh_f32 x")
    z = _gelu_tanh(x)
    return z, _record("gelu_tanh_f32", None, (x,), (z,), z.size)


#: A GLU's activations: the graph's ``ffn_act`` op name (tracekit/model/archs.py FFN_ACTS) ->
#: the arithmetic of its backend op ``<act>_f32``. The kernel is ``glu_<act>_f32``.
GLU_ACTS = {"silu": _silu, "gelu_tanh": _gelu_tanh}


def glu_kernel(act: str) -> str:
    """The kernel of ``glu_f32`` with activation ``act``."""
    return f"glu_{act}_f32"


def _glu_flops(act: str, elements: int) -> int:
    # the act's declared flops and mul's: the op is those two, fused
    return flops(f"{act}_f32", elements) + flops("mul_f32", elements)


def _check_glu(x: Any, act: str) -> tuple[int, int]:
    """Returns (rows, n): x is [rows, 2n], the output [rows, n]."""
    if act not in GLU_ACTS:
        raise KernelInputError(f"glu act {act!r} is not one of {tuple(GLU_ACTS)}")
    require_array(x, np.float32, "glu x", ndim=2)
    require_nonempty(x, "glu x")
    rows, cols = (int(s) for s in x.shape)
    if cols % 2:
        raise KernelInputError(
            f"glu x {tuple(x.shape)} has {cols} columns, not [gate | up] of two equal halves"
        )
    return rows, cols // 2


def ref_glu_f32(x: np.ndarray, act: str) -> tuple[np.ndarray, LaunchRecord]:
    """act(gate) * up for x = [gate | up] [rows, 2n] (a fused gate/up matmul's output): [rows, n].

    Bit for bit ``ref_<act>_f32`` of the gate columns then ``ref_mul_f32`` by the up columns:
    the same arithmetic on the same contiguous halves (a one-row x's halves are views, as the
    slice op's are on decode).

    Raises:
        KernelInputError: act not in :data:`GLU_ACTS`; x not float32, 2-D, C-contiguous,
            non-empty with an even column count.
    """
    rows, n = _check_glu(x, act)
    gate = np.ascontiguousarray(x[:, :n])
    up = np.ascontiguousarray(x[:, n:])
    z = np.multiply(GLU_ACTS[act](gate), up)
    rec = LaunchRecord.of(glu_kernel(act), None, reads=(x,), writes=(z,),
                          flops=_glu_flops(act, z.size), rows=rows, cols=n)  # fmt: skip
    return z, rec


def ref_scale_f32(x: np.ndarray, s: float) -> tuple[np.ndarray, LaunchRecord]:
    """z = x * s, s rounded to float32 first (as the kernel receives it)."""
    _check_unary(x, "scale_f32 x")
    z = np.multiply(x, np.float32(s))
    return z, _record("scale_f32", None, (x,), (z,), z.size)


def _check_softcap(cap: float) -> None:
    if not (np.isfinite(cap) and cap > 0):
        raise KernelInputError(f"softcap cap {cap} must be finite and > 0")


def ref_softcap_f32(x: np.ndarray, cap: float) -> tuple[np.ndarray, LaunchRecord]:
    """z = cap * tanh(x / cap) in float32 (HF gemma2's order), cap rounded to float32 first."""
    _check_unary(x, "softcap_f32 x")
    _check_softcap(cap)
    c = np.float32(cap)
    z = c * np.tanh(x / c)
    return z, _record("softcap_f32", None, (x,), (z,), z.size)


def _check_slice(x: Any, start: int, width: int) -> tuple[int, int]:
    """Returns (rows, cols) of x."""
    require_array(x, np.float32, "slice_cols x", ndim=2)
    require_nonempty(x, "slice_cols x")
    rows, cols = (int(s) for s in x.shape)
    if width < 1 or start < 0 or start + width > cols:
        raise KernelInputError(
            f"slice_cols columns [{start}, {start + width}) are not inside the {cols} columns "
            f"of x {tuple(x.shape)}"
        )
    return rows, cols


def ref_slice_cols_f32(x: np.ndarray, start: int, width: int) -> tuple[np.ndarray, LaunchRecord]:
    """Columns [start, start + width) of x [rows, cols] as a new contiguous [rows, width]."""
    rows, cols = _check_slice(x, int(start), int(width))
    z = np.ascontiguousarray(x[:, start : start + width])
    rec = _record("slice_cols_f32", None, (x,), (z,), z.size, bytes_read=z.nbytes, cols=cols)
    return z, rec


def ref_f32_bits_to_i32(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """The seed's I32-as-f32 token ids: the float32 bit patterns reinterpreted as int32."""
    _check_unary(x, "f32_bits_to_i32 x")
    z = x.view(np.int32).copy()
    return z, _record("f32_bits_to_i32", None, (x,), (z,), z.size)


def ref_convert_f32_f16(x: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """float32 -> float16, round to nearest even (overflow -> inf), as ``__float2half_rn``."""
    _check_unary(x, "convert_f32_f16 x")
    with np.errstate(over="ignore"):
        z = x.astype(np.float16)
    return z, _record("convert_f32_f16", None, (x,), (z,), z.size)


# -- launchers ----------------------------------------------------------------------------------
def require_device(a: Any, what: str) -> None:
    """A launcher's input must be a CuPy array: RawKernel would take a host pointer blindly."""
    if not type(a).__module__.startswith("cupy"):
        raise KernelInputError(
            f"{what} is a {type(a).__module__}.{type(a).__name__}, expected a cupy array"
        )


def device_out(out: Any, shape: tuple[int, ...], dtype: Any, what: str) -> Any:
    """``out`` checked against the shape/dtype the kernel writes, or a fresh device array."""
    import cupy

    if out is None:
        return cupy.empty(shape, dtype=dtype)
    require_device(out, what)
    require_array(out, dtype, what)
    if tuple(out.shape) != tuple(shape):
        raise KernelInputError(f"shape mismatch: {what} {tuple(out.shape)} vs expected {shape}")
    return out


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the current device (cached per process)."""
    import cupy

    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


def _aligned(*arrays: Any, to: int = 16) -> bool:
    return all(int(a.data.ptr) % to == 0 for a in arrays)


def stream_geometry(n: int, per_thread: int, vectorized: bool) -> Geometry:
    """Geometry of a streaming kernel: ``per_thread`` elements per work item when vectorized,
    one otherwise; block 256; grid clamped to ``BLOCKS_PER_SM`` blocks per SM (grid-stride)."""
    items = ceil_div(n, per_thread) if vectorized else n
    return grid_1d(items, BLOCK, max_grid=sm_count() * BLOCKS_PER_SM)


def _launch_stream(
    name: str, ins: tuple[Any, ...], out: Any, out_dtype: Any, scalars: tuple[Any, ...] = ()
) -> tuple[Any, LaunchRecord]:
    from tracekit.kernels.cuda import kernel, launch

    x = ins[0]
    n = int(x.size)
    z = device_out(out, tuple(x.shape), out_dtype, f"{name} out")
    vec = _aligned(*ins, z)
    geo = stream_geometry(n, elems_per_item(name), vec)
    args = (*ins, z, np.int64(n), np.int32(vec), *scalars, NO_STAMP)
    launch(kernel(FAMILY, name), geo.grid, geo.block, args)
    return z, _record(name, geo, ins, (z,), n, vectorized=vec)


def _launch_binary(name: str, x: Any, y: Any, out: Any) -> tuple[Any, LaunchRecord]:
    _check_binary(x, y, name)
    require_device(x, f"{name} x")
    require_device(y, f"{name} y")
    return _launch_stream(name, (x, y), out, np.float32)


def _launch_unary(
    name: str, x: Any, out: Any, out_dtype: Any = np.float32, scalars: tuple[Any, ...] = ()
) -> tuple[Any, LaunchRecord]:
    _check_unary(x, f"{name} x")
    require_device(x, f"{name} x")
    return _launch_stream(name, (x,), out, out_dtype, scalars)


def launch_add_f32(x: Any, y: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """z = x + y on the device (``out`` may be x or y: each element is read before written)."""
    return _launch_binary("add_f32", x, y, out)


def launch_mul_f32(x: Any, y: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """z = x * y on the device."""
    return _launch_binary("mul_f32", x, y, out)


def launch_silu_f32(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """silu(x) on the device (IEEE expf and division: no fast math)."""
    return _launch_unary("silu_f32", x, out)


def launch_gelu_tanh_f32(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """gelu with the tanh approximation on the device."""
    return _launch_unary("gelu_tanh_f32", x, out)


def launch_scale_f32(x: Any, s: float, out: Any = None) -> tuple[Any, LaunchRecord]:
    """z = x * float32(s) on the device."""
    return _launch_unary("scale_f32", x, out, scalars=(np.float32(s),))


def launch_softcap_f32(x: Any, cap: float, out: Any = None) -> tuple[Any, LaunchRecord]:
    """z = cap * tanh(x / cap) on the device (IEEE division and tanhf)."""
    _check_softcap(cap)
    return _launch_unary("softcap_f32", x, out, scalars=(np.float32(cap),))


def launch_glu_f32(x: Any, act: str, out: Any = None) -> tuple[Any, LaunchRecord]:
    """act(gate) * up for x = [gate | up] [rows, 2n] on the device: one ``glu_<act>_f32`` launch
    with the streaming geometry over the rows * n outputs (float4s when n % 4 == 0 and x and
    out are 16-byte aligned, else one element per step of a grid-stride loop).

    Raises:
        KernelInputError: as :func:`ref_glu_f32`; x or out not on the device; out of the wrong
            shape or dtype, or overlapping x (a row of out would overwrite gates not yet read).
    """
    from tracekit.kernels.cuda import kernel, launch

    rows, n = _check_glu(x, act)
    require_device(x, "glu x")
    z = device_out(out, (rows, n), np.float32, "glu out")
    x0, z0 = int(x.data.ptr), int(z.data.ptr)
    if x0 < z0 + z.nbytes and z0 < x0 + x.nbytes:
        raise KernelInputError(
            f"glu out [{z0:#x}, {z0 + z.nbytes:#x}) overlaps x [{x0:#x}, {x0 + x.nbytes:#x})"
        )
    vec = n % 4 == 0 and _aligned(x, z)
    name = glu_kernel(act)
    geo = stream_geometry(rows * n, elems_per_item("glu_f32"), vec)
    args = (x, z, np.int64(rows), np.int64(n), np.int32(vec), NO_STAMP)
    launch(kernel(FAMILY, name), geo.grid, geo.block, args)
    rec = LaunchRecord.of(name, geo, reads=(x,), writes=(z,), flops=_glu_flops(act, z.size),
                          rows=rows, cols=n, vectorized=vec)  # fmt: skip
    return z, rec


def launch_slice_cols_f32(
    x: Any, start: int, width: int, out: Any = None
) -> tuple[Any, LaunchRecord]:
    """x[:, start:start + width] into a contiguous [rows, width] on the device: one thread per
    output element, grid-stride (grid_1d over rows * width, block 256)."""
    from tracekit.kernels.cuda import kernel, launch

    rows, cols = _check_slice(x, int(start), int(width))
    require_device(x, "slice_cols x")
    z = device_out(out, (rows, int(width)), np.float32, "slice_cols out")
    geo = grid_1d(rows * int(width), BLOCK)
    launch(
        kernel(FAMILY, "slice_cols_f32"),
        geo.grid,
        geo.block,
        (x, z, np.int64(rows), np.int32(cols), np.int32(start), np.int32(width), NO_STAMP),
    )
    # bytes read: the slice's elements only (each read once), as the reference counts them
    rec = _record("slice_cols_f32", geo, (x,), (z,), int(z.size), bytes_read=z.nbytes, cols=cols)
    return z, rec


def launch_f32_bits_to_i32(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """Reinterpret float32 bit patterns as int32 on the device (a copy, int32 output)."""
    return _launch_unary("f32_bits_to_i32", x, out, out_dtype=np.int32)


def launch_convert_f32_f16(x: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """float32 -> float16 (``__float2half_rn``) on the device, 8 elements per thread."""
    return _launch_unary("convert_f32_f16", x, out, out_dtype=np.float16)


def bias_geometry(nt: int, d: int, vec: bool) -> Geometry:
    """add_bias_f32's grid: (nt, column tiles) blocks of BIAS_BLOCK threads, a thread per float4
    of a row when ``vec``, else per float (seed §3.1: grid.x is the ROW count)."""
    return grid_rows(nt, d // 4 if vec else d, BIAS_BLOCK)


def launch_add_bias_f32(y: Any, b: Any, out: Any = None) -> tuple[Any, LaunchRecord]:
    """y[t, :] += b on the device, in place (or into ``out`` when given); returns the result.

    Grid contract (seed §3.1): one block row per token, grid = (nt, column tiles); the kernel
    gets the row count nt and the row length d. A thread adds a float4 when d % 4 == 0 and
    the pointers are 16-byte aligned (tiles of BIAS_BLOCK float4s), else one float (tiles of
    BIAS_BLOCK floats).
    """
    from tracekit.kernels.cuda import kernel, launch

    nt, d = _check_bias(y, b)
    require_device(y, "add_bias y")
    require_device(b, "add_bias bias")
    z = y if out is None else device_out(out, (nt, d), np.float32, "add_bias out")
    vec = d % 4 == 0 and _aligned(y, b, z)
    geo = bias_geometry(nt, d, vec)
    launch(
        kernel(FAMILY, "add_bias_f32"),
        geo.grid,
        geo.block,
        (y, b, z, np.int32(d), np.int64(nt), np.int32(vec), NO_STAMP),
    )
    return z, _record("add_bias_f32", geo, (y, b), (z,), int(y.size), rows=nt, cols=d)


def launch_fill_f32(out: Any, value: float = 0.0) -> LaunchRecord:
    """``out[...] = value`` (``fill_f32``, one 16-byte store per thread): the bench's store
    floor, the least device time a kernel that writes ``out`` can take."""
    from tracekit.kernels.cuda import kernel, launch

    require_device(out, "fill out")
    require_array(out, np.float32, "fill out")
    require_nonempty(out, "fill out")
    if out.data.ptr % 16:
        raise KernelInputError(f"fill out starts {out.data.ptr % 16} bytes past a 16-byte boundary")
    geo = grid_1d(max(1, out.size // 4), BLOCK)
    launch(kernel(FAMILY, "fill_f32"), geo.grid, geo.block,
           (out, np.float32(value), np.int64(out.size)))  # fmt: skip
    return LaunchRecord.of("fill_f32", geo, bytes_written=out.nbytes)


def launch_spin(ns: int) -> LaunchRecord:
    """Occupy the GPU for ``ns`` nanoseconds (one thread): timing helpers queue work behind it."""
    from tracekit.kernels.cuda import kernel, launch

    geo = Geometry((1, 1, 1), (1, 1, 1), 1)
    launch(kernel(FAMILY, "spin_kernel"), geo.grid, geo.block, (np.int64(ns),))
    return LaunchRecord.of("spin_kernel", geo)


def launch_stamp(times: Any, i: int) -> None:
    """Write the GPU's global timer (ns) into ``times[i]`` (uint64 device array) when the kernel
    runs: the timestamps between the nodes of a replayed CUDA graph."""
    from tracekit.kernels.cuda import kernel, launch

    require_device(times, "timestamps")
    if times.dtype != np.uint64 or not 0 <= i < times.size:
        raise KernelInputError(f"stamp index {i} outside uint64 timestamps of size {times.size}")
    launch(kernel(FAMILY, "globaltimer_stamp"), (1, 1, 1), (1, 1, 1), (times, np.int32(i)))


#: Words per launch stamp slot: start, end, finished-block counter (stamp.cuh's
#: STAMP_SLOT_WORDS); runner/stamps.py lays a timed pass's buffer out in these slots.
SLOT_WORDS = 2


def launch_empty_stamped(slot_ptr: int) -> LaunchRecord:
    """Launch the empty stamped kernel (one block of 32 threads) writing its start and end into
    the :data:`SLOT_WORDS`-word stamp slot at ``slot_ptr`` (tracekit/runner/stamps.py): the launch floor."""
    from tracekit.kernels.cuda import kernel, launch

    geo = Geometry((1, 1, 1), (32, 1, 1), 0)
    launch(kernel(FAMILY, "empty_stamped"), geo.grid, geo.block, (np.uint64(slot_ptr),))
    return LaunchRecord.of("empty_stamped", geo)


def launch_empty() -> LaunchRecord:
    """Launch an empty kernel (one block of 32 threads): the bench's launch-cost baseline."""
    from tracekit.kernels.cuda import kernel, launch

    geo = Geometry((1, 1, 1), (32, 1, 1), 0)
    launch(kernel(FAMILY, "empty_kernel"), geo.grid, geo.block, ())
    return LaunchRecord.of("empty_kernel", geo)


# -- the op declarations (tracekit/kernels/registry.py); flops per element, transcendentals as 1 --
declare(
    [
        KernelOp("add_f32", FAMILY, ref_add_f32, launch_add_f32, flops=1, per_item=_unrolled),
        KernelOp("add_bias_f32", FAMILY, ref_add_bias_f32, launch_add_bias_f32, flops=1),
        KernelOp("mul_f32", FAMILY, ref_mul_f32, launch_mul_f32, flops=1, per_item=_unrolled),
        # exp, add, divide
        KernelOp("silu_f32", FAMILY, ref_silu_f32, launch_silu_f32, flops=3, per_item=_unrolled),
        # x^3 (2), fma-like (2), scale, tanh, add, 2 muls
        KernelOp(
            "gelu_tanh_f32",
            FAMILY,
            ref_gelu_tanh_f32,
            launch_gelu_tanh_f32,
            flops=9,
            per_item=_unrolled,
        ),  # fmt: skip
        KernelOp(
            "scale_f32", FAMILY, ref_scale_f32, launch_scale_f32, flops=1, per_item=_unrolled
        ),  # fmt: skip
        # divide, tanh, multiply
        KernelOp(
            "softcap_f32", FAMILY, ref_softcap_f32, launch_softcap_f32, flops=3, per_item=_unrolled
        ),  # fmt: skip
        KernelOp("slice_cols_f32", FAMILY, ref_slice_cols_f32, launch_slice_cols_f32, flops=0),
        # the act's flops and the product's, per act (_glu_flops): None here
        KernelOp(
            "glu_f32",
            FAMILY,
            ref_glu_f32,
            launch_glu_f32,
            kernels=tuple(glu_kernel(a) for a in GLU_ACTS),
            per_item=_unrolled,
        ),  # fmt: skip
        KernelOp(
            "f32_bits_to_i32",
            FAMILY,
            ref_f32_bits_to_i32,
            launch_f32_bits_to_i32,
            flops=0,
            per_item=_unrolled,  # the unary streaming kernel's walk
        ),  # fmt: skip
        KernelOp(
            "convert_f32_f16",
            FAMILY,
            ref_convert_f32_f16,
            launch_convert_f32_f16,
            flops=0,
            per_item=_convert_item,
        ),  # fmt: skip
    ]
)

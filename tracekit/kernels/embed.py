"""Embedding gather (seed §3.3): token ids -> f32 rows of a (quantized) table.

    embed_rows_<suffix>(raw, ids) -> f32 [nt, n_embd]   F16, BF16 and every quant type
    gather_rows_f32(x, ids)       -> f32 [nt, n]        plain rows; F32 tables come here too

The values are the dequantized rows, bit-equal to ``gguf.quants.dequantize`` of those rows
(the decoders are dequant.cu's, with f32 out). Token ids are int32 (the seed's I32-as-f32
convention converts with ``f32_bits_to_i32``). Ids on the host are range-checked before any
launch; ids that live on the device are checked by the kernel, which never reads a row that is
not there (it writes NaN for it and sets a device flag), and the launcher reads the flag after
the launch and raises :class:`KernelInputError` naming the bad id: the error always surfaces,
at the cost of one device sync for device ids.

GPU layout: one thread per 8 consecutive values of one token's row, two 16-byte f32 stores;
neighbouring threads write neighbouring 32-byte chunks of the same row (``gather_rows_f32``:
one float4 per thread). Grid from :func:`grid_1d` over ``nt * chunks_per_row`` with a
grid-stride loop over 64-bit indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGMLQuantizationType

from tracekit.kernels import cuda, dequant
from tracekit.kernels.checks import (
    KernelInputError,
    require_array,
    require_ids_in_range,
    require_nonempty,
)
from tracekit.kernels.cuda import is_device_array
from tracekit.kernels.launch import MAX_GRID_X, Geometry, LaunchRecord, ceil_div, grid_1d
from tracekit.kernels.registry import KERNEL_OPS, KernelOp, declare, flops
from tracekit.quants import QUANT_TABLE, QuantType, quant_type

FAMILY = "embed"
#: Threads per block of every embed kernel.
BLOCK = 256
#: Values per thread: 8 for the embed_rows kernels (two float4 stores), 4 for gather_rows_f32.
CHUNK_ELEMS = 8
GATHER_CHUNK_ELEMS = 4


# -- gates (shared by the references and the launchers) ----------------------------------------
def _check_table(raw: Any, qt: QuantType, shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) != 2:
        raise KernelInputError(
            f"embedding table shape {shape} must be 2-D (rows, n_embd), got {len(shape)}-D"
        )
    dequant.check_raw(raw, qt, shape, "embedding table")
    return shape[0], shape[1]


def _check_ids(ids: Any) -> int:
    require_array(ids, np.int32, "token ids", ndim=1)
    require_nonempty(ids, "token ids")
    return int(ids.shape[0])


def _check_rows(x: Any) -> tuple[int, int]:
    require_array(x, np.float32, "gather_rows_f32 x", ndim=2)
    require_nonempty(x, "gather_rows_f32 x")
    return int(x.shape[0]), int(x.shape[1])


def _host(a: Any, what: str) -> None:
    if is_device_array(a):
        raise KernelInputError(f"{what} is a CuPy array; the NumPy reference needs a host array")


# -- NumPy references --------------------------------------------------------------------------
def ref_gather_rows_f32(x: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """``out[t, :] = x[ids[t], :]`` on the CPU.

    Args:
        x: f32 [rows, n], C-contiguous.
        ids: int32 [nt], every id in [0, rows).

    Returns:
        (f32 [nt, n], launch record ``gather_rows_f32``).

    Raises:
        KernelInputError: dtype/contiguity/rank, no ids, or an id out of range (id, position).
    """
    _host(x, "gather_rows_f32 x")
    _host(ids, "token ids")
    rows, n = _check_rows(x)
    _check_ids(ids)
    require_ids_in_range(ids, rows)
    out = np.take(x, ids, axis=0)
    rec = _gather_record(None, ids, out)
    return out, rec


def _gather_record(geo: Any, ids: Any, out: Any) -> LaunchRecord:
    """gather_rows_f32's record: the gathered rows and the ids read, the rows written."""
    return LaunchRecord.of(
        "gather_rows_f32", geo, bytes_read=out.nbytes + ids.nbytes, bytes_written=out.nbytes,
        flops=flops("gather_rows_f32", out.size),
    )  # fmt: skip


def ref_embed_rows(
    raw: np.ndarray,
    qt: QuantType,
    shape: tuple[int, int],
    ids: np.ndarray,
    *,
    ids_checked: bool = False,
) -> tuple[np.ndarray, LaunchRecord]:
    """The f32 embedding rows of ``ids`` out of a packed table, on the CPU.

    Args:
        raw: the table's packed bytes (uint8, C-contiguous, exactly ``qt.nbytes(shape)``).
        qt: its type (QuantType, ``gguf.GGMLQuantizationType`` or name).
        shape: (rows, n_embd); n_embd a multiple of the type's block.
        ids: int32 [nt] token ids, each in [0, rows).
        ids_checked: the caller range-checked the ids already (the launcher then skips the
            device error flag and its sync); host ids are checked here regardless, which
            costs nothing next to the gather.

    Returns:
        (f32 [nt, n_embd] equal to gguf-py's dequantized rows, launch record
        ``embed_rows_<suffix>``; ``gather_rows_f32`` for an F32 table).

    Raises:
        KernelInputError: a gate failed (see :func:`dequant.check_raw`), or an id out of range.
    """
    qt, shape = quant_type(qt), tuple(int(s) for s in shape)
    _host(raw, "embedding table")
    _host(ids, "token ids")
    rows, n_embd = _check_table(raw, qt, shape)
    if qt.qtype == GGMLQuantizationType.F32:
        return ref_gather_rows_f32(raw.view(np.float32).reshape(rows, n_embd), ids)
    nt = _check_ids(ids)
    require_ids_in_range(ids, rows)
    row_bytes = qt.row_bytes(n_embd)
    picked = np.take(raw.reshape(rows, row_bytes), ids, axis=0)  # [nt, row_bytes]
    out = np.empty((nt, n_embd), np.float32)
    dequant.decode_into(picked, qt, out)
    rec = LaunchRecord.of(
        qt.embed_kernel,
        None,
        bytes_read=picked.nbytes + ids.nbytes,
        bytes_written=out.nbytes,
        flops=flops("embed_rows", out.size),
    )
    return out, rec


# -- GPU launchers -----------------------------------------------------------------------------
def instantiations() -> str:
    """The gathers embed.cu compiles, one line per type of the quant table (an F32 table goes
    through ``gather_rows_f32``; :func:`cuda.source` appends them to embed.cu)."""
    lines = []
    for t in QUANT_TABLE.values():
        if t.is_quantized:
            lines.append(f"EMBED_KERNEL({t.embed_kernel}, {t.device})")
        elif t.qtype != GGMLQuantizationType.F32:
            lines.append(f"FLOAT_EMBED_KERNEL({t.embed_kernel}, {t.device})")
    return "\n".join(lines)


cuda.generate(FAMILY, instantiations)


def _kernel(name: str) -> Any:
    return cuda.kernel(FAMILY, name)


def embed_geometry(qt: QuantType, nt: int, n_embd: int, max_grid: int = MAX_GRID_X) -> Geometry:
    """One work item per 8 values of a token's row (the row's last chunk may be partial)."""
    return grid_1d(nt * ceil_div(n_embd, CHUNK_ELEMS), BLOCK, max_grid)


def gather_geometry(nt: int, n: int, max_grid: int = MAX_GRID_X) -> Geometry:
    """One work item per 4 values (one float4) of a token's row."""
    return grid_1d(nt * ceil_div(n, GATHER_CHUNK_ELEMS), BLOCK, max_grid)


def _null_or_flag(needs_check: bool) -> Any:
    """The device error flag for device ids nobody range-checked (read after the launch), else a
    null pointer: host ids, and device ids the caller checked on the host (``ids_checked``),
    were range-checked already, and skipping the flag skips a memset and a sync (~100 µs)."""
    import cupy

    return cupy.zeros(1, cupy.int32) if needs_check else np.uint64(0)


def _raise_if_flagged(err: Any, ids: Any, rows: int) -> None:
    if is_device_array(err) and int(err.get()[0]):
        host = ids.get()
        require_ids_in_range(host, rows)  # raises, naming the first bad id and its position
        raise KernelInputError(f"a token id is out of range (valid: 0 <= id < {rows})")


def launch_gather_rows_f32(
    x: Any, ids: Any, out: Any = None, *, max_grid: int = MAX_GRID_X, ids_checked: bool = False
) -> tuple[Any, LaunchRecord]:
    """``out[t, :] = x[ids[t], :]`` on the GPU (``gather_rows_f32``).

    Args:
        x: CuPy (or NumPy, copied) f32 [rows, n], C-contiguous, 4-byte aligned.
        ids: int32 [nt], NumPy (range-checked here) or CuPy (checked by the kernel).
        out: optional CuPy f32 [nt, n] (contiguous, 16-byte aligned).
        max_grid: grid x cap (tests lower it to exercise the grid-stride loop).
        ids_checked: device ids the caller already range-checked on the host (the model's
            token ids): no error flag and no sync. The kernel still never reads a missing row.

    Returns:
        (CuPy f32 [nt, n], launch record).

    Raises:
        KernelInputError: a gate failed, or an id is out of range (also for device ids: raised
            after the launch, naming the id and its position).
    """
    import cupy

    rows, n = _check_rows(x)
    nt = _check_ids(ids)
    device_ids = is_device_array(ids)
    if not device_ids:
        require_ids_in_range(ids, rows)
    x_d, ids_d = dequant.to_device(x), dequant.to_device(ids)
    if x_d.data.ptr % 4:
        raise KernelInputError(
            f"gather_rows_f32 x starts {x_d.data.ptr % 4} bytes past a 4-byte boundary"
        )
    if out is None:
        out = cupy.empty((nt, n), cupy.float32)
    else:
        dequant.check_out(out, (nt, n), np.float32)
    vec = np.int32(n % GATHER_CHUNK_ELEMS == 0 and x_d.data.ptr % 16 == 0)
    err = _null_or_flag(device_ids and not ids_checked)
    geo = gather_geometry(nt, n, max_grid)
    cuda.launch(
        _kernel("gather_rows_f32"),
        geo.grid,
        geo.block,
        (x_d, ids_d, out, np.int32(rows), np.int32(n), np.int64(nt), vec, err, cuda.NO_STAMP),
    )
    _raise_if_flagged(err, ids_d, rows)
    rec = _gather_record(geo, ids_d, out)
    return out, rec


def launch_embed_rows(
    raw: Any,
    qt: QuantType,
    shape: tuple[int, int],
    ids: Any,
    out: Any = None,
    *,
    max_grid: int = MAX_GRID_X,
    ids_checked: bool = False,
) -> tuple[Any, LaunchRecord]:
    """The f32 embedding rows of ``ids`` on the GPU (``embed_rows_<suffix>``; an F32 table goes
    through ``gather_rows_f32``); bit-equal to :func:`ref_embed_rows`.

    Args:
        raw: the table's packed bytes, NumPy (copied to the device) or CuPy uint8.
        qt: its type; ``qt.suffix`` names the kernel.
        shape: (rows, n_embd).
        ids: int32 [nt], NumPy (range-checked before the launch) or CuPy (checked by the
            kernel: the launcher raises after the launch).
        out: optional CuPy f32 [nt, n_embd] (contiguous, 16-byte aligned).
        max_grid: grid x cap (tests lower it to exercise the grid-stride loop).
        ids_checked: device ids the caller already range-checked on the host: no error flag
            and no sync. The kernel still never reads a row that is not there.

    Returns:
        (CuPy f32 [nt, n_embd], launch record).

    Raises:
        KernelInputError: a gate failed, or an id is out of range (id and position named).
    """
    import cupy

    qt, shape = quant_type(qt), tuple(int(s) for s in shape)
    rows, n_embd = _check_table(raw, qt, shape)
    nt = _check_ids(ids)
    device_ids = is_device_array(ids)
    if not device_ids:
        require_ids_in_range(ids, rows)
    raw_d = dequant.to_device(raw)
    if qt.qtype == GGMLQuantizationType.F32:
        if raw_d.data.ptr % 4:
            raise KernelInputError(
                f"F32 embedding table starts {raw_d.data.ptr % 4} bytes past a 4-byte boundary"
            )
        table = raw_d.view(cupy.float32).reshape(rows, n_embd)
        return launch_gather_rows_f32(table, ids, out, max_grid=max_grid, ids_checked=ids_checked)
    ids_d = dequant.to_device(ids)
    if out is None:
        out = cupy.empty((nt, n_embd), cupy.float32)
    else:
        dequant.check_out(out, (nt, n_embd), np.float32)
    err = _null_or_flag(device_ids and not ids_checked)
    geo = embed_geometry(qt, nt, n_embd, max_grid)
    name = qt.embed_kernel
    head = (raw_d, ids_d, out, np.int32(rows), np.int32(n_embd), np.int64(nt))
    if qt.is_quantized:
        args = (*head, np.int32(qt.type_size), np.int32(qt.block_size), err, cuda.NO_STAMP)
    else:
        vec = np.int32(n_embd % CHUNK_ELEMS == 0 and raw_d.data.ptr % 16 == 0)
        args = (*head, vec, err, cuda.NO_STAMP)
    cuda.launch(_kernel(name), geo.grid, geo.block, args)
    _raise_if_flagged(err, ids_d, rows)
    rec = LaunchRecord.of(
        name,
        geo,
        bytes_read=nt * qt.row_bytes(n_embd) + ids_d.nbytes,
        bytes_written=out.nbytes,
        flops=flops("embed_rows", nt * n_embd),
    )
    return out, rec


# -- the op declarations (tracekit/kernels/registry.py) ---------------------------------------
declare(
    [
        # dequant's decoders, so dequant's flops per value; an F32 table is a plain gather
        KernelOp("embed_rows", FAMILY, ref_embed_rows, launch_embed_rows,
                 kernels=tuple(t.embed_kernel for t in QUANT_TABLE.values()),
                 flops=KERNEL_OPS["dequantize_f16"].flops),
        KernelOp("gather_rows_f32", FAMILY, ref_gather_rows_f32, launch_gather_rows_f32,
                 flops=0),
    ]
)  # fmt: skip

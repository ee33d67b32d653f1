"""Kernel launches with their parameter blocks packed once, issued by ``cuLaunchKernel``.

CuPy's ``Function.__call__`` re-packs a launch's arguments at every call; a replayed decode
step (``runner/replay.py``) and the stamp kernels that time it (``runner/stamps.py``) pack each
launch once (:class:`PackedLaunch`) and issue the packed argument tuples (:func:`issue`).
Scalars must carry a fixed C width (``np.int32``, ``np.uint64``, ...; :func:`c_arg`).

A launch packed with ``pdl=True`` goes through ``cuLaunchKernelEx`` with programmatic stream
serialization (a programmatic dependent launch, sm_90): the kernel may be launched before the
one before it in the stream has ended, and its threads wait in ``griddepcontrol.wait``
(stamp.cuh's LaunchStamp, which every stamped kernel opens with) until that grid has completed
and its writes are visible. Captured into a CUDA graph, the edge is a programmatic one. Only a
kernel that waits so may be launched this way: the caller picks them (cuda.STAMPED).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

_C_TYPES: dict[type, Any] = {
    np.int32: ctypes.c_int32,
    np.int64: ctypes.c_int64,
    np.uint32: ctypes.c_uint32,
    np.uint64: ctypes.c_uint64,
    np.float32: ctypes.c_float,
    np.float64: ctypes.c_double,
}


def c_arg(a: Any) -> Any:
    """One kernel argument as the ctypes value cuLaunchKernel copies from."""
    data = getattr(a, "data", None)
    if data is not None and hasattr(data, "ptr"):  # a CuPy ndarray: its device pointer
        return ctypes.c_void_p(int(data.ptr))
    ctype = _C_TYPES.get(type(a))
    if ctype is None:
        raise TypeError(f"kernel argument {a!r} ({type(a).__name__}) has no fixed C type")
    return ctype(a.item())


#: CUlaunchAttributeID of cuda.h: the launch may overlap the previous kernel in its stream.
LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: an id, 4 bytes of padding, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig (cuLaunchKernelEx's first argument)."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


def pdl_config(grid: tuple[int, int, int], block: tuple[int, int, int], smem: int,
               stream_ptr: int) -> tuple[LaunchConfig, LaunchAttribute]:  # fmt: skip
    """A launch configuration with programmatic stream serialization allowed (the attribute's
    value, an int, is 1); returns the config and the attribute it points to (keep both)."""
    attr = LaunchAttribute(id=LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    ctypes.c_int.from_buffer(attr, LaunchAttribute.value.offset).value = 1
    cfg = LaunchConfig(
        (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem, stream_ptr,
        ctypes.pointer(attr), 1,
    )  # fmt: skip
    return cfg, attr


class PackedLaunch:
    """A kernel launch with its parameter block built once: ``args`` for cuLaunchKernel, or
    with ``pdl`` a call of cuLaunchKernelEx (a programmatic dependent launch)."""

    __slots__ = ("args", "keep")

    def __init__(self, entry: tuple[Any, ...], stream_ptr: int, pdl: bool = False) -> None:
        fn, grid, block, args, smem = entry
        values = [c_arg(a) for a in args]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        grid = (*grid, 1, 1)[:3]
        block = (*block, 1, 1)[:3]
        func = getattr(fn, "kernel", fn)  # a RawKernel's compiled cupy.cuda.Function
        if pdl:
            cfg, attr = pdl_config(grid, block, smem, stream_ptr)
            self.keep = (fn, args, values, params, cfg, attr)
            self.args = functools.partial(
                _launch_ex, ctypes.byref(cfg), ctypes.c_void_p(func.ptr), params, _name(fn)
            )
            return
        self.keep = (fn, args, values, params)  # everything the pointers point into
        self.args = (func.ptr, *grid, *block, smem, stream_ptr, ctypes.addressof(params), 0)


def issue(entries: list[Any]) -> None:
    """Launch packed entries in order: cuLaunchKernel argument tuples, or bound host calls."""
    launch = launch_kernel()
    for e in entries:
        if type(e) is tuple:
            launch(*e)
        else:
            e()


def _name(fn: Any) -> str:
    return str(getattr(fn, "name", fn))


def _launch_ex(cfg: Any, func: Any, params: Any, name: str) -> None:
    rc = _libcuda().cuLaunchKernelEx(cfg, func, params, None)
    if rc != 0:
        msg = ctypes.c_char_p()
        _libcuda().cuGetErrorName(rc, ctypes.byref(msg))
        raise RuntimeError(
            f"cuLaunchKernelEx of {name} (programmatic dependent launch) failed: "
            f"{(msg.value or b'?').decode()} ({rc})"
        )


@functools.cache
def _libcuda() -> Any:
    """The driver library (cuLaunchKernelEx, CUDA 12.0+: CuPy's driver module lacks it)."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p]  # fmt: skip
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorName.restype = ctypes.c_int
    return lib


@functools.cache
def launch_kernel() -> Any:
    """CuPy's cuLaunchKernel binding: ``launch_kernel()(*PackedLaunch.args)`` launches."""
    from cupy_backends.cuda.api import driver

    return driver.launchKernel

"""Kernel launches with their parameter blocks packed once, issued by ``cuLaunchKernel``.

CuPy's ``Function.__call__`` re-packs a launch's arguments at every call; a replayed decode
step (``runner/replay.py``) and the stamp kernels that time it (``runner/stamps.py``) pack each
launch once (:class:`PackedLaunch`) and issue the packed argument tuples (:func:`issue`).
Scalars must carry a fixed C width (``np.int32``, ``np.uint64``, ...; :func:`c_arg`).
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


class PackedLaunch:
    """A kernel launch with its parameter block built once: ``args`` for cuLaunchKernel."""

    __slots__ = ("args", "keep")

    def __init__(self, entry: tuple[Any, ...], stream_ptr: int) -> None:
        fn, grid, block, args, smem = entry
        values = [c_arg(a) for a in args]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        grid = (*grid, 1, 1)[:3]
        block = (*block, 1, 1)[:3]
        self.keep = (fn, args, values, params)  # everything the pointers point into
        func = getattr(fn, "kernel", fn)  # a RawKernel's compiled cupy.cuda.Function
        self.args = (func.ptr, *grid, *block, smem, stream_ptr, ctypes.addressof(params), 0)


def issue(entries: list[Any]) -> None:
    """Launch packed entries in order: cuLaunchKernel argument tuples, or bound host calls."""
    launch = _launch_kernel()
    for e in entries:
        if type(e) is tuple:
            launch(*e)
        else:
            e()


@functools.cache
def _launch_kernel() -> Any:
    from cupy_backends.cuda.api import driver

    return driver.launchKernel

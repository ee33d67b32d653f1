"""Invariant gates, run before any launch: each error names the value and the constraint.

CuPy does no argument validation and ``RawKernel`` ignores strides, so every launcher (and its
NumPy reference, so both backends reject the same inputs) checks here first.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class KernelInputError(ValueError):
    """An input violates a kernel's contract (dtype, contiguity, shape, range)."""


def require_dtype(a: Any, dtype: Any, what: str) -> None:
    if np.dtype(a.dtype) != np.dtype(dtype):
        raise KernelInputError(
            f"{what} has dtype {np.dtype(a.dtype).name}, expected {np.dtype(dtype).name}"
        )


def require_contiguous(a: Any, what: str) -> None:
    if not a.flags.c_contiguous:
        raise KernelInputError(f"{what} with strides {a.strides} is not C-contiguous")


def require_array(a: Any, dtype: Any, what: str, ndim: int | None = None) -> None:
    """dtype + contiguity (+ rank) in one gate."""
    require_dtype(a, dtype, what)
    require_contiguous(a, what)
    if ndim is not None and a.ndim != ndim:
        raise KernelInputError(f"{what} has shape {tuple(a.shape)} ({a.ndim}-D), expected {ndim}-D")


def require_same_shape(a: Any, b: Any, what_a: str, what_b: str) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise KernelInputError(
            f"shape mismatch: {what_a} {tuple(a.shape)} vs {what_b} {tuple(b.shape)}"
        )


def require_nonempty(a: Any, what: str) -> None:
    if a.size == 0:
        raise KernelInputError(f"{what} is empty (shape {tuple(a.shape)})")


def require_ids_in_range(ids: Any, rows: int, what: str = "token id") -> None:
    """Host-side id check (ids that live on the device are checked by the kernel instead)."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        pos = int(np.argmax(ids < 0))
        raise KernelInputError(
            f"{what} {lo} at position {pos} is negative (valid: 0 <= id < {rows})"
        )
    if hi >= rows:
        pos = int(np.argmax(ids >= rows))
        raise KernelInputError(
            f"{what} {hi} at position {pos} is out of range (valid: 0 <= id < {rows})"
        )

"""Rotary position embedding with llama.cpp's (ggml's) semantics.

x is float32 [nt, n_head, head_dim], positions int32 [nt]; the whole head is rotated
(n_dims = head_dim, even). Pair i (0 <= i < head_dim / 2) of token t turns by

    theta_i = freq_scale * (((p * ts) * ts) ... * ts)      (i multiplications, all in f32)
    p = float(positions[t]),  ts = f32(base ** (f32(-2) / f32(head_dim)))

(theta divided by ``freq_factors[i]`` first when given: llama 3's ``rope_freqs.weight``, as
ggml's ``rope_yarn(theta / ff, ...)``), which is ggml's CPU rope cache: ``theta_scale = powf(freq_base, -2.0f/n_dims)``, ``theta``
starts at the position and is multiplied by theta_scale once per pair, and rope_yarn (with
ext_factor 0, attn_factor 1) uses ``freq_scale * theta``. ``ts`` is computed once on the host
(correctly rounded through float64) and passed to the kernel, so the reference and the kernel
build the same angle bit for bit; only cos/sin (1-2 ulp, libm vs CUDA) may differ.

    neox=False ("normal", llama GGUFs): pairs (2i, 2i + 1) — the converter permuted Q/K rows
                                        so that adjacent pairs are HF's (i, i + head_dim/2)
    neox=True  (qwen2, gemma3):         pairs (i, i + head_dim / 2)

    y_a = x_a cos - x_b sin,   y_b = x_a sin + x_b cos   (products rounded, then added: no FMA)

Flops: 6 per pair (4 mul, 2 add) + the i angle multiplies; counted as 3 per element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError, require_array, require_nonempty
from tracekit.kernels.elementwise import device_out, require_device
from tracekit.kernels.launch import Geometry, LaunchRecord, grid_1d
from tracekit.kernels.registry import KernelOp, declare, flops

FAMILY = "rope"
KERNEL = "rope_f32"


def theta_scale(base: float, head_dim: int) -> np.float32:
    """ggml's ``powf(freq_base, -2.0f / n_dims)``, correctly rounded to f32."""
    expo = np.float32(-2.0) / np.float32(head_dim)
    return np.float32(np.float64(np.float32(base)) ** np.float64(expo))


def _check(
    x: Any, positions: Any, base: float, freq_scale: float, freq_factors: Any = None
) -> tuple[int, int, int]:
    """Returns (nt, n_head, head_dim)."""
    require_array(x, np.float32, "rope x", ndim=3)
    require_array(positions, np.int32, "rope positions", ndim=1)
    require_nonempty(x, "rope x")
    nt, n_head, hd = (int(s) for s in x.shape)
    if hd % 2:
        raise KernelInputError(f"rope head_dim {hd} is odd, expected an even number of pairs")
    if int(positions.size) != nt:
        raise KernelInputError(
            f"rope positions length {int(positions.size)} is not the token count {nt} of x "
            f"{tuple(x.shape)}"
        )
    if not (np.isfinite(base) and base > 0):
        raise KernelInputError(f"rope base {base} must be finite and > 0")
    if not np.isfinite(freq_scale):
        raise KernelInputError(f"rope freq_scale {freq_scale} must be finite")
    if freq_factors is not None:
        require_array(freq_factors, np.float32, "rope freq_factors", ndim=1)
        if int(freq_factors.size) != hd // 2:
            raise KernelInputError(
                f"rope freq_factors has {int(freq_factors.size)} entries, expected head_dim / 2 "
                f"= {hd // 2}"
            )
    return nt, n_head, hd


def rope_angles(
    positions: np.ndarray,
    head_dim: int,
    base: float,
    freq_scale: float,
    freq_factors: np.ndarray | None = None,
) -> np.ndarray:
    """theta [nt, head_dim / 2] in f32, built exactly as ggml's CPU rope cache builds it."""
    half = head_dim // 2
    ts = theta_scale(base, head_dim)
    theta = np.empty((positions.size, half), dtype=np.float32)
    cur = positions.astype(np.float32)
    for i in range(half):  # sequential f32 products: the same rounding as the kernel's loop
        theta[:, i] = cur
        cur = cur * ts
    if freq_factors is not None:
        theta = theta / freq_factors.astype(np.float32)
    return np.float32(freq_scale) * theta


def ref_rope_f32(
    x: np.ndarray,
    positions: np.ndarray,
    base: float,
    neox: bool,
    freq_scale: float = 1.0,
    freq_factors: np.ndarray | None = None,
) -> tuple[np.ndarray, LaunchRecord]:
    """Rotate every head of every token by its position (NumPy reference); returns a new array.

    Args:
        x: float32 [nt, n_head, head_dim], head_dim even.
        positions: int32 [nt].
        base: the rope frequency base (10000, 1e6, ...).
        neox: pairs (i, i + head_dim/2) when True, adjacent pairs (2i, 2i+1) when False.
        freq_scale: linear position scaling (1.0: none).
        freq_factors: float32 [head_dim / 2] per-pair divisors of the angle (llama 3), or None.

    Raises:
        KernelInputError: dtype/rank/contiguity, empty x, odd head_dim, positions length != nt,
            freq_factors not [head_dim / 2].
    """
    nt, n_head, hd = _check(x, positions, base, freq_scale, freq_factors)
    theta = rope_angles(positions, hd, base, freq_scale, freq_factors)[:, None, :]
    c, s = np.cos(theta), np.sin(theta)
    if neox:
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    ya, yb = (y[..., : hd // 2], y[..., hd // 2 :]) if neox else (y[..., 0::2], y[..., 1::2])
    np.subtract(a * c, b * s, out=ya)
    np.add(a * s, b * c, out=yb)
    return y, _record(None, x, positions, y, neox, freq_factors)


def _record(
    geometry: Any, x: Any, positions: Any, y: Any, neox: bool, freq_factors: Any = None
) -> LaunchRecord:
    reads = (x, positions) if freq_factors is None else (x, positions, freq_factors)
    return LaunchRecord.of(
        KERNEL,
        geometry,
        reads=reads,
        writes=(y,),
        flops=flops(KERNEL, x.size),
        mode="neox" if neox else "normal",
    )


def geometry(nt: int, n_head: int, head_dim: int) -> Geometry:
    """One thread per rotated pair (grid_1d over nt * n_head * head_dim / 2, grid-stride)."""
    return grid_1d(nt * n_head * (head_dim // 2))


def launch_rope_f32(
    x: Any,
    positions: Any,
    base: float,
    neox: bool,
    freq_scale: float = 1.0,
    freq_factors: Any = None,
    out: Any = None,
) -> tuple[Any, LaunchRecord]:
    """Rope on the device: one thread per rotated pair, grid-stride over a 64-bit pair index."""
    from tracekit.kernels.cuda import NO_STAMP, kernel, launch

    nt, n_head, hd = _check(x, positions, base, freq_scale, freq_factors)
    require_device(x, "rope x")
    require_device(positions, "rope positions")
    if freq_factors is not None:
        require_device(freq_factors, "rope freq_factors")
    y = device_out(out, tuple(x.shape), np.float32, "rope out")
    geo = geometry(nt, n_head, hd)
    launch(
        kernel(FAMILY, KERNEL),
        geo.grid,
        geo.block,
        (
            x,
            positions,
            y,
            np.int64(nt),
            np.int32(n_head),
            np.int32(hd),
            theta_scale(base, hd),
            np.float32(freq_scale),
            np.int32(bool(neox)),
            x if freq_factors is None else freq_factors,  # never read when has_factors is 0
            np.int32(freq_factors is not None),
            NO_STAMP,
        ),
    )
    return y, _record(geo, x, positions, y, neox, freq_factors)


# -- the op declaration (tracekit/kernels/registry.py) ----------------------------------------
# 3 flops per element: see the module doc
declare([KernelOp(KERNEL, FAMILY, ref_rope_f32, launch_rope_f32, flops=3)])

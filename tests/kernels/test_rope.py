"""CPU tests of rope_f32: the reference vs float64 formulas, ggml's angle, gates, geometry."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels import rope
from tracekit.kernels.checks import KernelInputError

RNG = np.random.default_rng(3)


def _f64_rope(x: np.ndarray, pos: np.ndarray, base: float, neox: bool, fs: float) -> np.ndarray:
    nt, nh, hd = x.shape
    half = hd // 2
    theta = pos[:, None].astype(np.float64) * fs * base ** (-2.0 * np.arange(half) / hd)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x64 = x.astype(np.float64)
    y = np.empty_like(x64)
    if neox:
        a, b = x64[..., :half], x64[..., half:]
        y[..., :half], y[..., half:] = a * c - b * s, a * s + b * c
    else:
        a, b = x64[..., 0::2], x64[..., 1::2]
        y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    return y


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize(
    ("nt", "nh", "hd", "base", "fs"),
    [
        (1, 1, 2, 10000.0, 1.0),
        (7, 3, 64, 10000.0, 1.0),
        (5, 2, 128, 1e6, 1.0),
        (4, 4, 256, 10000.0, 0.25),
    ],
)
def test_rope_against_float64(
    nt: int, nh: int, hd: int, base: float, fs: float, neox: bool
) -> None:
    x = RNG.standard_normal((nt, nh, hd)).astype(np.float32)
    pos = RNG.integers(0, 300, size=nt).astype(np.int32)
    y, rec = rope.ref_rope_f32(x, pos, base, neox, fs)
    # ggml's f32 angle carries i roundings for pair i: an absolute error up to about
    # p * max_i(i * ts^i) * 2^-24 rad (~2 p * 6e-8 for base 1e6), times |x| (<~4 here); plus
    # f32 cos/sin/products (~1e-6). Hence atol = 2e-5 + 1e-6 * max position.
    atol = 2e-5 + 1e-6 * int(pos.max())
    np.testing.assert_allclose(y, _f64_rope(x, pos, base, neox, fs), rtol=0, atol=atol)
    assert rec.kernel == "rope_f32" and rec.extra == {"mode": "neox" if neox else "normal"}
    assert rec.bytes_read == x.nbytes + pos.nbytes and rec.bytes_written == y.nbytes
    assert y is not x


def test_rope_position_zero_is_identity() -> None:
    x = RNG.standard_normal((3, 2, 16)).astype(np.float32)
    for neox in (False, True):
        y, _ = rope.ref_rope_f32(x, np.zeros(3, np.int32), 10000.0, neox)
        np.testing.assert_array_equal(y, x)


def test_normal_mode_is_neox_on_permuted_rows() -> None:
    # llama GGUFs: the converter interleaves each head's halves, so normal (adjacent-pair) rope on
    # the permuted rows is exactly neox rope on HF's rows, permuted the same way.
    nt, nh, hd = 6, 4, 64
    x = RNG.standard_normal((nt, nh, hd)).astype(np.float32)
    pos = np.arange(10, 10 + nt, dtype=np.int32)
    perm = np.stack([np.arange(hd // 2), np.arange(hd // 2) + hd // 2], axis=1).ravel()
    neox, _ = rope.ref_rope_f32(x, pos, 10000.0, True)
    normal, _ = rope.ref_rope_f32(np.ascontiguousarray(x[..., perm]), pos, 10000.0, False)
    np.testing.assert_array_equal(normal, neox[..., perm])


def test_angles_follow_ggml_iteration() -> None:
    # ggml_rope_cache_init: theta = p; for each pair: use freq_scale * theta; theta *= ts (f32).
    hd, base, fs = 128, 500000.0, 0.5
    ts = np.float32(np.float32(base) ** (np.float32(-2.0) / np.float32(hd)))
    assert rope.theta_scale(base, hd) == ts
    pos = np.int32([0, 1, 77, 4095, 131071])
    theta = rope.rope_angles(pos, hd, base, fs)
    for t, p in enumerate(pos.tolist()):
        cur = np.float32(p)
        for i in range(hd // 2):
            assert theta[t, i] == np.float32(fs) * cur, (t, i)
            cur = np.float32(cur * ts)


def test_rope_preserves_pair_norms() -> None:
    x = RNG.standard_normal((9, 2, 32)).astype(np.float32)
    y, _ = rope.ref_rope_f32(x, np.arange(9, dtype=np.int32) * 1000, 10000.0, True)
    n = lambda a: np.hypot(a[..., :16].astype(np.float64), a[..., 16:])  # noqa: E731
    np.testing.assert_allclose(n(y), n(x), rtol=1e-6)


def test_rope_gates() -> None:
    x = RNG.standard_normal((4, 2, 8)).astype(np.float32)
    pos = np.arange(4, dtype=np.int32)
    with pytest.raises(KernelInputError, match=r"head_dim 7 is odd"):
        rope.ref_rope_f32(x[..., :7].copy(), pos, 1e4, True)
    with pytest.raises(KernelInputError, match=r"positions length 3 is not the token count 4"):
        rope.ref_rope_f32(x, pos[:3], 1e4, True)
    with pytest.raises(KernelInputError, match=r"positions has dtype int64, expected int32"):
        rope.ref_rope_f32(x, pos.astype(np.int64), 1e4, True)
    with pytest.raises(KernelInputError, match=r"expected 3-D"):
        rope.ref_rope_f32(x.reshape(4, 16), pos, 1e4, True)
    with pytest.raises(KernelInputError, match=r"not C-contiguous"):
        rope.ref_rope_f32(x[:, :, ::-1], pos, 1e4, True)
    with pytest.raises(KernelInputError, match=r"is empty"):
        rope.ref_rope_f32(x[:0], pos[:0], 1e4, True)
    with pytest.raises(KernelInputError, match=r"base 0.0 must be finite and > 0"):
        rope.ref_rope_f32(x, pos, 0.0, True)
    with pytest.raises(KernelInputError, match=r"expected a cupy array"):
        rope.launch_rope_f32(x, pos, 1e4, True)


def test_rope_geometry_one_thread_per_pair() -> None:
    geo = rope.geometry(30, 14, 64)
    assert geo.work_items == 30 * 14 * 32 and geo.grid == (53, 1, 1) and geo.block == (256, 1, 1)

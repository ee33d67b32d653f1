"""The kernels the newer architectures added: softcap (gemma2), slice_cols (phi3), rope with
per-pair frequency factors (llama 3). NumPy references here; GPU parity in
test_arch_kernels_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels import elementwise as ew
from tracekit.kernels import rope
from tracekit.kernels.checks import KernelInputError

RNG = np.random.default_rng(14)


def test_softcap_is_cap_tanh_x_over_cap_in_f32() -> None:
    x = (RNG.standard_normal(1000) * 40).astype(np.float32)
    y, rec = ew.ref_softcap_f32(x, 30.0)
    want = (30.0 * np.tanh(x.astype(np.float64) / 30.0)).astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=0, atol=8e-6)  # a few f32 ulp of 30
    assert y.dtype == np.float32 and np.abs(y).max() <= 30.0 and np.abs(x).max() > 60
    assert rec.flops == 3 * x.size and rec.bytes_read == rec.bytes_written == x.nbytes


@pytest.mark.parametrize("cap", [0.0, -1.0, float("inf"), float("nan")])
def test_softcap_refuses_a_cap_that_is_not_positive_and_finite(cap: float) -> None:
    with pytest.raises(KernelInputError, match=r"softcap cap .* must be finite and > 0"):
        ew.ref_softcap_f32(np.ones(4, np.float32), cap)


def test_slice_cols_copies_the_columns_contiguously() -> None:
    x = RNG.standard_normal((7, 128)).astype(np.float32)
    y, rec = ew.ref_slice_cols_f32(x, 64, 32)
    assert y.flags.c_contiguous and y.shape == (7, 32)
    np.testing.assert_array_equal(y, x[:, 64:96])
    assert rec.bytes_read == rec.bytes_written == y.nbytes and rec.flops == 0


@pytest.mark.parametrize(("start", "width"), [(100, 29), (-1, 4), (0, 0), (0, 129)])
def test_slice_cols_refuses_columns_outside_x(start: int, width: int) -> None:
    with pytest.raises(KernelInputError, match=r"slice_cols columns .* not inside the 128"):
        ew.ref_slice_cols_f32(np.zeros((2, 128), np.float32), start, width)


def test_rope_freq_factors_divide_each_pairs_angle() -> None:
    x = RNG.standard_normal((5, 3, 16)).astype(np.float32)
    pos = np.arange(5, dtype=np.int32) * 7
    ff = np.array([1, 1.5, 8, 8, 8, 8, 8, 8], np.float32)
    y, rec = rope.ref_rope_f32(x, pos, 10000.0, False, 1.0, ff)
    theta = rope.rope_angles(pos, 16, 10000.0, 1.0)  # without factors
    np.testing.assert_array_equal(rope.rope_angles(pos, 16, 10000.0, 1.0, ff), theta / ff)
    c, s = np.cos(theta / ff)[:, None, :], np.sin(theta / ff)[:, None, :]
    want = np.empty_like(x)
    want[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    want[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert rec.bytes_read == x.nbytes + pos.nbytes + ff.nbytes
    # factors of 1 are no factors, bit for bit
    plain, _ = rope.ref_rope_f32(x, pos, 10000.0, True)
    ones, _ = rope.ref_rope_f32(x, pos, 10000.0, True, 1.0, np.ones(8, np.float32))
    np.testing.assert_array_equal(plain, ones)


def test_rope_freq_factors_must_be_one_per_pair() -> None:
    x = np.zeros((2, 1, 16), np.float32)
    with pytest.raises(KernelInputError, match=r"freq_factors has 16 entries, expected .* = 8"):
        rope.ref_rope_f32(x, np.zeros(2, np.int32), 1e4, True, 1.0, np.ones(16, np.float32))

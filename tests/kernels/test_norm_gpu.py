"""GPU tests of add_rms_norm_f32 (H200 only): bit for bit the pair add_f32 then rms_norm_f32 on
the device, and the NumPy reference's sum exactly, its norm within rms_norm's tolerance.

Run on a GPU host:  python -m pytest -m gpu tests/kernels/test_norm_gpu.py
Every output is poisoned (NaN) before the launch, so an element the kernel never wrote fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.kernels.test_norm import ADD_NORM_D
from tracekit.kernels import elementwise as ew
from tracekit.kernels import norm
from tracekit.kernels.checks import KernelInputError

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(2026)


def _cp() -> Any:
    import cupy  # inside the tests: this module must import (and skip) where cupy is absent

    return cupy


def _bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(_cp().asnumpy(x)).view(np.uint32)


@pytest.mark.parametrize("with_w", [True, False])
@pytest.mark.parametrize("d", ADD_NORM_D)
def test_add_rms_norm_is_the_pair_on_the_device(d: int, with_w: bool) -> None:
    cupy = _cp()
    for nt in range(1, 10):
        a = (RNG.standard_normal((nt, d)) * 3).astype(np.float32)
        b = (RNG.standard_normal((nt, d)) * 0.5).astype(np.float32)
        w = RNG.standard_normal(d).astype(np.float32) if with_w else None
        da, db = cupy.asarray(a), cupy.asarray(b)
        dw = cupy.asarray(w) if with_w else None
        out = cupy.full((2, nt, d), np.nan, np.float32)
        got, rec = norm.launch_add_rms_norm_f32(da, db, dw, 1e-6, out=out)
        assert got is out and rec.kernel == "add_rms_norm_f32"
        assert (rec.grid, rec.block) == (norm.geometry(nt, d).grid, norm.geometry(nt, d).block)
        assert rec.bytes_written == 8 * nt * d and rec.flops == (5 if with_w else 4) * nt * d
        # the pair: add_f32, then rms_norm_f32 of its sum (poisoned outputs too)
        s, _ = ew.launch_add_f32(da, db, out=cupy.full((nt, d), np.nan, np.float32))
        y, _ = norm.launch_rms_norm_f32(s, dw, 1e-6, out=cupy.full((nt, d), np.nan, np.float32))
        np.testing.assert_array_equal(_bits(got[0]), _bits(s), err_msg=f"sum, nt {nt} d {d}")
        np.testing.assert_array_equal(_bits(got[1]), _bits(y), err_msg=f"norm, nt {nt} d {d}")
        want, _ = norm.ref_add_rms_norm_f32(a, b, w, 1e-6)
        np.testing.assert_array_equal(_bits(got[0]), want[0].view(np.uint32))  # one f32 add
        # the norm: only the f64 summation order differs from NumPy's (1e-16 relative), a rare
        # 1-ulp flip of the f32 scale: rtol 1e-6 (8 ulp), as test_elementwise_gpu's rms_norm
        np.testing.assert_allclose(cupy.asnumpy(got[1]), want[1], rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize(("nt", "d"), [(1, 896), (130, 896), (7, 576), (3, 8192)])
def test_add_rms_norm_reads_planes_of_another_output(nt: int, d: int) -> None:
    # the graph's inputs are planes of the previous add_rms_norm's output: views at an offset
    cupy = _cp()
    prev = cupy.asarray(RNG.standard_normal((2, nt, d)).astype(np.float32))
    b = cupy.asarray(RNG.standard_normal((nt, d)).astype(np.float32))
    w = cupy.asarray(RNG.standard_normal(d).astype(np.float32))
    got, _ = norm.launch_add_rms_norm_f32(b, prev[0], w, 1e-5)
    s = b + prev[0]
    y, _ = norm.launch_rms_norm_f32(s, w, 1e-5)
    np.testing.assert_array_equal(_bits(got[0]), _bits(s))
    np.testing.assert_array_equal(_bits(got[1]), _bits(y))


def test_add_rms_norm_out_gates() -> None:
    cupy = _cp()
    a = cupy.ones((2, 8), cupy.float32)
    big = cupy.zeros((2, 2, 8), cupy.float32)
    with pytest.raises(
        KernelInputError, match=r"add_rms_norm out \[0x[0-9a-f]+, 0x[0-9a-f]+\) overlaps a"
    ):
        norm.launch_add_rms_norm_f32(big[0], a, None, 1e-6, out=big)
    with pytest.raises(KernelInputError, match=r"overlaps b"):
        norm.launch_add_rms_norm_f32(a, big[1], None, 1e-6, out=big)
    with pytest.raises(
        KernelInputError, match=r"shape mismatch: add_rms_norm out \(2, 8\) vs expected \(2, 2, 8\)"
    ):
        norm.launch_add_rms_norm_f32(a, a, None, 1e-6, out=cupy.empty((2, 8), cupy.float32))
    with pytest.raises(KernelInputError, match=r"add_rms_norm weight is a numpy.ndarray"):
        norm.launch_add_rms_norm_f32(a, a, np.ones(8, np.float32), 1e-6)

"""GPU parity of softcap_f32, slice_cols_f32 and rope_f32 with frequency factors (H200 only).

Run on a GPU host:  python -m pytest -m gpu tests/kernels/test_arch_kernels_gpu.py
Outputs are poisoned with NaN before each launch, so an element never written fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tracekit.kernels import elementwise as ew
from tracekit.kernels import rope

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(1414)


def _cp() -> Any:
    import cupy

    return cupy


@pytest.mark.parametrize("n", [1, 3, 5, 257, 1_000_003])
def test_softcap(n: int) -> None:
    cupy = _cp()
    x = (RNG.standard_normal(n) * 50).astype(np.float32)
    want, _ = ew.ref_softcap_f32(x, 30.0)
    out = cupy.full(n, np.nan, np.float32)
    got, rec = ew.launch_softcap_f32(cupy.asarray(x), 30.0, out=out)
    assert got is out and rec.grid is not None
    # IEEE division and product; tanhf vs libm tanh: 2 ulp of the result
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=5e-7, atol=1e-6)


@pytest.mark.parametrize(("rows", "cols", "start", "width"),
                         [(1, 128, 0, 64), (7, 128, 64, 32), (3, 192, 96, 96), (70_000, 33, 5, 3)])  # fmt: skip
def test_slice_cols(rows: int, cols: int, start: int, width: int) -> None:
    cupy = _cp()
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    want, _ = ew.ref_slice_cols_f32(x, start, width)
    got, rec = ew.launch_slice_cols_f32(cupy.asarray(x), start, width)
    np.testing.assert_array_equal(cupy.asnumpy(got), want)  # a copy: exact
    assert rec.bytes_read == rec.bytes_written == want.nbytes


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize(("nt", "nh", "hd"), [(1, 1, 16), (12, 4, 16), (300, 32, 128)])
def test_rope_with_freq_factors(nt: int, nh: int, hd: int, neox: bool) -> None:
    cupy = _cp()
    x = RNG.standard_normal((nt, nh, hd)).astype(np.float32)
    pos = RNG.integers(0, 8192, size=nt).astype(np.int32)
    ff = RNG.uniform(1.0, 8.0, size=hd // 2).astype(np.float32)
    want, _ = rope.ref_rope_f32(x, pos, 500000.0, neox, 1.0, ff)
    out = cupy.full(x.shape, np.nan, np.float32)
    got, _ = rope.launch_rope_f32(
        cupy.asarray(x), cupy.asarray(pos), 500000.0, neox, 1.0, cupy.asarray(ff), out=out
    )
    assert got is out
    # the angle is built bit for bit as the reference builds it; cosf/sinf vs libm: a few ulp
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-6, atol=4e-6)

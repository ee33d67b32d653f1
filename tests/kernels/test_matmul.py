"""CPU tests of the matmul family: the NumPy reference and its gates."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.matmul import ref_matmul


@pytest.mark.parametrize("wdtype", [np.float32, np.float16])
@pytest.mark.parametrize("nt,n,k", [(1, 1, 1), (1, 65, 45), (37, 96, 130)])
def test_ref_matmul_matches_float64(nt, n, k, wdtype):
    rng = np.random.default_rng(nt * 1000 + n)
    x = rng.standard_normal((nt, k), dtype=np.float32)
    w = rng.standard_normal((n, k)).astype(wdtype)
    out, rec = ref_matmul(x, w)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    assert out.dtype == np.float32 and out.shape == (nt, n)
    # f32 accumulation over k <= 130 terms of O(1) products: well under 1e-4 relative.
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert rec.kernel == "numpy_matmul_f32"
    assert rec.flops == 2 * nt * n * k
    assert rec.bytes_read == x.nbytes + w.nbytes and rec.bytes_written == out.nbytes


def test_ref_matmul_gates():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(KernelInputError, match="k mismatch"):
        ref_matmul(x, np.zeros((4, 9), np.float32))
    with pytest.raises(KernelInputError, match="dtype"):
        ref_matmul(x.astype(np.float64), np.zeros((4, 8), np.float32))
    with pytest.raises(KernelInputError, match="expected float32 or float16"):
        ref_matmul(x, np.zeros((4, 8), np.int8))
    with pytest.raises(KernelInputError, match="contiguous"):
        ref_matmul(x, np.zeros((8, 4), np.float32).T)
    with pytest.raises(KernelInputError, match="2-D"):
        ref_matmul(np.zeros((2, 2, 8), np.float32), np.zeros((4, 8), np.float32))

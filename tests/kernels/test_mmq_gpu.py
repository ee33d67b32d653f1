"""GPU tests of mmq, the quant path's prefill product (marked ``gpu``).

Run on a GPU host:  python3 -m pytest -m gpu tests/kernels/test_mmq_gpu.py

Against ref_mmq (matvec.q8_product), whose per-group terms the kernel rounds identically: only
their summation order differs, so |gpu - ref| <= gamma(k / 16 + 40) of sum |terms| (as mmvq's
test; test_matvec.py's negative control shows one code off by one step fails it). Shapes break
the 64 x 64 tile (n, nt = 1, 63, 64, 65, 130, 200) and the 256-value k step (one block of 32,
eleven blocks of 32, three blocks of 256); outputs are poisoned with NaN before every launch.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_matvec import random_x, weight
from tests.kernels.test_matvec_gpu import mmvq_bound, on_device_at, poisoned
from tracekit.kernels import matvec, mmq
from tracekit.kernels.checks import KernelInputError
from tracekit.quants import QUANTIZED_TYPES, QuantType

pytestmark = pytest.mark.gpu

NS = [1, 63, 64, 65, 200]
NTS = [9, 16, 63, 64, 65, 130]


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _ks(qt: QuantType) -> list[int]:
    """One block, and several (past one 256-value step, the last step short for 32-blocks)."""
    return [qt.block_size, qt.block_size * (11 if qt.block_size == 32 else 3)]


def _check(cp, qt: QuantType, x: np.ndarray, raw: np.ndarray, n: int, k: int) -> np.ndarray:
    nt = x.shape[0]
    out = poisoned(cp, (nt, n))
    got, recs = mmq.launch_mmq(cp.asarray(x), cp.asarray(raw), qt, (n, k), out)
    assert got is out
    want, _, mag = mmq.ref_mmq(x, raw, qt, (n, k), bound=True)
    g = cp.asnumpy(got)
    assert np.array_equal(np.isnan(g), np.isnan(want)), (
        f"{qt.name} n={n} nt={nt} k={k}: NaN at {np.argwhere(np.isnan(g) != np.isnan(want))[:4]}"
    )
    fin = ~np.isnan(want)
    err = np.abs(g[fin] - want[fin])
    bad = err > mmvq_bound(k, mag[fin])
    assert not bad.any(), (
        f"{qt.name} n={n} nt={nt} k={k}: {bad.sum()} outputs off, worst {err.max():.3g}"
    )
    return g


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("blocks", ["one", "several"])
def test_mmq_matches_its_reference(cp, qt: QuantType, n: int, blocks: str):
    k = _ks(qt)[blocks == "several"]
    raw, _ = weight(qt, n, k, seed=n + k, tame=True)
    for nt in NTS:
        _check(cp, qt, random_x(nt, k, seed=nt), raw, n, k)


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_mmq_long_rows_and_untamed_weights(cp, qt: QuantType):
    """k = 4096 (16 steps) with the weight's raw random scales (wide ranges, MIN offsets)."""
    n, k = 130, 4096
    raw, _ = weight(qt, n, k, seed=7)
    _check(cp, qt, random_x(77, k, seed=3), raw, n, k)


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_mmq_nan_and_inf_activations_poison_only_their_tokens(cp, qt: QuantType):
    n, k, nt = 65, 2 * max(256, qt.block_size), 70
    raw, _ = weight(qt, n, k, seed=11, tame=True)
    x = random_x(nt, k, seed=5)
    x[3, 40] = np.nan
    x[66, k - 1] = np.inf
    x[10, 0] = -np.inf
    g = _check(cp, qt, x, raw, n, k)
    bad_tokens = {3, 66, 10}
    assert np.isnan(g[sorted(bad_tokens)]).all()
    assert np.isfinite(np.delete(g, sorted(bad_tokens), axis=0)).all()


def test_quantize_q8_is_the_reference_bit_for_bit(cp):
    nt, k = 130, 352
    x = random_x(nt, k, seed=2)
    x[5, 7], x[9, 300] = np.nan, np.inf
    x[12, 64:96] = 0.0  # an all-zero run: d = 0, q = 0
    xr = cp.full((nt, matvec.run_row_ints(k)), 0x5A5A5A5A, cp.int32)  # poison
    geo = mmq.quantize_geometry(nt, k)
    fn = mmq._kernel("q4_0", mmq.QUANTIZE)
    fn(geo.grid, geo.block, (cp.asarray(x), np.int32(nt), np.int32(k), xr, np.uint64(0)))
    runs = matvec.runs_of(cp.asnumpy(xr), nt, k)
    q, d, qsum = matvec.quantize_q8(x)
    np.testing.assert_array_equal(runs[..., :8].copy().view(np.int8).reshape(nt, k), q)
    np.testing.assert_array_equal(runs[..., 8].view(np.float32), d)
    np.testing.assert_array_equal(runs[..., 9:11].reshape(nt, k // 16), qsum)


def test_mmq_records_name_the_launches(cp):
    qt = QUANTIZED_TYPES[0]
    n, k, nt = 200, 256, 130
    raw, _ = weight(qt, n, k, tame=True)
    _, (qrec, rec) = mmq.launch_mmq(cp.asarray(random_x(nt, k)), cp.asarray(raw), qt, (n, k))
    assert (qrec.kernel, rec.kernel) == (mmq.QUANTIZE, mmq.kernel_name(qt))
    assert rec.grid == (3, 4, 1) and rec.block == (mmq.THREADS, 1, 1)
    assert {qrec.extra["path"], rec.extra["path"]} == {"quant"}
    assert rec.extra["math_path"] == "int8_tensor_core" and rec.flops == 2 * nt * n * k
    assert rec.extra["shared_bytes"] == mmq.shared_bytes(qt)


def test_mmq_refuses_misaligned_and_float_inputs(cp):
    qt = QUANTIZED_TYPES[0]
    raw, _ = weight(qt, 4, 64, tame=True)
    x = cp.asarray(random_x(9, 64))
    with pytest.raises(KernelInputError, match="16-byte boundary"):
        mmq.launch_mmq(x, on_device_at(cp, raw, 2), qt, (4, 64))
    with pytest.raises(KernelInputError, match="16-byte boundary"):
        mmq.launch_mmq(cp.zeros(9 * 64 + 1, cp.float32)[1:].reshape(9, 64), cp.asarray(raw),
                       qt, (4, 64))  # fmt: skip
    with pytest.raises(KernelInputError, match="block-quantized"):
        mmq.launch_mmq(x, cp.zeros(4 * 64 * 2, cp.uint8), "F16", (4, 64))
    with pytest.raises(KernelInputError, match="cupy array"):
        mmq.launch_mmq(random_x(9, 64), cp.asarray(raw), qt, (4, 64))


def test_int8_tensor_core_peak_beats_dp4a(cp):
    """The measured mma.sync peak (mmq's roofline) is positive and above DP4A's (mmvq's): on the
    H200 the tensor cores do many times the int8 ops of DP4A."""
    from tracekit.kernels.ceilings import _dp4a_peak, _imma_peak

    imma, dp4a = _imma_peak(), _dp4a_peak()
    print(f"int8 peaks: mma.sync {imma / 1e12:.0f} TOPS, dp4a {dp4a / 1e12:.0f} TOPS")
    assert imma > 2 * dp4a > 0

"""GPU tests of dequant.cu's candidate variants (marked ``gpu``): every quant type built as the
warp variant and as the warp_occ variant (the same, capped at 32 registers), at the shapes of test_dequant_embed_gpu.py's
dequant cases (one block, odd rows, 65537 rows, a clamped grid, unaligned raw) plus 2-byte
misaligned raw, compared bit for bit with the NumPy reference. The declared configurations (the
default path) stay covered by test_dequant_embed_gpu.py; the same kernels run on the CPU in
test_dequant_host.py.

    .venv/bin/pytest -m gpu tests/kernels/test_dequant_variants_gpu.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kernels.test_dequant_embed_gpu import DEQUANT_CASES, dequant_case
from tracekit.kernels import cuda, dequant
from tracekit.kernels.launch import MAX_GRID_X
from tracekit.quants import QUANTIZED_TYPES, QuantType

pytestmark = pytest.mark.gpu
VARIANT = {name: v for v, name in dequant.VARIANTS.items()}
CASES = {**DEQUANT_CASES, "raw_plus_2": (23, 3, MAX_GRID_X, 2), "clamped_plus_2": (301, 5, 3, 2)}
#: (variant, chunks per thread (warp: per lane per step), warp steps per run, threads per block)
BUILDS = [("warp", 4, 4, 128), ("warp", 1, 16, 256), ("warp_occ", 4, 4, 256)]


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _rebuild() -> None:
    cuda.module.cache_clear()
    cuda.kernel.cache_clear()


@pytest.fixture(scope="module", params=BUILDS, ids=[f"{v}_c{c}_s{s}_b{b}" for v, c, s, b in BUILDS])
def build(cp, request: pytest.FixtureRequest) -> Iterator[tuple[str, int, int, int]]:
    """Every type's kernel built as one candidate; the declared build restored after."""
    variant, chunks, steps, block = request.param
    base, base_steps = dict(dequant.CONFIG), dequant.WARP_STEPS
    for t in QUANTIZED_TYPES:
        dequant.CONFIG[t.qtype] = dequant.KernelConfig(VARIANT[variant], block, chunks)
    dequant.WARP_STEPS = steps
    _rebuild()
    try:
        yield request.param
    finally:
        dequant.CONFIG.update(base)
        dequant.WARP_STEPS = base_steps
        _rebuild()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_variant_equals_reference(
    cp, build: tuple[str, int, int, int], qt: QuantType, case: str
) -> None:
    shape, rec = dequant_case(cp, qt, CASES[case], f"dequant {qt.name} {build} {case}")
    assert dequant.VARIANTS[dequant.config(qt).variant] == build[0]
    geo = dequant.geometry(qt, shape[0] * shape[1], CASES[case][2])
    assert (rec.grid, rec.block) == (geo.grid, geo.block) and geo.block == (build[3], 1, 1)

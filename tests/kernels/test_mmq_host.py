"""mmq.cu's kernel body, run on the CPU: mmq<T> compiled with g++ against tests/kernels/host_shim
(mmq_host.h: one host thread per CUDA thread, the MMAs as the PTX ISA defines them for a warp),
every block of the grid, compared with ref_mmq. This checks, without a GPU, what the GPU tests
(test_mmq_gpu.py) check on the device: the shared-memory layout, the word permutation shared by
the weight and the tokens, the fragment indices, the edge guards and the per-group rounding; the
device's own MMA is the one thing it cannot check (the shim follows the ISA's fragment tables).
quantize_x (q8_runs.cuh) runs too, against quantize_q8 bit for bit.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import aligned, build
from tests.kernels.test_matvec import random_x, weight
from tests.kernels.test_matvec_gpu import mmvq_bound
from tracekit.kernels import matvec, mmq
from tracekit.quants import QUANTIZED_TYPES, QuantType

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

_F = ctypes.POINTER(ctypes.c_float)
_I = ctypes.POINTER(ctypes.c_int)
_U8 = ctypes.POINTER(ctypes.c_uint8)


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    src = [
        "#include <thread>",
        "#include <vector>",
        '#include "mmq_host.h"',
        "int4 mmq_smem[(1 << 16) / 16];",
        '#include "mmq.cu"',
        'extern "C" void run_quantize(const float* x, int nt, int k, int* xr) {',
        "  quantize_x(x, nt, k, xr, 0, 1);",
        "}",
        "template <class T> void run_grid(const u8* raw, const int* xr, float* out, int n, int nt,",
        "                                 int k, unsigned smem) {",
        "  blockDim = {MMQ_THREADS, 1, 1};",
        "  gridDim = {(unsigned)((nt + MMQ_BN - 1) / MMQ_BN), (unsigned)((n + MMQ_BM - 1) / MMQ_BM), 1};",
        "  g_dynamic_smem = smem;",
        "  std::barrier<> block(MMQ_THREADS);",
        "  std::vector<std::barrier<>*> warps;",
        "  for (int w = 0; w < MMQ_THREADS / 32; ++w) warps.push_back(g_warp_barrier[w] = new std::barrier<>(32));",
        "  g_block_barrier = &block;",
        "  for (unsigned by = 0; by < gridDim.y; ++by)",
        "    for (unsigned bx = 0; bx < gridDim.x; ++bx) {",
        "      blockIdx = {bx, by, 0};",
        "      std::vector<std::thread> ts;",
        "      for (unsigned t = 0; t < MMQ_THREADS; ++t)",
        "        ts.emplace_back([=] { threadIdx = {t, 0, 0};",
        "                              mmq<T>(raw, xr, out, n, nt, k, T::TS, T::QK); });",
        "      for (auto& th : ts) th.join();",
        "    }",
        "  for (auto* w : warps) delete w;",
        "}",
    ]
    for t in QUANTIZED_TYPES:
        src.append(
            f'extern "C" void run_{t.device}(const u8* raw, const int* xr, float* out, int n, '
            f"int nt, int k, unsigned smem) {{ run_grid<{t.device}>(raw, xr, out, n, nt, k, smem); }}"
        )
    flags = ("-std=c++20", "-pthread", *mmq.defines())
    lib = build(tmp_path_factory.mktemp("mmq_host"), "mmq_host", "\n".join(src) + "\n", flags)
    lib.run_quantize.argtypes = [_F, ctypes.c_int, ctypes.c_int, _I]
    for t in QUANTIZED_TYPES:
        fn = getattr(lib, f"run_{t.device}")
        fn.argtypes = [_U8, _I, _F, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_uint]
    return lib


def _quantize(lib: ctypes.CDLL, x: np.ndarray) -> np.ndarray:
    nt, k = x.shape
    xr = np.zeros((nt, matvec.run_row_ints(k)), np.int32)
    lib.run_quantize(x.ctypes.data_as(_F), nt, k, xr.ctypes.data_as(_I))
    return xr


def test_quantize_x_is_quantize_q8_bit_for_bit(lib) -> None:
    nt, k = 11, 352
    x = random_x(nt, k, seed=2) * np.float32(3.7)
    x[5, 7], x[9, 300] = np.nan, -np.inf
    x[2, 64:96] = 0.0
    runs = matvec.runs_of(_quantize(lib, x), nt, k)
    q, d, qsum = matvec.quantize_q8(x)
    np.testing.assert_array_equal(runs[..., :8].copy().view(np.int8).reshape(nt, k), q)
    np.testing.assert_array_equal(runs[..., 8].view(np.float32), d)
    np.testing.assert_array_equal(runs[..., 9:11].reshape(nt, k // 16), qsum)


def _run(lib, qt: QuantType, x: np.ndarray, raw: np.ndarray, n: int) -> np.ndarray:
    nt, k = x.shape
    xr = _quantize(lib, x)
    out = np.full((nt, n), np.nan, np.float32)  # poisoned: every output must be written
    raw16 = aligned(raw)
    getattr(lib, f"run_{qt.device}")(
        raw16.ctypes.data_as(_U8), xr.ctypes.data_as(_I), out.ctypes.data_as(_F), n, nt, k,
        mmq.shared_bytes(qt),
    )  # fmt: skip
    return out


# n and nt break the 64 x 64 tile; k: one block, and (32-blocks) a short last 256-value step
SHAPES = [(1, 9, "one"), (65, 70, "several"), (64, 64, "several")]


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
@pytest.mark.parametrize("n, nt, blocks", SHAPES)
def test_mmq_body_matches_the_reference(lib, qt: QuantType, n: int, nt: int, blocks: str) -> None:
    k = qt.block_size * (1 if blocks == "one" else 11 if qt.block_size == 32 else 3)
    raw, _ = weight(qt, n, k, seed=n + nt, tame=True)
    x = random_x(nt, k, seed=nt)
    if nt > 9:
        x[nt - 1, k - 3] = np.nan  # poisons only its token
    got = _run(lib, qt, x, raw, n)
    want, _, mag = mmq.ref_mmq(x, raw, qt, (n, k), bound=True)
    assert np.array_equal(np.isnan(got), np.isnan(want)), np.argwhere(np.isnan(got))[:5]
    fin = ~np.isnan(want)
    err = np.abs(got[fin] - want[fin])
    assert (err <= mmvq_bound(k, mag[fin])).all(), f"worst {err.max():.3g}"


def test_mmq_body_catches_a_wrong_code(lib) -> None:
    """Negative control: one code off by one step in one block moves its row's outputs outside
    the bound, so the comparison above can fail."""
    qt = next(t for t in QUANTIZED_TYPES if t.name == "Q8_0")
    n, k, nt = 3, 64, 10
    raw, _ = weight(qt, n, k, seed=1, tame=True)
    x = random_x(nt, k, seed=3)
    want, _, mag = mmq.ref_mmq(x, raw, qt, (n, k), bound=True)
    bad = raw.copy()
    bad[2 + 5] = (int(bad[2 + 5]) + 1) % 256  # row 0, block 0, value 5
    got = _run(lib, qt, x, bad, n)
    assert (np.abs(got[:, 0] - want[:, 0]) > mmvq_bound(k, mag[:, 0])).any()
    assert (np.abs(got[:, 1:] - want[:, 1:]) <= mmvq_bound(k, mag[:, 1:])).all()

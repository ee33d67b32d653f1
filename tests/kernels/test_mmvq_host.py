"""matvec.cu's mmvq (the quant path's decode matvec) run on the CPU (tests/kernels/host_shim:
each thread a fiber), compiled with g++ for each rows-per-warp count (MMVQ_RPW 1, 2, 4): both
variants (x quantized by the block's prologue into shared memory, or beforehand into global
memory), through the launcher's geometry with a clamped grid (rows grid-strided), against
matvec.ref_mmvq within its bound, and every R bit for bit R = 1 (a row's terms are summed in
one order whatever R is). The GPU tests (test_matvec_gpu.py) run the same kernels on the device.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import KERNELS, aligned, build, with_static_shared
from tests.kernels.test_matvec import gamma, random_x, weight
from tracekit.kernels import matvec
from tracekit.quants import QUANTIZED_TYPES, QuantType, quant_type

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

NTS = (1, 3)

# The CUDA names matvec.cu and q8_runs.cuh use beyond cuda_block.h's and cuda_fp16.h's, as the
# PTX ISA defines them. Shared memory: the dynamic array (extern __shared__) is one global
# array, and a static __shared__ one (write_row's partials when warps share a row) a
# function-local static: one block runs at a time, all its fibers on one OS thread.
PREAMBLE = """
#include "cuda_block.h"
#include <cstring>
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __fdiv_rn(float a, float b) { return a / b; }
"""
RUNNER = """
int4 mmvq_smem[1 << 14];
static const unsigned char* g_raw; static const float* g_x; static const int* g_xr;
static float* g_out; static int g_n, g_k; static int* g_qxr;
#define RUN(suffix, T, NT, QX)                                                                 \\
    extern "C" void run_##suffix##_n##NT##_##QX(const unsigned char* raw, const float* x,     \\
                                                const int* xr, float* out, int n, int k,       \\
                                                unsigned gx, unsigned by, unsigned bz) {       \\
        g_raw = raw, g_x = x, g_xr = xr, g_out = out, g_n = n, g_k = k;                       \\
        tk_host::run_grid(dim3{gx, 1, 1}, dim3{32, by, bz}, [] {                               \\
            mmvq<T, NT, QX>(g_raw, g_x, g_xr, g_out, g_n, g_k, T::TS, T::QK, nullptr);         \\
        });                                                                                    \\
    }
#define QUANTIZE(suffix, T)                                                                   \
    extern "C" void run_quantize_##suffix(const float* x, int nt, int k, int* xr) {            \
        quantize_x_for<T>(x, nt, k, xr, 0, 1);                                                 \
    }                                                                                          \
    extern "C" void run_quantize_lanes_##suffix(const float* x, int nt, int k, int* xr) {      \
        g_x = x, g_n = nt, g_k = k, g_qxr = xr;                                                \
        tk_host::run_grid(dim3{1, 1, 1}, dim3{32, 1, 1}, [] {                                  \
            quantize_x_lanes<SplitCodes<Codes<T>>::value>(g_x, g_n, g_k, g_qxr, threadIdx.x,  \
                                                          32);                                 \
        });                                                                                    \
    }
"""


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda r: f"rpw{r}")
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    rpw = request.param
    kernel = (KERNELS / "matvec.cu").read_text()
    dynamic = "extern __shared__ int4 mmvq_smem[];"
    assert dynamic in kernel  # (extern and static do not combine: the global array below)
    src = [PREAMBLE, with_static_shared(kernel), RUNNER]
    for t in QUANTIZED_TYPES:
        src.append(f"QUANTIZE({t.suffix}, {t.device})")  # x in the type's order (quantize_q8_n<nt>)
        for nt in NTS:
            src += [
                f"RUN({t.suffix}, {t.device}, {nt}, false)",
                f"RUN({t.suffix}, {t.device}, {nt}, true)",
            ]
    flags = (
        "-std=c++17",
        f"-DMMVQ_RPW={rpw}",
        "-DMV_UNROLL=1",
        f"-DRUN_INTS={matvec.RUN_BYTES // 4}",
    )
    return rpw, build(
        tmp_path_factory.mktemp(f"mmvq{rpw}"), f"mmvq{rpw}", "\n".join(src) + "\n", flags
    )


_OUTPUTS: dict[tuple, np.ndarray] = {}  # (type, n, nt, qx, rpw) -> output, across the R libraries


def _run(
    lib, qt: QuantType, raw: np.ndarray, x: np.ndarray, n: int, qx: bool, wpr: int = 1
) -> np.ndarray:
    rpw, so = lib
    nt, k = x.shape
    geo, smem = matvec.mmvq_geometry(n, k, nt, sms=1, wpr=wpr, warps_per_sm=8, rows_per_warp=rpw)
    assert geo.block[1] == wpr and smem <= 16 * (1 << 14)
    xr = np.zeros(nt * matvec.run_row_ints(k), np.int32)
    ptr = ctypes.c_void_p
    if qx:
        getattr(so, f"run_quantize_{qt.suffix}")(ptr(x.ctypes.data), nt, k, ptr(xr.ctypes.data))
    out = np.full((nt, n), np.nan, np.float32)  # poison: an output not written stays NaN
    fn = getattr(so, f"run_{qt.suffix}_n{nt}_{'true' if qx else 'false'}")
    fn(ptr(raw.ctypes.data), ptr(x.ctypes.data), ptr(xr.ctypes.data), ptr(out.ctypes.data),
       n, k, geo.grid[0], geo.block[1], geo.block[2])  # fmt: skip
    return out


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
@pytest.mark.parametrize("n, nt", [(1, 1), (13, 3), (70, 1)])
@pytest.mark.parametrize("qx", [False, True], ids=["fused", "qx"])
def test_mmvq_on_the_host_matches_its_reference_for_every_rows_per_warp(
    lib, qt: QuantType, n: int, nt: int, qx: bool
) -> None:
    k = 3 * qt.block_size if qt.block_size > 32 else 160  # odd block counts
    raw, _ = weight(qt, n, k, seed=n + nt, tame=True)
    raw = aligned(raw)
    x = random_x(nt, k, seed=nt)
    got = _run(lib, qt, raw, x, n, qx)
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    err = np.abs(got - want)
    assert np.all(err <= gamma(k // 16 + 40) * mag), (float(np.nanmax(err / mag)), lib[0])
    _OUTPUTS[(qt.name, n, nt, qx, lib[0])] = got
    one = _OUTPUTS.get((qt.name, n, nt, qx, 1))
    assert lib[0] == 1 or one is not None  # R = 1's library runs first (the first parameter)
    assert got.view(np.uint32).tolist() == one.view(np.uint32).tolist()


@pytest.mark.parametrize("qt", [t for t in QUANTIZED_TYPES if t.name in ("Q4_0", "Q4_K", "Q6_K")],
                         ids=lambda t: t.name)  # fmt: skip
@pytest.mark.parametrize("wpr", [2, 4, 8])
def test_warps_sharing_a_row_on_a_strided_grid(lib, qt: QuantType, wpr: int) -> None:
    """WPR warps a row (their sums meet in shared memory in a fixed order) over more rows
    than the clamped grid holds (rows grid-strided): within the bound, and one row's value
    does not depend on how many rows a warp walks (R). (Without the block's shared partials,
    the shim's __shared__ as a per-thread local, 9 of these 27 fail.)"""
    n, k = 45, 8 * qt.block_size if qt.block_size > 32 else 512
    raw = aligned(weight(qt, n, k, seed=3, tame=True)[0])
    x = random_x(3, k, seed=4)  # NTS has 1 and 3
    got = _run(lib, qt, raw, x, n, False, wpr)
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert np.all(np.abs(got - want) <= gamma(k // 16 + 40) * mag), lib[0]
    _OUTPUTS[(qt.name, "wpr", wpr, lib[0])] = got
    one = _OUTPUTS[(qt.name, "wpr", wpr, 1)]
    assert got.view(np.uint32).tolist() == one.view(np.uint32).tolist()


def test_a_wrong_code_fails_the_host_comparison(lib) -> None:
    """Negative control: one weight byte changed makes the kernel's output leave the bound of
    the unchanged weight's reference."""
    qt = next(t for t in QUANTIZED_TYPES if t.name == "Q4_0")
    n, k = 4, 128
    raw, _ = weight(qt, n, k, seed=5, tame=True)
    raw = aligned(raw)
    x = random_x(1, k, seed=2)
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    bad = raw.copy()
    bad[2 + qt.type_size] ^= 0x11  # row 0, block 1's first code byte: two codes off
    got = _run(lib, qt, bad, x, n, False)
    assert not np.all(np.abs(got - want) <= gamma(k // 16 + 40) * mag)


@pytest.mark.parametrize("how", ["quantize", "quantize_lanes"])
@pytest.mark.parametrize("name", ["Q4_0", "IQ4_NL", "IQ4_XS"])
def test_quantized_runs_are_the_reference_in_the_types_order(lib, name: str, how: str) -> None:
    """quantize_x as each type's module runs it (quantize_q8_n<nt>) against matvec.quantize_q8,
    bit for bit: a run's 32 int8 values in value order, or for the split-code types (the IQ4
    levels' two addends) in their nibble order, word m holding values 2m, 2m + 16, 2m + 1,
    2m + 17; then d and the two half sums (those of values 0-15 and 16-31 in either order),
    as two ints and as one int's 16-bit halves. quantize_lanes: quantize_x_lanes (8 lanes a
    run, MMVQ_X_LANES) on one warp, the same bits."""
    qt = quant_type(name)
    nt, k = 3, 256
    x = random_x(nt, k, seed=11)
    x[1, 40] = np.inf  # a run holding an Inf: d = NaN, q = 0
    x[2, 64:96] = 0.0  # an all-zero run: d = 0, q = 0
    x[0, 170] = np.nan  # NaN: d = NaN, q = 0 (fmax alone would skip it)
    runs = np.full(nt * matvec.run_row_ints(k), 0x5A5A5A5A, np.int32)  # poison
    ptr = ctypes.c_void_p
    getattr(lib[1], f"run_{how}_{qt.suffix}")(ptr(x.ctypes.data), nt, k, ptr(runs.ctypes.data))
    assert (runs.reshape(nt, -1)[:, 96:100] == 0x5A5A5A5A).all()  # the gap after 8 runs
    runs = matvec.runs_of(runs, nt, k)
    q, d, qsum = matvec.quantize_q8(x)
    q = q.reshape(nt, k // 32, 32)
    if name.startswith("IQ4"):
        m = np.arange(8)[:, None]
        order = (2 * m + np.array([0, 16, 1, 17])).ravel()  # word m's four bytes
    else:
        order = np.arange(32)
    assert runs[..., :8].copy().view(np.int8).tolist() == q[..., order].tolist()
    assert runs[..., 8].view(np.float32).tobytes() == d.tobytes()  # (NaN bits included)
    assert runs[..., 9:11].tolist() == qsum.reshape(nt, k // 32, 2).tolist()
    # and packed as 16-bit halves (DP2A's operand: Codes<T>::HALVES)
    assert runs[..., 11].copy().view(np.int16).reshape(nt, k // 32, 2).tolist() == (
        qsum.reshape(nt, k // 32, 2).tolist()
    )

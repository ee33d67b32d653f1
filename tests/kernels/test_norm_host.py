"""norm.cu's rms_norm_f32 and add_rms_norm_f32 run on the CPU (tests/kernels/host_shim: each
thread a fiber; the block's shared partials a function-local static, which one block at a time
makes the block's shared memory), through the launcher's geometry (one to 32 warps a row) and
a clamped grid (rows grid-strided): add_rms_norm_f32's plane 0 is the f32 sum a + b bit for bit,
its plane 1 rms_norm_f32's output on that sum bit for bit (one template, one order), and both
within 2 ulp-scale of the NumPy reference (double sums in another order). The GPU tests
(test_norm_gpu.py) run the same kernels on the device."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import KERNELS, build, with_static_shared
from tracekit.kernels import norm

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# cuda_block.h drops __shared__; here a block's shared array is a function-local static (one
# block runs at a time, all its fibers on one OS thread), and the warp shuffle takes doubles.
PREAMBLE = """
#include "cuda_block.h"
namespace tk_host { inline double shfl_dslots[1024]; }
inline double __shfl_xor_sync(unsigned int, double v, int lane_mask) {
    const int me = tk_host::current;
    tk_host::shfl_dslots[me] = v;
    tk_host::yield();
    const double r = tk_host::shfl_dslots[(me & ~31) | ((me & 31) ^ lane_mask)];
    tk_host::yield();
    return r;
}
"""
RUNNER = """
static const float *g_a, *g_b, *g_w; static float* g_y; static long long g_rows;
static int g_d, g_has_w; static double g_eps;
extern "C" void run_rms(const float* x, const float* w, float* y, long long rows, int d,
                        double eps, int has_w, unsigned gx, unsigned bx) {
    g_a = x, g_w = w, g_y = y, g_rows = rows, g_d = d, g_eps = eps, g_has_w = has_w;
    tk_host::run_grid(dim3{gx, 1, 1}, dim3{bx, 1, 1},
                      [] { rms_norm_f32(g_a, g_w, g_y, g_rows, g_d, g_eps, g_has_w, nullptr); });
}
extern "C" void run_add(const float* a, const float* b, const float* w, float* out,
                        long long rows, int d, double eps, int has_w, unsigned gx, unsigned bx) {
    g_a = a, g_b = b, g_w = w, g_y = out, g_rows = rows, g_d = d, g_eps = eps, g_has_w = has_w;
    tk_host::run_grid(dim3{gx, 1, 1}, dim3{bx, 1, 1}, [] {
        add_rms_norm_f32(g_a, g_b, g_w, g_y, g_rows, g_d, g_eps, g_has_w, nullptr);
    });
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    src = PREAMBLE + with_static_shared((KERNELS / "norm.cu").read_text()) + RUNNER
    flags = ("-std=c++17", *norm.kernel_defines())
    return build(tmp_path_factory.mktemp("norm_host"), "norm_host", src, flags)


def _p(a: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data if a is not None else None)


@pytest.mark.parametrize("d", [1, 3, 4, 5, 576, 896, 4096, 8192])
@pytest.mark.parametrize("rows", [1, 3, 9])
@pytest.mark.parametrize("has_w", [True, False])
def test_add_rms_norm_is_the_sum_then_rms_norm_bit_for_bit(lib, d: int, rows: int, has_w: bool):
    rng = np.random.default_rng(d * 10 + rows)
    a = rng.standard_normal((rows, d)).astype(np.float32)
    b = (rng.standard_normal((rows, d)) * 3).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32) if has_w else None
    eps = 1e-6
    geo = norm.geometry(rows, d)
    block = geo.block[0]
    gx = min(geo.grid[0], 2)  # clamped: the kernel strides over the other rows
    out = np.full((2, rows, d), np.nan, np.float32)  # poison
    lib.run_add(_p(a), _p(b), _p(w), _p(out), ctypes.c_longlong(rows), d, ctypes.c_double(eps),
                int(has_w), gx, block)  # fmt: skip
    want_sum = a + b
    assert out[0].view(np.uint32).tolist() == want_sum.view(np.uint32).tolist()
    y = np.full((rows, d), np.nan, np.float32)
    lib.run_rms(_p(want_sum), _p(w), _p(y), ctypes.c_longlong(rows), d, ctypes.c_double(eps),
                int(has_w), gx, block)  # fmt: skip
    assert out[1].view(np.uint32).tolist() == y.view(np.uint32).tolist()
    ref, _ = norm.ref_add_rms_norm_f32(a, b, w, eps)
    assert np.array_equal(ref[0], out[0])
    scale = np.abs(ref[1]).max()
    assert np.abs(out[1] - ref[1]).max() <= 4 * np.finfo(np.float32).eps * scale


def test_a_wrong_sum_fails_the_host_comparison(lib) -> None:
    """Negative control: the kernel's sum compared with a - b is not its output."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2, 64)).astype(np.float32) for _ in range(2))
    out = np.full((2, 2, 64), np.nan, np.float32)
    geo = norm.geometry(2, 64)
    lib.run_add(_p(a), _p(b), _p(None), _p(out), ctypes.c_longlong(2), 64, ctypes.c_double(1e-6),
                0, geo.grid[0], geo.block[0])  # fmt: skip
    assert not np.array_equal(out[0], a - b) and np.array_equal(out[0], a + b)

"""stats.cu's batched statistics kernels (stats_batch_reduce, stats_batch_hist_heat: a step's
statistics in two launches) run on the CPU (tests/kernels/host_shim: each thread a fiber,
barriers counted), through the batch's own tables (stats.device_desc, stats.batch_layout) and
result reader, against the NumPy path (tensor_stats) as the GPU test compares them: counts,
min/max and histograms exact, sums to f64 rounding, heatmap codes within one step. The tensors
take every heatmap mode: a thread per cell of <= 32 values, a warp per small cell, a block per
cell of >= 1024 values. The GPU runs the same kernels in test_attention_matmul_stats_gpu.py.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import KERNELS, build, with_static_shared
from tests.kernels.test_attention_matmul_stats_gpu import (
    _planted,
    assert_batch_matches_numpy,
    assert_stats_close,
)
from tracekit.kernels import stats
from tracekit.kernels.stats import StatsResults, tensor_stats

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# The CUDA names stats.cu uses beyond cuda_block.h's and cuda_fp16.h's, as the PTX ISA
# defines them; a 64-bit shuffle through one slot per thread, as the shim's 32-bit one.
PREAMBLE = """
#define TK_HOST_COUNTED_BARRIERS
#include "cuda_block.h"
#include <cstring>
using std::isfinite; using std::isinf; using std::fmin; using std::fmax; using std::floor;
using std::fabs;
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    const unsigned long long old = *p; *p = old + v; return old;
}
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
    const unsigned int old = *p; *p = old + v; return old;
}
namespace tk_host { inline unsigned long long shfl64[1024]; }
template <class T>
inline T __shfl_down_sync(unsigned int, T v, unsigned int off) {
    static_assert(sizeof(T) == 8, "64-bit values only");
    const int me = tk_host::current;
    std::memcpy(&tk_host::shfl64[me], &v, 8);
    tk_host_warp_meet();
    T r = v;  // a source lane past the warp's end: the caller's own value
    if ((me & 31) + off < 32) std::memcpy(&r, &tk_host::shfl64[me + off], 8);
    tk_host_warp_meet();
    return r;
}
// __match_any_sync as the PTX ISA defines it: the lanes of mask whose value equals the caller's
namespace tk_host { inline long long match_slots[1024]; }
inline unsigned int __match_any_sync(unsigned int mask, int v) {
    const int me = tk_host::current, first = me & ~31;
    tk_host::match_slots[me] = v;
    tk_host_warp_meet();
    unsigned int peers = 0;
    for (int l = 0; l < 32; ++l)
        if ((mask >> l & 1u) && tk_host::match_slots[first + l] == v) peers |= 1u << l;
    tk_host_warp_meet();
    return peers;
}
inline int __ffs(unsigned int x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
"""
RUNNER = """
unsigned int bsh[1 << 12], hsh[1 << 12];  // the kernels' extern __shared__ arrays
static const long long *g_tab, *g_red, *g_heat;
static int g_T, g_bins;
static long long g_chunk, g_nred;
static unsigned long long *g_res, *g_part, *g_tickets, *g_hist;
static double* g_cells;
extern "C" void run_reduce(const long long* tab, int T, const long long* red, long long chunk,
                           unsigned long long* res, unsigned long long* part,
                           unsigned long long* tickets, unsigned blocks) {
    g_tab = tab, g_T = T, g_red = red, g_chunk = chunk, g_res = res, g_part = part;
    g_tickets = tickets;
    tk_host::run_grid(dim3{blocks, 1, 1}, dim3{BATCH_BLOCK, 1, 1}, [] {
        stats_batch_reduce(g_tab, g_T, g_red, g_chunk, g_res, g_part, g_tickets);
    });
}
extern "C" void run_hist_heat(const long long* tab, int T, const long long* red,
                              const long long* heat, long long n_red, long long chunk, int bins,
                              const unsigned long long* res, unsigned long long* hist,
                              double* cells, unsigned blocks) {
    g_tab = tab, g_T = T, g_red = red, g_heat = heat, g_nred = n_red, g_chunk = chunk;
    g_bins = bins, g_res = const_cast<unsigned long long*>(res), g_hist = hist, g_cells = cells;
    tk_host::run_grid(dim3{blocks, 1, 1}, dim3{BATCH_BLOCK, 1, 1}, [] {
        stats_batch_hist_heat(g_tab, g_T, g_red, g_heat, g_nred, g_chunk, g_bins, g_res,
                              g_hist, g_cells);
    });
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    src = PREAMBLE + with_static_shared((KERNELS / "stats.cu").read_text()) + RUNNER
    so = build(tmp_path_factory.mktemp("stats"), "stats_host", src,
               ("-std=c++17", *stats.kernel_defines()))  # fmt: skip
    p = ctypes.c_void_p
    i32, i64, u32 = ctypes.c_int, ctypes.c_longlong, ctypes.c_uint
    so.run_reduce.argtypes = [p, i32, p, i64, p, p, p, u32]
    so.run_hist_heat.argtypes = [p, i32, p, p, i64, i64, i32, p, p, p, u32]
    return so


def _batch_on_host(lib, xs, bins=32, heat_rows=32, heat_cols=64):
    """StatsBatch's device path, the kernels run by the shim: {index: stats dict}."""
    items, descs = [], []  # the items hold the arrays the descriptors point into
    for i, x in enumerate(xs):
        x = np.array(x, order="C")  # (np.ascontiguousarray makes a scalar 1-D)
        code = stats._CODES[x.dtype]
        n_rows, n_cols = stats._view_2d(x.shape)
        _, _, R, C = stats._grid(x.shape, heat_rows, heat_cols)
        descs.append(stats.device_desc(x.ctypes.data, n_rows, n_cols, R, C, code))
        items.append((i, x, tuple(x.shape), ("tokens", "features"), R, C, descs[-1]))
    lay = stats.batch_layout(descs, bins)
    T, n_red, n_res = len(xs), lay["n_red"], lay["n_res"]
    # PreparedStats' table and result buffer, on the host
    tab = stats.batch_table(lay)
    t_desc, t_red, t_heat = stats.table_views(tab, T)
    buf = np.zeros(lay["words"], np.uint64)
    res, hist, cells, tickets, part = stats.result_views(buf, T, bins, n_res)
    if n_red:
        lib.run_reduce(t_desc.ctypes.data, T, t_red.ctypes.data, stats._BATCH_CHUNK,
                       res.ctypes.data, part.ctypes.data if part.size else None,
                       tickets.ctypes.data, n_red)  # fmt: skip
    if n_red + lay["n_heat"]:
        lib.run_hist_heat(t_desc.ctypes.data, T, t_red.ctypes.data, t_heat.ctypes.data, n_red,
                          stats._BATCH_CHUNK, bins, res.ctypes.data, hist.ctypes.data,
                          cells.ctypes.data, n_red + lay["n_heat"])  # fmt: skip
    # every block of a tensor of several chunks took its ticket (enqueue's memset zeroes them)
    nb = np.diff(lay["red_start"])
    assert tickets.tolist() == np.where(nb > 1, nb, 0).tolist()
    words = buf[:n_res]
    return StatsResults([stats.read_result_words(items, bins, lay["cell_off"], words)], bins,
                        None).format()  # fmt: skip


def host_tensors():
    """Every heat mode and dtype the batch takes, planted NaN/±Inf/zeros, ragged cells, a
    tensor of several reduction chunks (the ticket merge), and the degenerate ones."""
    rng = np.random.default_rng(3)
    return [
        _planted((1, 14, 64), np.float32, seed=1),  # 896 one-value cells: a thread each
        _planted((3, 333, 64), np.float16, seed=2),  # 999 x 64: cells of 31-32 values, threads
        _planted((1, 896), np.float32, seed=3),  # 64 cells of 14: threads
        _planted((40, 150), np.float32, seed=4),  # 32 x 64 cells of <= 2 x 3: threads
        _planted((70, 700), np.float64, seed=5),  # cells of <= 3 x 11 = 33 values: a warp each
        _planted((1, 70_000), np.float32, seed=6),  # 64 cells of 1093-1094: a block each; 9 chunks
        (rng.standard_normal(7) * 3).astype(np.float32),
        np.full((3, 3), np.nan, np.float32),
        np.full((4, 5), 2.5, np.float32),
        np.zeros((0, 7), np.float32),
        np.array(1.5, np.float32),
        np.array([[3, 1, 2]], np.int32),
    ]


def test_the_layout_gives_each_heat_mode_its_blocks():
    modes = []
    for x in host_tensors()[:6]:
        n_rows, n_cols = stats._view_2d(x.shape)
        _, _, R, C = stats._grid(x.shape, 32, 64)
        d = stats.device_desc(0, n_rows, n_cols, R, C, 0)
        modes.append((d[8], d[10]))
    # (heat mode, heat blocks): threads (256 cells a block), a warp a cell (8 a block), a block
    assert modes == [(2, 4), (2, 8), (2, 1), (2, 8), (0, 256), (1, 64)]


def test_batched_kernels_on_the_host_match_numpy(lib):
    xs = host_tensors()
    assert_batch_matches_numpy(_batch_on_host(lib, xs), xs)


def test_a_wrong_cell_fails_the_comparison(lib):
    """Negative control: one value changed in a one-value (thread-mode) cell after the host run
    moves that cell's heatmap code, and the comparison sees it."""
    x = _planted((1, 14, 64), np.float32, seed=1)
    got = _batch_on_host(lib, [x])[0]
    y = x.copy()
    finite = np.flatnonzero(np.isfinite(y.reshape(-1)))
    y.reshape(-1)[finite[len(finite) // 2]] += 40.0
    with pytest.raises(AssertionError):
        assert_stats_close(got, tensor_stats(y, axes=("tokens", "features")))

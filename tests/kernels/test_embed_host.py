"""embed.cu's float gathers run on the CPU (tests/kernels/host_shim: each thread a fiber):
gather_rows_f32 and embed_rows_f16/bf16 against NumPy, through the launcher's geometry, in CI
without a GPU. Both walk the gathered rows' chunks with one helper (gather_chunks); the quant
tables' gathers share the decoders tested in test_decoders_host.py.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import KERNELS, build
from tracekit.kernels import embed
from tracekit.quants import quant_type

RUNNER = """
static const void* g_x; static const int* g_ids; static float* g_out;
static int g_rows, g_n, g_vec; static long long g_nt; static int* g_err;
#define RUNNER(kname, call)                                                                    \\
    extern "C" void run_##kname(const void* x, const int* ids, float* out, int rows, int n,  \\
                                long long nt, int vec, int* err, unsigned gx, unsigned bx) { \\
        g_x = x, g_ids = ids, g_out = out, g_rows = rows, g_n = n, g_nt = nt, g_vec = vec;    \\
        g_err = err;                                                                          \\
        tk_host::run_grid(dim3{gx, 1, 1}, dim3{bx, 1, 1}, [] { call; });                      \\
    }
RUNNER(gather_rows_f32, gather_rows_f32((const float*)g_x, g_ids, g_out, g_rows, g_n, g_nt,
                                        g_vec, g_err, nullptr))
RUNNER(embed_rows_f16, embed_float<SrcF16>((const u8*)g_x, g_ids, g_out, g_rows, g_n, g_nt,
                                           g_vec, g_err))
RUNNER(embed_rows_bf16, embed_float<SrcBF16>((const u8*)g_x, g_ids, g_out, g_rows, g_n, g_nt,
                                             g_vec, g_err))
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    src = '#include "cuda_block.h"\n' + (KERNELS / "embed.cu").read_text() + RUNNER
    return build(tmp_path_factory.mktemp("embed_host"), "embed_host", src)


def aligned_copy(a: np.ndarray, offset: int = 0) -> np.ndarray:
    buf = np.empty(a.nbytes + 32, np.uint8)
    start = -buf.ctypes.data % 16 + offset
    out = buf[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def run(lib, kname: str, table: np.ndarray, ids: np.ndarray, n: int, vec: bool):
    nt = ids.size
    out = np.full((nt, n), np.float32(7.5), np.float32)  # poison: a chunk not written stays
    err = np.zeros(1, np.int32)
    if kname == "gather_rows_f32":
        geo = embed.gather_geometry(nt, n, max_grid=3)  # clamped: the walk grid-strides
    else:
        qt = quant_type("F16" if kname.endswith("_f16") else "BF16")
        geo = embed.embed_geometry(qt, nt, n, max_grid=3)
    grid, block = geo.grid[0], geo.block[0]
    getattr(lib, f"run_{kname}")(
        ctypes.c_void_p(table.ctypes.data), ctypes.c_void_p(ids.ctypes.data),
        ctypes.c_void_p(out.ctypes.data), ctypes.c_int(table.shape[0]), ctypes.c_int(n),
        ctypes.c_longlong(nt), ctypes.c_int(int(vec)), ctypes.c_void_p(err.ctypes.data),
        ctypes.c_uint(grid), ctypes.c_uint(block),
    )  # fmt: skip
    return out, int(err[0])


@pytest.mark.parametrize("n", [1, 3, 4, 8, 13, 64])
@pytest.mark.parametrize("vec", [False, True])
def test_gather_rows_f32_on_host_is_numpy_take(lib, n: int, vec: bool) -> None:
    if vec and n % 4:
        pytest.skip("the vector path needs n % 4 == 0 (the launcher's rule)")
    rng = np.random.default_rng(n)
    x = aligned_copy(rng.standard_normal((11, n), dtype=np.float32))
    ids = np.array([3, 0, 10, 3, 7], np.int32)
    out, err = run(lib, "gather_rows_f32", x, ids, n, vec)
    assert err == 0
    np.testing.assert_array_equal(out, x[ids])


@pytest.mark.parametrize("kname,dtype", [("embed_rows_f16", np.float16), ("embed_rows_bf16", None)])
@pytest.mark.parametrize("n", [5, 8, 24, 33])
def test_float_tables_on_host_match_their_values(lib, kname: str, dtype, n: int) -> None:
    rng = np.random.default_rng(n)
    vals = rng.standard_normal((9, n)).astype(np.float32)
    if dtype is None:  # bf16: the top 16 bits of an f32
        raw = (vals.view(np.uint32) >> 16).astype(np.uint16)
        want_table = (raw.astype(np.uint32) << 16).view(np.float32)
    else:
        raw = vals.astype(np.float16).view(np.uint16)
        want_table = raw.view(np.float16).astype(np.float32)
    table = aligned_copy(raw)
    ids = np.array([8, 1, 1, 4], np.int32)
    for vec in (False, True) if n % 8 == 0 else (False,):
        out, err = run(lib, kname, table, ids, n, vec)
        assert err == 0
        np.testing.assert_array_equal(out, want_table[ids])


def test_a_bad_id_writes_nan_and_flags_it(lib) -> None:
    x = aligned_copy(np.arange(24, dtype=np.float32).reshape(3, 8))
    ids = np.array([1, 3, -1, 2], np.int32)
    for vec in (False, True):
        out, err = run(lib, "gather_rows_f32", x, ids, 8, vec)
        assert err == 1
        np.testing.assert_array_equal(out[[0, 3]], x[[1, 2]])
        assert np.isnan(out[[1, 2]]).all()

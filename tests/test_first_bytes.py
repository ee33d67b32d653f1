"""scripts/first_bytes.py: its cases, its marks read as arrivals, and its kernel run on the host
(tests/kernels/host_shim; the bulk copy a memcpy of the span the device would copy): every byte a
block asks for reaches it, in both modes, and the marks come in the order arrivals() reads."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.scripts import load_script

BULK = """
#include <cstdint>
static long long g_bad;
inline void tk_host_bulk_copy(unsigned char* dst, const unsigned char* src, unsigned bytes) {
    if (bytes % 16 || ((uintptr_t)src) % 16 || ((uintptr_t)dst) % 16) ++g_bad;
    else std::memcpy(dst, src, bytes);
}
extern "C" long long bulk_bad() { return g_bad; }
"""
RUNNER = """
int4 fb_smem[1 << 12];
static const unsigned char* g_raw; static long long g_span; static int g_waves, g_bulk;
static unsigned long long* g_marks; static unsigned* g_sink;
extern "C" void run(const unsigned char* raw, long long span, int waves, int bulk,
                    unsigned long long* marks, unsigned* sink, unsigned grid, unsigned threads) {
    g_raw = raw, g_span = span, g_waves = waves, g_bulk = bulk, g_marks = marks, g_sink = sink;
    tk_host::run_grid(dim3{grid, 1, 1}, dim3{threads, 1, 1}, [] {
        first_bytes(g_raw, g_span, g_waves, g_bulk, g_marks, g_sink);
    });
}
"""


@pytest.fixture(scope="module")
def fb():
    return load_script("first_bytes")


def test_cases_are_read_and_bad_ones_named(fb) -> None:
    assert fb.parse_cases("bulk:18432x2,loads:2304x1") == [("bulk", 18432, 2), ("loads", 2304, 1)]
    for bad, why in (("tma:16x1", "bulk|loads"), ("bulk:20x1", "multiple of 16"),
                     ("loads:32x5", "1 to 4"), ("bulk:32", "bulk|loads")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            fb.parse_cases(bad)


def test_arrivals_from_known_marks(fb) -> None:
    marks = np.array([[1000, 5000, 9000], [1200, 4200, 12000], [1100, 3100, 8100]], np.uint64)
    got = fb.arrivals(marks)
    assert got["last_entry_us"] == pytest.approx(0.2)
    assert got["first_us"] == pytest.approx([2.1, 3.2, 4.0])
    assert got["all_us"] == pytest.approx([8.0, 11.0])
    with pytest.raises(ValueError, match="block 1: marks missing or out of order"):
        fb.arrivals(np.array([[1000, 2000, 3000], [1000, 4000, 3000]], np.uint64))
    with pytest.raises(ValueError, match="block 0"):
        fb.arrivals(np.array([[1000, 0, 3000]], np.uint64))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("bulk", [1, 0], ids=["bulk", "loads"])
def test_the_kernel_on_the_host_reads_every_byte_it_asks_for(fb, tmp_path, bulk: int) -> None:
    from tests.kernels.host_build import KERNELS, aligned, build, with_static_shared
    from tests.kernels.test_mmvq_host import PREAMBLE
    from tracekit.kernels import matvec

    kernel = (KERNELS / "matvec.cu").read_text() + fb.SRC
    src = [PREAMBLE, BULK, with_static_shared(kernel), RUNNER]
    flags = ("-std=c++17", f"-DRUN_INTS={matvec.RUN_BYTES // 4}", "-DTK_HOST_BULK")
    so = build(tmp_path, "fb", "\n".join(src) + "\n", flags)
    grid, threads, span, waves = 3, 64, 208, 3  # spans of 13 granules: the loads' tail is ragged
    rng = np.random.default_rng(4)
    raw = aligned(rng.integers(0, 256, grid * waves * span, dtype=np.uint8))
    marks = np.zeros((grid, 3), np.uint64)
    sink = np.full(grid * threads, 0xDEADBEEF, np.uint32)  # poison: a thread that did not write
    p = ctypes.c_void_p
    so.run(p(raw.ctypes.data), ctypes.c_longlong(span), waves, bulk, p(marks.ctypes.data),
           p(sink.ctypes.data), grid, threads)  # fmt: skip
    so.bulk_bad.restype = ctypes.c_longlong
    assert so.bulk_bad() == 0
    words = raw.view(np.uint32).reshape(grid, -1).astype(np.uint64).sum(axis=1) % 2**32
    got = sink.reshape(grid, threads).astype(np.uint64).sum(axis=1) % 2**32
    assert got.tolist() == words.tolist()  # each block summed exactly its own bytes
    fb.arrivals(marks)  # every mark there and in order


@pytest.mark.gpu
def test_the_script_runs_on_the_gpu(tmp_path) -> None:
    pytest.importorskip("cupy")
    import json

    from tests.scripts import run_script

    out = tmp_path / "fb.json"
    got = run_script("first_bytes", ["--cases", "bulk:18432x2,loads:2304x1", "--runs", "2",
                                     "--json", str(out)], tmp_path)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["mode"], r["span"], r["waves"]) for r in rows] == [("bulk", 18432, 2),
                                                                  ("loads", 2304, 1)]  # fmt: skip
    for r in rows:
        for run in r["runs"]:
            assert 0 <= run["first_us"][0] <= run["first_us"][1] <= run["all_us"][1]

"""The integer views ``Codes<T>`` of kernels/quant_codes.cuh (what the q8 matvec ``mmvq`` reads),
run on the CPU: compiled with g++ against tests/kernels/host_shim, every work item of every
block is loaded, and its codes, group factors and the values they make (a (code + OFF) + b,
rounded in f32 as the kernel's terms are) are compared bit for bit with gguf-py's dequantized
values and with the NumPy twin ``QuantType.int_parts`` — on finite random blocks and on raw
random bytes (NaN/Inf scales). The GPU tests check the kernel built on them
(tests/kernels/test_matvec_gpu.py); this one checks the layouts in CI, without a GPU.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from gguf.quants import dequantize

from tests.kernels.host_build import aligned, build
from tracekit.kernels import dequant
from tracekit.quants import INT_GROUP, QUANTIZED_TYPES, QuantType, quant_type

N_BLOCKS = 517

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _codes_lib(folder, flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """run_<T>(blocks, n, x, codes, a, b): every item of every block through Codes<T>::load,
    compiled with the knobs ``flags`` (-D...)."""
    src = ["#include <cstring>", '#include "quant_codes.cuh"']
    for t in QUANTIZED_TYPES:
        d = t.device
        src.append(
            f'extern "C" void run_{d}(const u8* raw, long n, float* x, signed char* c, float* a,'
            f" float* b, long* bad_pairs) {{\n"
            f"  using C = Codes<{d}>;\n"
            f"  for (long i = 0; i < n; ++i)\n"
            f"    for (int it = 0; it < C::ITEMS; ++it) {{\n"
            f"      CodeItem<C::NG> item;\n"
            f"      C::load(raw + i * {d}::TS, it, item);\n"
            # with SG 32, groups 2m, 2m + 1 must be one run's halves with equal factors
            f"      for (int g = 0; C::SG == 32 && g < C::NG; g += 2)\n"
            f"        if (item.v[g] % 32 || item.v[g + 1] != item.v[g] + 16 ||\n"
            f"            memcmp(&item.a[g], &item.a[g + 1], 4) ||\n"
            f"            (C::MIN && memcmp(&item.b[g], &item.b[g + 1], 4))) ++*bad_pairs;\n"
            f"      for (int g = 0; g < C::NG; ++g)\n"
            f"        for (int j = 0; j < 16; ++j) {{\n"
            f"          const long e = i * {d}::QK + item.v[g] + j;\n"
            f"          const int code = (signed char)(item.w[4 * g + j / 4] >> (8 * (j % 4)))"
            f" + C::OFF;\n"
            f"          c[e] = (signed char)code;\n"
            f"          const float ax = __fmul_rn(item.a[g], (float)code);\n"
            f"          x[e] = C::MIN ? __fadd_rn(ax, item.b[g]) : ax;\n"
            f"          a[e / 16] = item.a[g];\n"
            f"          b[e / 16] = C::MIN ? item.b[g] : 0.0f;\n"
            f"        }}\n"
            f"    }}\n}}"
        )
    src.append(SPLIT_SRC)
    for t in QUANTIZED_TYPES:
        src.append(
            f'extern "C" long split_{t.device}(const u8* raw, long n) '
            f"{{ return split_mismatches<Codes<{t.device}>, {t.device}>(raw, n); }}"
        )
    return build(folder, "codes", "\n".join(src) + "\n", ("-std=c++17", *flags))


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return _codes_lib(tmp_path_factory.mktemp("codes"))


@pytest.fixture(scope="module")
def window_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """Q5_0 read as one window of aligned words (MMVQ_Q5_0_WINDOW, a compile-time knob)."""
    return _codes_lib(tmp_path_factory.mktemp("codes_window"), ("-DMMVQ_Q5_0_WINDOW=1",))


# A type whose mmvq reads each code as two addends (Codes<T>::SPLIT: load_split) must give, byte
# for byte, w + w2 = load's code, in the nibble order load_split documents; -1: no split view.
SPLIT_SRC = """
template <class C, class T> long split_mismatches(const u8* raw, long n) {
  if constexpr (!SplitCodes<C>::value) { return -1; } else {
    static_assert(C::NG == 2, "one 32-value group an item");
    long bad = 0;
    for (long i = 0; i < n; ++i)
      for (int it = 0; it < C::ITEMS; ++it) {
        CodeItem<C::NG> whole, split;
        memset(&split, 0xA5, sizeof split);  // poison: every byte must be written
        C::load(raw + i * T::TS, it, whole);
        C::load_split(raw + i * T::TS, it, split);
        for (int wd = 0; wd < 8; ++wd)
          for (int p = 0; p < 4; ++p) {
            const int j = wd / 2, v = 4 * j + 2 * (wd % 2) + p / 2 + 16 * (p % 2);
            const int want = (signed char)(whole.w[v / 4] >> (8 * (v % 4)));
            const int got = (signed char)(split.w[wd] >> (8 * p)) +
                            (signed char)(split.w2[wd] >> (8 * p));
            bad += got != want;
          }
      }
    return bad;
  }
}
"""


def _same(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_codes_rebuild_the_gguf_values_and_match_int_parts(lib: ctypes.CDLL, qt: QuantType):
    check_codes(lib, qt)


def test_q5_0_window_gives_the_same_codes(window_lib: ctypes.CDLL):
    """The knob's one window of aligned words: blocks at both 2-byte phases (22-byte blocks
    alternate), finite and raw random, rebuild gguf-py's values and int_parts' codes."""
    check_codes(window_lib, quant_type("Q5_0"))


def check_codes(lib: ctypes.CDLL, qt: QuantType) -> None:
    rng = np.random.default_rng(21)
    finite = dequant.random_blocks(qt, N_BLOCKS, rng)
    wild = rng.integers(0, 256, N_BLOCKS * qt.type_size, dtype=np.uint8)
    raw = aligned(np.concatenate([finite, wild]))
    n = 2 * N_BLOCKS
    vals = n * qt.block_size
    x = np.full(vals, 0x7FBADBAD, np.uint32).view(np.float32)  # poison
    c = np.full(vals, 99, np.int8)  # 99 is no type's code
    a = np.full(vals // INT_GROUP, np.nan, np.float32)
    b = np.full(vals // INT_GROUP, np.nan, np.float32)
    ptr = ctypes.c_void_p
    bad_pairs = ctypes.c_long(0)
    getattr(lib, f"run_{qt.device}")(
        ptr(raw.ctypes.data), ctypes.c_long(n), ptr(x.ctypes.data), ptr(c.ctypes.data),
        ptr(a.ctypes.data), ptr(b.ctypes.data), ctypes.byref(bad_pairs),
    )  # fmt: skip
    assert bad_pairs.value == 0, f"{qt.name}: {bad_pairs.value} scale-group pairs broken"
    with np.errstate(all="ignore"):
        want = dequantize(raw.reshape(n, qt.type_size), qt.qtype).reshape(-1)
    bad = np.flatnonzero(~_same(x, want))
    assert bad.size == 0, (
        f"{qt.name}: {bad.size} values differ, first at value {bad[0]} (block "
        f"{bad[0] // qt.block_size}): {x[bad[0]]!r} vs gguf {want[bad[0]]!r}"
    )
    assert np.isfinite(want[: N_BLOCKS * qt.block_size]).all()
    with np.errstate(all="ignore"):
        parts = qt.int_parts(raw.reshape(n, qt.type_size))
    assert np.array_equal(c, parts.codes.reshape(-1)), f"{qt.name}: codes differ from int_parts"
    assert _same(a, parts.a.reshape(-1)).all(), f"{qt.name}: scales differ from int_parts"
    pb = np.zeros_like(a) if parts.b is None else parts.b.reshape(-1)
    assert _same(b, pb).all(), f"{qt.name}: offsets differ from int_parts"


def test_split_codes_add_up_to_the_codes(lib: ctypes.CDLL):
    """load_split's two addends sum to load's codes for every item of finite and raw random
    blocks (every 4-bit code occurs); the IQ4 types are the ones that declare it."""
    rng = np.random.default_rng(5)
    split = []
    for qt in QUANTIZED_TYPES:
        raw = aligned(np.concatenate([
            dequant.random_blocks(qt, N_BLOCKS, rng),
            rng.integers(0, 256, N_BLOCKS * qt.type_size, dtype=np.uint8),
        ]))  # fmt: skip
        fn = getattr(lib, f"split_{qt.device}")
        fn.restype = ctypes.c_long
        bad = fn(ctypes.c_void_p(raw.ctypes.data), ctypes.c_long(2 * N_BLOCKS))
        if bad >= 0:
            split.append(qt.name)
            assert bad == 0, f"{qt.name}: {bad} code bytes differ between load and load_split"
    assert split == ["IQ4_NL", "IQ4_XS"]

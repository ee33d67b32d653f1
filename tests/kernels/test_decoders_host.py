"""The CUDA block decoders of kernels/quant_decoders.cuh, run on the CPU: every declared type's
byte-wise ``T::dec8`` and word-wise ``Fast<T>::dec8`` (its ``dec8_w`` where it has one) are
compiled with g++ against tests/kernels/host_shim/cuda_fp16.h (the PTX definitions of the few
intrinsics they use) and compared bit for bit with ``gguf.quants.dequantize`` in f32, on finite
random blocks and on raw random bytes (NaN/Inf scales). The GPU parity tests check the same
decoders on the device; this one checks their logic in CI, without a GPU.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from gguf.quants import dequantize

from tests.kernels.host_build import aligned, build
from tracekit.kernels import dequant
from tracekit.quants import QUANTIZED_TYPES, QuantType

N_BLOCKS = 1543  # finite blocks per type (as many again of raw random bytes)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """One shared library with run_<T>(blocks, n, out_bytewise, out_wordwise) per declared type."""
    src = ['#include "quant_decoders.cuh"']
    for t in QUANTIZED_TYPES:
        d = t.device
        src.append(
            f'extern "C" void run_{d}(const u8* b, long n, float* o1, float* o2) {{\n'
            f"  for (long i = 0; i < n; ++i)\n"
            f"    for (int c = 0; c < {d}::QK / 8; ++c) {{\n"
            f"      {d}::dec8(b + i * {d}::TS, c, o1 + i * {d}::QK + 8 * c);\n"
            f"      Fast<{d}>::dec8(b + i * {d}::TS, c, o2 + i * {d}::QK + 8 * c);\n"
            f"    }}\n}}"
        )
    return build(tmp_path_factory.mktemp("decoders"), "decoders", "\n".join(src) + "\n")


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_device_decoders_match_gguf(lib: ctypes.CDLL, qt: QuantType) -> None:
    rng = np.random.default_rng(12)
    finite = dequant.random_blocks(qt, N_BLOCKS, rng)
    wild = rng.integers(0, 256, N_BLOCKS * qt.type_size, dtype=np.uint8)
    raw = aligned(np.concatenate([finite, wild]))
    n = 2 * N_BLOCKS
    with np.errstate(all="ignore"):
        want = dequantize(raw.reshape(n, qt.type_size), qt.qtype).reshape(-1)
    got = [np.full(want.size, 0x7FBADBAD, np.uint32).view(np.float32) for _ in range(2)]  # poison
    fn = getattr(lib, f"run_{qt.device}")
    fn(
        ctypes.c_void_p(raw.ctypes.data),
        ctypes.c_long(n),
        ctypes.c_void_p(got[0].ctypes.data),
        ctypes.c_void_p(got[1].ctypes.data),
    )
    for name, g in zip(("byte-wise dec8", "Fast<T>::dec8 (word-wise)"), got, strict=True):
        same = (g.view(np.uint32) == want.view(np.uint32)) | (np.isnan(g) & np.isnan(want))
        bad = np.flatnonzero(~same)
        assert bad.size == 0, (
            f"{qt.name} {name}: {bad.size} values differ, first at value {bad[0]} "
            f"(block {bad[0] // qt.block_size}): {g[bad[0]]!r} vs gguf {want[bad[0]]!r}"
        )
    # the finite half really is finite, so the comparison above saw real values
    assert np.isfinite(want[: N_BLOCKS * qt.block_size]).all()

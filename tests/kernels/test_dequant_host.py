"""dequant.cu's kernels run on the CPU: each thread block of a launch as fibers
(tests/kernels/host_shim/cuda_block.h), with the grid, block and shared memory that dequant.py
computes for the configuration, and compared bit for bit with ``gguf.quants.dequantize``
rounded once to f16. Covers the warp and warp_occ variants (every type, and Q3_K at more
sizes) and Q3_K's declared configuration, at 16-byte aligned, 2-byte misaligned and odd raw
addresses, a partial last step and run, and a clamped grid (the grid-stride walk over runs). The
GPU parity tests (test_dequant_variants_gpu.py, test_dequant_embed_gpu.py) check the same
kernels on the device.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from gguf.quants import dequantize

from tests.kernels.host_build import KERNELS, build
from tracekit.kernels import dequant
from tracekit.kernels.launch import MAX_GRID_X
from tracekit.quants import QUANTIZED_TYPES, QuantType, quant_type

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

WARP = next(v for v, name in dequant.VARIANTS.items() if name == "warp")
OCC = next(v for v, name in dequant.VARIANTS.items() if name == "warp_occ")
SMEM = 1 << 16  # the host's one dynamic shared array (cuda_block.h drops __shared__)
N_BLOCKS = 1031  # finite blocks (as many again of raw random bytes): no step divides 2062
#: (type, chunks per lane per step, steps per run) of the warp variant built here
WARP_BUILDS = [(t.name, 4, 2) for t in QUANTIZED_TYPES]
WARP_BUILDS += [("Q3_K", c, s) for c in (1, 2, 8) for s in (1, 3)] + [("Q3_K", 4, 4)]
#: (type, chunks per lane per step, steps per run) of the warp_occ variant built here
OCC_BUILDS = [(t.name, 4, 2) for t in QUANTIZED_TYPES] + [("Q3_K", 1, 3)]
Q3_K = quant_type("Q3_K")


def _name(t: str, v: int, c: int, s: int) -> str:
    return f"k_{t}_{v}_{c}_{s}"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """run_<kernel>(raw, out, nblocks, grid, block) and slice_<kernel>() per build."""
    decl = Q3_K.dequant
    builds = [(t, WARP, c, s) for t, c, s in WARP_BUILDS]
    builds += [(t, OCC, c, s) for t, c, s in OCC_BUILDS]
    builds.append(("Q3_K", decl.variant, decl.chunks, 1))  # the declared (default) kernel
    src = [
        '#include "cuda_block.h"',
        # every 16-byte word load of the staging code, recorded: the span it read
        "static unsigned long long g_ld_lo = ~0ull, g_ld_hi = 0;",
        "inline uint4 __ldg(const uint4* p) {",
        "  const unsigned long long a = reinterpret_cast<unsigned long long>(p);",
        "  g_ld_lo = a < g_ld_lo ? a : g_ld_lo, g_ld_hi = a + 16 > g_ld_hi ? a + 16 : g_ld_hi;",
        "  return *p;",
        "}",
        'extern "C" void word_span(unsigned long long* r) {',
        "  r[0] = g_ld_lo, r[1] = g_ld_hi, g_ld_lo = ~0ull, g_ld_hi = 0;",
        "}",
        (KERNELS / "dequant.cu").read_text(),
        f"__attribute__((aligned(16))) u8 smem[{SMEM}];",
        "static const u8* g_raw; static uint4* g_out; static long long g_n;",
    ]
    for t, v, c, s in builds:
        dev, k = quant_type(t).device, _name(t, v, c, s)
        occ = "_OCC" if v == OCC else ""  # as dequant.instantiations() emits it
        src.append(f"DEQUANT_KERNEL{occ}({k}, {dev}, {v}, {c}, {s})")
        src.append(
            f'extern "C" void run_{k}(const u8* raw, uint4* out, long long n, unsigned grid,\n'
            f"                        unsigned block) {{\n"
            f"  g_raw = raw, g_out = out, g_n = n;\n"
            f"  tk_host::run_grid(dim3{{grid, 1, 1}}, dim3{{block, 1, 1}},\n"
            f"                    [] {{ {k}(g_raw, g_out, g_n, {dev}::TS, {dev}::QK); }});\n}}"
        )
        if v in (WARP, OCC):
            src.append(f'extern "C" int slice_{k}() {{ return WarpSlice<{dev}, {c}>::BYTES; }}')
    # UBSan aborts on a misaligned word access, which the GPU faults on and x86 forgives
    flags = ("-std=c++17", "-fsanitize=alignment", "-fno-sanitize-recover=alignment")
    return build(
        tmp_path_factory.mktemp("dequant_host"), "dequant_host", "\n".join(src) + "\n", flags
    )


def blocks(qt: QuantType, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    finite = dequant.random_blocks(qt, n, rng)
    wild = rng.integers(0, 256, n * qt.type_size, dtype=np.uint8)  # NaN/Inf scales
    return np.concatenate([finite, wild])


def at_offset(raw: np.ndarray, offset: int) -> np.ndarray:
    """A copy of raw starting ``offset`` bytes past a 16-byte boundary, with poison around it
    (a kernel that read or decoded bytes outside the tensor would pick it up)."""
    buf = np.full(raw.size + 64, 0x7C, np.uint8)
    start = -buf.ctypes.data % 16 + 16 + offset
    out = buf[start : start + raw.size]
    out[...] = raw
    return out


def run(
    lib: ctypes.CDLL,
    qt: QuantType,
    cfg: dequant.KernelConfig,
    steps: int,
    raw: np.ndarray,
    max_grid: int,
    monkeypatch: pytest.MonkeyPatch,
) -> np.ndarray:
    """The kernel's f16 output, launched with dequant.py's geometry and shared memory."""
    monkeypatch.setitem(dequant.CONFIG, qt.qtype, cfg)
    monkeypatch.setattr(dequant, "WARP_STEPS", steps)
    nblocks = raw.size // qt.type_size
    geo = dequant.geometry(qt, nblocks * qt.block_size, max_grid)
    warp = cfg.variant in (WARP, OCC)
    assert dequant.steps(qt) == (steps if warp else 1)
    smem = dequant.launch_smem_bytes(qt)
    assert smem <= SMEM
    k = _name(qt.name, cfg.variant, cfg.chunks, dequant.steps(qt))
    if warp:  # the launcher's slice is the kernel's (the device traps otherwise)
        assert dequant.warp_slice_bytes(qt) == getattr(lib, f"slice_{k}")()
        assert smem == cfg.block // 32 * dequant.warp_slice_bytes(qt)
    out = np.full(nblocks * qt.block_size, 0xFFFF, np.uint16)  # poison: NaN
    span = (ctypes.c_ulonglong * 2)()
    lib.word_span(span)  # reset
    getattr(lib, f"run_{k}")(
        ctypes.c_void_p(raw.ctypes.data),
        ctypes.c_void_p(out.ctypes.data),
        ctypes.c_longlong(nblocks),
        ctypes.c_uint(geo.grid[0]),
        ctypes.c_uint(geo.block[0]),
    )
    lib.word_span(span)
    if warp:  # its 16-byte word loads stay inside the tensor (the ends bytewise)
        lo, hi = raw.ctypes.data, raw.ctypes.data + raw.size
        assert lo <= span[0] and span[1] <= hi, (
            f"{qt.name} {cfg}: word loads read [{span[0] - lo}, {span[1] - lo}) of a tensor of "
            f"{raw.size} bytes"
        )
        assert span[1] - span[0] >= raw.size - 32  # and they did the loading
    return out.view(np.float16)


def assert_same(qt: QuantType, raw: np.ndarray, got: np.ndarray, what: str) -> None:
    with np.errstate(all="ignore"):
        want32 = dequantize(raw.reshape(-1, qt.type_size), qt.qtype).reshape(-1)
        want = want32.astype(np.float16)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (
        f"{qt.name} {what}: {bad.size} values differ, first at value {bad[0]} "
        f"(block {bad[0] // qt.block_size}): {got[bad[0]]!r} vs gguf {want[bad[0]]!r}"
    )
    n_finite = raw.size // qt.type_size // 2 * qt.block_size
    assert np.isfinite(want32[:n_finite]).all()  # the finite half compared real numbers


# (raw offset past 16 B, max_grid): aligned, 2-byte misaligned (Q3_K's other block parity at
# block 0), odd (byte-wise decoders), 8; a grid clamped to 3 blocks
CASES = [(0, MAX_GRID_X), (2, MAX_GRID_X), (3, MAX_GRID_X), (8, MAX_GRID_X), (2, 3)]
CASE_IDS = [f"off{o}_grid{'max' if g == MAX_GRID_X else g}" for o, g in CASES]


# every warp build at every case, except the clamped grid for Q3_K only (the walk is the same
# for every type)
WARP_CASES = [(*b, *c) for b in WARP_BUILDS for c in CASES if b[0] == "Q3_K" or c[1] == MAX_GRID_X]


def _case_ids(cases: list[tuple[str, int, int, int, int]]) -> list[str]:
    return [
        f"{t}_c{c}_s{s}_off{o}_grid{'max' if g == MAX_GRID_X else g}" for t, c, s, o, g in cases
    ]


def _check_warp_kind(
    lib: ctypes.CDLL, variant: int, blocks_: tuple[int, ...], seed: int,
    case: tuple[str, int, int, int, int], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """One case of a warp-run variant, each of ``blocks_`` threads a block, against gguf-py."""
    name, chunks, steps, offset, max_grid = case
    qt = quant_type(name)
    raw = at_offset(blocks(qt, N_BLOCKS if name == "Q3_K" else 257, seed), offset)
    for block in blocks_:
        cfg = dequant.KernelConfig(variant, block, chunks)
        got = run(lib, qt, cfg, steps, raw, max_grid, monkeypatch)
        what = dequant.VARIANTS[variant]
        assert_same(qt, raw, got, f"{what} variant {cfg} steps {steps} at +{offset}")


@pytest.mark.parametrize("case", WARP_CASES, ids=_case_ids(WARP_CASES))
def test_warp_variant_equals_gguf(lib: ctypes.CDLL, case, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 and 2 warps a block: runs of a block's warps end unevenly
    _check_warp_kind(lib, WARP, (128, 64), 7, case, monkeypatch)


OCC_CASES = [(*b, *c) for b in OCC_BUILDS for c in CASES if b[0] == "Q3_K" or c[1] == MAX_GRID_X]


@pytest.mark.parametrize("case", OCC_CASES, ids=_case_ids(OCC_CASES))
def test_warp_occ_variant_equals_gguf(
    lib: ctypes.CDLL, case, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_warp_kind(lib, OCC, (256, 96), 9, case, monkeypatch)  # its largest block, 3 warps


def test_warp_occ_block_over_its_launch_bounds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(dequant.CONFIG, Q3_K.qtype, dequant.KernelConfig(OCC, 512, 4))
    with pytest.raises(ValueError, match="at most 256 threads, not block 512"):
        dequant.geometry(Q3_K, 1 << 20)
    monkeypatch.setitem(dequant.CONFIG, Q3_K.qtype, dequant.KernelConfig(WARP, 100, 4))
    with pytest.raises(ValueError, match="whole warps"):
        dequant.geometry(Q3_K, 1 << 20)


@pytest.mark.parametrize("n", [1, 2, 33, 255])
def test_warp_variant_Q3_K_short_tensors(
    lib: ctypes.CDLL, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fewer blocks than one step (4 at chunks 4): the only step is partial, most warps idle
    raw = at_offset(blocks(Q3_K, n, n)[: n * Q3_K.type_size], 2)
    got = run(lib, Q3_K, dequant.KernelConfig(WARP, 128, 4), 4, raw, MAX_GRID_X, monkeypatch)
    assert_same(Q3_K, raw, got[: n * Q3_K.block_size], f"warp variant, {n} blocks")


@pytest.mark.parametrize(("offset", "max_grid"), CASES, ids=CASE_IDS)
def test_declared_Q3_K_kernel_equals_gguf(
    lib: ctypes.CDLL, offset: int, max_grid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = at_offset(blocks(Q3_K, N_BLOCKS, 8), offset)
    got = run(lib, Q3_K, Q3_K.dequant, 1, raw, max_grid, monkeypatch)
    assert_same(Q3_K, raw, got, f"declared {Q3_K.dequant} at +{offset}")

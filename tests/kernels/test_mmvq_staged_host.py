"""matvec.cu's mmvq_st (the weight staged in shared memory by the bulk-copy engine) run on the
CPU (tests/kernels/host_shim: each thread a fiber), compiled with g++ twice: with
TK_HOST_BULK, where thread 0 stands in for sm_90's bulk copy with a memcpy of exactly the span
the device copies (and the test checks every span lies inside the weight and starts and ends
on 16 bytes), and without it, the cooperative copy of a device before sm_90. Each through
matvec.staged_geometry with a one-SM grid (tiles grid-strided, so the stage ring wraps and
every stage is refilled), against matvec.ref_mmvq within its bound, and bit for bit against
mmvq (R = 1) compiled into the same library: the staged kernel computes mmvq's terms in
mmvq's order. The GPU tests (test_matvec_gpu.py) run both on the device.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.kernels.host_build import KERNELS, aligned, build, with_static_shared
from tests.kernels.test_matvec import gamma, random_x, weight
from tests.kernels.test_mmvq_host import PREAMBLE
from tracekit.kernels import matvec
from tracekit.quants import QUANTIZED_TYPES, QuantType

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

NTS = (1, 3)
SMEM_INTS = 1 << 16  # the test's dynamic shared array: 256 KB

# tk_host_bulk_copy: the span thread 0 asks the copy engine for, checked and recorded.
BULK = """
#include <cstdint>
static const unsigned char* g_lo; static const unsigned char* g_hi;
static const unsigned char* g_xlo; static const unsigned char* g_xhi;  // mmvq_st_qx's x runs
static long long g_copies, g_bad;
inline void tk_host_bulk_copy(unsigned char* dst, const unsigned char* src, unsigned bytes) {
    const bool in_w = src >= g_lo && src + bytes <= g_hi;
    const bool in_x = src >= g_xlo && src + bytes <= g_xhi;
    if (bytes % 16 || ((uintptr_t)src) % 16 || ((uintptr_t)dst) % 16 || !(in_w || in_x))
        ++g_bad;
    else
        std::memcpy(dst, src, bytes);
    ++g_copies;
}
extern "C" long long bulk_copies() { return g_copies; }
extern "C" long long bulk_bad() { return g_bad; }
"""
RUNNER = """
#include <algorithm>
int4 mmvq_smem[SMEM_INT4S];
alignas(16) static int g_xr[1 << 14];  // quantize_q8's runs for stq_*: gaps left poisoned
static const unsigned char* g_raw; static const float* g_x;
static float* g_out; static int g_n, g_k, g_stages, g_stage_bytes, g_tile_rows;
#define RUN(suffix, T, NT)                                                                     \\
    extern "C" void st_##suffix##_n##NT(const unsigned char* raw, const float* x, float* out,  \\
                                        int n, int k, unsigned gx, unsigned by, unsigned bz,   \\
                                        int stages, int stage_bytes, int tile_rows) {          \\
        g_raw = raw, g_x = x, g_out = out, g_n = n, g_k = k, g_stages = stages;                \\
        g_stage_bytes = stage_bytes, g_tile_rows = tile_rows;                                  \\
        BOUNDS(raw, n, k, T)                                                                   \\
        tk_host::run_grid(dim3{gx, 1, 1}, dim3{32, by, bz}, [] {                               \\
            mmvq_st<T, NT>(g_raw, g_x, g_out, g_n, g_k, T::TS, T::QK, nullptr, g_stages,       \\
                           g_stage_bytes, g_tile_rows);                                        \\
        });                                                                                    \\
    }                                                                                          \\
    extern "C" void stq_##suffix##_n##NT(const unsigned char* raw, const float* x, float* out, \\
                                         int n, int k, unsigned gx, unsigned by, unsigned bz,  \\
                                         int stages, int stage_bytes, int tile_rows) {         \\
        g_raw = raw, g_x = x, g_out = out, g_n = n, g_k = k, g_stages = stages;                \\
        g_stage_bytes = stage_bytes, g_tile_rows = tile_rows;                                  \\
        std::fill(g_xr, g_xr + (1 << 14), 0x7F7F7F7F);                                         \\
        tk_host::run_grid(dim3{1, 1, 1}, dim3{256, 1, 1}, [] {                                 \\
            quantize_x_for<T>(g_x, NT, g_k, g_xr, threadIdx.x, 256);                           \\
        });                                                                                    \\
        BOUNDS(raw, n, k, T)                                                                   \\
        XBOUNDS(NT * run_row_ints(k >> 5) * 4)                                                 \\
        tk_host::run_grid(dim3{gx, 1, 1}, dim3{32, by, bz}, [] {                               \\
            mmvq_st<T, NT, true>(g_raw, nullptr, g_out, g_n, g_k, T::TS, T::QK, nullptr,       \\
                                 g_stages, g_stage_bytes, g_tile_rows, g_xr);                  \\
        });                                                                                    \\
    }                                                                                          \\
    extern "C" void mv_##suffix##_n##NT(const unsigned char* raw, const float* x, float* out,  \\
                                        int n, int k, unsigned gx, unsigned by, unsigned bz) { \\
        g_raw = raw, g_x = x, g_out = out, g_n = n, g_k = k;                                   \\
        tk_host::run_grid(dim3{gx, 1, 1}, dim3{32, by, bz}, [] {                               \\
            mmvq<T, NT, false>(g_raw, g_x, nullptr, g_out, g_n, g_k, T::TS, T::QK, nullptr);   \\
        });                                                                                    \\
    }
"""


def _build(
    folder,
    bulk: bool,
    types=QUANTIZED_TYPES,
    defines: tuple[str, ...] = (),
    st_unroll: int = 2,
    mmvq_rpw: int = 1,
) -> ctypes.CDLL:
    kernel = (KERNELS / "matvec.cu").read_text()
    bounds = (
        "#define BOUNDS(raw, n, k, T) g_lo = raw; g_hi = raw + (long long)n * (k / T::QK) * T::TS;"
        "\n#define XBOUNDS(bytes) g_xlo = (const unsigned char*)g_xr; g_xhi = g_xlo + (bytes);"
        if bulk
        else "#define BOUNDS(raw, n, k, T)\n#define XBOUNDS(bytes)"
    )
    src = [PREAMBLE, BULK if bulk else "", with_static_shared(kernel), bounds]
    src += [f"#define SMEM_INT4S {SMEM_INTS // 4}", RUNNER]
    src += [f"RUN({t.suffix}, {t.device}, {nt})" for t in types for nt in NTS]
    flags = ("-std=c++17", "-DMV_UNROLL=1", f"-DMMVQ_RPW={mmvq_rpw}", f"-DMMVQ_ST_UNROLL={st_unroll}",
             f"-DRUN_INTS={matvec.RUN_BYTES // 4}", *(("-DTK_HOST_BULK",) if bulk else ()),
             *defines)  # fmt: skip
    return build(folder, "st_bulk" if bulk else "st_coop", "\n".join(src) + "\n", flags)


@pytest.fixture(scope="module", params=[True, False], ids=["bulk", "cooperative"])
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return request.param, _build(tmp_path_factory.mktemp("mmvqst"), request.param)


def _run_staged(lib, qt, raw, x, n, rows_per_tile, stages, wpr=1, rows_per_block=None, sms=1,
                qx=False, rows_per_warp=1):  # fmt: skip
    bulk, so = lib
    nt, k = x.shape
    geo, dyn, st, stage, rpt = matvec.staged_geometry(
        n, k, nt, qt, sms=sms, smem_max=SMEM_INTS * 4, rows_per_tile=rows_per_tile,
        stages=stages, blocks_per_sm=1, warps_per_row=wpr, rows_per_block=rows_per_block,
        rows_per_warp=rows_per_warp,
    )  # fmt: skip
    assert dyn <= SMEM_INTS * 4 and st == stages and rpt == rows_per_tile
    out = np.full((nt, n), np.nan, np.float32)  # poison: an output not written stays NaN
    ptr = ctypes.c_void_p
    copies = so.bulk_copies() if bulk else 0
    getattr(so, f"{'stq' if qx else 'st'}_{qt.suffix}_n{nt}")(
        ptr(raw.ctypes.data), ptr(x.ctypes.data), ptr(out.ctypes.data), n, k,
        geo.grid[0], geo.block[1], geo.block[2], st, stage, rpt,
    )  # fmt: skip
    if bulk:
        so.bulk_copies.restype = so.bulk_bad.restype = ctypes.c_longlong
        assert so.bulk_bad() == 0, "a bulk copy left the weight or broke its 16-byte rules"
        # one a tile (qx: and x's, one a block)
        tiles = -(-n // rows_per_tile)
        assert so.bulk_copies() - copies == tiles + (geo.grid[0] if qx else 0)
    return out, geo


def _run_mmvq(lib, qt, raw, x, n, wpr, rows_per_warp=1):
    _, so = lib
    nt, k = x.shape
    geo, _ = matvec.mmvq_geometry(n, k, nt, sms=1, wpr=wpr, warps_per_sm=8,
                                  rows_per_warp=rows_per_warp)  # fmt: skip
    out = np.full((nt, n), np.nan, np.float32)
    ptr = ctypes.c_void_p
    getattr(so, f"mv_{qt.suffix}_n{nt}")(
        ptr(raw.ctypes.data), ptr(x.ctypes.data), ptr(out.ctypes.data), n, k,
        geo.grid[0], geo.block[1], geo.block[2],
    )  # fmt: skip
    return out


def _assert_mmvqs_bits(lib, qt, raw, x, n, got, geo) -> None:
    """``got`` (a staged run's outputs) within ref_mmvq's bound and mmvq's bits at the same warps
    a row (the staged kernel computes mmvq's terms in mmvq's order)."""
    k = x.shape[1]
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert np.all(np.abs(got - want) <= gamma(k // 16 + 40) * mag)
    same = _run_mmvq(lib, qt, raw, x, n, geo.block[1])
    assert got.view(np.uint32).tolist() == same.view(np.uint32).tolist()


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
@pytest.mark.parametrize(
    "n, nt, rows_per_tile, stages, wpr, rows_per_block",
    [(1, 1, 8, 2, 1, None), (13, 3, 4, 3, 2, None), (70, 1, 16, 2, 1, None),
     (37, 3, 1, 5, 8, None), (45, 1, 6, 2, 4, None), (29, 3, 2, 4, 1, 2), (23, 1, 3, 3, 2, 1)],
)  # fmt: skip
def test_mmvq_st_on_the_host_matches_mmvq_bit_for_bit(
    lib, qt: QuantType, n: int, nt: int, rows_per_tile: int, stages: int, wpr: int,
    rows_per_block: int | None,
) -> None:  # fmt: skip
    # odd block counts: the rows' and the weight's ends fall off the 16-byte grid; tiles of
    # one row a warp and of several (16 rows on 8 warps, 6 on 2); blocks of fewer than 8
    # warps (2 rows of one warp, 1 row of two: smaller tiles)
    k = 3 * qt.block_size if qt.block_size > 32 else 160
    raw = aligned(weight(qt, n, k, seed=n + nt, tame=True)[0])
    x = random_x(nt, k, seed=nt)
    got, geo = _run_staged(lib, qt, raw, x, n, rows_per_tile, stages, wpr, rows_per_block)
    assert geo.block[2] == (rows_per_block or 8 // wpr)
    _assert_mmvqs_bits(lib, qt, raw, x, n, got, geo)


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
@pytest.mark.parametrize(
    "n, nt, rows_per_tile, stages, wpr, rows_per_block, sms",
    [(13, 3, 4, 3, 2, None, 1), (70, 1, 16, 2, 1, None, 1), (29, 3, 2, 4, 1, 2, 3)],
)  # fmt: skip
def test_mmvq_st_qx_copies_x_in_and_gives_the_fused_kernels_bits(
    lib, qt: QuantType, n: int, nt: int, rows_per_tile: int, stages: int, wpr: int,
    rows_per_block: int | None, sms: int,
) -> None:  # fmt: skip
    """mmvq_st_qx: x quantized first (quantize_x_for, quantize_q8_n<nt>'s body, into a buffer
    whose gaps are poisoned), then one bulk copy a block brings its runs in (inside that buffer,
    16-byte rules kept: the copy count is the tiles' plus one a block): the fused mmvq_st's bits
    and mmvq's, for 1 and 3 tokens and grids of 1 and 3 blocks."""
    k = 3 * qt.block_size if qt.block_size > 32 else 160
    raw = aligned(weight(qt, n, k, seed=n + nt, tame=True)[0])
    x = random_x(nt, k, seed=nt + 7)
    got, geo = _run_staged(lib, qt, raw, x, n, rows_per_tile, stages, wpr, rows_per_block, sms,
                           qx=True)  # fmt: skip
    fused, _ = _run_staged(lib, qt, raw, x, n, rows_per_tile, stages, wpr, rows_per_block, sms)
    assert got.view(np.uint32).tolist() == fused.view(np.uint32).tolist()
    _assert_mmvqs_bits(lib, qt, raw, x, n, got, geo)


def test_the_weights_last_bytes_come_by_plain_loads(lib) -> None:
    """A weight whose size is not a multiple of 16 (Q4_0: 90-byte rows, 13 rows = 1170 bytes):
    the bulk copies stop at byte 1168 (the span check above) and the last row is still right,
    so its last two bytes came some other way; a changed last byte changes the last output."""
    qt = next(t for t in QUANTIZED_TYPES if t.name == "Q4_0")
    n, k = 13, 160
    raw = aligned(weight(qt, n, k, seed=9, tame=True)[0])
    assert raw.nbytes % 16 == 2
    x = random_x(1, k, seed=3)
    got, _ = _run_staged(lib, qt, raw, x, n, 8, 2)
    want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
    assert np.all(np.abs(got - want) <= gamma(k // 16 + 40) * mag)
    bad = raw.copy()
    bad[-1] ^= 0x77  # the last block's last code byte: two codes change
    got_bad, _ = _run_staged(lib, qt, bad, x, n, 8, 2)
    assert got_bad[0, -1] != got[0, -1] and np.array_equal(got_bad[0, :-1], got[0, :-1])


def test_a_stage_count_that_does_not_fit_is_refused() -> None:
    qt = next(t for t in QUANTIZED_TYPES if t.name == "Q8_0")
    smem = 227 * 1024 - matvec.MMVQ_STATIC_SHARED
    with pytest.raises(matvec.KernelInputError, match="do not fit"):
        matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_tile=8, stages=4)
    with pytest.raises(ValueError, match="multiple of 4"):
        matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_tile=6, warps_per_row=2)
    with pytest.raises(ValueError, match="1 to 8 warps"):
        matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, warps_per_row=2, rows_per_block=8)
    geo, _, _, _, rpt = matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_block=2)
    assert geo.block == (32, 1, 2) and rpt == 6  # 32 KB tiles: 7 rows, rounded down to 2s
    geo, dyn, st, stage, rpt = matvec.staged_geometry(14336, 4096, 1, qt, 132, smem)
    # 4352-byte rows: 32 KB tiles of 7 rows, rounded down to the block's 8 rows -> one block-row
    assert (geo.block, geo.grid[0], st, stage, rpt) == ((32, 1, 8), 264, 2, 34832, 8)
    assert dyn == 128 * matvec.RUN_BYTES + 16 * 4 * matvec.RUN_GAP + 2 * 34832  # x's runs and gaps
    geo, _, _, stage, rpt = matvec.staged_geometry(151936, 896, 1, qt, 132, smem)
    assert rpt == 32 and stage == matvec.mmvq_stage_bytes(32 * 952)  # 952-byte rows


@pytest.fixture(scope="module", params=[2, 4], ids=["R2", "R4"])
def rows_a_warp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(R, the bulk library built with MMVQ_ST_RPW=R)."""
    folder = tmp_path_factory.mktemp(f"rpw{request.param}")
    return request.param, (True, _build(folder, True, defines=(f"-DMMVQ_ST_RPW={request.param}",)))


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_rows_walked_together_give_the_same_bits(lib, rows_a_warp, qt: QuantType) -> None:
    """MMVQ_ST_RPW=R: a warp walks R consecutive rows of its tile together (x read once for
    them): mmvq's bits and the one-row build's, for 1 and 3 tokens, one and two warps a row
    (write_row's shared-memory sum), blocks of 8 and of 2 warps, and row counts that leave the
    last tile's last rows past the matrix (read again, never written: poisoned outputs stay
    only where no row is)."""
    r, wide = rows_a_warp
    k = 3 * qt.block_size if qt.block_size > 32 else 160
    for nt, n, wpr, rb in ((1, 37, 1, None), (3, 13, 2, None), (1, 21, 1, 2)):
        raw = aligned(weight(qt, n, k, seed=n + nt + r, tame=True)[0])
        x = random_x(nt, k, seed=nt + r)
        rows_per_tile = 2 * r * (rb or 8 // wpr)  # two steps of the block's warps a tile
        got, geo = _run_staged(wide, qt, raw, x, n, rows_per_tile, 3, wpr, rb, rows_per_warp=r)
        assert geo.block[1:] == (wpr, rb or 8 // wpr)
        _assert_mmvqs_bits(wide, qt, raw, x, n, got, geo)
        one_row, _ = _run_staged(lib, qt, raw, x, n, rows_per_tile, 3, wpr, rb)
        assert got.view(np.uint32).tolist() == one_row.view(np.uint32).tolist()


def test_a_tile_not_whole_steps_of_rows_a_warp_is_refused() -> None:
    """Tiles are whole steps of the block's warps times the rows each walks: the default rounds
    down to them (Q4_0's 2304-byte rows: 32 KB tiles of 14 rows -> 8 at one row a warp, 0 -> 16
    at two), a given count that is not one is refused, naming both factors."""
    qt = next(t for t in QUANTIZED_TYPES if t.name == "Q4_0")
    smem = 227 * 1024 - matvec.MMVQ_STATIC_SHARED
    *_, rpt = matvec.staged_geometry(14336, 4096, 1, qt, 132, smem)
    assert rpt == 8
    geo, _, _, stage, rpt = matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_warp=2)
    assert geo.block == (32, 1, 8) and rpt == 16 and stage == matvec.mmvq_stage_bytes(16 * 2304)
    *_, rpt = matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_block=4,
                                     rows_per_warp=2)  # fmt: skip
    assert rpt == 8
    with pytest.raises(ValueError, match=r"multiple of 16 \(the block's rows, 8, times the rows a "
                       r"warp walks together, 2\)"):  # fmt: skip
        matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_tile=8, rows_per_warp=2)
    with pytest.raises(ValueError, match="rows per warp 3 must be 1, 2 or 4"):
        matvec.staged_geometry(14336, 4096, 1, qt, 132, smem, rows_per_warp=3)


@pytest.fixture(scope="module", params=[1, 2], ids=["R1", "R2"])
def x_held(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(R, the bulk library built with MMVQ_ST_XREG=128 and MMVQ_ST_RPW=R): a lane holds 128
    values of x (4 items of 32 values, 2 of 64, 1 of 128), at one item a lane (the engine's:
    the held items need it)."""
    r = request.param
    defines = ("-DMMVQ_ST_XREG=128", f"-DMMVQ_ST_RPW={r}")
    return r, (
        True,
        _build(tmp_path_factory.mktemp(f"xreg{r}"), True, defines=defines, st_unroll=1),
    )


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_x_held_in_registers_gives_the_same_bits(lib, x_held, qt: QuantType) -> None:
    """MMVQ_ST_XREG: a lane's first items take x from registers loaded once a block: mmvq's
    bits and the plain build's, where a row holds fewer items a lane than are held (3 blocks)
    and more (17 blocks of 256 values or 129 of 32: some lanes' last items read x from shared
    memory), at one and two warps a row, one and two rows a warp (MMVQ_ST_RPW), with the stage
    ring wrapping (one block, several tiles); and 3 tokens, which hold none. mmvq_st_qx too."""
    r, held = x_held
    for nt, blocks, wpr in ((1, 3, 1), (1, 17 if qt.block_size > 32 else 129, 1),
                            (1, 17 if qt.block_size > 32 else 129, 2), (3, 3, 1)):  # fmt: skip
        n, k = 21, blocks * qt.block_size
        raw = aligned(weight(qt, n, k, seed=blocks + nt, tame=True)[0])
        x = random_x(nt, k, seed=blocks + wpr)
        rows_per_tile = 16 // wpr  # whole steps of the block's rows at R = 1 and 2
        got, geo = _run_staged(held, qt, raw, x, n, rows_per_tile, 2, wpr, rows_per_warp=r)
        _assert_mmvqs_bits(held, qt, raw, x, n, got, geo)
        plain, _ = _run_staged(lib, qt, raw, x, n, rows_per_tile, 2, wpr)
        assert got.view(np.uint32).tolist() == plain.view(np.uint32).tolist()
        # mmvq_st_qx: x's runs bulk-copied in, then held the same way
        qx, _ = _run_staged(held, qt, raw, x, n, rows_per_tile, 2, wpr, qx=True, rows_per_warp=r)
        assert qx.view(np.uint32).tolist() == got.view(np.uint32).tolist()


@pytest.mark.parametrize("define", ["MMVQ_ST_EARLY_FILLS=1", "MMVQ_ST_X_FIRST=1", "MMVQ_X_LANES=1",
                                    "MMVQ_ST_EARLY_FILLS=1 MMVQ_ST_FILLS_AT_ARRIVAL=1",
                                    "MMVQ_ST_EARLY_FILLS=0 MMVQ_ST_FILLS_AT_ARRIVAL=1",
                                    "MMVQ_ST_X_FIRST=1 MMVQ_ST_EARLY_FILLS=1 MMVQ_ST_FILLS_AT_ARRIVAL=1"])  # fmt: skip
@pytest.mark.parametrize("stages", [2, 5])
def test_the_prologues_order_gives_the_same_bits(tmp_path, define: str, stages: int) -> None:
    """MMVQ_ST_EARLY_FILLS=1: one stage's first tile goes out before x is quantized, the others
    after; MMVQ_ST_X_FIRST=1: x's loads (a run a thread at most: 1 token of 768 values on 64
    threads; not 3 tokens, which take quantize_x's loop) before any copy; MMVQ_X_LANES=1: x
    quantized 8 lanes a run (mmvq's prologue too); MMVQ_ST_FILLS_AT_ARRIVAL=1: the first fills
    past the early ones wait for the block's first tile (at least one goes early, so 0 is 1
    there). The outputs and the copies (one a tile, inside the weight) are unchanged."""
    types = [t for t in QUANTIZED_TYPES if t.name in ("Q4_0", "Q4_K", "Q2_K", "IQ4_NL")]
    so = _build(tmp_path, True, types, tuple(f"-D{d}" for d in define.split()))
    for qt in types:
        for nt in (1, 3):
            n, k = 37, 3 * qt.block_size if qt.block_size > 32 else 160
            raw = aligned(weight(qt, n, k, seed=5, tame=True)[0])
            x = random_x(nt, k, seed=2)
            got, geo = _run_staged((True, so), qt, raw, x, n, 2, stages, rows_per_block=2)
            _assert_mmvqs_bits((True, so), qt, raw, x, n, got, geo)


# the types that declare Codes<T>::PAIR_G (scripts/mmvq_banks.py), with their items a block
PAIRED_ITEMS = {"Q4_0": 1, "IQ4_NL": 1, "Q5_0": 1, "Q8_0": 1, "Q2_K": 2, "Q3_K": 2, "Q6_K": 8}
PAIRED_TYPES = [t for t in QUANTIZED_TYPES if t.name in PAIRED_ITEMS]


@pytest.fixture(scope="module", params=[(1, 0), (2, 128)], ids=["R1", "R2-x-held"])
def paired(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(R, the bulk library built with MMVQ_PAIRED_BLOCKS=1, MMVQ_ST_RPW=R, and at R = 2 x held
    in registers, as Q4_0 declares it)."""
    r, xreg = request.param
    defines = ("-DMMVQ_PAIRED_BLOCKS=1", f"-DMMVQ_ST_RPW={r}", f"-DMMVQ_ST_XREG={xreg}")
    folder = tmp_path_factory.mktemp(f"paired{r}")
    return r, (True, _build(folder, True, PAIRED_TYPES, defines, st_unroll=1 if xreg else 2))


@pytest.mark.parametrize("qt", PAIRED_TYPES, ids=[t.name for t in PAIRED_TYPES])
def test_paired_blocks_give_mmvqs_bits(lib, paired, qt: QuantType) -> None:
    """MMVQ_PAIRED_BLOCKS: within each whole window of two items' blocks a lane's two items take
    blocks PAIR_G apart (a warp's load: the window's even groups of blocks, then its odd ones),
    a row's partial last window as before. mmvq and mmvq_st walk the same order: the same bits,
    within ref_mmvq's bound, at a warp's blocks of four items and one more (one warp a row: two
    whole windows and a block; two: one and the rest), one and three tokens (Q2_K, Q3_K: one
    window and a block), mmvq_st_qx too; and
    other bits than the plain order's (the terms are summed in another order), so the knob is
    what ran."""
    r, so = paired
    per_block = PAIRED_ITEMS[qt.name]
    differs = 0
    for nt, wpr in ((1, 1), (1, 2), (3, 1)):
        # (three tokens of the half-block types: one window and a block, x's runs fitting the
        # harness's buffer)
        items = 2 if nt == 3 and per_block == 2 else 4
        k = (items * 32 // per_block + 1) * qt.block_size
        n = 21
        raw = aligned(weight(qt, n, k, seed=wpr + nt, tame=True)[0])
        x = random_x(nt, k, seed=wpr + 3 * nt)
        # (the half-block types' 16640-value rows: tiles of 4 rows on blocks of 2 rows)
        rb = 2 if PAIRED_ITEMS[qt.name] == 2 else None
        rows_per_tile = 4 if rb else 16 // wpr
        got, geo = _run_staged(so, qt, raw, x, n, rows_per_tile, 2, wpr, rb, rows_per_warp=r)
        _assert_mmvqs_bits(so, qt, raw, x, n, got, geo)
        qx, _ = _run_staged(so, qt, raw, x, n, rows_per_tile, 2, wpr, rb, qx=True,
                            rows_per_warp=r)  # fmt: skip
        assert qx.view(np.uint32).tolist() == got.view(np.uint32).tolist()
        plain, _ = _run_staged(lib, qt, raw, x, n, rows_per_tile, 2, wpr, rb)
        differs += int(np.sum(got.view(np.uint32) != plain.view(np.uint32)))
    assert differs > 0, "every output has the plain order's bits: the pairing did not run"


@pytest.fixture(scope="module", params=[2, 4], ids=["R2", "R4"])
def rows_reduced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(R, the bulk library built with MMVQ_ROWS_REDUCE=1 and R rows a warp in both kernels)."""
    r = request.param
    defines = ("-DMMVQ_ROWS_REDUCE=1", f"-DMMVQ_ST_RPW={r}")
    folder = tmp_path_factory.mktemp(f"reduce{r}")
    return r, (True, _build(folder, True, defines=defines, mmvq_rpw=r))


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=[t.name for t in QUANTIZED_TYPES])
def test_rows_summed_across_lanes_together_give_the_same_bits(lib, rows_reduced, qt) -> None:
    """MMVQ_ROWS_REDUCE: a warp's R rows summed across its lanes in one butterfly (5 + R - 2
    shuffles, each lane ending with one row): the plain build's bits, of mmvq_st at R rows a
    warp and of mmvq at R rows a warp, against their one-row builds; one token on one warp a
    row (the knob's case, rows past the matrix left unwritten: n = 21), and three tokens or two
    warps a row (the rows written one by one, as before)."""
    r, reduced = rows_reduced
    k = 3 * qt.block_size if qt.block_size > 32 else 160
    for nt, n, wpr, rb in ((1, 21, 1, None), (1, 37, 1, 2), (3, 13, 1, None), (1, 21, 2, None)):
        raw = aligned(weight(qt, n, k, seed=n + nt + r, tame=True)[0])
        x = random_x(nt, k, seed=nt + r + wpr)
        rows_per_tile = 2 * r * (rb or 8 // wpr)
        got, geo = _run_staged(reduced, qt, raw, x, n, rows_per_tile, 3, wpr, rb, rows_per_warp=r)
        one_row, _ = _run_staged(lib, qt, raw, x, n, rows_per_tile, 3, wpr, rb)
        assert got.view(np.uint32).tolist() == one_row.view(np.uint32).tolist()
        mv = _run_mmvq(reduced, qt, raw, x, n, geo.block[1], rows_per_warp=r)
        mv_one = _run_mmvq(lib, qt, raw, x, n, geo.block[1])
        assert mv.view(np.uint32).tolist() == mv_one.view(np.uint32).tolist()
        assert not np.isnan(got).any() and not np.isnan(mv).any()  # every row written

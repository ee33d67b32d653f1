"""scripts/bulk_floor.py: its configurations (what fits shared memory), and its kernel run on the
host (tests/kernels/host_shim; the bulk copy a memcpy of the span the device would copy): through
a ring of 1-3 stages, with a ragged last tile, the blocks together read every word of the weight
once, which the script's XOR check against read_stream_reference relies on."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.scripts import load_script
from tests.test_first_bytes import BULK

RUNNER = """
int4 bf_smem[1 << 12];
static const unsigned char* g_raw; static long long g_total; static int g_tile, g_stages, g_early;
static unsigned* g_out;
extern "C" void run(const unsigned char* raw, long long total, int tile, int stages, int early,
                    unsigned* out, unsigned grid, unsigned threads) {
    g_raw = raw, g_total = total, g_tile = tile, g_stages = stages, g_early = early, g_out = out;
    tk_host::run_grid(dim3{grid, 1, 1}, dim3{threads, 1, 1}, [] {
        read_bulk(g_raw, g_total, g_tile, g_stages, 0, g_early, g_out, nullptr);
    });
}
"""


@pytest.fixture(scope="module")
def bf():
    return load_script("bulk_floor")


def test_configurations_that_fit_and_bad_ones_named(bf) -> None:
    got = bf.configs([9216, 36864], [2, 4], [1, 2], [0], smem_per_sm=233472,
                     smem_per_block=232448)  # fmt: skip
    rings = {(c["tile"], c["stages"], c["blocks_per_sm"]) for c in got}
    # 36864 x 4 = 144 KB a block: one block an SM fits, two do not
    assert (36864, 4, 1) in rings and (36864, 4, 2) not in rings
    assert (9216, 4, 2) in rings and (36864, 2, 2) in rings  # 2 x (72 KB + 1 KB) fit
    assert len(got) == 7 and {c["release"] for c in got} == {"late"}
    both = bf.configs([9216], [2], [2], [0, 47], 233472, 232448, ("late", "early"))
    assert [(c["spin_ns_per_kb"], c["release"]) for c in both] == [
        (0, "late"), (0, "early"), (47, "late"), (47, "early")]  # fmt: skip
    for kw, why in ((dict(tiles=[20]), "multiple of 16"), (dict(stages=[9]), "1 to 8"),
                    (dict(blocks_per_sm=[0]), ">= 1"), (dict(releases=("soon",)), "early or late")):  # fmt: skip
        a = dict(tiles=[16], stages=[2], blocks_per_sm=[1], spins=[0], smem_per_sm=1 << 20,
                 smem_per_block=1 << 20) | kw  # fmt: skip
        with pytest.raises(ValueError, match=why):
            bf.configs(**a)
    assert bf.ints("0,47") == [0, 47]
    with pytest.raises(ValueError, match="'x' in '1,x'"):
        bf.ints("1,x")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("early", [0, 1], ids=["late", "early"])
def test_the_kernel_on_the_host_reads_every_word_once(
    bf, tmp_path, stages: int, early: int
) -> None:
    from tests.kernels.host_build import KERNELS, aligned, build, with_static_shared
    from tests.kernels.test_mmvq_host import PREAMBLE
    from tracekit.kernels import matvec
    from tracekit.kernels.ceilings import read_stream_reference

    kernel = (KERNELS / "matvec.cu").read_text() + bf.SRC
    src = [PREAMBLE, BULK, with_static_shared(kernel), RUNNER]
    flags = ("-std=c++17", f"-DRUN_INTS={matvec.RUN_BYTES // 4}", "-DTK_HOST_BULK")
    so = build(tmp_path, f"bf{stages}{early}", "\n".join(src) + "\n", flags)
    grid, threads, tile = 3, 64, 208  # 13 granules a tile; 17 tiles, the last one 96 bytes
    total = 16 * tile + 96
    rng = np.random.default_rng(stages)
    raw = aligned(rng.integers(0, 256, total, dtype=np.uint8))
    out = np.full(grid * threads, 0xDEADBEEF, np.uint32)  # poison: a thread that did not write
    p = ctypes.c_void_p
    so.run(p(raw.ctypes.data), ctypes.c_longlong(total), tile, stages, early,
           p(out.ctypes.data), grid, threads)  # fmt: skip
    so.bulk_bad.restype = ctypes.c_longlong
    assert so.bulk_bad() == 0
    assert int(np.bitwise_xor.reduce(out)) == read_stream_reference(raw)
    # each block's own word: the XOR of exactly its tiles (tile j: block j mod grid)
    for b in range(grid):
        tiles = [raw[j * tile : (j + 1) * tile] for j in range(b, 17, grid)]
        want = read_stream_reference(np.concatenate(tiles))
        assert int(np.bitwise_xor.reduce(out[b * threads : (b + 1) * threads])) == want


@pytest.mark.gpu
def test_the_script_runs_on_the_gpu(tmp_path) -> None:
    pytest.importorskip("cupy")
    import json

    from tests.scripts import run_script

    out = tmp_path / "bf.json"
    got = run_script("bulk_floor", ["--tiles", "18432", "--stages", "2", "--blocks-per-sm", "2",
                                    "--spin-ns-per-kb", "0,47", "--release", "late,early",
                                    "--json", str(out)], tmp_path)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["spin_ns_per_kb"], r["release"]) for r in rows] == [
        (0, "late"), (0, "early"), (47, "late"), (47, "early")]  # fmt: skip
    for r in rows:
        assert 0 < r["pct_copy"] < 130 and r["own_us"] > 0

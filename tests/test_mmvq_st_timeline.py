"""scripts/mmvq_st_timeline.py: an mmvq_st launch's block timeline read as ramp, stream and tail."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from tests.scripts import load_script, run_script


@pytest.fixture(scope="module")
def tl_mod():
    return load_script("mmvq_st_timeline")


def _timeline(m, grid, tiles, arrival_ns, compute_ns=100, t0=1_000_000):
    """Block b enters at t0 + 10 b, x ready 200 ns later; tile j arrives at arrival_ns(j)."""
    tl = np.zeros((m.TL_BLOCKS, m.TL_EVENTS), np.uint64)
    for b in range(grid):
        tl[b, m.TL_ENTRY] = t0 + 10 * b
        tl[b, m.TL_X] = t0 + 10 * b + 200
        last = tl[b, m.TL_X]
        for u, j in enumerate(range(b, tiles, grid)):
            tl[b, 2 + 2 * u] = max(int(last), t0 + arrival_ns(j))
            tl[b, 3 + 2 * u] = tl[b, 2 + 2 * u] + compute_ns
            last = tl[b, 3 + 2 * u]
        tl[b, m.TL_EXIT] = last + 50
    return tl


def test_phases_of_a_known_timeline(tl_mod):
    grid, tiles, tb = 4, 10, 1000
    tl = _timeline(tl_mod, grid, tiles, lambda j: 1000 + 500 * j)  # 1000 bytes / 500 ns = 2 GB/s
    p = tl_mod.phases(tl, grid, tiles, [tb] * tiles, copy_bps=4e9, bin_s=1e-6)
    assert p["last_entry_us"] == pytest.approx(0.03)
    assert p["x_ready_median_us"] == pytest.approx(0.215)
    assert p["first_arrival_us"] == pytest.approx([1.0, 1.75, 2.5])
    assert p["last_arrival_us"] == pytest.approx(1.0 + 0.5 * 9)
    # the last tile (block 1's third) is computed 100 ns after it arrives, then 50 ns to leave
    assert p["end_us"] == pytest.approx(5.5 + 0.15)
    assert p["tail_us"] == pytest.approx(0.15)
    # each tile computed in 100 ns; a block's next tile comes 2000 ns after its last
    assert p["compute_median_us"] == pytest.approx(0.1)
    assert p["wait_us"] == pytest.approx([1.9, 1.9])
    assert p["steady_pct_copy"] == pytest.approx(50.0)  # 2 GB/s of 4
    assert p["whole_pct_copy"] == pytest.approx(100 * tiles * tb / 5.65e-6 / 4e9)
    # every byte in some bin: the bins' mean is the whole launch's bytes over the bins' span
    bins = p["bins_pct_copy"]
    assert len(bins) == 6
    assert sum(bins) * 1e-6 * 4e9 / 100 == pytest.approx(tiles * tb)
    assert bins[0] == 0  # nothing arrives in the first µs


def test_phases_refuses_a_broken_timeline(tl_mod):
    grid, tiles = 4, 10
    tl = _timeline(tl_mod, grid, tiles, lambda j: 1000 + 500 * j)
    tl[2, 3] = 0  # block 2's first tile never computed
    with pytest.raises(ValueError, match="block 2: events missing or out of order"):
        tl_mod.phases(tl, grid, tiles, [1000] * tiles, 4e9, 1e-6)
    tl = _timeline(tl_mod, grid, tiles, lambda j: 1000 + 500 * j)
    tl[1, 2], tl[1, 3] = tl[1, 3], tl[1, 2]  # computed before it arrived
    with pytest.raises(ValueError, match="block 1"):
        tl_mod.phases(tl, grid, tiles, [1000] * tiles, 4e9, 1e-6)
    with pytest.raises(ValueError, match="15 a block: the timeline notes 14"):
        tl_mod.phases(tl, 2, 30, [1000] * 30, 4e9, 1e-6)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_instrumented_kernel_on_the_host_notes_what_the_script_reads(tl_mod, tmp_path):
    """matvec.cu built with MMVQ_ST_TIMELINE=1 on the host (the shim's global timer: a counter,
    one step a read): every block of a grid-strided launch notes its entry, x, each of its
    tiles' arrival and compute and its exit, in the slots and order phases() reads, and the
    outputs keep mmvq's bits."""
    from tests.kernels.host_build import aligned
    from tests.kernels.test_matvec import random_x, weight
    from tests.kernels.test_mmvq_staged_host import _build, _run_mmvq, _run_staged
    from tracekit.quants import quant_type

    qt = quant_type("Q4_K")
    so = _build(tmp_path, True, types=[qt], defines=("-DMMVQ_ST_TIMELINE=1",))
    tl = (ctypes.c_uint64 * (tl_mod.TL_BLOCKS * tl_mod.TL_EVENTS)).in_dll(so, "mmvq_st_timeline")
    n, k, rows_per_tile = 45, 512, 4
    raw = aligned(weight(qt, n, k, seed=5, tame=True)[0])
    x = random_x(1, k, seed=2)
    got, geo = _run_staged((True, so), qt, raw, x, n, rows_per_tile, 3, rows_per_block=2, sms=3)
    grid, tiles = geo.grid[0], -(-n // rows_per_tile)
    assert (grid, tiles) == (3, 12)  # 4 tiles a block: the stage ring wraps
    marks = np.ctypeslib.as_array(tl).reshape(tl_mod.TL_BLOCKS, tl_mod.TL_EVENTS)
    tile_bytes = [min(rows_per_tile, n - j * rows_per_tile) * qt.row_bytes(k) for j in range(tiles)]
    p = tl_mod.phases(marks, grid, tiles, tile_bytes, copy_bps=1e9, bin_s=1e-6)
    assert p["end_us"] > p["last_arrival_us"] > 0
    for b in range(grid):  # the slots past a block's 4 tiles stay empty but for the exit
        assert np.count_nonzero(marks[b]) == 2 + 2 * 4 + 1
    assert not marks[grid:].any()
    same = _run_mmvq((True, so), qt, raw, x, n, geo.block[1])
    assert got.view(np.uint32).tolist() == same.view(np.uint32).tolist()


@pytest.mark.gpu
def test_the_instrumented_kernel_notes_every_event_in_order(tmp_path):
    pytest.importorskip("cupy")
    for config in ("", "rows_per_block=2,rows_per_tile=2,blocks_per_sm=8,stages=3"):
        got = run_script("mmvq_st_timeline", ["--types", "Q4_0,Q6_K", "--shape", "4100x4096",
                                              "--runs", "2", "--config", config], tmp_path)  # fmt: skip
        assert got.returncode == 0, got.stderr[-3000:]
        assert got.stdout.count("median of runs") == 2

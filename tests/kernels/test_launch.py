"""The grid contract of tracekit/kernels/launch.py: ceil-div over a 64-bit total, the x-dimension
clamp (the kernel then strides), threads launched vs working, and bad inputs named."""

from __future__ import annotations

import pytest

from tracekit.kernels.launch import (
    DEFAULT_BLOCK,
    MAX_GRID_X,
    MAX_GRID_YZ,
    Geometry,
    LaunchRecord,
    ceil_div,
    grid_1d,
    grid_rows,
)


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(0, 256, 0), (1, 256, 1), (255, 256, 1), (256, 256, 1), (257, 256, 2),
     (2**40 + 1, 256, 2**32 + 1), (2**63 - 1, 2**31, 2**32), (3 * 2**32, 1024, 3 * 2**22)],
)  # fmt: skip
def test_ceil_div_is_exact_past_32_bits(a: int, b: int, want: int) -> None:
    assert ceil_div(a, b) == want
    assert (want - 1) * b < a <= want * b or a == want == 0


@pytest.mark.parametrize(("a", "b", "what"), [(5, 0, "divisor 0"), (5, -3, "divisor -3"),
                                              (-1, 4, "dividend -1")])  # fmt: skip
def test_ceil_div_names_the_bad_operand(a: int, b: int, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        ceil_div(a, b)


@pytest.mark.parametrize("total", [1, 255, 256, 257, 1823 * 781, 2**31 + 7])
def test_grid_1d_covers_every_item_with_less_than_a_block_spare(total: int) -> None:
    g = grid_1d(total)
    assert g.block == (DEFAULT_BLOCK, 1, 1) and g.grid[1:] == (1, 1)
    assert g.work_items == total
    assert total <= g.threads_launched < total + DEFAULT_BLOCK
    assert not g.strided


def test_a_64_bit_total_clamps_the_x_dimension_and_strides() -> None:
    total = MAX_GRID_X * 256 + 1  # one item more than a full x-dimension of 256-thread blocks
    g = grid_1d(total, 256)
    assert g.grid == (MAX_GRID_X, 1, 1)
    assert g.threads_launched == MAX_GRID_X * 256 < total
    assert g.strided  # the kernel must grid-stride: the clamp dropped no work
    rec = LaunchRecord.of("k", g)
    assert rec.threads_launched == MAX_GRID_X * 256
    assert rec.threads_working == rec.threads_launched  # every launched thread has work


def test_a_lower_cap_is_honoured_and_says_strided() -> None:
    g = grid_1d(10_000, 128, max_grid=3)
    assert g.grid == (3, 1, 1) and g.threads_launched == 384 and g.strided


def test_an_empty_launch_is_one_block_with_no_work() -> None:
    g = grid_1d(0)
    assert g.grid == (1, 1, 1) and g.work_items == 0
    rec = LaunchRecord.of("k", g)
    assert rec.threads_launched == DEFAULT_BLOCK and rec.threads_working == 0


def test_threads_working_is_the_items_not_the_rounded_up_threads() -> None:
    rec = LaunchRecord.of("k", grid_1d(1000, 256))
    assert (rec.threads_launched, rec.threads_working) == (1024, 1000)
    assert LaunchRecord.of("k", grid_1d(1000, 256), threads_working=7).threads_working == 7


def test_threads_launched_multiplies_all_six_dimensions() -> None:
    g = Geometry((3, 5, 7), (32, 2, 2), 1)
    assert g.threads_launched == 3 * 5 * 7 * 32 * 2 * 2
    rec = LaunchRecord.of("k", g).to_json()
    assert rec["grid"] == [3, 5, 7] and rec["block"] == [32, 2, 2]


@pytest.mark.parametrize(("kw", "what"), [({"total": -1}, "count -1"),
                                          ({"total": 8, "block": 0}, "block size 0"),
                                          ({"total": 8, "block": 1025}, "block size 1025")])  # fmt: skip
def test_grid_1d_names_bad_inputs(kw: dict, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        grid_1d(**kw)


def test_grid_rows_puts_rows_in_x_and_column_tiles_in_y() -> None:
    g = grid_rows(7, 130, 64)  # seed §3.1: grid.x is the ROW count, never rows * cols
    assert g.grid == (7, 3, 1) and g.block == (64, 1, 1) and g.work_items == 7 * 130
    assert grid_rows(MAX_GRID_X, 1, 64).grid[0] == MAX_GRID_X


@pytest.mark.parametrize(("rows", "cols", "what"), [
    (MAX_GRID_X + 1, 4, f"row count {MAX_GRID_X + 1} exceeds"),
    (1, 64 * MAX_GRID_YZ + 1, f"{64 * MAX_GRID_YZ + 1} columns need 65536 column tiles"),
    (-1, 4, "rows -1"),
])  # fmt: skip
def test_grid_rows_names_what_is_over_the_limit(rows: int, cols: int, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        grid_rows(rows, cols, 64)


def test_a_record_takes_bytes_from_the_real_arrays() -> None:
    import numpy as np

    x, y = np.zeros(10, np.float32), np.zeros((3, 4), np.float16)
    rec = LaunchRecord.of("k", grid_1d(10), reads=[x, x], writes=[y], flops=20)
    assert (rec.bytes_read, rec.bytes_written, rec.flops) == (80, 24, 20)
    assert LaunchRecord.of("k", None, reads=[x], bytes_read=4).bytes_read == 4


# -- the one launch path: the object that launches is the object that is recorded --------------
def test_a_kernel_launch_issues_exactly_the_geometry_it_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    from tracekit.kernels import cuda

    calls: list[tuple] = []

    def fake_fn(grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        calls.append((grid, block, args, shared_mem))

    monkeypatch.setattr(cuda, "kernel", lambda family, name: fake_fn)
    geo = grid_1d(2**31 * 3, 512)  # clamped: what runs is the clamped grid
    args = (np.int64(5),)
    rec = cuda.run("stats", "stats_batch_reduce", geo, args, 64, bytes_read=12, flops=3)
    assert calls == [(geo.grid, geo.block, args, 64)]
    assert (rec.kernel, rec.grid, rec.block) == ("stats_batch_reduce", geo.grid, geo.block)
    assert rec.threads_launched == geo.threads_launched and rec.bytes_read == 12
    tape = cuda.LaunchTape()
    k = cuda.KernelLaunch("stats", "stats_batch_hist_heat", grid_1d(10), args)
    with cuda.recording(tape):
        k.issue()
        k.issue()
    assert [(e[1], e[2]) for e in tape.entries] == [(k.record.grid, k.record.block)] * 2

"""CPU tests of tensor statistics: the NumPy path against direct NumPy formulas and a cell loop,
JSON-readiness, the heatmap codec, and StatsBatch (a step's statistics at once) against
tensor_stats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.stats import (
    StatsBatch,
    _format_batch,
    decode_heatmap,
    encode_heatmap,
    tensor_stats,
)


def planted(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    flat = x.reshape(-1)
    flat[[3, 50]] = np.nan
    flat[7] = np.inf
    flat[[11, 12, 13]] = -np.inf
    flat[[20, 21]] = 0.0
    return x


def test_summary_with_planted_specials():
    x = planted((37, 130))
    st = tensor_stats(x, axes=("tokens", "features"))
    json.dumps(st, allow_nan=False)  # JSON-ready, no NaN literal
    v = x[np.isfinite(x)].astype(np.float64)
    assert st["count"] == x.size
    assert (st["nan"], st["pos_inf"], st["neg_inf"]) == (2, 1, 3)
    assert st["zeros"] == int((x == 0).sum()) >= 2
    assert st["min"] == float(v.min()) and st["max"] == float(v.max())
    assert st["absmax"] == float(np.abs(v).max())
    assert st["mean"] == pytest.approx(v.mean(), rel=1e-12)
    assert st["std"] == pytest.approx(v.std(), rel=1e-9)
    h = st["hist"]
    assert len(h["edges"]) == 33 and len(h["counts"]) == 32
    assert sum(h["counts"]) == v.size
    assert h["edges"][0] == st["min"] and h["edges"][-1] == pytest.approx(st["max"])
    want, _ = np.histogram(v, bins=32, range=(v.min(), v.max()))
    # Same bins as NumPy's histogram up to values on an edge (float64 rounding of the edge).
    assert np.abs(np.array(h["counts"]) - want).sum() <= 2


def naive_cells(a2, R, C):
    n, m = a2.shape
    out = np.empty((R, C))
    for r in range(R):
        for c in range(C):
            blk = a2[r * n // R : (r + 1) * n // R, c * m // C : (c + 1) * m // C].astype(
                np.float64
            )
            out[r, c] = blk.mean() if np.isfinite(blk).all() else np.nan
    return out


@pytest.mark.parametrize(
    "shape,grid",
    [
        ((37, 130), (32, 64)),
        ((5, 3, 130), (4, 7)),
        ((100,), (32, 64)),
        ((64, 64), (32, 64)),
        ((1, 1), (3, 3)),
    ],
)
def test_heatmap_keeps_layout_and_means(shape, grid):
    x = (
        planted(shape, seed=1)
        if np.prod(shape) > 60
        else np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    )
    st = tensor_stats(x, bins=8, heat_rows=grid[0], heat_cols=grid[1])
    hm = st["heatmap"]
    n_rows, n_cols = int(np.prod(shape[:-1])), shape[-1]
    assert (hm["rows"], hm["cols"]) == (min(grid[0], n_rows), min(grid[1], n_cols))
    assert hm["source_shape"] == list(shape) and hm["axes"] == ["rows", "cols"]
    want = naive_cells(x.reshape(n_rows, n_cols), hm["rows"], hm["cols"])
    got = decode_heatmap(hm)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert hm["lo"] == pytest.approx(want[ok].min()) and hm["hi"] == pytest.approx(want[ok].max())
    step = (hm["hi"] - hm["lo"]) / 254
    np.testing.assert_allclose(got[ok], want[ok], atol=step / 2 + 1e-12)


def test_no_finite_values():
    x = np.array([[np.nan, np.inf], [-np.inf, np.nan]], dtype=np.float32)
    st = tensor_stats(x)
    json.dumps(st, allow_nan=False)
    assert st["min"] is None and st["mean"] is None and st["absmax"] is None
    assert st["hist"] == {"edges": [], "counts": []}
    assert st["heatmap"]["lo"] is None
    assert np.isnan(decode_heatmap(st["heatmap"])).all()


def test_constant_tensor():
    st = tensor_stats(np.full((4, 5), 2.5, dtype=np.float16), bins=4)
    assert st["min"] == st["max"] == st["mean"] == 2.5 and st["std"] == 0.0
    assert st["hist"]["counts"] == [0, 0, 20, 0]
    assert st["hist"]["edges"][0] < 2.5 < st["hist"]["edges"][-1]
    np.testing.assert_array_equal(decode_heatmap(st["heatmap"]), np.full((4, 5), 2.5))


def test_scalar_empty_and_ints():
    s = tensor_stats(np.float32(3.0))
    assert s["count"] == 1 and s["heatmap"]["rows"] == 1 and s["heatmap"]["source_shape"] == []
    e = tensor_stats(np.zeros((0, 8), dtype=np.float32))
    assert e["count"] == 0 and e["min"] is None and e["heatmap"]["rows"] == 0
    json.dumps(e, allow_nan=False)
    i = tensor_stats(np.array([5, 1, 9], dtype=np.int32))
    assert (i["min"], i["max"], i["mean"]) == (1.0, 9.0, 5.0)


def test_gates():
    x = np.zeros((2, 2), np.float32)
    with pytest.raises(KernelInputError, match="bins"):
        tensor_stats(x, bins=0)
    with pytest.raises(KernelInputError, match="grid"):
        tensor_stats(x, heat_rows=0)
    with pytest.raises(KernelInputError, match="axes"):
        tensor_stats(x, axes=("tokens",))
    with pytest.raises(KernelInputError, match="numeric"):
        tensor_stats(np.array(["a"]))


def test_encode_decode_roundtrip():
    cells = np.array([[0.0, 1.0, np.nan], [0.5, -np.inf, 0.25]])
    lo, hi, codes = encode_heatmap(cells)
    assert (lo, hi) == (0.0, 1.0)
    got = decode_heatmap(dict(rows=2, cols=3, lo=lo, hi=hi, codes=codes))
    np.testing.assert_array_equal(np.isnan(got), ~np.isfinite(cells))
    np.testing.assert_allclose(got[np.isfinite(cells)], cells[np.isfinite(cells)], atol=1 / 508)
    with pytest.raises(ValueError, match="rows\\*cols"):
        decode_heatmap(dict(rows=3, cols=3, lo=lo, hi=hi, codes=codes))


# -- StatsBatch -----------------------------------------------------------------------------
def mixed_tensors() -> list[np.ndarray]:
    """Sizes 1, 7, 4096 and 1e6+3, 1-D/2-D/3-D, f32/f16/f64/int32/bool, planted NaN/±Inf/zeros,
    an all-NaN and a constant tensor, an empty one, a scalar, extreme finite f32 values."""
    rng = np.random.default_rng(3)
    xs = [planted((37, 130)), planted((5, 3, 130), seed=2), planted((64, 64), dtype=np.float16)]
    for shape in [(1,), (7,), (4096,), (1_000_003,), (1, 576), (16, 1536)]:
        for dt in (np.float32, np.float16, np.float64):
            xs.append((rng.standard_normal(shape) * 2 + 0.5).astype(dt))
    xs += [
        planted((1_000_003,), seed=4),
        np.full((3, 3), np.nan, np.float32),
        np.full((4, 5), 2.5, np.float32),
        np.full((2, 3), -0.0, np.float32),  # all zeros: absmax of (-0.0, 0.0) ties
        np.zeros((0, 8), np.float32),
        np.float32(3.0),
        np.array([[3, 1, 2]], np.int32),
        np.array([True, False, True]),
        np.array([3e38, -3e38, 1.0], np.float32),
        np.full((2, 3), 1e-310),  # subnormal: the histogram window of a constant tensor
    ]
    return xs


@pytest.mark.parametrize("grid", [(32, 64, 32), (3, 5, 7)])
def test_batch_numpy_equals_tensor_stats(grid):
    rows, cols, bins = grid
    xs = mixed_tensors()
    b = StatsBatch(bins=bins, heat_rows=rows, heat_cols=cols)
    for i, x in enumerate(xs):
        b.add(("node", i), x, axes=("tokens", "features"))
    assert len(b) == len(xs) and b.nbytes == sum(x.nbytes for x in xs)
    got = b.finish()
    assert list(got) == [("node", i) for i in range(len(xs))]  # in the order added
    for i, x in enumerate(xs):
        want = tensor_stats(x, axes=("tokens", "features"), bins=bins, heat_rows=rows,
                            heat_cols=cols)  # fmt: skip
        # as JSON: the same keys in the same order, and -0.0 told apart from 0.0
        assert json.dumps(got[("node", i)], allow_nan=False) == json.dumps(want), (i, x.shape)
    assert len(b) == 0 and b.nbytes == 0 and b.finish() == {}  # finish() empties the batch


def test_batch_keeps_references_unless_copied():
    """A reference sees later in-place writes; copy=True keeps the values as they were."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = tensor_stats(x)
    b = StatsBatch()
    b.add("ref", x)
    b.add("copy", x, copy=True)
    x += 100.0
    got = b.finish()
    assert got["copy"] == before
    assert got["ref"] == tensor_stats(x) != before


def test_batch_collect_then_format():
    b = StatsBatch()
    xs = [planted((9, 70), seed=s) for s in range(3)]
    for i, x in enumerate(xs):
        b.add(i, x)
    r = b.collect()
    assert len(r) == 3 and len(b) == 0 and b.launches == []  # NumPy: no kernel launches
    xs[0][:] = 0.0  # collect() already read the tensors
    assert r.format() == {i: tensor_stats(planted((9, 70), seed=i)) for i in range(3)}


def test_batch_gates():
    b = StatsBatch()
    b.add("a", np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="'a' was already added"):
        b.add("a", np.zeros(3, np.float32))
    with pytest.raises(KernelInputError, match="numeric"):
        b.add("s", np.array(["x"]))
    with pytest.raises(KernelInputError, match="axes"):
        b.add("b", np.zeros(3, np.float32), axes=("tokens",))
    with pytest.raises(KernelInputError, match="bins"):
        StatsBatch(bins=5000)
    b.add("c", np.zeros((2, 2), np.float32), axes=["tokens", "features"])  # a list is fine
    assert b.finish()["c"]["heatmap"]["axes"] == ["tokens", "features"]


def test_format_batch_ignores_device_init_values_without_finite_values():
    """The device reduction starts min/max at +inf/-inf: a tensor with no finite value keeps
    them, and the formatter must report None and an empty histogram (as tensor_stats)."""
    x = np.array([[np.nan, np.inf, -np.inf]], np.float32)
    want = tensor_stats(x)
    d = np.array([[np.inf, -np.inf, 0.0, 0.0]])
    u = np.array([[0, 1, 1, 1, 0]], np.uint64)
    hist = np.zeros((1, 32), np.uint64)
    cells = np.full(3, np.nan)
    (got,) = _format_batch([("k", (1, 3), ("rows", "cols"), 1, 3)], d, u, hist, cells,
                           np.array([0, 3]), 32)  # fmt: skip
    assert got == want


@pytest.mark.parametrize("sizes", [[(1, 896)], [(1, 896), (1, 151936), (7, 3), (16, 64)],
                                   [(1, 1)] * 3 + [(2, 9000)]])  # fmt: skip
def test_batch_table_maps_every_block_to_its_tensor(sizes):
    # the kernels read block b's tensor at block_tensor[b] (stats.cu): the tensor t whose
    # prefix range holds b, reduction blocks first, then heatmap blocks
    from tracekit.kernels import stats

    descs = []
    for shape in sizes:
        _, _, R, C = stats._grid(shape, 32, 64)
        descs.append(stats.device_desc(0, shape[0], shape[1], R, C, 0))
    lay = stats.batch_layout(descs, 32)
    T = len(sizes)
    tab = stats.batch_table(lay)
    desc, red, heat = stats.table_views(tab, T)
    assert (red == lay["red_start"]).all() and (heat == lay["heat_start"]).all()
    n_red, n_heat = lay["n_red"], lay["n_heat"]
    block_tensor = tab[len(desc) + 2 * (T + 1) :].view(np.int32)
    assert block_tensor.size in (n_red + n_heat, n_red + n_heat + 1)  # padded to a word
    for b in range(n_red):
        assert block_tensor[b] == np.searchsorted(lay["red_start"], b, "right") - 1
    for h in range(n_heat):
        assert block_tensor[n_red + h] == np.searchsorted(lay["heat_start"], h, "right") - 1

"""Derived tables of the dashboard (tracekit/viz/data.py), on synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest

from tests.viz.conftest import make_trace
from tracekit.trace.diff import diff_traces
from tracekit.viz import data as d


def _id(trace, name):
    return next(n["id"] for n in trace["nodes"] if n["name"] == name)


def test_grid_layout_rows_per_layer_and_columns_per_kind(small_trace):
    lay = d.grid_layout(small_trace["nodes"])
    assert lay.rows == ("input", "blk.0", "blk.1", "output")
    assert lay.cols[:3] == ("attn_norm", "attn_q", "attn_k")
    assert lay.cell[_id(small_trace, "token_embd")] == (0, 0)
    assert lay.cell[_id(small_trace, "blk.1.attn_q")] == (2, 1)
    assert lay.cell[_id(small_trace, "output")] == (3, 1)
    # every node has its own cell, and the reverse map agrees
    assert len(set(lay.cell.values())) == len(small_trace["nodes"])
    assert all(lay.node_at(*rc) == i for i, rc in lay.cell.items())
    assert lay.node_at(0, 5) is None


def test_grid_layout_gives_a_repeated_kind_its_own_column():
    nodes = [
        dict(id=0, name="blk.0.a", layer=0),
        dict(id=1, name="blk.0.b", layer=0),
        dict(id=2, name="x", layer=0),  # not prefixed: kind "x"
        dict(id=3, name="blk.1.a", layer=1),
    ]
    nodes.append(dict(id=4, name="blk.1.a", layer=1))
    lay = d.grid_layout(nodes)
    assert lay.cell[4] != lay.cell[3] and lay.cell[4][0] == lay.cell[3][0]


def test_inputs_weights_and_consumers(small_trace):
    mul = _id(small_trace, "blk.0.ffn_mul")
    assert [small_trace["nodes"][i]["name"] for i in d.input_ids(small_trace, mul)] == [
        "blk.0.ffn_act",
        "blk.0.ffn_up",
    ]
    up = _id(small_trace, "blk.0.ffn_up")
    assert d.weight_inputs(small_trace, up) == ["blk.0.ffn_up.weight"]
    assert d.consumer_ids(small_trace, up) == [mul]
    assert d.consumer_ids(small_trace, _id(small_trace, "output")) == []


def test_measure_values_units(small_trace):
    recs = small_trace["steps"][0]["nodes"]
    t = d.measure_values(small_trace, 0, "time")
    assert t[3] == pytest.approx(recs[3]["time_s"] * 1e6)
    frac = d.measure_values(small_trace, 0, "fraction")
    assert frac[3] == pytest.approx(100 * recs[3]["perf"]["fraction_of_ceiling"])
    absmax = d.measure_values(small_trace, 0, "absmax")
    assert absmax[3] == recs[3]["stats"]["absmax"]
    with pytest.raises(ValueError, match="measure 'speed' is not one of"):
        d.measure_values(small_trace, 0, "speed")


def test_first_nonfinite_is_the_first_poisoned_record():
    tr = make_trace(nan_from="blk.0.ffn_up")
    assert d.first_nonfinite(tr) == (1, _id(tr, "blk.0.ffn_up"))
    assert d.first_nonfinite(make_trace()) is None
    assert d.first_nonfinite(make_trace(capture="timing")) is None


def test_slowest_nodes_sorted_with_shares(small_trace):
    rows = d.slowest_nodes(small_trace, 5)
    totals = [r["total_s"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    all_t = sum(r["time_s"] for s in small_trace["steps"] for r in s["nodes"])
    assert rows[0]["share"] == pytest.approx(totals[0] / all_t)
    i = rows[0]["id"]
    dec = [s["nodes"][i]["time_s"] for s in small_trace["steps"][1:]]
    assert rows[0]["decode_mean_s"] == pytest.approx(np.mean(dec))


def test_bound_counts_cover_every_record(small_trace):
    counts = d.bound_counts(small_trace)
    n = len(small_trace["nodes"])
    assert sum(counts["prefill"].values()) == n
    assert sum(counts["decode"].values()) == n * (len(small_trace["steps"]) - 1)


def test_family_times_sum_to_step_time(small_trace):
    ft = d.family_times(small_trace)
    for j, s in enumerate(small_trace["steps"]):
        assert sum(v[j] for v in ft.values()) == pytest.approx(sum(r["time_s"] for r in s["nodes"]))


def test_capture_summary(small_trace):
    cap = d.capture_summary(small_trace)
    costs = [r["capture_cost"] for s in small_trace["steps"] for r in s["nodes"]]
    assert cap["median_cost"] == pytest.approx(float(np.median(costs)))
    assert cap["worst_cost"][0] == pytest.approx(max(costs))
    assert cap["time_ratio"] == pytest.approx(1.02)
    assert cap["wall_ratio"] == pytest.approx(1.5 / 1.2)
    recs = [r for s in small_trace["steps"] for r in s["nodes"]]
    want = sum(r["full_host_s"] for r in recs) / sum(r["host_s"] for r in recs)
    assert cap["host_ratio"] == pytest.approx(want)
    timing = d.capture_summary(make_trace(capture="timing"))
    assert timing["median_cost"] is None and timing["host_ratio"] is None
    assert cap["pdl"] is False  # a trace without run.pdl: plain launches
    pdl = {**small_trace, "run": {**small_trace["run"], "pdl": True}}  # (a session fixture)
    assert d.capture_summary(pdl)["pdl"] is True


def test_generated_text_through_a_step(small_trace):
    chosen = [s["logits"]["chosen"]["text"] for s in small_trace["steps"]]
    assert d.generated_text(small_trace, 1) == chosen[0] + chosen[1]


def test_launch_notes_say_how_the_kernel_ran() -> None:
    base = {"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1], "threads_launched": 32,
            "threads_working": 32, "bytes_read": 8, "bytes_written": 4, "flops": 1}  # fmt: skip
    assert d.launch_notes(base) == "—"
    mmvq = {**base, "extra": {"path": "quant", "epilogue": "bias", "shared_bytes": 1024}}
    assert d.launch_notes(mmvq) == "bias in the epilogue; 1.02 KB dynamic shared"
    att = {**base, "extra": {"splits": 19}}
    assert d.launch_notes(att) == "keys split over 19 blocks"
    assert d.launch_notes({**base, "extra": {"splits": 1}}) == "—"
    staged = {**base, "extra": {"path": "quant", "shared_bytes": 43776, "stages": 2,
                                "rows_per_tile": 8, "rows_per_warp": 2, "blocks_per_sm": 4,
                                "x_held": 128}}  # fmt: skip
    assert d.launch_notes(staged) == (
        "43.8 KB dynamic shared; 2 stages of 8 rows; 2 rows a warp; 4 blocks an SM; "
        "x held in registers (128 a lane)"
    )
    one_row = {**staged, "extra": {**staged["extra"], "rows_per_warp": 1, "x_held": 0}}
    assert d.launch_notes(one_row) == "43.8 KB dynamic shared; 2 stages of 8 rows; 4 blocks an SM"
    rec = {"launches": [mmvq, att]}
    assert [r["notes"] for r in d.launch_rows(rec, "cupy")] == [
        "bias in the epilogue; 1.02 KB dynamic shared",
        "keys split over 19 blocks",
    ]


def test_launch_rows_show_threads_working_of_launched(small_trace):
    rec = small_trace["steps"][0]["nodes"][0]
    row = d.launch_rows(rec)[0]
    la = small_trace["steps"][0]["nodes"][0]["launches"][0]
    assert row["grid"] == "×".join(map(str, la["grid"]))
    assert row["threads"].startswith(f"{la['threads_working']:,} of {la['threads_launched']:,}")
    # no grid: a host call on NumPy, a library call (cuBLAS) on the GPU
    nogrid = dict(rec, launches=[dict(la, grid=None, block=None, threads_launched=0)])
    assert d.launch_rows(nogrid, "numpy")[0]["grid"] == "host (NumPy)"
    assert d.launch_rows(nogrid, "cupy")[0]["grid"] == "library call"
    assert d.launch_rows(nogrid)[0]["threads"] == "—"
    untimed = {"launches": [{k: v for k, v in la.items() if k != "time_s"}]}
    assert d.launch_rows(untimed)[0]["time"] == "—"  # a launch without its own time
    timed = {"launches": [{**la, "time_s": 2.5e-6}]}
    assert d.launch_rows(timed)[0]["time"] == "2.5 µs"


@pytest.mark.parametrize("scaled", ["blk.0.attn_k", "blk.1.ffn_down", "output"])
def test_first_divergence_agrees_with_tracekit_diff(scaled):
    a = make_trace(seed=7)
    b = make_trace(seed=7, scale={scaled: 1.02})
    first = d.first_divergence(d.compare_step(a, b, 0))
    assert first is not None and first.name == scaled
    report = diff_traces(a, b, rtol=d.RTOL, atol=d.ATOL)
    assert report.first_divergence.node == scaled


def test_nan_mismatch_diverges_even_within_tolerance():
    a = make_trace(seed=1)
    b = make_trace(seed=1, nan_from="blk.1.attn")
    deltas = d.compare_step(a, b, 1)
    assert d.first_divergence(deltas).name == "blk.1.attn"
    assert d.first_divergence(d.compare_step(a, b, 0)) is None


def test_unmatched_nodes():
    a, b = make_trace(n_layer=2), make_trace(n_layer=3)
    only_a, only_b = d.unmatched_nodes(a, b)
    assert only_a == [] and only_b[0] == "blk.2.attn_norm"


def test_formatting_uses_decimal_units():
    assert d.fmt_bytes(123_000) == "123 KB"
    assert d.fmt_rate(4.2e12, "B/s") == "4.2 TB/s"
    assert d.fmt_time(6.7e-6) == "6.7 µs"
    assert d.fmt_time(None) == "—"
    assert d.fmt_pct(0.5) == "50%"


def test_the_detail_panel_names_the_matmul_path(tmp_path):
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace
    from tracekit.viz.app import _detail

    ceil = {"copy_bandwidth_Bps": 1e10, "launch_overhead_s": 1e-6, "peak_flops": 1e11}
    t = load_trace(
        record_trace(None, tokens=[1, 2, 3], steps=1, backend="numpy", matmul="quant",
                     capture="timing", output=tmp_path / "q.json", progress=False, nvtx=False,
                     ceilings=ceil)
    )  # fmt: skip
    mm = next(n["id"] for n in t["nodes"] if n["op"] == "matmul")
    other = next(n["id"] for n in t["nodes"] if n["op"] == "rms_norm")
    rec = t["steps"][1]["nodes"][mm]
    assert d.node_path(rec) == "quant" and d.node_path(t["steps"][1]["nodes"][other]) is None
    assert [r["path"] for r in d.launch_rows(rec, "numpy")] == ["quant"]
    _, body = _detail(t, None, 1, mm)
    texts = [getattr(c, "children", None) for c in body if getattr(c, "id", None) == "detail-path"]
    assert texts == ["matmul path: quant"]
    _, body = _detail(t, None, 1, other)
    assert not any(getattr(c, "id", None) == "detail-path" for c in body)

"""``tracekit bench --backend numpy --quick``: runs without a GPU and writes well-formed JSON.

No assertion on any time or throughput (they depend on the machine); only on structure.
"""

from __future__ import annotations

import json

import pytest

from tracekit.bench import BENCH_FORMAT, Row, bench_main, format_table
from tracekit.quants import QUANTIZED_TYPES

ROW_KEYS = {
    "kernel",
    "shape",
    "time_us",
    "bytes",
    "GBps",
    "pct_copy",
    "target",
    "met",
    "ratio",
    "note",
}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code = bench_main(["--backend", "numpy", "--quick", "--json", str(out)])
    res = json.loads(out.read_text())
    # exit 1 exactly when a row missed its target (a loaded CI box may miss the 3x gguf one)
    assert code == (1 if any(r["met"] is False for r in res["rows"]) else 0)
    return res


def test_bench_numpy_quick_json(result):
    assert result["format"] == BENCH_FORMAT and result["backend"] == "numpy"
    assert (
        result["command"]
        == f"tracekit bench --backend numpy --quick --json {result['command'].split()[-1]}"
    )
    assert result["date"] and result["device"] and result["copy_bandwidth_Bps"] > 0
    for r in result["rows"]:
        assert set(r) == ROW_KEYS
        assert r["bytes"] >= 0 and (r["time_us"] is None or r["time_us"] > 0)


def test_bench_numpy_reports_every_dequant_type_vs_gguf(result):
    rows = {r["kernel"]: r for r in result["rows"]}
    for qt in QUANTIZED_TYPES:
        r = rows[f"ref_dequantize_f32[{qt.name}]"]
        assert r["target"] == ">= 3x gguf.quants.dequantize"
        assert r["ratio"] > 0 and r["met"] == (r["ratio"] >= 3.0)
        # bytes from the launch record: packed bytes read + f16 written
        n = int(r["shape"])
        assert r["bytes"] == qt.nbytes((n,)) + 4 * n  # packed bytes in, f32 out
        assert r["pct_copy"] == pytest.approx(100 * r["GBps"] * 1e9 / result["copy_bandwidth_Bps"])


def test_bench_only_filters(tmp_path, capsys):
    out = tmp_path / "b.json"
    bench_main(["--backend", "numpy", "--quick", "--only", "Q8_0", "--json", str(out)])
    kernels = [r["kernel"] for r in json.loads(out.read_text())["rows"]]
    assert kernels == ["copy (np.copyto)", "ref_dequantize_f32[Q8_0]"]
    printed = capsys.readouterr().out
    assert "ref_dequantize_f32[Q8_0]" in printed and "% copy" in printed


def test_format_table_marks_unmet_targets():
    rows = [
        Row("a", "4", 10.0, 40, 4.0, 50.0, ">= 90% of copy", False),
        Row("b", "4", None, 0, None, None, "", None, note="missing"),
    ]
    text = format_table(rows)
    assert "NO" in text.splitlines()[1] and "missing" in text.splitlines()[2]


def test_verdict_is_taken_on_the_ratio_as_shown():
    """``got 3.00x ... NO``: the display rounded 2.996, the test did not."""
    from tracekit.bench import _shown

    assert _shown(2.996) == 3.0 and _shown(2.994) == 2.99
    row = Row("k", "4", 1.0, 4, 4.0, 50.0, ">= 3x", _shown(2.996) >= 3.0, ratio=_shown(2.996))
    assert "got 3.00x" in format_table([row]) and row.met


def test_rows_are_handed_out_as_measured_and_misses_exit_1(tmp_path, capsys, monkeypatch):
    import tracekit.bench as bench

    seen = []
    res = bench.run_bench("numpy", "Q8_0", True, on_row=seen.append)
    assert [r.kernel for r in seen] == [r["kernel"] for r in res["rows"]]
    real = bench._cpu_dequant_row

    def missed(*a, **k):
        r = real(*a, **k)
        r.met = False
        return r

    monkeypatch.setattr(bench, "_cpu_dequant_row", missed)
    assert bench_main(["--backend", "numpy", "--quick", "--only", "Q8_0"]) == 1
    cap = capsys.readouterr()
    assert "targets missed: ref_dequantize_f32[Q8_0]" in cap.err
    lines = cap.out.splitlines()
    assert lines[1].startswith("kernel") and "ref_dequantize_f32[Q8_0]" in lines[3]

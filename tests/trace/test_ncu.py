"""ncu-import: Nsight Compute's raw CSV (with --nvtx) joined onto nodes by NVTX range."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.trace.test_format import make_trace
from tracekit.trace.format import dumps_trace, validate_trace
from tracekit.trace.ncu import NcuError, import_ncu, parse_nvtx_stack, read_ncu_csv, summary

DATA = Path(__file__).resolve().parents[1] / "data"
RAW = DATA / "ncu_raw_nvtx.csv"


def _trace_with_two_launch_ffn_up() -> dict:
    t = make_trace(n_layer=2, n_decode=2)
    i = next(n["id"] for n in t["nodes"] if n["name"] == "blk.0.ffn_up")
    for s in t["steps"]:
        la = s["nodes"][i]["launches"][0]
        s["nodes"][i]["launches"] = [dict(la, kernel="convert_f32_f16"), dict(la, kernel="gemm")]
    return t


def test_parse_nvtx_stack_raw_and_short_forms() -> None:
    cell = '48213  "tracekit:decode 3:none:none:none:none:none:none"  "tracekit:blk.7:none:none:none:none:none:none"  "tracekit:blk.7.ffn_up:UINT64:4:ARGB:ffff7f0e:none:none" '
    assert parse_nvtx_stack(cell) == [
        ("tracekit", "decode 3"),
        ("tracekit", "blk.7"),
        ("tracekit", "blk.7.ffn_up"),
    ]
    assert parse_nvtx_stack("tracekit@prefill/tracekit@blk.0/tracekit@blk.0.attn_q") == [
        ("tracekit", "prefill"), ("tracekit", "blk.0"), ("tracekit", "blk.0.attn_q"),
    ]  # fmt: skip
    assert parse_nvtx_stack("") == []


def test_read_raw_csv_units_and_separators() -> None:
    ks = read_ncu_csv(RAW)
    assert len(ks) == 9
    k = ks[2]
    assert k["kernel"].startswith("cutlass_80_tensorop")
    assert k["dram__bytes_read.sum"] == 8832.0 and k["dram__bytes_write.sum"] == 1280.0
    assert k["gpu__time_duration.sum"] == pytest.approx(4704e-9)
    assert ks[8]["stack"] == []


def test_import_joins_by_range_and_divides_passes() -> None:
    t = import_ncu(_trace_with_two_launch_ffn_up(), RAW)
    validate_trace(__import__("json").loads(dumps_trace(t)))  # still a valid v1 trace
    ids = {n["name"]: n["id"] for n in t["nodes"]}
    pre = t["steps"][0]["nodes"][ids["blk.0.ffn_up"]]["ncu"]
    assert pre["passes"] == 1 and len(pre["kernels"]) == 2
    assert pre["dram_bytes_read"] == 1280 + 8832 and pre["dram_bytes_write"] == 640 + 1280
    assert pre["measured_bytes"] == 1280 + 8832 + 640 + 1280
    assert pre["gpu_time_s"] == pytest.approx((2112 + 4704) * 1e-9)
    rec = t["steps"][0]["nodes"][ids["blk.0.ffn_up"]]
    assert pre["counted_bytes"] == sum(
        la["bytes_read"] + la["bytes_written"] for la in rec["launches"]
    )
    # decode 1 ran twice (timing pass + full pass): values are per pass
    dec = t["steps"][1]["nodes"][ids["blk.0.ffn_up"]]["ncu"]
    assert dec["passes"] == 2 and dec["dram_bytes_read"] == 8704 and dec["dram_bytes_write"] == 384
    assert dec["gpu_time_s"] == pytest.approx(6192e-9)
    add = t["steps"][0]["nodes"][ids["blk.0.attn_residual"]]["ncu"]
    assert add["dram_bytes_read"] == 3968 and add["kernels"] == ["add_f32"]
    assert "ncu" not in t["steps"][2]["nodes"][ids["blk.0.ffn_up"]]
    m = t["ncu"]
    assert (m["kernels_in_csv"], m["kernels_matched"], m["nodes_matched"]) == (9, 7, 3)
    assert m["unmatched_ranges"] == ["(no NVTX range)", "tracekit@prefill/tracekit@blk.0"]
    text = summary(t)
    assert "blk.0.ffn_up" in text and "10,112" not in text and "12,032" in text


def test_the_tracers_stamp_kernels_are_not_a_nodes_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # a traced run queues globaltimer_stamp kernels inside node ranges (tracekit/runner/stamps.py)
    from tracekit.trace import ncu

    ks = read_ncu_csv(RAW)
    gemm = ks[2]
    stamp = dict(gemm, kernel="globaltimer_stamp", **{"gpu__time_duration.sum": 1e-6})
    monkeypatch.setattr(ncu, "read_ncu_csv", lambda path: [*ks, stamp, stamp])
    t = import_ncu(_trace_with_two_launch_ffn_up(), RAW)
    ids = {n["name"]: n["id"] for n in t["nodes"]}
    pre = t["steps"][0]["nodes"][ids["blk.0.ffn_up"]]["ncu"]
    assert pre["passes"] == 1 and "globaltimer_stamp" not in pre["kernels"]
    assert pre["gpu_time_s"] == pytest.approx((2112 + 4704) * 1e-9)


def test_details_page_long_form(tmp_path: Path) -> None:
    rows = [
        r
        for r in csv.reader(
            io.StringIO(RAW.read_text().split("==PROF== Disconnected from process 48213\n")[1])
        )
    ]
    head, units, body = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    ident = ["ID", "Process ID", head[4], "Kernel Name"]
    w.writerow([*ident, "Section Name", "Metric Name", "Metric Unit", "Metric Value"])
    for r in body:
        for m in ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"):
            w.writerow([*(r[col[h]] for h in ident), "Command line profiler metrics", m,
                        units[col[m]], r[col[m]]])  # fmt: skip
    p = tmp_path / "details.csv"
    p.write_text(out.getvalue())
    assert read_ncu_csv(p) == read_ncu_csv(RAW)


def test_errors_are_clear(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("hello\nworld\n")
    with pytest.raises(NcuError, match="no Nsight Compute CSV header"):
        read_ncu_csv(p)
    p.write_text('"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","k","1"\n')
    with pytest.raises(NcuError, match="no NVTX column: profile with `ncu --nvtx`"):
        read_ncu_csv(p)
    with pytest.raises(NcuError, match="cannot read"):
        read_ncu_csv(tmp_path / "missing.csv")
    bad = RAW.read_text().replace('"3,968"', '"lots"')
    p.write_text(bad)
    with pytest.raises(NcuError, match="'lots' is not a number"):
        read_ncu_csv(p)
    other = make_trace()
    for s in other["steps"]:
        s["name"] = s["name"]  # same steps, but rename every node so nothing matches
    for n in other["nodes"]:
        n["name"] = "x" + n["name"]
    with pytest.raises(NcuError, match="none of 9 profiled kernels"):
        import_ncu(other, RAW)


@pytest.mark.gpu
@pytest.mark.slow
def test_ncu_nvtx_filter_profiles_exactly_one_nodes_kernels(tmp_path: Path) -> None:
    """On a GPU host with Nsight Compute: scripts/ncu_nvtx_check.sh passes for two nodes."""
    import shutil
    import subprocess
    import sys

    if shutil.which("ncu") is None:
        pytest.skip("ncu (Nsight Compute CLI) is not on PATH")
    root = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PYTHON": sys.executable, "STEPS": "1", "OUT": str(tmp_path)}
    r = subprocess.run(
        ["bash", str(root / "scripts" / "ncu_nvtx_check.sh"), "blk.0.ffn_up", "blk.0.attn_residual_norm"],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    print(r.stdout, r.stderr)
    assert r.returncode == 0
    assert r.stdout.count("OK: exactly this node's kernels were profiled") == 2

"""``tracekit diff`` across matmul paths: where a quant-path and an f16-path trace differ."""

from __future__ import annotations

from pathlib import Path

from tracekit.runner.record import record_trace
from tracekit.trace.diff import diff_traces
from tracekit.trace.format import load_trace

CEIL = {"copy_bandwidth_Bps": 1e10, "launch_overhead_s": 1e-6, "peak_flops": 1e11}


def _trace(tmp_path: Path, mode: str) -> dict:
    p = record_trace(None, prompt="The kernel reads", steps=3, backend="numpy", progress=False,
                     nvtx=False, ceilings=CEIL, output=tmp_path / f"{mode}.json", matmul=mode)  # fmt: skip
    return load_trace(p)


def test_diff_of_the_quant_and_f16_paths_starts_at_the_first_matmul(tmp_path: Path) -> None:
    quant, f16 = _trace(tmp_path, "quant"), _trace(tmp_path, "f16")
    # f16 rounding moves the statistics by ~1e-4 relative: below diff's default 1e-3
    tight = {"rtol": 1e-5, "atol": 1e-7}
    assert diff_traces(quant, _trace(tmp_path, "quant"), **tight).first_divergence is None
    r = diff_traces(quant, f16, **tight)
    ops = {n["name"]: n["op"] for n in quant["nodes"]}
    first = r.first_divergence
    assert first is not None and ops[first.node] == "matmul", first
    # everything before it agrees: the f16 rounding of the operands is the only difference
    order = [n["name"] for n in quant["nodes"]]
    assert all(ops[n] != "matmul" for n in order[: order.index(first.node)])
    assert r.first_token_mismatch is None  # the same tokens on both paths

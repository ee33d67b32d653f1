"""scripts/trace_op_times.py on a real recorded trace: where a step's time goes, by op and kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import load_script
from tracekit.model.demo import demo_model_path
from tracekit.runner.execute import load_model
from tracekit.runner.record import record_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("t") / "t.json"
    record_trace(
        load_model(demo_model_path()), tokens=[3, 17, 42, 7], steps=3, backend="numpy",
        capture="timing", output=out, progress=False,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("kind, tokens", [("prefill", 4), ("decode", 1)])
def test_breakdown_of_each_step_kind(
    trace: Path, kind: str, tokens: int, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = load_script("trace_op_times")
    assert mod.main([str(trace), "--kind", kind, "--kernels", "3"]) == 0
    out = capsys.readouterr().out
    steps = 1 if kind == "prefill" else 2  # decode: the steps after the first
    assert f"{steps} {kind} step(s) of {tokens} token(s)" in out
    # op rows: two spaces, the op, its time and share (the matmul and kernel rows sit deeper)
    ops = [ln for ln in out.splitlines() if ln[:2] == "  " and ln[2] != " " and ln[-1] == "%"]
    shares = [float(ln.split()[-1].rstrip("%")) for ln in ops]
    assert abs(sum(shares) - 100) < 0.6  # the op rows split the node time
    kernels = out.split("kernels with the most time:\n")[1].splitlines()
    assert len(kernels) == 3 and all("us/step" in k for k in kernels)
